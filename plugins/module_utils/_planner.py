# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The planner: hardware + deployments + engine version -> launch plans for vLLM instances.

Pure and deterministic (same input, same plan). Every decision gets a `reasons` entry. An
impossible request is not an exception: the plan carries `errors` stating the number that does
not fit and what would. Private to llmfleet.serving.

This module is the planner's contract: plan_host, PlanError, summary_table and every name callers
and tests import from here. The planner itself is the package _plan, one module per concern, each
stage a function from typed inputs to a typed result (docs/architecture.md).
"""

from __future__ import annotations

# pylint: disable=unused-import
from ._plan.base import DEFAULT_BASE_PORT, DEFAULT_CONCURRENCY, GIB, MIB, Ctx, PlanError, Refusal  # noqa: F401
from ._plan.compose import plan_deployment, plan_host, summary_table  # noqa: F401
from ._plan.engine import engine_build, launch_args, startup_budget  # noqa: F401
from ._plan.features import choose_features  # noqa: F401
from ._plan.hints import variant_fits  # noqa: F401
from ._plan.inputs import (  # noqa: F401
    DEPLOYMENT_DOC, DEPLOYMENT_KEYS, ENGINE_KEYS, ENV_NAME, OVERRIDE_KEYS, PLAN_OPTIONS, PLANNED_ENV, PLANNED_FLAGS, WORKLOAD_KEYS,
    check_deployments, check_host, read_request,
)
from ._plan.instances import cpu_instance, gpu_instances  # noqa: F401
from ._plan.layout import WIDER_TP_GAIN, choose_layout  # noqa: F401
from ._plan.memory import (  # noqa: F401
    ACT_BYTES_PER_VOCAB, ACT_PER_WIDTH, BLOCK_SIZE, CHUNKED_LOCAL_HYBRID_SINCE, CUDAGRAPH_GIB, EAGER_ACT_FACTOR, GDN_CHECKPOINT_ALIGNMENT,
    GDN_CHECKPOINT_FAMILIES, GDN_PREFILL_CHECKPOINT_SINCE, GPU_IN_FLIGHT_BATCHES, GRAPH_GIB_BASE, GRAPH_GIB_MLA, GRAPH_GIB_PER_SIZE,
    HYBRID_PREFIX_CACHING_SINCE, IN_FLIGHT_BATCHES_SINCE, MAMBA2_PREFILL_CHECKPOINT_SINCE, NCCL_GIB, NON_TORCH_GIB, VISIBLE_FRACTION,
    Memory, as_allocated, cudagraph_capture_size, gdn_prefill_checkpoint, in_flight_tokens, kv_pool, memory_model, state_pages,
)
from ._plan.model import check_engine_runs, choose_model, extend_context, serving_source  # noqa: F401
from ._plan.ports import HOST_PORT_USERS, PortAsk, Ports, assign_ports, host_ports, listen_ports, ports_in_force  # noqa: F401
from ._plan.precision import CPU_BF16_MEASURED, choose_precision  # noqa: F401
from ._plan.sharding import fp8_block_problems, valid_tp  # noqa: F401
from ._plan.sizer import Sizer, gpu_budget  # noqa: F401
from ._plan.sizing import (  # noqa: F401
    ADMISSION_EVIDENCE, CPU_BLOCK_SIZE, CPU_DEFAULT_MAX_BATCHED, CPU_DEFAULT_MAX_NUM_SEQS, CPU_FP8_KV_READ_SINCE, CPU_HOST_RESERVE_GIB,
    CPU_KV_DTYPES, CPU_MLA_BLOCK_SIZE, size_cpu, size_instances,
)
from ._plan.stages import (  # noqa: F401
    Budget, Build, CpuSizing, Features, HostOptions, Launch, Layout, Placement, Planned, Precision, Request, Serving, Sizing,
)
from ._plan.topology import place  # noqa: F401

# Lower-layer names this module's namespace held before the planner became a package: kept importable from here
# for callers written against it (tests outside this repository included).
from ._engine import (  # noqa: F401,E402
    ATTENTION_SINK_MODEL_TYPES, DCU_IMAGES, FLAG_SINCE, FLAG_UNTIL, FP8_WEIGHT_ONLY_SINCE, GFX_BF16, GFX_FP8, KNOWN_AFTER_NEWEST,
    MEMORY_MODEL_ASSUMES, MODELOPT_FP8_MIN_CC, MOE_WNA16_AFFECTED, NEWEST, NO_OFFICIAL_SM70_SINCE, OLDEST, PARSERS, QUANT_MIN_CC,
    QUANT_MIN_CC_BEFORE_017, QUANT_REMOVED, QUANT_SCHEME_MIN_CC, QWEN3_PARSER_THINKING_ONLY_SINCE, SELECTOR_HANDLES_FP8_KV_SINCE,
    EngineError, Version, backend_name, cudagraph_memory_counted, default_batching, default_gpu_memory_utilization, has_flag,
    nvidia_image, official_image_cuda, parse_version, vstr,
)
from ._hardware import HardwareError, compress_cpulist, expand_cpulist, validate_hardware  # noqa: F401,E402
from ._host_needs import (  # noqa: F401,E402
    HYHAL_DIR, SHUTDOWN_FLAG, NeedsError, bind_address, device_access, drain_timeout, model_source, os_packages, stop_timeout,
)
from ._models import (  # noqa: F401,E402
    CATALOG, DTYPE_BYTES, YARN, ModelError, ModelProfile, catalog_profile, kv_bytes_per_layer_token, kv_bytes_per_token,
    kv_heads_per_rank, resolve_model, state_bytes_per_layer, state_bytes_per_sequence, yarn_extension, yarn_limit,
)
from ._nvidia_driver import driver_verdict  # noqa: F401,E402
