"""The planner's memory model against what vLLM 0.26 printed on the lent H200 (tests/fixtures/gpu/,
recorded by tests/gpu/device_run.py with the inputs of tests/gpu/runs.json)."""

from __future__ import annotations

import dataclasses
import json
import pathlib

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _models as models
from ansible_collections.llmfleet.serving.plugins.module_utils._engine import default_gpu_memory_utilization
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import VISIBLE_FRACTION, memory_model, plan_host

from llmfleet_testing import h200_model, outside_container

ROOT = pathlib.Path(__file__).resolve().parents[4]
MEASURED = json.loads((ROOT / "tests" / "fixtures" / "gpu" / "h200-vllm-0.26.0.json").read_text())
RUNS = {r["label"]: r for r in json.loads((ROOT / "tests" / "gpu" / "runs.json").read_text())["runs"]}
PLAN_LABELS = [label for label, r in RUNS.items() if r["config"] == "planner"]
MEASURED_LABELS = {r["label"] for r in MEASURED["runs"]}
H200 = (0, 26, 0)
# vLLM 0.26 on a card of >= 70 GiB (engine/arg_utils.get_batch_defaults, API server)
DEFAULT_SEQS, DEFAULT_BATCHED = 1024, 8192


def recorded(label, session, lease=1):
    """The fixture's row of one configuration in one H200 session (a repeat in a second lease of it has `lease: 2`)."""
    return next(r for r in MEASURED["runs"] if r["label"] == label and r.get("session") == session and r.get("lease", 1) == lease)


def flag(args, name, default=None):
    return args[args.index(name) + 1] if name in args else default


def deployment(spec):
    """A run's deployment as the planner takes it: the fixture models name their config.json file (tests/fixtures/models)."""
    return {**spec["deployment"], "model": h200_model(spec["model"])}


def admission_apart(args):
    """A command line without its admission: --max-num-seqs, and the MoE capture size the plan set only below 256 sequences."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in ("--max-num-seqs", "--max-cudagraph-capture-size"):
            skip = True
        else:
            out.append(a)
    return out


def is_todays_plan_but_admission(recorded, label):
    """Session 14 made vLLM's default today's admission (the cap bought no throughput): a recorded plan row is today's
    plan when its command line differs in admission only - and in parser flags, which change neither the engine's memory
    nor its speed (issue 34 plans Llama 3.1's llama3_json only with vLLM's shipped chat template)."""
    return parsers_apart(admission_apart(recorded)) == parsers_apart(admission_apart(RUNS[label]["args"]))


def profile_of(model_id):
    """The model of a recorded run: the catalog's, or the fixture config its plan was made from."""
    return models.resolve_model(h200_model(model_id))


def test_every_plan_is_measured_or_pending():
    """A plan that changed since its H200 run must be listed as pending in the fixture, so the next
    device session records it (tests/gpu/README.md); one that did not change must have its row."""
    assert PLAN_LABELS == ["dense-plan", "hybrid-plan", "moe-plan", "llama-plan", "mla-plan", "gptoss-plan"]
    pending = set(MEASURED.get("pending_plans", []))
    stale = {label for label in PLAN_LABELS if not any(
        r["label"] == label and r["args"] == RUNS[label]["args"] for r in MEASURED["runs"])}
    assert stale == pending, f"plans without an H200 row: {sorted(stale)}; listed as pending: {sorted(pending)}"


