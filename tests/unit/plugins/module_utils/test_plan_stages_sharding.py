"""_plan.sharding and _plan.layout on their own: the TP sizes a model allows, fp8 soundness, the layout's choice."""

from __future__ import annotations

from ansible_collections.llmfleet.serving.plugins.module_utils._hardware import validate_hardware
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._models import catalog_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.base import Ctx
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.inputs import check_deployments, read_request
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.layout import choose_layout
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.precision import choose_precision
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.sharding import fp8_kv_sound, tp_choices, valid_tp
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.sizer import Sizer, gpu_budget
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.stages import Placement
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.topology import place

QWEN3_8B = catalog_profile("Qwen/Qwen3-8B")     # 32 attention heads, 8 KV heads


def test_tp_must_divide_the_heads():
    assert valid_tp(QWEN3_8B, 3) == "32 attention heads are not divisible by 3"
    assert valid_tp(QWEN3_8B, 16) is None          # 16 > 8 KV heads, replicated twice each
    assert tp_choices(QWEN3_8B, 8) == [1, 2, 4, 8]  # powers of two; 3 and 6 do not divide 32


def test_fp8_kv_is_sound_from_native_fp8():
    """FP8 tensor cores from sm89 (Ada, Hopper); AMD's gfx942 (MI300) has FP8, gfx90a (MI200) does not."""
    def placement(vendor, arch, cc):
        return Placement([0], [{}], vendor, arch, cc)
    assert fp8_kv_sound(placement("nvidia", "sm89", 89)) and fp8_kv_sound(placement("nvidia", "sm90", 90))
    assert not fp8_kv_sound(placement("nvidia", "sm80", 80))
    assert fp8_kv_sound(placement("amd", "gfx942", 0)) and not fp8_kv_sound(placement("amd", "gfx90a", 0))


def test_latency_takes_the_widest_tp_on_all_to_all_nvlink():
    hw = validate_hardware(hardware_profile("h200_sxm_8x"), source="test")
    [d] = check_deployments([{"name": "d", "model": "Qwen/Qwen3-8B", "engine": {"version": "0.26.0"},
                              "workload": {"goal": "latency", "max_model_len": 8192}}], "h")
    ctx = Ctx([])
    req = read_request(d, ctx)
    p = place(d, req, hw, "h", {}, ctx)
    precision, _problems = choose_precision(QWEN3_8B, req, p, ctx)
    sizer = Sizer(QWEN3_8B, p.vendor, req, gpu_budget(req, p, precision.eager, ctx), precision.dtype, precision.eager, None, p.cc)
    layout = choose_layout(QWEN3_8B, req, p, hw, sizer, ctx)
    assert (layout.tp, layout.instances, layout.kind) == (8, 1, "nvlink_all")
