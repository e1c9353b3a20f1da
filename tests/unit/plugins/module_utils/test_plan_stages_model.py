"""_plan.model on its own: the model's profile, its source on the host, the engine floor, YaRN."""

from __future__ import annotations

import json
import pathlib

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils._plan.base import Ctx, Refusal
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.inputs import check_deployments, read_request
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.model import (
    check_engine_runs, choose_model, extend_context, profile_summary, serving_source,
)
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.stages import HostOptions, Serving

FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "fixtures" / "models"
OPTS = HostOptions(bind_why="the gateway runs on this host", model_root="/data/models")


def request(model, **extra):
    [d] = check_deployments([{"name": "d", "model": model, "engine": {"version": "0.26.0"}, **extra}], "h")
    return d, read_request(d, Ctx([]))


def test_a_hub_model_is_fetched_under_the_model_root_and_a_local_one_is_not(tmp_path):
    d, req = request("Qwen/Qwen3-8B")
    ctx = Ctx([])
    serving = serving_source(d, req, choose_model(d, req, None), OPTS, ctx)
    assert isinstance(serving, Serving) and serving.source["fetch"] and serving.source["dir"].startswith("/data/models/")
    assert "bind_address=127.0.0.1" in [r["decision"] for r in ctx.reasons]
    assert serving.drain_s == 120                                      # DEPLOYMENT_DOC: overrides.drain_timeout_s default 120
    llama = json.loads((FIXTURES / "llama-3.1-8b-instruct.json").read_text())["config"]
    (tmp_path / "config.json").write_text(json.dumps(llama))
    d, req = request({"id": "meta-llama/Llama-3.1-8B-Instruct", "path": str(tmp_path)})
    local = serving_source(d, req, choose_model(d, req, {}), OPTS, Ctx([]))
    assert not local.source["fetch"] and local.source["dir"] == str(tmp_path)


def test_profile_summary_reads_the_config():
    """Llama 3.1 8B: a dense model (no experts, no state layers) of the llama family."""
    llama = json.loads((FIXTURES / "llama-3.1-8b-instruct.json").read_text())["config"]
    d, req = request({"id": "meta-llama/Llama-3.1-8B-Instruct", "config": llama})
    summary = profile_summary(choose_model(d, req, None))
    assert (summary["moe"], summary["hybrid"]) == (False, False) and summary["family"].startswith(llama["model_type"])


def test_metadata_the_controller_fetched_is_read_before_the_catalog(tmp_path):
    llama = json.loads((FIXTURES / "llama-3.1-8b-instruct.json").read_text())["config"]
    (tmp_path / "config.json").write_text(json.dumps(llama))
    d, req = request("meta-llama/Llama-3.1-8B-Instruct")
    with pytest.raises(Refusal, match=r"not in the built-in catalog"):
        choose_model(d, req, None)
    m = choose_model(d, req, {"meta-llama/Llama-3.1-8B-Instruct": {"dir": str(tmp_path), "weight_bytes": 16_060_522_240}})
    assert m.max_position_embeddings == llama["max_position_embeddings"] == 131072


def test_the_engine_floor_and_yarn_are_stages_of_their_own():
    d, req = request("Qwen/Qwen3-8B", workload={"max_model_len": 65536})
    m = choose_model(d, req, None)
    check_engine_runs(m, req)                                           # Qwen3 runs on 0.26
    extended, overrides = extend_context(d, req, m, Ctx([]))
    # Qwen3's model card: 32768 native tokens, YaRN factor 2 for 65536
    assert extended.max_position_embeddings == 65536 and json.loads(overrides)["rope_scaling"]["factor"] == 2.0
    assert m.max_position_embeddings == 40960, "the stage returns a new profile and leaves its input alone"
