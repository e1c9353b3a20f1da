"""Write tests/gpu/runs-multi.json (issue 21): for a dense (Qwen3-32B), a MoE (Qwen3-30B-A3B, BF16 and FP8) and a hybrid
(Qwen3.5-27B) model on a declared `h200_sxm_8x` host (8 x H200, NVLink between every pair), the planner's plan and the
layouts it weighed and did not take: TP=1 x 8, TP=2 x 4, TP=4 x 2, TP=8 x 1 (and expert parallelism on and off for the
MoE models), each planned by the planner itself with overrides, so every configuration carries its own memory numbers.
A layout the planner refuses is recorded with its refusal instead. runs.json (one GPU) is not touched.

    .venv/bin/python tests/gpu/make_multi_runs.py

device_run.py starts every instance of a configuration (its own GPUs, port, log and compile caches) and benchmarks
them together (tests/gpu/README.md, "Several GPUs").
"""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Any, Dict, List, Optional, Tuple

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from make_runs import BENCH, CARRY_ARGS, ENGINE, MAX_LEN, ROOT, deployment, outside_container  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile  # noqa: E402
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host  # noqa: E402

HOST = "h200_sxm_8x"
CONCURRENCY = 128
# 8 streams up to 4x the declared 128. A step sends max(100, 2 x c) prompts (device_run.prompts_for); device_run.py splits
# the streams and the prompts evenly over the configuration's instances, as a least-connections gateway would.
MULTI_BENCH = {**BENCH, "concurrency": [8, 32, 128, 512]}
TP_SIZES = (1, 2, 4, 8)
# (kind, model, MoE: expert parallelism on and off are both tried)
MODELS: List[Tuple[str, str, bool]] = [("dense", "Qwen/Qwen3-32B", False), ("moe", "Qwen/Qwen3-30B-A3B", True),
                                       ("moe-fp8", "Qwen/Qwen3-30B-A3B-FP8", True), ("hybrid", "Qwen/Qwen3.5-27B", False)]
OUT = ROOT / "tests" / "gpu" / "runs-multi.json"


def plan_of(model: str, served: str, overrides: Optional[dict]) -> Tuple[dict, dict]:
    """The deployment (make_runs.py's shape at the declared concurrency, with the overrides) and its plan on HOST."""
    dep = deployment(model, served, concurrency=CONCURRENCY, overrides=overrides)
    return dep, plan_host(HOST, hardware_profile(HOST), [dep])


def instances_of(plan: dict, carry: List[str]) -> List[Dict[str, Any]]:
    """Each planned instance as device_run.py starts it: its arguments without the model path (the carry's own folder
    replaces it) plus what the carry needs, its environment (CUDA_VISIBLE_DEVICES), port, GPUs and planned memory."""
    return [{"name": inst["name"], "port": inst["port"], "gpus": inst["gpus"], "args": outside_container(inst["args"])[1:] + carry,
             "env": inst["env"], "planned": inst["memory"]} for inst in plan["deployments"][0]["instances"]]


def layout_of(plan: dict) -> Dict[str, Any]:
    insts = plan["deployments"][0]["instances"]
    first = insts[0]
    return {"tensor_parallel_size": first["tensor_parallel_size"], "instances": len(insts), "expert_parallel": first["expert_parallel"],
            "kv_cache_dtype": first["kv_cache_dtype"], "max_num_seqs": first["max_num_seqs"]}


def label_of(kind: str, layout: Dict[str, Any], moe: bool, is_plan: bool) -> str:
    ep = "-ep" if moe and layout["expert_parallel"] else ""
    return f"{kind}-tp{layout['tensor_parallel_size']}x{layout['instances']}{ep}" + ("-plan" if is_plan else "")


def tp_reason(plan: dict) -> str:
    return next(r["why"] for r in plan["deployments"][0]["reasons"] if r["decision"].startswith("tensor_parallel_size="))


def configurations(kind: str, model: str, moe: bool) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
    """The plan and every alternative layout of one model: (the model's summary, its configurations, the plan first)."""
    served = model.rsplit("/", maxsplit=1)[-1].lower()
    carry = CARRY_ARGS.get(kind, [])
    base = {"kind": kind, "model": model, "model_dir": model.rsplit("/", maxsplit=1)[-1], "served": served, "carry_args": carry,
            "bench": MULTI_BENCH}
    dep, plan = plan_of(model, served, None)
    assert not plan["errors"], plan["errors"]
    plan_instances = instances_of(plan, carry)
    runs = [{**base, "label": label_of(kind, layout_of(plan), moe, True), "config": "planner", "is_plan": True, "overrides": {},
             "same_as_overrides": [], "deployment": dep, "layout": layout_of(plan), "why": tp_reason(plan),
             "startup_budget": max(i["startup_budget_s"] for i in plan["deployments"][0]["instances"]), "warnings": plan["warnings"],
             "instances": plan_instances}]
    summary: Dict[str, Any] = {"kind": kind, "model": model, "plan": runs[0]["label"], "why": runs[0]["why"], "refused": [], "skipped": []}
    for tp in TP_SIZES:
        for ep in ((False, True) if moe else (None,)):
            overrides: Dict[str, Any] = {"tensor_parallel_size": tp, **({} if ep is None else {"expert_parallel": ep})}
            if ep and tp == 1:
                # vLLM's expert-parallel group is TP x DP GPUs: at TP=1 it is one GPU holding every expert, the engine of EP off
                summary["skipped"].append({"overrides": overrides, "why": "at TP=1 the expert-parallel group is one GPU (all experts "
                                           "on it): the same engine as expert parallelism off"})
                continue
            dep, alt = plan_of(model, served, overrides)
            if alt["errors"]:
                summary["refused"].append({"overrides": overrides, "errors": alt["errors"]})
                continue
            insts = instances_of(alt, carry)
            if insts == plan_instances:     # the layout the planner chose by itself: the plan's configuration
                runs[0]["same_as_overrides"].append(overrides)
                continue
            runs.append({**base, "label": label_of(kind, layout_of(alt), moe, False), "config": f"overrides {json.dumps(overrides)}",
                         "is_plan": False, "overrides": overrides, "deployment": dep, "layout": layout_of(alt),
                         "startup_budget": max(i["startup_budget_s"] for i in alt["deployments"][0]["instances"]),
                         "warnings": alt["warnings"], "instances": insts})
    summary["configurations"] = [r["label"] for r in runs]
    return summary, runs


def build() -> Dict[str, Any]:
    """runs-multi.json's content: today's planner output (the unit test regenerates it and compares)."""
    models, runs = [], []
    for kind, model, moe in MODELS:
        summary, configs = configurations(kind, model, moe)
        models.append(summary)
        runs += configs
    return {"engine": ENGINE, "gpu": HOST, "max_model_len": MAX_LEN, "concurrency": CONCURRENCY, "models": models, "runs": runs}


def main() -> int:
    content = build()
    OUT.write_text(json.dumps(content, indent=1) + "\n")
    print(f"wrote {OUT}: {len(content['runs'])} configurations")
    for summary in content["models"]:
        print(f"  {summary['model']}: {', '.join(summary['configurations'])}"
              + "".join(f"; refused {json.dumps(r['overrides'])}" for r in summary["refused"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
