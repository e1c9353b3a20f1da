"""llmfleet.serving.gateway_rotation through Ansible on this host, on a gateway tree rendered from the role's own
templates, served by a real nginx (Debian's nginx + njs, installed by `make units`) that the module checks with `nginx -t`
and reloads: an instance goes out of the rotation and back byte for byte, nginx reloads (same master, new workers, still
answering), the state survives a full render (the render writes what the rotation wrote), check mode writes nothing, and
a tree nginx rejects or a failed reload leaves the live file and the state as they were."""

from __future__ import annotations

import calendar
import json
import os
import signal
import subprocess
import time
import urllib.request

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _gateway as gw
from ansible_collections.llmfleet.serving.plugins.module_utils import _rotation as rot

from llmfleet_testing import free_port, run_ansible, start_nginx
from test_gateway import _nginx_t, _render

E2 = "llmfleet-fleet-engine2/tiny-a-0"


def plans():
    return {h: {"host": h, "deployments": [{"name": "tiny-a", "instances": [
        {"name": "tiny-a-0", "served_model_name": "tiny-a", "port": 8002, "bind_address": "127.0.0.1",
         "edge": {"address": addr, "port": 8002}}]}]}
        for h, addr in (("llmfleet-fleet-engine1", "127.0.0.11"), ("llmfleet-fleet-engine2", "127.0.0.12"))}


def play(tmp_path, tasks, check=False):
    playbook = tmp_path / f"play-{len(list(tmp_path.glob('play-*.yml')))}.yml"
    playbook.write_text(json.dumps([{"hosts": "localhost", "connection": "local", "gather_facts": False,
                                     "tasks": [dict(t, name=f"t{i}", ignore_errors=True) for i, t in enumerate(tasks)]}]))
    result = run_ansible("ansible-playbook", str(playbook), *(["--check"] if check else []))
    return [task["hosts"]["localhost"] for task in result["plays"][0]["tasks"]]


@pytest.fixture()
def gateway(tmp_path):
    port = free_port()   # not a fixed port: other test runs on this machine (units beside integration) listen too
    root = _render(tmp_path / "first", gw.gateway_model(plans(), "gw"), gateway_listen=[f"127.0.0.1:{port}"])
    assert _nginx_t(root).returncode == 0          # also points the pid file into the tree
    state = tmp_path / "state" / "rotation.json"
    conf_file = str(root / "nginx.conf")
    # the gateway's nginx, on the rendered tree (it listens on 127.0.0.1:port): the module reloads it as
    # `systemctl reload nginx` does on a gateway host (SIGHUP to the master)
    start_nginx(str(root))   # and waits for the master's pid file

    def task(**args):
        return {"llmfleet.serving.gateway_rotation": dict(
            conf=str(root / "llmfleet" / "gateway.conf"), state_file=str(state), root=str(root),
            staging=str(tmp_path / "staging"), reload=["nginx", "-s", "reload", "-c", conf_file],
            lock_file=str(tmp_path / "state" / "run-lock.json"), **args)}
    gateway = {"root": root, "state": state, "task": task, "conf": root / "llmfleet" / "gateway.conf", "pid": root / "nginx.pid",
               "port": port}
    yield gateway
    stop(gateway)


def stop(gateway):
    """Stop the test's nginx and wait until it has exited (its pid file gone, its port free for the next test)."""
    # by its pid, not `nginx -s stop`: that parses the configuration first, which a test may have broken on purpose
    pid = gateway["pid"].read_text().strip() if gateway["pid"].exists() else ""
    if pid.isdigit():
        os.kill(int(pid), signal.SIGTERM)
    for _attempt in range(100):
        if not gateway["pid"].exists() or not gateway["pid"].read_text().strip():
            return
        time.sleep(0.1)
    raise AssertionError(f"nginx of {gateway['root']} did not stop in 10 s")


def processes(gateway):
    """(the master's pid, its workers' pids) of the test's nginx."""
    master = int(gateway["pid"].read_text())
    workers = subprocess.run(["pgrep", "-P", str(master)], capture_output=True, text=True, check=False).stdout.split()
    return master, sorted(workers)


def reloaded(gateway, before):
    """Whether the master replaced its workers since `before` (a reload), waiting up to 10 s, and still answers."""
    for _attempt in range(100):
        master, workers = processes(gateway)
        if master == before[0] and workers and not set(workers) & set(before[1]):
            with urllib.request.urlopen(f"http://127.0.0.1:{gateway['port']}/health", timeout=5) as answer:
                return answer.status == 200
        time.sleep(0.1)
    return False


