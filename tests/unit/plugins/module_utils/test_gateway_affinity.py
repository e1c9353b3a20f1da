"""A deployment's `routing` (issue 37) on a real nginx (Debian's nginx 1.22 + njs 0.7.9) with the gateway rendered from
the role's templates, three stand-in engines serving one model, and the official `openai` client:
- prefix: every turn of a chat (the messages grow, the start stays) goes to one engine; forty conversations spread
  over all three; a conversation whose engine is out of rotation (`down`, what the day-2 drain sets) moves to another
  one and comes back when it returns; the others stay where they were;
- session: an X-Session-Id header or the body's `user` places the conversation; a request naming none goes least_conn
  (it is not hashed on its prompt);
- least_conn (the default) renders no hashing upstream;
- the plan refuses an unknown routing, and two deployments of one served name routed differently, naming them."""

from __future__ import annotations

import json
import subprocess
import time

import openai
import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _fleet_plans, _gateway as gw, _rotation
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.base import PlanError
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.inputs import check_deployments

from llmfleet_testing import ChatEngine, free_port, start_nginx, stop_nginx
from test_gateway import _nginx_t, _render

KEY = "team-key-0123456789abcdef"


def plans(engines, routing):
    dep = {"name": "chat", "instances": [{"name": f"chat-{i}", "served_model_name": "chat", "port": e.server_address[1],
                                          "bind_address": "127.0.0.1"} for i, e in enumerate(engines)]}
    if routing:
        dep["routing"] = routing
    return {"gw": {"host": "gw", "deployments": [dep]}}


@pytest.fixture(params=["prefix", "session"])
def gateway(tmp_path, request):
    engines = [ChatEngine(f"engine{i}") for i in range(3)]
    model = gw.gateway_model(plans(engines, request.param), "gw")
    assert model["errors"] == []
    port = free_port()
    keys = gw.api_keys([{"name": "team", "key": KEY}])
    # a rate the test's few hundred requests stay under
    root = _render(tmp_path, model, gateway_listen=[f"127.0.0.1:{port}"], __gateway_keys=keys, gateway_rate_limit="1000r/s",
                   gateway_rate_burst=1000)
    conf = root / "llmfleet" / "gateway.conf"
    conf.write_text(conf.read_text().replace("/var/log/nginx/llmfleet-gateway.access.log", str(tmp_path / "access.log")))
    checked = _nginx_t(root)
    assert checked.returncode == 0, checked.stderr
    start_nginx(str(root))
    yield {"client": openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, timeout=30, max_retries=0),
           "conf": conf, "root": root, "mode": request.param, "log": tmp_path / "access.log", "model": model}
    stop_nginx(str(root))
    for e in engines:
        e.close()


def chat(gateway, messages, **extra):
    return gateway["client"].chat.completions.create(model="chat", messages=messages, **extra).choices[0].message.content


def conversation(gateway, n, turns=4):
    """The engine that answered each turn of conversation n (each turn re-sends the history, as chat clients do)."""
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": f"conversation {n}: hello"}]
    extra = {"extra_headers": {"X-Session-Id": f"conv-{n}"}} if gateway["mode"] == "session" else {}
    served = []
    for turn in range(turns):
        answer = chat(gateway, messages, **extra)
        served.append(answer)
        messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": f"turn {turn + 1}"}]
    return served


def workers(root):
    master = (root / "nginx.pid").read_text().strip()
    return set(subprocess.run(["pgrep", "-P", master], capture_output=True, text=True, check=False).stdout.split())


def set_down(gateway, instance, down):
    """`down` set on (or cleared from) the instance's server lines, as the rotation module does, and nginx reloaded: back
    once the old workers are gone."""
    conf, root = gateway["conf"], gateway["root"]
    conf.write_text(_rotation.set_one(conf.read_text(), f"gw/{instance}", down))
    # its line in the model's upstream, the hashing one and the second-try upstreams of the two other servers
    assert conf.read_text().count(" down;") == (4 if down else 0)
    old = workers(root)
    subprocess.run(["nginx", "-s", "reload", "-c", str(root / "nginx.conf")], check=True, capture_output=True, timeout=30)
    for _attempt in range(100):
        now = workers(root)
        if now and not now & old:
            return
        time.sleep(0.1)
    raise AssertionError("nginx did not reload")


