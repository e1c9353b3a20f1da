"""The planner's stages one by one: typed inputs in, a typed result (or a Refusal naming what does not fit) out.

plan_deployment only composes them; these tests pin each stage's own rule, with inputs built the way
plan_host builds them (validated hardware, checked deployments).
"""

from __future__ import annotations

import json
import math
import pathlib
import types

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils._engine import parse_version
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware import validate_hardware
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import (
    WIDER_TP_GAIN, Ctx, PlanError, Refusal, Sizer, check_deployments, check_engine_runs, choose_features, choose_layout, choose_model,
    choose_precision, engine_build, extend_context, gpu_budget, place, plan_deployment, plan_host, read_request, size_cpu,
    size_instances,
)

from llmfleet_testing import accepting

OPTIONS = {"edge_address": None, "bind_why": "the gateway runs on this host"}


def hw_of(profile):
    return validate_hardware(hardware_profile(profile), source="test")


def l40s_x4():
    """4 x L40S (48 GB, sm89) on one NUMA node over PCIe: the host of issue 17's TP example."""
    gpus = [{"index": i, "vendor": "nvidia", "model": "NVIDIA L40S", "arch": "sm89", "compute_capability": "8.9", "memory_mib": 46068,
             "numa_node": 0, "uuid": f"GPU-{i}"} for i in range(4)]
    return validate_hardware({"accelerators": gpus, "links": [["X" if i == j else "NODE" for j in range(4)] for i in range(4)],
                              "numa_cpus": {0: "0-31"}, "cpu_count": 32, "memory_mib": 256 * 1024, "driver_version": "580.65.06"},
                             source="test")


def deployment(model="Qwen/Qwen3-8B", version="0.26.0", **extra):
    [d] = check_deployments([{"name": "d", "model": model, "engine": accepting(version), **extra}], "h")
    return d


def staged(d, hw, host="h"):
    """The stages up to the sizer, as plan_deployment runs them."""
    ctx = Ctx([])
    req = read_request(d, ctx)
    m = choose_model(d, req, {})
    p = place(d, req, hw, host, {}, ctx)
    precision, problems = choose_precision(m, req, p, ctx)
    assert problems == []
    budget = gpu_budget(req, p, precision.eager, ctx)
    sizer = Sizer(m, p.vendor, req, budget, precision.dtype, precision.eager, req.overrides.get("max_num_seqs"))
    return types.SimpleNamespace(ctx=ctx, req=req, m=m, p=p, precision=precision, budget=budget, sizer=sizer)


def decision(ctx, prefix):
    return next(r["why"] for r in ctx.reasons if r["decision"].startswith(prefix))


# stage 1: the request

def test_request_refuses_an_engine_older_than_the_planner_knows():
    with pytest.raises(Refusal, match=r"d: vLLM 0.8.0 is older than 0.8.5"):
        read_request(deployment(version="0.8.0"), Ctx([]))


def test_request_warns_for_an_engine_newer_than_the_flag_table():
    ctx = Ctx([])
    req = read_request(deployment(version="9.0.0"), ctx)
    assert req.version == (9, 0, 0)
    [warning] = ctx.warnings
    assert "newer than" in warning and "flag table" in warning


def test_request_reads_the_workload_as_numbers_and_overrides_win():
    req = read_request(deployment(workload={"max_model_len": 4096, "concurrency": 3, "goal": "latency"},
                                  overrides={"max_model_len": 2048}), Ctx([]))
    assert (req.max_model_len, req.concurrency, req.goal) == (2048, 3, "latency")
    assert read_request(deployment(), Ctx([])).max_model_len == "auto"


# stage 2: the model

def test_model_outside_the_catalog_without_a_config_is_refused_with_the_way_out():
    d = deployment(model="someone/unknown-model")
    with pytest.raises(Refusal) as err:
        choose_model(d, read_request(d, Ctx([])), {})
    assert "someone/unknown-model" in str(err.value)


def test_engine_too_old_for_the_architecture_is_refused():
    d = deployment(model="Qwen/Qwen3.5-27B", version="0.9.2")
    req = read_request(d, Ctx([]))
    m = choose_model(d, req, {})
    with pytest.raises(Refusal, match=rf"needs vLLM >= {m.min_engine}"):
        check_engine_runs(m, req)


