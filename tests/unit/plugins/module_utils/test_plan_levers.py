"""Issue 39: the speed levers vLLM's defaults leave alone, each pulled or not by a rule with its reason, and never one that
changes the outputs unless the inventory's workload.quality permits it (docs/planner.md#speed-levers). The H200 rows that
measure them are in docs/benchmarks/h200.md ("Speed levers") and tests/fixtures/gpu."""

from __future__ import annotations

import json
import pathlib

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._models import catalog_profile, profile_from_config
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import PlanError, plan_host
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.levers import FP8_MOE_MIN_EXPERTS_READ, _fp8_profile, experts_read

from llmfleet_testing import accepting

ROOT = pathlib.Path(__file__).resolve().parents[4]
FIXTURES = ROOT / "tests" / "fixtures" / "models"
GIB = 2 ** 30


def dep(model, goal="throughput", quality=None, concurrency=32, max_model_len=8192, version="0.26.0", **extra):
    workload = {"max_model_len": max_model_len, "concurrency": concurrency, "goal": goal}
    if quality is not None:
        workload["quality"] = quality
    return {"name": "d", "model": model, "engine": accepting(version), "workload": workload, **extra}


def plan_of(host, *deps):
    plan = plan_host(host, hardware_profile(host), list(deps))
    assert plan["errors"] == [], plan["errors"]
    return plan["deployments"][0]


def only(plan):
    [inst] = plan["instances"][:1]
    return inst


def flag(args, name):
    return args[args.index(name) + 1] if name in args else None


def decisions(plan):
    return {r["decision"]: r["why"] for r in plan["reasons"]}


def test_exact_quality_is_the_default_and_pulls_no_lever_that_changes_outputs():
    """Without workload.quality the plan is the one it was: the same command line as quality: exact, no --quantization
    for a bf16 checkpoint, no fp8 KV where bf16 holds the load (vLLM's defaults plus parsers on the H200)."""
    default = plan_of("h200x1", dep("Qwen/Qwen3-8B"))
    exact = plan_of("h200x1", dep("Qwen/Qwen3-8B", quality="exact"))
    assert only(default)["args"] == only(exact)["args"]
    args = only(default)["args"]
    assert "--quantization" not in args and "--kv-cache-dtype" not in args
    assert not [d for d in decisions(default) if "(at load)" in d or "(for speed)" in d]


def test_fp8_quality_quantizes_a_bf16_checkpoint_at_load_on_hopper():
    exact = only(plan_of("h200x1", dep("Qwen/Qwen3-8B")))
    plan = plan_of("h200x1", dep("Qwen/Qwen3-8B", quality="fp8"))
    inst = only(plan)
    assert flag(inst["args"], "--quantization") == "fp8"
    assert inst["args"].index("--quantization") > inst["args"].index("--dtype")
    assert flag(inst["args"], "--dtype") == "bfloat16"          # activations stay 16-bit: FP8 W8A8 takes them
    assert inst["quantization"] == "fp8"
    # every linear layer in one byte, embeddings and LM head in two: Qwen3-8B's 15.3 GiB become about 8.8
    weights = inst["memory"]["weights_gib_per_gpu"]
    assert 8.5 <= weights <= 9.0, weights
    assert exact["memory"]["weights_gib_per_gpu"] - weights > 6
    why = decisions(plan)["quantization=fp8 (at load)"]
    assert "workload.quality fp8 permits it" in why and "measured" in why
    # the start still reads the 16-bit checkpoint from disk: the health gate waits as long as for the exact plan
    assert inst["startup_budget_s"] == exact["startup_budget_s"]


def test_fp8_weights_leave_the_kv_cache_the_freed_memory():
    exact = only(plan_of("h200x1", dep("Qwen/Qwen3-8B", goal="latency")))
    fp8 = only(plan_of("h200x1", dep("Qwen/Qwen3-8B", goal="latency", quality="fp8")))
    freed = exact["memory"]["weights_gib_per_gpu"] - fp8["memory"]["weights_gib_per_gpu"]
    gained = fp8["memory"]["kv_cache_gib_per_gpu"] - exact["memory"]["kv_cache_gib_per_gpu"]
    assert abs(gained - freed) < 0.05, (gained, freed)


