"""Write tests/gpu/runs-levers.json (issue 39): the planner's speed levers against vLLM's defaults in one lease, on a dense
(Qwen3-8B) and a MoE (Qwen3-30B-A3B) model, for a declared `h200x1` host at the declared concurrency 32, with
`workload.quality: fp8` (the inventory permits the FP8 trade) and both goals. Each model's defaults run twice (the `-r2`
row): the spread of one configuration that every ratio is read against. A goal whose plan is the other goal's command
line is not run twice: its rows name the run they share (`same_as`). runs.json is not touched.

    .venv/bin/python tests/gpu/make_lever_runs.py            # runs-levers.json, the declared h200x1 host
    .venv/bin/python tests/gpu/make_lever_runs.py --gpu h100  # runs-levers-h100.json: one H100 80GB HBM3, for a lease
                                                              # that lends an H100 when no H200 comes

The H100 host is h200x1 with its one GPU replaced by the H100 80GB HBM3 of the built-in h100_sxm_8x profile (the same
CPUs and memory as the lent machine's; the planner reads the GPU's model and memory).

The sweep is 1, 32 and 128 (4x the declared concurrency), 512 prompt + 128 output tokens, warmed up by one run of 256
prompts at 128 (make_runs.FIXTURE_BENCH): about 200-250 s of device time a configuration.
"""

from __future__ import annotations

import argparse
import copy
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from make_runs import FIXTURE_BENCH, MAX_LEN, ROOT, deployment, outside_container  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile  # noqa: E402
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host  # noqa: E402

MODELS = [("dense", "Qwen/Qwen3-8B"), ("moe", "Qwen/Qwen3-30B-A3B")]
GOALS = ("throughput", "latency")
OUTS = {"h200": ROOT / "tests" / "gpu" / "runs-levers.json", "h100": ROOT / "tests" / "gpu" / "runs-levers-h100.json"}
HOSTS = {"h200": "h200x1", "h100": "h100x1"}


def hardware(gpu: str) -> dict:
    """The declared host: h200x1, or the same host with one H100 80GB HBM3 (h100_sxm_8x's first GPU) in its place."""
    hw = copy.deepcopy(hardware_profile("h200x1"))
    if gpu == "h100":
        hw["accelerators"] = [dict(hardware_profile("h100_sxm_8x")["accelerators"][0], index=0, numa_node=0)]
        hw["source"] = "profile:h200x1 with h100_sxm_8x's GPU"
    return hw


def plan_of(model: str, served: str, goal: str, gpu: str = "h200") -> tuple:
    dep = deployment(model, served)
    dep["workload"].update(goal=goal, quality="fp8")
    plan = plan_host(HOSTS[gpu], hardware(gpu), [dep])
    assert not plan["errors"], plan["errors"]
    [inst] = plan["deployments"][0]["instances"]
    return dep, dict(inst, args=outside_container(inst["args"])), plan["deployments"][0]["reasons"]


def build(gpu: str = "h200") -> dict:
    """The runs file's content: per model the plan of each goal (one row for both where the command lines are equal,
    `goals` naming them) and the defaults twice."""
    runs, not_run = [], []
    for kind, model in MODELS:
        served = model.rsplit("/", maxsplit=1)[-1].lower()
        base = {"model": model, "model_dir": model.rsplit("/", maxsplit=1)[-1], "served": served, "bench": FIXTURE_BENCH,
                "carry_args": [], "startup_budget": 420}
        plans = {}
        for goal in GOALS:
            dep, inst, reasons = plan_of(model, served, goal, gpu)
            levers = [r["decision"] for r in reasons if "fp8" in r["decision"] or "pulled" in r["decision"]]
            if not any(flag in inst["args"] for flag in ("--quantization", "--kv-cache-dtype")):
                # no lever pulled: the engine is vLLM's defaults plus parsers, measured equal to them before (h200.md)
                not_run.append({"label": f"lever-{kind}-{goal}", "why": "no lever pulled: " + "; ".join(levers)})
                continue
            key = tuple(inst["args"][1:])
            if key in plans:
                plans[key]["goals"].append(goal)
                continue
            plans[key] = {**base, "goals": [goal], "args": list(key), "env": {}, "port": inst["port"], "deployment": dep,
                          "planned": inst["memory"], "is_plan": True, "levers": levers}
        for row in plans.values():
            goals = row["goals"]
            label = f"lever-{kind}-{goals[0]}" if len(goals) == 1 else f"lever-{kind}-plan"
            runs.append({**row, "label": label, "config": f"planner, goal {' and '.join(goals)}, quality fp8 ({'; '.join(row['levers'])})"})
        port = runs[-1]["port"]
        common = ["--served-model-name", served, "--host", "127.0.0.1", "--port", str(port), "--max-model-len", str(MAX_LEN)]
        for suffix in ("", "-r2"):
            runs.append({**base, "label": f"lever-{kind}-default{suffix}", "config": "vLLM defaults", "args": common, "env": {},
                         "port": port})
    return {"engine": "0.26.0", "gpu": HOSTS[gpu], "runs": runs, "not_run": not_run}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--gpu", choices=sorted(OUTS), default="h200")
    gpu = parser.parse_args().gpu
    content = build(gpu)
    OUTS[gpu].write_text(json.dumps(content, indent=1) + "\n")
    print(f"wrote {OUTS[gpu]}: {len(content['runs'])} configurations: {','.join(r['label'] for r in content['runs'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
