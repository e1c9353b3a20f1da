"""Parsers by family (issue 17, docs/sources.md#parsers): the family is read from config.json's model_type and the model id,
and the parser names are those of vLLM's reasoning/__init__.py and tool_parsers/__init__.py registries; that
those names exist in real vLLM releases is tests/crosscheck/test_engine_flags.py's business."""

from __future__ import annotations

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _models as models
from ansible_collections.llmfleet.serving.plugins.module_utils._engine import TOOL_TEMPLATES
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host


def config(model_type, arch, **extra):
    return dict({"architectures": [arch], "model_type": model_type, "hidden_size": 4096, "intermediate_size": 14336,
                 "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
                 "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}, **extra)


# (model id, model_type, architecture) -> (--reasoning-parser, --tool-call-parser) as vLLM's registries name them
CASES = [
    ("meta-llama/Llama-3.1-8B-Instruct", "llama", "LlamaForCausalLM", None, "llama3_json"),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama4", "Llama4ForConditionalGeneration", None, "llama4_pythonic"),
    ("mistralai/Mistral-Small-3.2-24B-Instruct-2506", "mistral", "MistralForCausalLM", None, "mistral"),
    ("mistralai/Magistral-Small-2506", "mistral", "MistralForCausalLM", "mistral", "mistral"),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "qwen2", "Qwen2ForCausalLM", "deepseek_r1", None),
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-8B", "llama", "LlamaForCausalLM", "deepseek_r1", None),
    ("deepseek-ai/DeepSeek-R1-0528", "deepseek_v3", "DeepseekV3ForCausalLM", "deepseek_r1", "deepseek_v3"),
    ("deepseek-ai/DeepSeek-V3.1", "deepseek_v3", "DeepseekV3ForCausalLM", None, "deepseek_v31"),
    ("openai/gpt-oss-20b", "gpt_oss", "GptOssForCausalLM", "openai_gptoss", "openai"),
    ("zai-org/GLM-4.5-Air", "glm4_moe", "Glm4MoeForCausalLM", "glm45", "glm45"),
    ("moonshotai/Kimi-K2-Instruct", "kimi_k2", "DeepseekV3ForCausalLM", None, "kimi_k2"),
    ("moonshotai/Kimi-K2-Thinking", "kimi_k2", "DeepseekV3ForCausalLM", "kimi_k2", "kimi_k2"),
    ("MiniMaxAI/MiniMax-M2", "minimax_m2", "MiniMaxM2ForCausalLM", "minimax_m2_append_think", "minimax_m2"),
    ("Qwen/QwQ-32B", "qwen2", "Qwen2ForCausalLM", "deepseek_r1", "hermes"),
    ("HuggingFaceTB/SmolLM2-135M-Instruct", "llama", "LlamaForCausalLM", None, None),   # the demo's model
]


def flag(args, name):
    return args[args.index(name) + 1] if name in args else None


@pytest.mark.parametrize("model_id, model_type, arch, reasoning, tools", CASES, ids=[c[0] for c in CASES])
def test_each_family_gets_its_parsers(model_id, model_type, arch, reasoning, tools):
    dep = {"name": "m", "model": {"id": model_id, "config": config(model_type, arch), "weight_bytes": 16 * 10 ** 9},
           "workload": {"max_model_len": 8192, "tools": True, "thinking": True}, "engine": {"version": "0.32.0"}}
    if models.profile_from_config(config(model_type, arch), model_id).family in TOOL_TEMPLATES:
        # the families whose parser needs one of vLLM's shipped chat templates get it only with the template
        # (test_plan_families.py checks the plan without it)
        dep["overrides"] = {"chat_template": "tool_chat_template.jinja"}
    plan = plan_host("h", hardware_profile("h100_sxm_8x"), [dep])
    assert plan["errors"] == [], plan["errors"]
    inst = plan["deployments"][0]["instances"][0]
    assert (flag(inst["args"], "--reasoning-parser"), flag(inst["args"], "--tool-call-parser")) == (reasoning, tools)
    assert not any("no table" in w for w in plan["warnings"]), plan["warnings"]
    if tools is None:   # never silently without a parser when tools are wanted
        assert any("no tool-call format of its own" in w for w in plan["warnings"])
        assert "--enable-auto-tool-choice" not in inst["args"]


def test_llama_2_and_smollm_are_not_taken_for_llama_3():
    assert models.profile_from_config(config("llama", "LlamaForCausalLM"), "meta-llama/Llama-2-7b-chat-hf").family == "other"
    assert models.profile_from_config(config("llama", "LlamaForCausalLM"), "HuggingFaceTB/SmolLM2-135M-Instruct").family == "smollm2"
