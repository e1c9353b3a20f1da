"""What the planner reads from a model's chat template (issue 17, "chat-template needs"): whether the template opens
<think> in the prompt (the answer then follows the first </think>, so a reasoning parser must split it), switches
thinking with enable_thinking, and renders the request's tools. The templates are published ones
(tests/fixtures/templates/README.md names where each comes from)."""

from __future__ import annotations

import json
import pathlib

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._models import chat_template_of, profile_from_directory, template_traits
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host

ROOT = pathlib.Path(__file__).resolve().parents[4]
TEMPLATES = ROOT / "tests" / "fixtures" / "templates"
# the lab's tiny models carry this ChatML template (tests/lab/make_tiny_model.py)
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def template(name):
    return (TEMPLATES / name).read_text(encoding="utf-8")


def model_folder(tmp_path, config_fixture, chat_template, as_jinja=False):
    """A model folder as model_fetch leaves it before the weights: config.json and the tokenizer's files."""
    (tmp_path / "config.json").write_text(json.dumps(json.loads((ROOT / "tests" / "fixtures" / "models" / config_fixture).read_text())["config"]))
    if as_jinja:
        (tmp_path / "chat_template.jinja").write_text(chat_template)
        (tmp_path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 131072}))
    else:
        (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": chat_template}))
    return str(tmp_path)


def test_traits_of_published_templates():
    assert template_traits(template("qwen3.jinja")) == ("hybrid", True)
    assert template_traits(template("deepseek-r1-distill-qwen.jinja")) == ("always", False)
    assert template_traits(CHATML) == ("none", False)
    assert template_traits(None) == ("", None)


def test_a_closed_think_block_in_the_prompt_is_not_thinking():
    """SmolLM3-style templates close an empty <think></think> in the prompt when thinking is off: nothing to split."""
    assert template_traits("{% if add_generation_prompt %}<|assistant|><think>\n\n</think>\n{% endif %}")[0] == "none"


def test_the_template_is_read_from_chat_template_jinja_first(tmp_path):
    folder = model_folder(tmp_path, "qwen2.5-7b-instruct.json", template("deepseek-r1-distill-qwen.jinja"), as_jinja=True)
    assert chat_template_of(folder) == template("deepseek-r1-distill-qwen.jinja")
    (tmp_path / "chat_template.jinja").unlink()
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": [
        {"name": "default", "template": CHATML}, {"name": "tool_use", "template": template("qwen3.jinja")}]}))
    assert template_traits(chat_template_of(folder))[1] is True        # the tool_use template renders tools


def test_a_renamed_r1_distill_gets_the_reasoning_parser_from_its_template(tmp_path):
    """A fine-tune of an R1 distill under another name: the id says nothing, the template opens <think>. Without the
    template the thinking would stay in `content` (issue 17)."""
    folder = model_folder(tmp_path, "qwen2.5-7b-instruct.json", template("deepseek-r1-distill-qwen.jinja"))
    profile = profile_from_directory(folder, "acme/reasoner-7b")
    assert (profile.thinking, profile.thinking_from, profile.template_tools) == ("always", "its chat template", False)
    plan = plan_host("h", hardware_profile("h200x1"), [{"name": "r", "model": {"id": "acme/reasoner-7b", "path": folder},
                                                        "engine": {"version": "0.26.0"}, "workload": {"max_model_len": 8192}}])
    [inst] = plan["deployments"][0]["instances"]
    args = inst["args"]
    assert args[args.index("--reasoning-parser") + 1] == "deepseek_r1"
    why = next(r["why"] for r in inst["reasons"] if r["decision"] == "reasoning_parser=deepseek_r1")
    assert "chat template opens <think>" in why
    # a qwen2 config is a known family (hermes tool calls, issue 34); the R1 template does not render `tools`, which is said
    assert not any("family this planner has no table for" in w for w in plan["warnings"])
    assert any("does not render the request's `tools`" in w and "hermes" in w for w in plan["warnings"])


def test_the_same_config_without_a_thinking_template_gets_no_reasoning_parser(tmp_path):
    folder = model_folder(tmp_path, "qwen2.5-7b-instruct.json", CHATML)
    profile = profile_from_directory(folder, "acme/plain-7b")
    assert (profile.thinking, profile.template_thinking) == ("none", "none")
    plan = plan_host("h", hardware_profile("h200x1"), [{"name": "p", "model": {"id": "acme/plain-7b", "path": folder},
                                                        "engine": {"version": "0.26.0"}, "workload": {"max_model_len": 8192}}])
    assert "--reasoning-parser" not in plan["deployments"][0]["instances"][0]["args"]


def test_a_tool_parser_over_a_template_without_tools_is_warned(tmp_path):
    """A Qwen3 checkpoint whose template was replaced by plain ChatML: the hermes parser would wait for tool calls the
    model is never prompted to make."""
    config = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288,
              "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
              "max_position_embeddings": 40960, "torch_dtype": "bfloat16", "rope_theta": 1000000}
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML}))
    plan = plan_host("h", hardware_profile("h200x1"), [{"name": "q", "model": {"id": "acme/qwen3-chatml", "path": str(tmp_path)},
                                                        "engine": {"version": "0.26.0"}, "workload": {"max_model_len": 8192}}])
    assert any("does not render the request's `tools`" in w and "hermes" in w for w in plan["warnings"])
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": template("qwen3.jinja")}))
    plan = plan_host("h", hardware_profile("h200x1"), [{"name": "q", "model": {"id": "acme/qwen3-chatml", "path": str(tmp_path)},
                                                        "engine": {"version": "0.26.0"}, "workload": {"max_model_len": 8192}}])
    assert not any("does not render" in w for w in plan["warnings"])


@pytest.mark.parametrize("content", [
    {"chat_template": [{"name": "default"}, {"name": "tool_use"}]},      # named templates without a template
    {"chat_template": [{"name": "default", "template": None}]},
    {"chat_template": None},
    ["not", "a", "mapping"],
])
def test_a_tokenizer_config_without_a_usable_template_leaves_the_template_unknown(tmp_path, content):
    """Then the name decides, as before templates were read: a Qwen3 (hybrid by its name) keeps its reasoning parser."""
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(content))
    assert chat_template_of(str(tmp_path)) is None


def test_a_broken_tokenizer_config_does_not_stop_the_plan(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text('{"chat_template": "{% if')
    assert chat_template_of(str(tmp_path)) is None
