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
import vocab_tokenizer  # noqa: E402  pylint: disable=wrong-import-position

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


def test_every_measured_step_draws_prompts_no_other_step_drew():
    """Warm-up seed 1, each step its own seed (device_run.step_seed): one seed for every step put the step at 32's prompts
    first in the step at 128, out of the prefix cache (session 32)."""
    proc = subprocess.run([sys.executable, str(GPU / "device_run.py"), "--carry", "/tmp/carry", "--runs", str(RUNS_FILE), "--dry-run",
                           "--only", "lever-dense-default"], capture_output=True, text=True, timeout=120, check=True)
    seeds = [line.split("--seed ")[1].split()[0] for line in proc.stdout.splitlines() if line.startswith("bench ")]
    assert len(seeds) == 1 + 3 and seeds[0] == "1" and len(set(seeds)) == 4, proc.stdout


def test_the_carried_qwen3_tokenizer_decodes_every_row_of_the_embedding():
    """tests/gpu/vocab_tokenizer.py: every id below Qwen3's vocab_size (151,936) is a token exactly once, Qwen3's added tokens
    sit at Qwen3's ids with its special flags, the ordinary vocabulary is Qwen3's size (what the benchmark draws prompts
    from), and every ordinary token longer than one character is the result of one merge of two tokens it has."""
    tok = vocab_tokenizer.tokenizer_json()
    vocab, merges = tok["model"]["vocab"], tok["model"]["merges"]
    ids = sorted(vocab.values()) + [a["id"] for a in tok["added_tokens"]]
    assert ids == list(range(151936)) and len(vocab) == 151643
    added = {a["id"]: (a["content"], a["special"]) for a in tok["added_tokens"]}
    assert added[151643] == ("<|endoftext|>", True) and added[151645] == ("<|im_end|>", True)
    assert added[151657] == ("<tool_call>", False) and added[151667] == ("<think>", False) and added[151668] == ("</think>", False)
    assert all(special for content, special in (added[i] for i in range(151669, 151936)))
    made = {left + right for left, right in merges}
    assert all(left in vocab and right in vocab for left, right in merges) and len(made) == len(merges)
    assert made == {token for token in vocab if len(token) > 1}
    assert all(len(token.encode()) < 16 for token in vocab), "every token decodes to a few characters"


def test_the_carry_gives_the_qwen3_models_that_tokenizer(tmp_path, monkeypatch):
    written = []
    monkeypatch.setattr(vocab_tokenizer, "write", written.append)
    monkeypatch.setattr(prepare_carry, "MODELS", ["Qwen/Qwen3-8B", "Qwen/Qwen3-30B-A3B"])
    monkeypatch.setattr(prepare_carry, "FIXTURE_MODELS", {})
    monkeypatch.setattr(prepare_carry, "ROOT", tmp_path)
    (tmp_path / ".cache" / "gpu-tokenizer").mkdir(parents=True)
    (tmp_path / ".cache" / "gpu-tokenizer" / "tokenizer.json").write_text("{}")
    monkeypatch.syspath_prepend(str(ROOT / ".cache" / "collections"))
    prepare_carry.make_models(tmp_path / "models")
    assert [w.name for w in written] == ["Qwen3-8B", "Qwen3-30B-A3B"]


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
    rows = {r["label"]: r for r in json.loads((FIXTURES / "h100-levers-0.26.0.json").read_text())["runs"] if r["session"] == 31}
    out = {label: [s["output_throughput"] for s in rows[label]["bench"]] for label in
           ("lever-dense-default", "lever-dense-default-r2", "lever-dense-throughput")}
    assert all(len(v) == 3 for v in out.values())
    assert all(s["preemptions"] == 0 for label in out for s in rows[label]["bench"])
    plan, defaults = out["lever-dense-throughput"], (out["lever-dense-default"], out["lever-dense-default-r2"])
    ratio_32 = sorted(plan[1] / d[1] for d in defaults)
    assert [round(r, 2) for r in ratio_32] == [1.21, 1.26]
    assert [round(plan[0] / d[0], 2) for d in defaults] == [1.46, 1.45]


def test_at_128_the_old_bench_measured_its_frontend():
    """Session 32 (docs/benchmarks/h200.md): the dense defaults with a tokenizer that knows every id the dummy weights emit
    gave 1.16-1.45x session 31's output at 128, with far fewer prompt tokens from the prefix cache; at 1 the two benches agree."""
    runs = json.loads((FIXTURES / "h100-levers-0.26.0.json").read_text())["runs"]
    old = [r for r in runs if r["label"] in ("lever-dense-default", "lever-dense-default-r2") and r["session"] == 31]
    new = next(r for r in runs if r["label"] == "lever-dense-default" and r["session"] == 32)
    assert new["client"] == "in-process" and "vocab_tokenizer" in new["bench_method"]["tokenizer"]

    def cached(step):
        return step["metrics"].get("vllm:prefix_cache_hits_total", 0) / step["metrics"]["vllm:prompt_tokens_total"]

    assert [round(cached(s), 2) for s in new["bench"]] == [0.0, 0.11, 0.38]
    assert all([round(cached(s), 2) for s in r["bench"]] == [0.26, 0.56, 0.78] for r in old)
    at_128 = sorted(new["bench"][2]["output_throughput"] / r["bench"][2]["output_throughput"] for r in old)
    assert [round(x, 2) for x in at_128] == [1.16, 1.45]
    assert all(abs(new["bench"][0]["output_throughput"] / r["bench"][0]["output_throughput"] - 1) < 0.02 for r in old)
