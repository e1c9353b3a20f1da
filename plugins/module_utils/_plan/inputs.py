# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The inventory's side: the keys a deployment and the host options may give, their checks, and stage 1 (the request)."""

from __future__ import annotations

import re
from typing import AbstractSet, Any, Dict, List, Mapping, Optional, Tuple

from .._engine import (
    ADVISORIES, ADVISORY_FLOOR, FLAG_SINCE, FLAG_UNTIL, GHSA_RE, KNOWN_AFTER_NEWEST, MEMORY_MODEL_ASSUMES, NEWEST, OLDEST, OWNED_FLAGS,
    UNPLANNED_LAYOUT_FLAGS, UNSAFE_ENV, UNSAFE_FLAGS, EngineError, Version, abbreviated, advisories_of, cli_flag, has_flag,
    image_pinned, parse_version, short_option, vstr,
)
from .._hardware import HardwareError, validate_hardware
from .._host_needs import SHUTDOWN_FLAG, NeedsError, edge_address
from .._pooling import PoolingError, check_inventory_value
from .._syntax import ROUTING, env_value, nginx_word, served_name, unit_value
from .base import DEFAULT_BASE_PORT, DEFAULT_CONCURRENCY, DEFAULT_MODEL_ROOT, Ctx, PlanError, Refusal, slug
from .group import check_groups
from .ports import check_in_force, host_ports
from .stages import HostOptions, Request


DEPLOYMENT_KEYS = {"name", "model", "gpus", "workload", "engine", "overrides", "served_name", "port", "extra_args", "extra_env",
                   "trust_remote_code", "pooling", "allow_unsafe", "routing", "hosts"}
# the one way to let a deployment run its model's own code: never through extra_args
TRUST_REMOTE_CODE_FLAG = "--trust-remote-code"
# the flags that say a model is a pooling model (_pooling.runner_args): the deployment's `pooling` key decides them
POOLING_FLAGS = ("--runner", "--convert", "--task")
# flags the planner writes itself (launch_args), and the overrides key that sets each, where there is one: an
# extra_args entry may not set them twice
PLANNED_FLAGS = {"--served-model-name": "served_name", "--host": None, "--port": "port", "--tensor-parallel-size": "tensor_parallel_size",
                 "--dtype": "dtype", "--quantization": "quantization", "--kv-cache-dtype": "kv_cache_dtype",
                 "--max-model-len": "max_model_len", "--max-num-seqs": "max_num_seqs",
                 "--gpu-memory-utilization": "gpu_memory_utilization", "--max-num-batched-tokens": "max_num_batched_tokens",
                 "--max-cudagraph-capture-size": None, "--attention-backend": "attention_backend", "--mm-encoder-attn-backend": None,
                 "--language-model-only": None, "--enable-reasoning": None, "--reasoning-parser": "reasoning_parser",
                 "--enable-auto-tool-choice": None, "--tool-call-parser": "tool_call_parser",
                 "--default-chat-template-kwargs": None, "--chat-template": "chat_template",
                 "--enable-expert-parallel": "expert_parallel", "--enforce-eager": "enforce_eager",
                 "--pipeline-parallel-size": None,
                 # a multi-host deployment's ranks (_plan.group): the deployment's `hosts` decides them
                 "--nnodes": None, "--node-rank": None, "--master-addr": None, "--master-port": None, "--headless": None,
                 # a Mistral-format checkpoint's three flags (features: the model's own files decide them)
                 "--tokenizer-mode": None, "--config-format": None, "--load-format": None,
                 # the runtime's stop timeout must stay above the engine's drain: both belong to the plan (_host_needs.stop_timeout)
                 SHUTDOWN_FLAG: "shutdown_timeout_s"}
# the flags of a multi-host deployment's ranks (_plan.group): the deployment's `hosts` decides them
RANK_FLAGS = ("--nnodes", "--node-rank", "--master-addr", "--master-port", "--headless")
# environment the planner or the roles set: an extra_env entry may not replace them
PLANNED_ENV = {"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND", "VLLM_API_KEY",
               "VLLM_ATTENTION_BACKEND"}
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Every flag the checks below know by name: an extra_args word that is a strict prefix of one of them (or of its --no- form)
# is an abbreviation vLLM's parser may expand to it (_engine.abbreviated), so it is refused until spelled out
GUARDED_FLAGS = frozenset(set(PLANNED_FLAGS) | set(POOLING_FLAGS) | set(UNPLANNED_LAYOUT_FLAGS) | {TRUST_REMOTE_CODE_FLAG}
                          | set(OWNED_FLAGS) | set(UNSAFE_FLAGS))
KNOWN_FLAGS = frozenset(GUARDED_FLAGS | {"--no-" + f[2:] for f in GUARDED_FLAGS} | set(FLAG_SINCE) | set(FLAG_UNTIL)
                        | set(MEMORY_MODEL_ASSUMES))
