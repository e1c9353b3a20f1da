"""Token budgets per key (gateway_api_keys[].budgets, issue 37) on a real nginx (Debian's nginx 1.22 + njs 0.7.9 + the
Lua module 0.10.23) with the gateway rendered from the role's templates, a stand-in engine that answers as vLLM does
(usage in a whole answer, and as a stream's last event when asked), and the official `openai` client:
- a budget runs out at the expected count: every answer's prompt + completion tokens are counted, streamed or not; the
  next request is answered 429 token_budget_exceeded with Retry-After (the seconds left in the window) and reaches no
  engine; the client raises RateLimitError and, told the window ends in more than a minute, does not retry; another
  key is untouched;
- the counters survive an nginx reload (the zone, the file taken away), a stop and start (the workers' exit writes
  them), and a crash (SIGKILL of every nginx process: worker 0's timer had written them);
- a stream whose client leaves before its usage passed is charged an estimate;
- each period's window (minute ... month, UTC) ends where the calendar says, today and at fixed edges (leap days, a
  year's end, a Sunday's last second);
- bad budgets are refused naming the value, never the key."""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

import openai
import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _gateway as gw

from llmfleet_testing import access_log, free_port, start_nginx, stop_nginx
from test_gateway import _nginx_t, _render
from test_gateway_usage import Engine

TEAM = "team-key-0123456789abcdef"
OTHER = "other-key-0123456789abcdef"
SPARE = "spare-key-0123456789abcdef"
# the stand-in engine's usage: prompt = words of the first message + 7, completion = max_tokens
PROMPT, COMPLETION = 8, 12


def start(tmp_path, keys, interval=1, extra_http=""):
    # every window (day, week, month) but the minute ends at a UTC midnight: a test that began in a day's last 90 s
    # could count its answers into one window and its refusal into the next (each test here takes under 20 s)
    left = day_end(time.time()) - time.time()
    if left < 90:
        time.sleep(left + 1)
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
                   gateway_rate_limit="1000r/s", gateway_rate_burst=1000, gateway_extra_http_config=extra_http)
    conf = root / "llmfleet" / "gateway.conf"
    conf.write_text(conf.read_text().replace("/var/log/nginx/llmfleet-gateway.access.log", str(tmp_path / "access.log")))
    checked = _nginx_t(root)
    assert checked.returncode == 0, checked.stderr
    start_nginx(str(root))
    # one connection pool for every client of the test (client() copies this one, which shares its HTTP client), so a
    # request sent after an answer goes on that answer's keep-alive connection, as an SDK client's does: nginx reads it
    # only once the answer's request is finalized, its log phase (where the answer is charged) included
    # (ngx_http_set_keepalive frees the request, logging it, before it reads the next one). A request on a new
    # connection in the instant after an answer can be admitted before that answer is charged: the overshoot
    # docs/gateway.md states ("How far over"), not what these tests count
    url = f"http://127.0.0.1:{port}/v1"
    return {"url": url, "engine": engine, "root": root, "state": state, "log": tmp_path / "access.log",
            "openai": openai.OpenAI(base_url=url, api_key="each-client-sets-its-own-key", timeout=30, max_retries=0)}


@pytest.fixture()
def gateway(tmp_path):
    budgets = [{"tokens": 5 * (PROMPT + COMPLETION), "per": "day"}, {"tokens": 1000000, "per": "month"}]
    g = start(tmp_path, [{"name": "team", "key": TEAM, "budgets": budgets}, {"name": "other", "key": OTHER},
                         {"name": "spare", "key": SPARE, "budgets": [{"tokens": PROMPT + COMPLETION, "per": "day"}]}])
    yield g
    stop(g)


def stop(g):
    g["openai"].close()
    stop_nginx(str(g["root"]))
    g["engine"].shutdown()
    g["engine"].server_close()
    shutil.rmtree(g["state"], ignore_errors=True)


def client(gateway, key, retries=0):
    return gateway["openai"].with_options(api_key=key, max_retries=retries)


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
    statuses = [line["status"] for line in access_log(gateway["log"], 6)]
    assert statuses == ["200"] * 5 + ["429"], f"one refusal, no retry by the client: {statuses}"
    # another key is untouched
    assert ask(client(gateway, OTHER)).usage.total_tokens == PROMPT + COMPLETION


def kill_all(root):
    """A crash: every nginx process of `root` killed at once (no worker writes anything on its way out)."""
    master = int((root / "nginx.pid").read_text())
    pids = [master] + [int(p) for p in subprocess.run(["pgrep", "-P", str(master)], capture_output=True, text=True,
                                                      check=False).stdout.split()]
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    (root / "nginx.pid").unlink()


def test_a_reload_keeps_the_counters_and_a_crash_loses_at_most_one_interval(gateway):
    team = client(gateway, TEAM)
    for _n in range(5):
        ask(team)
    refused(gateway)
    root, counters = gateway["root"], os.path.join(gateway["state"], "counters")
    time.sleep(1.5)          # the save interval is 1 s: the counters are in the file
    assert open(counters, encoding="utf-8").read().startswith("u:team:day:")
    # a reload: the file taken away first, so only the zone nginx kept can still know the count
    os.unlink(counters)
    os.kill(int((root / "nginx.pid").read_text()), signal.SIGHUP)
    time.sleep(1)
    assert refused(gateway).body["code"] == "token_budget_exceeded", "after a reload"
    # new tokens (another key with a budget), one interval, then a crash: worker 0's timer wrote them, with team's
    assert ask(client(gateway, SPARE)).usage.total_tokens == PROMPT + COMPLETION
    time.sleep(1.5)
    kill_all(root)
    text = open(counters, encoding="utf-8").read()
    print(f"\nthe counters' file after a crash:\n{text}")
    assert TEAM not in text and SPARE not in text and "u:team:day:" in text and "u:spare:day:" in text
    start_nginx(str(root))
    error = refused(gateway)
    assert error.body["code"] == "token_budget_exceeded" and "(100 used)" in error.body["message"], "after a crash"
    assert "(20 used)" in refused(gateway, SPARE).body["message"], "the tokens the timer wrote just before the crash"


