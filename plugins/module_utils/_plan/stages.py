# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The stages' typed inputs and results, frozen: what each stage reads and returns, from the host's options (HostOptions)
to the command line of an instance (Launch). Stage n's result is named in its docstring."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Tuple, Union

from .._engine import Version
from .base import DEFAULT_BASE_PORT, DEFAULT_MODEL_ROOT
from .memory import Memory


@dataclass(frozen=True)
class Request:
    """Stage 1's result: the deployment as every later stage reads it."""
    name: str
    version: Version
    workload: Mapping[str, Any]
    overrides: Mapping[str, Any]
    goal: str
    concurrency: int
    max_model_len: Union[int, str]    # tokens, or "auto": the longest the KV cache holds
    trust_remote_code: bool = False   # the deployment lets vLLM run the model's own code (--trust-remote-code)
    quality: str = "exact"            # workload.quality: fp8 lets the levers trade precision for speed (_plan.levers)


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
    at_load: bool = False          # quant is applied by vLLM at load to a 16-bit checkpoint (--quantization fp8, _plan.levers)


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
    kind: str                      # nvlink_all, nvlink_mesh or pcie (link_domains)
    domains: List[List[int]]
    pp: int = 1                    # pipeline stages of an instance (its GPUs: tp x pp)
    nodes: int = 1                 # hosts the instance spans (_plan.group): each holds tp x pp / nodes of its GPUs


@dataclass(frozen=True)
class Sizing:
    """Stage 8 (GPUs): memory of one GPU, admission and the longest request."""
    mem: Memory
    seqs: int
    max_model_len: int
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
    chat_template: Optional[str] = None   # --chat-template: overrides.chat_template (a file name in the model folder, or a path)
    runner_args: Tuple[str, ...] = ()   # a pooling model's --runner/--convert (or --task) flags (pooling.runner_flags)


@dataclass(frozen=True)
class Planned:
    """plan_deployment's result: the deployment's plan, and what plan_host folds into the host's."""
    deployment: Dict[str, Any]
    errors: List[str]
    warnings: List[str]
    gpus: List[int]                # GPUs its instances take
    ports: List[int]               # ports its instances listen on


@dataclass(frozen=True)
class CpuSizing:
    """Stage 6-8 on a CPU host: weights in host memory, VLLM_CPU_KVCACHE_SPACE, max_model_len and admission."""
    weights: float                 # bytes of weights in the planned dtype
    per_token: int                 # KV bytes per token
    max_model_len: int
    space_gib: int
    held: float                    # requests of max_model_len the KV space holds
    seqs: int
    kv_dtype: str = "auto"


@dataclass(frozen=True)
class CpuLayout:
    """Stage 7 on a CPU host (topology.cpu_layout): one tensor-parallel rank per NUMA node, as vLLM's CPU docs describe."""
    tp: int
    nodes: List[List[Optional[int]]]   # each instance's ranks, one NUMA node each ([None]: the host gives no NUMA nodes)
    node_mib: int                      # memory one rank may use: its node's (the host's divided over its nodes)
    spread: bool = False               # True where the host has several NUMA nodes: the ranks are laid out over them

    @property
    def instances(self) -> int:
        return len(self.nodes)


@dataclass(frozen=True)
class HostOptions:
    """plan_host's options, checked (inputs.check_host), and why the host's engines listen where they do
    (_host_needs.edge_address; the bind address itself is always _host_needs.LOOPBACK): what the stages read of the host's
    settings, instead of the options mapping."""
    bind_why: str
    edge_address: Optional[str] = None
    base_port: int = DEFAULT_BASE_PORT
    model_root: str = DEFAULT_MODEL_ROOT
    hyhal_dir: Optional[str] = None
    model_metadata: Optional[Mapping[str, Any]] = None
    # the plan in force's ports by instance name (ports.ports_in_force), and the host's other listeners: port -> (what,
    # the variable that sets it) (ports.host_ports); both checked by inputs.check_host
    ports_in_force: Optional[Mapping[str, int]] = None
    host_ports: Optional[Mapping[int, Tuple[str, str]]] = None
    # multi-host deployments: deployment name -> its group's members (_plan.group.check_groups)
    groups: Optional[Mapping[str, Mapping[str, Any]]] = None

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> "HostOptions":
        """From a mapping with the same keys (a test's, or a caller's that ran edge_address itself)."""
        return cls(bind_why=options["bind_why"], edge_address=options.get("edge_address"),
                   base_port=options.get("base_port", DEFAULT_BASE_PORT), model_root=options.get("model_root", DEFAULT_MODEL_ROOT),
                   hyhal_dir=options.get("hyhal_dir"), model_metadata=options.get("model_metadata"),
                   ports_in_force=options.get("ports_in_force"), host_ports=options.get("host_ports"),
                   groups=options.get("groups"))


@dataclass(frozen=True)
class Serving:
    """Stage 2b: where the engine reads the model (_host_needs.model_source), how long a drain may take, and the engine's
    own shutdown grace (--shutdown-timeout, 0 where the version has none)."""
    source: Dict[str, Any]
    drain_s: int
    grace_s: int = 0


@dataclass(frozen=True)
class Launch:
    """Stage 10's input to launch_args: everything the command line of one instance says, each decided by a stage."""
    model_dir: str
    served_name: str
    host: str                      # --host: the bind address, or every address inside a container (_host_needs.engine_host)
    port: int
    version: Version
    vendor: str
    dtype: str
    kv_cache_dtype: str
    max_model_len: int
    max_num_seqs: int
    eager: bool
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    quantization: Optional[str] = None
    quantize_at_load: bool = False                   # --quantization even where the checkpoint's config would say it (_plan.levers)
    gpu_memory_utilization: Optional[float] = None
    max_num_batched_tokens: Optional[int] = None     # overrides.max_num_batched_tokens; vLLM's default otherwise
    capture: Optional[int] = None                    # --max-cudagraph-capture-size when the plan sets it
    attention_backend: Optional[str] = None
    encoder_backend: Optional[str] = None
    language_model_only: bool = False                # a multimodal model whose workload turns vision off
    reasoning_parser: Optional[str] = None
    tool_call_parser: Optional[str] = None
    thinking_kwargs: Optional[str] = None
    expert_parallel: bool = False
    hf_overrides: Optional[str] = None
    chat_template: Optional[str] = None              # a path the engine reads
    mistral_format: bool = False                     # --tokenizer-mode / --config-format / --load-format mistral
    trust_remote_code: bool = False                  # --trust-remote-code: the deployment's trust_remote_code (model.check_remote_code)
    runner_args: Tuple[str, ...] = ()                # a pooling model's --runner/--convert (or --task): right after --dtype
    shutdown_timeout: int = 0                        # --shutdown-timeout: the engine's own grace on SIGTERM (0: not passed)
    nnodes: int = 1                                  # hosts of a multi-host engine (_plan.group): --nnodes and what follows
    node_rank: int = 0                               # --node-rank: this host's rank; above 0 the rank runs --headless
    master_addr: Optional[str] = None                # --master-addr: rank 0's private address
    master_port: Optional[int] = None                # --master-port: where the ranks meet on rank 0
