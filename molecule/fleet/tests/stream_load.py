"""A bounded streaming load through the gateway, for the day-2 tests: WORKERS clients each send streamed chat
requests one after another (PAUSE seconds apart) until STOP_FILE exists (or MAX requests were sent), then it prints JSON:
sent, ok, failed (no HTTP 200, or the connection broke), truncated (200 but no `data: [DONE]`), the longest
gap in which no stream received a token, the wall time, and per failed or truncated request when it started and ended
(`failures`: wall-clock seconds, so a test can tell which requests were in flight at a moment of its own).
    python stream_load.py BASE_URL KEY MODEL STOP_FILE [--workers 4] [--max 600] [--tokens 160] [--pause 0]
Runs with a Python that has httpx (the CPU vLLM venv). Raw SSE lines, so the [DONE] end is seen as sent."""

import argparse
import json
import os
import threading
import time

import httpx

parser = argparse.ArgumentParser()
parser.add_argument("base")
parser.add_argument("key")
parser.add_argument("model")
parser.add_argument("stop_file")
parser.add_argument("--workers", type=int, default=4)
parser.add_argument("--max", type=int, default=600)
parser.add_argument("--tokens", type=int, default=160)
parser.add_argument("--pause", type=float, default=0.0, help="seconds each client waits between two requests")
args = parser.parse_args()

lock = threading.Lock()
stats = {"sent": 0, "ok": 0, "failed": 0, "truncated": 0, "errors": [], "failures": []}
token_times = []
t0 = time.monotonic()


def one(client):
    body = {"model": args.model, "messages": [{"role": "user", "content": "Tell a long story about the fleet."}],
            "max_tokens": args.tokens, "temperature": 0, "stream": True, "ignore_eos": True, "skip_special_tokens": False}
    done, error, times = False, None, []
    started = time.time()
    try:
        with client.stream("POST", args.base + "/chat/completions", json=body, headers={"Authorization": f"Bearer {args.key}"}) as resp:
            if resp.status_code != 200:
                error = f"HTTP {resp.status_code}: {resp.read()[:200]!r}"
            else:
                for line in resp.iter_lines():
                    if line == "data: [DONE]":
                        done = True
                    elif line.startswith("data:"):
                        times.append(time.monotonic())
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}"
    with lock:
        stats["sent"] += 1
        token_times.extend(times)
        if error:
            stats["failed"] += 1
            stats["errors"].append(error)
        elif not done:
            stats["truncated"] += 1
            stats["errors"].append(f"no [DONE] after {len(times)} events")
        if error or not done:
            stats["failures"].append({"start": round(started, 3), "end": round(time.time(), 3), "events": len(times)})
        else:
            stats["ok"] += 1


def worker():
    with httpx.Client(timeout=120) as client:
        while not os.path.exists(args.stop_file):
            with lock:
                if stats["sent"] >= args.max:
                    return
            one(client)
            time.sleep(args.pause)


threads = [threading.Thread(target=worker) for n in range(args.workers)]
for t in threads:
    t.start()
for t in threads:
    t.join()
token_times.sort()
gaps = [b - a for a, b in zip(token_times, token_times[1:])]
print(json.dumps(dict(stats, errors=stats["errors"][:10], failures=stats["failures"][:50], longest_gap_s=round(max(gaps, default=0.0), 2),
                      wall_s=round(time.monotonic() - t0, 1), tokens=len(token_times))))
