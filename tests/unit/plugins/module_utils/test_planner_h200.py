"""The planner's memory model against what vLLM 0.26 printed on the lent H200 (tests/fixtures/gpu/,
recorded by tests/gpu/device_run.py with the inputs of tests/gpu/runs.json)."""

from __future__ import annotations

import json
import pathlib

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host

ROOT = pathlib.Path(__file__).resolve().parents[4]
MEASURED = json.loads((ROOT / "tests" / "fixtures" / "gpu" / "h200-vllm-0.26.0.json").read_text())
RUNS = {r["label"]: r for r in json.loads((ROOT / "tests" / "gpu" / "runs.json").read_text())["runs"]}
PLANNED_RUNS = [r for r in MEASURED["runs"] if RUNS[r["label"]]["config"] == "planner"]


def test_fixture_holds_planner_runs():
    assert [r["label"] for r in PLANNED_RUNS] == ["dense-plan", "hybrid-plan", "moe-plan"]


@pytest.mark.parametrize("run", PLANNED_RUNS, ids=lambda r: r["label"])
def test_kv_cache_tokens_within_5_percent_of_vllm_on_the_h200(run):
    spec = RUNS[run["label"]]
    plan = plan_host("h200x1", hardware_profile("h200x1"), [spec["deployment"]])
    [inst] = plan["deployments"][0]["instances"]
    # what the carry needed (appended after the plan's flags, e.g. the Triton GDN kernel) is not the plan's
    carried = spec.get("carry_args", [])
    assert inst["args"][1:] + carried == run["args"], "the plan changed since the H200 run: record it again (tests/gpu/README.md)"
    engine = run["engine_log"]
    mem = inst["memory"]
    print(f"\n{run['label']}: KV tokens planner {mem['kv_cache_tokens']:,} vs vLLM {engine['kv_cache_tokens']:,}; "
          f"KV {mem['kv_cache_gib_per_gpu']} vs {engine['available_kv_gib']} GiB; weights {mem['weights_gib_per_gpu']} vs {engine['weights_gib']} GiB")
    assert abs(mem["kv_cache_tokens"] - engine["kv_cache_tokens"]) / engine["kv_cache_tokens"] <= 0.05
    assert abs(mem["max_concurrency_at_max_len"] - engine["max_concurrency"]) / engine["max_concurrency"] <= 0.05
    assert abs(mem["weights_gib_per_gpu"] - engine["weights_gib"]) / engine["weights_gib"] <= 0.01
