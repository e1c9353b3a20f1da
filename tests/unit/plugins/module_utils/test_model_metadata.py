"""What plan.yml reads from a hub before planning, and how the planner reads it back: which models need it, the weights'
size from a listing, a fetched folder read before the catalog, quantization kept in a side file, the filter over the
registered model_fetch loop."""

from __future__ import annotations

import json

from ansible_collections.llmfleet.serving.plugins.filter.plan import plan_metadata
from ansible_collections.llmfleet.serving.plugins.module_utils import _models as models
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._model_store import RemoteFile, listed_weight_bytes
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
         "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
         "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}


def test_only_hub_ids_outside_the_catalog_without_a_config_or_path_are_fetched():
    deployments = [{"name": "a", "model": "Qwen/Qwen3-8B"},                                  # catalog
                   {"name": "b", "model": "qwen3-8b"},                                       # catalog, short
                   {"name": "c", "model": "meta-llama/Llama-3.1-8B-Instruct"},               # hub id
                   {"name": "d", "model": {"id": "mistralai/Mistral-7B-v0.1", "revision": "v1"}},
                   {"name": "e", "model": {"id": "x/y", "config": LLAMA}},                   # given inline
                   {"name": "f", "model": {"id": "x/z", "path": "/srv/models/z"}},           # local folder
                   {"name": "g", "model": "meta-llama/Llama-3.1-8B-Instruct"},               # once
                   {"name": "h", "model": "no-owner"}]                                       # not a hub id: the planner says so
    assert models.metadata_needed(deployments) == [{"id": "meta-llama/Llama-3.1-8B-Instruct", "revision": None},
                                                   {"id": "mistralai/Mistral-7B-v0.1", "revision": "v1"}]


def test_weight_bytes_of_a_listing_prefer_safetensors():
    files = [RemoteFile("model-00001-of-00002.safetensors", 5, None), RemoteFile("model-00002-of-00002.safetensors", 3, None),
             RemoteFile("pytorch_model.bin", 100, None), RemoteFile("training_args.bin", 7, None), RemoteFile("original/consolidated.pth", 50, None),
             RemoteFile("config.json", 1, None)]
    assert listed_weight_bytes(files) == 8
    assert listed_weight_bytes([RemoteFile("pytorch_model.bin", 100, None), RemoteFile("training_args.bin", 7, None)]) == 100
    # Mistral's repositories in both formats: the Hugging Face shards are what a hub plan loads, the consolidated copy is not
    # counted again (vLLM's default loader keeps the files model.safetensors.index.json names)
    both = [RemoteFile("consolidated.safetensors", 14_496, None), RemoteFile("model-00001-of-00002.safetensors", 9_000, None),
            RemoteFile("model-00002-of-00002.safetensors", 5_496, None), RemoteFile("params.json", 1, None)]
    assert listed_weight_bytes(both) == 14_496
    assert listed_weight_bytes(both[:1]) == 14_496          # consolidated only: that is what there is
    assert listed_weight_bytes([RemoteFile("model-q4.gguf", 9, None)]) == 0


def test_a_fetched_folder_is_read_before_the_catalog_with_the_listed_weight_size(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    metadata = {"meta-llama/Llama-3.1-8B-Instruct": {"dir": str(tmp_path), "weight_bytes": 16_060_522_496, "source": "huggingface at main"}}
    m = models.resolve_model("meta-llama/Llama-3.1-8B-Instruct", metadata)
    assert (m.family, m.weight_bytes, m.weight_bytes_source) == ("llama3", 16_060_522_496, "sizes of the weight files the hub lists")
    assert m.provenance == "config.json of meta-llama/Llama-3.1-8B-Instruct fetched from huggingface at main"
    # an inline config wins over anything fetched; the catalog stays the fallback
    assert models.resolve_model({"id": "meta-llama/Llama-3.1-8B-Instruct", "config": {**LLAMA, "num_hidden_layers": 2}},
                                metadata).num_layers == 2
    assert models.resolve_model("Qwen/Qwen3-8B", metadata).provenance.startswith("built-in catalog")


def test_quantization_in_a_side_file_is_read_as_vllm_reads_it(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    (tmp_path / "quantize_config.json").write_text(json.dumps({"bits": 4, "group_size": 128, "quant_method": "gptq"}))
    m = models.profile_from_directory(str(tmp_path), "x/llama-gptq")
    assert (m.quant_method, m.quant_bits, m.quant_group_size) == ("gptq", 4, 128)
    bf16 = models.profile_from_config(LLAMA, "x/llama")
    assert m.weight_bytes < bf16.weight_bytes / 2       # 4-bit MLPs, not 16 GB of bf16


def test_the_planner_reads_model_metadata_and_the_filter_builds_it(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    fetches = {"results": [
        {"item": {"id": "meta-llama/Llama-3.1-8B-Instruct", "revision": None}, "weight_bytes": 16_060_522_496, "changed": True,
         "dest": str(tmp_path), "revision": "main"},
        {"item": {"id": "x/skipped"}, "skipped": True}]}
    metadata = plan_metadata(fetches, "huggingface", "https://hf-mirror.com")
    assert metadata == {"meta-llama/Llama-3.1-8B-Instruct": {"dir": str(tmp_path), "weight_bytes": 16_060_522_496,
                                                             "source": "huggingface (https://hf-mirror.com) at revision main"}}
    dep = {"name": "llama", "model": "meta-llama/Llama-3.1-8B-Instruct", "engine": {"version": "0.26.0"},
           "workload": {"max_model_len": 8192, "tools": True}}
    plan = plan_host("h", hardware_profile("h200x1"), [dep], {"model_metadata": metadata})
    assert plan["errors"] == []
    [inst] = plan["deployments"][0]["instances"]
    # read as Llama 3 from the fetched metadata: its llama3_json parser needs vLLM's shipped template (issue 34)
    assert any("llama3_json parser needs vLLM's examples/tool_chat_template_llama3.1_json.jinja" in w for w in plan["warnings"])
    assert inst["memory"]["weights_gib_per_gpu"] == round(16_060_522_496 / 2**30, 2)
    # without it, the same deployment is refused with a sentence that says how to give the config
    refused = plan_host("h", hardware_profile("h200x1"), [dep])
    assert "no config.json of it was read" in refused["errors"][0] and "{id, config}" in refused["errors"][0]
