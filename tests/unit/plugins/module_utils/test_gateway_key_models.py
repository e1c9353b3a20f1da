"""Keys limited to some models (gateway_api_keys[].models, issue 37), on a real nginx (Debian's nginx 1.22 + njs 0.7.9)
with the gateway rendered from the role's templates, two models each on a stand-in engine, and the official `openai`
client as users' code calls it:
- a key limited to one model is answered 403 in OpenAI's error shape on the other (the client raises
  PermissionDeniedError), and its /v1/models lists that model only; the engine never sees the refused request;
- a key without `models` uses and lists both;
- a model no plan serves in a key's list stops the role before any change, naming the key and the model."""

from __future__ import annotations

import json

import openai
import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _gateway as gw

from llmfleet_testing import ChatEngine, free_port, start_nginx, stop_nginx
from test_gateway import _nginx_t, _render

TEAM = "team-key-0123456789abcdef"
ADMIN = "admin-key-0123456789abcdef"


@pytest.fixture()
def gateway(tmp_path):
    engine = ChatEngine()
    plan = {"host": "gw", "deployments": [
        {"name": name, "instances": [{"name": f"{name}-0", "served_model_name": name, "port": engine.server_address[1],
                                      "bind_address": "127.0.0.1"}]}
        for name in ("qwen", "tiny")]}
    model = gw.gateway_model({"gw": plan}, "gw")
    assert model["errors"] == []
    port = free_port()
    keys = gw.api_keys([{"name": "team", "key": TEAM, "models": ["tiny"]}, {"name": "admin", "key": ADMIN}])
    root = _render(tmp_path, model, gateway_listen=[f"127.0.0.1:{port}"], __gateway_keys=keys,
                   __gateway_scopes=gw.key_scopes(keys, model))
    conf = root / "llmfleet" / "gateway.conf"
    conf.write_text(conf.read_text().replace("/var/log/nginx/llmfleet-gateway.access.log", str(tmp_path / "access.log")))
    checked = _nginx_t(root)
    assert checked.returncode == 0, checked.stderr
    start_nginx(str(root))
    yield {"url": f"http://127.0.0.1:{port}/v1", "engine": engine, "log": tmp_path / "access.log"}
    stop_nginx(str(root))
    engine.close()


def client(gateway, key):
    return openai.OpenAI(base_url=gateway["url"], api_key=key, timeout=30, max_retries=0)


def test_a_key_limited_to_one_model_gets_403_on_the_other_and_lists_only_its_own(gateway):
    team = client(gateway, TEAM)
    assert team.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}]).choices[0].message.content == "ok"
    with pytest.raises(openai.PermissionDeniedError) as refused:
        team.chat.completions.create(model="qwen", messages=[{"role": "user", "content": "hi"}])
    error = refused.value.body
    print(f"\nteam on qwen: HTTP {refused.value.status_code} {json.dumps(error)}")
    assert refused.value.status_code == 403 and error["code"] == "model_not_allowed" and "`qwen`" in error["message"]
    assert TEAM not in json.dumps(error)
    assert [m.id for m in team.models.list()] == ["tiny"]
    # a name no plan serves: the same 403, so the key learns nothing of what else is served
    with pytest.raises(openai.PermissionDeniedError):
        team.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "hi"}])
    assert gateway["engine"].seen == ["tiny"], "the refused request never reached an engine"
    lines = [json.loads(x) for x in gateway["log"].read_text().splitlines()]
    refused_line = next(x for x in lines if x["status"] == "403")
    assert (refused_line["key_name"], refused_line["model"]) == ("team", ""), "counted under no model (bounded series)"


def test_a_key_without_models_uses_and_lists_every_model(gateway):
    admin = client(gateway, ADMIN)
    assert sorted(m.id for m in admin.models.list()) == ["qwen", "tiny"]
    for name in ("qwen", "tiny"):
        assert admin.chat.completions.create(model=name, messages=[{"role": "user", "content": "x"}]).model == name


def test_a_model_no_plan_serves_in_a_keys_list_is_named():
    model = gw.gateway_model({"gw": {"host": "gw", "deployments": [{"name": "tiny", "instances": [
        {"name": "tiny-0", "served_model_name": "tiny", "port": 8002, "bind_address": "127.0.0.1"}]}]}}, "gw")
    keys = gw.api_keys([{"name": "team", "key": TEAM, "models": ["tiny", "qwen3-8b"]}])
    with pytest.raises(gw.GatewayError, match=r"\(team\)\.models names qwen3-8b, which no plan serves; the served models are tiny"):
        gw.key_scopes(keys, model)
    for bad in ([], "tiny", [""], [3]):
        with pytest.raises(gw.GatewayError, match=r"\(team\)\.models must be a non-empty list") as exc:
            gw.api_keys([{"name": "team", "key": TEAM, "models": bad}])
        assert TEAM not in str(exc.value)
    with pytest.raises(gw.GatewayError, match="JavaScript's own word"):
        gw.api_keys([{"name": "__proto__", "key": TEAM, "models": ["tiny"]}])
    with pytest.raises(gw.GatewayError,
                       match=r"may have budgets, burst, max_conns, models, previous_key, previous_until, rate; it has \['key', 'name', 'scope'\]"):
        gw.api_keys([{"name": "team", "key": TEAM, "scope": ["tiny"]}])