ENGINE_KEYS = {"version", "image", "cuda", "accept_advisories"}
# plan_host's options (playbooks/plan.yml fills them from the inventory)
PLAN_OPTIONS = {"base_port", "model_root", "gateway_on_host", "private_address", "hyhal_dir", "model_metadata", "ports_in_force",
                "host_ports", "groups"}
WORKLOAD_KEYS = {"max_model_len", "concurrency", "goal", "thinking", "tools", "vision", "quality"}
# workload.quality: what the plan may trade of the outputs for speed (_plan.levers); exact changes nothing
QUALITY = ("exact", "fp8")
OVERRIDE_KEYS = {"tensor_parallel_size", "instances", "dtype", "quantization", "kv_cache_dtype", "attention_backend",
                 "max_model_len", "max_num_seqs", "gpu_memory_utilization", "enforce_eager", "max_num_batched_tokens",
                 "reasoning_parser", "tool_call_parser", "image", "cpu_kvcache_space_gib", "expert_parallel",
                 "drain_timeout_s", "shutdown_timeout_s", "chat_template"}
# What each key above means (docs/inventory.md is generated from it; tests/unit/test_docs.py holds it complete):
# a DEPLOYMENT_KEYS key by its name, the others as workload.<key>, engine.<key>, overrides.<key>, options.<key>
DEPLOYMENT_DOC: Dict[str, str] = {
    "name": "Required. Lower-case letters, digits, '.', '_' or '-' (at most 63): instances are <name>-0, -1 ...; unique per host.",
    "model": "Required. A catalog id (Qwen/Qwen3-8B; case and owner optional), or a mapping: {id, path} serves a local folder "
             "(not fetched), {id, config, weight_bytes} plans from a config.json given inline, revision pins the hub revision "
             "(fetched into <root>/<name>@<revision>; a new revision rolls like an engine version).",
    "gpus": "all (default), a count (taken from one NVLink clique or NUMA node where possible), or a list of GPU indices; "
            "deployments of one host use disjoint GPUs. Ignored on CPU hosts.",
    "workload": "What the deployment must hold (the workload.* keys); it sizes TP, the KV cache and admission.",
    "engine": "Required: {version: \"0.32.0\"}; the image or package follows from the version and the hardware.",
    "overrides": "Force any planner decision (the overrides.* keys); the plan's reason then says \"forced by overrides\".",
    "served_name": "The model name clients ask for (the gateway routes by it); default: name. A letter or digit, then up to 127 "
                   "letters, digits and . _ - / : @ + (no blanks, quotes, ';', '{', '}', '$', '#'). One model per name in the "
                   "whole fleet: deployments on any hosts that share a served_name serve the same model at the same revision.",
    "port": "The deployment's port (1024-65535): instance k listens on port + k, every instance of the deployment. Two "
            "users of one port on a host are refused, naming both: another deployment's instance, the port an instance of the "
            "plan in force holds, the gateway's, the web UI's or the model share's listener. Default: the port the instance has "
            "in the plan in force (it keeps it whatever is added or removed), else the lowest free port from "
            f"llmfleet_vllm_base_port ({DEFAULT_BASE_PORT}).",
    "extra_args": "Flags appended after the planned ones, e.g. [--enable-prefix-caching], read as vLLM's parser reads them "
                  "(--max_model_len is --max-model-len, an unambiguous prefix is the flag it begins): a flag the planner writes is "
                  "refused (naming the overrides key), one this engine version lacks too, and so are an abbreviation of a flag "
                  "the planner knows (spell it out), a short option (-tp: use the long flag), --api-key, --hf-token, --uds, --model "
                  "and --config (the fleet owns them), and the flags that open the engine to its clients unless allow_unsafe "
                  "names them.",
    "trust_remote_code": "false (default) or true: lets vLLM run the Python code the model's repository ships (its config.json or "
                         "tokenizer_config.json auto_map), with --trust-remote-code. A model that needs it is refused until it is "
                         "true; never given through extra_args.",
    "pooling": "embed or classify: serve the model as that pooling task (embeddings; classifier or reranker) where its config "
               "and side files do not say it (e.g. a *ForCausalLM checkpoint used as an embedder without modules.json); false: serve "
               "it as a generative model although they do. Default: decided as vLLM decides (modules.json, the architecture).",
    "extra_env": "Environment added to every instance, e.g. {VLLM_LOGGING_LEVEL: DEBUG}; the variables the plan or the roles "
                 "set (CUDA_VISIBLE_DEVICES, VLLM_API_KEY ...) cannot be replaced, and the ones that open the engine "
                 "(VLLM_SERVER_DEV_MODE, VLLM_ALLOW_RUNTIME_LORA_UPDATING, VLLM_HOST_IP, VLLM_PORT ...) need allow_unsafe. "
                 "Values on one line (no newline or other control character).",
    "hosts": "An inventory group: the deployment runs as one engine over all of the group's hosts (vLLM's own multi-node "
             "support: tensor parallel inside each host, pipeline stages across them), for a model no single host holds. Define "
             "the deployment in that group's group_vars; every host of the group needs llmfleet_private_address and "
             "llmfleet_private_interface, the same GPUs and vLLM 0.11.1 or later. The group's first host serves the API; "
             "the others run workers only. docs/multi-host.md.",
    "routing": "How the gateway picks one of the model's instances for a request: least_conn (default: the one with the fewest "
               "requests in flight), session (a request that names its conversation - an X-Session-Id header, else the body's "
               "`user` - always goes to the same instance while it is in rotation, so vLLM's prefix cache holds its history; one "
               "that names none goes least_conn) or prefix (as session, and a request that names none is placed by the start "
               "of its prompt: the messages up to the first user message). One value per served name in the fleet; a change "
               "touches the gateway only.",
    "allow_unsafe": "The extra_args flags and extra_env variables that open the engine beyond inference which this "
                    "deployment may set anyway, each by name, e.g. [--allowed-local-media-path, VLLM_SERVER_DEV_MODE] "
                    "(the list and why each is unsafe: docs/inventory.md#unsafe-flags-and-environment). Default: none.",
    "workload.max_model_len": "Longest request in tokens, or auto (default): the longest the KV cache holds, capped by the model's context. "
                              "Beyond the context, YaRN where the family's model card documents it (Qwen3: up to 131072).",
    "workload.concurrency": f"Concurrent requests the deployment must hold (default {DEFAULT_CONCURRENCY}, a planner default the "
                            "reasons name): weighs the TP layout and decides fp8 KV; admission stays vLLM's default.",
    "workload.goal": "throughput (default: the smallest TP whose instances hold the declared concurrency at a declared max_model_len, "
                     "else the smallest that fits: most replicas) or latency (the widest TP on all-to-all NVLink).",
    "workload.quality": "exact (default: the outputs are the checkpoint's) or fp8: the plan may quantize a 16-bit checkpoint's "
                        "weights to FP8 at load (--quantization fp8) on GPUs with FP8 tensor cores and, for the throughput goal, "
                        "keep the KV cache in fp8 where it outweighs the weights (docs/planner.md#speed-levers).",
    "workload.thinking": "Default enable_thinking of a hybrid thinking model's chat template (default false: answers without "
                         "a thinking section; clients may still ask per request).",
    "workload.tools": "Tool calling on (default true): the family's tool-call parser and --enable-auto-tool-choice.",
    "workload.vision": "false skips a multimodal model's vision tower (--language-model-only, vLLM 0.17+); default true.",
    "engine.version": "Required. The vLLM release, e.g. \"0.32.0\"; 0.8.5 is the oldest planned, newer than the planner's "
                      "table plans with a warning.",
    "engine.image": "Your own image instead of the planner's (a tag or digest, never latest); needed on AMD and for V100 from 0.20.",
    "engine.cuda": "The CUDA level engine.image is built with (\"12.9\"), for the driver check.",
    "engine.accept_advisories": "The published vLLM security advisories (GHSA ids) this deployment runs with anyway: a release "
                                f"below {vstr(ADVISORY_FLOOR)} that one affects is refused until each is named here, e.g. "
                                "[GHSA-94f4-hr76-p5j6] (the table: docs/inventory.md#engine-advisories). Default: none.",
    "overrides.tensor_parallel_size": "GPUs per instance; must divide the model's heads and the GPUs assigned. On a CPU host: "
                                      "NUMA nodes per instance, one rank each (default: as many as the heads allow that tile the nodes).",
    "overrides.instances": "How many instances (default: GPUs / TP; on a CPU host NUMA nodes / TP, e.g. instances: 2 with "
                           "tensor_parallel_size: 1 for one replica per node of a two-socket host).",
    "overrides.dtype": "--dtype instead of the architecture's (float16 below sm80 and on DCUs, the checkpoint's elsewhere; on CPUs "
                       "bfloat16 with AMX or AVX-512 BF16, else float32).",
    "overrides.quantization": "--quantization instead of the checkpoint's own.",
    "overrides.kv_cache_dtype": "auto or fp8 ...: instead of the planner's (fp8 only on sm89+ and when the load needs it; "
                                "on a CPU host fp8 needs AVX-512 or AMX and is never planned by itself).",
    "overrides.attention_backend": "A vLLM attention backend name (the planner spells it for the version).",
    "overrides.max_model_len": "As workload.max_model_len, but wins over it.",
    "overrides.drain_timeout_s": "Seconds a change waits for the instance's in-flight requests after it leaves the gateway's "
                                 "rotation (default 120).",
    "overrides.shutdown_timeout_s": "The engine's own grace on SIGTERM, vLLM's --shutdown-timeout (0.18+): it finishes the "
                                    "requests it holds for up to this long before it exits (default 30; 0 aborts them, and "
                                    "older versions always do); the runtime's stop timeout is 30 s above it.",
    "overrides.max_num_seqs": "Admission cap instead of vLLM's default (the plan's): the plan's max_concurrency_at_max_len admits only "
                              "what the KV cache holds at full length - no preemption, at a cost in time to first token "
                              "(docs/benchmarks/h200.md, session 14).",
    "overrides.gpu_memory_utilization": "Fraction of each GPU vLLM may use, instead of its default (lowered before vLLM 0.21).",
    "overrides.enforce_eager": "true turns CUDA graphs and torch.compile off (slower decode; default on CPUs only).",
    "overrides.max_num_batched_tokens": "--max-num-batched-tokens (default: vLLM's for the card); the activation memory follows it.",
    "overrides.reasoning_parser": "Reasoning parser instead of the family's (_engine.PARSERS).",
    "overrides.tool_call_parser": "Tool-call parser instead of the family's (_engine.PARSERS).",
    "overrides.chat_template": "--chat-template: a Jinja file name in the model folder, or an absolute path the engine reads (inside "
                               "the container under docker). Families whose tool parser needs one of vLLM's shipped templates "
                               "(Llama 3.x llama3_json, Llama 4, DeepSeek-V3 / R1-0528 / V3.1) get their tool parser only with it.",
    "overrides.image": "As engine.image, but wins over it.",
    "overrides.cpu_kvcache_space_gib": "CPU hosts: VLLM_CPU_KVCACHE_SPACE in GiB instead of what the requests need.",
    "overrides.expert_parallel": "true adds --enable-expert-parallel; false forbids it (FP8 block checkpoints then exclude the TP sizes that need it).",
    "options.base_port": f"llmfleet_vllm_base_port: where new instances' ports start (default {DEFAULT_BASE_PORT}); an instance "
                         "that has a port in the plan in force keeps it.",
    "options.ports_in_force": "Set by plan.yml, not in the inventory: the port of each instance in the plan in force "
                              "(<llmfleet_plan_dir>/<host>.json, the last plan written), by instance name; empty on the first run.",
    "options.host_ports": "Set by plan.yml, not in the inventory: the host's other listeners by the variable that sets them - "
                          "gateway_listen (and gateway_tls_listen with TLS) on an llm_gateway host, gateway_webui_listen and "
                          "webui_port on an llm_webui host, model_store_share_port with model_store_distribution via_peer.",
    "options.model_root": "llmfleet_model_root: the folder fetched models go to, <root>/<name>@<revision> (<root>/<name> "
                          "for a model that pins no revision; default /models).",
    "options.gateway_on_host": "Whether the host is in llm_gateway: the engine listens on loopback and no edge nginx is planned.",
    "options.private_address": "llmfleet_private_address: where this host's edge nginx listens for the gateway when that runs "
                               "elsewhere (a private address, never guessed from ansible_host); the engine stays on loopback.",
    "options.groups": "Set by plan.yml, not in the inventory: for each deployment with `hosts`, the group's hosts in inventory "
                      "order, each with its llmfleet_private_address, llmfleet_private_interface, its own definition of the "
                      "deployment and the hardware this run resolved for it (filter vllm_plan_groups).",
    "options.model_metadata": "Set by plan.yml, not in the inventory: for each model named by a hub id outside the catalog, the "
                              "controller folder its config.json was fetched to (model_store_source, model_store_controller_endpoint, "
                              "llmfleet_metadata_cache), the weights' size the hub lists, and where from.",
    "options.hyhal_dir": "llmfleet_hyhal_dir: Hygon's hyhal folder, mounted read-only into the engine (default /opt/hyhal).",
}


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
        if not isinstance(name, str) or not slug(name):
            raise PlanError(f"{where}[{i}].name={name!r}: use lower-case letters, digits, '.', '_' or '-'")
        if name in names:
            raise PlanError(f"{where}: two deployments are named {name!r}")
        names.add(name)
        if not d.get("model"):
            raise PlanError(f"{where}[{i}] ({name}) has no model")
        _check_model(d["model"], f"{where}[{i}] ({name}).model")
        if "served_name" in d:
            problem = served_name(d["served_name"])
            if problem:
                raise PlanError(f"{where}[{i}] ({name}).served_name={d['served_name']!r}: {problem}; it is the name clients ask "
                                "for and it lands in the gateway's nginx configuration and the engine's systemd unit")
        for key, allowed in (("workload", WORKLOAD_KEYS), ("overrides", OVERRIDE_KEYS)):
            value = d.get(key) or {}
            if not isinstance(value, Mapping):
                raise PlanError(f"{where}[{i}].{key} must be a mapping, got {value!r}")
            bad = sorted(set(value) - allowed)
            if bad:
                raise PlanError(f"{where}[{i}].{key} has unknown keys {bad}; known: {sorted(allowed)}")
        _check_overrides(d.get("overrides") or {}, f"{where}[{i}].overrides")
        w = d.get("workload") or {}
        max_model_len = w.get("max_model_len", "auto")
        if not (max_model_len == "auto" or _whole(max_model_len)):
            raise PlanError(f"{where}[{i}].workload.max_model_len={max_model_len!r}: a positive number of tokens or 'auto'")
        conc = w.get("concurrency", DEFAULT_CONCURRENCY)
        if not _whole(conc):
            raise PlanError(f"{where}[{i}].workload.concurrency={conc!r}: a positive number of concurrent requests")
        if w.get("goal", "throughput") not in ("throughput", "latency"):
            raise PlanError(f"{where}[{i}].workload.goal={w.get('goal')!r}: throughput or latency")
        if w.get("quality", "exact") not in QUALITY:
            raise PlanError(f"{where}[{i}] ({name}).workload.quality={w.get('quality')!r}: set {' or '.join(QUALITY)} (fp8 lets the "
                            "plan quantize weights and KV cache to FP8 for speed)")
        gpus = d.get("gpus", "all")
        if not (gpus == "all" or (isinstance(gpus, int) and not isinstance(gpus, bool) and gpus > 0)
                or (isinstance(gpus, list) and gpus and all(isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in gpus))):
            raise PlanError(f"{where}[{i}].gpus={gpus!r}: 'all', a count, or a list of GPU indices")
        if isinstance(gpus, list) and len(set(gpus)) != len(gpus):
            raise PlanError(f"{where}[{i}].gpus={gpus!r} lists a GPU twice")
        if d.get("hosts") is not None and (not isinstance(d["hosts"], str)
                                           or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]{0,62}", d["hosts"])):
            raise PlanError(f"{where}[{i}] ({name}).hosts={d['hosts']!r}: give the name of an inventory group (letters, digits, "
                            "'.', '_' or '-')")
        if d.get("routing", "least_conn") not in ROUTING:
            raise PlanError(f"{where}[{i}] ({name}).routing={d.get('routing')!r}: one of {', '.join(ROUTING)}")
        port = d.get("port")
        # unprivileged TCP ports (below 1024 needs root or CAP_NET_BIND_SERVICE)
        if port is not None and (not isinstance(port, int) or isinstance(port, bool) or not 1024 <= port <= 65535):
            raise PlanError(f"{where}[{i}].port={port!r}: a port between 1024 and 65535")
        engine = d.get("engine") or {}
        if not isinstance(engine, Mapping) or "version" not in engine:
            raise PlanError(f"{where}[{i}].engine must give a version, e.g. {{version: \"0.32.0\"}}; got {engine!r}")
        try:
            parse_version(engine["version"])
        except EngineError as exc:
            raise PlanError(f"{where}[{i}].engine.version: {exc}") from exc
        unknown_engine = sorted(set(engine) - ENGINE_KEYS)
        if unknown_engine:
            raise PlanError(f"{where}[{i}].engine has unknown keys {unknown_engine}; known: {sorted(ENGINE_KEYS)}")
        accepted = engine.get("accept_advisories", [])
        known_ids = {a.ghsa for a in ADVISORIES}
        if not isinstance(accepted, list) or not all(isinstance(a, str) and GHSA_RE.match(a) for a in accepted):
            raise PlanError(f"{where}[{i}] ({name}).engine.accept_advisories={accepted!r}: a list of GHSA ids such as "
                            "GHSA-94f4-hr76-p5j6 (the ones a plan for this release names)")
        unknown_ids = sorted(set(accepted) - known_ids)
        if unknown_ids:
            raise PlanError(f"{where}[{i}] ({name}).engine.accept_advisories names {', '.join(unknown_ids)}, which the planner's "
                            f"table does not hold (known: {', '.join(sorted(known_ids))}): copy the ids the plan's refusal names")
        if not isinstance(d.get("trust_remote_code", False), bool):
            raise PlanError(f"{where}[{i}] ({name}).trust_remote_code={d.get('trust_remote_code')!r}: true or false")
        _check_extras(d, f"{where}[{i}] ({name})")
        for key in ("image", "cuda"):
            problem = unit_value(engine[key]) if engine.get(key) is not None else None
            if problem:
                raise PlanError(f"{where}[{i}] ({name}).engine.{key}={engine[key]!r} holds {problem}: give it on one line")
        if "pooling" in d:
            try:
                check_inventory_value(d["pooling"], f"{where}[{i}]")
            except PoolingError as exc:
                raise PlanError(str(exc)) from exc
        image = (d.get("overrides") or {}).get("image") or engine.get("image")
        if image and not image_pinned(image):
            raise PlanError(f"{where}[{i}] image {image!r}: pin a version tag or digest (never latest)")
        if "cuda" in engine and not re.fullmatch(r"\d+\.\d+", str(engine["cuda"])):
            raise PlanError(f"{where}[{i}].engine.cuda={engine['cuda']!r}: the CUDA level the image is built with, e.g. \"12.9\"")
    return [dict(d) for d in deployments]


