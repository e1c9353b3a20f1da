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
