"""_plan.precision and _plan.hints on their own: eager, dtype, quantization refusals and the variants a refusal names."""

from __future__ import annotations

from ansible_collections.llmfleet.serving.plugins.module_utils._hardware import validate_hardware
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._models import catalog_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.base import Ctx
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.hints import does_not_fit, variant_fits
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.inputs import check_deployments, read_request
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.precision import (
    catalog_alternatives, choose_precision, dtype_of, planned_eager,
)
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.sizer import Sizer, gpu_budget
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.topology import place

from llmfleet_testing import accepting

CPU_HW = {"accelerators": [], "links": None, "numa_cpus": {0: "0-3"}, "cpu_count": 4, "memory_mib": 16384, "driver_version": None}


def staged(model, profile, version="0.26.0", **extra):
    hw = validate_hardware(hardware_profile(profile) if isinstance(profile, str) else profile, source="test")
    [d] = check_deployments([{"name": "d", "model": model, "engine": accepting(version), **extra}], "h")
    req = read_request(d, Ctx([]))
    return catalog_profile(model), req, place(d, req, hw, "h", {}, Ctx([]))


def test_eager_on_cpu_hosts_and_where_forced():
    _m, req, p = staged("Qwen/Qwen3-0.6B", CPU_HW)
    assert planned_eager(req, p)
    _m, req, p = staged("Qwen/Qwen3-8B", "h200x1")
    assert not planned_eager(req, p)
    _m, req, p = staged("Qwen/Qwen3-8B", "h200x1", overrides={"enforce_eager": True})
    assert planned_eager(req, p)


def test_dtype_follows_the_architecture():
    """vLLM refuses bfloat16 below sm80 (platforms/cuda.py); GPTQ outside Marlin computes in float16."""
    m = catalog_profile("Qwen/Qwen3-8B")
    assert dtype_of(m, "nvidia", "sm70", 70, None, Ctx([]), None) == "float16"
    assert dtype_of(m, "nvidia", "sm90", 90, None, Ctx([]), None) == "bfloat16"
    assert dtype_of(m, "nvidia", "sm90", 90, "gptq", Ctx([]), None) == "float16"
    assert dtype_of(m, "cpu", "cpu", 0, None, Ctx([]), None, frozenset({"amx_tile", "amx_bf16"})) == "bfloat16"
    assert dtype_of(m, "cpu", "cpu", 0, None, Ctx([]), None, frozenset()) == "float32"


def test_a_refusal_names_only_the_variants_the_hint_lets_through():
    """FP8 on a V100 (sm70) before 0.17: refused; the catalog's bf16 checkpoint is named, unless the fit predicate drops it."""
    m, req, p = staged("Qwen/Qwen3-8B-FP8", "dgx1_v100_32gb", version="0.11.0")
    assert catalog_alternatives(m, p.vendor, p.cc, req.version) == "Qwen/Qwen3-8B"
    _precision, named = choose_precision(m, req, p, Ctx([]))
    _precision, none_fit = choose_precision(m, req, p, Ctx([]), lambda alt: False)
    assert "use Qwen/Qwen3-8B" in named[0] and "use " not in none_fit[0]
    fits = variant_fits(m, req, p)
    assert fits is not None and fits(catalog_profile("Qwen/Qwen3-8B"))     # 16 GB of bf16 weights fit a 32 GB V100
    assert not fits(catalog_profile("Qwen/Qwen3-235B-A22B"))               # 470 GB do not fit 8 x 32 GB


def test_no_variant_is_judged_by_size_on_a_cpu_host():
    m, req, p = staged("Qwen/Qwen3-0.6B", CPU_HW, version="0.32.0")
    assert variant_fits(m, req, p) is None


def test_does_not_fit_gives_the_numbers_and_what_would():
    """Qwen3-32B's 65.5 GB of bf16 weights (61 GiB) do not fit 30 % of a 141 GB H200; its FP8 checkpoint (half the bytes)
    and TP=2 (half the weights a GPU) are named, each because it is itself planned to fit."""
    m, req, p = staged("Qwen/Qwen3-32B", "h200x1", workload={"max_model_len": 40960, "concurrency": 1},
                       overrides={"gpu_memory_utilization": 0.3})
    sizer = Sizer(m, p.vendor, req, gpu_budget(req, p, False, Ctx([])), "bfloat16", False, None, p.cc)
    text = does_not_fit("d", m, 1, sizer, p, req)
    assert text.startswith("d: Qwen/Qwen3-32B does not fit on 1 x 140 GiB GPUs: 61.02 GiB of weights per GPU at TP=1")
    assert text.endswith("what would fit: Qwen/Qwen3-32B-FP8, 2 of these GPUs (TP=2, planned to fit), "
                         "2 hosts of these (2 x 1 GPUs: TP=1 inside each host x PP=2 stages across them, planned to fit)")
    assert sizer.fits(2, "auto") and not sizer.fits(1, "auto")
