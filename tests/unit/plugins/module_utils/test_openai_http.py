"""The one HTTP helper of vllm_ready and openai_check, against a real local HTTP server: the bearer key and
JSON body sent, JSON and text answers, an OpenAI-shaped error's own sentence, a stream's lines, a refused port."""

from __future__ import annotations

import http.server
import json
import socket
import threading

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _openai_http as h


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _send(self, status, body, kind="application/json"):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/text":
            self._send(200, "plain words", "text/plain")
        elif self.headers.get("Authorization") != "Bearer k":
            self._send(401, json.dumps({"error": {"message": "Unauthorized", "type": "auth"}}))
        else:
            self._send(200, json.dumps({"data": [{"id": "m"}]}))

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body.get("stream"):
            self._send(200, 'data: {"choices": []}\n\ndata: [DONE]\n\n', "text/event-stream")
        else:
            self._send(200, json.dumps({"echo": body, "type": self.headers.get("Content-Type")}))


@pytest.fixture(scope="module")
def base():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_get_with_the_key_and_without(base):
    assert h.call(base + "/v1/models", api_key="k") == (200, {"data": [{"id": "m"}]})
    status, payload = h.call(base + "/v1/models")
    assert status == 401 and h.error_text(payload) == "Unauthorized"


def test_post_sends_json_and_text_answers_stay_text(base):
    assert h.call(base + "/x", {"a": 1}, "k") == (200, {"echo": {"a": 1}, "type": "application/json"})
    assert h.call(base + "/text") == (200, "plain words")


def test_a_stream_is_read_as_lines(base):
    status, lines = h.call(base + "/x", {"stream": True}, "k", stream=True)
    assert status == 200 and [line.strip() for line in lines if line.strip()] == ['data: {"choices": []}', "data: [DONE]"]


def test_nothing_listening_gives_no_status_and_the_reason():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    status, why = h.call(f"http://127.0.0.1:{port}/health", timeout=5)
    assert status is None and "refused" in why.lower()


def test_error_text_of_other_shapes():
    assert h.error_text({"error": "quota"}) == "quota" and h.error_text("x" * 400) == "x" * 300 and h.error_text(None) == "None"
