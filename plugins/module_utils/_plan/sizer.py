# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Stage 6 on GPUs (the budget) and the Sizer: one instance's memory at a TP and KV dtype, as stages 7 and 8 compare it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Tuple

from .._engine import cudagraph_memory_counted, default_batching, default_gpu_memory_utilization, vstr
from .._models import ModelProfile
from .base import GIB, MIB, Ctx
from .memory import CUDAGRAPH_GIB, VISIBLE_FRACTION, Memory, cudagraph_capture_size, gdn_prefill_checkpoint, memory_model
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


def forced_seqs(req: Request) -> Optional[int]:
    """overrides.max_num_seqs, the one admission cap the Sizer applies instead of vLLM's default."""
    return int(req.overrides["max_num_seqs"]) if "max_num_seqs" in req.overrides else None


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

    def evaluate(self, tp: int, kv_dtype: str) -> Tuple[Memory, int, int]:
        """Memory, max_num_seqs and max_model_len of one instance. max_num_seqs (admission) is vLLM's default unless the
        inventory forces one: a cap must pay for itself in a measurement, and on the H200 the cap at what the KV cache
        holds did not (ADMISSION_EVIDENCE). max_model_len is the declared one, or for auto the longest the KV cache holds."""
        b = self.budget
        seqs = self.forced_seqs if self.forced_seqs is not None else b.seqs_default
        version, declared = self.req.version, self.req.max_model_len
        capture, _emit = cudagraph_capture_size(self.m, self.vendor, version, seqs, b.max_batched, self.eager)
        mem = memory_model(self.m, tp, b.gpu_bytes, b.util, version, self.dtype, kv_dtype, seqs, b.max_batched, self.eager, capture,
                           gdn_prefill_checkpoint(self.m, version, self.vendor, self.cc, self.cuda))
        max_model_len = min(self.m.max_position_embeddings, mem.longest()) if declared == "auto" else int(declared)
        return mem, seqs, max_model_len

    def fits(self, tp: int, kv_dtype: str) -> bool:
        mem, _seqs, max_model_len = self.evaluate(tp, kv_dtype)
        return max_model_len > 0 and mem.fits(max_model_len)

    def for_load(self, tp: int, kv_dtype: str, needed: int, fp8_allowed: bool) -> Tuple[Memory, int, int, str]:
        """One instance at TP=tp that should hold `needed` requests: in kv_dtype, or in fp8 where kv_dtype is auto, fp8
        is allowed, the model's dtype holds fewer than `needed` and fp8 holds more. Stage 7 weighs the TP sizes with this
        and stage 8 sizes the chosen one with it, so both take the same fp8 decision."""
        mem, seqs, max_model_len = self.evaluate(tp, kv_dtype)
        if kv_dtype == "auto" and fp8_allowed and mem.concurrency(max_model_len) < needed:
            mem8, seqs8, max_model_len8 = self.evaluate(tp, "fp8")
            if mem8.concurrency(max_model_len8 if self.req.max_model_len == "auto" else max_model_len) > mem.concurrency(max_model_len):
                return mem8, seqs8, max_model_len8, "fp8"
        return mem, seqs, max_model_len, kv_dtype
