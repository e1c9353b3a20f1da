"""Issue 34, classes 6 and 7: layouts that serve the declared load under max_model_len auto, pipeline parallel where no
TP fits, DP attention + EP considered for MLA MoE models, refusal hints that are plans ("N hosts of these"), and the FP8
block check by MLA's own widths. Config numbers come from the model cards (tests/fixtures/models, each naming its source)."""

from __future__ import annotations

import json
import math
import pathlib

from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._models import profile_from_config
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import fp8_block_problems, plan_host
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.base import DEFAULT_CONCURRENCY
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.memory import Memory
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.sizer import AUTO_KV_MARGIN, AUTO_MIN_LEN

from llmfleet_testing import accepting

ROOT = pathlib.Path(__file__).resolve().parents[4]
FIXTURES = ROOT / "tests" / "fixtures" / "models"


def fixture(name):
    data = json.loads((FIXTURES / name).read_text())
    assert data["source"].startswith("https://huggingface.co/")
    return data["config"]


def dep(model, version="0.26.0", **extra):
    return {"name": "d", "model": model, "engine": accepting(version), **extra}


def instances(plan):
    assert plan["errors"] == [], plan["errors"]
    return plan["deployments"][0]["instances"]


def reason(inst, prefix):
    return next(r["why"] for r in inst["reasons"] if r["decision"].startswith(prefix))


def flag(args, name):
    return args[args.index(name) + 1] if name in args else None


def assert_holds_declared_load(insts, concurrency=DEFAULT_CONCURRENCY):
    """Every instance holds its share of the declared requests at once at max_model_len, the length is at least the
    floor (or the model's own context), and the margin is kept: the share fits in 95 % of the pages."""
    share = math.ceil(concurrency / len(insts))
    for inst in insts:
        assert inst["max_model_len"] >= AUTO_MIN_LEN
        assert inst["memory"]["max_concurrency_at_max_len"] * (1 - AUTO_KV_MARGIN) >= share - 0.02
        assert flag(inst["args"], "--max-model-len") == str(inst["max_model_len"])


def test_70b_fp8_on_8_h100_holds_the_default_concurrency_at_a_useful_length():
    """The issue's example: 8 instances of one 5,728-token request each before. 70.6B FP8 parameters are ~66 GiB of an
    80 GiB card at TP=1, so TP=1 leaves about one request; the plan now spreads the weights to hold the load."""
    insts = instances(plan_host("h", hardware_profile("h100_sxm_8x"),
                                [dep({"id": "meta-llama/Llama-3.3-70B-Instruct-FP8", "config": fixture("llama-3.3-70b-instruct-fp8.json")})]))
    assert_holds_declared_load(insts)
    assert insts[0]["tensor_parallel_size"] > 1 and len(insts) * insts[0]["tensor_parallel_size"] == 8
    assert "then the length each instance gives its share" in reason(insts[0], "tensor_parallel_size")
    assert "kept back" in reason(insts[0], "max_model_len")


def test_30b_moe_on_4_k100_gets_a_useful_length():
    """The issue's example: 352 tokens before (61 GiB of bf16 weights on a 64 GiB card at TP=1)."""
    insts = instances(plan_host("h", hardware_profile("k100ai_8x_pcie"), [dep("Qwen/Qwen3-30B-A3B", "0.18.0", gpus=[0, 1, 2, 3])]))
    assert_holds_declared_load(insts)
    assert insts[0]["tensor_parallel_size"] >= 2


def test_declared_concurrency_is_read_under_auto():
    """A larger declared concurrency moves the layout or shortens the length; it is never ignored under auto."""
    model = {"id": "meta-llama/Llama-3.3-70B-Instruct-FP8", "config": fixture("llama-3.3-70b-instruct-fp8.json")}
    low = instances(plan_host("h", hardware_profile("h100_sxm_8x"), [dep(model, workload={"concurrency": 8})]))
    high = instances(plan_host("h", hardware_profile("h100_sxm_8x"), [dep(model, workload={"concurrency": 64})]))
    assert_holds_declared_load(high, 64)
    assert (high[0]["tensor_parallel_size"], -high[0]["max_model_len"]) > (low[0]["tensor_parallel_size"], -low[0]["max_model_len"])


