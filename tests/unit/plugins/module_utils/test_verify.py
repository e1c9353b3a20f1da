"""verify.yml's decisions: targets from the plans, the streamed answer read, each check judged, the table and
the failure sentences (the HTTP calls are openai_check's; the fleet lab runs them against real vLLM)."""

from __future__ import annotations

import pytest

from ansible_collections.llmfleet.serving.plugins.filter import verify as verify_filter
from ansible_collections.llmfleet.serving.plugins.module_utils import _verify as v

from llmfleet_testing import plan_of


def plan(host, *instances, version="0.32.0"):
    deps = {}
    for name, port, model, args in instances:
        deps.setdefault(model, []).append({"name": name, "port": port, "served_model_name": model, "args": args})
    return {"host": host, "deployments": [{"name": m, "engine_version": version, "instances": i} for m, i in deps.items()]}


FLEET = {"e1": plan("e1", ("a-0", 8002, "a", ["/m", "--enable-auto-tool-choice", "--tool-call-parser", "hermes"])),
         "e2": plan("e2", ("a-0", 8002, "a", ["/m"]), ("b-0", 8003, "b", ["/m", "--reasoning-parser", "qwen3"]))}
OK = {"models": {"status": 200, "json": {"data": [{"id": "a"}, {"id": "b"}]}}, "chat": {"status": 200, "json": {"choices": [{}]}},
      "stream": {"status": 200, "done": True, "chunks": 5, "fields": []}, "tools": {"status": 200}}


def test_targets_come_from_the_launch_args_of_each_instance():
    t = v.instance_targets(FLEET["e1"])[0]
    assert t["url"] == "http://127.0.0.1:8002/v1" and t["tools"] is True and t["reasoning_parser"] is None
    b = v.instance_targets(FLEET["e2"])[1]
    assert b["tools"] is False and b["reasoning_parser"] == "qwen3" and b["engine_version"] == "0.32.0"
    real = v.instance_targets(plan_of("v100_pair"))[0]
    assert real["tools"] is True and real["reasoning_parser"] == "deepseek_r1"


def test_through_the_gateway_tools_count_only_when_every_instance_has_them():
    targets = {t["model"]: t for t in v.gateway_targets(FLEET, "http://127.0.0.1/v1/", "gw")}
    assert set(targets) == {"a", "b"} and targets["a"]["tools"] is False and targets["a"]["url"] == "http://127.0.0.1/v1"
    assert targets["b"]["reasoning_parser"] == "qwen3" and targets["b"]["via"] == "gateway" and targets["b"]["host"] == "gw"


def test_a_stream_must_end_with_done():
    lines = ['data: {"choices":[{"delta":{"content":"he"}}]}', "", 'data: {"choices":[{"delta":{"reasoning":"hm","content":"y"}}]}',
             "data: [DONE]"]
    got = v.read_stream(lines)
    assert got == {"chunks": 2, "done": True, "text": "hey", "fields": ["reasoning"], "error": None}
    assert v.read_stream(lines[:-1])["done"] is False
    assert v.read_stream(['data: {"error": {"message": "boom"}}'])["error"] == "boom"


def test_every_check_is_judged_and_the_first_failure_says_what_the_engine_said():
    target = v.instance_targets(FLEET["e1"])[0]
    row = v.judge(target, OK)
    assert row["checks"] == {"listed": "ok", "chat": "ok", "stream": "ok", "tools": "ok", "reasoning": "n/a"} and not row["failed"]
    bad = v.judge(target, dict(OK, tools={"status": 400, "error": '"auto" tool choice requires --enable-auto-tool-choice'},
                               stream={"status": 200, "done": False, "chunks": 3}))
    assert bad["failed"] and bad["checks"]["tools"] == "FAIL" and bad["checks"]["stream"] == "FAIL"
    assert "stream: 3 chunks, [DONE] missing" in bad["problem"] and 'HTTP 400: "auto" tool choice' in bad["problem"]
    down = v.judge(target, {k: {"status": -1, "error": "[Errno 111] Connection refused"} for k in OK})
    assert v.failures([down]) == ["a / a-0 on e1 (instance): listed: no answer ([Errno 111] Connection refused); chat: no answer "
                                  "([Errno 111] Connection refused); stream: no answer ([Errno 111] Connection refused); tools: no "
                                  "answer ([Errno 111] Connection refused)"]


def test_the_reasoning_field_is_reported_and_expected_by_version():
    b = v.instance_targets(FLEET["e2"])[1]
    row = v.judge(b, dict(OK, stream=dict(OK["stream"], fields=["reasoning"])))
    assert row["checks"]["reasoning"] == "reasoning" and row["expected_reasoning"] == ["reasoning"]
    assert v.reasoning_fields("0.11.0") == ["reasoning_content"] and v.reasoning_fields("0.15.1") == ["reasoning", "reasoning_content"]
    assert v.reasoning_fields("0.16.0+cpu") == ["reasoning"]


def test_the_table_has_one_line_per_target_and_aligned_columns():
    rows = [v.judge(t, OK) for t in v.instance_targets(FLEET["e2"])]
    lines = v.table(rows)
    assert lines[0].split() == ["deployment", "instance", "host", *v.CHECKS] and len(lines) == 2 + len(rows)
    assert len({len(line) for line in lines}) == 1


@pytest.mark.parametrize("bad", [{"deployments": [{"name": "x", "instances": [{"name": "x-0"}]}]}, None])
def test_malformed_plans_are_filter_errors(bad):
    from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError):
        verify_filter.verify_targets(bad)


def test_the_chat_answer_is_kept_and_shown_through_the_gateway_first():
    said = {"status": 200, "json": {"choices": [{"message": {"content": "It is\n noon  in Paris."}}]}}
    inst = v.judge(dict(v.instance_targets(FLEET["e1"])[0]), dict(OK, chat=said))
    assert inst["answer"] == "It is noon in Paris."
    gw = dict(inst, via="gateway", instance="gateway", answer="Noon.")
    assert v.answers([inst, gw]) == [f"Q: {v.QUESTION}", "A (a, through the gateway): Noon."]
    assert v.answers([inst])[1] == "A (a, on a-0 (e1)): It is noon in Paris."
    failed = v.judge(dict(v.instance_targets(FLEET["e1"])[0]), dict(OK, chat={"status": 500, "error": "boom"}))
    assert failed["answer"] == "" and "(no answer: chat: HTTP 500: boom" in v.answers([failed])[1]
    assert v.answers([]) == []
