"""Tokens per request in the gateway's access log, from the answers' own `usage`, on a real nginx (Debian's nginx 1.22 +
njs 0.7.9) with the gateway rendered from the role's templates in front of a stand-in engine that answers as vLLM does:

- a whole answer: its `usage` object, at its end, nested details included;
- a stream: vLLM sends its usage as a last event (`"choices":[]`) only when the request sets
  stream_options.include_usage; the gateway sets it when the client did not, and takes that event out of what the
  client receives, so the client gets the stream it asked for, byte for byte otherwise;
- a stream whose client asked for usage: the request reaches the engine as the client sent it, and the event stays.

The engine writes each event on its own (as vLLM does), some split in two writes, one in the middle of a UTF-8
character: the answer reaches the client whole. Several streams at once keep their own counts."""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import pathlib
import re
import shutil
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _gateway as gw

from llmfleet_testing import access_log, free_port, start_nginx, stop_nginx
from test_gateway import _nginx_t, _render

KEY = "k" * 32
TEXT = "héllo 你好 fleet"


class Engine(ThreadingHTTPServer):
    """`bodies`: each request's body as received, by the gateway's X-Request-Id."""
    daemon_threads = True

    def __init__(self, port):
        self.bodies = {}
        self.usages = {}
        super().__init__(("127.0.0.1", port), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):  # noqa: N802 (http.server's name)
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.bodies[self.headers.get("X-Request-Id")] = raw
        body = json.loads(raw)
        words = body["messages"][0]["content"].split()
        prompt, completion = len(words) + 7, int(body.get("max_tokens", 3))
        usage = {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion,
                 "prompt_tokens_details": {"cached_tokens": 0}}
        self.server.usages[self.headers.get("X-Request-Id")] = usage
        cut = self.headers.get("X-Test-Cut", "")
        if not body.get("stream"):
            answer = json.dumps({"id": "c", "object": "chat.completion", "model": "tiny",
                                 "choices": [{"index": 0, "message": {"role": "assistant", "content": TEXT}}],
                                 "usage": usage, "prompt_logprobs": None}, ensure_ascii=False).encode()   # spaced JSON
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            # key: the answer in two writes cut inside the "usage" key
            at = answer.index(b'"usage"') + 3 if cut == "key" else len(answer)
            for part in (answer[:at], answer[at:]):
                if part:
                    self.wfile.write(part)
                    self.wfile.flush()
                    time.sleep(0.05)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        events = [f'data: {json.dumps({"id": "c", "choices": [{"index": 0, "delta": {"content": TEXT}}]}, ensure_ascii=False)}\n\n'
                  for _n in range(completion)]
        if (body.get("stream_options") or {}).get("include_usage"):
            # compact, as vLLM writes it (pydantic)
            last = {"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": usage}
            events.append(f'data: {json.dumps(last, separators=(",", ":"))}\n\n')
        events.append("data: [DONE]\n\n")
        writes = []
        for n, event in enumerate(events):
            data = event.encode()
            # every second event in two writes, cut inside a character (你 is three bytes)
            writes += [data[:data.index("你".encode()) + 1], data[data.index("你".encode()) + 1:]] if n % 2 and "你" in event else [data]
        usage_event = events[-2].encode() if len(events) > 2 and '"usage"' in events[-2] else None
        if usage_event and cut == "usage":      # the usage event in two writes
            writes[-2:-1] = [usage_event[:40], usage_event[40:]]
        if usage_event and cut == "before-usage":   # a character's end and the usage event in one write
            content = events[-3].encode()
            at = content.index("你".encode()) + 1
            writes = writes[:-(3 if (len(events) - 3) % 2 == 0 else 4)] + [content[:at], content[at:] + usage_event, writes[-1]]
        pause = float(self.headers.get("X-Test-Slow", "0.01"))   # seconds between writes
        for part in writes:
            self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            self.wfile.flush()
            time.sleep(pause)
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *args):
        pass