# stage 2d: YaRN

def yarn(model="Qwen/Qwen3-8B", length=131072, **extra):
    d = deployment(model=model, workload={"max_model_len": length}, **extra)
    ctx = Ctx([])
    req = read_request(d, ctx)
    m, overrides = extend_context(d, req, choose_model(d, req, {}), ctx)
    return m, overrides, ctx


def test_yarn_extends_qwen3_by_the_smallest_documented_factor():
    """Qwen3's card: 32768 tokens native, YaRN x4 for 131072; the override carries the same length both ways vLLM derives it
    (before and after vLLM #56446) and the rope_theta transformers 5 keeps inside the dict."""
    m, overrides, ctx = yarn()
    assert m.max_position_embeddings == 131072
    assert json.loads(overrides) == {"max_position_embeddings": 131072, "rope_scaling": {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768, "rope_theta": 1000000.0}}
    assert "native 32768" in decision(ctx, "rope_scaling=yarn x4")
    m, overrides, _ctx = yarn(length=50000)
    assert m.max_position_embeddings == 65536 and json.loads(overrides)["rope_scaling"]["factor"] == 2.0


def test_yarn_is_off_within_the_context_and_for_auto():
    for length in (40960, "auto"):
        m, overrides, ctx = yarn(length=length)
        assert overrides is None and m.max_position_embeddings == 40960 and ctx.reasons == []


def test_a_length_beyond_what_yarn_reaches_or_for_a_checkpoint_that_scales_rope_is_refused_in_this_stage():
    with pytest.raises(Refusal, match=r"exceeds Qwen/Qwen3-8B's context of 40960 tokens; YaRN, which its model card documents up to "
                                      r"x4, reaches 131072"):
        yarn(length=200000)
    llama = json.loads((pathlib.Path(__file__).resolve().parents[4] / "tests/fixtures/models/llama-3.1-8b-instruct.json").read_text())
    spec = {"id": "meta-llama/Llama-3.1-8B-Instruct", "config": llama["config"]}
    with pytest.raises(Refusal, match=r"the checkpoint already scales RoPE: llama3"):
        yarn(model=spec, length=262144)
    fixture = json.loads((pathlib.Path(__file__).resolve().parents[4] / "tests/fixtures/models/qwen3-235b-a22b-fp8.json").read_text())
    spec = {"id": "Qwen/Qwen3-235B-A22B-FP8", "config": {k: v for k, v in fixture["config"].items() if k != "rope_theta"}}
    with pytest.raises(Refusal, match=r"its family documents YaRN, but its config.json gives no rope_theta"):
        yarn(model=spec, length=65536)


def test_yarn_refuses_an_extra_args_hf_overrides_it_would_clash_with():
    with pytest.raises(Refusal, match=r"extra_args sets --hf-overrides too"):
        yarn(extra_args=["--hf-overrides", "{}"])


def test_yarn_reaches_the_command_line():
    plan = plan_host("h", hardware_profile("h200x1"), [{"name": "d", "model": "Qwen/Qwen3-8B", "engine": {"version": "0.26.0"},
                                                        "workload": {"max_model_len": 131072, "concurrency": 2}}])
    [inst] = plan["deployments"][0]["instances"]
    args = inst["args"]
    assert inst["max_model_len"] == 131072 and args[args.index("--max-model-len") + 1] == "131072"
    assert json.loads(args[args.index("--hf-overrides") + 1])["rope_scaling"]["rope_type"] == "yarn"


# stage 3: placement

def test_place_takes_only_free_gpus_and_names_the_shortfall():
    hw = hw_of("h200_sxm_8x")
    d = deployment(gpus=4)
    req = read_request(d, Ctx([]))
    p = place(d, req, hw, "h", {0: "other", 1: "other", 2: "other", 3: "other"}, Ctx([]))
    assert p.gpus == [4, 5, 6, 7] and (p.vendor, p.cc) == ("nvidia", 90)
    with pytest.raises(Refusal, match=r"only 3 GPU\(s\) are free"):
        place(d, req, hw, "h", {i: "other" for i in range(5)}, Ctx([]))


