"""Token budgets per key (gateway_api_keys[].budgets, issue 37) on a real nginx (Debian's nginx 1.22 + njs 0.7.9 + the
Lua module 0.10.23) with the gateway rendered from the role's templates, a stand-in engine that answers as vLLM does
(usage in a whole answer, and as a stream's last event when asked), and the official `openai` client:
- a budget runs out at the expected count: every answer's prompt + completion tokens are counted, streamed or not; the
  next request is answered 429 token_budget_exceeded with Retry-After (the seconds left in the window) and reaches no
  engine; the client raises RateLimitError and, told the window ends in more than a minute, does not retry; another
  key is untouched;
- the counters survive an nginx reload, a stop and start, and a crash (SIGKILL of every nginx process);
- each period's window (minute ... month, UTC) ends where the calendar says;
- bad budgets are refused naming the value, never the key."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

import openai
import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _gateway as gw

from llmfleet_testing import free_port, start_nginx, stop_nginx
from test_gateway import _nginx_t, _render
from test_gateway_usage import Engine

TEAM = "team-key-0123456789abcdef"
OTHER = "other-key-0123456789abcdef"
# the stand-in engine's usage: prompt = words of the first message + 7, completion = max_tokens
PROMPT, COMPLETION = 8, 12


def start(tmp_path, keys, interval=1):
    engine = Engine(free_port())
    plan = {"host": "gw", "deployments": [{"name": "tiny", "instances": [
        {"name": "tiny-0", "served_model_name": "tiny", "port": engine.server_address[1], "bind_address": "127.0.0.1"}]}]}
    model = gw.gateway_model({"gw": plan}, "gw")
    port = free_port()
    # the role makes this folder for nginx's workers (www-data), who cannot reach a pytest folder
    state = tempfile.mkdtemp(prefix="llmfleet-budgets-")
    subprocess.run(["chown", "www-data:www-data", state], check=True)
    root = _render(tmp_path, model, gateway_listen=[f"127.0.0.1:{port}"], __gateway_keys=gw.api_keys(keys),
                   gateway_usage_accounting=True, gateway_budget_save_interval=interval, __gateway_budget_dir=state,
                   gateway_rate_limit="1000r/s", gateway_rate_burst=1000)
    conf = root / "llmfleet" / "gateway.conf"
    conf.write_text(conf.read_text().replace("/var/log/nginx/llmfleet-gateway.access.log", str(tmp_path / "access.log")))
    checked = _nginx_t(root)
    assert checked.returncode == 0, checked.stderr
    start_nginx(str(root))
    return {"url": f"http://127.0.0.1:{port}/v1", "engine": engine, "root": root, "state": state, "log": tmp_path / "access.log"}


@pytest.fixture()
def gateway(tmp_path):
    budgets = [{"tokens": 5 * (PROMPT + COMPLETION), "per": "day"}, {"tokens": 1000000, "per": "month"}]
    g = start(tmp_path, [{"name": "team", "key": TEAM, "budgets": budgets}, {"name": "other", "key": OTHER}])
    yield g
    stop(g)


def stop(g):
    stop_nginx(str(g["root"]))
    g["engine"].shutdown()
    g["engine"].server_close()
    shutil.rmtree(g["state"], ignore_errors=True)


def client(gateway, key, retries=0):
    return openai.OpenAI(base_url=gateway["url"], api_key=key, timeout=30, max_retries=retries)


def ask(c, stream=False):
    """One chat of PROMPT + COMPLETION tokens; a stream is read to its end."""
    if not stream:
        return c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=COMPLETION)
    return list(c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=COMPLETION,
                                          stream=True))


def day_end(now):
    return (int(now) // 86400 + 1) * 86400


def refused(gateway, key=TEAM, retries=0):
    with pytest.raises(openai.RateLimitError) as exc:
        ask(client(gateway, key, retries))
    return exc.value


def test_a_budget_runs_out_at_its_count_streamed_or_not_with_429_and_retry_after(gateway):
    team = client(gateway, TEAM)
    # five answers of 20 tokens each (three streamed: their usage event is asked for and taken out again) use the 100
    for n in range(5):
        ask(team, stream=n % 2 == 0)
    sent = len(gateway["engine"].bodies)
    # the openai client, let retry twice: x-should-retry false (the window ends in more than a minute) stops it
    error = refused(gateway, retries=2)
    now = time.time()
    body = error.body
    print(f"\nsixth request: HTTP {error.status_code} Retry-After {error.response.headers['retry-after']} "
          f"x-should-retry {error.response.headers.get('x-should-retry')} {json.dumps(body)}")
    assert error.status_code == 429 and body["code"] == "token_budget_exceeded" and body["type"] == "tokens"
    assert "budget of 100 tokens per day (100 used)" in body["message"]
    renews = datetime.datetime.fromtimestamp(day_end(now), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert f"renews at {renews}" in body["message"], body["message"]
    assert abs(int(error.response.headers["retry-after"]) - (day_end(now) - now)) <= 2
    assert TEAM not in json.dumps(body) and "team" not in body["message"], "the message names the budget, never the key"
    assert len(gateway["engine"].bodies) == sent == 5, "the refused requests reached no engine"
    statuses = [json.loads(x)["status"] for x in gateway["log"].read_text().splitlines()]
    assert statuses == ["200"] * 5 + ["429"], f"one refusal, no retry by the client: {statuses}"
    # another key is untouched
    assert ask(client(gateway, OTHER)).usage.total_tokens == PROMPT + COMPLETION


def test_the_counters_survive_a_reload_a_restart_and_a_crash(gateway):
    team = client(gateway, TEAM)
    for _n in range(5):
        ask(team)
    refused(gateway)
    root = gateway["root"]
    master = int((root / "nginx.pid").read_text())
    os.kill(master, signal.SIGHUP)
    time.sleep(1)
    assert refused(gateway).body["code"] == "token_budget_exceeded", "after a reload"
    stop_nginx(str(root))
    counters = open(os.path.join(gateway["state"], "counters"), encoding="utf-8").read()
    print(f"\nthe counters' file after a stop:\n{counters}")
    assert "\tu:" not in counters and counters.startswith("u:team:day:") and TEAM not in counters
    start_nginx(str(root))
    assert refused(gateway).body["code"] == "token_budget_exceeded", "after a stop and a start"
    # a crash: every nginx process killed at once (no worker writes anything on its way out); the file is at most one
    # save interval behind, and the budget was used up before it
    time.sleep(1.5)
    master = int((root / "nginx.pid").read_text())
    pids = [master] + [int(p) for p in subprocess.run(["pgrep", "-P", str(master)], capture_output=True, text=True,
                                                      check=False).stdout.split()]
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    (root / "nginx.pid").unlink()
    start_nginx(str(root))
    error = refused(gateway)
    assert error.body["code"] == "token_budget_exceeded" and "(100 used)" in error.body["message"], "after a crash"
    assert ask(client(gateway, OTHER)).usage.total_tokens == PROMPT + COMPLETION


@pytest.mark.parametrize("per", gw.BUDGET_PERIODS)
def test_each_periods_window_ends_where_the_calendar_says(tmp_path, per):
    g = start(tmp_path, [{"name": "team", "key": TEAM, "budgets": [{"tokens": 1, "per": per}]}])
    try:
        # the answer and the refusal in one window: not in a minute's last 10 s
        second = datetime.datetime.now(datetime.timezone.utc).second
        if second > 50:
            time.sleep(61 - second)
        ask(client(g, TEAM))
        error = refused(g)
        now = datetime.datetime.now(datetime.timezone.utc)
        day = now.replace(hour=0, minute=0, second=0, microsecond=0)
        ends = {"minute": now.replace(second=0, microsecond=0) + datetime.timedelta(minutes=1),
                "hour": now.replace(minute=0, second=0, microsecond=0) + datetime.timedelta(hours=1),
                "day": day + datetime.timedelta(days=1),
                "week": day + datetime.timedelta(days=7 - now.weekday()),
                "month": (day.replace(day=1) + datetime.timedelta(days=32)).replace(day=1)}[per]
        message = error.body["message"]
        print(f"\n{per}: {message} Retry-After {error.response.headers['retry-after']}")
        assert f"budget of 1 tokens per {per} ({PROMPT + COMPLETION} used); it renews at {ends:%Y-%m-%dT%H:%M:%SZ}" in message
        assert abs(int(error.response.headers["retry-after"]) - (ends - now).total_seconds()) <= 2
        left = (ends - now).total_seconds()
        if abs(left - 60) > 2:
            assert error.response.headers.get("x-should-retry") == ("false" if left > 60 else None)
    finally:
        stop(g)


def test_bad_budgets_are_named_never_the_key():
    cases = {"lots": r"budgets\[0\]\.tokens='lots': give a whole number of tokens above 0",
             0: r"budgets\[0\]\.tokens=0: give a whole number", True: r"budgets\[0\]\.tokens=True"}
    for tokens, message in cases.items():
        with pytest.raises(gw.GatewayError, match=r"gateway_api_keys\[0\] \(team\)\." + message) as exc:
            gw.api_keys([{"name": "team", "key": TEAM, "budgets": [{"tokens": tokens, "per": "day"}]}])
        assert TEAM not in str(exc.value)
    with pytest.raises(gw.GatewayError, match=r"budgets\[0\]\.per='year': one of minute, hour, day, week, month"):
        gw.api_keys([{"name": "team", "key": TEAM, "budgets": [{"tokens": 5, "per": "year"}]}])
    with pytest.raises(gw.GatewayError, match=r"budgets\[1\]: a second budget per day"):
        gw.api_keys([{"name": "team", "key": TEAM, "budgets": [{"tokens": 5, "per": "day"}, {"tokens": 6, "per": "day"}]}])
    with pytest.raises(gw.GatewayError, match=r"budgets must be a non-empty list of \{tokens, per\}"):
        gw.api_keys([{"name": "team", "key": TEAM, "budgets": {"tokens": 5, "per": "day"}}])
    keys = gw.api_keys([{"name": "team", "key": TEAM, "budgets": [{"tokens": "500", "per": "month"}, {"tokens": 5, "per": "day"}]}])
    assert keys[0]["budgets"] == [{"tokens": 5, "per": "day"}, {"tokens": 500, "per": "month"}]
    assert gw.key_budgets(keys, True) == {"names": ["team"], "lua": '{["team"] = {{tokens = 5, per = "day"}, {tokens = 500, per = "month"}}}'}
    with pytest.raises(gw.GatewayError, match=r"gateway_api_keys \(team\) have token budgets, which count the answers' usage: "
                                              "set gateway_usage_accounting to true"):
        gw.key_budgets(keys, False)
    assert gw.key_budgets(gw.api_keys([{"name": "x", "key": OTHER}]), False) == {"names": [], "lua": "{}"}
