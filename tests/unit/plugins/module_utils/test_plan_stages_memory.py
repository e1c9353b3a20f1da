"""_plan.memory and _plan.sizer on their own: the KV pool's pages, the tokens in flight, the GPU budget, the Sizer."""

from __future__ import annotations

import dataclasses

from ansible_collections.llmfleet.serving.plugins.module_utils._hardware import validate_hardware
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._models import catalog_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.base import GIB, Ctx
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.inputs import check_deployments, read_request
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.memory import BLOCK_SIZE, in_flight_tokens, kv_pool, state_pages
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.sizer import Sizer, forced_seqs, gpu_budget
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.topology import place

QWEN3_8B = catalog_profile("Qwen/Qwen3-8B")


def test_a_dense_kv_pool_is_bytes_per_token_in_whole_blocks():
    """Qwen3-8B's config.json: 36 layers, 8 KV heads of 128: K and V in bf16 are 2 x 36 x 8 x 128 x 2 = 147456 B a token;
    one GiB holds 7281.7 of them, in whole 16-token blocks 455 blocks = 7280 tokens."""
    pool = kv_pool(QWEN3_8B, 1, GIB, 2, 2, 0)
    assert pool.kv_per_token == 2 * 36 * 8 * 128 * 2 == 147456
    assert (pool.block_size, pool.num_blocks, pool.tokens) == (BLOCK_SIZE, 455, 7280)
    assert pool.longest() == 7280 and pool.fits(7280) and not pool.fits(7281)
    halved = kv_pool(QWEN3_8B, 2, GIB, 2, 2, 0)                      # TP=2 splits the 8 KV heads: half the bytes a token
    assert halved.kv_per_token == 147456 // 2 and halved.tokens == 910 * 16      # 2**30 / (16 x 73728 B) = 910.2 blocks


def test_tokens_in_flight_follow_async_scheduling():
    """vLLM 0.26+: two batches in flight on GPUs (asynchronous scheduling), one on the CPU platform and before 0.26."""
    assert in_flight_tokens(8192, (0, 26, 0), True) == 16384
    assert in_flight_tokens(8192, (0, 26, 0), False) == in_flight_tokens(8192, (0, 25, 1), True) == 8192


def test_a_dense_model_holds_one_state_page():
    assert state_pages(QWEN3_8B, (0, 33, 0)) == 1


def plan_inputs(overrides=None, version="0.26.0"):
    hw = validate_hardware(hardware_profile("h200x1"), source="test")
    [d] = check_deployments([{"name": "d", "model": "Qwen/Qwen3-8B", "engine": {"version": version},
                              "overrides": overrides or {}}], "h")
    req = read_request(d, Ctx([]))
    return req, place(d, req, hw, "h", {}, Ctx([]))


def test_the_budget_is_vllms_default_utilization_or_the_forced_one():
    req, p = plan_inputs()
    ctx = Ctx([])
    budget = gpu_budget(req, p, False, ctx)
    assert budget.util == 0.92 and budget.gpu_mib == p.accs[0]["memory_mib"]   # vLLM 0.26's default (engine/arg_utils.py)
    req, p = plan_inputs({"gpu_memory_utilization": 0.5})
    assert gpu_budget(req, p, False, Ctx([])).util == 0.5


def test_the_sizer_caps_auto_at_the_context_and_keeps_a_declared_length():
    req, p = plan_inputs({"max_num_seqs": 16})
    budget = gpu_budget(req, p, False, Ctx([]))
    assert forced_seqs(req) == 16
    auto = Sizer(QWEN3_8B, p.vendor, dataclasses.replace(req, max_model_len="auto"), budget, "bfloat16", False, forced_seqs(req), p.cc)
    mem, seqs, max_model_len = auto.evaluate(1, "auto")
    assert seqs == 16 and max_model_len == QWEN3_8B.max_position_embeddings == 40960      # a 141 GB card holds the context
    assert mem.weights == QWEN3_8B.weight_bytes
    declared = Sizer(QWEN3_8B, p.vendor, dataclasses.replace(req, max_model_len=1000), budget, "bfloat16", False, None, p.cc)
    assert declared.evaluate(1, "auto")[2] == 1000 and declared.fits(1, "auto")