@pytest.mark.parametrize("label", [x for x in PLAN_LABELS if x in MEASURED_LABELS], ids=str)
def test_plan_kv_cache_tokens_within_5_percent_of_vllm_on_the_h200(label):
    """The recorded command is what ran. Issue 17 changed admission only (max_num_seqs: first 2 x concurrency, then what
    the KV cache holds, since session 14 vLLM's default), so today's plan is that command with another --max-num-seqs,
    between the one the recorded plan ran and the 1024 of the recorded vLLM-defaults run of the same model. KV tokens
    depend on max_num_seqs only through the sampler peak and the CUDA graphs: vLLM logged 814,368 tokens at both ends for
    the dense model, 921,600 / 887,076 (hybrid) and 767,152 / 744,672 (MoE; 763,040 at 256 between): the plan must be
    within 5 % of both ends."""
    spec = RUNS[label]
    # the row of exactly this command when there is one (session 9: dense, MoE), else the newest of the label
    rows = [r for r in MEASURED["runs"] if r["label"] == label]
    run = next((r for r in rows if r["args"] == spec["args"]), max(rows, key=lambda r: r.get("session", 1)))
    defaults = [r for r in MEASURED["runs"] if r["label"] == label.replace("-plan", "-default")]
    assert defaults and all("--max-num-seqs" not in r["args"] for r in defaults)   # vLLM's default: 1024 on the H200
    plan = plan_host("h200x1", hardware_profile("h200x1"), [deployment(spec)])
    [inst] = plan["deployments"][0]["instances"]
    # what the carry needed (appended after the plan's flags, e.g. the Triton GDN kernel) is not the plan's
    planned = outside_container(inst["args"])[1:] + spec.get("carry_args", [])   # the sessions ran vLLM outside a container
    seqs = flag(planned, "--max-num-seqs")
    # parsers do not change memory: issue 34 left Llama 3.1's llama3_json out without vLLM's shipped template
    assert parsers_apart(admission_apart(planned)) == parsers_apart(admission_apart(run["args"]))
    assert int(flag(run["args"], "--max-num-seqs")) <= int(seqs) <= DEFAULT_SEQS
    mem = inst["memory"]
    # gpt-oss-20b: vLLM loaded 13.03 GiB where the checkpoint's MXFP4 layout (4 bits + an E8M0 scale per 32, what its
    # safetensors hold) gives 12.80: -1.8 %, the MoE kernel's own layout of the experts, not modelled; 1 % elsewhere
    weights_tolerance = 0.02 if profile_of(spec["model"]).quant_method == "mxfp4" else 0.01
    for measured in [run] + defaults:
        engine = measured["engine_log"]
        print(f"\n{label} (max_num_seqs {seqs}): KV tokens planner {mem['kv_cache_tokens']:,} vs vLLM {engine['kv_cache_tokens']:,} "
              f"({measured['label']}, session {measured.get('session', 1)}); weights {mem['weights_gib_per_gpu']} vs {engine['weights_gib']} GiB")
        assert abs(mem["kv_cache_tokens"] - engine["kv_cache_tokens"]) / engine["kv_cache_tokens"] <= 0.05
        assert abs(mem["max_concurrency_at_max_len"] - engine["max_concurrency"]) / engine["max_concurrency"] <= 0.05
        assert abs(mem["weights_gib_per_gpu"] - engine["weights_gib"]) / engine["weights_gib"] <= weights_tolerance
    # the admission is vLLM's default (session 14: the cap at what the KV cache holds bought no throughput), the command
    # line flag the defaults run left out
    assert int(seqs) == DEFAULT_SEQS


def model_of_run(run):
    """The memory model for a recorded run, its inputs read back from the run's own command line."""
    args = run["args"]
    m = profile_of(run["model"])
    seqs = int(flag(args, "--max-num-seqs", DEFAULT_SEQS))
    util = float(flag(args, "--gpu-memory-utilization", default_gpu_memory_utilization(H200)))
    capture = flag(args, "--max-cudagraph-capture-size")
    gpu_bytes = hardware_profile("h200x1")["accelerators"][0]["memory_mib"] * 2 ** 20 * VISIBLE_FRACTION  # as the planner
    return memory_model(m, 1, gpu_bytes, util, H200, "bfloat16", "auto", seqs, DEFAULT_BATCHED, "--enforce-eager" in args,
                        int(capture) if capture else None)


@pytest.mark.parametrize("run", [r for r in MEASURED["runs"] if "kv_cache_tokens" in r["engine_log"]],
                         ids=lambda r: f"{r['label']}-s{r.get('session', 1)}")
def test_memory_model_within_5_percent_on_every_h200_run(run):
    """Every configuration that ran (plans, hand flags, defaults, diagnostics), read back from its own
    command line: the memory model is not fitted to the planner's choices only."""
    mem = model_of_run(run)
    length = int(flag(run["args"], "--max-model-len"))
    tokens = int(mem.concurrency(length) * length)
    measured = run["engine_log"]["kv_cache_tokens"]
    print(f"\n{run['label']} (session {run.get('session', 1)}): KV tokens model {tokens:,} vs vLLM {measured:,} "
          f"({(tokens - measured) / measured:+.2%})")
    assert abs(tokens - measured) / measured <= 0.05


@pytest.mark.parametrize("run", [r for r in MEASURED["runs"] if "cudagraph_gib" in r["engine_log"]],
                         ids=lambda r: f"{r['label']}-s{r.get('session', 1)}")