def test_throughput_goal_keeps_a_kv_bound_load_in_fp8_and_says_the_bytes():
    """32 requests x 8,192 tokens of Qwen3-8B's KV (144 KiB a token in 16 bits) are 36 GiB against 8.8 GiB of FP8
    weights: a full decode step reads mostly KV, so fp8 KV halves most of the step's bytes."""
    plan = plan_of("h200x1", dep("Qwen/Qwen3-8B", quality="fp8"))
    inst = only(plan)
    assert flag(inst["args"], "--kv-cache-dtype") == "fp8"
    why = decisions(plan)["kv_cache_dtype=fp8"]
    assert "36.0 GiB of KV" in why and "8.8 GiB of weights" in why
    latency = only(plan_of("h200x1", dep("Qwen/Qwen3-8B", goal="latency", quality="fp8")))
    assert inst["memory"]["kv_cache_tokens"] > 1.9 * latency["memory"]["kv_cache_tokens"]


def test_latency_goal_leaves_the_kv_cache_in_16_bits():
    plan = plan_of("h200x1", dep("Qwen/Qwen3-8B", goal="latency", quality="fp8"))
    assert "--kv-cache-dtype" not in only(plan)["args"]
    assert "goal is latency" in decisions(plan)["kv_cache_dtype=fp8 (for speed): not pulled"]


def test_a_load_whose_kv_is_smaller_than_the_weights_keeps_16_bit_kv():
    """Qwen3-30B-A3B: 4 KV heads x 48 layers, 96 KiB a token; 32 x 8,192 tokens are 24 GiB, below its 29 GiB of FP8 weights."""
    plan = plan_of("h200x1", dep("Qwen/Qwen3-30B-A3B", quality="fp8"))
    inst = only(plan)
    assert flag(inst["args"], "--quantization") == "fp8" and "--kv-cache-dtype" not in inst["args"]
    why = decisions(plan)["kv_cache_dtype=fp8 (for speed): not pulled"]
    assert "24.0 GiB of KV" in why and "29.0 GiB of weights" in why
    # four times the requests make it KV-bound
    busy = only(plan_of("h200x1", dep("Qwen/Qwen3-30B-A3B", quality="fp8", concurrency=128)))
    assert flag(busy["args"], "--kv-cache-dtype") == "fp8"


@pytest.mark.parametrize("host,where,version,gpus", [("a100_sxm_8x_80gb", "sm80", "0.26.0", 1), ("dgx1_v100_32gb", "sm70", "0.19.1", 1),
                                                     ("t4x4", "sm75", "0.26.0", 4)])
def test_no_fp8_gemm_no_fp8_weights(host, where, version, gpus):
    plan = plan_of(host, dep("Qwen/Qwen3-8B", quality="fp8", max_model_len=4096, concurrency=4, gpus=gpus, version=version))
    inst = only(plan)
    assert "--quantization" not in inst["args"]
    assert where in decisions(plan)["quantization=fp8 (at load): not pulled"]


def test_an_already_quantized_checkpoint_and_a_forced_quantization_are_left_alone():
    plan = plan_of("h200x1", dep("Qwen/Qwen3-8B-FP8", quality="fp8"))
    assert "already quantized" in decisions(plan)["quantization=fp8 (at load): not pulled"]
    assert "(at load)" not in " ".join(d for d in decisions(plan) if "not pulled" not in d)
    forced = plan_of("h200_sxm_8x", dep("Qwen/Qwen3-8B", quality="fp8", gpus=1, overrides={"quantization": "fp8"}))
    assert "overrides.quantization" in decisions(forced)["quantization=fp8 (at load): not pulled"]


