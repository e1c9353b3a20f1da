# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The speed levers vLLM's defaults leave alone, weighed per deployment from the declared workload and what the inventory
permits (workload.quality): each pulled or not with its reason (docs/planner.md#speed-levers).

- FP8 weights at load: `--quantization fp8` on a 16-bit checkpoint (weights_at_load);
- the KV cache in fp8 where it outweighs the weights (kv_for_speed);
- speculative decoding and the fused-MoE kernel's tuned configs, said and not pulled (unpulled)."""

from __future__ import annotations

import math
from dataclasses import asdict, replace
from typing import Tuple

from .._models import DTYPE_BYTES, ModelProfile, estimate_weight_bytes, kv_bytes_per_token
from .base import Ctx
from .sharding import fp8_kv_sound, tp_choices
from .sizer import loads
from .stages import Budget, Layout, Placement, Precision, Request

# Measured on the lent H200 before the levers (vLLM 0.26.0, dummy weights, 512 prompt + 128 output tokens, the defaults run
# twice; docs/benchmarks/h200.md, "Speed levers"): output tok/s of `--quantization fp8` over vLLM's defaults at
# concurrency 1 / 32 / 128.
FP8_MEASURED = ("on the H200 (vLLM 0.26, Qwen3-8B dense: 1.40x / 1.23-1.26x / 0.91-0.98x at 1 / 32 / 128 requests; "
                "Qwen3-30B-A3B MoE: 0.98x / 2.4-2.9x / 1.5-1.9x; docs/benchmarks/h200.md)")
# vLLM's FP8 W8A8 GEMMs need FP8 tensor cores: platforms/cuda.py has_device_capability(89) (supports_fp8); below it
# quantization/fp8.py runs the weights through Marlin W8A16 (weight-only), which no lease here measured.
FP8_GEMM_MIN_CC = 89
# Past this many declared requests per GPU the dense model lost with FP8 weights (0.91-0.98x at 128 on one H200, a gain at
# 32); between the two nothing was measured, and the rule takes the middle.
FP8_DENSE_MAX_PER_GPU = 64
# A MoE decode step reads only the experts its tokens were routed to. FP8 weights paid where a step read most of them
# (Qwen3-30B-A3B, 8 of 128 experts a token: 2.4-2.9x at 32 requests, about 87 % of the experts read) and not at one request
# (0.98x, 6 %); at 32 the bf16 step follows the bytes read (16 ms a token on the H200, where about 50 GiB at 4.8 TB/s take
# 11 ms; 21 ms on the H100 at 3.35 TB/s, 16 ms, session 31). Between 6 % and 87 % nothing was measured: half is a choice.
FP8_MOE_MIN_EXPERTS_READ = 0.5


def experts_read(m: ModelProfile, requests: int) -> float:
    """The share of a MoE layer's experts one decode step of `requests` sequences reads, with each token sent to k of E
    experts and the experts hit evenly: 1 - (1 - k/E)^requests (1.0 for a dense model: every weight is read every step)."""
    if not m.num_experts or not m.experts_per_token:
        return 1.0
    return 1.0 - (1.0 - m.experts_per_token / m.num_experts) ** max(requests, 1)


def _fp8_profile(m: ModelProfile) -> ModelProfile:
    """The profile of the weights vLLM holds after quantizing a 16-bit checkpoint at load: every linear layer of the decoder
    in FP8 with a per-tensor scale (quantization/fp8.py Fp8LinearMethod / Fp8MoEMethod, dynamic activation scales); the
    embeddings and the LM head (a VocabParallelEmbedding, not a linear layer: "all Linear modules (except for the final
    lm_head)", vLLM's FP8 guide) stay in the checkpoint's dtype, and so does the MoE router here (Qwen3-MoE builds it with
    quant_config=None, models/qwen3_moe.py; families that quantize it differ by a few MB). The file's own byte count is
    scaled by the estimate's ratio, so a listed size keeps its calibration; `checkpoint_bytes` keeps what the load reads."""
    params = asdict(m)
    full = estimate_weight_bytes(params)
    fp8 = estimate_weight_bytes(dict(params, quant_method="fp8", quant_bits=8, weight_block_size=None, quant_lm_head=False,
                                     quant_unquantized={"router": 1.0}))
    weight_bytes = int(m.weight_bytes * fp8 / full) if full else m.weight_bytes
    return replace(m, quant_method="fp8", quant_bits=8, weight_block_size=None, weight_bytes=weight_bytes, checkpoint_bytes=m.weight_bytes,
                   weight_bytes_source=f"{m.weight_bytes_source}, x {fp8 / full:.3f} for FP8 linear layers quantized at load")


def _weights_refusal(m: ModelProfile, req: Request, p: Placement, precision: Precision) -> str:
    """Why the weights lever is not pulled, or "" where it is (quality permitting)."""
    if req.overrides.get("quantization"):
        return f"overrides.quantization={req.overrides['quantization']} decides the weights"
    if m.quant_method is not None or precision.quant is not None:
        return f"{m.id} is already quantized ({precision.quant or m.quant_method})"
    if DTYPE_BYTES.get(precision.dtype, 2) != 2 or precision.dtype not in ("bfloat16", "float16"):
        return f"the plan runs {precision.dtype}; vLLM's FP8 kernels take 16-bit activations"
    if p.vendor != "nvidia" or p.cc < FP8_GEMM_MIN_CC:
        where = f"sm{p.cc}" if p.vendor == "nvidia" else f"{p.vendor} {p.arch}"
        return (f"{where}: vLLM runs FP8 W8A8 GEMMs on NVIDIA sm{FP8_GEMM_MIN_CC}+ (platforms/cuda.py supports_fp8); elsewhere "
                "its FP8 path is weight-only or unmeasured here, so no speed is claimed")
    per_gpu = req.concurrency / len(p.gpus)
    if req.goal == "throughput" and not m.is_moe and per_gpu > FP8_DENSE_MAX_PER_GPU:
        return (f"{req.concurrency} requests over {len(p.gpus)} GPU(s) are {per_gpu:.0f} per GPU, past the {FP8_DENSE_MAX_PER_GPU} "
                "where a dense model stopped gaining: 0.91-0.98x at 128 on one H200 (Qwen3-8B), 1.23-1.26x at 32")
    return ""


def experts_refusal(m: ModelProfile, req: Request, layout: Layout) -> str:
    """Why FP8 weights do not pay for a MoE model in the layout chosen with them, or "": each instance's share of the
    declared requests makes a decode step that reads experts_read of the experts (compose weighs it once the layout is
    known, and lays the model out again in 16 bits where it refuses)."""
    if not m.is_moe:
        return ""
    if not m.experts_per_token:
        return (f"{m.id}'s config.json does not say how many of its {m.num_experts} experts a token is sent to "
                "(num_experts_per_tok), so the share a decode step reads, and with it what FP8 weights buy, is unknown")
    share = math.ceil(req.concurrency / layout.instances)
    read = experts_read(m, share)
    if read >= FP8_MOE_MIN_EXPERTS_READ:
        return ""
    return (f"{req.concurrency} request(s) over {layout.instances} instance(s) of TP={layout.tp} are up to {share} an instance; "
            f"each token goes to {m.experts_per_token} of {m.num_experts} experts, so a decode step reads about {read:.0%} of the "
            "expert weights: the step is not bound by the weights' bytes, and FP8 weights gave 0.98x at one request (6 % of the "
            "experts) on the H200 against 2.4-2.9x at 32 (87 %; Qwen3-30B-A3B)")


def weights_at_load(m: ModelProfile, req: Request, p: Placement, precision: Precision, budget: Budget,
                    ctx: Ctx) -> Tuple[ModelProfile, Precision]:
    """FP8 weights for a 16-bit checkpoint, quantized by vLLM at load (`--quantization fp8`): about half the weight bytes, so
    a decode step reads half as much and the KV cache gets the rest. It changes the outputs (per-tensor FP8 rounding of every
    linear layer), so only `workload.quality: fp8` permits it, and only where it was measured to pay. Returns the profile the
    memory model then sizes (its weights in FP8, the 16-bit bytes kept for the load: Sizer.fits takes only a TP that loads
    them) and the precision, unchanged where the lever is not pulled."""
    if req.quality != "fp8" or not p.accs:
        return m, precision
    lever = "quantization=fp8 (at load)"
    refusal = _weights_refusal(m, req, p, precision)
    fp8 = _fp8_profile(m) if not refusal else m
    if not refusal and not any(loads(fp8, t, budget) for t in tp_choices(m, len(p.gpus))):
        refusal = (f"no TP up to {len(p.gpus)} holds the {m.weight_bytes / 2 ** 30:.1f} GiB of 16-bit weights per GPU while vLLM "
                   "loads them (it quantizes after loading on the releases before PR #31914): use an FP8 checkpoint of the model")
    if refusal:
        ctx.why(f"{lever}: not pulled", refusal)
        return m, precision
    ctx.why(lever, f"workload.quality fp8 permits it: vLLM quantizes {m.id}'s linear layers to FP8 at load (dynamic activation "
            f"scales, vLLM's FP8 guide), {m.weight_bytes / 2 ** 30:.1f} -> {fp8.weight_bytes / 2 ** 30:.1f} GiB of weights: decode "
            f"reads half the bytes and the KV cache gets the rest; only a TP whose GPUs hold the 16-bit weights while they load "
            f"is taken; measured over vLLM's defaults {FP8_MEASURED}")
    return fp8, replace(precision, quant="fp8", at_load=True)


def kv_for_speed(m: ModelProfile, req: Request, p: Placement, layout: Layout, ctx: Ctx) -> Layout:
    """fp8 KV as a speed lever, once the layout is known: under `workload.quality: fp8` and the throughput goal, where one
    instance's share of the declared requests at max_model_len holds at least as many KV bytes as the instance's weights, so
    that the KV is most of what a full decode step reads (each step reads every weight once and each running request's KV
    once); fp8 halves it. The layout was chosen with 16-bit KV, so fp8 only adds room. For the latency goal a single
    stream's KV is small next to the weights, and the plan leaves the KV dtype to the fit rules."""
    if req.quality != "fp8" or layout.kv_dtype != "auto" or req.overrides.get("kv_cache_dtype") or not p.accs:
        return layout
    lever = "kv_cache_dtype=fp8 (for speed)"
    if not fp8_kv_sound(p, m, req.version):
        ctx.why(f"{lever}: not pulled", f"fp8 KV is not sound for {m.id} on {p.arch if p.vendor != 'nvidia' else f'sm{p.cc}'}")
        return layout
    if req.goal != "throughput":
        ctx.why(f"{lever}: not pulled", "the goal is latency: one stream's KV is small next to the weights, so fp8 KV buys little "
                "there and costs a conversion on every write")
        return layout
    length = 8192 if req.max_model_len == "auto" else int(req.max_model_len)
    share = math.ceil(req.concurrency / layout.instances)
    kv = share * length * kv_bytes_per_token(m, 1, 2)
    weights = m.weight_bytes
    held = f"{share} request(s) per instance x {length} tokens hold {kv / 2 ** 30:.1f} GiB of KV in 16 bits"
    if kv < weights:
        ctx.why(f"{lever}: not pulled", f"{held}, less than the {weights / 2 ** 30:.1f} GiB of weights every decode step reads: "
                "halving the KV would buy less than a third of a step")
        return layout
    ctx.why("kv_cache_dtype=fp8", f"workload.quality fp8 permits it and the load is KV-bound: {held} against "
            f"{weights / 2 ** 30:.1f} GiB of weights, and a decode step reads both; fp8 halves the KV's bytes and doubles the "
            "tokens the cache holds")
    return replace(layout, kv_dtype="fp8")


def unpulled(m: ModelProfile, req: Request, p: Placement, budget: Budget, ctx: Ctx) -> None:
    """The levers the plan names for the latency goal and leaves to the operator, with why: speculative decoding gains by its
    acceptance rate, which depends on the weights and the traffic, and its draft's memory is not in the memory model; the
    prefill chunk budget trades one prompt's first token against the other streams' next ones, by the traffic's prompts."""
    if req.goal != "latency" or not p.accs:
        return
    if not req.overrides.get("max_num_batched_tokens"):
        ctx.why(f"max_num_batched_tokens={budget.max_batched} (vLLM's default): kept", "with chunked prefill each engine step "
                f"carries up to {budget.max_batched} tokens, a long prompt's chunk beside every running stream's next token: a "
                "smaller budget (overrides.max_num_batched_tokens: 2048) keeps a long prompt from stretching the others' "
                "inter-token time and makes that prompt's first token later, a larger one the reverse (vLLM's Optimization and "
                "Tuning guide, Chunked Prefill). Which one the latency goal wants depends on how long your prompts are, which "
                "the inventory does not say, and no lease here measured it (the GPU runs use 512-token prompts, inside any "
                "budget): compare both with playbooks/bench.yml, whose result files hold the ITL p99")
    heads = m.mtp_layers
    if heads:
        ctx.why("speculative decoding (MTP): not pulled", f"{m.id} ships {heads} multi-token-prediction layer(s) vLLM can draft with "
                "(extra_args --speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 1}'); the outputs keep their "
                "distribution, but the gain is the acceptance rate, which only the real weights on your traffic show, and the "
                "draft's weights and KV are not in this plan's memory: try it and compare with playbooks/bench.yml")
    else:
        ctx.why("speculative decoding: not pulled", "the latency goal could draft with n-grams of the prompt (extra_args "
                "--speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 4, \"prompt_lookup_max\": 4}'), which "
                "pays only where answers repeat their prompt (code edits, extraction): measure it on your traffic")