def test_cudagraph_memory_within_a_fifth_of_a_gib_on_every_h200_run(run):
    """vLLM's 'Graph capturing finished ..., took X GiB': piecewise graphs up to the capture size and
    full decode graphs up to max_num_seqs (0.24 GiB at 128 + 64, 0.48 GiB at 512 + 64, 0.80 GiB at
    512 + 512 for the same MoE model): a model by capture size alone missed the second by 0.5 GiB."""
    graphs = model_of_run(run).cudagraph / 2 ** 30
    measured = run["engine_log"]["cudagraph_gib"]
    print(f"\n{run['label']} (session {run.get('session', 1)}): CUDA graphs model {graphs:.2f} GiB vs vLLM {measured} GiB")
    assert abs(graphs - measured) <= 0.2


@pytest.mark.parametrize("kind", ["dense", "moe"])
def test_the_plan_keeps_up_with_vllms_defaults_up_to_4x_the_declared_concurrency(kind):
    """Issue 17: a cap on admission must pay for itself. Session 9 ran the plan of then (max_num_seqs = what the KV
    cache holds at max_model_len; today's plan is the same but for admission, vLLM's default since session 14) and vLLM's
    defaults (1,024) in one lease, fresh caches, over 1, the declared 32 and 4x that: the capped plan's output throughput
    is at least 0.95x the defaults' at every step."""
    plan = recorded(f"{kind}-plan", 9)
    default = recorded(f"{kind}-default", 9)
    assert is_todays_plan_but_admission(plan["args"], f"{kind}-plan"), "the row is today's plan but for admission"
    steps = {s["concurrency"]: s for s in default["bench"]}
    assert sorted(steps) == [1, 32, 128] == sorted(s["concurrency"] for s in plan["bench"])
    for step in plan["bench"]:
        ratio = step["output_throughput"] / steps[step["concurrency"]]["output_throughput"]
        print(f"\n{kind} concurrency {step['concurrency']}: plan {step['output_throughput']:.0f} vs defaults "
              f"{steps[step['concurrency']]['output_throughput']:.0f} output tok/s ({ratio:.3f}x)")
        assert ratio >= 0.95


SESSION10 = ["llama", "mla", "gptoss"]


@pytest.mark.parametrize("kind", SESSION10)
def test_non_catalog_models_planned_from_their_config_against_vllms_defaults(kind):
    """Session 10 (issue 17): Llama-3.1-8B, DeepSeek-V2-Lite (MLA) and gpt-oss-20b, planned from their published
    config.json alone, against vLLM's defaults in one lease over 1, 32 and 128 (4x the declared 32). Every prompt
    completed. Three steps fell below 0.95x, and docs/benchmarks/h200.md says why: Llama at 128 (0.946x: the plan
    admits 111 sequences, what the KV cache holds at 8192 tokens, so 17 of the 128 streams queue; p99 TTFT 2.7 s
    against 0.6 s), MLA at 32 (0.901x) and gpt-oss at 32 (0.950x), where neither plan's admission binds (409 and 301
    slots for 32 streams) and the two command lines schedule alike: inside the spread of repeated runs of one
    configuration (MoE defaults at 32: 1,196 to 1,766 tok/s over sessions 4, 5 and 9). A plan 10 % behind fails."""
    plan = recorded(f"{kind}-plan", 10)
    default = recorded(f"{kind}-default", 10)
    assert is_todays_plan_but_admission(plan["args"], f"{kind}-plan"), "the row is today's plan but for admission"
    assert "--max-num-seqs" not in default["args"]
    steps = {s["concurrency"]: s for s in default["bench"]}
    assert sorted(steps) == [1, 32, 128] == sorted(s["concurrency"] for s in plan["bench"])
    seqs = int(flag(plan["args"], "--max-num-seqs"))
    for step in plan["bench"]:
        base = steps[step["concurrency"]]
        assert step["completed"] == base["completed"] == (10 if step["concurrency"] == 1 else max(100, 2 * step["concurrency"]))
        ratio = step["output_throughput"] / base["output_throughput"]
        print(f"\n{kind} concurrency {step['concurrency']} ({'binds' if step['concurrency'] > seqs else 'free'} at {seqs} slots): "
              f"plan {step['output_throughput']:.0f} vs defaults {base['output_throughput']:.0f} output tok/s ({ratio:.3f}x)")
        assert ratio >= 0.90