def check_host(host: str, hardware: Any, options: Optional[Mapping[str, Any]]) -> Tuple[Dict[str, Any], HostOptions]:
    """plan_host's hardware and options, checked (malformed input raises PlanError, naming the value): the validated hardware,
    and the options with the edge the host's engines are reached through (_host_needs.edge_address)."""
    options = dict(options or {})
    unknown = sorted(set(options) - PLAN_OPTIONS)
    if unknown:
        raise PlanError(f"{host}: unknown planner options {unknown}; known: {sorted(PLAN_OPTIONS)}")
    base_port = options.get("base_port", DEFAULT_BASE_PORT)
    if isinstance(base_port, str) and base_port.isdigit():
        base_port = int(base_port)   # -e llmfleet_vllm_base_port=9000 arrives as a string
    if not isinstance(base_port, int) or isinstance(base_port, bool) or not 1024 <= base_port <= 65535:
        raise PlanError(f"{host}: llmfleet_vllm_base_port={base_port!r}: a port between 1024 and 65535")
    problem = nginx_word(host) or ("/" in str(host) and "a '/'")
    if problem:
        # the host's name names its plan file (<plan dir>/<host>.json) and comments the gateway's upstream servers
        raise PlanError(f"inventory host {host!r}: its name holds {problem}; rename the host in the inventory")
    root = options.get("model_root", DEFAULT_MODEL_ROOT)
    if not _absolute_path(root):
        raise PlanError(f"{host}: llmfleet_model_root={root!r}: an absolute folder such as /models, on one line, without '..'")
    hyhal = options.get("hyhal_dir")
    if hyhal is not None and not _absolute_path(hyhal):
        raise PlanError(f"{host}: llmfleet_hyhal_dir={hyhal!r}: an absolute folder such as /opt/hyhal, on one line, without '..'")
    try:
        hw = validate_hardware(hardware, source=f"{host}: llmfleet_hardware")
        edge, bind_why = edge_address(bool(options.get("gateway_on_host", False)), options.get("private_address"), host)
    except (HardwareError, NeedsError) as exc:
        raise PlanError(str(exc)) from exc
    return hw, HostOptions(bind_why=bind_why, edge_address=edge, base_port=base_port, model_root=root,
                           hyhal_dir=options.get("hyhal_dir"), model_metadata=options.get("model_metadata"),
                           ports_in_force=check_in_force(options.get("ports_in_force"), host),
                           host_ports=host_ports(options.get("host_ports"), host), groups=check_groups(options.get("groups"), host))


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _absolute_path(value: Any) -> bool:
    """A folder the units (quoted there), the container mounts and the engine's command line can all carry: absolute, on one
    line (no control character), no '..' step."""
    return isinstance(value, str) and value.startswith("/") and unit_value(value) is None and ".." not in value.split("/")


