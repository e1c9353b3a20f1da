"""Write tests/gpu/runs.json: for each architecture, three vLLM configurations on one H200 (the
planner's plan for a declared h200x1 host, the field reports' typical hand flags, vLLM's defaults),
with the planner's own numbers to compare against.

    .venv/bin/python tests/gpu/make_runs.py
"""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Optional

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / ".cache" / "collections"))
sys.path.insert(0, str(ROOT / "tests"))

from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile  # noqa: E402
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host  # noqa: E402
from llmfleet_testing import outside_container  # noqa: E402  pylint: disable=wrong-import-position

ENGINE = "0.26.0"
MAX_LEN = 8192
# 1, the declared concurrency (32) and 4x it (issue 17: a cap on admission must pay for itself past the declared load)
BENCH = {"input": 512, "output": 128, "prompts": 100, "concurrency": [1, 32, 128], "timeout": 240}
# Five sequences in eager mode: the sweep takes minutes, so the warm-up is 10 prompts, not the sweep again.
HAND_BENCH = {**BENCH, "warmup": 10, "timeout": 420}
# The fixture models' rows (four configurations and a memory-only one in one 30-minute lease): the warm-up is one run of
# 256 prompts at concurrency 128 (seed 1) instead of the whole sweep replayed, about 30 s instead of 100 s.
FIXTURE_BENCH = {**BENCH, "warmup": 256}
# Session 14, what the admission cap buys (issue 17): requests that really are long, 7,000 prompt + 1,000 generated tokens
# (8,000 of max_model_len 8,192), 256 at concurrency 128, above the 111 sequences the Llama plan admits. The prompts come
# from vLLM's prefix_repetition dataset without a shared prefix (every token drawn at random): the random dataset repeats
# a quarter of 256 prompts exactly with the carried 465-token tokenizer, and repeated prompts would share their KV blocks.
# One short unrecorded warm-up at the same lengths (32 at 32, seed 1); /metrics sampled every 2 s during the step.
LONG_BENCH = {"dataset": "prefix_repetition", "input": 7000, "output": 1000, "prompts": 256, "concurrency": [128], "timeout": 330,
              "warmup": {"prompts": 32, "concurrency": 32}, "poll_metrics": 2}
LONG_RUNS = ["llama"]
MODELS = [("dense", "Qwen/Qwen3-8B"), ("hybrid", "Qwen/Qwen3.5-27B"), ("moe", "Qwen/Qwen3-30B-A3B")]
# Architectures outside the Qwen catalog (issue 17), planned from their published config.json alone (a fixture,
# source named in it) as an inventory's `config:` would give it: Llama 3.1 (GQA, llama3 rope), DeepSeek-V2-Lite (MLA
# without q_lora_rank, MoE with a dense first layer), gpt-oss (sliding window + sinks, MXFP4 experts). Plan and
# vLLM's defaults only: the hand flags were measured on the Qwen rows.
FIXTURE_MODELS = [("llama", "meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b-instruct.json", {"tools": True}),
                  ("mla", "deepseek-ai/DeepSeek-V2-Lite-Chat", "deepseek-v2-lite-chat.json", {"tools": False}),
                  ("gptoss", "openai/gpt-oss-20b", "gpt-oss-20b.json", {"tools": True})]
FIXTURES = ROOT / "tests" / "fixtures" / "models"
# The carry leaves FlashInfer out (its kernels JIT-compile with nvcc, or come as a >1 GB cache), and on
# Hopper vLLM 0.26 picks FlashInfer's Gated DeltaNet prefill for Qwen3.5 unless told otherwise: every
# hybrid configuration gets the Triton GDN kernel instead, the same for all three, so they compare.
# (The official images ship FlashInfer; the planner does not emit this.)
CARRY_ARGS = {"hybrid": ["--additional-config", '{"gdn_prefill_backend": "triton"}']}


def deployment(model, served: str, tools: bool = True, max_len: int = MAX_LEN, concurrency: int = 32,
               overrides: Optional[dict] = None) -> dict:
    """The deployment every run is planned from (make_multi_runs.py: the same at another concurrency, with overrides)."""
    dep = {"name": served, "model": model, "workload": {"max_model_len": max_len, "concurrency": concurrency, "goal": "throughput",
                                                        "thinking": False, "tools": tools},
           "engine": {"version": ENGINE}}
    if overrides:
        dep["overrides"] = dict(overrides)
    return dep


def plan_one(model, served: str, tools: bool = True, max_len: int = MAX_LEN) -> tuple:
    dep = deployment(model, served, tools, max_len)
    plan = plan_host("h200x1", hardware_profile("h200x1"), [dep])
    assert not plan["errors"], plan["errors"]
    [inst] = plan["deployments"][0]["instances"]
    return dep, dict(inst, args=outside_container(inst["args"]))   # the device runs vLLM itself, not in a container