def test_a_model_that_fits_one_gpu_at_full_context_keeps_one_instance_per_gpu():
    insts = instances(plan_host("h", hardware_profile("h100_sxm_8x"),
                                [dep({"id": "meta-llama/Llama-3.1-8B-Instruct", "config": fixture("llama-3.1-8b-instruct.json")})]))
    assert len(insts) == 8 and insts[0]["tensor_parallel_size"] == 1
    assert insts[0]["max_model_len"] == 131072


def test_replicas_are_kept_once_each_gives_a_long_context():
    """Llama-3.1-8B (16 GB of bf16 weights) on 24 GiB RTX 4090s: one GPU holds its share of the 8 at well over 32k tokens, so
    the length does not buy a wider TP (fewer replicas) there."""
    insts = instances(plan_host("h", hardware_profile("rtx4090_8x_pcie"),
                                [dep({"id": "meta-llama/Llama-3.1-8B-Instruct", "config": fixture("llama-3.1-8b-instruct.json")})]))
    assert len(insts) == 8 and insts[0]["tensor_parallel_size"] == 1
    assert_holds_declared_load(insts)
    assert insts[0]["max_model_len"] >= 32768


def test_ten_kv_heads_on_four_small_gpus_is_pipeline_parallel():
    """40 attention heads over 10 KV heads (the model card's config): TP=4 does not divide the KV heads (10 % 4), TP=2 puts
    14.7B parameters of 16-bit weights (29 GB) at ~14.7 GB a GPU on 15 GiB T4s: only pipeline stages hold it."""
    cfg = fixture("phi-4.json")
    assert cfg["num_key_value_heads"] % 4 and cfg["num_attention_heads"] % 4 == 0
    insts = instances(plan_host("h", hardware_profile("t4x4"), [dep({"id": "microsoft/phi-4", "config": cfg})]))
    inst = insts[0]
    tp, pp = inst["tensor_parallel_size"], inst["pipeline_parallel_size"]
    assert pp > 1 and tp in (1, 2) and tp * pp <= 4 and len(inst["gpus"]) == tp * pp
    assert flag(inst["args"], "--pipeline-parallel-size") == str(pp)
    assert "SupportsPP" in reason(inst, "pipeline_parallel_size")
    assert inst["memory"]["weights_gib_per_gpu"] < 14.7e9 * 2 / 1024 ** 3 / (tp * pp) * 1.25


def test_pipeline_parallel_is_not_used_where_tp_fits():
    insts = instances(plan_host("h", hardware_profile("h100_sxm_8x"), [dep("Qwen/Qwen3-30B-A3B")]))
    assert all(i["pipeline_parallel_size"] == 1 and "--pipeline-parallel-size" not in i["args"] for i in insts)


def test_mla_moe_considers_dp_attention_and_expert_parallel_with_the_reason():
    insts = instances(plan_host("h", hardware_profile("h200_sxm_8x"),
                                [dep({"id": "deepseek-ai/DeepSeek-V3", "config": fixture("deepseek-v3.json")})]))
    why = reason(insts[0], "data_parallel_size=1 (DP attention + EP considered)")
    assert "--data-parallel-size 8 --enable-expert-parallel" in why and "Not chosen" in why
    dense = instances(plan_host("h", hardware_profile("h200_sxm_8x"), [dep("Qwen/Qwen3-30B-A3B")]))
    assert not any(r["decision"].startswith("data_parallel_size=1 (DP") for r in dense[0]["reasons"])


