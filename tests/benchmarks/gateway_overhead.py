"""The gateway's overhead (a benchmark, not a test): the same streamed chat requests sent through the
gateway and straight to one instance; prints TTFT p50/p95 and output tok/s for each.

    python tests/benchmarks/gateway_overhead.py --gateway http://172.30.77.10/v1 --gateway-key K \
        --direct http://127.0.0.1:8003/v1 --direct-key ENGINE_KEY --model tiny-b [-n 20] [--max-tokens 32]

Needs the `openai` package (the vLLM venvs have it). Sequential, bounded: n requests per target, each
with a timeout. Point it only at your own lab or loopback addresses.
"""

from __future__ import annotations

import argparse
import statistics
import time

import openai


def run(base: str, key: str, model: str, n: int, max_tokens: int):
    client = openai.OpenAI(base_url=base, api_key=key, timeout=120, max_retries=0)
    ttft, rates = [], []
    for i in range(n):
        start = time.perf_counter()
        first = None
        tokens = 0
        stream = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": f"Request {i}: tell a short story."}],
            temperature=0, seed=i, max_tokens=max_tokens, stream=True, stream_options={"include_usage": True})
        for chunk in stream:
            if first is None and chunk.choices and chunk.choices[0].delta.content:
                first = time.perf_counter()
            if chunk.usage:
                tokens = chunk.usage.completion_tokens
        end = time.perf_counter()
        ttft.append(((first or end) - start) * 1000)
        rates.append(tokens / (end - start))
    return ttft, rates


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
    run(args.direct, args.direct_key, args.model, 2, args.max_tokens)  # warm-up
    print(f"{'target':<8} {'TTFT p50 ms':>12} {'TTFT p95 ms':>12} {'output tok/s':>13}")
    for label, base, key in (("direct", args.direct, args.direct_key), ("gateway", args.gateway, args.gateway_key)):
        ttft, rates = run(base, key, args.model, args.n, args.max_tokens)
        print(f"{label:<8} {pct(ttft, 50):>12.1f} {pct(ttft, 95):>12.1f} {statistics.mean(rates):>13.1f}")


if __name__ == "__main__":
    main()
