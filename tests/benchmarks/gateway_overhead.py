"""The gateway's overhead (a benchmark, not a test): the same streamed chat requests sent through the
gateway and straight to one instance, interleaved (direct, gateway, direct, ...) so both see the same load;
prints TTFT p50/p95 and output tok/s for each, and the difference.

    python tests/benchmarks/gateway_overhead.py --gateway http://172.30.77.10/v1 --gateway-key K \
        --direct http://127.0.0.1:8003/v1 --direct-key ENGINE_KEY --model tiny-b [-n 20] [--max-tokens 32]

Run it on an engine host (the direct URL is the instance's loopback port): the gateway path is then
client -> gateway nginx -> this host's edge nginx -> vLLM. Needs the `openai` package (the vLLM venvs have
it). Sequential, bounded: n requests per target, each with a timeout. Point it only at your own hosts.
"""

from __future__ import annotations

import argparse
import statistics
import time

import openai


def one(client, model: str, i: int, max_tokens: int):
    """(TTFT ms, output tok/s) of one streamed request; EOS ignored, so every request makes max_tokens."""
    start = time.perf_counter()
    first = None
    tokens = 0
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": f"Request {i}: tell a short story."}],
        temperature=0, seed=i, max_tokens=max_tokens, stream=True, stream_options={"include_usage": True},
        extra_body={"ignore_eos": True})
    for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter()
        if chunk.usage:
            tokens = chunk.usage.completion_tokens
    end = time.perf_counter()
    return ((first or end) - start) * 1000, tokens / (end - start)


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gateway", required=True)
    ap.add_argument("--gateway-key", required=True)
    ap.add_argument("--direct", required=True)
    ap.add_argument("--direct-key", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=32)
    args = ap.parse_args()
    clients = {"direct": openai.OpenAI(base_url=args.direct, api_key=args.direct_key, timeout=120, max_retries=0),
               "gateway": openai.OpenAI(base_url=args.gateway, api_key=args.gateway_key, timeout=120, max_retries=0)}
    for label in clients:   # warm-up: connections, the engine's first-request costs
        one(clients[label], args.model, -1, args.max_tokens)
    results = {label: ([], []) for label in clients}
    for i in range(args.n):
        for label, client in clients.items():
            ttft, rate = one(client, args.model, i, args.max_tokens)
            results[label][0].append(ttft)
            results[label][1].append(rate)
    print(f"[bench] {args.n} streamed requests per target, {args.max_tokens} output tokens each, model {args.model}, interleaved")
    print(f"[bench] {'target':<8} {'TTFT p50 ms':>12} {'TTFT p95 ms':>12} {'output tok/s':>13}")
    row = {}
    for label, (ttft, rates) in results.items():
        row[label] = (pct(ttft, 50), pct(ttft, 95), statistics.mean(rates))
        print(f"[bench] {label:<8} {row[label][0]:>12.1f} {row[label][1]:>12.1f} {row[label][2]:>13.1f}")
    d, g = row["direct"], row["gateway"]
    print(f"[bench] overhead: TTFT p50 {g[0] - d[0]:+.1f} ms, p95 {g[1] - d[1]:+.1f} ms, output tok/s {100 * (g[2] / d[2] - 1):+.1f} %")


if __name__ == "__main__":
    main()
