# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Model profiles: what the planner needs to know about a checkpoint, read from its config.json
(flat, or nested under `text_config`) and safetensors index, or from the built-in catalog,
which is a set of config.json excerpts run through the very same reader.

Private to llmfleet.serving. Pure: no file access except `profile_from_directory`.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, replace
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple
from . import _hf_config as hf_config

from ._hf_names import TRANSFORMERS_MODEL_TYPES, TRANSFORMERS_TOKENIZER_CLASSES, TRANSFORMERS_VERSION, VLLM_CONFIG_REGISTRY

from ._pooling import num_labels, st_pooling

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "half": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "auto": 2}


class ModelError(Exception):
    """A model that cannot be profiled; the message says which key or file is the problem."""


@dataclass(frozen=True)
class ModelProfile:
    id: str
    family: str                       # qwen3, qwen3_moe, qwen3_next, qwen3_5, qwen3_5_moe, other
    architecture: str
    hidden_size: int
    num_layers: int
    full_attention_layers: int
    linear_attention_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    torch_dtype: str
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 0
    mamba_ssm_dtype: str = "float32"
    tie_word_embeddings: bool = False
    attn_output_gate: bool = False
    vision: bool = False
    vision_parameters: int = 0
    mtp_layers: int = 0                         # multi-token-prediction layers shipped for speculative decoding
    quant_method: Optional[str] = None          # None (the torch_dtype), fp8, gptq, awq, ...
    quant_bits: Optional[int] = None
    quant_group_size: Optional[int] = None
    # GPTQ's quantization_config sym (None: not GPTQ, or not given): vLLM's GPTQ configs take (bits, sym) pairs per release
    quant_sym: Optional[bool] = None
    # compressed-tensors' scheme (W8A8-INT8, WNA16, NVFP4, MXFP4, W4A8-FP8): vLLM's floor is per scheme
    quant_scheme: Optional[str] = None
    # the checkpoint's own KV-cache quantization (ModelOpt kv_cache_quant_algo, compressed-tensors kv_cache_scheme):
    # "fp8": FP8 scales the plan uses with --kv-cache-dtype fp8 (vLLM's auto picks them up for ModelOpt only, docs/sources.md#quant-detection)
    kv_cache_quant: Optional[str] = None
    weight_bytes: int = 0                       # bytes of the weights the engine loads
    weight_bytes_source: str = "estimated from the config"
    # the bytes read from disk at load where they differ from those held (a 16-bit checkpoint quantized at load); 0: the same
    checkpoint_bytes: int = 0
    thinking: str = "none"                      # hybrid (enable_thinking toggles), always, none
    # what the chat template says (tokenizer_config.json's chat_template or chat_template.jinja), when the plan had it:
    # "" / None = no template read; thinking_from names where `thinking` came from
    template_thinking: str = ""
    template_tools: Optional[bool] = None
    thinking_from: str = "the model's name and family"
    provenance: str = ""
    min_engine: str = "0.8.5"
    model_type: str = ""                        # config.json model_type (text_config's when nested)
    # quantization_config.weight_block_size of a block-quantized FP8 checkpoint ([block_n, block_k], e.g. [128, 128])
    weight_block_size: Optional[Tuple[int, int]] = None
    # layers whose MLP is dense (intermediate_size) in a MoE model: DeepSeek's first_k_dense_replace, Qwen-MoE's
    # mlp_only_layers / decoder_sparse_step; every layer of a dense model
    dense_mlp_layers: int = 0
    # MLA (DeepSeek-V2/V3/R1, Kimi-K2 ...): one compressed latent of kv_lora_rank + qk_rope_head_dim per token and
    # layer, the same on every TP rank (vLLM v1/kv_cache_interface.py MLAAttentionSpec)
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    q_lora_rank: int = 0                        # MLA's query compression (0: a plain q_proj, DeepSeek-V2-Lite)
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    # sliding-window attention: how many of the attention layers slide, over how many tokens (SlidingWindowSpec)
    sliding_window: int = 0
    sliding_layers: int = 0
    # RoPE: the base frequency (0: the config does not say) and the scaling the checkpoint already applies ("" for none)
    rope_theta: float = 0.0
    rope_scaling: str = ""
    # Llama 4 chunked local attention: how many attention layers attend within chunks of how many tokens
    # (ChunkedLocalAttentionSpec; the NoPE layers, no_rope_layers[i] == 0, are full attention)
    attention_chunk_size: int = 0
    chunked_layers: int = 0
    # the state layers (MambaSpec, counted in linear_attention_layers): "gdn" (Qwen3-Next / Qwen3.5 Gated-DeltaNet,
    # linear_* fields), "mamba2" (Nemotron-H), "mamba1" (Jamba); their shapes as vLLM's MambaStateShapeCalculator reads them
    mamba_type: str = ""
    mamba_num_heads: int = 0                    # Mamba2 heads (mamba_num_heads)
    mamba_head_dim: int = 0
    mamba_n_groups: int = 0                     # Mamba2 B/C groups (n_groups)
    mamba_d_state: int = 0                      # ssm_state_size / mamba_d_state
    mamba_d_conv: int = 0                       # conv_kernel / mamba_d_conv
    mamba_intermediate_size: int = 0            # Mamba2 heads x head_dim; Mamba1 mamba_expand x hidden_size
    mamba_dt_rank: int = 0                      # Mamba1's dt projection rank (mamba_dt_rank, "auto": hidden / 16)
    # layers that are one block without an MLP (Nemotron-H: a mamba or attention block), and whether an MLP or expert
    # has a gate (3 matrices, SwiGLU) or not (2, Nemotron-H's squared ReLU up/down)
    mlp_free_layers: int = 0
    mlp_gated: bool = True
    # the parts a quantized checkpoint keeps in 16 bit beyond the embeddings (quantization_config's modules_to_not_convert,
    # ignore, ignored_layers, GPTQModel's negative `dynamic` keys), in count_parameters' names, and whether its lm_head is
    # quantized (GPTQ's lm_head flag)
    quant_unquantized: Tuple[Tuple[str, float], ...] = ()
    quant_lm_head: bool = False
    quant_bnb_double: bool = False              # bitsandbytes bnb_4bit_use_double_quant (8-bit absmax)
    # a checkpoint in Mistral's own format (params.json beside consolidated*.safetensors): vLLM loads it with
    # --tokenizer-mode / --config-format / --load-format mistral (vllm-project/vllm:docs/features/tool_calling.md "Mistral Models")
    mistral_format: bool = False
    # remote code (remote_code_at): config.json auto_map AutoConfig references of a model_type transformers does not ship
    # (remote code unless the engine version's own config registry has the type), and why the tokenizer is remote code
    auto_config_refs: Tuple[str, ...] = ()
    remote_tokenizer: str = ""
    # pooling models (_pooling.py): the config's labels (transformers num_labels / len(id2label)), RoBERTa's pad_token_id, a
    # bidirectional decoder's is_causal: false, and the sentence-transformers side files (modules.json has a Pooling module,
    # sentence_bert_config.json max_seq_length, a Dense module's out_features) with where they were read
    num_labels: int = 2
    pad_token_id: Optional[int] = None
    is_causal: Optional[bool] = None
    st_pooling: bool = False
    st_max_seq_length: int = 0
    st_dense_out: int = 0
    st_source: str = ""
    # config.json auto_map AutoModel* references: the repository's own model classes, which vLLM's Transformers backend
    # loads (with --trust-remote-code) for an architecture its model registry does not serve
    auto_model_refs: Tuple[str, ...] = ()

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_hybrid(self) -> bool:
        """Layers with a constant state per request (MambaSpec: Gated-DeltaNet, Mamba1, Mamba2)."""
        return self.linear_attention_layers > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0


def _get(cfg: Mapping[str, Any], key: str, default: Any = None, required: bool = False, source: str = "config.json") -> Any:
    if key in cfg and cfg[key] is not None:
        return cfg[key]
    if required:
        raise ModelError(f"{source}: missing {key!r}")
    return default


# families whose checkpoints always think: the reasoning parser of _engine.PARSERS applies to every answer
THINKING_FAMILIES = ("qwq", "magistral", "deepseek_r1", "deepseek_r1_0528", "gpt_oss", "minimax_m2")
# families whose chat template switches thinking per request (chat_template_kwargs enable_thinking), on unless a request or
# --default-chat-template-kwargs turns it off: GLM-4.5/4.6's template reads enable_thinking and closes an empty
# <think></think> when it is false; vLLM's glm45 reasoning parser passes an answer without tags through as content
# (vllm/reasoning/glm4_moe_reasoning_parser.py: "thinking is disabled, just content")
HYBRID_FAMILIES = ("glm45",)
# model_types of Qwen2 / Qwen2.5 text models (dense and MoE): hermes tool calls (_engine.PARSERS "qwen2"); the VL ones
# (qwen2_vl, qwen2_5_vl) have chat templates that do not render `tools`
QWEN2_TEXT_TYPES = ("qwen2", "qwen2_moe")
QWEN2_VL_TYPES = ("qwen2_vl", "qwen2_5_vl")


def _family(model_type: str, architecture: str, num_experts: int, linear: int, model_id: str = "") -> str:
    """The family the parser table (_engine.PARSERS) is keyed by: from model_type, and from the id where one
    architecture carries several formats (R1 distills are Qwen2 or Llama; Llama 2 and 3 share `llama`)."""
    mt, name = model_type.lower(), model_id.lower()
    if "qwq" in name:
        return "qwq"
    if "deepseek-r1" in name:
        return "deepseek_r1_0528" if "0528" in name else "deepseek_r1"
    if mt.startswith("deepseek_v3") or mt == "deepseek_v32":
        return "deepseek_v32" if ("v3.2" in name or mt == "deepseek_v32") else "deepseek_v31" if "v3.1" in name else "deepseek_v3"
    named = {"gpt_oss": "gpt_oss", "glm4_moe": "glm45", "kimi_k2": "kimi_k2", "minimax_m2": "minimax_m2", "llama4": "llama4"}
    if mt in named:
        return named[mt]
    if "kimi-k2" in name:
        return "kimi_k2"
    if mt == "llama" and ("llama-3" in name or "llama3" in name):
        return "llama3"
    if mt == "llama" and "smollm2" in name:
        return "smollm2"
    # Mistral AI's own checkpoints (their tokenizer has the [TOOL_CALLS] token the mistral parser needs), not every
    # model of the Mistral architecture
    if mt in ("mistral", "mistral3", "ministral") and any(w in name for w in ("mistral", "magistral", "devstral", "codestral")):
        return "magistral" if "magistral" in name else "mistral"
    if mt in QWEN2_TEXT_TYPES:
        return "qwen2"
    if mt.startswith("qwen3_5"):
        return "qwen3_5_moe" if num_experts else "qwen3_5"
    if mt.startswith("qwen3_next") or architecture.startswith("Qwen3Next"):
        return "qwen3_next"
    if mt.startswith("qwen3"):
        return "qwen3_moe" if num_experts else "qwen3"
    return "other" if not linear else "hybrid"


