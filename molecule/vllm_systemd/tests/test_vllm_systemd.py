"""Verify the vllm role's systemd runtime: two real vLLM (CPU build) instances from the plan."""

import json
import os
import pathlib
import shlex

EPHEMERAL = pathlib.Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
HOST = "llmfleet-vllm-host"
INSTANCES = {"tiny-a-0": 8002, "tiny-b-0": 8003}


def api_key():
    return (EPHEMERAL / "secrets" / "vllm_api_key").read_text().strip()


def plan():
    return json.loads((EPHEMERAL / "plans" / f"{HOST}.json").read_text())


def planned(name):
    return next(i for d in plan()["deployments"] for i in d["instances"] if i["name"] == name)


def curl(host, port, path, body=None, key=None, stream=False):
    cmd = f"curl -s -w '\\n%{{http_code}}' http://127.0.0.1:{port}{path}"
    if key:
        cmd += f" -H {shlex.quote('Authorization: Bearer ' + key)}"
    if body is not None:
        cmd += f" -H 'Content-Type: application/json' -d {shlex.quote(json.dumps(body))}"
    out = host.check_output(cmd + (" -N" if stream else ""))
    text, _sep, code = out.rpartition("\n")
    return int(code), text


def main_pid(host, name):
    return int(host.check_output(f"systemctl show -p MainPID --value llmfleet-vllm-{name}"))


def test_both_instances_run_the_plans_arguments_as_the_engine_user(host):
    for name in INSTANCES:
        pid = main_pid(host, name)
        assert pid > 0
        argv = host.file(f"/proc/{pid}/cmdline").content.split(b"\0")[:-1]
        assert [a.decode() for a in argv[4:]] == planned(name)["args"]
        assert argv[1:4] == [b"-m", b"vllm.entrypoints.cli.main", b"serve"]
        assert argv[0] == b"/opt/llmfleet/vllm/0.32.0/bin/python"
        assert host.check_output(f"ps -o user= -p {pid}") == "llmfleet-vllm"


def test_startup_to_ready_per_instance(host):
    for name in INSTANCES:
        unit = f"llmfleet-vllm-{name}"
        started = int(host.check_output(f"systemctl show -p ExecMainStartTimestampMonotonic --value {unit}"))
        lines = host.check_output(f"journalctl -u {unit} -o json --output-fields=MESSAGE,_SOURCE_MONOTONIC_TIMESTAMP").splitlines()
        ready = [json.loads(line) for line in lines if "Application startup complete" in line]
        assert ready, f"{unit} never logged 'Application startup complete'"
        seconds = (int(ready[-1]["__MONOTONIC_TIMESTAMP"]) - started) / 1e6
        print(f"[vllm_systemd] {name}: ready {seconds:.1f} s after its start")
        assert 0 < seconds < planned(name)["startup_budget_s"]


def test_chat_completions_need_the_key(host):
    key = api_key()
    for name, port in INSTANCES.items():
        served = name.rsplit("-", 1)[0]
        body = {"model": served, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}
        code, text = curl(host, port, "/v1/chat/completions", body, key)
        assert code == 200, text
        answer = json.loads(text)
        assert answer["model"] == served and answer["usage"]["completion_tokens"] >= 1
        code, text = curl(host, port, "/v1/chat/completions", dict(body, stream=True), key, stream=True)
        assert code == 200
        events = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]" and len(events) >= 3
        assert json.loads(events[0])["object"] == "chat.completion.chunk"
        assert curl(host, port, "/v1/chat/completions", body)[0] == 401
        assert curl(host, port, "/v1/chat/completions", body, "wrong-" + key)[0] == 401
        assert curl(host, port, "/health")[0] == 200


def test_instances_listen_on_loopback_only(host):
    listening = host.check_output("ss -Htln")
    for port in INSTANCES.values():
        assert f"127.0.0.1:{port} " in listening
        assert f"0.0.0.0:{port} " not in listening and f"*:{port} " not in listening


def test_the_key_is_only_in_the_protected_environment_file(host):
    for name in INSTANCES:
        env = host.file(f"/etc/llmfleet/vllm/{name}.env")
        assert env.mode == 0o640 and env.user == "root" and env.group == "llmfleet-vllm"
        assert f'VLLM_API_KEY="{api_key()}"' in env.content_string
        unit = host.file(f"/etc/systemd/system/llmfleet-vllm-{name}.service").content_string
        assert api_key() not in unit and f"EnvironmentFile=/etc/llmfleet/vllm/{name}.env" in unit
        assert "Restart=on-failure" in unit and "TimeoutStopSec=" in unit
        assert "CPUAffinity=" + planned(name)["cpuset"].replace(",", " ") in unit


def test_compile_caches_persist_per_instance(host):
    for name in INSTANCES:
        cache = host.file(f"/var/lib/llmfleet/vllm/{name}")
        assert cache.is_directory and cache.user == "llmfleet-vllm"
        assert f"VLLM_CACHE_ROOT=\"/var/lib/llmfleet/vllm/{name}/vllm\"" in host.file(f"/etc/llmfleet/vllm/{name}.env").content_string


def test_a_changed_flag_restarted_only_its_instance(host):
    effect = json.loads(host.file("/var/tmp/llmfleet-side-effect.json").content_string)
    (a_before, b_before), (a_after, b_after) = effect["before"], effect["after"]
    assert a_after == a_before, "tiny-a-0 was restarted although its plan did not change"
    assert b_after > b_before, "tiny-b-0 was not restarted after its max_num_seqs changed"
    argv = host.file(f"/proc/{main_pid(host, 'tiny-b-0')}/cmdline").content.split(b"\0")
    assert argv[argv.index(b"--max-num-seqs") + 1] == b"6"


def test_an_instance_that_cannot_start_fails_the_gate_with_its_log(host):
    effect = json.loads(host.file("/var/tmp/llmfleet-side-effect.json").content_string)
    message = effect["gate_failure"]
    print(f"[vllm_systemd] gate failure message (first and last lines):\n{message[:400]}\n...\n{message[-600:]}")
    # the change path stops on the failed health gate with its message (a new instance: nothing to restore)
    assert effect["gate_task"] == "Stop, the new plan did not pass: tiny-bad-0"
    assert message.startswith("llmfleet-vllm-host / tiny-bad-0: ")
    assert "llmfleet-vllm-tiny-bad-0 is not serving" in message
    assert "Likely cause: a reasoning or tool-call parser this vLLM build does not have" in message
    assert "no-such-parser" in message, "the engine's own log lines must be in the message"
    assert effect["bad_unit_existed"] and effect["bad_unit_removed"]
    assert not host.file("/etc/llmfleet/vllm/tiny-bad-0.env").exists
