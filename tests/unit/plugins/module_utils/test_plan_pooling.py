"""Pooling models (issue 34, class 2) end to end: the planner decides them as vLLM does (modules.json, the architecture,
the inventory's `pooling`), plans the runner flags per version, no chat parsers, a length within the model's limit and no KV
cache for encoder-only models; the health gate, verify, bench, the gateway and the web UI know their endpoints.

The configs are published ones (tests/fixtures/models/*.json name their source). The independent numbers each test checks:
sentence_bert_config.json's max_seq_length as published (256 for all-MiniLM-L6-v2, 8192 for bge-m3); vLLM roberta.py's
position offset (positions start at padding_idx + 1, so 8194 positions with pad_token_id 1 leave 8192); the hidden_size of
each config (the length of one embedding); id2label's one label (a cross-encoder: vLLM's score API is on)."""

from __future__ import annotations

import json
import pathlib

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _bench as b
from ansible_collections.llmfleet.serving.plugins.module_utils import _gateway as gw
from ansible_collections.llmfleet.serving.plugins.module_utils import _pooling as pl
from ansible_collections.llmfleet.serving.plugins.module_utils import _reach as reach
from ansible_collections.llmfleet.serving.plugins.module_utils import _verify as v
from ansible_collections.llmfleet.serving.plugins.module_utils import _webui as webui
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._models import profile_from_directory
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import PlanError, plan_host

from llmfleet_testing import accepting

ROOT = pathlib.Path(__file__).resolve().parents[4]
MODELS = ROOT / "tests" / "fixtures" / "models"
CHAT_FLAGS = ("--reasoning-parser", "--tool-call-parser", "--enable-auto-tool-choice", "--default-chat-template-kwargs")


def fixture(name):
    return json.loads((MODELS / f"{name}.json").read_text())


def model(name, side=True):
    fx = fixture(name)
    spec = {"id": f"org/{name}", "config": fx["config"]}
    if side:
        spec.update({k: fx[k] for k in ("modules", "sentence_bert_config") if k in fx})
    return spec


def plan(name, version="0.32.0", hw="h200x1", side=True, **dep):
    deployment = {"name": "p", "model": model(name, side), "engine": accepting(version), **dep}
    return plan_host(hw, hardware_profile(hw), [deployment])


def instance(name, version="0.32.0", **kw):
    result = plan(name, version, **kw)
    assert result["errors"] == [], result["errors"]
    [inst] = result["deployments"][0]["instances"]
    return inst


def arg(inst, flag):
    args = inst["args"]
    return args[args.index(flag) + 1] if flag in args else None


def decisions(inst):
    return {r["decision"] for r in inst["reasons"]}


# --- the planner ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, task, dims, labels, length", [
    ("all-minilm-l6-v2", "embed", 384, None, 256),        # sentence_bert_config max_seq_length 256
    ("bge-m3", "embed", 1024, None, 8192),                 # sentence_bert_config max_seq_length 8192
    ("bge-reranker-v2-m3", "classify", None, 1, 8192),     # 8194 positions less roberta.py's offset of pad_token_id + 1 = 2
    ("ms-marco-minilm-l6-v2", "classify", None, 1, 512),   # BERT: positions from 0, the whole 512
    ("qwen3-embedding-0.6b", "embed", 1024, None, 32768),  # a *ForCausalLM with modules.json: its own context
])
def test_pooling_models_are_planned_as_pooling_models(name, task, dims, labels, length):
    inst = instance(name)
    assert (inst["runner"], inst["pooling_task"], inst["embedding_dimensions"], inst["num_labels"]) == ("pooling", task, dims, labels)
    assert inst["max_model_len"] == length and int(arg(inst, "--max-model-len")) == length
    assert arg(inst, "--runner") == "pooling" and "--convert" not in inst["args"]   # vLLM infers the conversion itself
    assert not set(CHAT_FLAGS) & set(inst["args"])
    assert inst["score"] is True      # embed models, and these one-label cross-encoders
    assert "/score" in inst["endpoints"] and "/rerank" in inst["endpoints"]
    assert inst["health_probe"]["path"] == ("/v1/embeddings" if task == "embed" else "/v1/score")


def test_the_same_decoder_without_modules_json_is_a_chat_model_with_its_parsers():
    # the rule bites on the side file, not the name: Qwen3-Embedding's config alone is a Qwen3ForCausalLM, as vLLM sees it
    inst = instance("qwen3-embedding-0.6b", side=False)
    assert "runner" not in inst and "--runner" not in inst["args"]
    assert arg(inst, "--reasoning-parser") == "qwen3"
    with_side = instance("qwen3-embedding-0.6b")
    assert "--reasoning-parser" not in with_side["args"] and "parsers=none, thinking=none" in decisions(with_side)