# the kind of every layer, in each spelling a config.json uses: `layer_types` (Qwen3-Next / Qwen3.5, Gemma, gpt-oss; Llama 4
# and Nemotron-H as transformers 5 writes them), `layers_block_type` (Jamba, Nemotron-H), Nemotron-H's
# `hybrid_override_pattern` (one character a layer, vLLM models/nemotron_h.py ALL_DECODER_LAYER_TYPES)
ATTENTION_KINDS = ("full_attention", "attention", "sliding_attention", "chunked_attention")
STATE_KINDS = ("linear_attention", "mamba", "gated_delta_net")
BLOCK_KINDS = ("mlp", "moe")            # a layer that is one MLP or MoE block and no mixer (Nemotron-H)
PARALLEL_KINDS = ("hybrid",)             # attention and a Mamba2 mixer side by side in one layer (Falcon-H1, vLLM falcon_h1.py)
PATTERN_KINDS = {"*": "attention", "M": "mamba", "-": "mlp", "E": "moe"}


def _layer_list(text: Mapping[str, Any], layers: int, source: str) -> Optional[Tuple[str, List[str]]]:
    """(the key, the kind of every layer), from whichever key the config spells them with; None when it lists none."""
    pattern = text.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        unknown = sorted(set(pattern) - set(PATTERN_KINDS))
        if unknown:
            raise ModelError(f"{source}: hybrid_override_pattern has layer kinds this planner does not know: {unknown} "
                             f"(it knows {' '.join(PATTERN_KINDS)}); report it with the config.json")
        return "hybrid_override_pattern", [PATTERN_KINDS[c] for c in pattern]
    for key in ("layer_types", "layers_block_type"):
        types = text.get(key)
        if types:
            return key, [str(t) for t in types]
    if str(text.get("model_type") or "").startswith("falcon_h1"):     # transformers FalconH1Config.layers_block_type
        return "model_type", ["hybrid"] * layers
    period = text.get("attn_layer_period")
    if period:      # Jamba: attention where i % attn_layer_period == attn_layer_offset (transformers JambaConfig)
        offset = int(text.get("attn_layer_offset") or 0)
        return "attn_layer_period", ["attention" if i % int(period) == offset else "mamba" for i in range(layers)]
    interval = text.get("full_attention_interval")
    if interval and text.get("linear_num_value_heads"):
        return "full_attention_interval", ["full_attention" if (i + 1) % int(interval) == 0 else "linear_attention" for i in range(layers)]
    return None


def _layer_kinds(text: Mapping[str, Any], layers: int, source: str, model_type: str = "") -> Tuple[int, int, Optional[Tuple[int, int]]]:
    """(attention layers, state layers, and where every layer is a single block - Nemotron-H: a mamba, attention, MLP or
    MoE block - (MLP layers, MoE layers); else None: every layer has a mixer and an MLP)."""
    listed = _layer_list(text, layers, source)
    if listed is None:
        return layers, 0, None
    key, kinds = listed
    if len(kinds) != layers:
        raise ModelError(f"{source}: {key} lists {len(kinds)} layers but num_hidden_layers is {layers}; give the model's published config.json")
    unknown = sorted(set(kinds) - set(ATTENTION_KINDS + STATE_KINDS + BLOCK_KINDS + PARALLEL_KINDS))
    if unknown:
        raise ModelError(f"{source}: {key} has layer kinds this planner does not know: {unknown}; report it with the config.json")
    attention = sum(1 for k in kinds if k in ATTENTION_KINDS + PARALLEL_KINDS)
    state = sum(1 for k in kinds if k in STATE_KINDS + PARALLEL_KINDS)
    if key == "hybrid_override_pattern" or model_type.startswith("nemotron_h") or any(k in BLOCK_KINDS for k in kinds):
        return attention, state, (kinds.count("mlp"), kinds.count("moe"))
    return attention, state, None


def _chunked_layers(text: Mapping[str, Any], layers: int, attention: int) -> Tuple[int, int]:
    """(chunk, how many attention layers attend within chunks): Llama 4's attention_chunk_size applies to every layer
    that uses RoPE, no_rope_layers[i] != 0 (vLLM models/llama4.py); transformers' default no_rope_layers leaves out
    every no_rope_layer_interval-th (4th) layer."""
    chunk = text.get("attention_chunk_size")
    if not isinstance(chunk, int) or isinstance(chunk, bool) or chunk <= 0:
        return 0, 0
    rope = text.get("no_rope_layers")
    if not rope:
        types = text.get("layer_types")
        if types and "chunked_attention" in types:
            rope = [int(t == "chunked_attention") for t in types]
        else:
            interval = int(text.get("no_rope_layer_interval") or 4)
            rope = [int((i + 1) % interval != 0) for i in range(layers)]
    chunked = sum(1 for r in rope if r)
    return (chunk, min(chunked, attention)) if chunked else (0, 0)


def _state_shape(text: Mapping[str, Any], hidden: int, state_layers: int, source: str, model_type: str) -> Dict[str, Any]:
    """The state layers' kind and shape, as vLLM's model classes hand them to MambaStateShapeCalculator: Gated-DeltaNet
    (linear_* keys), Mamba2 (Nemotron-H, models/nemotron_h.py: intermediate = mamba_num_heads x mamba_head_dim; Falcon-H1,
    models/falcon_h1.py: intermediate = mamba_d_ssm, else mamba_expand x hidden_size), Mamba1 (Jamba, models/jamba.py:
    intermediate = mamba_expand x hidden_size); defaults as transformers' config classes."""
    if not state_layers:
        return {}
    if text.get("linear_num_value_heads"):
        return {"mamba_type": "gdn"}
    if text.get("mamba_num_heads") or model_type.startswith("nemotron_h"):
        heads, head_dim = int(_get(text, "mamba_num_heads", 128)), int(_get(text, "mamba_head_dim", 64))
        return dict(mamba_type="mamba2", mamba_num_heads=heads, mamba_head_dim=head_dim, mamba_intermediate_size=heads * head_dim,
                    mamba_n_groups=int(_get(text, "n_groups", None) or _get(text, "mamba_n_groups", 8)),
                    mamba_d_state=int(_get(text, "ssm_state_size", 128)), mamba_d_conv=int(_get(text, "conv_kernel", 4)))
    if text.get("mamba_n_heads") or model_type.startswith("falcon_h1"):
        inter = int(_get(text, "mamba_d_ssm", None) or int(_get(text, "mamba_expand", 2)) * hidden)
        heads = int(_get(text, "mamba_n_heads", 128))
        head_dim = _get(text, "mamba_d_head", "auto")
        return dict(mamba_type="mamba2", mamba_num_heads=heads, mamba_head_dim=inter // heads if head_dim == "auto" else int(head_dim),
                    mamba_intermediate_size=inter, mamba_n_groups=int(_get(text, "mamba_n_groups", 1)),
                    mamba_d_state=int(_get(text, "mamba_d_state", 256)), mamba_d_conv=int(_get(text, "mamba_d_conv", 4)))
    if model_type == "jamba" or text.get("mamba_expand"):
        rank = _get(text, "mamba_dt_rank", "auto")
        return dict(mamba_type="mamba1", mamba_intermediate_size=int(_get(text, "mamba_expand", 2)) * hidden,
                    mamba_d_state=int(_get(text, "mamba_d_state", 16)), mamba_d_conv=int(_get(text, "mamba_d_conv", 4)),
                    mamba_dt_rank=math.ceil(hidden / 16) if rank == "auto" else int(rank))
    raise ModelError(f"{source}: {state_layers} Mamba / linear-attention layers, but no state shape this planner knows: "
                     "linear_num_value_heads (Gated-DeltaNet), mamba_num_heads / mamba_n_heads (Mamba2: Nemotron-H / Falcon-H1) or "
                     "mamba_expand (Mamba1, Jamba); report it with the config.json")


# model_types whose config.json `sliding_window` counts only with `use_sliding_window: true` (transformers sets
# it to None otherwise; Qwen2 then slides only from layer max_window_layers on)
SLIDING_ONLY_WHEN_ENABLED = ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen2_vl", "qwen2_5_vl")


def _sliding_layers(text: Mapping[str, Any], model_type: str, layers: int, attention: int) -> Tuple[int, int]:
    """(window, how many attention layers slide), by the rules vLLM and transformers apply (docs/sources.md#kv-per-token)."""
    window = text.get("sliding_window")
    mt = model_type.lower()
    if mt in SLIDING_ONLY_WHEN_ENABLED and not text.get("use_sliding_window"):
        return 0, 0
    if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
        return 0, 0
    types = text.get("layer_types")
    if types:
        sliding = sum(1 for t in types if t == "sliding_attention")
    elif mt == "gemma2" or mt == "gpt_oss":
        sliding = (layers + 1) // 2                                 # even layers slide (models/gemma2.py, gpt_oss.py)
    elif mt.startswith("gemma3"):
        pattern = int(text.get("sliding_window_pattern") or 6)      # full where (i + 1) % pattern == 0
        sliding = layers - layers // pattern
    elif mt in SLIDING_ONLY_WHEN_ENABLED:
        sliding = max(0, layers - int(text.get("max_window_layers") or 0))
    else:
        sliding = attention                                         # a Mistral-style config: every layer slides
    return (window, min(sliding, attention)) if sliding else (0, 0)


def _rope(text: Mapping[str, Any]) -> Tuple[float, str]:
    """(rope_theta, the scaling type the checkpoint applies or ""), from transformers 4's rope_theta / rope_scaling or
    transformers 5's rope_parameters (one dict, or one per layer type)."""
    params = text.get("rope_parameters")
    if isinstance(params, Mapping) and params and all(isinstance(v, Mapping) for v in params.values()):
        params = next(iter(params.values()))          # per layer type (Gemma 3): the full-attention one comes first
    params = params if isinstance(params, Mapping) else {}
    scaling = text.get("rope_scaling") if isinstance(text.get("rope_scaling"), Mapping) else params
    theta = text.get("rope_theta") or params.get("rope_theta") or 0
    kind = str(scaling.get("rope_type") or scaling.get("type") or "")
    return float(theta), "" if kind == "default" else kind


