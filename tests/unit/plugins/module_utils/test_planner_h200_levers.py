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
    # less memory beside the same weights: fewer KV tokens than on the H200, and the MoE latency plan becomes KV-bound
    assert runs["lever-dense-throughput"]["planned"]["kv_cache_tokens"] < RUNS["lever-dense-throughput"]["planned"]["kv_cache_tokens"]
    assert flag(runs["lever-moe-latency"]["args"], "--kv-cache-dtype") == "fp8" and "--quantization" not in runs["lever-moe-latency"]["args"]


def test_each_model_has_its_plans_and_the_defaults_twice():
    assert sorted(RUNS) == sorted(["lever-dense-throughput", "lever-dense-latency", "lever-dense-default", "lever-dense-default-r2",
                                   "lever-moe-throughput", "lever-moe-default", "lever-moe-default-r2"])
    # the MoE latency plan pulls no lever (FP8 weights gave it 0.98x at one request): vLLM's defaults plus parsers, not run
    assert [r["label"] for r in CONTENT["not_run"]] == ["lever-moe-latency"]
    assert RUNS["lever-dense-default"]["args"] == RUNS["lever-dense-default-r2"]["args"]
    assert "--quantization" not in RUNS["lever-dense-default"]["args"]
    # the dense throughput plan pulls both levers, the latency plan the weights only; the MoE model's KV is below its weights
    assert flag(RUNS["lever-dense-throughput"]["args"], "--kv-cache-dtype") == "fp8"
    assert "--kv-cache-dtype" not in RUNS["lever-dense-latency"]["args"]
    for label in ("lever-dense-throughput", "lever-dense-latency", "lever-moe-throughput"):
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


MEASURED = json.loads((ROOT / "tests" / "fixtures" / "gpu" / "h200-levers-0.26.0.json").read_text())


@pytest.mark.parametrize("run", MEASURED["runs"], ids=lambda r: r["label"])
def test_a_lever_run_is_todays_plan_and_its_fp8_memory_is_vllms(run):
    """A recorded lever run ran today's command line (else re-run it: tests/gpu/README.md), and the memory model of weights
    quantized at load (_plan.levers._fp8_profile) and of the fp8 KV cache holds vLLM's own numbers: KV tokens within 5 %,
    weights within 1 % (session 28: 1,708,576 planned vs 1,722,048 KV tokens, 8.79 vs 8.83 GiB)."""
    assert run["args"] == RUNS[run["label"]]["args"], "the plan changed since its H200 run: run it again"
    # today's planner numbers (runs-levers.json is held to the planner above), against what vLLM printed on the H200
    planned, engine = RUNS[run["label"]]["planned"], run["engine_log"]
    assert abs(planned["kv_cache_tokens"] - engine["kv_cache_tokens"]) / engine["kv_cache_tokens"] <= 0.05
    assert abs(planned["weights_gib_per_gpu"] - engine["weights_gib"]) / engine["weights_gib"] <= 0.01
    assert [step["concurrency"] for step in run["bench"]] == [1, 32, 128]
