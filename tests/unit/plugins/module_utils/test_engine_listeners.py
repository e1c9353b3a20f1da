"""Issue 35: the listeners an engine opens for its own processes stay on loopback, on both runtimes, by the plan.

vLLM makes a torch Gloo group for every instance (its CPU group), and on GPUs NCCL (RCCL on ROCm and DCU) opens bootstrap
and proxy sockets; unpinned, Gloo binds the address the host name resolves to and NCCL the first interface that is neither
lo nor docker* (measured on the lent H200: four NCCL listeners on eth0 unpinned, all on 127.0.0.1 with the pins;
docs/sources.md#engine-listeners). With the docker runtime in the host's network those would face the network, as a
unit's always did. The plan pins them for every instance; vLLM before 0.28.0 also keeps a torch TCPStore on every address,
which no variable pins: the plan warns.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from ansible_collections.llmfleet.serving.plugins.filter.serving import vllm_instances
from ansible_collections.llmfleet.serving.plugins.module_utils import _host_needs as needs
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host

from llmfleet_testing import ROOT, accepting, plan_of

KEY = "k" * 48
BIG_CPU = {"accelerators": [], "numa_cpus": {0: "0-31"}, "cpu_count": 32, "memory_mib": 262144}
PINS_CPU = {"VLLM_HOST_IP": "127.0.0.1", "GLOO_SOCKET_IFNAME": "lo"}
PINS_GPU = dict(PINS_CPU, NCCL_SOCKET_IFNAME="lo")


def phi4():
    data = json.loads((pathlib.Path(ROOT) / "tests" / "fixtures" / "models" / "phi-4.json").read_text())
    return {"id": "microsoft/phi-4", "config": data["config"]}


def tp2(version="0.26.0", **extra):
    dep = {"name": "q", "model": "Qwen/Qwen3-32B", "engine": accepting(version), "overrides": {"tensor_parallel_size": 2}, **extra}
    return plan_host("h", hardware_profile("h100_sxm_8x"), [dep])


PLANS = {
    "nvidia TP=2": tp2,
    "nvidia PP>1 (T4 x4, phi-4)": lambda: plan_host("h", hardware_profile("t4x4"), [{"name": "p", "model": phi4(),
                                                                                     "engine": {"version": "0.26.0"}}]),
    "hygon DCU TP=4 (dcu_k100)": lambda: plan_of("dcu_k100"),
    "cpu TP=1": lambda: plan_host("h", BIG_CPU, [{"name": "c", "model": "Qwen/Qwen3-8B", "engine": {"version": "0.32.0"}}]),
}


@pytest.mark.parametrize("label", PLANS)
def test_every_instance_pins_its_own_listeners_to_loopback(label):
    plan = PLANS[label]()
    assert not plan["errors"], plan["errors"]
    insts = [i for d in plan["deployments"] for i in d["instances"]]
    assert insts
    if "TP=2" in label or "TP=4" in label:
        assert all(i["tensor_parallel_size"] > 1 for i in insts)
    if "PP>1" in label:
        assert all(i["pipeline_parallel_size"] > 1 for i in insts)
    for inst in insts:
        pins = PINS_CPU if inst["vendor"] == "cpu" else PINS_GPU
        assert {k: inst["env"].get(k) for k in pins} == pins, inst["env"]
        assert "NCCL_SOCKET_IFNAME" not in inst["env"] or inst["vendor"] != "cpu"
        # vLLM's `serve` never reads MASTER_ADDR (only its external-launcher executor does): not planned
        assert "MASTER_ADDR" not in inst["env"]
        [why] = [r["why"] for r in inst["reasons"] if "GLOO_SOCKET_IFNAME=lo" in r["decision"]]
        assert "every instance runs on one host" in why and "bind loopback" in why


def test_both_runtimes_start_the_engine_with_the_pins():
    """The docker runtime's container environment and the systemd unit's environment file carry the plan's pins."""
    [gpu] = vllm_instances(tp2(), KEY, {})[:1]
    assert gpu["runtime"] == "docker" and {k: gpu["docker"]["env"][k] for k in PINS_GPU} == PINS_GPU
    cpu = vllm_instances(PLANS["cpu TP=1"](), KEY, {})
    assert [i["runtime"] for i in cpu] == ["systemd"]
    for key, value in PINS_CPU.items():
        assert f'{key}="{value}"' in cpu[0]["env_text"].splitlines()


def test_extra_env_that_replaces_a_pin_wins_with_a_warning():
    plan = tp2(extra_env={"NCCL_SOCKET_IFNAME": "ib0", "GLOO_SOCKET_IFNAME": "lo"})
    inst = plan["deployments"][0]["instances"][0]
    assert inst["env"]["NCCL_SOCKET_IFNAME"] == "ib0" and inst["env"]["GLOO_SOCKET_IFNAME"] == "lo"
    [warning] = [w for w in plan["warnings"] if "replaces the plan's loopback pin" in w]
    assert warning.startswith("q: extra_env NCCL_SOCKET_IFNAME=ib0 replaces") and "GLOO" not in warning
    assert not any("loopback pin" in w for w in tp2()["warnings"])


@pytest.mark.parametrize("version, warns", [("0.17.0", True), ("0.26.0", True), ("0.28.0", False), ("0.32.0", False)])
def test_engines_before_0_28_warn_of_the_tcpstore_no_variable_pins(version, warns):
    """vLLM before 0.28.0 (PR #50999) rendezvouses its workers over tcp://, and torch's TCPStore listens on every address
    whatever the URI names: the plan says so, with what to do."""
    plan = tp2(version)
    assert not plan["errors"], plan["errors"]
    found = [w for w in plan["warnings"] if "TCPStore" in w]
    assert bool(found) is warns
    if warns:
        assert found[0].startswith("q: vLLM before 0.28.0 starts its workers over a torch TCPStore that listens on every address")
        assert "a host firewall" in found[0] and "plan 0.28.0 or later" in found[0]
    assert (needs.tcp_rendezvous(tuple(int(n) for n in version.split("."))) is None) is not warns
