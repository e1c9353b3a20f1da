"""_plan.features on its own: parsers by family and workload, the thinking default, CUDA-graph capture, backends."""

from __future__ import annotations

import json

from ansible_collections.llmfleet.serving.plugins.module_utils._hardware import validate_hardware
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._models import catalog_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.base import Ctx
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.features import choose_features
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.inputs import check_deployments, read_request
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.stages import Precision
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.topology import place

from llmfleet_testing import accepting


def features(model, profile, version="0.26.0", seqs=1024, **extra):
    hw = validate_hardware(hardware_profile(profile), source="test")
    [d] = check_deployments([{"name": "d", "model": model, "engine": accepting(version), **extra}], "h")
    ctx = Ctx([])
    req = read_request(d, ctx)
    p = place(d, req, hw, "h", {}, ctx)
    return choose_features(catalog_profile(model), req, p, Precision(None, "bfloat16", False), seqs, 8192, "auto", None, ctx), ctx


def test_qwen3_gets_its_parsers_and_answers_without_thinking_by_default():
    feats, _ctx = features("Qwen/Qwen3-8B", "h200x1")
    assert (feats.reasoning, feats.tools) == ("qwen3", "hermes")
    assert json.loads(feats.thinking_kwargs) == {"enable_thinking": False}
    feats, _ctx = features("Qwen/Qwen3-8B", "h200x1", workload={"thinking": True, "tools": False})
    assert (feats.tools, feats.thinking_kwargs) == (None, None)


def test_volta_forces_triton_attention():
    """FlashAttention and FlashInfer need sm80+; TRITON_ATTN runs on Volta (field reports 000/001)."""
    feats, _ctx = features("Qwen/Qwen3-8B", "dgx1_v100_32gb", version="0.19.1")
    assert feats.backend == "TRITON_ATTN"
    feats, _ctx = features("Qwen/Qwen3-8B", "h200x1")
    assert feats.backend is None


def test_a_moe_model_keeps_vllms_largest_capture_size():
    """vLLM captures min(2 x max_num_seqs, 512) by default; a MoE model's plan keeps 512 so its fused-MoE kernels compile at
    start-up, and says so."""
    feats, ctx = features("Qwen/Qwen3-30B-A3B", "h200x1", seqs=64)
    assert feats.capture == 512 and any(r["decision"] == "max_cudagraph_capture_size=512" for r in ctx.reasons)
    feats, _ctx = features("Qwen/Qwen3-8B", "h200x1", seqs=64)
    assert feats.capture is None
