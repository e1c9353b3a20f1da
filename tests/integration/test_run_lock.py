"""The fleet's run lock through real ansible-playbook runs on this machine (playbooks/lock.yml, the gateway role's `lock`
entry point, the gateway_lock action and module; this host is the llm_gateway host): a second run stops before any
change and names the first (its pid, user, controller, age) and how to clear a stale lock; the first run keeps it
across its playbooks and releases it at its end; a lock whose run ended on this controller is taken over and said;
another controller's lock is broken only with -e llmfleet_break_lock=true; a check run only warns."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

from llmfleet_testing import ROOT

LOCK_PLAYBOOK = os.path.join(ROOT, "playbooks", "lock.yml")


def inventory(tmp_path):
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps({"all": {"children": {
        "llm_gateway": {"hosts": {"localhost": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                                                "ansible_become": False}}},
        "llm_serve": {"hosts": {}}}}}))
    return str(path)


def command(tmp_path, playbook, *extra):
    lock = tmp_path / "state" / "run-lock.json"
    return [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), playbook, "-i", inventory(tmp_path),
            "-e", json.dumps({"__gateway_lock_file": str(lock)}), *extra]


def environment():
    return dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
                ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
                ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"))


def run(tmp_path, playbook=LOCK_PLAYBOOK, *extra):
    proc = subprocess.run(command(tmp_path, playbook, *extra), cwd=ROOT, env=environment(), capture_output=True, text=True,
                          check=False)
    try:
        return proc.returncode, json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"no JSON (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}") from None


def lock_results(result):
    """The lock task's per-gateway results (the loop's items)."""
    for play in result["plays"]:
        for task in play["tasks"]:
            if "lock | The fleet's run lock on every gateway" in task["task"]["name"]:
                return task["hosts"]["localhost"].get("results") or [task["hosts"]["localhost"]]
    raise AssertionError("no lock task ran")


def holding_playbook(tmp_path, release_file):
    """A run that takes the lock, works until `release_file` appears, then releases it (what serve.yml does around its roll)."""
    path = tmp_path / "hold.yml"
    path.write_text(json.dumps([
        {"name": "take", "ansible.builtin.import_playbook": LOCK_PLAYBOOK},
        {"name": "take again, as site.yml's serve.yml does", "ansible.builtin.import_playbook": LOCK_PLAYBOOK},
        {"hosts": "llm_gateway", "gather_facts": False, "tasks": [
            {"name": "Work", "ansible.builtin.wait_for": {"path": str(release_file), "timeout": 120}}]},
        {"name": "release", "ansible.builtin.import_playbook": LOCK_PLAYBOOK, "vars": {"gateway_lock_state": "absent"}}]))
    return str(path)


def wait_for_lock(path, timeout=60):
    for _attempt in range(timeout * 10):
        if path.exists() and path.read_text().strip():
            return json.loads(path.read_text())
        time.sleep(0.1)
    raise AssertionError(f"{path} never appeared")


def test_a_second_run_stops_before_any_change_naming_the_first_which_keeps_and_releases_it(tmp_path):
    lock, release = tmp_path / "state" / "run-lock.json", tmp_path / "release"
    first = subprocess.Popen(command(tmp_path, holding_playbook(tmp_path, release)), cwd=ROOT, env=environment(),  # pylint: disable=consider-using-with
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        held = wait_for_lock(lock)
        assert held["pid"] == first.pid, "the record names the ansible-playbook process of the run"
        assert held["controller"] == socket.gethostname() and held["playbook"].endswith("hold.yml")
        rc, second = run(tmp_path)
        [refused] = lock_results(second)
        assert rc != 0 and refused["failed"] is True and refused["decision"] == "refuse"
        message = refused["msg"]
        for part in (f"pid {first.pid}", f"on {socket.gethostname()}", "hold.yml", "ago)", "stopped before any change",
                     "-e llmfleet_break_lock=true", f"remove {lock}", "still runs on this controller"):
            assert part in message, (part, message)
        assert json.loads(lock.read_text()) == held, "the refused run changed nothing"
        check_rc, check = run(tmp_path, LOCK_PLAYBOOK, "--check")
        [warned] = lock_results(check)
        assert check_rc == 0 and "Another run is changing this fleet" in warned["note"], "a check run only warns"
    finally:
        release.write_text("done")
        out, err = first.communicate(timeout=120)
    assert first.returncode == 0, (out, err)
    results = [r for play in json.loads(out)["plays"] for task in play["tasks"]
               if "lock | The fleet's run lock on every gateway" in task["task"]["name"] for r in task["hosts"]["localhost"]["results"]]
    assert [r["decision"] for r in results] == ["take", "keep", "release"]
    assert not lock.exists(), "released at the end of the run"


def test_a_lock_left_by_a_run_that_ended_here_is_taken_over_and_said(tmp_path):
    lock = tmp_path / "state" / "run-lock.json"
    rc, first = run(tmp_path)                       # lock.yml alone: takes the lock and ends without releasing it
    assert rc == 0 and lock_results(first)[0]["decision"] == "take"
    left = json.loads(lock.read_text())
    rc, second = run(tmp_path)
    [taken] = lock_results(second)
    assert rc == 0 and taken["decision"] == "take_over", taken
    assert f"pid {left['pid']}" in taken["note"] and "that run has ended on this controller" in taken["note"]
    assert json.loads(lock.read_text())["run"] != left["run"]


def test_another_controllers_lock_stops_the_run_until_it_is_broken(tmp_path):
    lock = tmp_path / "state" / "run-lock.json"
    lock.parent.mkdir()
    other = {"run": "ctl-9/31337/42", "controller": "ctl-9", "user": "bob", "pid": 31337, "pid_start": "42",
             "boot_id": "another-boot", "pid_ns": "pid:[1]", "playbook": "site.yml", "since": "2026-12-01T08:00:00Z"}
    lock.write_text(json.dumps(other))
    rc, refused = run(tmp_path)
    [result] = lock_results(refused)
    assert rc != 0 and "site.yml by bob on ctl-9 (pid 31337" in result["msg"] and "2026-12-01T08:00:00Z" in result["msg"]
    assert json.loads(lock.read_text()) == other
    rc, broken = run(tmp_path, LOCK_PLAYBOOK, "-e", "llmfleet_break_lock=true")
    [result] = lock_results(broken)
    assert rc == 0 and result["decision"] == "break"
    assert "bob on ctl-9" in result["note"] and "llmfleet_break_lock" in result["note"]
    # a run that does not hold it does not release it
    lock.write_text(json.dumps(other))
    rc, release = run(tmp_path, LOCK_PLAYBOOK, "-e", "gateway_lock_state=absent")
    assert rc == 0 and lock_results(release)[0]["decision"] == "not_ours" and json.loads(lock.read_text()) == other