# YaRN context extension per family, as the model cards document it: (the config's max_position_embeddings that marks
# the published checkpoints, their native context, the largest factor). Qwen3 (dense and MoE) configs say 40960 (32768
# native + room to generate) and their cards extend to 131072 with factor 4; a Qwen3 config with another length (Coder,
# 2507: 262144) is native at that length, 4x as well (Qwen3-Coder's card: 256K native, 1M with YaRN).
YARN: Dict[str, Tuple[int, int, float]] = {"qwen3": (40960, 32768, 4.0), "qwen3_moe": (40960, 32768, 4.0)}


def yarn_limit(m: ModelProfile) -> Tuple[int, float]:
    """(native context, largest YaRN factor) the model card documents; (0, 0) when the family has no documented YaRN, the
    checkpoint already scales RoPE, or its rope_theta is unknown (an override must carry it)."""
    if m.family not in YARN or m.rope_scaling or not m.rope_theta:
        return 0, 0.0
    marker, native, most = YARN[m.family]
    return (native if m.max_position_embeddings == marker else m.max_position_embeddings), most


def yarn_extension(m: ModelProfile, length: int) -> Optional[Tuple[float, int]]:
    """(factor, native context) of the smallest YaRN extension in steps of 2 that covers `length`, or None (yarn_limit)."""
    native, most = yarn_limit(m)
    if not native:
        return None
    factor = 2.0
    while native * factor < length and factor < most:
        factor *= 2
    return (factor, native) if native * factor >= length else None


def _vision_parameters(vision: Mapping[str, Any]) -> int:
    """Approximate parameters of a ViT tower with a patch merger (Qwen2.5/3-VL style)."""
    depth = int(vision.get("depth") or vision.get("num_hidden_layers") or 0)
    hidden = int(vision.get("hidden_size") or vision.get("embed_dim") or 0)
    inter = int(vision.get("intermediate_size") or 4 * hidden)
    out = int(vision.get("out_hidden_size") or hidden)
    merge = int(vision.get("spatial_merge_size") or 2)
    blocks = depth * (4 * hidden * hidden + 2 * hidden * inter)
    merger = (hidden * merge * merge) ** 2 + hidden * merge * merge * out
    return blocks + merger


def _ct_scheme(q: Mapping[str, Any]) -> Optional[str]:
    """The scheme of a compressed-tensors config, named as vLLM's compressed_tensors schemes are (its first group)."""
    groups = q.get("config_groups") or {}
    group = next(iter(groups.values()), {}) if isinstance(groups, Mapping) and groups else {}
    w = group.get("weights") or {}
    a = group.get("input_activations") or {}
    wf, bits = w.get("type") == "float", w.get("num_bits")
    if wf and bits == 4:
        return "NVFP4" if w.get("group_size") == 16 else "MXFP4"
    # FP8 weights never reach here as a scheme: _quantization reads them as fp8 (the FP8 rules and floors apply)
    if not a:
        return "WNA16" if not wf and bits in (4, 8) else None
    if a.get("type") == "float" and a.get("num_bits") == 8:
        return "W4A8-FP8" if not wf and bits == 4 else None
    if a.get("type") == "int" and a.get("num_bits") == 8 and bits == 8:
        return "W8A8-INT8"
    return None


def _kv_cache_quant(q: Mapping[str, Any]) -> Optional[str]:
    """fp8 when the checkpoint carries FP8 KV-cache scales (ModelOpt's kv_cache_quant_algo, compressed-tensors'
    kv_cache_scheme), which vLLM uses with --kv-cache-dtype fp8 (its auto resolves to fp8 for ModelOpt only, utils/torch_utils.py)."""
    algo = str(q.get("kv_cache_quant_algo") or "").upper()
    scheme = q.get("kv_cache_scheme") if isinstance(q.get("kv_cache_scheme"), Mapping) else {}
    if algo == "FP8" or (scheme.get("type") == "float" and scheme.get("num_bits") == 8):
        return "fp8"
    return None


def _quantization(cfg: Mapping[str, Any], text: Mapping[str, Any]) -> Tuple[Optional[str], Optional[int], Optional[int]]:
    q = cfg.get("quantization_config") or text.get("quantization_config")
    if not q:
        return None, None, None
    method = str(q.get("quant_method", "")).lower().replace("compressed_tensors", "compressed-tensors") or None
    if method in (None, "modelopt", "modelopt_fp4") and q.get("quant_algo"):
        # ModelOpt: hf_quant_config.json (read as quantization_config) or config.json's quant_method modelopt: quant_algo
        # FP8 -> modelopt, NVFP4 -> modelopt_fp4 (vLLM's modelopt.py); another algorithm is named so that the plan refuses it
        algo = str(q["quant_algo"]).upper()
        if algo not in ("FP8", "NVFP4"):
            raise ModelError(f"quantization_config.quant_algo {q['quant_algo']!r}: a ModelOpt algorithm the planner does not know "
                             "(FP8 and NVFP4 are planned); give overrides.quantization, or plan a checkpoint of a known algorithm")
        return ("modelopt", 8, None) if algo == "FP8" else ("modelopt_fp4", 4, 16)
    if method == "compressed-tensors":
        groups = q.get("config_groups") or {}
        weights = next(iter(groups.values()), {}).get("weights", {}) if groups else {}
        if weights.get("type") == "float" and weights.get("num_bits") == 8:
            return "fp8", 8, None
        return "compressed-tensors", weights.get("num_bits"), weights.get("group_size")
    if method == "bitsandbytes":     # transformers BitsAndBytesConfig: load_in_4bit (nf4 / fp4) or load_in_8bit (LLM.int8)
        return method, 4 if q.get("load_in_4bit") else 8, 64 if q.get("load_in_4bit") else None
    bits = q.get("bits") or q.get("w_bit") or (8 if method == "fp8" else None)
    group = q.get("group_size") or q.get("q_group_size")
    return method, bits, group


# the parts of count_parameters a module name or pattern of a quantization_config names (checked in this order: a pattern
# that names the shared expert or the linear attention is not also the experts or the attention)
_PART_WORDS: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    ("lm_head", ("lm_head",)),
    ("embeddings", ("embed",)),
    ("vision", ("visual", "vision", "multi_modal_projector", "mm_projector")),
    ("shared_experts", ("shared_expert",)),
    ("linear_attention", ("linear_attn", "mixer", "mamba")),
    ("router", ("mlp.gate", "router", "block_sparse_moe.gate")),
    ("experts", ("experts",)),
    ("attention", ("attn", "attention")),
    ("mlp", ("mlp", "feed_forward", "ffn")),
)


def _named_parts(pattern: str, layers: int) -> Dict[str, float]:
    """{part: the fraction of it} a module name or pattern names: "lm_head", "re:.*self_attn.*" (GPTQModel's "-:" prefix,
    compressed-tensors' "re:"), "model.layers.3.mlp" (one layer of num_hidden_layers)."""
    text = re.sub(r"^(re:|-:|\+:)", "", str(pattern).strip()).lower()
    for part, words in _PART_WORDS:
        if any(w in text for w in words) and not (part == "experts" and "shared_expert" in text) \
                and not (part == "mlp" and re.search(r"mlp\.gate($|[^_])", text)):
            one = re.search(r"layers\.(\d+)\.", text)
            return {part: 1.0 / max(layers, 1) if one else 1.0}
    return {}


def quant_layout(q: Mapping[str, Any], layers: int) -> Tuple[Tuple[Tuple[str, float], ...], bool]:
    """((part, fraction kept in 16 bit) ..., lm_head quantized) of a quantization_config: the modules it names as not
    converted (AWQ / HF modules_to_not_convert, compressed-tensors ignore, FP8 ignored_layers, ModelOpt exclude_modules,
    bitsandbytes llm_int8_skip_modules, GPTQModel's negative `dynamic` keys "-:pattern"), and GPTQ's lm_head flag."""
    names: List[str] = []
    for key in ("modules_to_not_convert", "ignore", "ignored_layers", "exclude_modules", "llm_int8_skip_modules"):
        value = q.get(key)
        if isinstance(value, list):
            names += [str(v) for v in value]
    dynamic = q.get("dynamic")
    if isinstance(dynamic, Mapping):
        names += [str(k) for k in dynamic if str(k).startswith("-:")]
    kept: Dict[str, float] = {}
    for name in names:
        for part, share in _named_parts(name, layers).items():
            kept[part] = min(1.0, kept.get(part, 0.0) + share)
    return tuple(sorted(kept.items())), bool(q.get("lm_head"))


def _attention_parameters(p: Dict[str, Any]) -> int:
    """Projection weights of one full-attention layer: q (gated or not), k, v, o; or MLA's (DeepSeek
    modeling: q_a/q_b or q_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj)."""
    h, heads, kv, d = p["hidden_size"], p["num_attention_heads"], p["num_kv_heads"], p["head_dim"]
    if p.get("kv_lora_rank"):
        lora, rope, nope, v = p["kv_lora_rank"], p["qk_rope_head_dim"], p["qk_nope_head_dim"], p["v_head_dim"]
        q_dim = heads * (nope + rope)
        q_proj = h * p["q_lora_rank"] + p["q_lora_rank"] * q_dim if p.get("q_lora_rank") else h * q_dim
        return q_proj + h * (lora + rope) + lora * heads * (nope + v) + heads * v * h
    q_out = heads * d * (2 if p["attn_output_gate"] else 1)
    return h * q_out + 2 * h * kv * d + heads * d * h


def _state_mixer_parameters(p: Dict[str, Any]) -> int:
    """Projection and convolution weights of one state layer (vLLM MambaMixer2 / MambaMixer / Qwen's GatedDeltaNet):
    Mamba2 in_proj h x (2I + 2GN + H), conv (I + 2GN) x k, out_proj I x h; Mamba1 in_proj h x 2I, conv I x k,
    x_proj I x (dt_rank + 2N), dt_proj dt_rank x I, A I x N, out_proj I x h (I: intermediate, G: groups, N: state)."""
    h, kind = p["hidden_size"], p.get("mamba_type")
    inter, state, conv = p.get("mamba_intermediate_size", 0), p.get("mamba_d_state", 0), p.get("mamba_d_conv", 0)
    if kind == "mamba2":
        bc = 2 * p["mamba_n_groups"] * state
        return h * (2 * inter + bc + p["mamba_num_heads"]) + (inter + bc) * conv + inter * h
    if kind == "mamba1":
        rank = p["mamba_dt_rank"]
        return h * 2 * inter + inter * conv + inter * (rank + 2 * state) + rank * inter + inter * state + inter * h
    kh, vh, kd, vd = p["linear_num_key_heads"], p["linear_num_value_heads"], p["linear_key_head_dim"], p["linear_value_head_dim"]
    return h * (2 * kh * kd + 2 * vh * vd) + h * 2 * vh + (2 * kh * kd + vh * vd) * p["linear_conv_kernel_dim"] + vh * vd * h


