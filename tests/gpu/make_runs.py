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
BENCH = {"input": 512, "output": 128, "prompts": 100, "concurrency": [1, 32], "timeout": 240}
MODELS = [("dense", "Qwen/Qwen3-8B"), ("hybrid", "Qwen/Qwen3.5-27B"), ("moe", "Qwen/Qwen3-30B-A3B")]


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
        base = {"model": model, "model_dir": model.rsplit("/", maxsplit=1)[-1], "served": served, "port": inst["port"], "bench": BENCH}
        common = ["--served-model-name", served, "--host", "127.0.0.1", "--port", str(inst["port"]), "--max-model-len", str(MAX_LEN)]
        runs.append({**base, "label": f"{kind}-plan", "config": "planner", "args": inst["args"][1:], "env": {},
                     "deployment": dep, "planned": inst["memory"], "startup_budget": 420})
        runs.append({**base, "label": f"{kind}-hand", "config": "hand flags (reports 001/002: eager, 5 seqs, 0.85)",
                     "args": common + ["--enforce-eager", "--max-num-seqs", "5", "--gpu-memory-utilization", "0.85"], "env": {},
                     "startup_budget": 300})
        runs.append({**base, "label": f"{kind}-default", "config": "vLLM defaults", "args": common, "env": {}, "startup_budget": 420})
    out = ROOT / "tests" / "gpu" / "runs.json"
    out.write_text(json.dumps({"engine": ENGINE, "gpu": "h200x1", "runs": runs}, indent=1) + "\n")
    print(f"wrote {out}: {len(runs)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
