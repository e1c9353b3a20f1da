"""Write tests/gpu/runs.json: for each architecture, three vLLM configurations on one H200 (the
planner's plan for a declared h200x1 host, the field reports' typical hand flags, vLLM's defaults),
with the planner's own numbers to compare against.

    .venv/bin/python tests/gpu/make_runs.py
"""

from __future__ import annotations

import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / ".cache" / "collections"))

from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile  # noqa: E402
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host  # noqa: E402

ENGINE = "0.26.0"
MAX_LEN = 8192
# 1, the declared concurrency (32) and 4x it (issue 17: a cap on admission must pay for itself past the declared load)
BENCH = {"input": 512, "output": 128, "prompts": 100, "concurrency": [1, 32, 128], "timeout": 240}
# Five sequences in eager mode: the sweep takes minutes, so the warm-up is 10 prompts, not the sweep again.
HAND_BENCH = {**BENCH, "warmup": 10, "timeout": 420}
MODELS = [("dense", "Qwen/Qwen3-8B"), ("hybrid", "Qwen/Qwen3.5-27B"), ("moe", "Qwen/Qwen3-30B-A3B")]
# The carry leaves FlashInfer out (its kernels JIT-compile with nvcc, or come as a >1 GB cache), and on
# Hopper vLLM 0.26 picks FlashInfer's Gated DeltaNet prefill for Qwen3.5 unless told otherwise: every
# hybrid configuration gets the Triton GDN kernel instead, the same for all three, so they compare.
# (The official images ship FlashInfer; the planner does not emit this.)
CARRY_ARGS = {"hybrid": ["--additional-config", '{"gdn_prefill_backend": "triton"}']}


def main() -> int:
    runs = []
    for kind, model in MODELS:
        served = model.rsplit("/", maxsplit=1)[-1].lower()
        dep = {"name": served, "model": model, "workload": {"max_model_len": MAX_LEN, "concurrency": 32, "goal": "throughput",
                                                            "thinking": False, "tools": True},
               "engine": {"version": ENGINE}}
        plan = plan_host("h200x1", hardware_profile("h200x1"), [dep])
        assert not plan["errors"], plan["errors"]
        [inst] = plan["deployments"][0]["instances"]
        base = {"model": model, "model_dir": model.rsplit("/", maxsplit=1)[-1], "served": served, "port": inst["port"], "bench": BENCH,
                "carry_args": CARRY_ARGS.get(kind, [])}
        extra = CARRY_ARGS.get(kind, [])
        common = ["--served-model-name", served, "--host", "127.0.0.1", "--port", str(inst["port"]), "--max-model-len", str(MAX_LEN)] + extra
        runs.append({**base, "label": f"{kind}-plan", "config": "planner", "args": inst["args"][1:] + extra, "env": {},
                     "deployment": dep, "planned": inst["memory"], "startup_budget": 420})
        runs.append({**base, "label": f"{kind}-hand", "config": "hand flags (reports 001/002: eager, 5 seqs, 0.85)",
                     "args": common + ["--enforce-eager", "--max-num-seqs", "5", "--gpu-memory-utilization", "0.85"], "env": {},
                     "startup_budget": 300, "bench": HAND_BENCH})
        if kind == "moe":  # the plan until session 4: the same without the capture size (vLLM then captures 2 x 64 tokens)
            flag = inst["args"].index("--max-cudagraph-capture-size")
            runs.append({**base, "label": "moe-plan-capture128", "config": "planner until session 4 (max_num_seqs 64: vLLM captures "
                         "CUDA graphs up to 128 tokens)", "args": inst["args"][1:flag] + inst["args"][flag + 2:] + extra, "env": {},
                         "startup_budget": 420})
        if kind == "moe":  # diagnostic: vLLM's defaults with the plan's sequence cap, the one flag changed
            runs.append({**base, "label": "moe-default-seqs64", "config": "vLLM defaults + --max-num-seqs 64 (diagnostic)",
                         "args": common + ["--max-num-seqs", "64"], "env": {}, "startup_budget": 420})
        runs.append({**base, "label": f"{kind}-default", "config": "vLLM defaults", "args": common, "env": {}, "startup_budget": 420})
    out = ROOT / "tests" / "gpu" / "runs.json"
    out.write_text(json.dumps({"engine": ENGINE, "gpu": "h200x1", "runs": runs}, indent=1) + "\n")
    print(f"wrote {out}: {len(runs)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