def test_a_stop_writes_the_counters_before_the_next_save_and_the_start_reads_them(tmp_path):
    # a save interval of an hour: only the workers' exit writes the file
    g = start(tmp_path, [{"name": "team", "key": TEAM, "budgets": [{"tokens": 5 * (PROMPT + COMPLETION), "per": "day"}]}],
              interval=3600)
    try:
        for _n in range(5):
            ask(client(g, TEAM))
        counters = os.path.join(g["state"], "counters")
        assert not os.path.exists(counters)
        stop_nginx(str(g["root"]))
        assert open(counters, encoding="utf-8").read().startswith("u:team:day:")
        start_nginx(str(g["root"]))
        assert "(100 used)" in refused(g).body["message"], "after a stop and a start"
    finally:
        stop(g)


def test_a_stream_its_client_leaves_before_the_usage_is_charged_an_estimate(gateway):
    """A client that reads a few events of a long stream and hangs up: nginx stops the engine, no usage ever passes;
    the key is charged a token per 4 bytes of its request and one per event that passed."""
    team = client(gateway, TEAM)
    stream = team.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=400,
                                          stream=True, extra_headers={"X-Test-Slow": "0.05"})
    for n, _chunk in enumerate(stream):
        if n == 4:
            break
    stream.close()
    time.sleep(1)
    line = json.loads(gateway["log"].read_text().splitlines()[-1])
    assert line["status"] == "200" and line["prompt_tokens"] == "" and line["completion_tokens"] == "", line
    charged = int(line["request_length"]) // 4
    error = refused(gateway)
    used = int(re.search(r"\((\d+) used\)", error.body["message"]).group(1))
    print(f"\na stream left after 5 events: charged {used} tokens (request {line['request_length']} bytes)")
    assert charged + 5 <= used <= charged + 12, (used, charged)


WINDOW_PORT = free_port()
WINDOW_SERVER = """server {
    listen 127.0.0.1:%d;
    access_log off;
    location = /window {
        content_by_lua_block {
            local start, stop = llmfleet_budgets.window(ngx.var.arg_per, tonumber(ngx.var.arg_now))
            ngx.say(start, " ", stop)
        }
    }
}""" % WINDOW_PORT


def test_the_windows_of_the_calendars_edges(tmp_path):
    """The Lua code's windows at fixed moments, through a test server beside the gateway (gateway_extra_http_config)."""
    g = start(tmp_path, [{"name": "team", "key": TEAM, "budgets": [{"tokens": 1, "per": "day"}]}], extra_http=WINDOW_SERVER)

    def at(text):
        return int(datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc).timestamp())
    cases = [("month", "2024-02-29T12:00:00", "2024-02-01T00:00:00", "2024-03-01T00:00:00"),      # a leap day
             ("month", "2100-02-28T23:59:59", "2100-02-01T00:00:00", "2100-03-01T00:00:00"),      # 2100 is no leap year
             ("month", "2025-12-31T23:59:59", "2025-12-01T00:00:00", "2026-01-01T00:00:00"),      # the year's end
             ("month", "2026-01-01T00:00:00", "2026-01-01T00:00:00", "2026-02-01T00:00:00"),
             ("week", "2025-12-31T23:59:59", "2025-12-29T00:00:00", "2026-01-05T00:00:00"),       # a Wednesday
             ("week", "2026-12-06T23:59:59", "2026-11-30T00:00:00", "2026-12-07T00:00:00"),       # a Sunday's last second
             ("week", "2026-12-07T00:00:00", "2026-12-07T00:00:00", "2026-12-14T00:00:00"),       # a Monday's first
             ("day", "2024-02-29T23:59:59", "2024-02-29T00:00:00", "2024-03-01T00:00:00"),
             ("hour", "2026-12-31T23:30:00", "2026-12-31T23:00:00", "2027-01-01T00:00:00"),
             ("minute", "2026-12-31T23:59:30", "2026-12-31T23:59:00", "2027-01-01T00:00:00")]
    try:
        for per, now, first, last in cases:
            with urllib.request.urlopen(f"http://127.0.0.1:{WINDOW_PORT}/window?per={per}&now={at(now)}", timeout=10) as answer:
                got = answer.read().decode().split()
            assert [int(x) for x in got] == [at(first), at(last)], (per, now, got)
    finally:
        stop(g)


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
    assert gw.key_budgets(keys, True) == {"names": ["team"], "interval": 2,
                                          "lua": '{["team"] = {{tokens = 5, per = "day"}, {tokens = 500, per = "month"}}}'}
    for interval in (0, -1, "2s", True):
        with pytest.raises(gw.GatewayError, match=r"gateway_budget_save_interval=.*: give a whole number of seconds, 1 or more"):
            gw.key_budgets(keys, True, interval)
    with pytest.raises(gw.GatewayError, match=r"gateway_api_keys \(team\) have token budgets, which count the answers' usage: "
                                              "set gateway_usage_accounting to true"):
        gw.key_budgets(keys, False)
    assert gw.key_budgets(gw.api_keys([{"name": "x", "key": OTHER}]), False) == {"names": [], "lua": "{}", "interval": 2}