def _check_model(spec: Any, where: str) -> None:
    """The model's id, revision and local path as words the plan can carry into a unit, a container and a file name."""
    if isinstance(spec, Mapping):
        for key in ("id", "revision"):
            value = spec.get(key)
            if value is not None and (unit_value(value) or nginx_word(value)):
                raise PlanError(f"{where}.{key}={value!r}: {unit_value(value) or nginx_word(value)}; give it as the hub spells it")
        if spec.get("path") is not None and not _absolute_path(spec["path"]):
            raise PlanError(f"{where}.path={spec['path']!r}: the model's folder on the host, an absolute path on one line, "
                            "without '..' (e.g. /data/models/Qwen3-8B)")
    elif isinstance(spec, str) and (unit_value(spec) or nginx_word(spec)):
        raise PlanError(f"{where}={spec!r}: {unit_value(spec) or nginx_word(spec)}; give a catalog or hub id such as Qwen/Qwen3-8B")


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
    for key, value in o.items():
        if isinstance(value, str) and (unit_value(value) or re.search(r"\s", value)):
            raise PlanError(f"{where}.{key}={value!r}: one word on one line (no blank or control character)")
    template = o.get("chat_template")
    if "chat_template" in o and not (isinstance(template, str) and template.strip() == template and template
                                     and template.endswith(".jinja") and ".." not in template.split("/")):
        raise PlanError(f"{where}.chat_template={template!r}: a Jinja file (….jinja) in the model folder, or an absolute path the "
                        "engine reads, without '..'")