def test_place_refuses_gpus_another_deployment_uses():
    hw = hw_of("h200_sxm_8x")
    d = deployment(gpus=[0, 1])
    with pytest.raises(Refusal, match=r"gpus \[1\] are already used by other"):
        place(d, read_request(d, Ctx([])), hw, "h", {1: "other"}, Ctx([]))


def test_place_on_a_cpu_host_has_no_gpus():
    d = deployment(model="Qwen/Qwen3-0.6B")
    hw = validate_hardware({"accelerators": [], "links": None, "numa_cpus": {0: "0-3"}, "cpu_count": 4, "memory_mib": 16384,
                            "driver_version": None}, source="test")
    p = place(d, read_request(d, Ctx([])), hw, "h", {}, Ctx([]))
    assert (p.gpus, p.vendor) == ([], "cpu")


# stages 4 and 5: build and precision

def test_build_returns_its_problems_for_stage_5_to_join():
    hw = hw_of("dgx1_v100_32gb")
    d = deployment(version="0.21.0")
    ctx = Ctx([])
    req = read_request(d, ctx)
    build, problems = engine_build(d, req, place(d, req, hw, "h", {}, ctx), hw, ctx)
    assert build.image is None and len(problems) == 1 and '"0.19.1"' in problems[0]


def test_precision_on_volta_is_float16_and_fp8_is_refused_before_017():
    hw = hw_of("dgx1_v100_32gb")
    d = deployment(model="Qwen/Qwen3-8B-FP8", version="0.11.0")
    ctx = Ctx([])
    req = read_request(d, ctx)
    precision, problems = choose_precision(choose_model(d, req, {}), req, place(d, req, hw, "h", {}, ctx), ctx)
    assert precision.dtype == "float16" and not precision.eager
    [problem] = problems
    assert "sm70 cannot run FP8" in problem and "sm80+" in problem


# stage 6: the GPU budget

def test_budget_leaves_cuda_graphs_room_where_the_version_does_not_count_them():
    s = staged(deployment(model="Qwen/Qwen3-0.6B", version="0.17.0"), hw_of("t4x4"))   # 15 GiB: 1.5 GiB is 10 % of it
    assert s.budget.util < 0.9 and "keeps CUDA graphs" in decision(s.ctx, "gpu_memory_utilization")
    s = staged(deployment(version="0.17.0"), hw_of("h200x1"))
    assert s.budget.util == 0.9
    s = staged(deployment(version="0.26.0"), hw_of("h200x1"))
    assert s.budget.util == 0.92
    s = staged(deployment(version="0.26.0", overrides={"gpu_memory_utilization": 0.8}), hw_of("h200x1"))
    assert s.budget.util == 0.8 and decision(s.ctx, "gpu_memory_utilization") == "forced by overrides"


# the sizer: admission

def test_admission_is_vllms_default_unless_forced():
    """Session 14 on the H200: the cap at what the KV cache holds avoided preemption but bought no throughput and cost
    4.5x the p99 time to first token, so admission is vLLM's default; the reason says what the cache holds."""
    s = staged(deployment(workload={"max_model_len": 8192, "concurrency": 32}), hw_of("h200x1"))
    _mem, seqs, length = s.sizer.evaluate(1, "auto")
    assert (seqs, length) == (s.budget.seqs_default, 8192) == (1024, 8192)
    s = staged(deployment(overrides={"max_num_seqs": 7}), hw_of("h200x1"))
    assert s.sizer.evaluate(1, "auto")[1] == 7


# stage 7: layout

