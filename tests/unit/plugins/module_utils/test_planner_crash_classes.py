"""Issue 17's crash classes, each closed by a rule (not by a case).

The evidence is independent of the planner's arithmetic: config.json numbers from the model cards
(tests/fixtures/models/, each naming its source), vLLM source facts (the files docs/sources.md names),
and the H200 measurement of issue 17.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _models as models
from ansible_collections.llmfleet.serving.plugins.module_utils._engine import backend_name, nvidia_image
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import fp8_block_problems, plan_host

from llmfleet_testing import accepting

ROOT = pathlib.Path(__file__).resolve().parents[4]
FIXTURES = ROOT / "tests" / "fixtures" / "models"
BLOCK = 128     # model cards' quantization_config: Qwen3 / DeepSeek FP8 checkpoints use weight_block_size [128, 128]


def fixture(name):
    data = json.loads((FIXTURES / name).read_text())
    assert data["source"].startswith("https://huggingface.co/")
    return data["config"]


def flag(args, name):
    return args[args.index(name) + 1] if name in args else None


def only(plan):
    assert plan["errors"] == [], plan["errors"]
    return plan["deployments"][0]["instances"]


def reason(inst, prefix):
    return next(r["why"] for r in inst["reasons"] if r["decision"].startswith(prefix))


def l40s(n=1):
    """NVIDIA L40S: sm89, 46068 MiB (nvidia-smi memory.total), PCIe, one socket."""
    accs = [{"index": i, "vendor": "nvidia", "model": "NVIDIA L40S", "arch": "sm89", "compute_capability": "8.9", "memory_mib": 46068,
             "numa_node": 0} for i in range(n)]
    return {"accelerators": accs, "links": [["X" if i == j else "PHB" for j in range(n)] for i in range(n)], "numa_cpus": {0: "0-31"},
            "cpu_count": 32, "memory_mib": 262144, "driver_version": "580.65.06"}


# --- 1. FP8 block-quantized MoE vs TP ------------------------------------------------------------------

def test_the_catalogs_qwen3_235b_fp8_is_the_published_config():
    """The catalog entry and the fixture copied from the model card agree on what the rule reads."""
    cat, card = models.catalog_profile("Qwen/Qwen3-235B-A22B-FP8"), models.profile_from_config(
        fixture("qwen3-235b-a22b-fp8.json"), "Qwen/Qwen3-235B-A22B-FP8")
    for m in (cat, card):
        assert (m.moe_intermediate_size, m.weight_block_size, m.num_experts, m.quant_method) == (1536, (128, 128), 128, "fp8")
        assert m.dense_mlp_layers == 0          # decoder_sparse_step 1, mlp_only_layers []: every layer is MoE


def test_fp8_block_moe_latency_on_8xh100_takes_expert_parallelism():
    """Issue 17: Qwen3-235B-A22B-FP8, goal latency, 8 x H100 planned TP=8; 1536 / 8 = 192 is not a multiple
    of 128, so vLLM raised ValueError at load. With --enable-expert-parallel the experts are whole per GPU."""
    # the numbers of the case: 1536 / 8 = 192, and 192 % 128 = 64
    dep = {"name": "q", "model": "Qwen/Qwen3-235B-A22B-FP8", "workload": {"goal": "latency", "max_model_len": 32768},
           "engine": {"version": "0.26.0"}}
    [inst] = only(plan_host("h", hardware_profile("h100_sxm_8x"), [dep]))
    assert inst["tensor_parallel_size"] == 8 and inst["expert_parallel"] is True and "--enable-expert-parallel" in inst["args"]
    why = reason(inst, "expert_parallel=true")
    assert "1536 / TP 8 = 192 is not a multiple of the 128x128 block" in why and "TP without it: 1, 2, 4" in why


def test_fp8_block_moe_throughput_takes_the_smaller_tp_without_ep():
    """Throughput: the smallest TP that fits is 4 (1536 / 4 = 384 = 3 x 128): two instances, no EP."""
    assert (1536 // 4) % BLOCK == 0
    dep = {"name": "q", "model": "Qwen/Qwen3-235B-A22B-FP8", "workload": {"goal": "throughput", "max_model_len": 32768},
           "engine": {"version": "0.26.0"}}
    insts = only(plan_host("h", hardware_profile("h100_sxm_8x"), [dep]))
    assert [(i["tensor_parallel_size"], i["expert_parallel"]) for i in insts] == [(4, False), (4, False)]
    assert all("--enable-expert-parallel" not in i["args"] for i in insts)


def test_fp8_block_without_ep_excludes_the_tp_that_breaks_the_block():
    dep = {"name": "q", "model": "Qwen/Qwen3-235B-A22B-FP8", "workload": {"goal": "latency", "max_model_len": 32768},
           "engine": {"version": "0.26.0"}, "overrides": {"expert_parallel": False}}
    insts = only(plan_host("h", hardware_profile("h100_sxm_8x"), [dep]))
    assert {i["tensor_parallel_size"] for i in insts} == {4}
    assert "TP=8 (moe_intermediate_size 1536 / TP 8 = 192" in reason(insts[0], "fp8_block_tp_excluded=8")


def test_fp8_block_refusal_names_the_numbers_and_the_way_out():
    """8 x 24 GiB: TP=4 cannot hold the weights (235B at one byte ~ 219 GiB / 4 > 24 GiB) and TP=8 breaks
    the block without EP: refused, naming both and expert parallelism as what would allow TP=8."""
    dep = {"name": "q", "model": "Qwen/Qwen3-235B-A22B-FP8", "workload": {"goal": "latency", "max_model_len": 8192},
           "engine": {"version": "0.26.0"}, "overrides": {"expert_parallel": False}}
    plan = plan_host("h", hardware_profile("rtx4090_8x_pcie"), [dep])
    [err] = plan["errors"]
    assert "TP=8 is excluded: moe_intermediate_size 1536 / TP 8 = 192 is not a multiple of the 128x128 block" in err
    assert "expert parallelism (overrides.expert_parallel: true) would allow it" in err


def test_fp8_block_rule_covers_the_shared_expert_that_ep_does_not_shard():
    """Qwen3.5-35B-A3B-FP8 (config.json: moe_intermediate 512, shared expert 512): at TP=8 the shared
    expert (a TP-sharded MLP even with EP) is 64 wide: no layout loads at TP=8; a forced TP=8 is refused."""
    # the numbers of the case: 512 / 8 = 64 < 128
    dep = {"name": "q", "model": "Qwen/Qwen3.5-35B-A3B-FP8", "workload": {"goal": "latency", "max_model_len": 32768},
           "engine": {"version": "0.26.0"}}
    insts = only(plan_host("h", hardware_profile("h100_sxm_8x"), [dep]))
    assert {i["tensor_parallel_size"] for i in insts} <= {1, 2, 4}
    forced = plan_host("h", hardware_profile("h100_sxm_8x"), [dict(dep, overrides={"tensor_parallel_size": 8})])
    [err] = forced["errors"]
    assert "shared-expert intermediate size 512 / TP 8 = 64 is not a multiple of the 128x128 block" in err


@pytest.mark.parametrize("model, tp, expert_only", [
    ("Qwen/Qwen3-30B-A3B-FP8", 4, True),        # quantization/fp8.py: 768 runs TP <= 2 or EP; 768 / 4 = 192
    ("Qwen/Qwen3-30B-A3B-FP8", 2, None),        # 384 = 3 x 128
    ("Qwen/Qwen3-235B-A22B-FP8", 4, None),      # quantization/fp8.py: TP <= 4
    ("Qwen/Qwen3-32B-FP8", 8, None),            # dense: 25600 / 8 = 3200 = 25 x 128
    ("Qwen/Qwen3-30B-A3B", 8, None),            # BF16: no blocks
])
def test_block_problems_by_model_card_numbers(model, tp, expert_only):
    fixed, experts = fp8_block_problems(models.catalog_profile(model), tp)
    if expert_only is None:
        assert fixed == [] and experts == []
    else:
        assert fixed == [] and len(experts) == 1


# --- 2. V100 on vLLM >= 0.20 ----------------------------------------------------------------------------

@pytest.mark.parametrize("version", ["0.20.0", "0.26.0", "0.33.0"])
def test_v100_from_020_is_refused_naming_0191(version):
    """vLLM CMakeLists.txt CUDA_SUPPORTED_ARCHS (v0.19.1 vs v0.20.0): no official 0.20+ build (CUDA 13, -cu129, -cu128) has sm70 kernels;
    0.19.1 is the last release whose CUDA 12.8/12.9 build lists 7.0."""
    dep = {"name": "q", "model": "Qwen/Qwen3-8B", "gpus": 1, "engine": accepting(version)}
    plan = plan_host("h", hardware_profile("dgx1_v100_32gb"), [dep])
    [err] = plan["errors"]
    assert f"vLLM {version} has no official build for sm70" in err and 'engine.version: "0.19.1"' in err and "engine.image" in err
    assert plan["deployments"][0]["instances"] == []
    assert nvidia_image((0, 26, 0), 70)[:2] == ("", "")


def test_v100_on_0191_and_with_its_own_image_plans():
    dep = {"name": "q", "model": "Qwen/Qwen3-8B", "gpus": 1, "engine": accepting("0.19.1")}
    [inst] = only(plan_host("h", hardware_profile("dgx1_v100_32gb"), [dep]))
    assert (inst["image"], inst["image_cuda"]) == ("vllm/vllm-openai:v0.19.1", "12.9")
    own = dict(dep, engine={"version": "0.26.0", "image": "lab/vllm:0.26.0-cu126-sm70", "cuda": "12.6"})
    [inst] = only(plan_host("h", hardware_profile("dgx1_v100_32gb"), [own]))
    assert (inst["image"], inst["image_cuda"]) == ("lab/vllm:0.26.0-cu126-sm70", "12.6")
    assert "cannot check" in reason(inst, "image_sm70")


def test_t4_keeps_the_official_cuda13_image():
    """CUDA 13 still targets sm75 (it drops sm < 75 only)."""
    [inst] = only(plan_host("h", hardware_profile("t4x4"), [{"name": "q", "model": "Qwen/Qwen3-0.6B", "gpus": 1,
                                                            "engine": {"version": "0.26.0"}}]))
    assert (inst["image"], inst["image_cuda"]) == ("vllm/vllm-openai:v0.26.0", "13.0")


# --- 3. backend names by version ---------------------------------------------------------------------------

@pytest.mark.parametrize("profile, version, name", [
    ("t4x4", "0.8.5", "TRITON_ATTN_VLLM_V1"), ("t4x4", "0.10.2", "TRITON_ATTN_VLLM_V1"), ("t4x4", "0.11.0", "TRITON_ATTN"),
    ("dgx1_v100_32gb", "0.9.2", "TRITON_ATTN_VLLM_V1"),
])
def test_triton_backend_is_named_as_the_version_takes_it(profile, version, name):
    """vLLM's _Backend enum: TRITON_ATTN_VLLM_V1 up to 0.10.x, TRITON_ATTN from 0.11.0 (platforms/interface.py
    _Backend at v0.10.1.1 vs v0.11.0); before 0.13 the backend is the VLLM_ATTENTION_BACKEND variable."""
    [inst] = only(plan_host("h", hardware_profile(profile), [{"name": "q", "model": "Qwen/Qwen3-0.6B", "gpus": 1,
                                                             "workload": {"max_model_len": 8192}, "engine": accepting(version)}]))
    assert inst["env"]["VLLM_ATTENTION_BACKEND"] == name == inst["attention_backend"]


def test_a_forced_backend_is_renamed_for_its_version():
    dep = {"name": "q", "model": "Qwen/Qwen3-8B", "gpus": 1, "engine": accepting("0.10.2"), "overrides": {"attention_backend": "TRITON_ATTN"}}
    [inst] = only(plan_host("h", hardware_profile("a100_sxm_8x_80gb"), [dep]))
    assert inst["env"]["VLLM_ATTENTION_BACKEND"] == "TRITON_ATTN_VLLM_V1"
    assert backend_name("TRITON_ATTN", (0, 33, 0)) == "TRITON_ATTN" and backend_name("FLASHINFER", (0, 8, 5)) == "FLASHINFER"


# --- 4. no forced backend the model cannot use -------------------------------------------------------------

def _gpt_oss(version, kv="fp8"):
    dep = {"name": "g", "model": {"id": "openai/gpt-oss-20b", "config": fixture("gpt-oss-20b.json"), "weight_bytes": 14 * 10 ** 9},
           "gpus": 1, "workload": {"max_model_len": 32768, "tools": False}, "engine": accepting(version),
           "overrides": {"kv_cache_dtype": kv}}
    [inst] = only(plan_host("h", l40s(), [dep]))
    return inst


def test_fp8_kv_on_sm89_leaves_the_backend_to_vllm_for_a_sink_model():
    """v1/attention/backends/flashinfer.py: FlashInfer takes attention sinks (gpt-oss) only on sm100; vLLM >= 0.11 itself moves
    fp8 KV on sm80-89 off FlashAttention to a backend that takes it. Forcing FLASHINFER broke gpt-oss."""
    inst = _gpt_oss("0.26.0")
    assert inst["attention_backend"] == "default" and "--attention-backend" not in inst["args"]
    assert "so none is forced" in reason(inst, "attention_backend=default")


def test_fp8_kv_on_sm89_forces_nothing_for_any_model_from_011():
    dep = {"name": "q", "model": "Qwen/Qwen3-8B", "gpus": 1, "workload": {"max_model_len": 32768}, "engine": accepting("0.17.0"),
           "overrides": {"kv_cache_dtype": "fp8"}}
    [inst] = only(plan_host("h", l40s(), [dep]))
    assert inst["attention_backend"] == "default" and "VLLM_ATTENTION_BACKEND" not in inst["env"]


def test_before_011_a_sink_model_gets_triton_not_flashinfer():
    inst = _gpt_oss("0.10.2")
    assert inst["env"]["VLLM_ATTENTION_BACKEND"] == "TRITON_ATTN_VLLM_V1"


def test_forcing_flashinfer_on_a_sink_model_warns():
    dep = {"name": "g", "model": {"id": "openai/gpt-oss-20b", "config": fixture("gpt-oss-20b.json"), "weight_bytes": 14 * 10 ** 9},
           "gpus": 1, "workload": {"max_model_len": 8192, "tools": False}, "engine": {"version": "0.26.0"},
           "overrides": {"attention_backend": "FLASHINFER"}}
    plan = plan_host("h", l40s(), [dep])
    assert any("FlashInfer takes only on sm100" in w for w in plan["warnings"])


# --- 5. thinking-only checkpoints before 0.17 --------------------------------------------------------------

@pytest.mark.parametrize("model, version, parser", [
    ("Qwen/Qwen3-Next-80B-A3B-Thinking", "0.15.0", "deepseek_r1"),     # report 001's model and parser
    ("Qwen/Qwen3-Next-80B-A3B-Thinking", "0.17.0", "qwen3"),           # fixed in 0.17 (qwen3_reasoning_parser.py)
    ("Qwen/Qwen3-Next-80B-A3B-Instruct", "0.15.0", None),
    ("Qwen/Qwen3-8B", "0.15.0", "qwen3"),                              # hybrid: the template does not open <think>
])
def test_thinking_only_checkpoints_use_deepseek_r1_before_017(model, version, parser):
    deps = [{"name": "q", "model": model, "gpus": 4, "workload": {"max_model_len": 32768}, "engine": accepting(version)}]
    [inst] = only(plan_host("h", hardware_profile("h200_sxm_8x"), deps))[:1]
    assert flag(inst["args"], "--reasoning-parser") == parser


def test_a_qwen3_moe_thinking_2507_checkpoint_is_thinking_only():
    """Qwen3-30B-A3B-Thinking-2507 shares Qwen3-30B-A3B's config.json; its name says it only thinks (it was
    taken for a hybrid enable_thinking model, and got the qwen3 parser before 0.17)."""
    config = json.loads(json.dumps(models.CATALOG["Qwen/Qwen3-30B-A3B"][0]))
    dep = {"name": "t", "model": {"id": "Qwen/Qwen3-30B-A3B-Thinking-2507", "config": config}, "gpus": 1,
           "workload": {"max_model_len": 32768, "thinking": False}, "engine": accepting("0.15.0")}
    [inst] = only(plan_host("h", hardware_profile("h200x1"), [dep]))
    assert flag(inst["args"], "--reasoning-parser") == "deepseek_r1"
    assert "--default-chat-template-kwargs" not in inst["args"]     # enable_thinking does not switch it off


# --- 6. MoE from every spelling; unknown families ------------------------------------------------------------

def test_moe_read_from_num_local_experts():
    """Mixtral-8x7B: 46.7B parameters (model card); read as dense it would be ~7B."""
    m = models.profile_from_config(fixture("mixtral-8x7b-instruct-v0.1.json"), "mistralai/Mixtral-8x7B-Instruct-v0.1")
    assert (m.is_moe, m.num_experts, m.experts_per_token, m.moe_intermediate_size) == (True, 8, 2, 14336)
    assert abs(sum(models.count_parameters(vars(m)).values()) / 46.7e9 - 1) < 0.01


def test_moe_read_from_n_routed_experts_with_shared_and_dense_layers():
    m = models.profile_from_config(fixture("deepseek-v3.json"), "deepseek-ai/DeepSeek-V3")
    assert (m.num_experts, m.experts_per_token, m.moe_intermediate_size, m.shared_expert_intermediate_size) == (256, 8, 2048, 2048)
    assert m.dense_mlp_layers == 3 and m.weight_block_size == (128, 128)
    g = models.profile_from_config(fixture("gpt-oss-20b.json"), "openai/gpt-oss-20b")
    assert (g.num_experts, g.experts_per_token, g.model_type) == (32, 4, "gpt_oss")


def test_an_unknown_family_warns_what_was_assumed_and_what_to_set():
    dep = {"name": "mx", "model": {"id": "mistralai/Mixtral-8x7B-Instruct-v0.1", "config": fixture("mixtral-8x7b-instruct-v0.1.json")},
           "workload": {"max_model_len": 32768, "tools": True}, "engine": {"version": "0.26.0"}}
    plan = plan_host("h", hardware_profile("h100_sxm_8x"), [dep])
    [warning] = [w for w in plan["warnings"] if "no table" in w]
    assert 'tool_choice "auto" get HTTP 400: set overrides.tool_call_parser' in warning and "mistral for Mistral" in warning
    assert "MoE with 8 experts" in warning and "32 full-attention layers (no sliding_window" in warning   # Mixtral: null window
    given = dict(dep, overrides={"tool_call_parser": "mistral"})
    inst = only(plan_host("h", hardware_profile("h100_sxm_8x"), [given]))[0]
    assert flag(inst["args"], "--tool-call-parser") == "mistral"
    assert not any("HTTP 400" in w for w in plan_host("h", hardware_profile("h100_sxm_8x"), [given])["warnings"])


# --- 7. default admission --------------------------------------------------------------------------------

def test_admission_is_vllms_default_and_the_reason_says_what_a_cap_costs():
    """Issue 17, H200 session 14: capping admission at what the KV cache holds avoided 26 preemptions but bought 0.999x
    the defaults' throughput and cost 4.5x their p99 TTFT; so the plan admits like vLLM and names the cap as an option."""
    dep = {"name": "m", "model": "Qwen/Qwen3-30B-A3B", "workload": {"max_model_len": 8192, "concurrency": 32}, "engine": {"version": "0.26.0"}}
    [inst] = only(plan_host("h", hardware_profile("h200x1"), [dep]))
    why = reason(inst, "max_num_seqs=")
    assert inst["max_num_seqs"] == 1024 > inst["memory"]["max_concurrency_at_max_len"]
    assert "preempts" in why and "0.999x" in why and "4.5x" in why and "overrides.max_num_seqs at that number" in why