def count_parameters(p: Dict[str, Any]) -> Dict[str, int]:
    """Parameters by part, from the architecture numbers: what weight_bytes is estimated from."""
    h = p["hidden_size"]
    attention = p["full_attention_layers"] * _attention_parameters(p)
    linear = p["linear_attention_layers"] * _state_mixer_parameters(p) if p["linear_attention_layers"] else 0
    layers = p["num_layers"]
    # an MLP or expert is up + down, and a gate unless it is Nemotron-H's squared ReLU
    mats = 3 if p.get("mlp_gated", True) else 2
    # DeepSeek's first_k_dense_replace / Qwen-MoE's mlp_only_layers / Jamba's and Llama 4's interleaving: those layers have
    # one dense MLP; Nemotron-H's mamba and attention blocks have none
    dense = min(int(p.get("dense_mlp_layers") or 0), layers)
    if p["num_experts"]:
        moe_layers = layers - dense - int(p.get("mlp_free_layers") or 0)
        experts = moe_layers * p["num_experts"] * mats * h * p["moe_intermediate_size"]
        shared = moe_layers * mats * h * p["shared_expert_intermediate_size"]
        dense_mlp = moe_layers * h * p["num_experts"] + dense * mats * h * p["intermediate_size"]  # routers, dense layers
    else:
        experts, shared = 0, 0
        dense_mlp = dense * mats * h * p["intermediate_size"]
    embed = p["vocab_size"] * h * (1 if p["tie_word_embeddings"] else 2)
    return {"attention": attention, "linear_attention": linear, "experts": experts, "shared_experts": shared,
            "mlp": dense_mlp, "embeddings": embed, "vision": p["vision_parameters"]}


def _per_weight(method: Optional[str], bits: int, group: int, scheme: Optional[str], p: Mapping[str, Any]) -> Optional[float]:
    """Bytes one quantized weight takes with its share of scales and zeros; None for a checkpoint in its torch_dtype.
      GPTQ / AWQ (and compressed-tensors WNA16): bits / 8, + one 16-bit scale and one packed `bits` zero per group
        (AutoGPTQ / AutoAWQ qweight, scales, qzeros; g_idx, one int32 per input row, is left out: < 0.1 %)
      bitsandbytes 4-bit: 4 bits, + one fp32 absmax per 64 (bnb_4bit_use_double_quant: one 8-bit absmax per 64 and one
        fp32 per 256 of those); 8-bit: one byte (LLM.int8, one fp32 scale per row left out)
      FP8 (fp8, ModelOpt FP8, compressed-tensors FP8): one byte, + one fp32 scale per 128 x 128 block when block-quantized
      NVFP4 (ModelOpt, compressed-tensors): 4 bits + one FP8 scale per 16; MXFP4: 4 bits + one E8M0 scale per 32 (OCP MX)"""
    if method in ("gptq", "awq", "gptq_marlin", "awq_marlin", "moe_wna16") or (method == "compressed-tensors" and scheme == "WNA16"):
        if bits >= 16:
            return None
        return bits / 8 + ((2 + bits / 8) / group if group > 0 else 0.0)
    if method == "bitsandbytes":
        if bits == 4:
            return 0.5 + (1 / 64 + 4 / (64 * 256) if p.get("quant_bnb_double") else 4 / 64)
        return 1.0
    if method in ("fp8", "modelopt", "fbgemm_fp8") or (method == "compressed-tensors" and scheme == "W8A8-INT8"):
        return 1 + (4 / (128 * 128) if p.get("weight_block_size") else 0.0)
    if method == "modelopt_fp4" or (method == "compressed-tensors" and scheme == "NVFP4"):
        return 0.5 + 1 / 16
    if method == "mxfp4" or (method == "compressed-tensors" and scheme == "MXFP4"):
        return 0.5 + 1 / 32
    if method == "compressed-tensors" and scheme == "W4A8-FP8":
        return 0.5 + 2 / group
    return None


def estimate_weight_bytes(p: Dict[str, Any]) -> int:
    """Bytes the engine loads, by part and quantization (docs/planner.md "Family table gaps"): a quantized checkpoint
    quantizes every linear layer of the decoder - attention, linear attention, dense MLPs, routed and shared experts - and
    keeps in its torch_dtype the embeddings, the lm_head (unless GPTQ's lm_head flag), the MoE routers, the vision tower and
    whatever its quantization_config names as not converted (quant_layout) - FP8 quantizes the routers too; MXFP4 checkpoints (gpt-oss) quantize the routed
    experts only (their quantization_config names the rest as not converted, the planner does not rely on it)."""
    parts = count_parameters(p)
    full = DTYPE_BYTES.get(p["torch_dtype"], 2)
    method = p["quant_method"]
    bits, group = int(p["quant_bits"] or 16), int(p["quant_group_size"] or 128)
    per = _per_weight(method, bits, group, p.get("quant_scheme"), p)
    if per is None:
        return int(sum(parts.values()) * full)
    layers, h, vocab = p["num_layers"], p["hidden_size"], p["vocab_size"]
    dense = min(int(p.get("dense_mlp_layers") or 0), layers)
    router = (layers - dense - int(p.get("mlp_free_layers") or 0)) * h * p["num_experts"] if p["num_experts"] else 0
    head = 0 if p["tie_word_embeddings"] else vocab * h
    pieces = {"attention": parts["attention"], "linear_attention": parts["linear_attention"], "experts": parts["experts"],
              "shared_experts": parts["shared_experts"], "mlp": parts["mlp"] - router, "lm_head": head}
    if method == "mxfp4":
        quantizable = {"experts"}
    else:
        quantizable = {"attention", "linear_attention", "experts", "shared_experts", "mlp"} | ({"lm_head"} if p.get("quant_lm_head") else set())
    # the MoE router is a linear layer vLLM builds with the checkpoint's quant_config (models/qwen3_moe.py, deepseek_v2.py
    # GateLinear): FP8 holds it in FP8 unless the config ignores it; the integer schemes' kernels take no router (16 bit)
    if method in ("fp8", "modelopt", "fbgemm_fp8"):
        quantizable.add("router")
    kept = dict(p.get("quant_unquantized") or ())
    pieces["router"] = router
    total = float(parts["embeddings"] - head + parts["vision"]) * full
    for part, count in pieces.items():
        share = (1.0 - kept.get(part, 0.0)) if part in quantizable else 0.0
        total += count * share * per + count * (1.0 - share) * full
    return int(total)


def template_traits(template: Optional[str]) -> Tuple[str, Optional[bool]]:
    """What a chat template says about thinking and tools: ("hybrid" when it reads enable_thinking, "always" when its
    generation prompt opens <think> itself (R1 distills, Qwen3 -Thinking), "none", or "" without a template; whether it
    renders the request's `tools`, None without a template)."""
    if not template:
        return "", None
    if "enable_thinking" in template:
        thinking = "hybrid"
    else:
        prompt = template.rsplit("add_generation_prompt", 1)[-1] if "add_generation_prompt" in template else ""
        thinking = "always" if "<think>" in prompt and "</think>" not in prompt else "none"
    return thinking, bool(re.search(r"\btools\b", template))


def chat_template_of(path: str) -> Optional[str]:
    """The chat template a model folder carries: chat_template.jinja (transformers >= 4.43 writes it), else
    tokenizer_config.json's chat_template (one string, or named templates: all of them, the tool_use one included)."""
    jinja = os.path.join(path, "chat_template.jinja")
    if os.path.isfile(jinja):
        with open(jinja, encoding="utf-8") as handle:
            return handle.read()
    data = tokenizer_config_of(path)    # advisory metadata: a broken tokenizer_config.json leaves the template unknown, not the plan
    template = data.get("chat_template") if data else None
    if isinstance(template, list):
        named = [t["template"] for t in template if isinstance(t, Mapping) and isinstance(t.get("template"), str) and t["template"]]
        return "\n".join(named) or None
    return template if isinstance(template, str) and template else None


def _auto_map_refs(auto_map: Any, key: str) -> List[str]:
    """The class references an auto_map gives for `key` (a string, a [slow, fast] pair, or the legacy bare pair)."""
    if isinstance(auto_map, (list, tuple)):
        value: Any = auto_map if key == "AutoTokenizer" else None
    elif isinstance(auto_map, Mapping):
        value = auto_map.get(key)
    else:
        value = None
    refs = value if isinstance(value, (list, tuple)) else [value]
    return [str(r) for r in refs if r]


def _in_vllm_registry(model_type: str, version: Optional[Tuple[int, int, int]]) -> bool:
    span = VLLM_CONFIG_REGISTRY.get(model_type)
    if span is None:
        return False
    since, until = span
    if version is None:
        return until is None
    return since <= version and (until is None or version <= until)


def _auto_model_refs(config: Mapping[str, Any]) -> Tuple[str, ...]:
    """config.json's auto_map AutoModel* references (AutoModel, AutoModelForCausalLM, ...), in the file's order."""
    auto_map = config.get("auto_map")
    if not isinstance(auto_map, Mapping):
        return ()
    return tuple(ref for key in auto_map if str(key).startswith("AutoModel") for ref in _auto_map_refs(auto_map, str(key)))


def _remote_parts(config: Mapping[str, Any], tokenizer_config: Optional[Mapping[str, Any]]) -> Tuple[Tuple[str, ...], str]:
    """(config.json's AutoConfig references where transformers does not ship its model_type, the sentence saying why the
    tokenizer is remote code or "")."""
    auto_map = config.get("auto_map")
    model_type = str(config.get("model_type") or "")
    config_refs = tuple(_auto_map_refs(auto_map, "AutoConfig")) if model_type not in TRANSFORMERS_MODEL_TYPES else ()
    tokenizer = tokenizer_config if isinstance(tokenizer_config, Mapping) else {}
    tokenizer_refs = _auto_map_refs(tokenizer.get("auto_map"), "AutoTokenizer")
    where = "tokenizer_config.json"
    if not tokenizer_refs:
        tokenizer_refs, where = _auto_map_refs(auto_map, "AutoTokenizer"), "config.json"
    tokenizer_class = str(tokenizer.get("tokenizer_class") or config.get("tokenizer_class") or "")
    remote_tokenizer = ""
    if tokenizer_refs and tokenizer_class.removesuffix("Fast") not in TRANSFORMERS_TOKENIZER_CLASSES:
        remote_tokenizer = (f"{where} auto_map AutoTokenizer: {', '.join(tokenizer_refs)} (tokenizer_class "
                            f"{tokenizer_class or 'none'!r} is not one transformers {TRANSFORMERS_VERSION} ships)")
    return config_refs, remote_tokenizer


