"""playbooks/plan.yml for a model outside the planner's catalog, named only by its hub id: the controller reads its
config.json (and the weights' size from the listing) through model_fetch and the real SDKs - the modelscope SDK and
huggingface_hub - from the STAND-IN hub of conftest.py (the real hubs cannot be reached from the lab), never a weight,
and plans from it. A missing config.json, an unknown model and an unreachable hub fail the host with one sentence."""

from __future__ import annotations

import json
import pathlib

import pytest
import yaml
from conftest import hub_call
from llmfleet_testing import run_ansible, task_result

from ansible_collections.llmfleet.serving.plugins.module_utils._model_store import CONFIG_ONLY


def plan(hub, tmp_path, model, source="modelscope", endpoint=None):
    inventory = tmp_path / "inventory"
    (inventory / "host_vars").mkdir(parents=True, exist_ok=True)
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"llm_serve": {"hosts": {"node1": {}}}}}}))
    (inventory / "host_vars" / "node1.yml").write_text(yaml.safe_dump({
        "ansible_connection": "local", "llmfleet_hardware_profile": "h200x1",
        "llmfleet_deployments": [{"name": "tiny", "model": model, "engine": {"version": "0.26.0"},
                                  "workload": {"max_model_len": 2048, "concurrency": 4, "tools": True}}]}))
    extra = {"llmfleet_plan_dir": str(tmp_path / "plans"), "llmfleet_metadata_cache": str(tmp_path / "cache"),
             "model_store_source": source, "model_store_controller_endpoint": endpoint or hub["url"],
             "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
    hub_call(hub, "/_reset", {})
    result = run_ansible("ansible-playbook", "playbooks/plan.yml", "-i", str(inventory), extra_vars=extra, with_inventory=False)
    return result, tmp_path / "plans" / "node1.json"


@pytest.mark.parametrize("source", ["modelscope", "huggingface"])
def test_a_model_named_by_hub_id_is_planned_from_its_fetched_config(hub, tmp_path, source):
    result, plan_file = plan(hub, tmp_path, {"id": "llmfleet/tiny-qwen3", "revision": "v1.0"}, source)
    assert result["stats"]["node1"]["failures"] == 0, result["stats"]
    config = json.loads((pathlib.Path(hub["root"]) / "llmfleet" / "tiny-qwen3" / "v1.0" / "config.json").read_text())
    p = json.loads(plan_file.read_text())
    assert p["errors"] == [], p["errors"]
    [inst] = p["deployments"][0]["instances"]
    assert p["deployments"][0]["model"] == "llmfleet/tiny-qwen3"
    # memory from the fetched config: K and V of every layer's KV heads, in bf16 (the float32 checkpoint served in bf16)
    kv = config["num_hidden_layers"] * config["num_key_value_heads"] * config["head_dim"] * 2 * 2
    assert inst["memory"]["kv_bytes_per_token_per_gpu"] == kv and "--dtype" in inst["args"]
    # weights: the size of the one safetensors file the hub lists (the model has no index), where the plan says it read them
    profile = p["deployments"][0]["model_profile"]
    assert profile["weight_bytes_source"] == "sizes of the weight files the hub lists"
    assert profile["provenance"].startswith(f"config.json of llmfleet/tiny-qwen3 fetched from {source} ({hub['url']}) at revision v1.0")
    # the family (qwen3) gives its tool parser; the chat template fetched with the metadata (the lab's plain ChatML: no
    # enable_thinking, no <think>, no tools) decides thinking, over the name, and its missing tools section is warned about
    assert "--tool-call-parser" in inst["args"] and "--reasoning-parser" not in inst["args"]
    assert (profile["thinking"], profile["thinking_from"]) == ("none", "its chat template")
    assert any("does not render the request's `tools`" in w for w in p["warnings"])
    # only metadata moved: the cache holds config files and the manifest, the hub sent no weight
    cache = tmp_path / "cache" / source / "llmfleet" / "tiny-qwen3" / "v1.0"
    assert (cache / "config.json").is_file() and not (cache / "model.safetensors").exists()
    sent = hub_call(hub, "/_stats")["by_path"]
    assert sent and set(sent) <= set(CONFIG_ONLY), sent
    # a second plan reads the cache: nothing fetched again
    again, _plan_file = plan(hub, tmp_path, {"id": "llmfleet/tiny-qwen3", "revision": "v1.0"}, source)
    assert again["stats"]["node1"]["failures"] == 0 and hub_call(hub, "/_stats")["by_path"] == {}


@pytest.mark.parametrize(("model", "endpoint", "said"), [
    ("llmfleet/no-config", None, "has no config.json"),
    ("llmfleet/no-such-model", None, "has no llmfleet/no-such-model"),
    ("llmfleet/tiny-qwen3", "http://127.0.0.1:9", "127.0.0.1:9"),
])
def test_metadata_that_cannot_be_read_fails_the_host_saying_what_and_how_else(hub, tmp_path, model, endpoint, said):
    result, plan_file = plan(hub, tmp_path, {"id": model, "revision": "v1.0"}, endpoint=endpoint)
    assert result["stats"]["node1"]["failures"] == 1, result["stats"]
    msg = task_result(result, "Say which model's metadata could not be read, and how else to give it", "node1")["msg"]
    assert f"the plan needs the config.json of {model}" in msg and said in msg, msg
    assert "model: {id: ..., config: {...}, weight_bytes: ...}" in msg and "model_store_controller_endpoint" in msg
    assert not plan_file.exists()