def test_out_and_back_in_byte_for_byte_and_a_render_keeps_the_state(gateway, tmp_path):
    before = gateway["conf"].read_text()
    started = processes(gateway)
    out, again, report = play(tmp_path, [gateway["task"](instance=E2, down=True), gateway["task"](instance=E2, down=True),
                                         gateway["task"]()])
    assert out.get("failed") is not True, out
    assert out["changed"] is True and out["reload"] is True and out["out"] == [E2]
    conf = gateway["conf"].read_text()
    assert "127.0.0.12:8002 max_fails=2 fail_timeout=10s down;  # llmfleet-fleet-engine2 tiny-a-0" in conf
    # every line of that server (its model's upstream, and the upstream the other server's 503 is tried again in), no other
    assert conf.count(" down;") == conf.count("# llmfleet-fleet-engine2 tiny-a-0") == 2
    state = json.loads(gateway["state"].read_text())
    assert state["out"] == [E2] and set(state) == {"out", "since"}       # no run lock here: no run to name
    assert abs(time.time() - calendar.timegm(time.strptime(state["since"][E2], "%Y-%m-%dT%H:%M:%SZ"))) < 120
    assert not (tmp_path / "staging").exists(), "the private copy (it holds the engines' key) is removed"
    assert reloaded(gateway, started), "nginx reloaded the new configuration (same master, new workers) and answers"
    after_first = processes(gateway)
    assert again["changed"] is False and again["reload"] is False
    assert processes(gateway) == after_first, "an unchanged rotation reloads nothing"
    assert report["changed"] is False and report["out"] == [E2]
    assert [(r["host"], r["down"]) for r in report["routes"]] == [("llmfleet-fleet-engine1", False), ("llmfleet-fleet-engine2", True)]
    # a full render of the gateway (what playbooks/gateway.yml does) reads the state and writes the same bytes
    rendered = _render(tmp_path / "again", gw.gateway_model(plans(), "gw", {"out_of_rotation": report["out"]}),
                       gateway_listen=[f"127.0.0.1:{gateway['port']}"])
    assert (rendered / "llmfleet" / "gateway.conf").read_text() == conf
    back, = play(tmp_path, [gateway["task"](instance=E2, down=False)])
    assert back["changed"] is True and back["out"] == []
    assert gateway["conf"].read_text() == before and reloaded(gateway, after_first)


def test_check_mode_writes_nothing(gateway, tmp_path):
    before = gateway["conf"].read_text()
    result, = play(tmp_path, [gateway["task"](instance=E2, down=True)], check=True)
    assert result["changed"] is True and result["out"] == [E2]
    assert gateway["conf"].read_text() == before and not gateway["state"].exists()


def test_a_configuration_nginx_rejects_changes_nothing(gateway, tmp_path):
    before = gateway["conf"].read_text()
    # a live tree broken by hand: the rotation's check fails on it and says what to do
    (gateway["root"] / "llmfleet" / "error_pages.inc").write_text("no_such_directive on;\n")
    result, = play(tmp_path, [gateway["task"](instance=E2, down=True)])
    assert result["failed"] is True
    assert "nothing changed" in result["msg"] and "no_such_directive" in result["msg"]
    assert "run playbooks/gateway.yml" in result["msg"]
    assert gateway["conf"].read_text() == before and not gateway["state"].exists()


def test_a_gateway_that_does_not_route_the_instance_yet_keeps_it_in_the_state(gateway, tmp_path):
    before = gateway["conf"].read_text()
    result, = play(tmp_path, [gateway["task"](instance="llmfleet-fleet-engine3/tiny-a-0", down=True)])
    assert result["changed"] is True and result["reload"] is False
    assert gateway["conf"].read_text() == before
    assert rot.parse_state(gateway["state"].read_text()) == ["llmfleet-fleet-engine3/tiny-a-0"]


def test_a_gateway_without_a_state_file_keeps_what_its_configuration_has_down(gateway, tmp_path):
    """A gateway set up before the state existed, or a `down` set by hand: the next change of another instance leaves
    it down (the state starts from the configuration), and only that instance's line changes."""
    conf = gateway["conf"].read_text().replace("fail_timeout=10s;  # llmfleet-fleet-engine1",
                                               "fail_timeout=10s down;  # llmfleet-fleet-engine1")
    gateway["conf"].write_text(conf)
    result, = play(tmp_path, [gateway["task"](instance=E2, down=True)])
    assert result["out"] == ["llmfleet-fleet-engine1/tiny-a-0", E2]
    assert [r["down"] for r in result["routes"]] == [True, True]
    assert rot.parse_state(gateway["state"].read_text()) == ["llmfleet-fleet-engine1/tiny-a-0", E2]
    # back in with nothing recorded and nothing down: no state file is written for it
    gateway["state"].unlink()
    gateway["conf"].write_text(conf.replace(" down;", ";"))
    noop, = play(tmp_path, [gateway["task"](instance=E2, down=False)])
    assert noop["changed"] is False and not gateway["state"].exists()


