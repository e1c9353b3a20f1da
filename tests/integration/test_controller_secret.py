"""host_common's controller_secret on this machine: a secret is made once in <inventory>/.secrets/ (0600), and a
secret still at its old place, <inventory>/secrets/, stops the run with the move to make (a new one would change
every engine's key). The vllm role's use of it: the engines' key is made on a fleet with no instance yet, and a
missing key file on a fleet whose instances run with a key stops the run (check mode too), names where the key is,
how to restore it and how to rotate, and writes nothing."""

from __future__ import annotations

import json
import os
import stat
import sys

import pytest

from llmfleet_testing import run_ansible, task_result


def run(tmp_path, secret_file):
    playbook = tmp_path / "secret.yml"
    playbook.write_text(json.dumps([{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [
        {"ansible.builtin.include_role": {"name": "llmfleet.serving.host_common", "tasks_from": "controller_secret.yml"},
         "vars": {"host_common_secret_file": str(secret_file)}}]}]))
    return run_ansible("ansible-playbook", str(playbook))


def test_a_secret_is_made_once_in_the_hidden_folder(tmp_path):
    secret = tmp_path / "inv" / ".secrets" / "vllm_api_key"
    first = run(tmp_path, secret)
    assert first["stats"]["localhost"]["failures"] == 0, first
    value = secret.read_text()
    assert len(value.strip()) >= 32 and stat.S_IMODE(os.stat(secret).st_mode) == 0o600
    run(tmp_path, secret)
    assert secret.read_text() == value


def test_a_secret_at_the_old_place_stops_the_run_with_the_move(tmp_path):
    old = tmp_path / "inv" / "secrets" / "vllm_api_key"
    old.parent.mkdir(parents=True)
    old.write_text("the-old-key\n")
    result = run(tmp_path, tmp_path / "inv" / ".secrets" / "vllm_api_key")
    assert result["stats"]["localhost"]["failures"] == 1
    assert f"{old} is where this secret was kept before" in json.dumps(result)
    assert "mv secrets .secrets" in json.dumps(result)
    assert not (tmp_path / "inv" / ".secrets").exists()


# The vllm role's key step (entry point `instances`, which serve.yml, upgrade.yml and bench.yml run first) on this machine
# as a one-host fleet: localhost in llm_serve, its environment and state folders in tmp_path, an empty plan; with
# `elsewhere`, a second serving host that the run leaves out (--limit).
def run_instances(tmp_path, *args, elsewhere=False):
    inv = tmp_path / "inv"
    inv.mkdir(exist_ok=True)
    hosts = {"localhost": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}
    if elsewhere:
        hosts["engine-elsewhere"] = {"ansible_host": "192.0.2.1"}
    (inv / "hosts.json").write_text(json.dumps({"llm_serve": {"hosts": hosts}}))
    for sub in ("env", "state"):
        (tmp_path / sub).mkdir(exist_ok=True)
    playbook = tmp_path / "instances.yml"
    playbook.write_text(json.dumps([{"hosts": "llm_serve", "gather_facts": False, "tasks": [
        {"ansible.builtin.include_role": {"name": "llmfleet.serving.vllm", "tasks_from": "instances"},
         "vars": {"llmfleet_plan": {"host": "localhost", "errors": [], "warnings": [], "deployments": []},
                  "vllm_api_key_file": str(inv / ".secrets" / "vllm_api_key"),
                  "vllm_env_dir": str(tmp_path / "env"), "vllm_state_dir": str(tmp_path / "state")}}]}]))
    return run_ansible("ansible-playbook", "-i", str(inv / "hosts.json"), "--limit", "localhost", str(playbook), *args,
                       with_inventory=False)


def failure_text(result):
    return " ".join(str(t["hosts"][h].get("msg", "")) for p in result["plays"] for t in p["tasks"] for h in t["hosts"]
                    if t["hosts"][h].get("failed"))


def test_a_fresh_fleet_makes_the_engines_key_on_its_first_run(tmp_path):
    result = run_instances(tmp_path)
    key = tmp_path / "inv" / ".secrets" / "vllm_api_key"
    assert result["stats"]["localhost"]["failures"] == 0, failure_text(result)
    assert len(key.read_text().strip()) == 48 and stat.S_IMODE(os.stat(key).st_mode) == 0o600


