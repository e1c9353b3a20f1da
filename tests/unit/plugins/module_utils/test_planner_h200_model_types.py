"""The issue 34 model types on the lent H200 (tests/fixtures/gpu/h200-model-types-0.26.0.json, recorded by
tests/gpu/device_run.py from tests/gpu/runs-model-types.json, which tests/gpu/make_model_type_runs.py writes): a model type
vLLM refuses in float16 (Gemma 3's text model), an embedding model (Qwen3-Embedding-0.6B, a Qwen3ForCausalLM served with
--runner pooling --convert embed) and a multimodal model with its vision encoder (Qwen2.5-VL-7B-Instruct), each started by
vLLM 0.26.0 with exactly the plan's arguments and dummy weights. vLLM's own log is the independent number: its KV cache
tokens must stay within 5 % of the planner's, and the server answered its model's own API."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host
from llmfleet_testing import outside_container

ROOT = pathlib.Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT / "tests" / "gpu"))
import make_model_type_runs as runs  # noqa: E402  pylint: disable=wrong-import-position,import-error

MEASURED = {r["label"]: r for r in json.loads((ROOT / "tests" / "fixtures" / "gpu" / "h200-model-types-0.26.0.json").read_text())["runs"]}
RUNS = {r["label"]: r for r in json.loads((ROOT / "tests" / "gpu" / "runs-model-types.json").read_text())["runs"]}
LABELS = [f"{label}-plan" for label, *_rest in runs.MODELS]


def todays_plan(label):
    [(_label, model_id, folder, config, extras, _side, _probe)] = [m for m in runs.MODELS if f"{m[0]}-plan" == label]
    dep = {"name": folder.lower(), "model": {"id": model_id, "config": config},
           "workload": {"max_model_len": 8192, "concurrency": 32, "goal": "throughput", "thinking": False, "tools": False},
           "engine": {"version": runs.ENGINE}, **extras}
    plan = plan_host("h200x1", hardware_profile("h200x1"), [dep])
    assert not plan["errors"], plan["errors"]
    [inst] = plan["deployments"][0]["instances"]
    return inst


def test_every_model_type_run_is_recorded():
    assert sorted(MEASURED) == sorted(RUNS) == sorted(LABELS)


@pytest.mark.parametrize("label", LABELS)
def test_the_recorded_command_is_todays_plan(label):
    """A plan that changed since its H200 run must be run again (tests/gpu/README.md)."""
    assert outside_container(todays_plan(label)["args"])[1:] == MEASURED[label]["args"]


@pytest.mark.parametrize("label", LABELS)
def test_kv_cache_tokens_within_5_percent_of_vllms_log(label):
    row = MEASURED[label]
    assert row["ready_s"] > 0 and row["probe"]["status"] == 200
    vllm_tokens = row["engine_log"]["kv_cache_tokens"]
    planned = todays_plan(label)["memory"]["kv_cache_tokens"]
    assert abs(planned - vllm_tokens) <= 0.05 * vllm_tokens, (label, planned, vllm_tokens)


def test_the_float16_refusing_type_ran_in_bfloat16_and_the_embedder_embedded():
    gemma = MEASURED["f16refused-plan"]
    assert gemma["args"][gemma["args"].index("--dtype") + 1] == "bfloat16"
    embed = MEASURED["embed-plan"]
    assert embed["args"][embed["args"].index("--runner") + 1] == "pooling"
    # Qwen3-Embedding-0.6B's hidden_size (its published config.json): the length of the vector vLLM returned
    assert embed["probe"]["embedding_length"] == runs.corpus("qwen3-embedding-0.6b.json")["hidden_size"] == 1024