def _allowed_unsafe(d: Mapping[str, Any], where: str) -> AbstractSet[str]:
    """allow_unsafe: the UNSAFE_FLAGS / UNSAFE_ENV names this deployment may set, each spelled as the tables spell it."""
    allowed = d.get("allow_unsafe", [])
    if not isinstance(allowed, list) or not all(isinstance(a, str) for a in allowed):
        raise PlanError(f"{where}.allow_unsafe={allowed!r}: a list of flag and variable names, e.g. [--allowed-local-media-path]")
    for name in allowed:
        if name in UNSAFE_FLAGS or name in UNSAFE_ENV:
            continue
        if name in OWNED_FLAGS or name == TRUST_REMOTE_CODE_FLAG or name in PLANNED_ENV:
            raise PlanError(f"{where}.allow_unsafe names {name}, which no deployment may set"
                            + (": set trust_remote_code: true on the deployment instead" if name == TRUST_REMOTE_CODE_FLAG else
                               f" ({OWNED_FLAGS[name]})" if name in OWNED_FLAGS else " (the plan or the roles set it)"))
        raise PlanError(f"{where}.allow_unsafe names {name!r}, which is not one of the flags or variables it opens: "
                        f"{', '.join(sorted(UNSAFE_FLAGS) + sorted(UNSAFE_ENV))}")
    return frozenset(allowed)


