# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Stage 6 on GPUs (the budget) and the Sizer: one instance's memory at a TP and KV dtype, as stages 7 and 8 compare it."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional, Tuple

from .._engine import cudagraph_memory_counted, default_batching, default_gpu_memory_utilization, vstr
from .._models import DTYPE_BYTES, ModelProfile
from .base import GIB, MIB, Ctx
from .memory import (
    CUDAGRAPH_GIB, NON_TORCH_GIB, VISIBLE_FRACTION, Memory, cudagraph_capture_size, gdn_prefill_checkpoint, memory_model,
)
from .stages import Budget, Placement, Request


def gpu_budget(req: Request, p: Placement, eager: bool, ctx: Ctx) -> Budget:
    """Stage 6 (GPUs): the memory vLLM may use on each GPU (gpu_memory_utilization) and its batching defaults there."""
    o, version = req.overrides, req.version
    gpu_mib = p.accs[0]["memory_mib"]
    gpu_bytes = gpu_mib * MIB * VISIBLE_FRACTION
    batched_default, seqs_default = default_batching(version, gpu_mib, "A100" in p.accs[0]["model"])
    max_batched = int(o.get("max_num_batched_tokens", batched_default))
    util_default = default_gpu_memory_utilization(version)
    if "gpu_memory_utilization" in o:
        util = float(o["gpu_memory_utilization"])
        ctx.why(f"gpu_memory_utilization={util}", "forced by overrides")
    elif not eager and not cudagraph_memory_counted(version):
        headroom = (CUDAGRAPH_GIB + 0.5) * GIB / gpu_bytes
        util = min(util_default, math.floor((1 - headroom) * 100) / 100)
        ctx.why(f"gpu_memory_utilization={util}", f"vLLM {vstr(version)} keeps CUDA graphs ({CUDAGRAPH_GIB} GiB) outside the budget: "
                f"the rest of the {gpu_mib / 1024:.0f} GiB card must hold them, plus 0.5 GiB that is not measured: it covers the "
                "1.15 GiB the largest graph pool reached on the H200 (tests/fixtures/gpu, hybrid model at vLLM's defaults) and "
                "the allocator's slack during capture, and costs 0.5 GiB of KV cache")
    else:
        util = util_default
        ctx.why(f"gpu_memory_utilization={util}", f"vLLM {vstr(version)}'s default" +
                (" (it counts CUDA graphs inside the budget)" if cudagraph_memory_counted(version) else ""))
    return Budget(gpu_mib, gpu_bytes, util, max_batched, seqs_default)


# max_model_len: auto (issue 34). The layout is chosen to hold the declared concurrency at AUTO_MIN_LEN tokens first (or the
# model's own context where that is shorter), then the length is the longest at which the instance holds its share of the
# declared requests at once. 8,192 tokens: a chat turn with a system prompt, tool schemas and some history, or a RAG prompt
# of several retrieved chunks plus the answer, fits in it, and it is what vLLM itself treats as a working length: the
# OpenAI server's default max_num_batched_tokens on GPUs (engine/arg_utils.py get_batch_defaults, 0.32.0), the Llama 3
# pretraining context (original_max_position_embeddings 8192). Agent loops want more; they declare workload.max_model_len.
AUTO_MIN_LEN = 8192
# Then the length: a wider TP (fewer replicas) is taken for the length it gives only while the narrower layout's length is
# below this - 32,768 tokens, the native context of current open models (Qwen3's config before YaRN) and room for an agent's
# or a coding session's long prompt; past it replicas serve a throughput goal better than more length. A judgment, not a
# measurement (no lease compared the two).
AUTO_LONG_LEN = 32768
# The part of the estimated KV pages an auto length leaves unplanned: the memory model lies within 5 % of vLLM's KV tokens on
# every H200 run that logged them (41 rows, docs/benchmarks/h200.md; the worst over-estimate +2.7 %, vLLM's defaults on a
# hybrid model), all at TP=1 and without a multimodal encoder; TP>1 communication buffers (NCCL, custom all-reduce: the
# NCCL_GIB allowance) and the encoder's profiling pass are not measured. A length planned at exactly the estimate would fail
# vLLM's start-up check (one request of max_model_len must fit) on any over-estimate; 5 % covers the measured spread.
AUTO_KV_MARGIN = 0.05


def auto_floor(m: ModelProfile) -> int:
    """The useful length an auto layout must hold the declared concurrency at: AUTO_MIN_LEN, or the model's context."""
    return min(AUTO_MIN_LEN, m.max_position_embeddings)


def auto_length(m: ModelProfile, mem: Memory, needed: int) -> Tuple[int, str]:
    """max_model_len under auto for one instance that should hold `needed` requests, within 1 - AUTO_KV_MARGIN of its pages:
    ("load") the longest at which all `needed` fit, when that reaches the floor; else ("floor") the floor, when one request of
    it fits; else ("short") the longest single request (below the floor: the plan warns)."""
    floor, fraction = auto_floor(m), 1 - AUTO_KV_MARGIN
    at_load = mem.longest_held(needed, fraction, m.max_position_embeddings)
    if at_load >= floor:
        return at_load, "load"
    if mem.longest_held(1, fraction, m.max_position_embeddings) >= floor:
        return floor, "floor"
    return mem.longest_held(1, fraction, m.max_position_embeddings) or min(m.max_position_embeddings, mem.longest()), "short"


def forced_seqs(req: Request) -> Optional[int]:
    """overrides.max_num_seqs, the one admission cap the Sizer applies instead of vLLM's default."""
    return int(req.overrides["max_num_seqs"]) if "max_num_seqs" in req.overrides else None