def test_layout_picks_the_smallest_tp_whose_instances_hold_the_declared_load():
    """Issue 17: 32 requests of 32k on 4 x L40S. Qwen3-32B-FP8 (33 GB of weights) does not hold one such request per GPU at
    TP=1 in bf16 KV; TP=2 x 2 holds about 24 of them, TP=4 x 1 about 32 (fp8 KV on sm89 where the model dtype falls short):
    the widest holds the most, 1.25x and more of what TP=2 holds, and is taken."""
    s = staged(deployment(model="Qwen/Qwen3-32B-FP8", workload={"max_model_len": 32768, "concurrency": 32}), l40s_x4())
    layout = choose_layout(s.m, s.req, s.p, l40s_x4(), s.sizer, s.ctx)
    assert (layout.tp, layout.instances) == (4, 1)
    why = decision(s.ctx, "tensor_parallel_size")
    two, four = (float(why.split(f"TP={t} x {4 // t}: ")[1].split(" ")[0]) for t in (2, 4))
    assert 20 < two < 28 and four >= 1.25 * two and "with fp8 KV" in why
    sizing = size_instances(s.m, s.req, s.p, layout, s.sizer, s.ctx)
    assert sizing.kv_dtype == "fp8" and abs(sizing.mem.concurrency(32768) - four) < 0.1


def test_layout_stays_narrow_when_a_narrow_tp_holds_the_load():
    s = staged(deployment(model="Qwen/Qwen3-14B", workload={"max_model_len": 32768, "concurrency": 32}), l40s_x4())
    layout = choose_layout(s.m, s.req, s.p, l40s_x4(), s.sizer, s.ctx)
    assert (layout.tp, layout.instances) == (2, 2)          # TP=1 x 4 holds 20.8 with fp8 KV, TP=2 x 2 42.4
    s = staged(deployment(model="Qwen/Qwen3-8B", workload={"max_model_len": 8192, "concurrency": 32}), l40s_x4())
    assert choose_layout(s.m, s.req, s.p, l40s_x4(), s.sizer, s.ctx).tp == 1


def test_layout_widens_for_capacity_only_by_the_stated_gain_when_nothing_holds_the_load():
    hw = hw_of("rtx4090_8x_pcie")
    s = staged(deployment(model="Qwen/Qwen3-0.6B", workload={"max_model_len": 8192, "concurrency": 1000}), hw)
    layout = choose_layout(s.m, s.req, s.p, hw, s.sizer, s.ctx)
    why = decision(s.ctx, "tensor_parallel_size")
    assert layout.tp == 1 and f"no wider one {WIDER_TP_GAIN}x as many" in why    # weights are small: a wider TP frees little


def test_layout_with_auto_length_keeps_the_smallest_tp_that_fits():
    hw = hw_of("h100_sxm_8x")
    s = staged(deployment(model="Qwen/Qwen3-8B", workload={"concurrency": 500}), hw)
    assert choose_layout(s.m, s.req, s.p, hw, s.sizer, s.ctx).tp == 1
    assert "max_model_len is auto" in decision(s.ctx, "tensor_parallel_size")


def test_layout_refuses_an_impossible_forced_tp():
    hw = hw_of("h200_sxm_8x")
    s = staged(deployment(overrides={"tensor_parallel_size": 3}), hw)
    with pytest.raises(Refusal, match=r"tensor_parallel_size 3 cannot be used"):
        choose_layout(s.m, s.req, s.p, hw, s.sizer, s.ctx)


def test_layout_takes_expert_parallelism_where_the_fp8_block_requires_it():
    hw = hw_of("h100_sxm_8x")
    s = staged(deployment(model="Qwen/Qwen3-235B-A22B-FP8", workload={"goal": "latency"}), hw)
    layout = choose_layout(s.m, s.req, s.p, hw, s.sizer, s.ctx)
    assert layout.tp == 8 and layout.expert_parallel and layout.ep_required


# stage 8: sizing

def test_sizing_refuses_what_does_not_fit_with_the_longest_that_would():
    hw = hw_of("h200x1")
    s = staged(deployment(model="Qwen/Qwen3-32B", workload={"max_model_len": 40960, "concurrency": 1},
                          overrides={"gpu_memory_utilization": 0.3}), hw)
    layout = types.SimpleNamespace(tp=1, instances=1, kv_dtype="auto", pp=1)
    with pytest.raises(Refusal, match=r"does not fit|longest request that fits"):
        size_instances(s.m, s.req, s.p, layout, s.sizer, s.ctx)


# stage 9 and the CPU stages

