"""Quantization read the way vLLM reads it, with the minimum compute capability per method and per scheme (issue 17,
docs/sources.md#quantization): a compressed-tensors checkpoint's floor is its scheme's, ModelOpt's hf_quant_config.json names its
algorithm (and FP8 KV-cache scales, which make --kv-cache-dtype auto store fp8). The quantization_config shapes are
the ones llm-compressor writes for its preset schemes (W4A16, W8A8 INT8, FP8_DYNAMIC, NVFP4, MXFP4, W4A8-FP8) and
ModelOpt writes into hf_quant_config.json."""

from __future__ import annotations

import copy
import json
import pathlib

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._models import profile_from_config, profile_from_directory
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host

from llmfleet_testing import accepting

ROOT = pathlib.Path(__file__).resolve().parents[4]
LLAMA = json.loads((ROOT / "tests" / "fixtures" / "models" / "llama-3.1-8b-instruct.json").read_text())["config"]


def group(weights, activations=None):
    return {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": weights, "input_activations": activations}}, "ignore": ["lm_head"]}


INT4 = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 128}
INT8 = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"}
FP8 = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel"}
FP8_ACT = {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True}
INT8_ACT = {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True}
FP4_16 = {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}
FP4_32 = {"num_bits": 4, "type": "float", "strategy": "group", "group_size": 32}

SCHEMES = {
    "WNA16": group(INT4),
    "W8A8-INT8": group(INT8, INT8_ACT),
    "NVFP4": group(FP4_16, dict(FP4_16, dynamic="local")),
    "MXFP4": group(FP4_32, dict(FP4_32, dynamic=True)),
    "W4A8-FP8": group(INT4, FP8_ACT),
}


def llama(quant, name="acme/Llama-3.1-8B-Instruct-quantized"):
    return {"id": name, "config": dict(copy.deepcopy(LLAMA), quantization_config=quant), "weight_bytes": 6 * 1024 ** 3}


def plan(model, profile, version="0.26.0", **workload):
    return plan_host("h", hardware_profile(profile), [{"name": "q", "model": model, "engine": accepting(version),
                                                       "gpus": 1, "workload": dict({"max_model_len": 8192}, **workload)}])


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_compressed_tensors_scheme_is_read_from_the_first_group(scheme):
    m = profile_from_config(llama(SCHEMES[scheme])["config"], "x")
    assert (m.quant_method, m.quant_scheme) == ("compressed-tensors", scheme)


def test_fp8_compressed_tensors_keeps_the_fp8_rules():
    m = profile_from_config(llama(group(FP8, FP8_ACT))["config"], "x")
    assert m.quant_method == "fp8"          # W8A8-FP8: the FP8 path (W8A16 Marlin below sm89) decides, as before


@pytest.mark.parametrize("scheme, refused_on, planned_on", [
    ("WNA16", "dgx1_v100_32gb", "t4x4"),
    ("W8A8-INT8", "dgx1_v100_32gb", "t4x4"),
    ("NVFP4", "dgx1_v100_32gb", "t4x4"),
    ("MXFP4", "t4x4", "a100_sxm_8x_80gb"),
    ("W4A8-FP8", "a100_sxm_8x_80gb", "h100_sxm_8x"),
])
def test_each_scheme_has_its_own_floor(scheme, refused_on, planned_on):
    version = "0.19.1" if refused_on.startswith("dgx1") else "0.26.0"    # sm70's last official build
    refused = plan(llama(SCHEMES[scheme]), refused_on, version)
    assert any(f"compressed-tensors {scheme}; sm" in e and "cannot run it" in e for e in refused["errors"]), refused["errors"]
    planned = plan(llama(SCHEMES[scheme]), planned_on)
    assert planned["errors"] == []
    [inst] = planned["deployments"][0]["instances"]
    why = next(r["why"] for r in inst["reasons"] if r["decision"] == "quantization=compressed-tensors")
    assert scheme in why and "get_min_capability" in why