def test_the_task_flag_before_the_runner_flags():
    # vLLM PR #21470 replaced --task with --runner/--convert; 0.9.2 only has --task, and a one-label classifier is task score
    assert arg(instance("bge-m3", "0.9.2"), "--task") == "embed"
    reranker = instance("bge-reranker-v2-m3", "0.9.2")
    assert arg(reranker, "--task") == "score" and "--runner" not in reranker["args"]
    assert reranker["endpoints"] == ["/pooling", *pl.SCORE_PATHS]
    assert arg(instance("bge-m3", "0.13.0"), "--runner") == "pooling" and "--task" not in instance("bge-m3", "0.13.0")["args"]


def test_encoder_only_models_have_no_kv_cache_and_decoder_embedders_do():
    encoder = instance("bge-m3")
    assert encoder["memory"]["kv_cache_gib_per_gpu"] == 0 and encoder["memory"]["kv_cache_tokens"] == 0
    assert encoder["memory"]["max_concurrency_at_max_len"] == encoder["max_num_seqs"]
    assert "kv_cache=none" in decisions(encoder)
    decoder = instance("qwen3-embedding-0.6b")
    assert decoder["memory"]["kv_cache_gib_per_gpu"] > 0 and decoder["memory"]["kv_cache_tokens"] > 0
    assert "kv_cache=none" not in decisions(decoder)


def test_encoder_only_on_a_cpu_host():
    cpu = {"accelerators": [], "links": None, "numa_cpus": {0: "0-15"}, "cpu_count": 16, "memory_mib": 64 * 1024, "driver_version": None}
    result = plan_host("c", cpu, [{"name": "e", "model": model("all-minilm-l6-v2"), "engine": {"version": "0.32.0"}}])
    assert result["errors"] == []
    [inst] = result["deployments"][0]["instances"]
    assert inst["runner"] == "pooling" and inst["memory"]["kv_cache_gib"] == 0 and arg(inst, "--max-model-len") == "256"


def test_a_length_above_the_models_limit_is_refused_naming_it():
    result = plan("bge-reranker-v2-m3", workload={"max_model_len": 8194})
    assert result["errors"] and "8192" in result["errors"][0] and "roberta" in result["errors"][0].lower()
    assert instance("bge-reranker-v2-m3", workload={"max_model_len": 4096})["max_model_len"] == 4096


def test_the_inventory_converts_a_causal_lm_vllm_would_generate_with():
    assert "runner" not in instance("qwen3-reranker-0.6b")           # as vLLM: a Qwen3ForCausalLM generates
    converted = plan("qwen3-reranker-0.6b", pooling="classify")
    assert any("--hf-overrides" in w and "classifier_from_token" in w for w in converted["warnings"])
    inst = instance("qwen3-reranker-0.6b", pooling="classify")
    assert (arg(inst, "--runner"), arg(inst, "--convert")) == ("pooling", "classify")
    assert inst["pooling_task"] == "classify" and not set(CHAT_FLAGS) & set(inst["args"])
    # num_labels: the config has no id2label, transformers' default is 2, so no score API and the probe is /classify
    assert inst["num_labels"] == 2 and inst["score"] is False and inst["health_probe"]["path"] == "/classify"


def test_pooling_false_names_the_generate_runner_or_is_refused_where_vllm_would():
    inst = instance("qwen3-embedding-0.6b", pooling=False)
    assert arg(inst, "--runner") == "generate" and "runner" not in inst       # modules.json would say pooling to vLLM
    refused = plan("bge-m3", pooling=False)
    assert refused["errors"] and "XLMRobertaModel" in refused["errors"][0]


@pytest.mark.parametrize("dep, message", [
    ({"pooling": "rerank"}, "embed or classify"),
    ({"pooling": True}, "embed or classify"),
    ({"extra_args": ["--runner", "pooling"]}, "pooling key"),
    ({"extra_args": ["--task=embed"]}, "pooling key"),
])
def test_malformed_pooling_input_fails_naming_the_fix(dep, message):
    with pytest.raises(PlanError, match=message):
        plan("bge-m3", **dep)