def _flag_refusal(flag: str, allowed: AbstractSet[str]) -> Optional[str]:
    """Why extra_args may not set `flag` (a whole flag as vLLM's parser names it), as the rest of a sentence that began
    with the setting it names (_setting); None when it may."""
    base = _setting(flag)
    off = base != flag
    if base == TRUST_REMOTE_CODE_FLAG:
        return (": whether the model's own code runs is the deployment's trust_remote_code setting (true or false), which the "
                "plan checks against the model's auto_map; remove it from extra_args and set trust_remote_code: true on the "
                "deployment")
    if base in POOLING_FLAGS:
        return (", which the planner decides from the model (pooling or generate): set the deployment's pooling key (embed, "
                "classify or false) instead")
    if base in UNPLANNED_LAYOUT_FLAGS:
        return (", which changes how many GPUs an instance spans and what each holds; the planner does not plan it yet, so its "
                "sizing would be wrong: remove it (the plan's reasons say what was considered)")
    if base in RANK_FLAGS:
        return (", which the planner decides for each rank of a deployment over several hosts (the multiprocessing executor, "
                "--nnodes and what follows): set the deployment's `hosts` key to an inventory group instead (docs/multi-host.md)")
    if base in PLANNED_FLAGS:
        key = PLANNED_FLAGS[base]
        return (", which the planner decides: "
                + (f"set overrides.{key} instead" if key else "it follows from the plan and cannot be set twice"))
    if base in OWNED_FLAGS:
        return f", which no deployment may set: {OWNED_FLAGS[base]}"
    if base in UNSAFE_FLAGS and not off and base not in allowed:
        return (f", which opens the engine beyond inference: {UNSAFE_FLAGS[base]}; name it in the deployment's allow_unsafe "
                "to run it anyway")
    return None