def _remote_sentences(model_type: str, config_refs: Tuple[str, ...], remote_tokenizer: str,
                      version: Optional[Tuple[int, int, int]]) -> Tuple[str, ...]:
    needs: List[str] = []
    if config_refs and not _in_vllm_registry(model_type, version):
        at = f"vLLM {'.'.join(map(str, version))}'s" if version else "vLLM's"
        needs.append(f"config.json auto_map AutoConfig: {', '.join(config_refs)} (model_type {model_type or 'none'!r} is neither "
                     f"in transformers {TRANSFORMERS_VERSION}'s CONFIG_MAPPING nor in {at} _CONFIG_REGISTRY)")
    if remote_tokenizer:
        needs.append(remote_tokenizer)
    return tuple(needs)


def remote_code_needs(config: Mapping[str, Any], tokenizer_config: Optional[Mapping[str, Any]] = None,
                      version: Optional[Tuple[int, int, int]] = None) -> Tuple[str, ...]:
    """What of a checkpoint only loads with --trust-remote-code on `version` of vLLM (None: the newest read), the way
    transformers' AutoConfig / AutoTokenizer and vLLM's HFConfigParser decide: an auto_map entry for a class transformers
    does not ship and vLLM does not register itself. The config: auto_map AutoConfig with a model_type in neither
    transformers' CONFIG_MAPPING nor that release's _CONFIG_REGISTRY (vllm/transformers_utils/config.py: a registered type
    "is not considered remote code anymore"). The tokenizer: tokenizer_config.json's auto_map AutoTokenizer (else
    config.json's) with a tokenizer_class transformers does not ship (vllm/tokenizers/hf.py turns that ValueError into
    "consider ... the `--trust-remote-code` flag")."""
    config_refs, remote_tokenizer = _remote_parts(config, tokenizer_config)
    return _remote_sentences(str(config.get("model_type") or ""), config_refs, remote_tokenizer, version)


def remote_code_at(m: "ModelProfile", version: Optional[Tuple[int, int, int]]) -> Tuple[str, ...]:
    """remote_code_needs for a profile: what of the model is remote code on `version` of vLLM."""
    return _remote_sentences(m.model_type, m.auto_config_refs, m.remote_tokenizer, version)


def tokenizer_config_of(path: str) -> Optional[Mapping[str, Any]]:
    """A model folder's tokenizer_config.json (None without one, or where it is not a JSON object)."""
    tokenizer = os.path.join(path, "tokenizer_config.json")
    if not os.path.isfile(tokenizer):
        return None
    try:
        data = _read_json(tokenizer)
    except ModelError:
        return None                 # advisory metadata: the plan does not stop on it
    return data if isinstance(data, Mapping) else None


def sentence_transformers_facts(modules: Any, st_config: Any, dense_config: Any = None, source: str = "") -> Dict[str, Any]:
    """The ModelProfile fields a sentence-transformers checkpoint's side files give: modules.json (a list of modules, one of
    them Pooling), sentence_bert_config.json ({max_seq_length}), the Dense module's config.json ({out_features})."""
    facts: Dict[str, Any] = {}
    if modules is not None:
        if not isinstance(modules, list):
            raise ModelError(f"{source or 'modules.json'}: modules.json must be a list of modules, got {type(modules).__name__}")
        facts["st_pooling"] = st_pooling(modules)
    if st_config is not None:
        if not isinstance(st_config, Mapping):
            raise ModelError(f"{source or 'sentence_bert_config.json'}: sentence_bert_config.json must be a JSON object")
        if st_config.get("max_seq_length"):
            facts["st_max_seq_length"] = int(st_config["max_seq_length"])
    if isinstance(dense_config, Mapping) and dense_config.get("out_features"):
        facts["st_dense_out"] = int(dense_config["out_features"])
    elif dense_module_path(modules):
        facts["st_dense_out"] = -1      # a Dense module whose config was not read: the embedding's length is not known
    if facts:
        facts["st_source"] = source
    return facts


def dense_module_path(modules: Any) -> Optional[str]:
    """The folder of the last sentence-transformers Dense module modules.json lists (its config.json has out_features)."""
    found = None
    for mod in modules if isinstance(modules, list) else []:
        if isinstance(mod, Mapping) and str(mod.get("type", "")).endswith(".Dense") and mod.get("path"):
            found = str(mod["path"])
    return found


