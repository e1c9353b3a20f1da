"""extra_args / extra_env per deployment (issue 17, the operators' escape hatch): appended after the planned flags,
shown in the plan as from the inventory, checked against the flags the planner knows for that engine version;
nothing the planner decides can be set twice, and a malformed entry names itself."""

from __future__ import annotations

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import PlanError, plan_host

from llmfleet_testing import accepting


def deployment(version="0.26.0", **extra):
    return dict({"name": "q", "model": "Qwen/Qwen3-8B", "workload": {"max_model_len": 8192}, "engine": accepting(version)}, **extra)


def plan(dep, profile="h200x1"):
    return plan_host("h", hardware_profile(profile), [dep])


def test_extra_args_and_env_reach_the_instance_with_a_reason():
    p = plan(deployment(extra_args=["--enable-prefix-caching", "--long-prefill-token-threshold", "2048"],
                        extra_env={"VLLM_LOGGING_LEVEL": "DEBUG", "NCCL_DEBUG": 1}))
    [inst] = p["deployments"][0]["instances"]
    assert inst["args"][-3:] == ["--enable-prefix-caching", "--long-prefill-token-threshold", "2048"]
    assert inst["env"]["VLLM_LOGGING_LEVEL"] == "DEBUG" and inst["env"]["NCCL_DEBUG"] == "1"
    assert inst["env"]["CUDA_VISIBLE_DEVICES"] == "0"
    why = {r["decision"]: r["why"] for r in inst["reasons"]}
    assert "from the inventory" in why["extra_args=--enable-prefix-caching --long-prefill-token-threshold 2048"]
    assert "extra_env=NCCL_DEBUG,VLLM_LOGGING_LEVEL" in why
    assert any("not checked against vLLM 0.26.0" in w and "--enable-prefix-caching" in w for w in p["warnings"])


def test_a_flag_the_version_does_not_have_is_refused_naming_the_version():
    # --mm-processor-cache-type arrived in 0.11.0 (_engine.FLAG_SINCE, read on real releases)
    with pytest.raises(PlanError, match=r"extra_args --mm-processor-cache-type is not a flag of vLLM 0.10.0 \(it arrived in 0.11.0\)"):
        plan(deployment("0.10.0", extra_args=["--mm-processor-cache-type=shm"]))
    p = plan(deployment("0.11.0", extra_args=["--mm-processor-cache-type", "shm"]))
    [inst] = p["deployments"][0]["instances"]
    assert inst["args"][-2:] == ["--mm-processor-cache-type", "shm"] and not any("not checked" in w for w in p["warnings"])


@pytest.mark.parametrize("extra, message", [
    ({"extra_args": ["--max-num-seqs", "8"]}, "sets --max-num-seqs, which the planner decides: set overrides.max_num_seqs instead"),
    ({"extra_args": ["--port=9000"]}, "sets --port, which the planner decides: set overrides.port instead"),
    ({"extra_args": ["--host", "0.0.0.0"]}, "sets --host, which the planner decides: it follows from the plan"),
    ({"extra_args": ["--shutdown-timeout", "60"]}, "sets --shutdown-timeout, which the planner decides"),
    ({"extra_args": ["fast"]}, "must start with a --flag"),
    ({"extra_args": "--enforce-eager"}, "must be a list of strings"),
    ({"extra_env": {"VLLM_API_KEY": "x"}}, "sets VLLM_API_KEY, which the plan or the roles set"),
    ({"extra_env": {"BAD NAME": "x"}}, "a variable name and a string value"),
    ({"extra_env": ["A=1"]}, "must be a mapping"),
])
def test_bad_extras_fail_before_anything_naming_the_entry(extra, message):
    with pytest.raises(PlanError, match="llmfleet_deployments\\[0\\] \\(q\\)") as err:
        plan(deployment(**extra))
    assert message in str(err.value)


def test_cpu_plans_take_them_too():
    hw = {"accelerators": [], "numa_cpus": {0: "0-1"}, "cpu_count": 2, "memory_mib": 24000}
    dep = {"name": "c", "model": "Qwen/Qwen3-0.6B", "workload": {"max_model_len": 2048, "concurrency": 2}, "engine": {"version": "0.32.0"},
           "extra_args": ["--enable-prefix-caching"], "extra_env": {"VLLM_CPU_SGL_KERNEL": "1"}}
    [inst] = plan_host("c", hw, [dep])["deployments"][0]["instances"]
    assert inst["args"][-1] == "--enable-prefix-caching" and inst["env"]["VLLM_CPU_SGL_KERNEL"] == "1"


# (--pipeline-parallel-size is the plan's own since issue 34: refused in extra_args, test_plan_stages_inputs.py)
@pytest.mark.parametrize("flag, assumed", [("--no-async-scheduling", "two batches in flight"),
                                           ("--additional-config", "gdn_prefill_backend")])
def test_extras_that_change_what_the_memory_model_assumes_are_named(flag, assumed):
    args = [flag] + (['{"gdn_prefill_backend": "triton"}'] if "config" in flag else [])
    p = plan(deployment(extra_args=args))
    assert p["errors"] == []
    [warning] = [w for w in p["warnings"] if "memory numbers assume" in w]
    assert flag in warning and assumed in warning and "KV cache vLLM logs" in warning
    quiet = plan(deployment(extra_args=["--long-prefill-token-threshold", "2048"]))
    assert not any("memory numbers assume" in w for w in quiet["warnings"])
