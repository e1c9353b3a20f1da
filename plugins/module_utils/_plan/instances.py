# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Stage 10: the instances - GPUs or CPU set, port, host needs, the command line and environment - and their hash."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import AbstractSet, Any, Dict, List, Mapping, Optional, Union

from .._engine import Version, cudagraph_memory_counted, has_flag, vstr
from .._host_needs import (CONTAINER_NETWORK, HYHAL_DIR, LOOPBACK, device_access, engine_host, loopback_env, os_packages, stop_timeout,
                           tcp_rendezvous)
from .._models import ModelProfile
from .base import GIB, Ctx, gib
from .engine import extras, launch_args, startup_budget
from .group import Group, group_env
from .stages import Budget, Build, CpuLayout, CpuSizing, Features, HostOptions, Launch, Layout, Placement, Precision, Request, Serving, Sizing
from .topology import cpu_binding, cpu_rank_binding, group_warnings, groups_reason, numa_of, tp_groups


def _port_of(d: Mapping[str, Any], base: int, used: set, k: int = 0) -> int:
    """Instance k's port when the deployment is planned on its own: its port + k, else the lowest from `base` not in `used`.
    The host's plan decides the final one (ports.assign_ports, then with_port)."""
    if d.get("port"):
        return int(d["port"]) + k
    port = base
    while port in used:
        port += 1
    return port


def with_port(instance: Dict[str, Any], port: int) -> Dict[str, Any]:
    """The instance moved to `port`: the field, the command line's --port, its edge's port, and its hash again."""
    if instance["port"] == port:
        return instance
    args = instance["args"]
    args[args.index("--port") + 1] = str(port)
    instance["port"] = port
    if instance.get("edge"):
        instance["edge"] = dict(instance["edge"], port=port)
    instance.pop("plan_hash", None)
    return _hashed(instance)


def _host_fields(vendor: str, gpus: List[int], image_cuda: Optional[str], package: Optional[str], model_dir: str, port: Optional[int],
                 options: HostOptions, serving: Serving, version: Optional[Version] = None, compiled: bool = False) -> Dict[str, Any]:
    """What the instance needs from its host (_host_needs), in the plan so that every role reads the same: among them how
    long a change waits for its requests (drain_timeout_s), the engine's own shutdown grace (shutdown_timeout_s, its
    --shutdown-timeout) and the runtime's stop timeout above that grace (stop_timeout_s)."""
    return {"vendor": vendor, "bind_address": LOOPBACK, "container_network": CONTAINER_NETWORK,
            "edge": {"address": options.edge_address, "port": port} if options.edge_address and port is not None else None,
            "model_dir": model_dir, "image_cuda": image_cuda,
            "access": device_access(vendor, gpus, str(options.hyhal_dir or HYHAL_DIR)), "os_packages": os_packages(package, version, compiled),
            "stop_timeout_s": stop_timeout(serving.grace_s)[0], "drain_timeout_s": serving.drain_s,
            "shutdown_timeout_s": serving.grace_s}


def _loopback_env(vendor: str, version: Version, extra_env: Mapping[str, str], ctx: Ctx, name: str) -> Dict[str, str]:
    """The variables that keep the engine's own listeners on loopback (_host_needs.loopback_env), with their reason. The
    inventory's extra_env goes after them, so one it sets wins, with a warning; an engine version that rendezvouses over a
    TCPStore (_host_needs.tcp_rendezvous) gets a warning too: no variable pins that listener."""
    env, why = loopback_env(vendor)
    ctx.why(",".join(f"{k}={v}" for k, v in env.items()), why)
    replaced = [f"{k}={extra_env[k]}" for k in env if k in extra_env and str(extra_env[k]) != env[k]]
    if replaced:
        ctx.warnings.append(f"{name}: extra_env {', '.join(replaced)} replaces the plan's loopback pin: the engine's own listeners "
                            "may then answer on that interface to anyone who reaches it")
    note = tcp_rendezvous(version)
    if note:
        ctx.warnings.append(f"{name}: {note}")
    return env