def profile_from_config(config: Mapping[str, Any], model_id: str, weight_bytes: Optional[int] = None,
                        weight_source: str = "", provenance: str = "", chat_template: Optional[str] = None,
                        tokenizer_config: Optional[Mapping[str, Any]] = None, side: Optional[Mapping[str, Any]] = None) -> ModelProfile:
    """Read a Hugging Face config.json (flat, or multimodal with `text_config`), with its chat template and tokenizer_config.json
    when known, and the sentence-transformers facts of its side files (`side`: sentence_transformers_facts)."""
    if not isinstance(config, Mapping):
        raise ModelError(f"{model_id}: config.json is not a JSON object")
    source = f"{model_id} config.json"
    model_type = str(config.get("model_type") or (config.get("text_config") or {}).get("model_type") or "")
    text_type = hf_config.text_model_type(config)
    # read as transformers' config class reads it: other spellings, then the class's defaults (_hf_config)
    raw = config.get("text_config") or config
    # transformers 5 writes Nemotron-H's layers as layers_block_type and may leave num_hidden_layers out: the list counts
    # them (the class derives num_hidden_layers from it), before any class default could
    listed = raw.get("layers_block_type") or raw.get("hybrid_override_pattern")
    text = hf_config.as_read(dict(raw, num_hidden_layers=raw.get("num_hidden_layers") or (len(listed) if listed else None)), text_type)
    archs = config.get("architectures") or text.get("architectures") or ["unknown"]
    hidden = int(_get(text, "hidden_size", required=True, source=source))
    layers = int(_get(text, "num_hidden_layers", required=True, source=source))
    heads = int(_get(text, "num_attention_heads", required=True, source=source))
    kv = hf_config.kv_heads(text, heads, text_type)
    head_dim = int(_get(text, "head_dim", None) or _get(text, "hidden_size_per_head", None) or hidden // heads)
    longest = hf_config.longest(text)
    full, linear, blocks = _layer_kinds(text, layers, source, model_type.lower())
    # every spelling vLLM's model classes read (vllm/model_executor/models/*; issue 17): Qwen-MoE / Jamba num_experts, DeepSeek / Nemotron-H
    # n_routed_experts, Mixtral / gpt-oss / Llama 4 num_local_experts
    experts = int(_get(text, "num_experts", 0) or _get(text, "n_routed_experts", 0) or _get(text, "num_local_experts", 0) or 0)
    # Mixtral, gpt-oss, Jamba and Llama 4 have no moe_intermediate_size: their experts are intermediate_size wide
    # (transformers MixtralSparseMoeBlock / GptOssExperts, vLLM jamba.py / llama4.py)
    moe_inter = int(_get(text, "moe_intermediate_size", 0) or (_get(text, "intermediate_size", 0) if experts else 0) or 0)
    # Qwen-MoE shared_expert_intermediate_size; Nemotron-H n_shared_experts x moe_shared_expert_intermediate_size; DeepSeek
    # n_shared_experts experts of moe_intermediate_size; Llama 4 one shared expert as wide as a routed one (Llama4MoE)
    shared_count = int(_get(text, "n_shared_experts", 0) or 0)
    shared_inter = int(_get(text, "shared_expert_intermediate_size", 0)
                       or shared_count * int(_get(text, "moe_shared_expert_intermediate_size", 0) or 0) or shared_count * moe_inter
                       or (moe_inter if model_type.lower().startswith("llama4") else 0))
    # Llama 4's dense layers use intermediate_size_mlp (its intermediate_size is the experts' width)
    dense_inter = int(_get(text, "intermediate_size_mlp", 0) or _get(text, "intermediate_size", 4 * hidden))
    mlp_free = 0
    if blocks is not None:                      # Nemotron-H: MLP and MoE are layers of their own
        dense_layers, mlp_free = blocks[0], layers - blocks[0] - blocks[1]
        if not blocks[1]:
            experts, moe_inter, shared_inter = 0, 0, 0
    elif experts:
        dense_layers = int(_get(text, "first_k_dense_replace", 0) or 0)
        only = set(_get(text, "mlp_only_layers", []) or [])
        step = int(_get(text, "decoder_sparse_step", 1) or 1)
        # Jamba: experts where i % expert_layer_period == expert_layer_offset; Llama 4: where (i + 1) %
        # interleave_moe_layer_step == 0 (transformers JambaConfig.layers_num_experts, vLLM llama4.py)
        period, offset = int(_get(text, "expert_layer_period", 1) or 1), int(_get(text, "expert_layer_offset", 0) or 0)
        interleave = int(_get(text, "interleave_moe_layer_step", 1) or 0)
        dense_layers = max(dense_layers, sum(1 for i in range(layers) if i in only or (step > 1 and (i + 1) % step != 0)
                                             or (period > 1 and i % period != offset) or not interleave or (i + 1) % interleave))
    else:
        dense_layers = layers
    if experts and dense_layers + mlp_free >= layers:   # experts named but no layer uses them (first_k_dense_replace >= layers)
        experts, moe_inter, shared_inter = 0, 0, 0
    q_cfg = config.get("quantization_config") or text.get("quantization_config") or {}
    block = q_cfg.get("weight_block_size") if isinstance(q_cfg, Mapping) else None
    method, bits, group = _quantization(config, text)
    kept, lm_head_quantized = quant_layout(q_cfg, layers) if isinstance(q_cfg, Mapping) and method else ((), False)
    family = _family(model_type, archs[0], experts, linear, model_id)
    window, sliding = _sliding_layers(text, model_type, layers, full)
    chunk, chunked = _chunked_layers(text, layers, full) if not sliding else (0, 0)
    # the SSM state's dtype: the config's (Qwen3.5 mamba_ssm_dtype, Nemotron-H mamba_ssm_cache_dtype), else vLLM's default -
    # float32 for Nemotron-H (models/config.py NemotronHForCausalLMConfig) and, as before, Gated-DeltaNet; the model dtype
    # ("auto") for the others (Jamba, Falcon-H1: no hook)
    state = _state_shape(text, hidden, linear, source, model_type.lower())
    default_ssm = "float32" if state.get("mamba_type") == "gdn" or model_type.lower().startswith("nemotron_h") else "auto"
    ssm_dtype = str(_get(text, "mamba_ssm_dtype", None) or _get(text, "mamba_ssm_cache_dtype", None) or default_ssm)
    kv_lora = int(_get(text, "kv_lora_rank", 0) or 0)
    vision_cfg = config.get("vision_config")
    theta, scaling = _rope(text)
    params: Dict[str, Any] = dict(
        id=model_id, family=family, architecture=archs[0], hidden_size=hidden, num_layers=layers,
        full_attention_layers=full, linear_attention_layers=linear, num_attention_heads=heads, num_kv_heads=kv,
        head_dim=head_dim, intermediate_size=dense_inter,
        vocab_size=int(_get(text, "vocab_size", required=True, source=source)),
        max_position_embeddings=longest[0],
        torch_dtype=str(_get(text, "torch_dtype", None) or _get(config, "torch_dtype", None) or _get(text, "dtype", "bfloat16")),
        num_experts=experts, experts_per_token=int(_get(text, "num_experts_per_tok", 0) or _get(text, "experts_per_token", 0)
                                                   or _get(text, "num_experts_per_token", 0) or 0),
        moe_intermediate_size=moe_inter,
        shared_expert_intermediate_size=shared_inter,
        linear_num_key_heads=int(_get(text, "linear_num_key_heads", 0) or 0),
        linear_num_value_heads=int(_get(text, "linear_num_value_heads", 0) or 0),
        linear_key_head_dim=int(_get(text, "linear_key_head_dim", 0) or 0),
        linear_value_head_dim=int(_get(text, "linear_value_head_dim", 0) or 0),
        linear_conv_kernel_dim=int(_get(text, "linear_conv_kernel_dim", 0) or 0),
        mamba_ssm_dtype=ssm_dtype, **state, mlp_free_layers=mlp_free,
        # vLLM models/nemotron_h.py NemotronHMLP: up_proj and down_proj with relu2, no gate (its experts too)
        mlp_gated=not model_type.lower().startswith("nemotron_h"),
        tie_word_embeddings=bool(_get(config, "tie_word_embeddings", _get(text, "tie_word_embeddings", False))),
        attn_output_gate=bool(_get(text, "attn_output_gate", False)),
        vision=bool(vision_cfg), vision_parameters=_vision_parameters(vision_cfg) if vision_cfg else 0,
        quant_method=method, quant_bits=bits, quant_group_size=group,
        quant_sym=bool(q_cfg["sym"]) if method == "gptq" and isinstance(q_cfg, Mapping) and "sym" in q_cfg else None,
        dense_mlp_layers=dense_layers, kv_lora_rank=kv_lora,
        quant_scheme=_ct_scheme(q_cfg) if method == "compressed-tensors" else None,
        kv_cache_quant=_kv_cache_quant(q_cfg) if isinstance(q_cfg, Mapping) else None,
        qk_rope_head_dim=int(_get(text, "qk_rope_head_dim", 0) or 0) if kv_lora else 0,
        q_lora_rank=int(_get(text, "q_lora_rank", 0) or 0) if kv_lora else 0,
        qk_nope_head_dim=int(_get(text, "qk_nope_head_dim", 0) or 0) if kv_lora else 0,
        v_head_dim=int(_get(text, "v_head_dim", 0) or 0) if kv_lora else 0,
        rope_theta=theta, rope_scaling=scaling, quant_unquantized=kept, quant_lm_head=lm_head_quantized,
        quant_bnb_double=bool(isinstance(q_cfg, Mapping) and q_cfg.get("bnb_4bit_use_double_quant")),
        weight_block_size=(int(block[0]), int(block[1])) if block and len(block) == 2 else None,
        num_labels=num_labels(text), pad_token_id=int(text["pad_token_id"]) if isinstance(text.get("pad_token_id"), int) else None,
        is_causal=text.get("is_causal") if isinstance(text.get("is_causal"), bool) else None, **dict(side or {}),
        # the multi-token-prediction layers a checkpoint ships for speculative decoding (DeepSeek-V3 / GLM-4.5 / MiMo
        # num_nextn_predict_layers, Qwen3-Next / Qwen3.5 mtp_num_hidden_layers); vLLM loads them only for --speculative-config
        mtp_layers=int(_get(text, "num_nextn_predict_layers", 0) or _get(text, "mtp_num_hidden_layers", 0) or 0),
    )
    if params["torch_dtype"] not in DTYPE_BYTES:
        raise ModelError(f"{source}: torch_dtype {params['torch_dtype']!r} is not one the planner knows")
    if heads % kv:
        raise ModelError(f"{source}: {heads} attention heads are not a multiple of {kv} KV heads")
    if weight_bytes is None:
        weight_bytes = estimate_weight_bytes(params)
        weight_source = weight_source or "estimated from the config"
    name = model_id.lower()
    # "-Thinking" checkpoints (Qwen3-*-Thinking-2507, Qwen3-Next-*-Thinking) think always, whatever the family;
    # checked first, so that a Qwen3 MoE "-Thinking-2507" is not taken for a hybrid (enable_thinking) one
    if "thinking" in name or family in THINKING_FAMILIES:
        thinking = "always"
    elif family.startswith("qwen3_5") or family in HYBRID_FAMILIES or (family in ("qwen3", "qwen3_moe") and "instruct" not in name and "coder" not in name):
        thinking = "hybrid"
    else:
        thinking = "none"
    template_thinking, template_tools = template_traits(chat_template)
    remote = _remote_parts(config, tokenizer_config)
    thinking_from = "the model's name and family"
    if template_thinking and template_thinking != thinking and family not in THINKING_FAMILIES:
        # the template is what the engine renders: it wins over the name (a renamed R1 distill, a thinking fine-tune)
        thinking, thinking_from = template_thinking, "its chat template"
    return ModelProfile(weight_bytes=int(weight_bytes), weight_bytes_source=weight_source, thinking=thinking,
                        template_thinking=template_thinking, template_tools=template_tools, thinking_from=thinking_from,
                        model_type=model_type, sliding_window=window, sliding_layers=sliding,
                        attention_chunk_size=chunk, chunked_layers=chunked,
                        auto_config_refs=remote[0], remote_tokenizer=remote[1], auto_model_refs=_auto_model_refs(config),
                        provenance=provenance, min_engine="0.17.0" if family.startswith("qwen3_5") else
                        "0.10.2" if family == "qwen3_next" else "0.10.0" if family == "glm45" else "0.8.5", **params)


def weight_bytes_from_index(index: Mapping[str, Any]) -> Optional[int]:
    total = (index.get("metadata") or {}).get("total_size")
    return int(total) if total else None


QUANT_SIDE_FILES = ("quantize_config.json", "quant_config.json", "hf_quant_config.json")


def _read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except OSError as exc:
        raise ModelError(f"{path}: cannot read ({exc.strerror}); check the path and that the controller user may read it") from exc
    except json.JSONDecodeError as exc:
        raise ModelError(f"{path}: not JSON ({exc.msg}, line {exc.lineno}); fetch it again (a cut download?) or fix the file") from exc


def profile_from_directory(path: str, model_id: Optional[str] = None, listed_weight_bytes: int = 0, provenance: str = "") -> ModelProfile:
    """A model on disk (or just its config.json + model.safetensors.index.json, fetched before
    the weights): exact weight bytes from the index or the file sizes (or, for a folder of metadata
    only, the sizes the hub listed). A checkpoint that keeps its quantization in a side file (GPTQ's
    quantize_config.json ...) is read with it, as vLLM reads it."""
    config_path = os.path.join(path, "config.json")
    config = _read_json(config_path)
    if isinstance(config, dict) and not config.get("quantization_config"):
        for side in QUANT_SIDE_FILES:
            if os.path.isfile(os.path.join(path, side)):
                quant = _read_json(os.path.join(path, side))
                config = {**config, "quantization_config": quant.get("quantization", quant) if side == "hf_quant_config.json" else quant}
                break
    weight_bytes, source = None, ""
    if only_gguf_weights(os.listdir(path)):
        raise ModelError(gguf_refusal(f"{model_id or path}: {path} holds GGUF weights only"))
    mistral = mistral_format(os.listdir(path))
    # a Mistral-format checkpoint is loaded from consolidated*.safetensors only (vLLM model_loader/default_loader.py,
    # load_format mistral); a folder with both formats holds every weight twice, and only one copy is loaded
    index_name = "consolidated.safetensors.index.json" if mistral else "model.safetensors.index.json"
    index_path = os.path.join(path, index_name)
    if os.path.isfile(index_path):
        weight_bytes = weight_bytes_from_index(_read_json(index_path))
        source = f"{index_name} metadata.total_size"
    if weight_bytes is None:
        files = [f for f in os.listdir(path) if f.endswith(".safetensors") and f.startswith("consolidated") == mistral]
        if files:
            weight_bytes = sum(os.path.getsize(os.path.join(path, f)) for f in files)
            source = f"sizes of {len(files)} safetensors file(s)"
    if weight_bytes is None and listed_weight_bytes:
        weight_bytes, source = int(listed_weight_bytes), "sizes of the weight files the hub lists"
    profile = profile_from_config(config, model_id or path, weight_bytes, source, provenance=provenance or f"read from {config_path}",
                                  chat_template=chat_template_of(path), tokenizer_config=tokenizer_config_of(path),
                                  side=_side_files(path))
    return replace(profile, mistral_format=True) if mistral else profile


def mistral_format(files: List[str]) -> bool:
    """A checkpoint in Mistral's own format: params.json (its config), consolidated*.safetensors (its weights) and a
    mistral_common tokenizer (tekken.json, or tokenizer.model.v*), the files vLLM's --config-format / --load-format /
    --tokenizer-mode mistral read (transformers_utils/config.py MISTRAL_CONFIG_NAME, model_loader/default_loader.py)."""
    names = set(files)
    return ("params.json" in names and any(f.startswith("consolidated") and f.endswith(".safetensors") for f in names)
            and ("tekken.json" in names or any(f.startswith("tokenizer.model.v") for f in names)))


# sentence-transformers' side files (vLLM transformers_utils/config.py get_pooling_config / get_sentence_transformer_tokenizer_config
# read the same two): fetched with config.json (_model_store.CONFIG_ONLY)
ST_SIDE_FILES = ("modules.json", "sentence_bert_config.json")


def _side_files(path: str) -> Dict[str, Any]:
    modules_path, st_path = (os.path.join(path, name) for name in ST_SIDE_FILES)
    modules = _read_json(modules_path) if os.path.isfile(modules_path) else None
    st_config = _read_json(st_path) if os.path.isfile(st_path) else None
    dense_dir = dense_module_path(modules)
    dense_path = os.path.join(path, dense_dir, "config.json") if dense_dir else ""
    dense = _read_json(dense_path) if dense_path and os.path.isfile(dense_path) else None
    return sentence_transformers_facts(modules, st_config, dense, f"read from {path}")


# --------------------------------------------------------------------------------------------
# Built-in catalog: config.json excerpts. Qwen3.5 numbers are the published config.json values
# (docs/sources.md#qwen35-configs: copies of the HF configs, cross-checked between three copies); Qwen3 / Qwen3-Next numbers are
# their published config.json values. Qwen3.5-2B and -9B hidden size / head counts are not in
# those copies: they are estimated (KV layout and layer counts are known), and marked so.

_QWEN35_COMMON = dict(
    head_dim=256, attn_output_gate=True, full_attention_interval=4, linear_key_head_dim=128, linear_value_head_dim=128,
    linear_conv_kernel_dim=4, mamba_ssm_dtype="float32", vocab_size=248320, max_position_embeddings=262144,
    torch_dtype="bfloat16",
)
_QWEN35_VISION_SMALL = dict(depth=12, hidden_size=768, intermediate_size=3072, spatial_merge_size=2)
_QWEN35_VISION = dict(depth=27, hidden_size=1152, intermediate_size=4304, spatial_merge_size=2)

# Qwen's GPTQ-Int4 layout: the MLP / routed experts in 4 bit, attention, Gated-DeltaNet and the shared experts in 16 bit
# (GPTQModel's negative `dynamic` keys, which vLLM's gptq.py reads); the 68.4 GiB field report 003 loaded for
# Qwen3.5-122B-A10B-GPTQ-Int4 matches it. The published files' own quantization_config was not read: a folder or hub read
# of the checkpoint replaces this excerpt.
_GPTQ_INT4 = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True,
              "dynamic": {"-:.*self_attn.*": {}, "-:.*linear_attn.*": {}, "-:.*shared_expert.*": {}}}