RUNNING_KEY = "the-key-the-engine-and-gateway-use-0123"


def instance_running_with(tmp_path, key=RUNNING_KEY):
    """An instance's environment file (this role's systemd runtime) that holds `key`, as the engine runs with it."""
    env = tmp_path / "env" / "tiny-a-0.env"
    env.parent.mkdir(parents=True, exist_ok=True)
    env.write_text(f'HF_HUB_OFFLINE="1"\nVLLM_API_KEY="{key}"\n')
    return env


def key_file(tmp_path, key):
    """The controller's key file, holding `key`."""
    path = tmp_path / "inv" / ".secrets" / "vllm_api_key"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(key + "\n")
    return path


@pytest.mark.parametrize("check", [False, True])
def test_a_missing_key_on_a_fleet_that_runs_with_one_stops_before_any_change(tmp_path, check):
    # the instance's environment file holds the key the engine and the gateway use: a new key would be a 401 for all
    env = instance_running_with(tmp_path)
    result = run_instances(tmp_path, *(["--check"] if check else []))
    text = failure_text(result)
    assert result["stats"]["localhost"]["failures"] == 1, result["stats"]
    key = tmp_path / "inv" / ".secrets" / "vllm_api_key"
    assert f"{key} is missing, and nothing was changed" in text
    assert f"localhost: {env}" in text                                  # where the key is
    assert f"sudo grep '^VLLM_API_KEY=' {env}" in text                  # how to read it back
    assert "Restoring the engines' key" in text and "playbooks/rotate_key.yml" in text   # the restore and rotate steps
    assert "the-key-the-engine" not in json.dumps(result)               # never the key itself
    assert not (tmp_path / "inv" / ".secrets").exists()                 # nothing written
    assert env.read_text().endswith('VLLM_API_KEY="the-key-the-engine-and-gateway-use-0123"\n')


@pytest.mark.parametrize("check", [False, True])
def test_a_key_file_that_is_not_the_one_the_engines_run_with_stops_before_any_change(tmp_path, check):
    # another fleet's backup, or an older key, restored: rolling the engines onto it would be a 401 for every request
    key = key_file(tmp_path, "restored-by-mistake-0123456789abcdef")
    env = instance_running_with(tmp_path)
    result = run_instances(tmp_path, *(["--check"] if check else []))
    text = failure_text(result)
    assert result["stats"]["localhost"]["failures"] == 1, result["stats"]
    assert f"{key} does not hold the key the engines on localhost run with, and nothing was changed: {env} (key " in text
    assert f"sudo grep '^VLLM_API_KEY=' {env}" in text and "playbooks/rotate_key.yml" in text
    assert "the-key-the-engine" not in json.dumps(result) and "restored-by-mistake" not in json.dumps(result)
    assert key.read_text() == "restored-by-mistake-0123456789abcdef\n"


@pytest.mark.parametrize("beside", [(), (".next",)])
def test_engines_on_the_files_key_or_during_a_rotation_go_on(tmp_path, beside):
    key = key_file(tmp_path, RUNNING_KEY)
    for suffix in beside:     # a rotation under way: the engines may run with its next key
        key.with_name(key.name + suffix).write_text("the-next-key-of-a-rotation-0123456789\n")
    instance_running_with(tmp_path, "the-next-key-of-a-rotation-0123456789" if beside else RUNNING_KEY)
    result = run_instances(tmp_path)
    assert result["stats"]["localhost"]["failures"] == 0, failure_text(result)


def test_a_missing_key_with_serving_hosts_outside_the_run_stops_and_names_them(tmp_path):
    # --limit leaves engine-elsewhere out: it may run with the key, so no new one is made
    result = run_instances(tmp_path, elsewhere=True)
    text = failure_text(result)
    assert result["stats"]["localhost"]["failures"] == 1, result["stats"]
    assert "does not reach engine-elsewhere (--limit)" in text
    assert not (tmp_path / "inv" / ".secrets").exists()


@pytest.mark.parametrize("beside, phase", [((), "none"), ((".next",), "learn"), ((".previous",), "forget"),
                                           ((".next", ".previous"), "learn")])
