"""_plan.sizing on its own: stage 8 on GPUs (max_model_len, admission, fp8 KV) and on a CPU host (the KV space)."""

from __future__ import annotations

import math

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils._hardware import validate_hardware
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._models import catalog_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.base import GIB, Ctx, Refusal
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.inputs import check_deployments, read_request
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.sizer import Sizer, gpu_budget
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.sizing import CPU_DEFAULT_MAX_NUM_SEQS, size_cpu, size_instances
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.stages import Layout
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.topology import place

CPU_HW = validate_hardware({"accelerators": [], "links": None, "numa_cpus": {0: "0-3"}, "cpu_count": 4, "memory_mib": 16384,
                            "driver_version": None}, source="test")


def request(model, version="0.32.0", **extra):
    [d] = check_deployments([{"name": "d", "model": model, "engine": {"version": version}, **extra}], "h")
    return read_request(d, Ctx([]))


def test_cpu_kv_space_is_what_the_declared_requests_need():
    """Qwen3-0.6B: 28 layers, 8 KV heads of 128: 2 x 28 x 8 x 128 x 2 B = 114688 B a token in bfloat16."""
    req = request("Qwen/Qwen3-0.6B", workload={"max_model_len": 4096, "concurrency": 4})
    sizing = size_cpu(catalog_profile("Qwen/Qwen3-0.6B"), req, CPU_HW, "h", "bfloat16", Ctx([]))
    assert sizing.per_token == 114688
    assert sizing.space_gib == math.ceil(114688 * 4096 * 4 / GIB) == 2
    assert (sizing.max_model_len, sizing.seqs) == (4096, CPU_DEFAULT_MAX_NUM_SEQS) and sizing.held >= 4


def test_cpu_fp8_kv_needs_avx512_or_amx():
    req = request("Qwen/Qwen3-0.6B", overrides={"kv_cache_dtype": "fp8"})
    hw = dict(CPU_HW, cpu_flags=["avx2"])
    with pytest.raises(Refusal, match=r"needs x86 with AVX-512 or AMX"):
        size_cpu(catalog_profile("Qwen/Qwen3-0.6B"), req, hw, "h", "bfloat16", Ctx([]))


def test_gpu_sizing_keeps_the_declared_length_and_names_admission():
    hw = validate_hardware(hardware_profile("h200x1"), source="test")
    [d] = check_deployments([{"name": "d", "model": "Qwen/Qwen3-8B", "engine": {"version": "0.26.0"},
                              "workload": {"max_model_len": 32768, "concurrency": 8}}], "h")
    ctx = Ctx([])
    req = read_request(d, ctx)
    p = place(d, req, hw, "h", {}, ctx)
    m = catalog_profile("Qwen/Qwen3-8B")
    sizer = Sizer(m, p.vendor, req, gpu_budget(req, p, False, ctx), "bfloat16", False, None, p.cc)
    sizing = size_instances(m, req, p, Layout(1, 1, "auto", False, False, "nvlink_all", [[0]]), sizer, ctx)
    assert sizing.max_model_len == 32768 and sizing.kv_dtype == "auto"       # 141 GB hold 8 x 32k of an 8B model in bf16
    assert sizing.mem.concurrency(32768) >= 8
    decisions = [r["decision"] for r in ctx.reasons]
    assert "max_model_len=32768" in decisions and f"max_num_seqs={sizing.seqs}" in decisions