def stage_view(m: ModelProfile, pp: int) -> ModelProfile:
    """The largest pipeline stage of m as one GPU column holds it: ceil(layers / pp) decoder layers (vLLM's get_pp_indices
    splits them evenly, the remainder to the last stages) plus one vocabulary matrix (the first stage's embeddings or the
    last's LM head); the KV cache then holds only those layers."""
    if pp <= 1:
        return m
    layers = m.num_layers
    per_stage = math.ceil(layers / pp)
    vocab = m.vocab_size * m.hidden_size * DTYPE_BYTES.get(m.torch_dtype, 2)
    embeddings = vocab * (1 if m.tie_word_embeddings else 2)
    body = max(0, m.weight_bytes - embeddings)

    def share(count: int) -> int:
        return min(count, math.ceil(count * per_stage / layers))

    # a MoE model's dense-MLP layers (DeepSeek's first_k_dense_replace) are lighter: the heaviest stage is counted as if the
    # body were in its expert layers alone
    heavy = layers - m.dense_mlp_layers if m.is_moe and 0 < m.dense_mlp_layers < layers else layers
    weight_bytes = int(body * min(per_stage, heavy) / heavy + vocab)
    return replace(m, num_layers=per_stage, full_attention_layers=share(m.full_attention_layers),
                   sliding_layers=share(m.sliding_layers), chunked_layers=share(m.chunked_layers),
                   dense_mlp_layers=0 if heavy != layers else share(m.dense_mlp_layers), weight_bytes=weight_bytes,
                   checkpoint_bytes=int(m.checkpoint_bytes * weight_bytes / m.weight_bytes) if m.checkpoint_bytes else 0)


def loads(m: ModelProfile, tp: int, budget: Budget, pp: int = 1) -> bool:
    """Whether one GPU of TP=tp (the largest pipeline stage) holds the checkpoint's bytes while vLLM loads them. For weights
    quantized at load (_plan.levers) that is the 16-bit checkpoint: vLLM's online FP8 created the 16-bit weights on the GPU
    and quantized them after the whole model had loaded (the FP8 guide's "you need enough memory to load the whole model",
    vLLM issue #4387) until PR #31914 (2026-01) streamed it, and 0.13/0.14 peaked higher still (PR #32773); the planner
    does not rely on the release. Any other plan holds its weights as loaded."""
    stage = stage_view(m, pp)
    if not stage.checkpoint_bytes:
        return True
    return stage.checkpoint_bytes / tp + NON_TORCH_GIB * GIB <= budget.gpu_bytes * budget.util


@dataclass(frozen=True)
class Sizer:
    """One instance's memory at a TP and KV dtype, with the admission rule applied: what stages 7 and 8 compare."""
    m: ModelProfile
    vendor: str
    req: Request                   # the engine version and max_model_len (tokens, or "auto"), read where they are used
    budget: Budget
    dtype: str
    eager: bool
    forced_seqs: Optional[int]
    cc: int = 0                    # NVIDIA compute capability x 10 (gdn_prefill_checkpoint)
    cuda: Optional[str] = None     # the image's CUDA level (gdn_prefill_checkpoint); None: the official image's

    def evaluate(self, tp: int, kv_dtype: str, pp: int = 1) -> Tuple[Memory, int, int]:
        """Memory, max_num_seqs and max_model_len of one instance. max_num_seqs (admission) is vLLM's default unless the
        inventory forces one: a cap must pay for itself in a measurement, and on the H200 the cap at what the KV cache
        holds did not (ADMISSION_EVIDENCE). max_model_len is the declared one, or for auto the longest the KV cache holds."""
        b = self.budget
        seqs = self.forced_seqs if self.forced_seqs is not None else b.seqs_default
        version, declared = self.req.version, self.req.max_model_len
        capture, _emit = cudagraph_capture_size(self.m, self.vendor, version, seqs, b.max_batched, self.eager)
        mem = memory_model(stage_view(self.m, pp), tp, b.gpu_bytes, b.util, version, self.dtype, kv_dtype, seqs, b.max_batched, self.eager, capture,
                           gdn_prefill_checkpoint(self.m, version, self.vendor, self.cc, self.cuda))
        max_model_len = min(self.m.max_position_embeddings, mem.longest()) if declared == "auto" else int(declared)
        return mem, seqs, max_model_len

    def fits(self, tp: int, kv_dtype: str, pp: int = 1) -> bool:
        mem, _seqs, max_model_len = self.evaluate(tp, kv_dtype, pp)
        return max_model_len > 0 and mem.fits(max_model_len) and loads(self.m, tp, self.budget, pp)

    def for_load(self, tp: int, kv_dtype: str, needed: int, fp8_allowed: bool, pp: int = 1) -> Tuple[Memory, int, int, str]:
        """One instance at TP=tp that should hold `needed` requests: in kv_dtype, or in fp8 where kv_dtype is auto, fp8
        is allowed, the model's dtype holds fewer than `needed` and fp8 holds more. Stage 7 weighs the TP sizes with this
        and stage 8 sizes the chosen one with it, so both take the same fp8 decision. Under auto the requests are counted
        at the floor (auto_floor) within the margin (AUTO_KV_MARGIN), as the length is then planned."""
        mem, seqs, max_model_len = self.evaluate(tp, kv_dtype, pp)
        if self.req.max_model_len == "auto":
            at, fraction = auto_floor(self.m), 1 - AUTO_KV_MARGIN
        else:
            at, fraction = max_model_len, 1.0
        if kv_dtype == "auto" and fp8_allowed and mem.held_at(at, fraction) < needed:
            mem8, seqs8, max_model_len8 = self.evaluate(tp, "fp8", pp)
            if mem8.held_at(at, fraction) > mem.held_at(at, fraction):
                return mem8, seqs8, max_model_len8, "fp8"
        return mem, seqs, max_model_len, kv_dtype
