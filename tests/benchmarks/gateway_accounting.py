"""What the gateway's token accounting costs (a benchmark, not a test): two gateways rendered from the gateway role's
templates on this machine's nginx + njs, one with gateway_usage_accounting on and one with it off, in front of the same
stand-in engine, and the engine straight; the same streamed chats sent to the three interleaved (direct, off, on,
direct, ...) so they see the same load, with the official `openai` client as users' code sends them (no
stream_options: the gateway with accounting asks the engine for usage and takes that event out again).

Prints TTFT p50/p95 and output tok/s per target, and on vs off side by side.

    make bench-gateway            # or: python tests/benchmarks/gateway_accounting.py [-n 200] [--max-tokens 256] [--token-ms 0]

The stand-in engine answers as vLLM's OpenAI server does (one SSE event per token, written on its own, a last usage
event when asked); --token-ms paces it (0: as fast as it can write, which puts the most events per second through the
gateway's body filter, the worst case for accounting). It stands in for vLLM only to take the engine's own time out of
the comparison: the gateway, nginx and njs are the real ones. Sequential and bounded; loopback only.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT / ".cache" / "collections"), str(ROOT / "tests"), str(ROOT / "tests" / "unit" / "plugins" / "module_utils")]

import openai  # noqa: E402  (requirements.txt)

from ansible_collections.llmfleet.serving.plugins.module_utils import _gateway as gw  # noqa: E402
from llmfleet_testing import free_port, start_nginx, stop_nginx  # noqa: E402
from test_gateway import _nginx_t, _render  # noqa: E402

KEY = "bench-key-0123456789abcdef"


class Engine(ThreadingHTTPServer):
    daemon_threads = True
    token_s = 0.0


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        tokens = int(body.get("max_tokens") or 16)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for n in range(tokens):
            chunk = {"id": "chatcmpl-b", "object": "chat.completion.chunk", "created": 0, "model": body["model"],
                     "choices": [{"index": 0, "delta": {"content": f" word{n}"}, "logprobs": None, "finish_reason": None}]}
            self.write(f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n".encode())
            if self.server.token_s:
                time.sleep(self.server.token_s)
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": 12, "total_tokens": 12 + tokens, "completion_tokens": tokens}
            last = {"id": "chatcmpl-b", "object": "chat.completion.chunk", "created": 0, "model": body["model"], "choices": [],
                    "usage": usage}
            self.write(f"data: {json.dumps(last, separators=(',', ':'))}\n\n".encode())
        self.write(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def write(self, data):
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def log_message(self, *args):
        pass


def gateway(tmp, name, engine_port, accounting):
    plan = {"host": "gw", "deployments": [{"name": "tiny", "instances": [
        {"name": "tiny-0", "served_model_name": "tiny", "port": engine_port, "bind_address": "127.0.0.1"}]}]}
    model = gw.gateway_model({"gw": plan}, "gw")
    port = free_port()
    folder = pathlib.Path(tmp, name)
    folder.mkdir()
    root = _render(folder, model, gateway_listen=[f"127.0.0.1:{port}"], __gateway_keys=gw.api_keys([{"name": "bench", "key": KEY}]),
                   gateway_usage_accounting=accounting, gateway_rate_limit="10000r/s", gateway_rate_burst=10000)
    conf = root / "llmfleet" / "gateway.conf"
    conf.write_text(conf.read_text().replace("/var/log/nginx/llmfleet-gateway.access.log", str(folder / "access.log")))
    checked = _nginx_t(root)
    if checked.returncode != 0:
        raise SystemExit(f"nginx -t refused the rendered gateway: {checked.stderr}")
    start_nginx(str(root))
    return root, port, folder / "access.log"


def one(client, i, max_tokens):
    """(TTFT ms, output tok/s, tokens received) of one streamed chat."""
    start = time.perf_counter()
    first, tokens = None, 0
    stream = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": f"Request {i}"}],
                                            max_tokens=max_tokens, stream=True)
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            first = first or time.perf_counter()
            tokens += 1
    end = time.perf_counter()
    return ((first or end) - start) * 1000, tokens / (end - start), tokens


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=200, help="streamed chats per target")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--token-ms", type=float, default=0.0, help="the stand-in engine's time per token")
    args = ap.parse_args()
    engine = Engine(("127.0.0.1", free_port()), Handler)
    engine.token_s = args.token_ms / 1000
    threading.Thread(target=engine.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory() as tmp:
        roots = []
        try:
            targets = {"direct": f"http://127.0.0.1:{engine.server_address[1]}/v1"}
            for label, accounting in (("off", False), ("on", True)):
                root, port, log = gateway(tmp, label, engine.server_address[1], accounting)
                roots.append((label, root, log))
                targets[label] = f"http://127.0.0.1:{port}/v1"
            clients = {label: openai.OpenAI(base_url=url, api_key=KEY, timeout=60, max_retries=0) for label, url in targets.items()}
            for client in clients.values():   # warm-up: connections, the workers' first requests
                one(client, -1, args.max_tokens)
            results = {label: ([], []) for label in clients}
            for i in range(args.n):
                for label, client in clients.items():
                    ttft, rate, got = one(client, i, args.max_tokens)
                    if got != args.max_tokens:
                        raise SystemExit(f"{label}: request {i} received {got} of {args.max_tokens} tokens")
                    results[label][0].append(ttft)
                    results[label][1].append(rate)
            time.sleep(0.5)
            counted = {label: [json.loads(x) for x in log.read_text().splitlines()] for label, _root, log in roots}
        finally:
            for _label, root, _log in roots:
                stop_nginx(str(root))
            engine.shutdown()
    logged = sum(int(x["completion_tokens"] or 0) for x in counted["on"] if x["request_id"])
    print(f"[bench] {args.n} streamed chats per target, {args.max_tokens} tokens each, engine "
          f"{'unpaced' if not args.token_ms else f'{args.token_ms} ms/token'}, interleaved direct/off/on; "
          f"nginx {os.popen('nginx -v 2>&1').read().strip().split('/')[-1]}")
    print(f"[bench] {'target':<22} {'TTFT p50 ms':>12} {'TTFT p95 ms':>12} {'tok/s mean':>11} {'tok/s p50':>10}")
    row = {}
    names = {"direct": "engine, straight", "off": "gateway, accounting off", "on": "gateway, accounting on"}
    for label, (ttft, rates) in results.items():
        row[label] = (pct(ttft, 50), pct(ttft, 95), statistics.mean(rates), pct(rates, 50))
        print(f"[bench] {names[label]:<22} {row[label][0]:>12.2f} {row[label][1]:>12.2f} {row[label][2]:>11.0f} {row[label][3]:>10.0f}")
    off, on = row["off"], row["on"]
    print(f"[bench] accounting on vs off: TTFT p50 {on[0] - off[0]:+.2f} ms ({100 * (on[0] / off[0] - 1):+.1f} %), "
          f"p95 {on[1] - off[1]:+.2f} ms, output tok/s {100 * (on[2] / off[2] - 1):+.1f} %")
    print(f"[bench] the accounting gateway logged {logged} completion tokens for {args.n + 1} chats "
          f"(the client received {(args.n + 1) * args.max_tokens}); the other logged "
          f"{sum(1 for x in counted['off'] if x['completion_tokens'])} lines with tokens")


if __name__ == "__main__":
    main()