_FP8_BLOCK = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}


def _qwen35(arch: str, vision: Dict[str, Any], **text: Any) -> Dict[str, Any]:
    text_cfg = dict(_QWEN35_COMMON, **text)
    text_cfg["model_type"] = "qwen3_5_moe_text" if text.get("num_experts") else "qwen3_5_text"
    # the vision merger projects into the language model's hidden size
    vision_cfg = dict(vision, out_hidden_size=text["hidden_size"])
    return {"architectures": [arch], "model_type": "qwen3_5_moe" if text.get("num_experts") else "qwen3_5",
            "text_config": text_cfg, "vision_config": vision_cfg, "tie_word_embeddings": bool(text.get("tie_word_embeddings"))}


def _qwen3(arch: str, **cfg: Any) -> Dict[str, Any]:
    base = dict(architectures=[arch], model_type="qwen3_moe" if cfg.get("num_experts") else "qwen3", head_dim=128,
                vocab_size=151936, max_position_embeddings=40960, torch_dtype="bfloat16")
    if "model_type" not in cfg and "max_position_embeddings" not in cfg:
        base["rope_theta"] = 1000000          # the published Qwen3 / Qwen3-MoE 40960-token configs (rope_scaling null)
    base.update(cfg)
    return base


_BASE_CONFIGS: Dict[str, Tuple[Dict[str, Any], str]] = {
    "Qwen/Qwen3.5-0.8B": (_qwen35("Qwen3_5ForConditionalGeneration", _QWEN35_VISION_SMALL, hidden_size=1024, num_hidden_layers=24,
                                  num_attention_heads=8, num_key_value_heads=2, linear_num_key_heads=16, linear_num_value_heads=16,
                                  intermediate_size=3584, tie_word_embeddings=True), "huggingface.co/Qwen config.json, docs/sources.md#qwen35-configs"),
    "Qwen/Qwen3.5-2B": (_qwen35("Qwen3_5ForConditionalGeneration", _QWEN35_VISION_SMALL, hidden_size=2048, num_hidden_layers=24,
                                num_attention_heads=8, num_key_value_heads=2, linear_num_key_heads=16, linear_num_value_heads=16,
                                intermediate_size=6144, tie_word_embeddings=True),
                        "docs/sources.md#qwen35-configs for layers and KV heads; hidden size, Q heads and MLP width ESTIMATED"),
    "Qwen/Qwen3.5-4B": (_qwen35("Qwen3_5ForConditionalGeneration", _QWEN35_VISION_SMALL, hidden_size=2560, num_hidden_layers=32,
                                num_attention_heads=16, num_key_value_heads=4, linear_num_key_heads=16, linear_num_value_heads=32,
                                intermediate_size=9216, tie_word_embeddings=True), "huggingface.co/Qwen config.json, docs/sources.md#qwen35-configs"),
    "Qwen/Qwen3.5-9B": (_qwen35("Qwen3_5ForConditionalGeneration", _QWEN35_VISION, hidden_size=4096, num_hidden_layers=32,
                                num_attention_heads=16, num_key_value_heads=4, linear_num_key_heads=16, linear_num_value_heads=32,
                                intermediate_size=12288),
                        "docs/sources.md#qwen35-configs for layers and KV heads; hidden size, Q heads and MLP width ESTIMATED"),
    "Qwen/Qwen3.5-27B": (_qwen35("Qwen3_5ForConditionalGeneration", _QWEN35_VISION, hidden_size=5120, num_hidden_layers=64,
                                 num_attention_heads=24, num_key_value_heads=4, linear_num_key_heads=16, linear_num_value_heads=48,
                                 intermediate_size=17408), "huggingface.co/Qwen config.json, docs/sources.md#qwen35-configs"),
    "Qwen/Qwen3.5-35B-A3B": (_qwen35("Qwen3_5MoeForConditionalGeneration", _QWEN35_VISION, hidden_size=2048, num_hidden_layers=40,
                                     num_attention_heads=16, num_key_value_heads=2, linear_num_key_heads=16, linear_num_value_heads=32,
                                     num_experts=256, num_experts_per_tok=8, moe_intermediate_size=512,
                                     shared_expert_intermediate_size=512), "huggingface.co/Qwen config.json, docs/sources.md#qwen35-configs"),
    "Qwen/Qwen3.5-122B-A10B": (_qwen35("Qwen3_5MoeForConditionalGeneration", _QWEN35_VISION, hidden_size=3072, num_hidden_layers=48,
                                       num_attention_heads=32, num_key_value_heads=2, linear_num_key_heads=16, linear_num_value_heads=64,
                                       num_experts=256, num_experts_per_tok=8, moe_intermediate_size=1024,
                                       shared_expert_intermediate_size=1024), "huggingface.co/Qwen config.json, docs/sources.md#qwen35-configs"),
    "Qwen/Qwen3.5-397B-A17B": (_qwen35("Qwen3_5MoeForConditionalGeneration", _QWEN35_VISION, hidden_size=4096, num_hidden_layers=60,
                                       num_attention_heads=32, num_key_value_heads=2, linear_num_key_heads=16, linear_num_value_heads=64,
                                       num_experts=512, num_experts_per_tok=10, moe_intermediate_size=1024,
                                       shared_expert_intermediate_size=1024), "huggingface.co/Qwen config.json, docs/sources.md#qwen35-configs"),
    "Qwen/Qwen3-Next-80B-A3B-Instruct": (_qwen3("Qwen3NextForCausalLM", model_type="qwen3_next", hidden_size=2048, num_hidden_layers=48,
                                                num_attention_heads=16, num_key_value_heads=2, head_dim=256, full_attention_interval=4,
                                                linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
                                                linear_value_head_dim=128, linear_conv_kernel_dim=4, mamba_ssm_dtype="bfloat16",
                                                num_experts=512, num_experts_per_tok=10, moe_intermediate_size=512,
                                                shared_expert_intermediate_size=512, intermediate_size=5120, attn_output_gate=True,
                                                max_position_embeddings=262144), "published config.json"),
    "Qwen/Qwen3-0.6B": (_qwen3("Qwen3ForCausalLM", hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                               intermediate_size=3072, tie_word_embeddings=True), "published config.json"),
    "Qwen/Qwen3-8B": (_qwen3("Qwen3ForCausalLM", hidden_size=4096, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
                             intermediate_size=12288), "published config.json"),
    "Qwen/Qwen3-14B": (_qwen3("Qwen3ForCausalLM", hidden_size=5120, num_hidden_layers=40, num_attention_heads=40, num_key_value_heads=8,
                              intermediate_size=17408), "published config.json"),
    "Qwen/Qwen3-32B": (_qwen3("Qwen3ForCausalLM", hidden_size=5120, num_hidden_layers=64, num_attention_heads=64, num_key_value_heads=8,
                              intermediate_size=25600), "published config.json"),
    "Qwen/Qwen3-30B-A3B": (_qwen3("Qwen3MoeForCausalLM", hidden_size=2048, num_hidden_layers=48, num_attention_heads=32,
                                  num_key_value_heads=4, num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768,
                                  intermediate_size=6144), "published config.json"),
    "Qwen/Qwen3-235B-A22B": (_qwen3("Qwen3MoeForCausalLM", hidden_size=4096, num_hidden_layers=94, num_attention_heads=64,
                                    num_key_value_heads=4, num_experts=128, num_experts_per_tok=8, moe_intermediate_size=1536,
                                    intermediate_size=12288), "published config.json"),
    "Qwen/Qwen3-Coder-30B-A3B-Instruct": (_qwen3("Qwen3MoeForCausalLM", hidden_size=2048, num_hidden_layers=48, num_attention_heads=32,
                                                 num_key_value_heads=4, num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768,
                                                 intermediate_size=6144, max_position_embeddings=262144), "published config.json"),
}

# Quantized variants: (base id, suffix, quantization_config). The Qwen3.5 -FP8 / -GPTQ-Int4 ones are
# Qwen's own; Qwen3-Next GPTQ-Int4 is the community checkpoint of field report 001.
_VARIANTS: List[Tuple[str, str, Dict[str, Any]]] = [
    *[(f"Qwen/Qwen3.5-{size}", suffix, q) for size in ("27B", "35B-A3B", "122B-A10B", "397B-A17B")
      for suffix, q in (("-FP8", _FP8_BLOCK), ("-GPTQ-Int4", _GPTQ_INT4))],
    ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "-FP8", _FP8_BLOCK),
    ("Qwen/Qwen3-8B", "-FP8", _FP8_BLOCK),
    ("Qwen/Qwen3-14B", "-FP8", _FP8_BLOCK),
    ("Qwen/Qwen3-32B", "-FP8", _FP8_BLOCK),
    ("Qwen/Qwen3-30B-A3B", "-FP8", _FP8_BLOCK),
    ("Qwen/Qwen3-235B-A22B", "-FP8", _FP8_BLOCK),
]