@pytest.fixture(params=[True], ids=["accounting"])
def gateway(tmp_path, request):
    engine = Engine(free_port())
    plan = {"host": "gw", "deployments": [{"name": "tiny", "instances": [
        {"name": "tiny-0", "served_model_name": "tiny", "port": engine.server_address[1], "bind_address": "127.0.0.1"}]}]}
    model = gw.gateway_model({"gw": plan}, "gw")
    assert model["errors"] == []
    port = free_port()
    root = _render(tmp_path, model, gateway_listen=[f"127.0.0.1:{port}"], __gateway_keys=gw.api_keys([{"name": "team-a", "key": KEY}]),
                   gateway_usage_accounting=request.param)
    log = tmp_path / "access.log"
    conf = root / "llmfleet" / "gateway.conf"
    conf.write_text(conf.read_text().replace("/var/log/nginx/llmfleet-gateway.access.log", str(log)))
    checked = _nginx_t(root)
    assert checked.returncode == 0, checked.stderr
    start_nginx(str(root))
    yield {"port": port, "engine": engine, "log": log}
    stop_nginx(str(root))
    engine.shutdown()
    engine.server_close()


def chat(port, body, cut="", raw=None, key=KEY):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", "/v1/chat/completions", body=raw or json.dumps(body).encode(),
                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json", "X-Test-Cut": cut})
    response = conn.getresponse()
    status, data = response.status, response.read()
    conn.close()
    return status, data


def logged(gw_, count=1):
    """The access log's lines once it has `count` (nginx writes each once its request is finalized)."""
    lines = access_log(gw_["log"], count, timeout=5)
    assert len(lines) >= count, f"{count} lines expected in {gw_['log']}, got {lines}"
    return lines


def events(data):
    return [e for e in data.decode().split("\n\n") if e]


def test_a_whole_answer_is_logged_with_its_usage_and_reaches_the_client_unchanged(gateway):
    status, data = chat(gateway["port"], {"model": "tiny", "messages": [{"role": "user", "content": "one two three"}],
                                          "max_tokens": 5})
    assert status == 200
    answer = json.loads(data)
    assert answer["choices"][0]["message"]["content"] == TEXT and answer["usage"]["completion_tokens"] == 5
    [line] = logged(gateway)
    assert (line["key_name"], line["model"], line["prompt_tokens"], line["completion_tokens"]) == ("team-a", "tiny", "10", "5")


def test_a_stream_is_counted_without_the_client_seeing_the_usage_event_it_did_not_ask_for(gateway):
    request = {"model": "tiny", "messages": [{"role": "user", "content": "a b"}], "max_tokens": 6, "stream": True,
               "stream_options": {"continuous_usage_stats": True}}
    status, data = chat(gateway["port"], request)
    assert status == 200
    got = events(data)
    # six content events, whole (the characters cut across writes arrived intact), then [DONE]: no usage event
    assert got[-1] == "data: [DONE]" and len(got) == 7, got
    assert all(json.loads(e[6:])["choices"][0]["delta"]["content"] == TEXT for e in got[:-1])
    # the engine was asked for usage, the client's other stream options kept
    [sent] = gateway["engine"].bodies.values()
    # (continuous_usage_stats off: with include_usage on, vLLM would add usage to every chunk the client gets)
    assert json.loads(sent)["stream_options"] == {"continuous_usage_stats": False, "include_usage": True}
    [line] = logged(gateway)
    assert (line["prompt_tokens"], line["completion_tokens"]) == ("9", "6")


def test_a_stream_whose_client_asked_for_usage_is_passed_as_it_came(gateway):
    request = {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": 4, "stream": True,
               "stream_options": {"include_usage": True}}
    raw = json.dumps(request).encode()
    status, data = chat(gateway["port"], request)
    assert status == 200
    got = events(data)
    assert json.loads(got[-2][6:])["usage"]["completion_tokens"] == 4 and got[-1] == "data: [DONE]"
    assert list(gateway["engine"].bodies.values()) == [raw], "the client's body, byte for byte"
    [line] = logged(gateway)
    assert (line["prompt_tokens"], line["completion_tokens"]) == ("8", "4")


