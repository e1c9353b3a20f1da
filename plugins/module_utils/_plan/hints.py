# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Refusals and hints: what does not fit, with the numbers, and what would - only hints that are themselves planned."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Dict, Optional

from .._models import ModelProfile
from .base import Ctx, gib
from .precision import catalog_alternatives, dtype_of, float32_note, planned_eager
from .sharding import fp8_block_problems, fp8_kv_sound, pp_problem, tp_choices
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
    kv_dtypes = ("auto", "fp8") if fp8_kv_sound(p, sizer.m, sizer.req.version) else ("auto",)

    def fits(alt: ModelProfile) -> bool:
        # the variant in the dtype stage 5 would give it (float16 for GPTQ/AWQ and below sm80), silently
        other = replace(sizer, m=alt, dtype=dtype_of(alt, p.vendor, p.arch, p.cc, alt.quant_method, Ctx([]), None))
        return any(other.fits(t, kv) for t in tp_choices(alt, gpus) if not fp8_block_problems(alt, t)[0] for kv in kv_dtypes)
    return fits


# the most identical hosts a multi-host hint considers
MAX_HOSTS = 8


def hosts_needed(m: ModelProfile, sizer: Sizer, p: Placement, start: int = 2) -> Optional[Dict[str, Any]]:
    """The smallest number of hosts like this one (its GPUs, all of them) whose GPUs hold the model as one instance: TP inside
    a host (the widest TP the heads and the FP8 block allow on its GPUs), pipeline stages across the hosts (vLLM's
    multi-node layout: tensor parallel within a node, pipeline parallel across nodes, docs "Distributed inference and
    serving"); sized by the same memory model, stage by stage. From `start` hosts (a group too small asks from its size + 1);
    None when no count up to MAX_HOSTS does."""
    n = len(p.gpus)
    tps = [t for t in tp_choices(m, n) if not fp8_block_problems(m, t)[0]]
    if not tps:
        return None
    kv_dtypes = ("auto", "fp8") if fp8_kv_sound(p, m, sizer.req.version) else ("auto",)
    for hosts in range(max(2, start), MAX_HOSTS + 1):
        for tp in sorted(tps, reverse=True):
            pp = hosts * n // tp
            if pp_problem(m, pp):
                continue
            kv = next((k for k in kv_dtypes if sizer.fits(tp, k, pp)), None)
            if kv:
                return {"reason": "needs_more_hosts", "hosts": hosts, "gpus_per_host": n, "gpu": p.accs[0]["model"],
                        "gpu_memory_mib": p.accs[0]["memory_mib"], "tensor_parallel_size": tp, "pipeline_parallel_size": pp,
                        "kv_cache_dtype": kv, "max_model_len": sizer.evaluate(tp, kv, pp)[2]}
    return None


def hosts_hint(need: Optional[Dict[str, Any]]) -> str:
    return (f"{need['hosts']} hosts of these ({need['hosts']} x {need['gpus_per_host']} GPUs: TP={need['tensor_parallel_size']} "
            f"inside each host x PP={need['pipeline_parallel_size']} stages across them, planned to fit"
            + (", fp8 KV" if need["kv_cache_dtype"] == "fp8" else "") + ")") if need else ""


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
    hosts = hosts_hint(hosts_needed(m, sizer, p)) if mem.kv <= 0 or not sizer.fits(tp, "auto") else ""
    if hosts:
        more.append(hosts)
    if mem.kv > 0:
        more.append(f"max_model_len <= {mem.longest()}")
    note = float32_note(m, p.vendor, sizer.dtype, req.version)
    if note:
        text += note
        more.insert(0, "GPUs with bfloat16 (NVIDIA sm80+), where it runs in half the bytes")
    return text + "; what would fit: " + ", ".join(more)