def plan_label(run):
    """The planner configuration a recorded row ran: its own label, or the plan it repeats (`same_as` in runs.json:
    session 14's llama-plan-long is llama-plan's command line with long requests); None for any other row."""
    spec = RUNS.get(run["label"], {})
    label = spec.get("same_as", run["label"])
    return label if label in PLAN_LABELS else None


@pytest.mark.parametrize("run", [r for r in MEASURED["runs"] if plan_label(r) and "kv_cache_tokens" in r["engine_log"]],
                         ids=lambda r: f"{r['label']}-s{r.get('session', 1)}")
def test_todays_plan_kv_cache_tokens_within_5_percent_of_every_planner_row(run):
    """Every recorded row of a planner configuration (older admissions included: KV tokens move with max_num_seqs only
    through the sampler peak and the CUDA graphs) against today's plan for the same deployment."""
    spec = RUNS[plan_label(run)]
    plan = plan_host("h200x1", hardware_profile("h200x1"), [deployment(spec)])
    [inst] = plan["deployments"][0]["instances"]
    planned, measured = inst["memory"]["kv_cache_tokens"], run["engine_log"]["kv_cache_tokens"]
    print(f"\n{run['label']} (session {run.get('session', 1)}): KV tokens plan {planned:,} vs vLLM {measured:,} "
          f"({(planned - measured) / measured:+.2%})")
    assert abs(planned - measured) / measured <= 0.05


def test_hybrid_plan_with_todays_admission_measured_over_the_sweep():
    """Session 14: the Qwen3.5-27B plan with today's admission (--max-num-seqs 111, what the KV cache holds at 8192)
    ran 1, 32 and 128 and every prompt completed; hybrid-default did not run in that lease (cut at its start-up)."""
    row = recorded("hybrid-plan", 14)
    assert is_todays_plan_but_admission(row["args"], "hybrid-plan")
    assert int(flag(row["args"], "--max-num-seqs")) == 111 <= row["engine_log"]["max_concurrency"]
    steps = {s["concurrency"]: s for s in row["bench"]}
    assert sorted(steps) == [1, 32, 128]
    assert [steps[c]["completed"] for c in (1, 32, 128)] == [10, 100, 256]
    assert all(s["preemptions"] == 0 for s in row["bench"])


def test_long_requests_the_cap_prevents_preemption_but_buys_no_throughput():
    """Issue 17's claim, measured in session 14 (docs/benchmarks/h200.md): with requests that really are long (7,000 prompt
    + 1,000 generated tokens, max_model_len 8,192) at concurrency 128, the plan's admission cap (111 sequences, what the KV
    cache holds at max_model_len) avoids preemption - 0 against 26 for vLLM's defaults, which admitted all 128 and filled
    the KV cache (99.6 % in the engine's log) - but the two delivered the same output throughput (within 5 %; both were bound by the carry's
    detokenizer, so the recompute cost could not show), and the cap cost time to first token: the 17 streams past the
    cap waited a whole generation for a slot (p99 TTFT 4.5x the defaults'; p50 1.3x)."""
    plan, default = recorded("llama-plan-long", 14), recorded("llama-default-long", 14)
    assert is_todays_plan_but_admission(plan["args"], "llama-plan") and RUNS["llama-plan-long"]["same_as"] == "llama-plan"
    assert default["args"] == RUNS["llama-default"]["args"] and "--max-num-seqs" not in default["args"]
    [p], [d] = plan["bench"], default["bench"]
    seqs = int(flag(plan["args"], "--max-num-seqs"))
    kv_tokens = plan["engine_log"]["kv_cache_tokens"]
    assert p["concurrency"] == d["concurrency"] == 128 > seqs
    for step in (p, d):   # the requests were what they claim: 256 completed, ~7,000 prompt tokens each, 1,000 generated
        assert step["completed"] == 256 and step["total_output_tokens"] == 256 * 1000
        assert 7000 <= step["total_input_tokens"] / 256 <= 7003
    long_request = step["total_input_tokens"] / 256 + 1000
    # the mechanism: the plan's admitted sequences fit the pool at their full length, the defaults' 128 do not
    assert seqs * long_request <= kv_tokens < 128 * long_request
    assert p["sampled"]["peaks"]["num_requests_running"] <= seqs
    assert d["sampled"]["peaks"]["num_requests_running"] == 128
    assert p["preemptions"] == 0 < d["preemptions"]
    ratio = p["output_throughput"] / d["output_throughput"]
    ttft_p50, ttft_p99 = p["median_ttft_ms"] / d["median_ttft_ms"], p["p99_ttft_ms"] / d["p99_ttft_ms"]
    print(f"\npreemptions plan {p['preemptions']} vs defaults {d['preemptions']:.0f}; output tok/s {p['output_throughput']:.0f} vs "
          f"{d['output_throughput']:.0f} ({ratio:.3f}x); TTFT p50 {ttft_p50:.2f}x, p99 {ttft_p99:.2f}x the defaults'")
    assert 0.95 <= ratio <= 1.05           # no throughput bought (nor lost)
    assert ttft_p50 > 1.0 and ttft_p99 > 2.0   # the queue behind the cap


