# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""What vLLM can shard: the tensor-parallel sizes a model's heads allow, the FP8 block's limits, fp8 KV soundness."""

from __future__ import annotations

from typing import List, Optional, Tuple

from .._engine import GFX_FP8, Version, mla_fp8_kv
from .._models import ModelProfile, kv_heads_per_rank
from .stages import Placement


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
    if m.is_mla:
        # MLA (model_executor/models/deepseek_v2.py DeepseekV2MLAAttention, 0.32.0): column-parallel q_proj / q_b_proj
        # (heads x (qk_nope + qk_rope)) and kv_b_proj (heads x (qk_nope + v_head_dim)), row-parallel o_proj (heads x
        # v_head_dim: its input, % block_k); kv_a_proj_with_mqa is replicated and fused_qkv_a_proj ([q_lora_rank,
        # kv_lora_rank + qk_rope]) merged, where validate_fp8_block_shape lets the last part break the block
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        widths.append(("MLA q projection (heads x (qk_nope_head_dim + qk_rope_head_dim))", m.num_attention_heads * qk))
        widths.append(("MLA kv_b projection (heads x (qk_nope_head_dim + v_head_dim))",
                       m.num_attention_heads * (m.qk_nope_head_dim + m.v_head_dim)))
        o_in = m.num_attention_heads * m.v_head_dim
        if tp > 1 and o_in % tp == 0 and (o_in // tp) % bk:
            fixed.append(f"MLA o projection input (heads x v_head_dim) {o_in} / TP {tp} = {o_in // tp} is not a multiple of the "
                         f"{bn}x{bk} block")
        if m.q_lora_rank and m.q_lora_rank % bn:
            fixed.append(f"MLA fused q/kv_a projection: q_lora_rank {m.q_lora_rank} is not a multiple of the {bn}x{bk} block")
    else:
        widths.append(("attention q projection", m.num_attention_heads * m.head_dim * (2 if m.attn_output_gate else 1)))
    for what, width in widths:
        if width % tp == 0 and bad(width // tp):
            fixed.append(f"{what} {width} / TP {tp} = {width // tp} is not a multiple of the {bn}x{bk} block")
    kv_width = kv_heads_per_rank(m, tp) * m.head_dim
    if not m.is_mla and bad(kv_width):
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


def tp_choices(m: ModelProfile, limit: int) -> List[int]:
    """Powers of two first (vLLM's custom all-reduce takes world sizes 2, 4, 6, 8 and 16 only,
    custom_all_reduce.py), then 3 and 6 for head counts they divide."""
    return [t for t in (1, 2, 4, 8, 16) if t <= limit and valid_tp(m, t) is None] + \
           [t for t in (3, 6) if t <= limit and valid_tp(m, t) is None]


def fp8_kv_sound(p: Placement, m: Optional[ModelProfile] = None, version: Optional[Version] = None) -> bool:
    """fp8 KV is numerically sound from sm89 (native FP8); below that it is software conversion (docs/sources.md#fp8-kv).
    Given the model and the version, an MLA model takes it only where one of that release's MLA backends does
    (_engine.mla_fp8_kv)."""
    if m is not None and version is not None and mla_fp8_kv_unavailable(p, m, version):
        return False
    return (p.vendor == "nvidia" and p.cc >= 89) or (p.vendor in ("amd",) and p.arch in GFX_FP8)


# Pipeline parallelism (--pipeline-parallel-size): vLLM splits the decoder layers into contiguous stages
# (distributed/utils.py get_pp_indices), the first stage holding the embeddings, the last the LM head, and refuses a model
# whose class does not implement SupportsPP (config/model.py verify_with_parallel_config). V1 runs PP on one host with the
# multiprocessing executor from PR #14219 (v0.8.2). The model types below are those whose vLLM class implements SupportsPP
# (models/llama.py, mistral.py, qwen2.py, qwen2_moe.py, qwen3.py, qwen3_moe.py, mixtral.py, phi3.py, gemma2.py, gemma3.py,
# granite.py, deepseek_v2.py, read in the 0.32.0 wheel); hybrid (state-layer) and multimodal models are left out: their
# stages' memory is not modelled here.
PIPELINE_PARALLEL_SINCE = (0, 8, 2)
PP_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "mixtral", "phi3", "gemma2", "gemma3_text",
                  "granite", "deepseek_v2", "deepseek_v3")
# vLLM picks a model's class by its config's `architectures` (model_executor/models/registry.py), not by model_type: a model
# of another type served by one of these classes (Kimi-K2: kimi_k2 on DeepseekV3ForCausalLM) splits into stages the same way
PP_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen2MoeForCausalLM", "Qwen3ForCausalLM",
                    "Qwen3MoeForCausalLM", "MixtralForCausalLM", "Phi3ForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM",
                    "GraniteForCausalLM", "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM")


def pp_problem(m: ModelProfile, pp: int) -> Optional[str]:
    """None when vLLM can split the model into pp pipeline stages, else why not."""
    if m.model_type not in PP_MODEL_TYPES and m.architecture not in PP_ARCHITECTURES:
        return (f"the planner splits only models whose vLLM class implements SupportsPP and whose stages it models "
                f"({', '.join(PP_MODEL_TYPES)}, or an architecture of theirs); {m.id} is {m.model_type or 'of no known type'} "
                f"({m.architecture})")
    if m.is_hybrid or m.vision:
        return f"{m.id} has {'state layers' if m.is_hybrid else 'a vision encoder'}, whose pipeline stages the planner does not model"
    if m.num_layers < pp:
        return f"{m.id} has {m.num_layers} layers, fewer than {pp} stages"
    return None


def mla_fp8_kv_unavailable(p: Placement, m: ModelProfile, version: Version) -> Optional[str]:
    """Why no MLA backend of `version` takes an fp8 KV cache for `m` on these NVIDIA GPUs; None where one does, or where
    the model is not MLA (_engine.mla_fp8_kv)."""
    if not m.is_mla or p.vendor != "nvidia":
        return None
    accepted, why = mla_fp8_kv(p.cc, version)
    return None if accepted else why