def test_admission_when_the_cache_holds_more_than_vllms_default():
    # Qwen3-0.6B (28 layers x 8 KV heads x 128 x 2 x 2 B = 112 KiB a token) at 512 tokens: the ~130 GiB cache holds thousands
    dep = {"name": "m", "model": "Qwen/Qwen3-0.6B", "workload": {"max_model_len": 512, "concurrency": 8}, "engine": {"version": "0.26.0"}}
    [inst] = only(plan_host("h", hardware_profile("h200x1"), [dep]))
    assert inst["max_num_seqs"] == 1024 and "preempts" not in reason(inst, "max_num_seqs=")


def test_a_declared_concurrency_above_vllms_default_is_said_to_queue():
    dep = {"name": "m", "model": "Qwen/Qwen3-0.6B", "workload": {"max_model_len": 2048, "concurrency": 300}, "engine": {"version": "0.26.0"},
           "gpus": 1}
    [inst] = only(plan_host("h", hardware_profile("t4x4"), [dep]))
    assert inst["max_num_seqs"] == 256 and "more than it admits: the rest queue" in reason(inst, "max_num_seqs=")


def test_a_forced_cap_at_what_the_cache_holds_says_no_admitted_request_is_preempted():
    dep = {"name": "m", "model": "Qwen/Qwen3-30B-A3B", "workload": {"max_model_len": 8192, "concurrency": 32},
           "engine": {"version": "0.26.0"}, "overrides": {"max_num_seqs": 90}}
    [inst] = only(plan_host("h", hardware_profile("h200x1"), [dep]))
    assert inst["max_num_seqs"] == 90 <= inst["memory"]["max_concurrency_at_max_len"]
    assert "no admitted request is preempted" in reason(inst, "max_num_seqs=")