def test_a_failed_reload_puts_both_files_back(gateway, tmp_path):
    """nginx stopped on the gateway: the reload fails, and the files go back to what the (stopped) nginx last read."""
    before = gateway["conf"].read_text()
    stop(gateway)
    result, = play(tmp_path, [gateway["task"](instance=E2, down=True)])
    assert result["failed"] is True and "nginx -s reload" in result["msg"]
    assert "files are as they were" in result["msg"]
    assert gateway["conf"].read_text() == before and not gateway["state"].exists()


E1 = "llmfleet-fleet-engine1/tiny-a-0"


def test_the_state_names_the_run_that_took_an_instance_out_and_keeps_the_first_time(gateway, tmp_path):
    """The holder of the fleet's run lock is recorded with the time, so the next run can say who left an instance out."""
    (tmp_path / "state").mkdir(exist_ok=True)
    (tmp_path / "state" / "run-lock.json").write_text(json.dumps(
        {"run": "ctl-1/4242/9001", "controller": "ctl-1", "user": "alice", "pid": 4242, "playbook": "site.yml",
         "since": "2026-12-03T10:00:00Z"}))
    first, = play(tmp_path, [gateway["task"](instance=E2, down=True)])
    assert first["detail"][E2]["by"] == "site.yml by alice on ctl-1, pid 4242"
    again, report = play(tmp_path, [gateway["task"](instance=E2, down=True), gateway["task"]()])
    assert again["changed"] is False and report["detail"] == first["detail"]


def test_the_last_serving_instance_of_a_model_is_not_taken_out(gateway, tmp_path):
    """The N-1 check made on the gateway under its lock, at the moment an instance goes out: with engine2's tiny-a out
    (another change of the same batch), engine1's may not go, and nothing changes; with a peer serving it may."""
    before = gateway["conf"].read_text()
    out, refused = play(tmp_path, [gateway["task"](instance=E2, down=True), gateway["task"](instance=E1, down=True, peers=[E2])])
    assert out.get("failed") is not True, out
    after_first = gateway["conf"].read_text()
    assert refused["failed"] is True and "nothing changed" in refused["msg"] and E2 in refused["msg"], refused
    assert "vllm_allow_downtime" in refused["msg"]
    assert gateway["conf"].read_text() == after_first != before and rot.parse_state(gateway["state"].read_text()) == [E2]
    # a peer held out by the state alone (its gateway does not route it down) does not serve either
    noroute, = play(tmp_path, [gateway["task"](instance=E1, down=True, peers=["llmfleet-fleet-engine3/tiny-a-0", E2])])
    assert noroute["changed"] is True, "engine3 is not routed here yet (a first deploy): it counts"
    back, = play(tmp_path, [gateway["task"](instance=E1, down=False)])
    assert back["changed"] is True
    # no peers given: the only instance's downtime was accepted, nothing is checked
    alone, = play(tmp_path, [gateway["task"](instance=E1, down=True, peers=[])])
    assert alone["changed"] is True and alone["out"] == [E1, E2]


def test_an_instance_no_plan_has_is_forgotten_and_the_configuration_left_alone(gateway, tmp_path):
    """keep: the state forgets what no plan has any more (a removed deployment a change had taken out); the live
    configuration is not touched and nginx not reloaded (the next full render no longer routes it)."""
    play(tmp_path, [gateway["task"](instance=E2, down=True), gateway["task"](instance="gone-host/tiny-a-0", down=True)])
    conf = gateway["conf"].read_text()
    started = processes(gateway)
    check, = play(tmp_path, [gateway["task"](keep=[E1, E2])], check=True)
    assert check["changed"] is True and check["forgotten"] == ["gone-host/tiny-a-0"]
    assert rot.parse_state(gateway["state"].read_text()) == ["gone-host/tiny-a-0", E2], "check mode writes nothing"
    pruned, again = play(tmp_path, [gateway["task"](keep=[E1, E2]), gateway["task"](keep=[E1, E2])])
    assert pruned["changed"] is True and pruned["reload"] is False and pruned["out"] == [E2]
    assert again["changed"] is False and again["forgotten"] == []
    assert rot.parse_state(gateway["state"].read_text()) == [E2] and gateway["conf"].read_text() == conf
    assert processes(gateway) == started, "forgetting reloads nothing"