def test_streams_at_once_keep_their_own_counts(gateway):
    def one(n):
        return chat(gateway["port"], {"model": "tiny", "messages": [{"role": "user", "content": " ".join(["w"] * n)}],
                                      "max_tokens": n, "stream": True})
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(one, range(1, 7)))
    assert all(status == 200 and events(data)[-1] == "data: [DONE]" for status, data in answers)
    counts = sorted((int(line["prompt_tokens"]), int(line["completion_tokens"])) for line in logged(gateway, 6))
    assert counts == [(n + 7, n) for n in range(1, 7)], counts


def test_an_error_answer_has_no_usage(gateway):
    status, _data = chat(gateway["port"], {"model": "nope", "messages": []})
    assert status == 404
    [line] = logged(gateway)
    assert (line["prompt_tokens"], line["completion_tokens"]) == ("", "")


@pytest.mark.parametrize("gateway", [False], ids=["off"], indirect=True)
def test_with_accounting_off_the_engine_gets_the_clients_body_and_nothing_is_counted(gateway):
    request = {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2, "stream": True}
    status, data = chat(gateway["port"], request)
    assert status == 200 and events(data)[-1] == "data: [DONE]"
    assert list(gateway["engine"].bodies.values()) == [json.dumps(request).encode()]
    [line] = logged(gateway)
    assert (line["prompt_tokens"], line["completion_tokens"]) == ("", "")


@pytest.mark.parametrize("cut", ["usage", "before-usage"])
def test_a_usage_event_cut_across_writes_is_still_left_out_and_no_character_is_broken(gateway, cut):
    """`usage`: the engine writes the usage event in two parts; `before-usage`: the end of a character cut in two and
    the usage event arrive in one write (the stripped buffer keeps the character's bytes)."""
    status, data = chat(gateway["port"], {"model": "tiny", "messages": [{"role": "user", "content": "p q r"}],
                                          "max_tokens": 4, "stream": True}, cut=cut)
    assert status == 200
    got = events(data)
    assert got[-1] == "data: [DONE]" and len(got) == 5, got
    assert all(json.loads(e[6:])["choices"][0]["delta"]["content"] == TEXT for e in got[:-1]), got
    [line] = logged(gateway)
    assert (line["prompt_tokens"], line["completion_tokens"]) == ("10", "4")


def test_a_usage_key_cut_across_writes_of_a_whole_answer_is_found(gateway):
    status, data = chat(gateway["port"], {"model": "tiny", "messages": [{"role": "user", "content": "a"}], "max_tokens": 2},
                        cut="key")
    assert status == 200 and json.loads(data)["usage"]["completion_tokens"] == 2
    [line] = logged(gateway)
    assert (line["prompt_tokens"], line["completion_tokens"]) == ("8", "2")


def test_a_streamed_request_without_stream_options_keeps_its_bytes_and_gets_the_option_added(gateway):
    """The option goes before the body's last brace: nothing else of the client's body is written again (a seed over
    2^53 would not survive a JavaScript round trip)."""
    raw = b'{"model": "tiny", "seed": 12345678901234567891, "stream": true, "max_tokens": 1,\n "messages": [{"role": "user", "content": "s"}]}'
    status, data = chat(gateway["port"], None, raw=raw)
    assert status == 200 and events(data)[-1] == "data: [DONE]"
    [sent] = gateway["engine"].bodies.values()
    assert sent == raw[:-1] + b',"stream_options":{"include_usage":true}}'
    assert json.loads(sent)["seed"] == 12345678901234567891


# --- the monitoring role's counters over this log ---

ROLES = pathlib.Path(__file__).resolve().parents[4] / "roles"
PROGRAM = ROLES / "monitoring" / "files" / "llmfleet_gateway.mtail"
SAMPLE = re.compile(r'^(?P<name>[a-z_]+)\{(?P<labels>[^}]*)\} (?P<value>\S+)$')


