"""A client key rotated with an overlap (gateway_api_keys[].previous_key / previous_until, issue 37) on a real nginx with
the gateway rendered from the role's templates and the official `openai` client: the previous key is served under the
key's name until the overlap's end, then refused 401 at the next request, with no run in between; a key taken out of the
list is refused once nginx reloads, while a stream started before the reload ends whole. Bad values are named, never
the keys."""

from __future__ import annotations

import datetime
import json
import os
import re
import signal
import threading
import time

import openai
import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _gateway as gw

from llmfleet_testing import access_log
from test_gateway import _render
from test_gateway_budgets import ask, start, stop

NEW = "team-new-0123456789abcdef"
OLD = "team-old-0123456789abcdef"
GONE = "gone-key-0123456789abcdef"


def utc(seconds_from_now):
    moment = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds_from_now)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture()
def gateway(tmp_path):
    # the overlap ends 10 s from now (whole seconds): room for nginx's start and two requests on a busy machine
    until = utc(10)
    g = start(tmp_path, [{"name": "team", "key": NEW, "previous_key": OLD, "previous_until": until},
                         {"name": "gone", "key": GONE}])
    g["until"] = until
    g["tmp"] = tmp_path
    yield g
    stop(g)


def client(gateway, key):
    return openai.OpenAI(base_url=gateway["url"], api_key=key, timeout=30, max_retries=0)


def test_the_previous_key_works_until_the_overlaps_end_then_gets_401(gateway):
    assert ask(client(gateway, OLD)).usage.total_tokens > 0
    assert ask(client(gateway, NEW)).usage.total_tokens > 0
    names = [line["key_name"] for line in access_log(gateway["log"], 2)]
    assert names == ["team", "team"], "the previous key is counted under the key's name"
    end = datetime.datetime.strptime(gateway["until"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc).timestamp()
    time.sleep(max(0.0, end - time.time()) + 0.2)
    with pytest.raises(openai.AuthenticationError) as exc:
        ask(client(gateway, OLD))
    print(f"\nthe previous key after {gateway['until']}: HTTP {exc.value.status_code} {json.dumps(exc.value.body)}")
    assert exc.value.status_code == 401 and exc.value.body["code"] == "invalid_api_key"
    assert ask(client(gateway, NEW)).usage.total_tokens > 0


def test_a_key_taken_out_is_refused_after_the_reload_and_its_stream_in_flight_ends_whole(gateway):
    gone = client(gateway, GONE)
    # a stream the engine answers slowly (X-Test-Slow: seconds between events), started before the reload
    chunks = []
    stream = gone.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=20,
                                          stream=True, extra_headers={"X-Test-Slow": "0.1"})

    def read():
        chunks.extend(stream)
    reader = threading.Thread(target=read)
    reader.start()
    time.sleep(0.5)
    # the list without `gone`, rendered again over the same tree, and nginx reloaded (what keys.yml's render does)
    model = gw.gateway_model({"gw": {"host": "gw", "deployments": [{"name": "tiny", "instances": [
        {"name": "tiny-0", "served_model_name": "tiny", "port": gateway["engine"].server_address[1], "bind_address": "127.0.0.1"}]}]}}, "gw")
    keys = gw.api_keys([{"name": "team", "key": NEW}])
    data = gateway["root"] / "llmfleet" / "gateway_data.js"
    fresh = _render(gateway["tmp"] / "again", model, __gateway_keys=keys)
    data.write_text((fresh / "llmfleet" / "gateway_data.js").read_text())
    os.kill(int((gateway["root"] / "nginx.pid").read_text()), signal.SIGHUP)
    time.sleep(0.5)
    with pytest.raises(openai.AuthenticationError):
        ask(gone)
    reader.join(30)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    print(f"\nthe stream of the removed key, started before the reload: {len(chunks)} chunks")
    assert len([c for c in chunks if c.choices]) == 20 and content, "the stream in flight ended whole"
    assert ask(client(gateway, NEW)).usage.total_tokens > 0


