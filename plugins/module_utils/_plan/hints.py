# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Refusals and hints: what does not fit, with the numbers, and what would - only hints that are themselves planned."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Optional

from .._models import ModelProfile
from .base import Ctx, gib
from .precision import catalog_alternatives, dtype_of, planned_eager
from .sharding import fp8_block_problems, fp8_kv_sound, tp_choices
from .sizer import Sizer, gpu_budget
from .stages import Placement, Request


def variant_fits(m: ModelProfile, req: Request, p: Placement) -> Optional[Callable[[ModelProfile], bool]]:
    """For stage 5's refusals: whether another quantization of the model fits these GPUs, sized on the budget stage 6
    gives them (computed here without its reasons); None on a CPU host, where no variant is judged by size."""
    if not p.accs:
        return None
    eager = planned_eager(req, p)
    sizer = Sizer(m, p.vendor, req, gpu_budget(req, p, eager, Ctx([])), "bfloat16", eager, None, p.cc)
    return fits_somewhere(sizer, p, len(p.gpus))


def fits_somewhere(sizer: Sizer, p: Placement, gpus: int) -> Callable[[ModelProfile], bool]:
    """Whether another model fits these GPUs at some TP vLLM can load it at, with the KV dtypes the plan may choose."""
    kv_dtypes = ("auto", "fp8") if fp8_kv_sound(p) else ("auto",)

    def fits(alt: ModelProfile) -> bool:
        # the variant in the dtype stage 5 would give it (float16 for GPTQ/AWQ and below sm80), silently
        other = replace(sizer, m=alt, dtype=dtype_of(alt, p.vendor, p.arch, p.cc, alt.quant_method, Ctx([]), None))
        return any(other.fits(t, kv) for t in tp_choices(alt, gpus) if not fp8_block_problems(alt, t)[0] for kv in kv_dtypes)
    return fits


def does_not_fit(name: str, m: ModelProfile, tp: int, sizer: Sizer, p: Placement, req: Request) -> str:
    """What does not fit, with the numbers, and what would: only hints that are themselves planned to fit."""
    n, gpu_mib, max_model_len = len(p.gpus), p.accs[0]["memory_mib"], req.max_model_len
    mem = sizer.evaluate(tp, "auto")[0]
    have = max(0.0, mem.kv)
    if mem.kv <= 0:
        text = (f"{name}: {m.id} does not fit on {n} x {gpu_mib / 1024:.0f} GiB GPUs: {gib(mem.weights)} GiB of weights per GPU at TP={tp} "
                f"plus {gib(mem.activation + mem.non_torch)} GiB of activations leave {gib(mem.kv)} GiB for the KV cache")
    else:
        want = int(max_model_len) if max_model_len != "auto" else m.max_position_embeddings
        text = (f"{name}: max_model_len {want} needs {gib(want * mem.kv_per_token)} GiB of KV cache per GPU at TP={tp}; "
                f"{gib(have)} GiB is left after {gib(mem.weights)} GiB of weights; the longest request that fits is {mem.longest()} tokens")
    alt = catalog_alternatives(m, p.vendor, p.cc, req.version, fits_somewhere(sizer, p, n))
    more = [alt] if alt else []
    wider = next((t for t in tp_choices(m, 16) if t > n and not fp8_block_problems(m, t)[0] and sizer.fits(t, "auto")), None)
    more.append(f"{wider} of these GPUs (TP={wider}, planned to fit)" if wider else "larger GPUs")
    if mem.kv > 0:
        more.append(f"max_model_len <= {mem.longest()}")
    return text + "; what would fit: " + ", ".join(more)