def mtail_counters(tmp_path, log):
    """Debian's mtail (`make units` installs it) run once over `log` with the monitoring role's program:
    {(name, (label, value)...): value}, the prog label left out."""
    mtail = shutil.which("mtail")
    assert mtail, "mtail is not installed: run `make units` (tests/host-packages.sh mtail)"
    progs = tmp_path / "progs"
    progs.mkdir()
    shutil.copy(PROGRAM, progs)
    out = subprocess.run([mtail, "--one_shot", "--one_shot_format", "prometheus", "--logtostderr", "--progs", str(progs),
                          "--logs", str(log)], capture_output=True, text=True, check=True, timeout=60).stdout
    samples = {}
    for line in out.splitlines():
        match = SAMPLE.match(line)
        if match:
            labels = tuple(sorted((k, v) for k, v in re.findall(r'(\w+)="([^"]*)"', match["labels"]) if k != "prog"))
            samples[(match["name"], labels)] = float(match["value"])
    return samples


def test_the_monitoring_roles_program_reads_the_gateways_own_log(gateway, tmp_path):
    """What the monitoring role's mtail program makes of the log this gateway wrote: tokens per key name and model equal
    to the usage the engine sent, requests by status, every request in the duration histogram, its buckets adding up;
    a wrong key and an unknown model counted under no key and no model. The role reads the log the gateway writes."""
    port = gateway["port"]
    answers = []
    for n in range(1, 4):
        answers.append(chat(port, {"model": "tiny", "messages": [{"role": "user", "content": "w " * n}], "max_tokens": n}))
        answers.append(chat(port, {"model": "tiny", "messages": [{"role": "user", "content": "s " * n}], "max_tokens": n,
                                   "stream": True}))
    answers.append(chat(port, {"model": "tiny", "messages": [{"role": "user", "content": "u"}], "max_tokens": 2,
                               "stream": True, "stream_options": {"include_usage": True}}))
    assert [status for status, _data in answers] == [200] * 7
    assert chat(port, {"model": "nope", "messages": []})[0] == 404
    assert chat(port, {"model": "tiny", "messages": []}, key="wrong-" + KEY)[0] == 401
    logged(gateway, 9)
    got = mtail_counters(tmp_path, gateway["log"])
    sent = gateway["engine"].usages.values()
    team = (("key_name", "team-a"), ("model", "tiny"))
    print(f"\nengine sent {len(sent)} usages: prompt {sum(u['prompt_tokens'] for u in sent)}, completion "
          f"{sum(u['completion_tokens'] for u in sent)}; mtail: prompt {got[('llmfleet_gateway_prompt_tokens_total', team)]}, "
          f"completion {got[('llmfleet_gateway_completion_tokens_total', team)]}")
    assert got[("llmfleet_gateway_prompt_tokens_total", team)] == sum(u["prompt_tokens"] for u in sent)
    assert got[("llmfleet_gateway_completion_tokens_total", team)] == sum(u["completion_tokens"] for u in sent)
    requests = {labels: value for (name, labels), value in got.items() if name == "llmfleet_gateway_requests_total"}
    assert requests == {team + (("status", "200"),): 7.0, (("key_name", "team-a"), ("model", ""), ("status", "404")): 1.0,
                        (("key_name", ""), ("model", ""), ("status", "401")): 1.0}, requests
    for labels, count in ((team, 7.0), ((("key_name", ""), ("model", "")), 1.0)):
        assert got[("llmfleet_gateway_request_duration_seconds_count", labels)] == count
        for le in ("+Inf", "600"):   # every request lands in a bucket (a 0.000 request_time too)
            assert got[("llmfleet_gateway_request_duration_seconds_bucket", tuple(sorted(labels + (("le", le),))))] == count


def test_the_monitoring_role_reads_the_log_the_gateway_role_writes():
    conf = (ROLES / "gateway" / "templates" / "gateway.conf.j2").read_text()
    logs = re.findall(r"access_log (\S+) llmfleet_gateway;", conf)
    monitoring = (ROLES / "monitoring" / "vars" / "main.yml").read_text()
    assert logs and f"__monitoring_gateway_log: {logs[0]}" in monitoring.splitlines(), logs