def _setting(flag: str) -> str:
    """The setting a flag names: --no-<switch> is the switch turned off (argparse BooleanOptionalAction)."""
    return "--" + flag[5:] if flag.startswith("--no-") and "--" + flag[5:] in GUARDED_FLAGS else flag


def _check_extras(d: Mapping[str, Any], where: str) -> None:
    """extra_args: a list of strings, flags spelled --name and read as vLLM's parser reads them (the `_` spelling, an
    abbreviation, a short option), none the planner writes itself or the fleet owns, the unsafe ones only where
    allow_unsafe names them; each word one line a unit carries. extra_env: names to one-line strings, none the plan
    sets, the unsafe ones only where allow_unsafe names them."""
    allowed = _allowed_unsafe(d, where)
    extra = d.get("extra_args", [])
    if not isinstance(extra, list) or not all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in extra):
        raise PlanError(f"{where}.extra_args must be a list of strings, e.g. [\"--enable-prefix-caching\"]; got {extra!r}")
    for k, arg in enumerate(str(a) for a in extra):
        problem = unit_value(arg)
        if problem:
            raise PlanError(f"{where}.extra_args[{k}]={arg!r} holds {problem}, which the engine's command line (a systemd unit's "
                            "ExecStart) cannot carry: one argument per list item, each on one line")
        if short_option(arg):
            raise PlanError(f"{where}.extra_args[{k}]={arg!r} is a short option (vLLM's -tp, -pp, -dp, -ep, -q, -O ...; argparse "
                            "also expands a prefix of one), which the plan cannot check: give the long flag, e.g. "
                            "--tensor-parallel-size")
        flag = cli_flag(arg)
        if flag is None:
            if k == 0:
                raise PlanError(f"{where}.extra_args starts with {arg!r}: the list is appended after the planned flags, so it must "
                                "start with a --flag")
            continue
        if not re.fullmatch(r"--[A-Za-z0-9][A-Za-z0-9-]*", flag):
            raise PlanError(f"{where}.extra_args[{k}]={arg!r}: {flag!r} is not a flag name (letters, digits and '-' after '--'); "
                            "give a value as the next list item or after '='")
        expands = abbreviated(flag, KNOWN_FLAGS)
        if len(expands) == 1:
            tail = _flag_refusal(expands[0], allowed)
            raise PlanError(f"{where}.extra_args sets {arg.split('=', 1)[0]}, a prefix of {expands[0]}: vLLM's parser (argparse "
                            f"allow_abbrev) reads it as {expands[0]} where no other flag of the release begins with it, and "
                            "refuses it as ambiguous where one does"
                            + (f"; {_setting(expands[0])}{tail}" if tail else "") + ". Spell out the whole flag you mean")
        if expands:
            raise PlanError(f"{where}.extra_args sets {arg.split('=', 1)[0]}, a prefix of {', '.join(expands)}: vLLM's parser "
                            "(argparse allow_abbrev) refuses it as ambiguous, or reads it as the one its release has. Spell out "
                            "the whole flag you mean")
        tail = _flag_refusal(flag, allowed)
        if tail:
            given = arg.split("=", 1)[0]
            note = (f" (given as {given}, which vLLM's parser reads as {flag})" if given != flag else
                    f" (given as {flag}: the same switch, turned off)" if flag != _setting(flag) else "")
            raise PlanError(f"{where}.extra_args sets {_setting(flag)}{tail}{note}")
    env = d.get("extra_env", {})
    if not isinstance(env, Mapping):
        raise PlanError(f"{where}.extra_env must be a mapping of variable names to values; got {env!r}")
    for key, value in env.items():
        if not ENV_NAME.match(str(key)) or isinstance(value, (dict, list)) or value is None:
            raise PlanError(f"{where}.extra_env.{key}={value!r}: a variable name and a string value")
        problem = env_value(value)
        if problem:
            raise PlanError(f"{where}.extra_env.{key}={value!r} holds {problem}, which an environment file cannot carry: give "
                            "the value on one line")
        if str(key) in PLANNED_ENV:
            raise PlanError(f"{where}.extra_env sets {key}, which the plan or the roles set (devices, KV space, the API key)")
        if str(key) in UNSAFE_ENV and str(key) not in allowed:
            raise PlanError(f"{where}.extra_env sets {key}, which opens the engine beyond inference: {UNSAFE_ENV[str(key)]}; name "
                            "it in the deployment's allow_unsafe to run it anyway")


