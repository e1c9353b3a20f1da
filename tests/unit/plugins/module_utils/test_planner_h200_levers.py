"""Issue 39: the lever runs for the lent H200 (tests/gpu/runs-levers.json, made by tests/gpu/make_lever_runs.py) are
today's planner output, carry what they need, and print the command lines a lease runs. No GPU needed; the measurement
itself is docs/benchmarks/h200.md's ("Speed levers")."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[4]
GPU = ROOT / "tests" / "gpu"
sys.path.insert(0, str(GPU))

import make_lever_runs  # noqa: E402  pylint: disable=wrong-import-position
import prepare_carry  # noqa: E402  pylint: disable=wrong-import-position

RUNS_FILE = GPU / "runs-levers.json"
CONTENT = json.loads(RUNS_FILE.read_text())
RUNS = {r["label"]: r for r in CONTENT["runs"]}


def flag(args, name):
    return args[args.index(name) + 1] if name in args else None


def test_runs_levers_is_todays_planner_output():
    """Regenerated in memory, the file must be what is committed: a lever rule that moves a flag or a memory number shows
    here (rerun tests/gpu/make_lever_runs.py)."""
    assert json.loads(json.dumps(make_lever_runs.build())) == CONTENT


def test_runs_levers_h100_is_todays_planner_output_for_one_h100():
    """The same runs for a lease that lends an H100 (80 GB) instead: the plans read that GPU's model and memory."""
    h100 = json.loads((GPU / "runs-levers-h100.json").read_text())
    assert json.loads(json.dumps(make_lever_runs.build("h100"))) == h100 and h100["gpu"] == "h100x1"
    assert [a["model"] for a in make_lever_runs.hardware("h100")["accelerators"]] == ["NVIDIA H100 80GB HBM3"]
    runs = {r["label"]: r for r in h100["runs"]}
    # less memory beside the same weights: fewer KV tokens than on the H200, the same command lines
    assert sorted(runs) == sorted(RUNS)
    assert runs["lever-dense-throughput"]["planned"]["kv_cache_tokens"] < RUNS["lever-dense-throughput"]["planned"]["kv_cache_tokens"]
    assert all(runs[label]["args"] == RUNS[label]["args"] for label in RUNS)


def test_each_model_has_its_plans_and_the_defaults_twice():
    assert sorted(RUNS) == sorted(["lever-dense-throughput", "lever-dense-latency", "lever-dense-default", "lever-dense-default-r2",
                                   "lever-moe-plan", "lever-moe-default", "lever-moe-default-r2"])
    # the MoE plans of both goals pull the FP8 weights alone (32 requests read 87 % of the experts a step; its KV is below its
    # weights): one command line, one row
    assert not CONTENT["not_run"] and RUNS["lever-moe-plan"]["goals"] == ["throughput", "latency"]
    assert RUNS["lever-dense-default"]["args"] == RUNS["lever-dense-default-r2"]["args"]
    assert "--quantization" not in RUNS["lever-dense-default"]["args"]
    # the dense throughput plan pulls both levers, the latency plan the weights only; the MoE model's KV is below its weights
    assert flag(RUNS["lever-dense-throughput"]["args"], "--kv-cache-dtype") == "fp8"
    assert "--kv-cache-dtype" not in RUNS["lever-dense-latency"]["args"]
    assert "--kv-cache-dtype" not in RUNS["lever-moe-plan"]["args"]
    for label in ("lever-dense-throughput", "lever-dense-latency", "lever-moe-plan"):
        assert flag(RUNS[label]["args"], "--quantization") == "fp8", label
        assert RUNS[label]["deployment"]["workload"]["quality"] == "fp8"
        assert RUNS[label]["port"] == RUNS[label.rsplit("-", 1)[0] + "-default"]["port"]


def test_the_carry_holds_every_model():
    assert {r["model"] for r in CONTENT["runs"]} <= set(prepare_carry.MODELS)