# flags that only name the API's parsers: they change what /v1/chat/completions returns, not what the engine runs
PARSER_FLAGS = {"--reasoning-parser": 1, "--enable-auto-tool-choice": 0, "--tool-call-parser": 1, "--default-chat-template-kwargs": 1}


def parsers_apart(args):
    """A command line without its parser flags (PARSER_FLAGS)."""
    out, i = [], 0
    while i < len(args):
        if args[i] in PARSER_FLAGS:
            i += 1 + PARSER_FLAGS[args[i]]
        else:
            out.append(args[i])
            i += 1
    return out


def engine_args(args):
    """A command line as the engine sees it: parser flags dropped, and flags that restate vLLM 0.26's default on the H200
    (bfloat16 for these bf16 configs, --gpu-memory-utilization 0.92, --max-num-seqs 1024) dropped too."""
    out, i = [], 0
    restated = {"--dtype": "bfloat16", "--gpu-memory-utilization": str(default_gpu_memory_utilization(H200)),
                "--max-num-seqs": str(DEFAULT_SEQS)}
    while i < len(args):
        if args[i] in PARSER_FLAGS:
            i += 1 + PARSER_FLAGS[args[i]]
        elif args[i] in restated and i + 1 < len(args) and args[i + 1] == restated[args[i]]:
            i += 2
        else:
            out.append(args[i])
            i += 1
    return out


@pytest.mark.parametrize("kind", ["dense", "hybrid", "moe", "llama", "mla", "gptoss"])
def test_todays_h200_plans_run_vllms_default_engine_plus_the_parsers(kind):
    """Since session 14 the plan admits vLLM's default, so on the H200 at 8,192 tokens and 32 declared requests each plan
    is vLLM's defaults plus the parsers its family needs: a throughput difference between the two is run-to-run spread
    (session 15: mla-plan and mla-default, the same engine memory to the token, 1.00x / 1.04x / 1.14x in one lease)."""
    spec = RUNS[f"{kind}-plan"]
    [inst] = plan_host("h200x1", hardware_profile("h200x1"), [deployment(spec)])["deployments"][0]["instances"]
    # today's plan as the sessions ran it (outside a container), and what the carry adds (the Triton GDN kernel)
    plan = outside_container(inst["args"])[1:] + spec.get("carry_args", [])
    default = RUNS[f"{kind}-default"]["args"]
    assert plan == spec["args"] and engine_args(plan) == default
    # DeepSeek-V2-Lite-Chat: no tool format; Llama 3.1: llama3_json only with vLLM's shipped template (issue 34)
    assert any(a in PARSER_FLAGS for a in plan) == (kind not in ("mla", "llama"))


def test_mla_plan_of_today_keeps_up_with_vllms_defaults_in_one_lease():
    """Session 15: today's DeepSeek-V2-Lite plan (its exact command line) and vLLM's defaults, one lease, fresh caches,
    the same sweep (1, 32, 128 = 4x the declared 32): the same KV cache to the token, and the plan's output throughput at
    least 0.95x the defaults' at every step (measured 1.00x, 1.04x, 1.14x)."""
    ratios = same_engine_ratios("mla", recorded("mla-plan", 15), recorded("mla-default", 15))
    assert all(ratio >= 0.95 for ratio in ratios.values())


