"""What an earlier run left out of the gateway's rotation, reconciled by the next serve run - through a real ansible-playbook
run of the vllm role's `reconcile` entry point on this machine (the gateway role's routes and rotation_prune entry
points, the gateway_rotation module on a gateway state and configuration in a temporary folder): each instance out is
named with since when, by which run and on which gateway; one no plan has any more is forgotten by the state (the
configuration is left for the next render); one whose host this run serves is re-admitted once its gate passes; one on a
host outside the run (--limit) or with llmfleet_serve false is reported with why it stays out."""

from __future__ import annotations

import json
import os
import sys

from llmfleet_testing import run_ansible, task_result

OUT = {"localhost/tiny-a-0": "2026-12-03T10:00:00Z", "engine2/tiny-a-0": "2026-12-03T10:05:00Z",
       "engine4/tiny-a-0": "2026-12-03T10:06:00Z", "localhost/gone-0": "2026-12-01T09:00:00Z"}
BY = "site.yml by alice on ctl-1, pid 4242"


def plan(host):
    return {"host": host, "errors": [], "deployments": [{"name": "tiny-a", "instances": [
        {"name": "tiny-a-0", "served_model_name": "tiny-a", "port": 8002, "bind_address": "127.0.0.1", "edge": None}]}]}


def test_the_next_serve_run_names_forgets_readmits_and_reports_what_an_earlier_run_left_out(tmp_path):
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "ansible_become": False}
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"children": {
        "llm_gateway": {"hosts": {"localhost": local}},
        "llm_serve": {"hosts": {"localhost": dict(local, llmfleet_plan=plan("localhost")),
                                "engine2": dict(local, llmfleet_plan=plan("engine2")),
                                "engine4": dict(local, llmfleet_plan=plan("engine4"), llmfleet_serve=False)}}}}}))
    root = tmp_path / "nginx"
    (root / "llmfleet").mkdir(parents=True)
    conf = "".join(f"    server 127.0.0.1:{8002 + i} down;  # {name.replace('/', ' ')}\n" for i, name in enumerate(sorted(OUT)))
    (root / "llmfleet" / "gateway.conf").write_text(f"upstream llm_tiny_a {{\n{conf}}}\n")
    state = tmp_path / "state" / "rotation.json"
    state.parent.mkdir()
    state.write_text(json.dumps({"out": sorted(OUT), "since": OUT, "by": {"localhost/tiny-a-0": BY}}))
    playbook = tmp_path / "reconcile.yml"
    playbook.write_text(json.dumps([{"hosts": "llm_serve", "gather_facts": False, "tasks": [
        {"name": "Reconcile", "ansible.builtin.include_role": {"name": "llmfleet.serving.vllm", "tasks_from": "reconcile"}}]}]))
    result = run_ansible("ansible-playbook", str(playbook), "-i", str(inventory), "--limit", "localhost,engine4",
                         extra_vars={"__gateway_root": str(root), "__gateway_rotation_state": str(state),
                                     "__gateway_lock_file": str(tmp_path / "state" / "run-lock.json"),
                                     "vllm_plan_dir": str(tmp_path / "plans")},
                         with_inventory=False)
    assert result["stats"]["localhost"]["failures"] == 0, json.dumps(result)[-3000:]
    lines = task_result(result, "Say what was left out of the rotation, since when, and what this run does with it")["msg"]
    said = dict(line.split(": ", 1) for line in lines)
    assert said["localhost/tiny-a-0"] == (f"out of the rotation of localhost since 2026-12-03T10:00:00Z (taken out by {BY}): "
                                          "its host is in this run: it goes back in once its health gate passes")
    assert "engine2 is not in this run (--limit)" in said["engine2/tiny-a-0"]
    assert "since 2026-12-03T10:05:00Z" in said["engine2/tiny-a-0"]
    assert "llmfleet_serve is false on engine4" in said["engine4/tiny-a-0"]
    assert "no plan has it any more" in said["localhost/gone-0"]
    # forgotten by the state, every other entry (and its time) kept; the configuration waits for the next render
    after = json.loads(state.read_text())
    assert after["out"] == ["engine2/tiny-a-0", "engine4/tiny-a-0", "localhost/tiny-a-0"]
    assert after["since"] == {k: v for k, v in OUT.items() if k != "localhost/gone-0"} and after["by"] == {"localhost/tiny-a-0": BY}
    assert (root / "llmfleet" / "gateway.conf").read_text().count(" down;") == 4
    assert not os.path.exists(tmp_path / "plans"), "the plans came from this run's facts"