def _ranked(launch: Launch, group: Optional[Group]) -> Launch:
    """The command line of this host's rank of a multi-host deployment (--nnodes, --node-rank, --master-addr/-port and
    --headless above rank 0); one of a single host unchanged."""
    if not group:
        return launch
    return replace(launch, nnodes=group.nnodes, node_rank=group.rank, master_addr=group.head.address, master_port=group.port)


def _group_fields(group: Optional[Group]) -> Dict[str, Any]:
    """A multi-host rank's own fields: `group` (Group.fields) and `headless` (no API: no port, no edge, out of every
    consumer of the instance's port); nothing for an instance of one host, whose plan (and hash) stays as it was."""
    return {"group": group.fields(), "headless": group.headless} if group else {}


def _hashed(instance: Dict[str, Any]) -> Dict[str, Any]:
    """The instance with `plan_hash`: what the runtime compares to decide whether it changed (reasons excluded, and
    drain_timeout_s: how long the change path waits is not a reason to restart an engine; shutdown_timeout_s is in the
    command line and the stop timeout already, where it changes what runs)."""
    instance["plan_hash"] = hashlib.sha256(json.dumps({k: v for k, v in instance.items()
                                                       if k not in ("reasons", "drain_timeout_s", "shutdown_timeout_s")},
                                                      sort_keys=True).encode()).hexdigest()[:16]
    return instance


def _pooled(instance: Dict[str, Any], pooling: Optional[Mapping[str, Any]], encoder_only: bool, kv_gib: str,
            kv_per_token: str) -> Dict[str, Any]:
    """A pooling instance: its fields (pooling.plan_fields) and, for an encoder-only model, no KV cache (vLLM allocates none:
    EncoderOnlyAttention.get_kv_cache_spec returns None), so every admitted request runs at once. A generative instance is
    returned as it is."""
    if not pooling:
        return instance
    instance.update(pooling)
    if encoder_only:
        mem = instance["memory"]
        mem.update({kv_gib: 0.0, kv_per_token: 0, "kv_cache_tokens": 0, "max_concurrency_at_max_len": float(instance["max_num_seqs"])})
    return instance


def _launch(d: Mapping[str, Any], req: Request, m: ModelProfile, build: Build, precision: Precision, feats: Features,
            serving: Serving, sizing: Union[Sizing, CpuSizing], ctx: Ctx) -> Launch:
    """The command line every instance of the deployment shares, as on a CPU host; gpu_instances adds the GPU's part.
    --host is the bind address on both runtimes: the docker runtime's container shares the host's network (_host_needs.engine_host)."""
    host, why = engine_host(build.image)
    if why:
        ctx.why(f"host={host}", why)
    return Launch(model_dir=serving.source["dir"], served_name=d.get("served_name") or req.name, host=host,
                  port=0, version=req.version, vendor="cpu", dtype=precision.dtype, kv_cache_dtype=sizing.kv_dtype,
                  max_model_len=sizing.max_model_len, max_num_seqs=sizing.seqs, eager=precision.eager,
                  max_num_batched_tokens=req.overrides.get("max_num_batched_tokens"),
                  language_model_only=bool(m.vision and not req.workload.get("vision", True)), reasoning_parser=feats.reasoning,
                  tool_call_parser=feats.tools, thinking_kwargs=feats.thinking_kwargs,
                  expert_parallel=bool(req.overrides.get("expert_parallel")), hf_overrides=feats.hf_overrides,
                  # a file name is read in the model folder (the engine's view of it: inside the container under docker)
                  chat_template=(feats.chat_template if not feats.chat_template or feats.chat_template.startswith("/")
                                 else f"{serving.source['dir'].rstrip('/')}/{feats.chat_template}"),
                  mistral_format=m.mistral_format, trust_remote_code=req.trust_remote_code,
                  runner_args=feats.runner_args, shutdown_timeout=serving.grace_s)