def test_mxfp4_gpt_oss_needs_ampere():
    gpt_oss = json.loads((ROOT / "tests" / "fixtures" / "models" / "gpt-oss-20b.json").read_text())["config"]
    refused = plan({"id": "openai/gpt-oss-20b", "config": gpt_oss}, "t4x4")
    assert any("is mxfp4; sm75 cannot run it" in e and "sm80+" in e for e in refused["errors"])
    assert plan({"id": "openai/gpt-oss-20b", "config": gpt_oss}, "a100_sxm_8x_80gb")["errors"] == []


def modelopt_folder(tmp_path, kv_scales=True):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    quant = {"quant_algo": "FP8", **({"kv_cache_quant_algo": "FP8"} if kv_scales else {})}
    side = {"producer": {"name": "modelopt", "version": "0.29.0"}, "quantization": quant}
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(side))
    return str(tmp_path)


def test_modelopt_fp8_from_its_side_file_with_fp8_kv_scales(tmp_path):
    folder = modelopt_folder(tmp_path)
    m = profile_from_directory(folder, "nvidia/Llama-3.1-8B-Instruct-FP8")
    assert (m.quant_method, m.kv_cache_quant) == ("modelopt", "fp8")
    model = {"id": "nvidia/Llama-3.1-8B-Instruct-FP8", "path": folder}
    [inst] = plan(model, "h200x1")["deployments"][0]["instances"]
    # the scales are used with --kv-cache-dtype fp8, said on the command line (vLLM's auto picks them up for ModelOpt only, and
    # only in recent releases): half the bytes of the bf16 KV of the same architecture
    assert inst["kv_cache_dtype"] == "fp8" and inst["args"][inst["args"].index("--kv-cache-dtype") + 1] == "fp8"
    assert inst["memory"]["kv_bytes_per_token_per_gpu"] == 32 * 2 * 8 * 128 * 1
    assert "FP8 KV-cache scales" in next(r["why"] for r in inst["reasons"] if r["decision"] == "kv_cache_dtype=fp8")


def test_modelopt_fp8_floor_follows_the_version(tmp_path):
    model = {"id": "nvidia/Llama-3.1-8B-Instruct-FP8", "path": modelopt_folder(tmp_path, kv_scales=False)}
    assert any("sm80 cannot run it in vLLM 0.20.0 (needs sm89+" in e for e in plan(model, "a100_sxm_8x_80gb", "0.20.0")["errors"])
    assert plan(model, "a100_sxm_8x_80gb", "0.33.0")["errors"] == []
    between = plan(model, "a100_sxm_8x_80gb", "0.26.0")["errors"]
    assert any("0.26.0 was not read, the stricter one is assumed" in e for e in between)
    assert plan(model, "h100_sxm_8x", "0.26.0")["errors"] == []


def test_modelopt_written_into_config_json_is_read_by_its_algorithm():
    """Newer ModelOpt exports put quant_method modelopt and quant_algo into config.json: NVFP4 is modelopt_fp4 (sm75 from
    0.17), not ModelOpt FP8 (sm89 at 0.20)."""
    model = llama({"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}, "nvidia/Llama-3.1-8B-NVFP4")
    m = profile_from_config(model["config"], model["id"])
    assert (m.quant_method, m.kv_cache_quant) == ("modelopt_fp4", "fp8")
    assert plan(model, "a100_sxm_8x_80gb")["errors"] == []
    with pytest.raises(Exception, match=r"quant_algo 'MIXED_PRECISION': a ModelOpt algorithm the planner does not know"):
        profile_from_config(llama({"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION"})["config"], "x")


def test_wna16_floor_was_ampere_before_017():
    """vLLM compressed_tensors get_min_capability: WNA16 needed sm80 at vLLM 0.11, sm75 from 0.17 (Marlin)."""
    early = plan(llama(SCHEMES["WNA16"]), "t4x4", "0.11.0")
    assert any("compressed-tensors WNA16; sm75 cannot run it in vLLM 0.11.0 (needs sm80+" in e for e in early["errors"])
    assert plan(llama(SCHEMES["WNA16"]), "t4x4", "0.17.0")["errors"] == []