def _catalog_configs() -> Dict[str, Tuple[Dict[str, Any], str]]:
    configs = dict(_BASE_CONFIGS)
    thinking_next = dict(_BASE_CONFIGS["Qwen/Qwen3-Next-80B-A3B-Instruct"][0])
    configs["Qwen/Qwen3-Next-80B-A3B-Thinking"] = (thinking_next, _BASE_CONFIGS["Qwen/Qwen3-Next-80B-A3B-Instruct"][1])
    for base, suffix, quant in _VARIANTS:
        cfg = json.loads(json.dumps(configs[base][0]))
        cfg["quantization_config"] = dict(quant)
        configs[base + suffix] = (cfg, configs[base][1] + "; quantization_config as published for " + suffix.lstrip("-"))
    for which in ("Instruct", "Thinking"):
        cfg = json.loads(json.dumps(configs[f"Qwen/Qwen3-Next-80B-A3B-{which}"][0]))
        cfg["quantization_config"] = dict(_GPTQ_INT4)
        configs[f"Qwen/Qwen3-Next-80B-A3B-{which}-GPTQ-Int4"] = (
            cfg, "community GPTQ-Int4 checkpoint of field report 001; quantization layout assumed like Qwen's own GPTQ-Int4")
    return configs


CATALOG: Dict[str, Tuple[Dict[str, Any], str]] = _catalog_configs()
CATALOG_IDS = tuple(sorted(CATALOG))


def catalog_profile(model_id: str) -> ModelProfile:
    key = next((k for k in CATALOG if k.lower() == model_id.lower() or k.split("/", 1)[1].lower() == model_id.lower()), None)
    if key is None:
        raise ModelError(f"model {model_id!r} is not in the built-in catalog and no config.json of it was read (plan.yml reads "
                         "it from the model's hub for an owner/name id); give its local path (with config.json), its config "
                         f"inline ({{id, config}}), or one of: {', '.join(CATALOG_IDS)}")
    config, provenance = CATALOG[key]
    return profile_from_config(config, key, provenance=f"built-in catalog: {provenance}")


def in_catalog(model_id: str) -> bool:
    return any(k.lower() == model_id.lower() or k.split("/", 1)[1].lower() == model_id.lower() for k in CATALOG)


def metadata_needed(deployments: Any) -> List[Dict[str, Optional[str]]]:
    """The models a plan must read from their hub first: named by a hub id (owner/name), neither in the
    built-in catalog nor given with a config.json or a local path. [{id, revision}], once each, in order."""
    out: List[Dict[str, Optional[str]]] = []
    for d in deployments if isinstance(deployments, list) else []:
        spec = d.get("model") if isinstance(d, Mapping) else None
        if isinstance(spec, str):
            model_id, revision = spec, None
        elif isinstance(spec, Mapping) and spec.get("id") and not spec.get("config") and not spec.get("path"):
            model_id, revision = str(spec["id"]), (str(spec["revision"]) if spec.get("revision") else None)
        else:
            continue
        if "/" not in model_id or in_catalog(model_id):
            continue
        entry = {"id": model_id, "revision": revision}
        if entry not in out:
            out.append(entry)
    return out


def gguf_refusal(what: str) -> str:
    """Why a GGUF model is refused. vLLM serves a GGUF file with the base model's tokenizer (--tokenizer) and, for
    architectures transformers cannot read from GGUF, its config (--hf-config-path); GGUF support left vLLM in 0.24
    (_engine.QUANT_REMOVED). The collection does not plan, fetch or mount single files and their base tokenizers: refused,
    never planned as the base model's bf16 checkpoint."""
    return (f"{what}, which this collection does not plan (vLLM needs a GGUF file with the base model's --tokenizer, and has no "
            "GGUF support from 0.24); deploy the base model's safetensors checkpoint or a GPTQ / AWQ / FP8 one of it instead")


def only_gguf_weights(names: Iterable[str]) -> bool:
    """A folder or listing whose weights are GGUF files only (a GGUF upload keeps the base model's config.json beside them)."""
    names = [n.lower() for n in names]
    return any(n.endswith(".gguf") for n in names) and not any(n.endswith((".safetensors", ".bin", ".pt", ".pth")) for n in names)


def resolve_model(spec: Any, metadata: Optional[Mapping[str, Any]] = None) -> ModelProfile:
    """A deployment's `model`: a catalog id, or a dict with `id` and optional `path` / `config`
    (a config.json already read) / `weight_bytes`. `metadata` maps a hub id to the folder of its
    metadata that plan.yml fetched on the controller ({dir, weight_bytes, source}); it is read before
    the catalog, which stays the offline fallback."""
    model_id = spec if isinstance(spec, str) else str(spec.get("id") or "") if isinstance(spec, Mapping) else ""
    named = [str(v) for v in ([spec] if isinstance(spec, str) else [spec.get("id"), spec.get("path")] if isinstance(spec, Mapping) else [])
             if v]
    if any(v.lower().endswith(".gguf") for v in named):
        raise ModelError(gguf_refusal(f"model {named[0]!r} is a GGUF file"))
    fetched = (metadata or {}).get(model_id)
    if isinstance(spec, Mapping) and (spec.get("config") or spec.get("path")):
        fetched = None
    if fetched:
        return profile_from_directory(str(fetched["dir"]), model_id, int(fetched.get("weight_bytes") or 0),
                                      provenance=f"config.json of {model_id} fetched from {fetched.get('source', 'its hub')}")
    if isinstance(spec, str):
        return catalog_profile(spec)
    if isinstance(spec, Mapping):
        model_id = str(spec.get("id") or spec.get("path") or "")
        if not model_id:
            raise ModelError(f"model {dict(spec)!r} needs an id or a path")
        if spec.get("config"):
            return profile_from_config(spec["config"], model_id, spec.get("weight_bytes"),
                                       "given with the deployment" if spec.get("weight_bytes") else "",
                                       provenance="config.json given with the deployment",
                                       side=sentence_transformers_facts(spec.get("modules"), spec.get("sentence_bert_config"),
                                                                        spec.get("dense_config"), "given with the deployment"))
        if spec.get("path") and os.path.isfile(os.path.join(str(spec["path"]), "config.json")):
            return profile_from_directory(str(spec["path"]), model_id)
        return catalog_profile(model_id)
    raise ModelError(f"model must be a catalog id or a mapping, got {spec!r}")


def state_bytes_per_layer(m: ModelProfile, tp: int, dtype_bytes: int, spec_tokens: int = 0) -> int:
    """Conv + SSM state of one request in one state layer on one GPU: the MambaSpec page before padding (vLLM
    model_executor/layers/mamba/mamba_utils.py MambaStateShapeCalculator, the same at 0.26 and 0.33). The conv state is
    in the model dtype (`dtype_bytes`), the SSM state in mamba_ssm_dtype ("auto": the model dtype).
      Gated-DeltaNet: conv (k - 1 + spec) x (2 nk dk + nv dv) / tp, ssm (nv / tp) x dv x dk
      Mamba2:         conv (k - 1 + spec) x (I + 2 G N) / tp, ssm (H / tp) x P x N  (I = H x P; G not divisible by tp
                      is replicated up to tp groups, extra_groups_for_head_shards)
      Mamba1:         conv (k - 1) x I / tp, ssm I / tp x N  (I = mamba_expand x hidden_size)"""
    ssm_bytes = dtype_bytes if m.mamba_ssm_dtype == "auto" else DTYPE_BYTES.get(m.mamba_ssm_dtype, 4)
    if m.mamba_type == "mamba2":
        groups = m.mamba_n_groups if m.mamba_n_groups % tp == 0 else tp
        conv = (m.mamba_intermediate_size + 2 * groups * m.mamba_d_state) // tp * (m.mamba_d_conv - 1 + spec_tokens)
        ssm = m.mamba_num_heads // tp * m.mamba_head_dim * m.mamba_d_state
    elif m.mamba_type == "mamba1":
        conv = m.mamba_intermediate_size // tp * (m.mamba_d_conv - 1)
        ssm = m.mamba_intermediate_size // tp * m.mamba_d_state
    else:
        conv = (2 * m.linear_num_key_heads * m.linear_key_head_dim + m.linear_num_value_heads * m.linear_value_head_dim) // tp \
            * (m.linear_conv_kernel_dim - 1 + spec_tokens)
        ssm = m.linear_num_value_heads // tp * m.linear_value_head_dim * m.linear_key_head_dim
    return conv * dtype_bytes + ssm * ssm_bytes


def state_bytes_per_sequence(m: ModelProfile, tp: int, dtype_bytes: int, spec_tokens: int = 0) -> int:
    """Conv + SSM state one sequence holds per GPU over every state layer (Gated-DeltaNet, Mamba1, Mamba2)."""
    return m.linear_attention_layers * state_bytes_per_layer(m, tp, dtype_bytes, spec_tokens) if m.is_hybrid else 0


def kv_heads_per_rank(m: ModelProfile, tp: int) -> int:
    return max(1, m.num_kv_heads // tp)


def kv_bytes_per_layer_token(m: ModelProfile, tp: int, kv_dtype_bytes: int) -> int:
    """KV bytes of one token in one attention layer on one GPU: K and V of this rank's heads (FullAttentionSpec,
    SlidingWindowSpec), or MLA's one latent, which every rank holds whole (MLAAttentionSpec: no x2, no / TP)."""
    if m.is_mla:
        return (m.kv_lora_rank + m.qk_rope_head_dim) * kv_dtype_bytes
    return kv_heads_per_rank(m, tp) * m.head_dim * 2 * kv_dtype_bytes


def kv_bytes_per_token(m: ModelProfile, tp: int, kv_dtype_bytes: int) -> int:
    """Attention KV bytes one token costs per GPU over every attention layer (sliding ones included: a page
    holds them all; how many tokens a sliding layer keeps per request is the memory model's business)."""
    return m.full_attention_layers * kv_bytes_per_layer_token(m, tp, kv_dtype_bytes)


__all__ = ["ModelProfile", "ModelError", "YARN", "yarn_extension", "yarn_limit", "template_traits", "chat_template_of", "CATALOG_IDS",
           "catalog_profile", "resolve_model", "metadata_needed", "in_catalog", "profile_from_config",
           "profile_from_directory", "kv_bytes_per_token", "kv_bytes_per_layer_token", "state_bytes_per_layer", "state_bytes_per_sequence",
           "count_parameters"]