def same_engine_ratios(kind, plan, default):
    """A same-lease pair of today's plan and vLLM's defaults over 1, 32, 128: their exact command lines, the same KV cache
    to the token, the same requests served without preemption; returns plan / defaults output throughput per step."""
    # the exact command line, but for parser flags (issue 34: Llama's llama3_json only with vLLM's shipped template)
    assert parsers_apart(plan["args"]) == parsers_apart(RUNS[f"{kind}-plan"]["args"]) and default["args"] == RUNS[f"{kind}-default"]["args"]
    assert plan["engine_log"]["kv_cache_tokens"] == default["engine_log"]["kv_cache_tokens"]
    steps = {s["concurrency"]: s for s in default["bench"]}
    assert sorted(steps) == [1, 32, 128] == sorted(s["concurrency"] for s in plan["bench"])
    ratios = {}
    for step in plan["bench"]:
        base = steps[step["concurrency"]]
        assert step["completed"] == base["completed"] and step["preemptions"] == base["preemptions"] == 0
        ratios[step["concurrency"]] = step["output_throughput"] / base["output_throughput"]
        print(f"\n{kind} concurrency {step['concurrency']}: plan {step['output_throughput']:.0f} vs defaults "
              f"{base['output_throughput']:.0f} output tok/s ({ratios[step['concurrency']]:.3f}x)")
    return ratios


def test_sliding_window_layers_keep_two_batches_in_flight_on_the_h200():
    """Session 15 (memory only): gpt-oss-20b planned at 32,768 tokens. Its 12 sliding layers keep the 128-token window
    plus the tokens in flight a request; vLLM 0.26 counts 2 x max_num_batched_tokens in flight (asynchronous scheduling,
    config/vllm.py max_in_flight_tokens). Today's plan is within 5 % of vLLM's log; counting one batch, as the planner
    did before, it would be about 20 % over."""
    row = recorded("gptoss-plan-32k", 15)
    spec = RUNS["gptoss-plan-32k"]
    assert row["args"] == spec["args"] and int(flag(row["args"], "--max-model-len")) == 32768
    [inst] = plan_host("h200x1", hardware_profile("h200x1"), [deployment(spec)])["deployments"][0]["instances"]
    engine = row["engine_log"]
    for key, measured in (("max_concurrency_at_max_len", engine["max_concurrency"]), ("kv_cache_tokens", engine["kv_cache_tokens"])):
        print(f"\ngpt-oss at 32,768: {key} plan {inst['memory'][key]:,} vs vLLM {measured:,}")
        assert abs(inst["memory"][key] - measured) / measured <= 0.05
    mem = model_of_run(row)
    one_batch = dataclasses.replace(mem, local_tokens=mem.local_tokens - DEFAULT_BATCHED)
    assert mem.local_tokens == 128 - 1 + 2 * DEFAULT_BATCHED
    assert one_batch.concurrency(32768) / engine["max_concurrency"] > 1.15


@pytest.mark.parametrize("kind", ["dense", "moe", "llama"])
def test_todays_plans_equal_vllms_defaults_at_1_and_32(kind):
    """Session 16 (issue 17's re-measure after the admission change): today's Qwen3-8B, Qwen3-30B-A3B and Llama-3.1-8B
    plans (their exact command lines) and vLLM's defaults, one lease, fresh caches, 1 / 32 / 128 (4x the declared 32).
    The same KV cache to the token, and at 1 and 32 the plan's output throughput at least 0.95x the defaults'."""
    ratios = same_engine_ratios(kind, recorded(f"{kind}-plan", 16), recorded(f"{kind}-default", 16))
    assert ratios[1] >= 0.95 and ratios[32] >= 0.95


def test_the_concurrency_128_step_is_run_to_run_spread_not_the_plan():
    """Session 16 at 128: plan / defaults 1.15x (dense), 0.82x (MoE), 0.77x (Llama) with identical engines. The Llama pair
    repeated in a second lease measured 0.975x, and llama-default's own command line moved between the two leases by
    more than its plan / defaults gap of the first: with the same engine that step moves by 15-35 % between runs, so the
    0.95x bar is checked at 1 and 32, and at 128 on the repeat."""
    def at128(row):
        return next(s for s in row["bench"] if s["concurrency"] == 128)
    first = at128(recorded("llama-plan", 16))["output_throughput"] / at128(recorded("llama-default", 16))["output_throughput"]
    second = at128(recorded("llama-plan", 16, 2))["output_throughput"] / at128(recorded("llama-default", 16, 2))["output_throughput"]
    defaults = [at128(recorded("llama-default", 16, lease))["output_throughput"] for lease in (1, 2)]
    spread = max(defaults) / min(defaults)
    print(f"\nllama at 128: plan / defaults {first:.3f}x, then {second:.3f}x; defaults alone {defaults[0]:.0f} and {defaults[1]:.0f}")
    assert second >= 0.95 and spread > 1 / first