def test_generative_plans_carry_no_pooling_fields():
    result = plan_host("h200x1", hardware_profile("h200x1"), [{"name": "q", "model": "Qwen/Qwen3-8B", "engine": {"version": "0.32.0"}}])
    [inst] = result["deployments"][0]["instances"]
    assert not set(v.POOLING_FIELDS) & set(inst) and "--runner" not in inst["args"]


def test_side_files_are_read_from_the_folder(tmp_path):
    fx = fixture("all-minilm-l6-v2")
    (tmp_path / "config.json").write_text(json.dumps(fx["config"]))
    modules = fx["modules"] + [{"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}]
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    (tmp_path / "sentence_bert_config.json").write_text(json.dumps(fx["sentence_bert_config"]))
    m = profile_from_directory(str(tmp_path), "org/mini")
    assert (m.st_pooling, m.st_max_seq_length, m.st_dense_out) == (True, 256, -1)     # Dense listed, its config not there
    assert pl.detect(m.architecture, m.hidden_size, m.num_labels, m.is_causal, m.st_pooling, m.st_dense_out, None).dimensions is None
    (tmp_path / "2_Dense").mkdir()
    (tmp_path / "2_Dense" / "config.json").write_text(json.dumps({"in_features": 384, "out_features": 768}))
    m = profile_from_directory(str(tmp_path), "org/mini")
    assert pl.detect(m.architecture, m.hidden_size, m.num_labels, m.is_causal, m.st_pooling, m.st_dense_out, None).dimensions == 768


@pytest.mark.parametrize("architecture, expected", [
    ("XLMRobertaForSequenceClassification", ("pooling", "classify")), ("BertModel", ("pooling", "embed")),
    ("Qwen3ForCausalLM", ("generate", "none")), ("ChatGLMModel", ("generate", "none")),   # registered generative
    ("Gemma3ForConditionalGeneration", ("generate", "none")), ("BertForMaskedLM", ("pooling", "embed")),
    ("InternLM2ForRewardModel", ("pooling", "embed")),
])
def test_architecture_defaults_follow_vllms_table(architecture, expected):
    assert pl.architecture_default(architecture) == expected


# --- the health gate, verify, bench, gateway, web UI ------------------------------------------------------------------


def test_the_gate_probes_a_pooling_instance_with_its_own_endpoint():
    embed = instance("bge-m3")
    path, body, expect = pl.gate_request(embed, "p")
    assert (path, body["model"], expect) == ("/v1/embeddings", "p", "embedding")
    assert pl.gate_passed({"data": [{"embedding": [0.1, 0.2]}]}, expect)
    assert not pl.gate_passed({"data": [{"embedding": []}]}, expect) and not pl.gate_passed({"error": "x"}, expect)
    assert pl.gate_request({"name": "chat-0"}, "p")[0] == "/v1/completions"
    assert pl.gate_passed({"data": [{"score": 0.5}]}, "score") and not pl.gate_passed({"data": [{"score": True}]}, "score")
    with pytest.raises(pl.PoolingError, match="plan.yml"):
        pl.gate_request({"runner": "pooling", "name": "x-0"}, "p")


def _host_plan(inst):
    return {"host": "h", "errors": [], "deployments": [{"name": "p", "engine_version": "0.32.0", "instances": [inst]}]}


def test_verify_asks_the_pooling_endpoint_and_checks_the_embedding_length():
    inst = instance("bge-m3")
    [target] = v.instance_targets(_host_plan(inst))
    url, body = v.pooling_request(target)
    assert url == f"http://127.0.0.1:{inst['port']}/v1/embeddings" and body == {"input": "ping", "model": "p"}
    listed = {"status": 200, "json": {"data": [{"id": "p"}]}}
    ok = v.judge(target, {"models": listed, "pooling": {"status": 200, "json": {"data": [{"embedding": [0.0] * 1024}]}}})
    assert ok["checks"]["pooling"] == "ok" and ok["checks"]["chat"] == "n/a" and not ok["failed"]
    short = v.judge(target, {"models": listed, "pooling": {"status": 200, "json": {"data": [{"embedding": [0.0] * 768}]}}})
    assert short["failed"] and "768" in short["problem"] and "1024" in short["problem"]
    [gateway] = v.gateway_targets({"h": _host_plan(inst)}, "https://gw.example/v1", "gw")
    assert v.pooling_request(gateway)[0] == "https://gw.example/v1/embeddings"
    reranker = v.instance_targets(_host_plan(instance("bge-reranker-v2-m3")))[0]
    assert v.pooling_request(reranker)[0].endswith(":8002/v1/score")   # under /v1, where vLLM asks for the key
    assert v.judge(reranker, {"models": listed, "pooling": {"status": 200, "json": {"data": [{"score": 0.9}]}}})["checks"]["pooling"] == "ok"
    assert v.table([ok])[0].split()[-1] == "pooling"


def test_bench_measures_embeddings_and_says_why_it_skips_rerankers():
    engines = [{"deployment": "p", "runtime": "systemd", "venv": "/opt/v", "model_dir": "/models/p"}]
    [embed] = v.instance_targets(_host_plan(instance("bge-m3")))
    items = b.items([embed], engines, {"concurrency": [1, 4]})
    assert [i["pooling"] for i in items] == ["embed", "embed"]
    argv = b.command(items[0], "/tmp/r", "r.json")
    assert argv[argv.index("--backend") + 1] == "openai-embeddings" and argv[argv.index("--endpoint") + 1] == "/v1/embeddings"
    assert "--random-output-len" not in argv and argv[argv.index("--percentile-metrics") + 1] == "e2el"
    row = b.row(items[0], {"completed": 10, "failed": 0, "input_sequence_throughput": 55.5, "median_e2el_ms": 12.0})
    assert "55.5 embeddings/s" in b.progress(row)
    [reranker] = v.instance_targets(_host_plan(instance("bge-reranker-v2-m3")))
    [skip] = b.items([reranker], engines, {"concurrency": [1, 4]})
    assert "not measured" in skip["skip"] and skip["num_prompts"] == 0
    with pytest.raises(b.BenchError, match="not measured"):
        b.command(skip, "/tmp/r", "r.json")
    old = dict(embed, engine_version="0.10.2")
    [skip_old] = b.items([old], engines, {"concurrency": [1]})
    assert "0.11.1" in skip_old["skip"]


def test_the_gateway_routes_every_pooling_path_by_the_body_model():
    assert set(pl.POOLING_PATHS) <= set(gw.ALLOWED_PATHS)
    for path in ("/v1/embeddings", "/score", "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank", "/classify", "/pooling"):
        assert path in gw.ROUTED_PATHS
    inst = dict(instance("bge-m3"), bind_address="127.0.0.1")
    model = gw.gateway_model({"h": _host_plan(inst)}, "h")
    assert model["paths"] == list(gw.ROUTED_PATHS) and "/v1/models" not in model["paths"]
    assert model["routes"].keys() == {"p"}


def test_the_web_ui_leaves_pooling_models_out_of_its_chat_models():
    chat = plan_host("h200x1", hardware_profile("h200x1"), [{"name": "q", "model": "Qwen/Qwen3-8B", "engine": {"version": "0.32.0"},
                                                            "gpus": [0]}])
    plans = {"a": chat, "b": _host_plan(instance("bge-m3"))}
    assert [s["id"] for s in webui.model_settings(plans)] == ["q"]


def test_the_closing_summary_offers_a_chat_request_only_to_a_chat_model():
    chat = plan_host("h200x1", hardware_profile("h200x1"), [{"name": "q", "model": "Qwen/Qwen3-8B", "engine": {"version": "0.32.0"},
                                                            "gpus": [0]}])
    # "a-embed" sorts first: the summary's curl must still go to the chat model
    embed = {"host": "h", "errors": [], "deployments": [{"name": "a-embed", "engine_version": "0.32.0",
                                                         "instances": [dict(instance("bge-m3"), served_model_name="a-embed")]}]}
    assert reach.chat_models({"a": chat, "b": embed}) == ["q"]
    gateway = [{"host": "gw", "url": "http://gw/v1", "key_name": "k"}]
    assert any('"model": "q"' in line for line in reach.lines({"a": chat, "b": embed}, gateway, []))
    only = reach.lines({"b": embed}, gateway, [])
    assert not any("curl" in line for line in only) and any("/v1/embeddings" in line for line in only)


def test_an_encoder_only_model_cannot_batch_fewer_tokens_than_one_request():
    # vllm 0.32 config/scheduler.py verify_max_model_len: without chunked prefill (bidirectional attention) the batch budget
    # must hold one whole request
    refused = plan("bge-m3", overrides={"max_num_batched_tokens": 4096})
    assert refused["errors"] and "8192" in refused["errors"][0] and "chunked prefill" in refused["errors"][0]
    assert instance("bge-m3", overrides={"max_num_batched_tokens": 4096}, workload={"max_model_len": 4096})["max_model_len"] == 4096
    assert instance("qwen3-embedding-0.6b", overrides={"max_num_batched_tokens": 4096})["runner"] == "pooling"   # chunks