def test_features_give_the_familys_parsers_and_leave_a_cpu_without_backends():
    d = deployment(model="Qwen/Qwen3-0.6B", workload={"max_model_len": 4096, "concurrency": 2})
    hw = validate_hardware({"accelerators": [], "links": None, "numa_cpus": {0: "0-3"}, "cpu_count": 4, "memory_mib": 16384,
                            "driver_version": None}, source="test")
    ctx = Ctx([])
    req = read_request(d, ctx)
    m = choose_model(d, req, {})
    p = place(d, req, hw, "h", {}, ctx)
    precision, _problems = choose_precision(m, req, p, ctx)
    cpu = size_cpu(m, req, hw, "h", precision.dtype, ctx)
    assert cpu.max_model_len == 4096 and cpu.space_gib == max(1, math.ceil(cpu.per_token * 4096 * 2 / 1024 ** 3))
    feats = choose_features(m, req, p, precision, cpu.seqs, 2048, "auto", None, ctx)
    assert (feats.backend, feats.capture, feats.reasoning, feats.tools, feats.hf_overrides) == (None, None, "qwen3", "hermes", None)


# composition

def test_plan_deployment_reports_what_it_takes_and_leaves_its_inputs_alone():
    hw = hw_of("h200_sxm_8x")
    taken, ports = {0: "other"}, frozenset({8002})
    d = deployment(gpus=2)
    one = plan_deployment(d, hw, "h", taken, ports, OPTIONS)
    assert one.errors == [] and one.gpus == [1, 2] and one.ports == [8003, 8004]
    assert taken == {0: "other"} and ports == frozenset({8002})
    refused = plan_deployment(deployment(version="0.8.0"), hw, "h", {}, frozenset(), OPTIONS)
    assert refused.deployment["instances"] == [] and refused.gpus == [] and "older than" in refused.errors[0]


def test_plan_host_folds_the_deployments_together():
    deps = [{"name": "a", "model": "Qwen/Qwen3-8B", "engine": {"version": "0.26.0"}, "gpus": 2},
            {"name": "b", "model": "Qwen/Qwen3-8B", "engine": {"version": "0.26.0"}, "gpus": [0, 1]}]
    plan = plan_host("h", hardware_profile("h200_sxm_8x"), deps)
    a, b = plan["deployments"]
    assert [i["gpus"] for i in b["instances"]] == [[0], [1]]       # explicit lists first
    assert [i["gpus"] for i in a["instances"]] == [[2], [3]]
    assert len({i["port"] for d in plan["deployments"] for i in d["instances"]}) == 4
    assert parse_version(a["engine_version"]) == (0, 26, 0)


def test_widening_compares_each_step_with_every_narrower_layout():
    """Qwen3-14B on 8 x H200, 400 requests of 40960: TP=1 x 8 holds about 252, TP=2 x 4 287 (1.14x), TP=4 x 2 306, TP=8 x 1
    315. No step gains 1.25x over the layouts below it, so the plan stays at TP=1 (8 replicas, no all-reduce); TP=8 gains
    1.25x over TP=1 only, and one instance of TP=8 was what a comparison with the narrowest alone picked (review, issue 17)."""
    hw = hw_of("h200_sxm_8x")
    s = staged(deployment(model="Qwen/Qwen3-14B", workload={"max_model_len": 40960, "concurrency": 400}), hw)
    layout = choose_layout(s.m, s.req, s.p, hw, s.sizer, s.ctx)
    why = decision(s.ctx, "tensor_parallel_size")
    held = {t: float(why.split(f"TP={t} x {8 // t}: ")[1].split(" ")[0].rstrip(",)")) for t in (1, 2, 4, 8)}
    assert held[8] >= WIDER_TP_GAIN * held[1] and held[2] < WIDER_TP_GAIN * held[1]
    assert layout.tp == 1 and "no wider one" in why