def read_request(d: Mapping[str, Any], ctx: Ctx) -> Request:
    """Stage 1: the engine version within what the planner knows, and the workload as numbers."""
    name = d["name"]
    version = parse_version(d["engine"]["version"])
    if version < OLDEST:
        raise Refusal(f"{name}: vLLM {vstr(version)} is older than {vstr(OLDEST)}, the oldest version this planner supports")
    _check_advisories(name, version, d["engine"].get("accept_advisories") or [], ctx)
    if version > NEWEST:   # the flag table was read from releases up to NEWEST (docs/sources.md#versions-read)
        kept = sorted(f for f in set(FLAG_SINCE) | set(FLAG_UNTIL) if has_flag(version, f))
        ctx.warn(f"{name}: vLLM {vstr(version)} is newer than {vstr(NEWEST)}, the newest release this planner's flag table "
                 f"was read from: assumed to still accept {', '.join(kept)} and to still lack "
                 f"{', '.join(sorted(set(FLAG_UNTIL) - set(kept)))}, with {vstr(NEWEST)}'s defaults"
                 + "".join(f"; {known}" for since, known in sorted(KNOWN_AFTER_NEWEST.items()) if since <= version))
    w = dict(d.get("workload") or {})
    o = dict(d.get("overrides") or {})
    max_model_len = o.get("max_model_len", w.get("max_model_len", "auto"))
    return Request(name=name, version=version, workload=w, overrides=o, goal=w.get("goal", "throughput"),
                   quality=w.get("quality", "exact"),
                   concurrency=int(w.get("concurrency", DEFAULT_CONCURRENCY)), trust_remote_code=bool(d.get("trust_remote_code", False)),
                   max_model_len=max_model_len if max_model_len == "auto" else int(max_model_len))


def _check_advisories(name: str, version: Version, accepted: List[str], ctx: Ctx) -> None:
    """A release a published advisory affects (_engine.ADVISORIES) is refused unless engine.accept_advisories names each
    such advisory; the accepted ones become a reason, ids that do not affect the release a warning."""
    affecting = advisories_of(version)
    missing = [a for a in affecting if a.ghsa not in accepted]
    if missing:
        raise Refusal(f"{name}: vLLM {vstr(version)} is affected by published security advisories: "
                      + "; ".join(f"{a.ghsa} ({a.cve}, fixed in {vstr(a.fixed)}): {a.what}" for a in missing)
                      + f". Plan vLLM {vstr(ADVISORY_FLOOR)} or newer, or, to run {vstr(version)} anyway (e.g. the newest release "
                      "a V100 or a DCU image has), name them in the deployment's engine.accept_advisories: "
                      f"[{', '.join(a.ghsa for a in affecting)}]")
    if affecting:
        ctx.why(f"accept_advisories={','.join(a.ghsa for a in affecting)}",
                f"vLLM {vstr(version)} is affected by them (fixed by {vstr(max(a.fixed for a in affecting))}); the inventory's "
                "engine.accept_advisories runs it anyway")
    stale = sorted(set(accepted) - {a.ghsa for a in affecting})
    if stale:
        ctx.warn(f"{name}: engine.accept_advisories names {', '.join(stale)}, which do not affect vLLM {vstr(version)}: remove them")
