"""Verify the vllm role's docker runtime: two real vLLM (CPU build) containers on this machine."""

import datetime
import json
import os
import pathlib
import urllib.error
import urllib.request

import pytest

EPHEMERAL = pathlib.Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
INSTANCES = {"tiny-a-0": 18002, "tiny-b-0": 18003}
MODEL = "/var/tmp/llmfleet-lab/models/tiny-qwen3"


def api_key():
    return (EPHEMERAL / "secrets" / "vllm_api_key").read_text().strip()


def planned(name):
    plan = json.loads((EPHEMERAL / "plans" / "lab-docker-host.json").read_text())
    return next(i for d in plan["deployments"] for i in d["instances"] if i["name"] == name)


def inspect(host, name):
    return json.loads(host.check_output(f"docker inspect llmfleet-vllm-{name}"))[0]


def post(port, path, body, key=None):
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(), headers)
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def started(container):
    return datetime.datetime.fromisoformat(container["State"]["StartedAt"][:26].rstrip("Z") + "+00:00")


@pytest.mark.parametrize("name", INSTANCES)
def test_container_is_locked_down(host, name):
    c = inspect(host, name)
    hc = c["HostConfig"]
    assert c["State"]["Running"] and c["Config"]["Image"] == "llmfleet-lab/vllm-cpu:lab"
    assert hc["Privileged"] is False and hc["IpcMode"] == "private" and "no-new-privileges" in hc["SecurityOpt"]
    assert hc["ShmSize"] == 1024 ** 3 and hc["RestartPolicy"]["Name"] == "unless-stopped"
    assert hc["CpusetCpus"] == "0-1"
    model = next(m for m in c["Mounts"] if m["Destination"] == MODEL)
    assert model["RW"] is False, "the model must be mounted read-only"
    port = INSTANCES[name]
    assert hc["PortBindings"] == {f"{port}/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(port)}]}
    assert c["Config"]["Labels"]["io.llmfleet.plan-hash"] == planned(name)["plan_hash"]
    assert c["Config"]["StopTimeout"] > 0


@pytest.mark.parametrize("name", INSTANCES)
def test_container_runs_the_plans_arguments(host, name):
    c = inspect(host, name)
    args = planned(name)["args"]
    assert c["Config"]["Entrypoint"] == ["vllm", "serve"]
    cmd = c["Config"]["Cmd"]
    # exactly the plan's arguments; the plan's --host for the docker runtime is every address inside the container
    assert cmd == args and cmd[cmd.index("--host") + 1] == "0.0.0.0"
    env = dict(e.split("=", 1) for e in c["Config"]["Env"])
    assert env["VLLM_API_KEY"] == api_key() and env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert env["VLLM_CACHE_ROOT"].startswith("/var/cache/llmfleet-vllm/")


@pytest.mark.parametrize("name", INSTANCES)
def test_real_completions_with_the_key_only(host, name):
    port, served = INSTANCES[name], name.rsplit("-", 1)[0]
    body = {"model": served, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}
    code, text = post(port, "/v1/chat/completions", body, api_key())
    assert code == 200, text
    assert json.loads(text)["usage"]["completion_tokens"] >= 1
    code, text = post(port, "/v1/chat/completions", dict(body, stream=True), api_key())
    events = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    assert code == 200 and events[-1] == "[DONE]" and len(events) >= 3
    assert post(port, "/v1/chat/completions", body)[0] == 401
    assert post(port, "/v1/completions", {"model": served, "prompt": "x", "max_tokens": 1}, "nope")[0] == 401


def test_startup_to_ready_per_instance(host):
    for name in INSTANCES:
        c = inspect(host, name)
        logs = host.run(f"docker logs -t llmfleet-vllm-{name}")
        line = next(line for line in (logs.stdout + logs.stderr).splitlines() if "Application startup complete" in line)
        ready = datetime.datetime.fromisoformat(line.split()[0][:26].rstrip("Z") + "+00:00")
        seconds = (ready - started(c)).total_seconds()
        print(f"[vllm_docker] {name}: ready {seconds:.1f} s after its start")
        assert 0 < seconds < planned(name)["startup_budget_s"]


def test_a_changed_flag_recreated_only_its_container(host):
    effect = json.loads((EPHEMERAL / "side-effect.json").read_text())
    (a_before, b_before), (a_after, b_after) = effect["before"], effect["after"]
    assert a_after == a_before, "tiny-a-0 was restarted although its plan did not change"
    assert b_after > b_before, "tiny-b-0 was not restarted after its max_num_seqs changed"
    cmd = inspect(host, "tiny-b-0")["Config"]["Cmd"]
    assert cmd[cmd.index("--max-num-seqs") + 1] == "6"
    assert inspect(host, "tiny-a-0")["RestartCount"] == 0