def gpu_instances(d: Mapping[str, Any], req: Request, m: ModelProfile, p: Placement, build: Build, precision: Precision,
                  budget: Budget, layout: Layout, sizing: Sizing, feats: Features, serving: Serving,
                  hw: Mapping[str, Any], options: HostOptions, ports: AbstractSet[int], ctx: Ctx,
                  pooling: Optional[Mapping[str, Any]] = None, encoder_only: bool = False, group: Optional[Group] = None) -> List[Dict[str, Any]]:
    """Stage 10 (GPUs): the instances: their GPUs (inside one link domain), NUMA node, port, arguments and environment. A
    multi-host deployment's one instance is this host's rank of it (_ranked)."""
    name, version, tp = req.name, req.version, layout.tp
    vendor, mem = p.vendor, sizing.mem
    width = tp * layout.pp // layout.nodes     # an instance's GPUs on this host: its TP group times its pipeline stages here
    groups = tp_groups(p.gpus, hw, width, layout.instances)
    if group is not None and 1 < tp < width:
        # a rank's pipeline stages on this host: vLLM forms each stage's TP group from consecutive local ranks (TP varies
        # fastest, v1/executor/multiproc_executor.py), so CUDA_VISIBLE_DEVICES lists each TP group's GPUs together, each
        # group inside one link domain where the host has several (ranks run as units, where that order holds)
        groups = [[g for block in tp_groups(sorted(gs), hw, tp, width // tp) for g in block] for gs in groups]
    if width > 1:
        ctx.why(*groups_reason(p.gpus, groups, hw))
        if isinstance(d.get("gpus"), list):
            ctx.warnings.extend(group_warnings(name, groups, hw))
    launch = replace(_launch(d, req, m, build, precision, feats, serving, sizing, ctx), vendor=vendor, tensor_parallel_size=tp,
                     pipeline_parallel_size=layout.pp,
                     quantization=precision.quant, quantize_at_load=precision.at_load, gpu_memory_utilization=budget.util, capture=feats.capture,
                     attention_backend=feats.backend, encoder_backend=feats.encoder, expert_parallel=layout.expert_parallel)
    launch = _ranked(launch, group)
    # the start reads the checkpoint's bytes, also where vLLM quantizes them at load (_plan.levers)
    budget_s = startup_budget((m.checkpoint_bytes or m.weight_bytes) / GIB, precision.eager, vendor, p.cc, ctx)
    extra_args, extra_env = extras(d, version, ctx, ctx.warnings, name)
    pinned = group_env(vendor, group, extra_env, ctx, name) if group else _loopback_env(vendor, version, extra_env, ctx, name)
    used = set(ports)
    out: List[Dict[str, Any]] = []
    for k, gpus in enumerate(groups):
        node, cpuset = numa_of(gpus, hw, ctx.warnings, f"{name}-{k}")
        port = None if group and group.headless else _port_of(d, options.base_port, used, k)
        used.add(port)
        env: Dict[str, str] = {}
        if vendor == "nvidia":
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
        else:
            env["HIP_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
            if tp > 1 and vendor == "hygon":
                env["ALLREDUCE_STREAM_WITH_COMPUTE"] = "1"
        env.update(pinned)
        if vendor == "nvidia" and p.cc < 75 and tp > 1:   # field report 000's working V100 setting (the default 300 s cut Triton JIT)
            env["VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS"] = "3000"
        if feats.backend and not has_flag(version, "--attention-backend"):
            env["VLLM_ATTENTION_BACKEND"] = feats.backend
        args = launch_args(replace(launch, port=port or 0)) + extra_args
        env.update(extra_env)
        instance = {
            "name": f"{name}-{k}", "port": port, "gpus": gpus, "numa_node": node, "cpuset": cpuset,
            "tensor_parallel_size": tp, "pipeline_parallel_size": layout.pp, "data_parallel_size": 1,
            "expert_parallel": layout.expert_parallel,
            "dtype": precision.dtype, "quantization": precision.quant, "kv_cache_dtype": sizing.kv_dtype,
            "attention_backend": feats.backend or "default",
            "max_model_len": sizing.max_model_len, "max_num_seqs": sizing.seqs, "gpu_memory_utilization": budget.util,
            "enforce_eager": precision.eager, "startup_budget_s": budget_s,
            "memory": {
                "gpu_gib": gib(mem.total), "weights_gib_per_gpu": gib(mem.weights), "activation_gib_per_gpu": gib(mem.activation),
                "non_torch_gib_per_gpu": gib(mem.non_torch), "cudagraph_gib_per_gpu": gib(mem.cudagraph),
                "cudagraph_in_budget": cudagraph_memory_counted(version) and not precision.eager,
                "kv_cache_gib_per_gpu": gib(mem.kv), "kv_bytes_per_token_per_gpu": mem.kv_per_token,
                "linear_state_bytes_per_sequence_per_gpu": mem.state_per_seq, "block_size": mem.block_size,
                # vLLM's own "KV cache size: N tokens" is max concurrency x max_model_len (group-aware for hybrid
                # models, kv_cache_utils.get_kv_cache_capacity); for dense models it equals blocks x block size
                "kv_cache_tokens": int(mem.concurrency(sizing.max_model_len) * sizing.max_model_len),
                "max_concurrency_at_max_len": round(mem.concurrency(sizing.max_model_len), 2),
            },
            "image": build.image, "package": build.package, "served_model_name": launch.served_name,
            "args": args, "env": env, "patches": feats.patches, "reasons": ctx.reasons,
            **_host_fields(vendor, gpus, build.image_cuda, build.package, launch.model_dir, port, options, serving),
            **_group_fields(group),
        }
        out.append(_hashed(_pooled(instance, pooling, encoder_only, "kv_cache_gib_per_gpu", "kv_bytes_per_token_per_gpu")))
    if layout.pp == 1:
        ctx.why("pipeline_parallel_size=1, data_parallel_size=1, expert_parallel=" + str(layout.expert_parallel).lower(),
                "TP inside a link domain serves this model; report 000 measured TP+EP and TP+DP slower than plain TP on NVLink"
                + ("; expert parallelism only where the FP8 block requires it (above)" if layout.ep_required else ""))
    return out


def cpu_instance(d: Mapping[str, Any], req: Request, m: ModelProfile, build: Build, precision: Precision, sizing: CpuSizing,
                 feats: Features, serving: Serving, hw: Mapping[str, Any], options: HostOptions, ports: AbstractSet[int],
                 ctx: Ctx, layout: Optional[CpuLayout] = None, pooling: Optional[Mapping[str, Any]] = None,
                 encoder_only: bool = False) -> Dict[str, Any]:
    """Stage 10 on a CPU host: the first instance of cpu_instances (without a layout: the one instance of TP=1 bound to the
    NUMA node with the most CPUs, topology.cpu_binding)."""
    return cpu_instances(d, req, m, build, precision, sizing, layout, feats, serving, hw, options, ports, ctx, pooling,
                         encoder_only)[0]


def cpu_instances(d: Mapping[str, Any], req: Request, m: ModelProfile, build: Build, precision: Precision, sizing: CpuSizing,
                  layout: Optional[CpuLayout], feats: Features, serving: Serving, hw: Mapping[str, Any], options: HostOptions,
                  ports: AbstractSet[int], ctx: Ctx, pooling: Optional[Mapping[str, Any]] = None,
                  encoder_only: bool = False, group: Optional[Group] = None) -> List[Dict[str, Any]]:
    """Stage 10 on a CPU host: the instances of the layout (topology.cpu_layout). On one NUMA node one instance bound to it
    (topology.cpu_binding); over several, each instance's ranks on their own nodes: --tensor-parallel-size, one
    VLLM_CPU_OMP_THREADS_BIND list per rank separated by '|', VLLM_CPU_KVCACHE_SPACE per rank, the CPU set of its nodes
    (topology.cpu_rank_binding)."""
    name, version = req.name, req.version
    tp = layout.tp if layout else 1
    if layout and layout.spread:
        bindings = [cpu_rank_binding(hw, ranks, ctx, f"{name}-{k}") for k, ranks in enumerate(layout.nodes)]
    else:
        bindings = [cpu_binding(hw, ctx)]
    launch = _ranked(replace(_launch(d, req, m, build, precision, feats, serving, sizing, ctx), tensor_parallel_size=tp,
                             pipeline_parallel_size=group.nnodes if group else 1), group)
    extra_args, extra_env = extras(d, version, ctx, ctx.warnings, name)
    pinned = group_env("cpu", group, extra_env, ctx, name) if group else _loopback_env("cpu", version, extra_env, ctx, name)
    if build.image:
        ctx.why(f"image={build.image}", "named by the deployment: the CPU build in a container (docker runtime) instead of a venv")
    if build.package and "g++" in os_packages(build.package, version):
        ctx.why("os_packages=+g++,python3-dev", f"the CPU build {vstr(version)} compiles kernels with torch inductor at its first "
                "request and fails it without a C++ compiler and Python's headers (seen with 0.31.0; 0.32.0 needs neither)")
    budget_s = startup_budget(sizing.weights / GIB, precision.eager, "cpu", 0, ctx)
    used = set(ports)
    out: List[Dict[str, Any]] = []
    for k, (node, cpuset, bind) in enumerate(bindings):
        port = None if group and group.headless else _port_of(d, options.base_port, used, k)
        used.add(port)
        args = launch_args(replace(launch, port=port or 0)) + extra_args
        env = {**pinned, **extra_env, "VLLM_CPU_KVCACHE_SPACE": str(sizing.space_gib)}
        if bind:
            env["VLLM_CPU_OMP_THREADS_BIND"] = bind
        instance = {
            "name": f"{name}-{k}", "port": port, "gpus": [], "numa_node": node, "cpuset": cpuset,
            "tensor_parallel_size": tp, "pipeline_parallel_size": launch.pipeline_parallel_size, "data_parallel_size": 1,
            "expert_parallel": False,
            "dtype": precision.dtype, "quantization": precision.quant, "kv_cache_dtype": sizing.kv_dtype, "attention_backend": "default",
            "max_model_len": sizing.max_model_len, "max_num_seqs": sizing.seqs, "gpu_memory_utilization": None,
            "enforce_eager": precision.eager, "startup_budget_s": budget_s,
            # per rank, as vLLM reads VLLM_CPU_KVCACHE_SPACE (the whole model and its whole KV where TP is 1)
            "memory": {"weights_gib": gib(sizing.weights / tp), "kv_cache_gib": float(sizing.space_gib), "kv_bytes_per_token": sizing.per_token,
                       "kv_cache_tokens": int(sizing.held * sizing.max_model_len), "max_concurrency_at_max_len": round(sizing.held, 2)},
            "image": build.image, "package": build.package, "served_model_name": launch.served_name,
            "args": args, "env": env, "patches": [], "reasons": ctx.reasons,
            # a group's ranks run compiled (group.cpu_group) and compile with g++; one host's plan is as it was
            **_host_fields("cpu", [], None, build.package, launch.model_dir, port, options, serving, version,
                           bool(group) and not precision.eager),
            **_group_fields(group),
        }
        out.append(_hashed(_pooled(instance, pooling, encoder_only, "kv_cache_gib", "kv_bytes_per_token")))
    return out