def test_the_cpu_build_gets_no_lever():
    plan = plan_host("cpu1", {"accelerators": [], "cpu_count": 16, "memory_mib": 65536, "cpu_flags": ["avx512f", "avx512_bf16"]},
                     [dep("Qwen/Qwen3-0.6B", quality="fp8", concurrency=2, max_model_len=2048)])
    assert plan["errors"] == [], plan["errors"]
    inst = plan["deployments"][0]["instances"][0]
    assert "--quantization" not in inst["args"] and "--kv-cache-dtype" not in inst["args"]


@pytest.mark.parametrize("bad", ["int4", "FP8", True, ""])
def test_an_unknown_quality_is_refused_naming_the_value(bad):
    with pytest.raises(PlanError) as exc:
        plan_host("h200x1", hardware_profile("h200x1"), [dep("Qwen/Qwen3-8B", quality=bad)])
    assert f"workload.quality={bad!r}" in str(exc.value) and "set exact or fp8" in str(exc.value)


def test_fp8_profile_keeps_embeddings_head_and_router_in_16_bits():
    for model_id in ("Qwen/Qwen3-8B", "Qwen/Qwen3-30B-A3B"):
        m = catalog_profile(model_id)
        fp8 = _fp8_profile(m)
        head = m.vocab_size * m.hidden_size * (1 if m.tie_word_embeddings else 2) * 2
        router = (m.num_layers * m.hidden_size * m.num_experts * 2) if m.num_experts else 0
        # the rest halves: (all - 16-bit parts) / 2 + 16-bit parts, within the per-tensor scales' bytes
        expected = (m.weight_bytes - head - router) / 2 + head + router
        assert abs(fp8.weight_bytes - expected) / expected < 0.01, (model_id, fp8.weight_bytes, expected)
        assert fp8.quant_method == "fp8" and fp8.weight_block_size is None
        assert "quantized at load" in fp8.weight_bytes_source


def test_latency_goal_names_speculative_decoding_and_its_draft_heads_without_pulling_it():
    """Speculative decoding keeps the output distribution, but what it buys is the acceptance rate of the real weights on the
    real traffic (dummy weights accept nothing), and the draft's weights and KV are not in the memory model: said, not pulled."""
    glm = json.loads((FIXTURES / "glm-4.5-air.json").read_text())["config"]
    assert profile_from_config(glm, "zai-org/GLM-4.5-Air").mtp_layers == 1
    plan = plan_of("h200_sxm_8x", dep({"id": "zai-org/GLM-4.5-Air", "config": glm}, goal="latency"))
    why = decisions(plan)["speculative decoding (MTP): not pulled"]
    assert "ships 1 multi-token-prediction layer" in why and '"method": "mtp"' in why
    assert "--speculative-config" not in only(plan)["args"]
    dense = plan_of("h200x1", dep("Qwen/Qwen3-8B", goal="latency"))
    assert "ngram" in decisions(dense)["speculative decoding: not pulled"]
    assert not [d for d in decisions(plan_of("h200x1", dep("Qwen/Qwen3-8B"))) if d.startswith("speculative")]


def test_latency_goal_names_the_prefill_chunk_budget_it_keeps():
    """The chunk budget trades a long prompt's first token against the other streams' next ones: which way depends on the
    prompts' length, which no inventory field says, so the latency goal names it with vLLM's default and does not move it;
    an override is the operator's decision and is not named again."""
    plan = plan_of("h200x1", dep("Qwen/Qwen3-8B", goal="latency"))
    why = decisions(plan)["max_num_batched_tokens=8192 (vLLM's default): kept"]
    assert "overrides.max_num_batched_tokens: 2048" in why and "Chunked Prefill" in why
    assert "--max-num-batched-tokens" not in only(plan)["args"]
    assert not [d for d in decisions(plan_of("h200x1", dep("Qwen/Qwen3-8B"))) if d.startswith("max_num_batched_tokens")]
    forced = plan_of("h200x1", dep("Qwen/Qwen3-8B", goal="latency", overrides={"max_num_batched_tokens": 2048}))
    assert flag(only(forced)["args"], "--max-num-batched-tokens") == "2048"
    assert not [d for d in decisions(forced) if d.startswith("max_num_batched_tokens=8192")]


