"""The weight estimate a plan uses when it has only a config.json (no safetensors index, no local folder):
parameters counted per part against each model card's published total, and MXFP4 experts at 4.25 bits.
Configs: tests/fixtures/models/ (each names its source)."""

from __future__ import annotations

import json
import pathlib

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _models as models

FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "fixtures" / "models"


def profile(name: str, model_id: str) -> models.ModelProfile:
    return models.profile_from_config(json.loads((FIXTURES / name).read_text())["config"], model_id)


# total parameters as each model card states them
@pytest.mark.parametrize("name,model_id,card_total", [
    ("llama-3.1-8b-instruct.json", "meta-llama/Llama-3.1-8B-Instruct", 8.03e9),   # 8,030,261,248
    ("deepseek-v2-lite-chat.json", "deepseek-ai/DeepSeek-V2-Lite-Chat", 15.7e9),  # MLA without q_lora_rank, first layer dense
    ("deepseek-v3.json", "deepseek-ai/DeepSeek-V3", 671e9),                       # 671B without the 14B MTP module
    ("gpt-oss-20b.json", "openai/gpt-oss-20b", 21e9),
    ("mixtral-8x7b-instruct-v0.1.json", "mistralai/Mixtral-8x7B-Instruct-v0.1", 46.7e9),
    # Mamba2 mixers in 23 M layers, 128 relu2 experts in 23 E layers, 6 attention layers: 31.6B total on the card
    ("nemotron-3-nano-30b-a3b.json", "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", 31.6e9),
    ("ai21-jamba-1.5-mini.json", "ai21labs/AI21-Jamba-1.5-Mini", 52e9),          # Mamba1 mixers; experts every other layer
    ("llama-4-scout-17b-16e.json", "meta-llama/Llama-4-Scout-17B-16E", 109e9),    # 16 experts + a shared one in all 48 layers
])
def test_parameter_count_matches_the_model_card(name, model_id, card_total):
    total = sum(models.count_parameters(vars(profile(name, model_id))).values())
    assert abs(total / card_total - 1) < 0.01, f"{model_id}: {total / 1e9:.2f}B counted, the card says {card_total / 1e9:.1f}B"


def test_mla_projections_are_counted_as_mla_not_as_full_heads():
    """DeepSeek-V3's attention per layer: q_a 7168x1536, q_b 1536x(128x192), kv_a 7168x576, kv_b 512x(128x256), o 16384x7168."""
    m = profile("deepseek-v3.json", "deepseek-ai/DeepSeek-V3")
    per_layer = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168
    assert models.count_parameters(vars(m))["attention"] == 61 * per_layer


def test_dense_layers_of_a_moe_model_have_no_experts():
    """DeepSeek-V2-Lite: first_k_dense_replace 1, so 26 of its 27 layers hold 64 routed experts."""
    m = profile("deepseek-v2-lite-chat.json", "deepseek-ai/DeepSeek-V2-Lite-Chat")
    parts = models.count_parameters(vars(m))
    assert parts["experts"] == 26 * 64 * 3 * 2048 * 1408
    assert parts["mlp"] == 26 * 2048 * 64 + 3 * 2048 * 10944     # routers + the one dense MLP


def test_mxfp4_experts_weigh_about_half_a_byte():
    """gpt-oss-20b: the card says it runs within 16 GB; bf16 everywhere would be ~42 GB."""
    m = profile("gpt-oss-20b.json", "openai/gpt-oss-20b")
    parts = models.count_parameters(vars(m))
    expected = parts["experts"] * (0.5 + 1 / 32) + (sum(parts.values()) - parts["experts"]) * 2
    assert m.weight_bytes == int(expected)
    assert 12e9 < m.weight_bytes < 16e9