def test_every_turn_of_a_conversation_goes_to_one_engine_and_conversations_spread(gateway):
    conf = gateway["conf"].read_text()
    assert conf.count("hash $llmfleet_affinity consistent;") == 1 and conf.count("least_conn;") == 1 + 3
    placed = {}
    for n in range(40):
        served = conversation(gateway, n)
        assert len(set(served)) == 1, (n, served)
        placed[n] = served[0]
    counts = {e: list(placed.values()).count(e) for e in ("engine0", "engine1", "engine2")}
    print(f"\n[{gateway['mode']}] 40 conversations x 4 turns: {counts}")
    assert all(c >= 4 for c in counts.values()), counts
    lines = [json.loads(x) for x in gateway["log"].read_text().splitlines()]
    assert all(len(x["affinity"]) == 16 for x in lines), "each routed request logs its conversation's digest"
    assert "conv-" not in gateway["log"].read_text() and "hello" not in gateway["log"].read_text()

    # engine 1 out of rotation (the drain's `down`): its conversations move, the others stay; back, they return
    moved = [n for n, e in placed.items() if e == "engine1"]
    set_down(gateway, "chat-1", True)
    during = {n: conversation(gateway, n, turns=2) for n in placed}
    for n, served in during.items():
        assert len(set(served)) == 1 and served[0] != "engine1", (n, served)
        if n not in moved:
            assert served[0] == placed[n], f"conversation {n} moved although its engine stayed in rotation"
    set_down(gateway, "chat-1", False)
    after = {n: conversation(gateway, n, turns=1)[0] for n in placed}
    assert after == placed


def test_a_request_that_names_no_conversation(gateway):
    # the same first message, no session id and no user: prefix routing places it by its start (one engine every time);
    # session routing sends it least_conn (no digest logged)
    answers = {chat(gateway, [{"role": "user", "content": "the same question"}]) for _attempt in range(9)}
    lines = [json.loads(x) for x in gateway["log"].read_text().splitlines()]
    if gateway["mode"] == "prefix":
        assert len(answers) == 1 and all(x["affinity"] for x in lines)
    else:
        assert len(answers) > 1 and not any(x["affinity"] for x in lines)
    # the body's `user` names a conversation for both
    by_user = {chat(gateway, [{"role": "user", "content": f"question {i}"}], user="alice") for i in range(6)}
    assert len(by_user) == 1


def test_least_conn_is_the_default_and_renders_no_hashing_upstream(tmp_path):
    engines = [ChatEngine(f"engine{i}") for i in range(2)]
    try:
        model = gw.gateway_model(plans(engines, None), "gw")
        assert model["affinity"] == {} and model["upstreams"][0]["routing"] == "least_conn"
        root = _render(tmp_path, model)
        assert "hash $llmfleet_affinity" not in (root / "llmfleet" / "gateway.conf").read_text()
        assert "affinity: {}" in (root / "llmfleet" / "gateway_data.js").read_text()
    finally:
        for e in engines:
            e.close()


def test_the_plan_refuses_an_unknown_routing_naming_the_value():
    deployment = {"name": "chat", "model": "Qwen/Qwen3-8B", "engine": {"version": "0.32.0"}, "routing": "round_robin"}
    with pytest.raises(PlanError) as refused:
        check_deployments([deployment], "h1")
    assert "h1: llmfleet_deployments[0] (chat).routing='round_robin': one of least_conn, session, prefix" in str(refused.value)
    for way in ("least_conn", "session", "prefix"):
        check_deployments([dict(deployment, routing=way)], "h1")


def test_one_served_name_routed_two_ways_is_named():
    def plan(host, routing):
        return {"host": host, "deployments": [{"name": "chat", "model": "Qwen/Qwen3-8B", "served_model_name": "chat",
                                               "routing": routing,
                                               "instances": [{"name": "chat-0", "served_model_name": "chat", "port": 8001}]}]}
    problems = _fleet_plans.served_name_conflicts({"h1": plan("h1", "prefix"), "h2": plan("h2", "least_conn")})
    assert problems == ["served name 'chat' is routed differently: h1/chat has routing prefix, h2/chat has routing least_conn; "
                        "the gateway picks among all instances of a name one way: give every deployment of the name the same "
                        "routing"]
    assert _fleet_plans.served_name_conflicts({"h1": plan("h1", "prefix"), "h2": plan("h2", "prefix")}) == []