def test_fp8_weights_are_pulled_only_where_they_were_measured_to_pay():
    """A MoE model where a decode step reads few of its experts: 0.98x at one request (6 % of Qwen3-30B-A3B's experts) on the
    H200, 2.4-2.9x at 32 (87 %); a dense model past 64 declared requests per GPU: 0.91-0.98x at 128 on one H200 (1.23-1.26x at
    32). The same 128 requests over 8 GPUs are 16 per GPU."""
    moe = plan_of("h200x1", dep("Qwen/Qwen3-30B-A3B", goal="latency", quality="fp8"))
    assert flag(only(moe)["args"], "--quantization") == "fp8"
    one = plan_of("h200x1", dep("Qwen/Qwen3-30B-A3B", goal="latency", quality="fp8", concurrency=1))
    assert "--quantization" not in only(one)["args"]
    why = decisions(one)["quantization=fp8 (at load): not pulled"]
    assert "1 request(s) over 1 instance(s) of TP=1 are up to 1 an instance; each token goes to 8 of 128 experts" in why
    assert "about 6% of the expert weights" in why
    # the throughput goal too: 8 requests read 40 % of the experts a step
    eight = plan_of("h200x1", dep("Qwen/Qwen3-30B-A3B", quality="fp8", concurrency=8))
    assert "--quantization" not in only(eight)["args"]
    assert "about 40% of the expert weights" in decisions(eight)["quantization=fp8 (at load): not pulled"]
    busy = plan_of("h200x1", dep("Qwen/Qwen3-8B", quality="fp8", concurrency=128))
    assert "--quantization" not in only(busy)["args"]
    assert "128 per GPU, past the 64" in decisions(busy)["quantization=fp8 (at load): not pulled"]
    spread = plan_of("h200_sxm_8x", dep("Qwen/Qwen3-8B", quality="fp8", concurrency=128))
    assert all(flag(i["args"], "--quantization") == "fp8" for i in spread["instances"])


def test_a_moe_models_fp8_weights_are_weighed_in_the_layout_they_get():
    """The share of experts a step reads is an instance's: the same 32 requests on 8 H200 are one TP=8 instance under the
    latency goal (87 % of the experts a step: FP8 weights) and 8 instances under the throughput goal (4 each, 23 %: the
    model is laid out again in 16 bits, and only the refusal's reason is left of the FP8 attempt)."""
    latency = plan_of("h200_sxm_8x", dep("Qwen/Qwen3-30B-A3B", goal="latency", quality="fp8", concurrency=32))
    [inst] = latency["instances"]
    assert inst["tensor_parallel_size"] == 8 and flag(inst["args"], "--quantization") == "fp8"
    spread = plan_of("h200_sxm_8x", dep("Qwen/Qwen3-30B-A3B", quality="fp8", concurrency=32))
    assert len(spread["instances"]) == 8 and all("--quantization" not in i["args"] for i in spread["instances"])
    why = decisions(spread)["quantization=fp8 (at load): not pulled"]
    assert "32 request(s) over 8 instance(s) of TP=1 are up to 4 an instance" in why and "about 23% of the expert" in why
    assert "quantization=fp8 (at load)" not in decisions(spread)
    exact = plan_of("h200_sxm_8x", dep("Qwen/Qwen3-30B-A3B", concurrency=32))
    assert [i["args"] for i in spread["instances"]] == [i["args"] for i in exact["instances"]]
    assert [i["memory"] for i in spread["instances"]] == [i["memory"] for i in exact["instances"]]


