"""The monitoring role's facts step and templates through a real ansible-playbook on this machine (local connection, files
in the test's folder): the plans become target groups, the rules and prometheus.yml pass the same promtool checks the role's
template tasks run, Prometheus's own `{{ $labels.x }}` templates reach the rule file as they are, a second run changes
nothing, and a host the monitoring host cannot reach fails the run naming the fix."""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest
import yaml

from llmfleet_testing import run_ansible, task_result


@pytest.fixture(autouse=True)
def promtool_installed():
    """Not a skip: `make integration` installs Debian's prometheus (it has promtool)."""
    assert shutil.which("promtool"), "promtool is not installed: run `make integration` (tests/host-packages.sh prometheus)"


def plan(host, instances, edge=None):
    return {"host": host, "errors": [], "hardware": {"accelerators": []}, "deployments": [
        {"name": "tiny", "engine_version": "0.32.0", "served_model_name": "tiny", "instances": [
            {"name": name, "port": port, "served_model_name": "tiny", "bind_address": "127.0.0.1", "max_num_seqs": 8,
             "edge": {"address": edge, "port": port} if edge else None, "model_dir": "/models/tiny"}
            for name, port in instances]}]}


def render(tmp_path, *extra, plans=None, mon_address="10.0.0.10"):
    (tmp_path / "plans").mkdir(exist_ok=True)
    for host, body in (plans or {"e1": plan("e1", [("tiny-0", 8002)], "10.0.0.11"),
                                 "mon": plan("mon", [("tiny-0", 8002)])}).items():
        (tmp_path / "plans" / f"{host}.json").write_text(json.dumps(body))
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "ansible_become": False}
    mon = dict(local, **({"llmfleet_private_address": mon_address} if mon_address else {}))
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"children": {
        "llm_serve": {"hosts": {"e1": dict(local, llmfleet_private_address="10.0.0.11"), "mon": mon}},
        "llm_gateway": {"hosts": {"mon": mon}}}}}))
    etc = tmp_path / "etc"
    (etc / "llmfleet").mkdir(parents=True, exist_ok=True)
    return run_ansible("ansible-playbook", "tests/integration/playbooks/monitoring_render.yml", "-i", str(inventory), *extra,
                       extra_vars={"monitoring_plan_dir": str(tmp_path / "plans"), "__monitoring_root": str(etc),
                                   "__monitoring_dir": str(etc / "llmfleet"), "monitoring_alert_for": {"down": "30s"}},
                       with_inventory=False)


def test_the_role_renders_checked_files_from_the_plans_and_a_second_run_changes_nothing(tmp_path):
    first = render(tmp_path)
    assert first["stats"]["mon"]["failures"] == 0, json.dumps(first)[-3000:]
    etc = tmp_path / "etc"
    targets = json.loads((etc / "targets.json").read_text())
    assert [(g["targets"], g["labels"]["instance"]) for g in targets["files"]["vllm"]] == [
        (["10.0.0.11:8002"], "e1/tiny-0"), (["127.0.0.1:8002"], "mon/tiny-0")]
    assert targets["edge_metrics_allow"] == {"e1": ["10.0.0.10"]}
    rules = yaml.safe_load((etc / "llmfleet" / "rules.yml").read_text())
    down = [r for g in rules["groups"] for r in g["rules"] if r["alert"] == "VllmInstanceDown"]
    assert down[0]["for"] == "30s"
    assert down[0]["annotations"]["summary"] == "vLLM instance {{ $labels.instance }} (tiny) does not answer /metrics"
    config = yaml.safe_load((etc / "prometheus.yml").read_text())
    assert config["rule_files"] == [str(etc / "llmfleet" / "rules.yml")]
    assert config["scrape_configs"][1]["file_sd_configs"][0]["files"] == [str(etc / "llmfleet" / "targets" / "vllm.json")]
    assert task_result(first, "Write the rules", "mon")["changed"] is True
    second = render(tmp_path)
    for name in ("Write the rules", "Write prometheus.yml"):
        assert task_result(second, name, "mon")["changed"] is False


def test_check_mode_on_a_fresh_folder_writes_nothing(tmp_path):
    result = render(tmp_path, "--check")
    assert result["stats"]["mon"]["failures"] == 0, json.dumps(result)[-3000:]
    assert not (tmp_path / "etc" / "prometheus.yml").exists()


def test_an_unreachable_instance_fails_before_any_file_naming_the_fix(tmp_path):
    # the monitoring host has no private address: e1's edge has nothing to allow
    result = render(tmp_path, mon_address=None)
    failed = task_result(result, "Stop on what Prometheus could not scrape", "mon")
    assert failed["failed"] is True
    assert "mon (llm_monitor) has no llmfleet_private_address" in failed["msg"]
    assert not (tmp_path / "etc" / "llmfleet" / "rules.yml").exists()
    assert os.listdir(tmp_path / "etc" / "llmfleet") == []


def test_the_node_exporter_entry_point_reads_the_accelerators_its_hosts_plan_lists(tmp_path):
    """The reader is worked out from each host's own plan (an NVIDIA host, a Hygon host with its hyhal folder, a CPU host);
    nothing else of the entry point runs (--tags: only its `always` steps)."""
    (tmp_path / "plans").mkdir()
    for host, vendor in (("gpu1", "nvidia"), ("dcu1", "hygon"), ("cpu1", None)):
        body = plan(host, [("tiny-0", 8002)])
        body["hardware"] = {"accelerators": [{"vendor": vendor, "index": 0}] if vendor else []}
        (tmp_path / "plans" / f"{host}.json").write_text(json.dumps(body))
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "ansible_become": False}
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"children": {"llm_serve": {"hosts": {
        "gpu1": local, "dcu1": dict(local, llmfleet_hyhal_dir="/data/hyhal"), "cpu1": local}}}}}))
    out = tmp_path / "out"
    out.mkdir()
    result = run_ansible("ansible-playbook", "tests/integration/playbooks/monitoring_accelerator_reader.yml", "-i", str(inventory),
                         "--tags", "none_of_the_roles", with_inventory=False,
                         extra_vars={"monitoring_plan_dir": str(tmp_path / "plans"), "reader_out": str(out)})
    assert all(s["failures"] == 0 for s in result["stats"].values()), json.dumps(result)[-3000:]
    got = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    assert got == {"gpu1": {"vendor": "nvidia", "tool": "nvidia-smi", "dirs": ["/usr/bin", "/usr/local/nvidia/bin"]},
                   "dcu1": {"vendor": "hygon", "tool": "hy-smi", "dirs": ["/data/hyhal/bin"]},
                   "cpu1": {}}, got