def test_dry_run_prints_the_served_command_lines():
    proc = subprocess.run([sys.executable, str(GPU / "device_run.py"), "--carry", "/tmp/carry", "--runs", str(RUNS_FILE), "--dry-run",
                           "--only", "lever-dense-throughput,lever-dense-default"], capture_output=True, text=True, timeout=120,
                          check=True)
    serve = [line for line in proc.stdout.splitlines() if line.startswith("serve ")]
    assert len(serve) == 2, proc.stdout
    assert "--quantization fp8 --kv-cache-dtype fp8" in serve[0] and "--load-format dummy" in serve[0]
    assert "--quantization" not in serve[1]


FIXTURES = ROOT / "tests" / "fixtures" / "gpu"
H100_RUNS = {r["label"]: r for r in json.loads((GPU / "runs-levers-h100.json").read_text())["runs"]}
MEASURED = [(run, RUNS) for run in json.loads((FIXTURES / "h200-levers-0.26.0.json").read_text())["runs"]] + \
    [(run, H100_RUNS) for run in json.loads((FIXTURES / "h100-levers-0.26.0.json").read_text())["runs"]]


@pytest.mark.parametrize("run, plans", MEASURED, ids=lambda x: x["label"] + "-" + str(x["session"]) if "session" in x else "")
def test_a_lever_run_is_todays_plan_and_its_fp8_memory_is_vllms(run, plans):
    """A recorded lever run ran today's command line for its GPU (else re-run it: tests/gpu/README.md), and the memory model
    of weights quantized at load (_plan.levers._fp8_profile) and of the fp8 KV cache holds vLLM's own numbers: KV tokens within
    5 %, weights within 1 % (session 28 on the H200: 1,708,576 planned vs 1,722,048 KV tokens, 8.79 vs 8.83 GiB; session 31 on
    the H100: 898,048 vs 909,808, and the MoE 457,056 vs 439,344, 29.03 vs 29.06 GiB)."""
    assert run["args"] == plans[run["label"]]["args"], "the plan changed since its GPU run: run it again"
    planned, engine = plans[run["label"]].get("planned"), run["engine_log"]
    if planned:
        # today's planner numbers (the runs files are held to the planner above), against what vLLM printed on the GPU
        assert abs(planned["kv_cache_tokens"] - engine["kv_cache_tokens"]) / engine["kv_cache_tokens"] <= 0.05
        assert abs(planned["weights_gib_per_gpu"] - engine["weights_gib"]) / engine["weights_gib"] <= 0.01
    steps = [step["concurrency"] for step in run.get("bench") or []]
    # a row cut by the end of its call says so, and keeps the steps that finished, in the sweep's order
    assert steps == [1, 32, 128] or (run.get("cut") and steps == [1, 32, 128][:len(steps)])


def test_the_h100_lease_compares_plan_and_defaults_side_by_side():
    """Session 31 (one H100 lease): the dense defaults twice and the throughput plan beside them, every bench step finished
    with no preemption; the ratios of docs/benchmarks/h200.md are these rows'."""
    rows = {r["label"]: r for r in json.loads((FIXTURES / "h100-levers-0.26.0.json").read_text())["runs"]}
    out = {label: [s["output_throughput"] for s in rows[label]["bench"]] for label in
           ("lever-dense-default", "lever-dense-default-r2", "lever-dense-throughput")}
    assert all(len(v) == 3 for v in out.values())
    assert all(s["preemptions"] == 0 for label in out for s in rows[label]["bench"])
    plan, defaults = out["lever-dense-throughput"], (out["lever-dense-default"], out["lever-dense-default-r2"])
    ratio_32 = sorted(plan[1] / d[1] for d in defaults)
    assert [round(r, 2) for r in ratio_32] == [1.21, 1.26]
    assert [round(plan[0] / d[0], 2) for d in defaults] == [1.46, 1.45]