def _h100_hosts(count):
    """`count` H100 boards' GPUs as one host's (NVLink between every pair): where a multi-host hint is re-planned."""
    one = hardware_profile("h100_sxm_8x")
    n = 8 * count
    accs = [dict(one["accelerators"][i % 8], index=i, numa_node=i // 8) for i in range(n)]
    return {"accelerators": accs, "links": [["X" if i == j else "NV18" for j in range(n)] for i in range(n)],
            "numa_cpus": {k: one["numa_cpus"][k % 2] for k in range(count)}, "cpu_count": one["cpu_count"] * count,
            "memory_mib": one["memory_mib"] * count, "driver_version": one["driver_version"]}


def test_a_model_too_big_for_one_host_names_the_hosts_that_hold_it_and_they_do():
    model = {"id": "deepseek-ai/DeepSeek-V3", "config": fixture("deepseek-v3.json")}
    plan = plan_host("h", hardware_profile("h100_sxm_8x"), [dep(model)])
    assert plan["errors"] and "2 hosts of these (2 x 8 GPUs: TP=8 inside each host x PP=2" in plan["errors"][0]
    need = plan["deployments"][0]["refusal"]
    assert need["reason"] == "needs_more_hosts" and need["hosts"] == 2 and need["gpus_per_host"] == 8
    assert need["tensor_parallel_size"] * need["pipeline_parallel_size"] == need["hosts"] * need["gpus_per_host"]
    # re-planned on that many GPUs of the same kind: it fits
    insts = instances(plan_host("h", _h100_hosts(need["hosts"]), [dep(model)]))
    assert sum(len(i["gpus"]) for i in insts) == 16


def test_a_plan_that_fits_has_no_refusal_field():
    plan = plan_host("h", hardware_profile("h100_sxm_8x"), [dep("Qwen/Qwen3-30B-A3B")])
    assert "refusal" not in plan["deployments"][0]


def test_fp8_block_check_uses_mla_widths():
    """DeepSeek-V3 (128 heads, qk_nope 128 + qk_rope 64, v_head_dim 128, q_lora_rank 1536, 128x128 blocks): at TP=16 the
    q_b projection is 8 x 192 = 1536 a GPU, kv_b 8 x 256 = 2048, o_proj's input 8 x 128 = 1024, all multiples of 128; a
    head size of hidden / heads (56) would have refused it."""
    m = profile_from_config(fixture("deepseek-v3.json"), "deepseek-ai/DeepSeek-V3")
    assert m.is_mla and m.weight_block_size == (128, 128)
    assert fp8_block_problems(m, 16) == ([], [])
    broken = profile_from_config(dict(fixture("deepseek-v3.json"), v_head_dim=72), "x/broken")
    fixed, _experts = fp8_block_problems(broken, 16)
    assert any("kv_b" in p for p in fixed) and any("o projection" in p for p in fixed)


def test_longest_held_is_the_longest_length_that_holds_the_requests():
    mem = Memory(0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 1000, 16000, (2, 0))
    for requests in (1, 3, 7):
        length = mem.longest_held(requests, 0.95, 10 ** 6)
        usable = int(1000 * 0.95)
        assert requests * 2 * math.ceil(length / 16) <= usable < requests * 2 * math.ceil((length + 16) / 16)
    assert mem.longest_held(1, 1.0, 4096) == 4096
    assert mem.longest_held(2000, 1.0) == 0


def test_a_pipeline_stage_holds_its_layers_and_one_vocabulary_matrix():
    """phi-4: 40 layers, vocabulary 100352 x hidden 5120 (the model card's config). PP=2: 20 layers and their KV a stage;
    the heaviest stage carries at least half the decoder plus one vocabulary matrix, and the stages together at least
    the whole model."""
    from ansible_collections.llmfleet.serving.plugins.module_utils._models import kv_bytes_per_token
    from ansible_collections.llmfleet.serving.plugins.module_utils._plan.sizer import stage_view
    m = profile_from_config(fixture("phi-4.json"), "microsoft/phi-4")
    for pp in (2, 3, 4):
        stage = stage_view(m, pp)
        assert stage.num_layers == math.ceil(40 / pp)
        assert kv_bytes_per_token(stage, 1, 2) == kv_bytes_per_token(m, 1, 2) * math.ceil(40 / pp) // 40
        assert stage.weight_bytes * pp >= m.weight_bytes
        vocab = 100352 * 5120 * 2
        assert stage.weight_bytes >= (m.weight_bytes - 2 * vocab) / pp + vocab
    ds = profile_from_config(fixture("deepseek-v3.json"), "deepseek-ai/DeepSeek-V3")
    assert stage_view(ds, 6).weight_bytes * 6 >= ds.weight_bytes


def test_a_pipeline_layout_honours_or_refuses_a_forced_instance_count():
    """overrides.instances is never dropped where the plan turns to pipeline stages: fewer are planned, more are refused."""
    base = dep({"id": "microsoft/phi-4", "config": fixture("phi-4.json")})
    one = plan_host("t4", hardware_profile("t4x4"), [dict(base, overrides={"instances": 1})])
    assert not one["errors"] and len(one["deployments"][0]["instances"]) == 1
    assert one["deployments"][0]["instances"][0]["pipeline_parallel_size"] == 2
    two = plan_host("t4", hardware_profile("t4x4"), [dict(base, overrides={"instances": 2})])
    assert two["errors"] and "overrides.instances=2" in two["errors"][0] and "places only 1" in two["errors"][0]
