"""An engine that stops answering, on a real nginx (Debian's nginx 1.22 + njs 0.7.9) with the gateway and an engine
host's edge rendered from the role's own templates: model `tiny` has two instances, each behind its edge server.

- Not running (killed, restarting: nothing listens on its port): its edge answers 503 without sending anything to it,
  and the gateway sends that request once more to the model's other instance: every client request is answered.
- Died after it received the request (it read it and closed the connection): its edge answers 502 and the gateway never
  sends that request to another engine (the other instance never sees its request id); the client gets the 502.
- A model with one instance that is not running: the client gets 503 in OpenAI's error shape (nothing to retry on).

The engines are stand-ins (a small HTTP server per instance that records the X-Request-Id of every request it reads and
answers a short SSE stream): vLLM's only part here is to be reached or not, and they show which engine got what."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _gateway as gw

from llmfleet_testing import free_port, start_nginx, stop_nginx
from test_gateway import _nginx_t, _render

KEY = "k" * 32
CHAT = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": True}).encode()


class Engine(ThreadingHTTPServer):
    """A stand-in engine on 127.0.0.1:port: `seen` holds the X-Request-Id of every request it read; mode `answer`
    streams three SSE events, mode `hang_up` reads the request and closes the connection without a byte."""
    daemon_threads = True

    def __init__(self, port, mode="answer"):
        self.seen, self.mode = [], mode
        super().__init__(("127.0.0.1", port), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def stop(self):
        self.shutdown()
        self.server_close()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.seen.append(self.headers.get("X-Request-Id"))
        if self.server.mode == "hang_up":
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        body = b"".join(f"data: {n}\n\n".encode() for n in range(3)) + b"data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def fleet(tmp_path, instances):
    """The gateway and the edge for model tiny with `instances` instances (engine ports free, nothing started), checked
    with nginx -t and started. Returns the gateway's port and the engine ports; stop both trees with stop_nginx."""
    engines = [free_port() for _n in range(instances)]
    plan = {"host": "eng", "deployments": [{"name": "tiny", "instances": [
        {"name": f"tiny-{n}", "served_model_name": "tiny", "port": port, "bind_address": "127.0.0.1",
         "edge": {"address": "127.0.0.1", "port": free_port()}} for n, port in enumerate(engines)]}]}
    edge = _render(tmp_path / "edge", None, gw.edge_model(plan, ["127.0.0.1"]))
    model = gw.gateway_model({"eng": plan}, "gw")
    assert model["errors"] == []
    port = free_port()
    gateway = _render(tmp_path / "gw", model, gateway_listen=[f"127.0.0.1:{port}"], __gateway_keys=gw.api_keys([{"name": "t", "key": KEY}]))
    for root in (edge, gateway):
        checked = _nginx_t(root)
        assert checked.returncode == 0, checked.stderr
        start_nginx(str(root))
    return {"port": port, "engines": engines, "roots": (edge, gateway)}


@pytest.fixture()
def lab(tmp_path):
    made = []

    def make(instances):
        made.append(fleet(tmp_path / f"f{len(made)}", instances))
        return made[-1]
    yield make
    for one in made:
        for root in one["roots"]:
            stop_nginx(str(root))


def chat(port, request_id):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json", "X-Request-Id": request_id}
    conn.request("POST", "/v1/chat/completions", body=CHAT, headers=headers)
    response = conn.getresponse()
    status, body = response.status, response.read().decode()
    conn.close()
    return status, body


def test_an_engine_that_is_not_running_is_skipped_and_no_client_sees_it(lab):
    fl = lab(2)
    alive = Engine(fl["engines"][0])        # tiny-1's port: nothing listens (killed, or restarting)
    try:
        answers = [chat(fl["port"], f"{n:032x}") for n in range(12)]
    finally:
        alive.stop()
    assert [status for status, _body in answers] == [200] * 12, answers
    assert all(body.endswith("data: [DONE]\n\n") for _status, body in answers)
    # the gateway sets its own X-Request-Id ($request_id): each request reached the running engine exactly once
    assert len(alive.seen) == 12 == len(set(alive.seen))


def test_a_request_an_engine_received_is_never_sent_to_another(lab):
    fl = lab(2)
    first, second = Engine(fl["engines"][0]), Engine(fl["engines"][1], mode="hang_up")
    try:
        answers = [chat(fl["port"], f"{n:032x}") for n in range(8)]
    finally:
        first.stop()
        second.stop()
    failed = [body for status, body in answers if status != 200]
    assert second.seen, "least_conn sends some of the requests to the engine that hangs up"
    # every request the dying engine read is answered 502 to its client, and none of them reached the other engine
    assert len(failed) == len(second.seen) and not set(second.seen) & set(first.seen)
    assert all(json.loads(body)["error"]["code"] == "bad_gateway" for body in failed), failed
    assert len(first.seen) + len(second.seen) == 8


def test_the_only_instance_not_running_is_503_in_openai_shape(lab):
    fl = lab(1)
    status, body = chat(fl["port"], "0" * 32)
    assert status == 503, body
    error = json.loads(body)["error"]
    assert error["code"] == "engine_unavailable" and "retry" in error["message"]