def fixture_runs() -> list:
    runs = []
    for kind, model_id, fixture, workload in FIXTURE_MODELS:
        served = model_id.rsplit("/", maxsplit=1)[-1].lower()
        config = json.loads((FIXTURES / fixture).read_text())["config"]
        dep, inst = plan_one({"id": model_id, "config": config}, served, workload["tools"])
        dep = {**dep, "model": {"id": model_id, "config": f"tests/fixtures/models/{fixture}"}}   # the file, not its text
        base = {"model": model_id, "model_dir": model_id.rsplit("/", maxsplit=1)[-1], "served": served, "port": inst["port"],
                "bench": FIXTURE_BENCH, "carry_args": []}
        common = ["--served-model-name", served, "--host", "127.0.0.1", "--port", str(inst["port"]), "--max-model-len", str(MAX_LEN)]
        runs.append({**base, "label": f"{kind}-plan", "config": "planner", "args": inst["args"][1:], "env": {}, "deployment": dep,
                     "planned": inst["memory"], "startup_budget": 420})
        runs.append({**base, "label": f"{kind}-default", "config": "vLLM defaults", "args": common, "env": {}, "startup_budget": 420})
    return runs


# Memory only (device_run.py --no-bench): gpt-oss-20b planned at 32,768 tokens, where its sliding-window layers keep the
# window plus the tokens in flight per request - 2 x max_num_batched_tokens with vLLM 0.26's asynchronous scheduling, one
# before (_planner.in_flight_tokens) - while at 8,192 the length caps both. vLLM's "Maximum concurrency" tells which.
WINDOW_RUNS = [("gptoss", "openai/gpt-oss-20b", "gpt-oss-20b.json", 32768)]


def window_runs() -> list:
    runs = []
    for kind, model_id, fixture, max_len in WINDOW_RUNS:
        served = model_id.rsplit("/", maxsplit=1)[-1].lower()
        config = json.loads((FIXTURES / fixture).read_text())["config"]
        dep, inst = plan_one({"id": model_id, "config": config}, served, True, max_len)
        dep = {**dep, "model": {"id": model_id, "config": f"tests/fixtures/models/{fixture}"}}
        runs.append({"model": model_id, "model_dir": model_id.rsplit("/", maxsplit=1)[-1], "served": served, "port": inst["port"],
                     "bench": FIXTURE_BENCH, "carry_args": [], "label": f"{kind}-plan-{max_len // 1024}k",
                     "config": f"planner at max_model_len {max_len} (memory only)", "args": inst["args"][1:], "env": {},
                     "deployment": dep, "planned": inst["memory"], "startup_budget": 420, "memory_only": True})
    return runs


def long_runs(runs: list) -> list:
    """The plan and the defaults of LONG_RUNS again, the same command lines (`same_as`), with LONG_BENCH."""
    by_label = {r["label"]: r for r in runs}
    extra = []
    for kind in LONG_RUNS:
        for which, config in (("plan", "planner, long requests (7,000 + 1,000 tokens at concurrency 128)"),
                              ("default", "vLLM defaults, long requests (7,000 + 1,000 tokens at concurrency 128)")):
            run = by_label[f"{kind}-{which}"]
            extra.append({**run, "label": f"{kind}-{which}-long", "config": config, "same_as": run["label"], "bench": LONG_BENCH})
    return extra


def main() -> int:
    runs = []
    for kind, model in MODELS:
        served = model.rsplit("/", maxsplit=1)[-1].lower()
        dep, inst = plan_one(model, served)
        base = {"model": model, "model_dir": model.rsplit("/", maxsplit=1)[-1], "served": served, "port": inst["port"], "bench": BENCH,
                "carry_args": CARRY_ARGS.get(kind, [])}
        extra = CARRY_ARGS.get(kind, [])
        common = ["--served-model-name", served, "--host", "127.0.0.1", "--port", str(inst["port"]), "--max-model-len", str(MAX_LEN)] + extra
        runs.append({**base, "label": f"{kind}-plan", "config": "planner", "args": inst["args"][1:] + extra, "env": {},
                     "deployment": dep, "planned": inst["memory"], "startup_budget": 420})
        runs.append({**base, "label": f"{kind}-hand", "config": "hand flags (reports 001/002: eager, 5 seqs, 0.85)",
                     "args": common + ["--enforce-eager", "--max-num-seqs", "5", "--gpu-memory-utilization", "0.85"], "env": {},
                     "startup_budget": 300, "bench": HAND_BENCH})
        if kind == "moe":  # the plan until session 4: max_num_seqs 64 and no capture size (vLLM then captures 2 x 64 tokens)
            old = list(inst["args"][1:])
            if "--max-cudagraph-capture-size" in old:
                at = old.index("--max-cudagraph-capture-size")
                del old[at:at + 2]
            old[old.index("--max-num-seqs") + 1] = "64"
            runs.append({**base, "label": "moe-plan-capture128", "config": "planner until session 4 (max_num_seqs 64: vLLM captures "
                         "CUDA graphs up to 128 tokens)", "args": old + extra, "env": {}, "startup_budget": 420})
        if kind == "moe":  # diagnostic: vLLM's defaults with the plan's sequence cap, the one flag changed
            runs.append({**base, "label": "moe-default-seqs64", "config": "vLLM defaults + --max-num-seqs 64 (diagnostic)",
                         "args": common + ["--max-num-seqs", "64"], "env": {}, "startup_budget": 420})
        runs.append({**base, "label": f"{kind}-default", "config": "vLLM defaults", "args": common, "env": {}, "startup_budget": 420})
    runs += fixture_runs()
    runs += long_runs(runs)   # appended: the runs above keep their places and contents
    runs += window_runs()
    out = ROOT / "tests" / "gpu" / "runs.json"
    out.write_text(json.dumps({"engine": ENGINE, "gpu": "h200x1", "runs": runs}, indent=1) + "\n")
    print(f"wrote {out}: {len(runs)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