def test_a_moe_model_whose_experts_per_token_is_unknown_keeps_its_weights():
    """A config without num_experts_per_tok (or another spelling the parser reads) leaves the share unknown: not pulled."""
    cfg = json.loads((FIXTURES / "mixtral-8x7b-instruct-v0.1.json").read_text())["config"]
    cfg = {k: v for k, v in cfg.items() if k != "num_experts_per_tok"}
    plan = plan_of("h200_sxm_8x", dep({"id": "lab/moe-no-k", "config": cfg}, quality="fp8", concurrency=64))
    assert all("--quantization" not in i["args"] for i in plan["instances"])
    assert "does not say how many of its 8 experts" in decisions(plan)["quantization=fp8 (at load): not pulled"]


def test_kimi_linear_spells_its_experts_per_token_its_own_way():
    cfg = json.loads((FIXTURES / "kimi-linear-48b-a3b.json").read_text())["config"]
    assert "num_experts_per_tok" not in cfg and profile_from_config(cfg, "moonshotai/Kimi-Linear-48B-A3B-Instruct").experts_per_token \
        == cfg["num_experts_per_token"] > 0


@pytest.mark.parametrize("requests, read", [(1, 0.0625), (11, 0.5083), (32, 0.8732), (128, 0.9997)])
def test_experts_read_by_a_decode_step(requests, read):
    """1 - (1 - k/E)^B for Qwen3-30B-A3B (k=8, E=128); a dense model reads every weight."""
    assert experts_read(catalog_profile("Qwen/Qwen3-30B-A3B"), requests) == pytest.approx(read, abs=1e-4)
    assert experts_read(catalog_profile("Qwen/Qwen3-8B"), 1) == 1.0
    assert experts_read(catalog_profile("Qwen/Qwen3-30B-A3B"), 10) < FP8_MOE_MIN_EXPERTS_READ <= experts_read(
        catalog_profile("Qwen/Qwen3-30B-A3B"), 11)


def test_the_kv_lever_weighs_one_instances_share():
    """32 requests over 8 instances (TP=1 on 8 H200) are 4 each: 4.5 GiB of KV against 8.8 GiB of weights, not KV-bound."""
    plan = plan_of("h200_sxm_8x", dep("Qwen/Qwen3-8B", quality="fp8", concurrency=32))
    assert len(plan["instances"]) == 8
    assert all("--kv-cache-dtype" not in i["args"] for i in plan["instances"])
    assert "4 request(s) per instance x 8192 tokens hold 4.5 GiB" in decisions(plan)["kv_cache_dtype=fp8 (for speed): not pulled"]


def test_only_a_tp_whose_gpus_hold_the_16_bit_weights_while_loading_is_taken():
    """Qwen3-235B-A22B: 16-bit weights of about 438 GiB. On 8 H100 (80 GB) FP8 weights alone would fit 4 GPUs, but the load
    holds the 16-bit weights first on the releases before vLLM PR #31914: only TP=8 loads them (55 GiB a GPU)."""
    plan = plan_of("h100_sxm_8x", dep("Qwen/Qwen3-235B-A22B", quality="fp8", concurrency=32))
    [inst] = plan["instances"]
    assert inst["tensor_parallel_size"] == 8 and flag(inst["args"], "--quantization") == "fp8"
    assert "16-bit weights while they load" in decisions(plan)["quantization=fp8 (at load)"]
    # on 4 of them no TP loads the 16-bit weights: the lever is not pulled, and the plan is refused as without it
    four = plan_host("h100_sxm_8x", hardware_profile("h100_sxm_8x"), [dep("Qwen/Qwen3-235B-A22B", quality="fp8", gpus=4)])
    why = {r["decision"]: r["why"] for r in four["deployments"][0]["reasons"]}
    assert "use an FP8 checkpoint" in why["quantization=fp8 (at load): not pulled"]
    exact = plan_host("h100_sxm_8x", hardware_profile("h100_sxm_8x"), [dep("Qwen/Qwen3-235B-A22B", gpus=4)])
    assert four["errors"] and [e.split(";")[0] for e in four["errors"]] == [e.split(";")[0] for e in exact["errors"]]