def test_bad_rotations_are_named_never_the_keys():
    cases = [({"previous_key": OLD}, r"needs previous_key and previous_until together"),
             ({"previous_until": "2026-12-06T12:00:00Z"}, r"needs previous_key and previous_until together"),
             ({"previous_key": OLD, "previous_until": "tomorrow"}, r"previous_until='tomorrow': give the end of the overlap in UTC"),
             ({"previous_key": OLD, "previous_until": "2026-13-06T12:00:00Z"}, r"previous_until='2026-13-06T12:00:00Z' is not a date"),
             ({"previous_key": NEW, "previous_until": "2026-12-06T12:00:00Z"}, r"the previous key is the key itself or another key's"),
             ({"previous_key": "short", "previous_until": "2026-12-06T12:00:00Z"}, r"the previous key must be 16-256 characters")]
    for extra, message in cases:
        with pytest.raises(gw.GatewayError, match=r"gateway_api_keys\[0\] \(team\)") as exc:
            gw.api_keys([dict({"name": "team", "key": NEW}, **extra)])
        assert re.search(message, str(exc.value)), str(exc.value)
        assert NEW not in str(exc.value) and OLD not in str(exc.value)
    with pytest.raises(gw.GatewayError, match=r"gateway_api_keys\[1\] \(b\): the previous key is the key itself or another key's"):
        gw.api_keys([{"name": "a", "key": OLD}, {"name": "b", "key": NEW, "previous_key": OLD, "previous_until": "2026-12-06T12:00Z"}])
    keys = gw.api_keys([{"name": "b", "key": NEW, "previous_key": OLD, "previous_until": "2026-12-06T12:00Z"}])
    assert keys[0]["previous"]["until_text"] == "2026-12-06T12:00:00Z"
    digests = gw.key_digests(keys)
    assert sorted(digests["names"].values()) == ["b", "b"] and list(digests["until"].values()) == [1796558400000]


def test_the_summary_probes_and_misses_name_keys_by_name_only():
    keys = [{"name": "a", "key": NEW, "previous_key": OLD, "previous_until": "2026-12-06T12:00:00Z", "models": ["tiny"],
             "rate": "2r/s", "burst": 4, "budgets": [{"tokens": 1000, "per": "day"}]},
            {"name": "b", "key": GONE, "max_conns": 0}]
    checked = gw.api_keys(keys)
    until = checked[0]["previous"]["until"]
    lines = gw.key_summary(checked, until - 3 * 3600)
    assert lines == ["a: models tiny; rate 2r/s burst 4; budget 1000 tokens per day; previous key accepted until "
                     "2026-12-06T12:00:00Z (3 h from now)", "b: every model; max_conns 0"]
    assert "refused since 2026-12-06T12:00:00Z: take previous_key and previous_until out" in gw.key_summary(checked, until + 1)[0]
    assert all(k not in " ".join(lines) for k in (NEW, OLD, GONE))
    inside = gw.key_probes(keys, checked, until - 60)
    assert [(p["name"], p["which"], p["key"], p["status"]) for p in inside] == [
        ("a", "key", NEW, 200), ("a", "previous key", OLD, 200), ("b", "key", GONE, 200)]
    assert [p["status"] for p in gw.key_probes(keys, checked, until + 60)] == [200, 401, 200]
    assert len(gw.key_probes(keys, checked, until + 2)) == 2, "either answer is right at the overlap's very end"
    results = [{"item": p, "status": s} for p, s in zip(inside, (200, 401, 429))]
    assert gw.probe_misses(results) == ["a's previous key: HTTP 401, expected 200"], "429: known, held back by its own rate"
    failure = "Request failed: <urlopen error [Errno 111] Connection refused>"
    refused = [{"item": dict(inside[1], status=401), "status": 200}, {"item": inside[0], "status": -1, "msg": failure}]
    assert gw.probe_misses(refused) == ["a's previous key: HTTP 200, expected 401",
                                        f"a's key: HTTP -1 ({failure}), expected 200"]


def test_an_unquoted_yaml_time_is_taken_as_the_overlaps_end():
    import yaml  # pylint: disable=import-outside-toplevel
    for text in ("2026-12-06T12:00:00Z", "2026-12-06 13:00:00+01:00", "2026-12-06T12:00:00"):
        value = yaml.safe_load(f"until: {text}")["until"]
        assert isinstance(value, datetime.datetime), value
        keys = gw.api_keys([{"name": "a", "key": NEW, "previous_key": OLD, "previous_until": value}])
        assert keys[0]["previous"]["until_text"] == "2026-12-06T12:00:00Z", text