def test_the_files_beside_the_key_say_where_a_rotation_stands(tmp_path, beside, phase):
    secrets = tmp_path / "inv" / ".secrets"
    secrets.mkdir(parents=True)
    (secrets / "vllm_api_key").write_text("current-key-0123456789abcdef\n")
    for suffix in beside:
        (secrets / ("vllm_api_key" + suffix)).write_text(f"key{suffix.replace('.', '-')}-0123456789abcdef\n")
    result = run_instances(tmp_path)
    assert result["stats"]["localhost"]["failures"] == 0, failure_text(result)
    facts = task_result(result, "Where a key rotation stands (vllm_key_rotation_phase - none, learn or forget)")
    assert facts["ansible_facts"]["vllm_key_rotation_phase"] == phase


def run_step(tmp_path, step, *args):
    """The vllm role's key_rotation entry point, one step, on the one-host fleet of run_instances (no instance: the
    rolls between the steps have nothing to change, so this shows the controller's files, the rotation's state)."""
    playbook = tmp_path / f"{step}.yml"
    playbook.write_text(json.dumps([{"hosts": "llm_serve", "gather_facts": False, "tasks": [
        {"ansible.builtin.include_role": {"name": "llmfleet.serving.vllm", "tasks_from": "key_rotation"},
         "vars": {"vllm_key_rotation_step": step,
                  "llmfleet_plan": {"host": "localhost", "errors": [], "warnings": [], "deployments": []},
                  "vllm_api_key_file": str(tmp_path / "inv" / ".secrets" / "vllm_api_key"),
                  "vllm_env_dir": str(tmp_path / "env"), "vllm_state_dir": str(tmp_path / "state")}}]}]))
    return run_ansible("ansible-playbook", "-i", str(tmp_path / "inv" / "hosts.json"), str(playbook), *args, with_inventory=False)


def test_the_rotation_steps_move_the_key_files_and_a_run_cut_short_resumes(tmp_path):
    assert run_instances(tmp_path)["stats"]["localhost"]["failures"] == 0          # the fleet's first key
    key = tmp_path / "inv" / ".secrets" / "vllm_api_key"
    nxt, prev = key.with_name("vllm_api_key.next"), key.with_name("vllm_api_key.previous")
    old = key.read_text()
    checked = run_step(tmp_path, "begin", "--check")
    assert checked["stats"]["localhost"]["failures"] == 0 and not nxt.exists()    # check mode makes nothing
    begun = run_step(tmp_path, "begin")
    assert begun["stats"]["localhost"]["failures"] == 0, failure_text(begun)
    made = nxt.read_text()
    assert made != old and len(made.strip()) == 48 and stat.S_IMODE(os.stat(nxt).st_mode) == 0o600
    assert run_step(tmp_path, "begin")["stats"]["localhost"]["failures"] == 0 and nxt.read_text() == made   # made once
    assert run_step(tmp_path, "switch")["stats"]["localhost"]["failures"] == 0
    assert key.read_text() == made and prev.read_text() == old and not nxt.exists()
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600 and stat.S_IMODE(os.stat(prev).st_mode) == 0o600
    # cut short after the switch: begin again finds the forget phase and makes no new key
    again = run_step(tmp_path, "begin")
    assert again["stats"]["localhost"]["failures"] == 0 and not nxt.exists()
    assert task_result(again, "key_rotation | Where the rotation stands")["ansible_facts"]["vllm_key_rotation_phase"] == "forget"
    assert run_step(tmp_path, "switch")["stats"]["localhost"]["failures"] == 0 and key.read_text() == made   # nothing to switch
    assert run_step(tmp_path, "finish")["stats"]["localhost"]["failures"] == 0
    assert not prev.exists() and not nxt.exists() and key.read_text() == made


def test_a_rotation_is_refused_when_a_serving_host_is_left_out(tmp_path):
    run_instances(tmp_path)
    key = tmp_path / "inv" / ".secrets" / "vllm_api_key"
    run_instances(tmp_path, elsewhere=True)                                          # the inventory now has a second host
    result = run_step(tmp_path, "begin", "--limit", "localhost")
    assert result["stats"]["localhost"]["failures"] == 1
    assert "engine-elsewhere is not in this run" in failure_text(result)
    assert key.exists() and not key.with_name("vllm_api_key.next").exists()
