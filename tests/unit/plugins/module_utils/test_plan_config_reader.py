"""The planner reads a published config.json as transformers' config class and vLLM read it (_hf_config).

The configs are published ones (tests/fixtures/models, source in each file) that spell the planner's keys another way or
leave them to the class's defaults. The numbers checked are the config's own values under their other names, the defaults
in transformers 5.19's configuration_gemma3.py (Gemma3TextConfig) and vLLM 0.32's rules
(transformers_utils/model_arch_config_convertor.py: KV heads, the model's length; config/model.py: 2048 when no key gives
a length). tests/tools/hf_config_table.py --check (the crosscheck stage) keeps the tables equal to that transformers and vLLM.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _hf_config as hf
from ansible_collections.llmfleet.serving.plugins.module_utils import _models as models

FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "fixtures" / "models"


def published(name):
    data = json.loads((FIXTURES / name).read_text())
    return data["config"]


def test_chatglm_spellings_are_read_as_vllms_chatglm_config_reads_them():
    """ChatGLM2-6B: num_layers 28, padded_vocab_size 65,024, seq_length 32,768, kv_channels 128, multi_query_group_num 2
    (vLLM's ChatGLMConfig maps num_hidden_layers to num_layers and sets vocab_size / max_position_embeddings from them)."""
    m = models.profile_from_config(published("chatglm2-6b.json"), "THUDM/chatglm2-6b")
    assert (m.num_layers, m.vocab_size, m.max_position_embeddings, m.head_dim, m.num_kv_heads) == (28, 65024, 32768, 128, 2)
    assert m.intermediate_size == published("chatglm2-6b.json")["ffn_hidden_size"]


def test_bloom_spellings_and_vllms_default_length():
    """BLOOM: n_layer 70 and n_embed 14,336 (transformers BloomConfig: attribute_map and the n_embed kwarg); no key gives a
    length (ALiBi), so vLLM assumes 2,048."""
    m = models.profile_from_config(published("bloom-176b.json"), "bigscience/bloom")
    assert (m.num_layers, m.hidden_size, m.num_attention_heads) == (70, 14336, 112)
    assert m.max_position_embeddings == hf.DEFAULT_MAX_LEN == 2048
    assert m.num_kv_heads == 112          # no KV key: multi-head attention (vLLM's default is the attention heads)


def test_gemma3_sparse_text_config_takes_the_class_defaults():
    """Gemma-3-4B-it's text_config gives hidden_size 2,560 and 34 layers only; Gemma3TextConfig's defaults give 8 heads, 4 KV
    heads of 256 and 262,208 tokens of vocabulary (the model card's numbers for Gemma 3 4B)."""
    cfg = published("gemma-3-4b-it.json")
    assert "num_attention_heads" not in cfg["text_config"] and "vocab_size" not in cfg["text_config"]
    m = models.profile_from_config(cfg, "google/gemma-3-4b-it")
    assert (m.hidden_size, m.num_layers, m.num_attention_heads, m.num_kv_heads, m.head_dim) == (2560, 34, 8, 4, 256)
    assert m.vocab_size == 262208 and m.max_position_embeddings == 131072


@pytest.mark.parametrize("name,model_id,length", [("kimi-linear-48b-a3b.json", "moonshotai/Kimi-Linear-48B-A3B-Instruct", 1048576),
                                                  ("llama-65b-hf.json", "huggyllama/llama-65b", 2048)], ids=["model_max_length", "max_sequence_length"])
def test_the_models_length_comes_from_the_keys_vllm_reads(name, model_id, length):
    m = models.profile_from_config(published(name), model_id)
    assert m.max_position_embeddings == length


def test_the_smallest_length_key_wins_and_model_max_length_overrides():
    assert hf.longest({"max_position_embeddings": 8192, "seq_length": 4096}) == (4096, "seq_length")
    assert hf.longest({"max_position_embeddings": 8192, "model_max_length": 131072}) == (131072, "model_max_length")
    assert hf.longest({}) == (2048, "default")


def test_kv_heads_follow_vllms_key_order_and_falcons_multi_query():
    assert hf.kv_heads({"n_head_kv": 8, "num_key_value_heads": 4}, 64) == 8
    assert hf.kv_heads({"multi_query_group_num": 2}, 32) == 2
    assert hf.kv_heads({}, 32) == 32
    assert hf.kv_heads({"multi_query": True}, 71, "falcon") == 1                    # Falcon-7B
    assert hf.kv_heads({"new_decoder_architecture": True, "num_kv_heads": 8}, 128, "falcon") == 8   # Falcon-40B


def test_a_given_key_is_never_replaced_by_a_default():
    text = {"model_type": "gemma3_text", "num_attention_heads": 16, "hidden_size": 4096}
    read = hf.as_read(text, "gemma3_text")
    assert read["num_attention_heads"] == 16 and read["num_key_value_heads"] == 4


def test_defaults_computed_from_other_keys_are_not_tabled():
    """A head size of hidden / heads (Llama) or KV heads equal to the heads (Qwen2) is a rule, not a constant default."""
    assert "head_dim" not in hf.CONFIG_DEFAULTS.get("llama", {})
    m = models.profile_from_config({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 3072,
                                    "num_attention_heads": 24, "num_hidden_layers": 28, "vocab_size": 128256,
                                    "max_position_embeddings": 131072}, "x/llama")
    assert m.head_dim == 128 and m.num_kv_heads == 24