def test_pcie_nodes_of_unequal_size_place_only_whole_instances():
    """4 GPUs split 3 + 1 over two NUMA nodes: a TP=2 instance fits only in the larger node."""
    gpus = [{"index": i, "vendor": "nvidia", "model": "NVIDIA L40S", "arch": "sm89", "compute_capability": "8.9", "memory_mib": 46068,
             "numa_node": 0 if i < 3 else 1, "uuid": f"GPU-{i}"} for i in range(4)]
    links = [["X" if i == j else ("NODE" if (i < 3) == (j < 3) else "SYS") for j in range(4)] for i in range(4)]
    hw = validate_hardware({"accelerators": gpus, "links": links, "numa_cpus": {0: "0-15", 1: "16-31"}, "cpu_count": 32,
                            "memory_mib": 256 * 1024, "driver_version": "580.65.06"}, source="test")
    plan = plan_host("h", hw, [{"name": "d", "model": "Qwen/Qwen3-32B", "engine": {"version": "0.26.0"},
                                "workload": {"max_model_len": 8192, "concurrency": 8}}])
    [inst] = plan["deployments"][0]["instances"]
    assert inst["tensor_parallel_size"] == 2 and inst["gpus"] == [0, 1]
    assert any("2 of its GPUs stay idle" in w and "inside one NUMA node" in w for w in plan["warnings"])
    forced = plan_host("h", hw, [{"name": "d", "model": "Qwen/Qwen3-32B", "engine": {"version": "0.26.0"},
                                  "workload": {"max_model_len": 8192}, "overrides": {"tensor_parallel_size": 2, "instances": 2}}])
    assert any("do not fit inside the NUMA nodes' GPUs (3, 1); at most 1" in e for e in forced["errors"])


@pytest.mark.parametrize("overrides, message", [
    ({"instances": 0}, r"overrides.instances=0: a whole number of at least 1"),
    ({"max_model_len": "32k"}, r"overrides.max_model_len='32k': a positive number of tokens or 'auto'"),
    ({"max_num_seqs": 0}, r"overrides.max_num_seqs=0"),
    ({"gpu_memory_utilization": 1.5}, r"a fraction above 0 and at most 1"),
    ({"enforce_eager": "yes"}, r"overrides.enforce_eager='yes': true or false"),
])
def test_malformed_overrides_fail_before_planning_naming_the_value(overrides, message):
    with pytest.raises(PlanError, match=message):
        check_deployments([{"name": "d", "model": "Qwen/Qwen3-8B", "engine": {"version": "0.26.0"}, "overrides": overrides}], "h")


def test_request_for_034_says_what_its_wheel_showed():
    """0.34 is newer than the flag table; what its wheel showed (the KV cache sized after warm-up, 64-token blocks) is in
    the warning, and not in one for 0.33."""
    ctx = Ctx([])
    read_request(deployment(version="0.34.0"), ctx)
    [warning] = ctx.warnings
    assert "newer than 0.33.0" in warning and "sizes the KV cache after warm-up" in warning and "64-token attention blocks" in warning
    assert "engine.version 0.33.0" in warning
    quiet = Ctx([])
    read_request(deployment(version="0.33.0"), quiet)
    assert quiet.warnings == []


def test_tp_weighing_counts_the_instances_the_inventory_places():
    """overrides.instances: stage 7 weighs each TP with the instances stage 7 then places (2 here, not 8 / TP), so its
    table and its fp8-KV decision are those of the layout that runs."""
    dep = {"name": "q", "model": "Qwen/Qwen3-8B", "engine": {"version": "0.26.0"},
           "workload": {"max_model_len": 32768, "concurrency": 300, "goal": "throughput"}, "overrides": {"instances": 2}}
    plan = plan_host("h", hardware_profile("h100_sxm_8x"), [dep])
    assert plan["errors"] == [], plan["errors"]
    [first, _second] = plan["deployments"][0]["instances"]
    tp = first["tensor_parallel_size"]
    table = next(r["why"] for r in first["reasons"] if r["decision"] == f"tensor_parallel_size={tp}")
    assert "TP=1 x 2:" in table and "TP=1 x 8" not in table and "TP=8" not in table   # 2 x TP=8 would need 16 GPUs


def test_expert_parallel_on_a_model_without_experts_is_refused():
    dep = {"name": "q", "model": "Qwen/Qwen3-32B", "engine": {"version": "0.26.0"}, "workload": {"max_model_len": 8192},
           "overrides": {"expert_parallel": True}}
    [error] = plan_host("h", hardware_profile("h200_sxm_8x"), [dep])["errors"]
    assert "overrides.expert_parallel: true needs a mixture-of-experts model" in error and "remove it" in error
