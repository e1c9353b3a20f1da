"""What a deployment's `routing` buys (a benchmark, not a test): two real vLLM CPU instances of one model on this machine
(planned by the planner, each on its own core), and two gateways rendered as the gateway role renders them (Ansible, the
role's filters and templates, nginx + njs) in front of both: one with routing least_conn, one with routing prefix. The
same multi-turn chats - each turn re-sends the conversation so far, as chat clients do - go through each gateway in
turn (least_conn, prefix, least_conn, prefix: the repeat shows the spread), with the official `openai` client, streamed.

Prints per phase: vLLM's own prefix-cache hit rate (the change of vllm:prefix_cache_hits over vllm:prefix_cache_queries,
both instances, in tokens), TTFT p50/p95 of the turns after the first (the ones that can hit) and of the first, and
how many requests each instance served.

    make bench-affinity     # or: python tests/benchmarks/affinity.py [--conversations 8] [--turns 5] [--workers 2]
                            #     [--user-words 24] [--max-tokens 24] [--repeats 2]

Each phase's conversations are new (other words, same lengths), so no phase reuses what an earlier one cached; vLLM
caches whole blocks only (128 tokens on CPU), so the conversations are made long enough to fill several. The model is the
lab's tiny one (random weights, so the answers are noise; their length is fixed by max_tokens).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import queue
import random
import re
import secrets
import statistics
import sys
import tempfile
import threading
import time
import urllib.request

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT / ".cache" / "collections"), str(ROOT / "tests")]

import openai  # noqa: E402  (requirements.txt)

from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host  # noqa: E402
from llmfleet_testing import (  # noqa: E402
    free_port, log_tail, make_tiny_model, render_gateway, start_nginx, start_vllm, stop_nginx, stop_process_group,
    this_machine_with_cpu_flags, wait_healthy)

LAB_MODEL = "/var/tmp/llmfleet-lab/models/tiny-qwen3"
WORDS = ("the model serves tokens on a small machine while the gateway routes requests to healthy engines and the "
         "operator reads plans that explain every decision about memory context tensor parallel groups and ports").split()
COUNTER = re.compile(r"^vllm:prefix_cache_(queries|hits)_total\{[^}]*\}\s+([0-9.e+]+)", re.M)
SUCCESS = re.compile(r"^vllm:request_success_total\{[^}]*\}\s+([0-9.e+]+)", re.M)


def metrics(port):
    """(queries, hits, requests finished) of the instance on `port`, from its own /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found = {"queries": 0.0, "hits": 0.0}
    for name, value in COUNTER.findall(text):
        found[name] += float(value)
    return found["queries"], found["hits"], sum(float(v) for v in SUCCESS.findall(text))


def words(rng, n):
    return " ".join(rng.choice(WORDS) for _word in range(n))


def conversations(seed, count, turns, user_words=24):
    """`count` conversations of `turns` user messages each: a system prompt of its own (so that no two share a cached
    prefix), then questions of `user_words` words (a long one stands for a pasted document)."""
    rng = random.Random(seed)
    return [{"system": f"conversation {seed}-{i}: " + words(rng, 160), "users": [words(rng, user_words) for _turn in range(turns)]}
            for i in range(count)]


def chat(client, conv, max_tokens):
    """One conversation, turn after turn: the TTFT of each turn (seconds)."""
    messages = [{"role": "system", "content": conv["system"]}]
    ttfts = []
    for user in conv["users"]:
        messages.append({"role": "user", "content": user})
        started, first, text = time.monotonic(), None, []
        stream = client.chat.completions.create(model="chat", messages=messages, max_tokens=max_tokens, temperature=0,
                                                stream=True)
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                if first is None:
                    first = time.monotonic() - started
                text.append(chunk.choices[0].delta.content)
        ttfts.append(first if first is not None else time.monotonic() - started)
        messages.append({"role": "assistant", "content": "".join(text)})
    return ttfts


def phase(url, key, convs, workers, max_tokens, ports):
    """The conversations through one gateway, `workers` at a time: hit rate, TTFT lists, requests per instance, wall."""
    before = [metrics(p) for p in ports]
    work = queue.Queue()
    for c in convs:
        work.put(c)
    results, errors = [], []

    def worker():
        client = openai.OpenAI(base_url=url + "/v1", api_key=key, timeout=300, max_retries=0)
        while True:
            try:
                conv = work.get_nowait()
            except queue.Empty:
                return
            try:
                results.append(chat(client, conv, max_tokens))
            except Exception as exc:  # pylint: disable=broad-except
                errors.append(repr(exc))

    started = time.monotonic()
    threads = [threading.Thread(target=worker) for _worker in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - started
    after = [metrics(p) for p in ports]
    queries = sum(a[0] - b[0] for a, b in zip(after, before))
    hits = sum(a[1] - b[1] for a, b in zip(after, before))
    return {"hit_rate": hits / queries if queries else 0.0, "hits": hits, "queries": queries,
            "first": [r[0] for r in results], "later": [t for r in results for t in r[1:]],
            "served": [int(a[2] - b[2]) for a, b in zip(after, before)], "wall": wall, "errors": errors}


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))] if values else float("nan")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--conversations", type=int, default=8)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--user-words", type=int, default=24, help="words per user message (a turn's new prompt)")
    args = parser.parse_args()

    work = pathlib.Path(tempfile.mkdtemp(prefix="llmfleet-bench-affinity-"))
    model_dir = LAB_MODEL if os.path.exists(f"{LAB_MODEL}/config.json") else make_tiny_model(str(work / "model"), "qwen3")
    deployment = {"name": "chat", "model": {"id": "llmfleet/tiny-qwen3", "path": model_dir}, "engine": {"version": "0.32.0"},
                  "workload": {"max_model_len": 2048, "concurrency": 4, "thinking": False},
                  "overrides": {"instances": 2, "cpu_kvcache_space_gib": 1}, "port": free_port()}
    # this machine's cores declared as two NUMA nodes of one core each (the planner puts one CPU instance on each node,
    # bound to its cores), as the fleet lab declares one core per engine host
    hardware = dict(this_machine_with_cpu_flags(), numa_cpus={0: "0", 1: "1"})
    plan = plan_host("localhost", hardware, [deployment])
    if plan["errors"]:
        sys.exit(f"the planner refused the benchmark's deployment: {plan['errors']}")
    instances = plan["deployments"][0]["instances"]
    ports = [i["port"] for i in instances]
    print("[bench-affinity] 2 instances of the lab's tiny model planned on this machine: "
          + ", ".join(f"{i['name']} port {i['port']} cpus {i.get('cpuset')}" for i in instances))
    engine_key, key = secrets.token_urlsafe(36), secrets.token_urlsafe(36)
    servers, roots = [], {}
    try:
        started = time.monotonic()
        servers = [start_vllm(i, str(work / f"{i['name']}.log"), extra_env={"VLLM_API_KEY": engine_key}) for i in instances]
        for way in ("least_conn", "prefix"):
            routed = json.loads(json.dumps(plan))
            routed["deployments"][0]["routing"] = way
            listen = f"127.0.0.1:{free_port()}"
            roots[way] = (render_gateway(str(work / way), {"localhost": routed}, "localhost", listen,
                                         [{"name": "bench", "key": key}], engine_key), f"http://{listen}")
            start_nginx(roots[way][0])
        for server, inst in zip(servers, instances):
            ready = wait_healthy(server, inst["port"], 600, started)
            if ready is None:
                sys.exit(f"{inst['name']} did not become healthy; log tail:\n" + log_tail(str(work / f"{inst['name']}.log")))
        print(f"[bench-affinity] both engines and both gateways up in {time.monotonic() - started:.0f} s; "
              f"{args.conversations} conversations x {args.turns} turns per phase, {args.workers} at a time, "
              f"{args.max_tokens} tokens per answer, {args.user_words} words per user message")
        # warm-up: one short conversation through each gateway (not counted)
        for way in roots:
            phase(roots[way][1], key, conversations(999 + len(way), 2, 2), 2, args.max_tokens, ports)
        rows = []
        seed = 0
        for repeat in range(args.repeats):
            for way in ("least_conn", "prefix"):
                seed += 1
                r = phase(roots[way][1], key, conversations(seed, args.conversations, args.turns, args.user_words),
                          args.workers, args.max_tokens, ports)
                rows.append((way, repeat + 1, r))
                print(f"[bench-affinity] {way:10} run {repeat + 1}: prefix-cache hit rate {r['hit_rate']:.1%} "
                      f"({r['hits']:.0f} of {r['queries']:.0f} prompt tokens), TTFT turns 2+ p50 {pct(r['later'], .5) * 1000:.0f} ms "
                      f"p95 {pct(r['later'], .95) * 1000:.0f} ms, turn 1 p50 {pct(r['first'], .5) * 1000:.0f} ms, "
                      f"served {r['served']}, {r['wall']:.0f} s" + (f", ERRORS {r['errors'][:3]}" if r["errors"] else ""))
        print("\n| routing | run | prefix-cache hit rate | TTFT turns 2+ p50 / p95 (ms) | TTFT turn 1 p50 (ms) | requests per instance | wall (s) |")
        print("|---|---|---|---|---|---|---|")
        for way, run, r in rows:
            print(f"| {way} | {run} | {r['hit_rate']:.1%} | {pct(r['later'], .5) * 1000:.0f} / {pct(r['later'], .95) * 1000:.0f} | "
                  f"{pct(r['first'], .5) * 1000:.0f} | {' / '.join(map(str, r['served']))} | {r['wall']:.0f} |")
        by = {w: [r for way, _run, r in rows if way == w] for w in ("least_conn", "prefix")}
        hit = {w: statistics.mean(r["hit_rate"] for r in by[w]) for w in by}
        later = {w: statistics.median(t for r in by[w] for t in r["later"]) for w in by}
        print(f"\nprefix vs least_conn, same conversations' shapes, one run: hit rate {hit['prefix']:.1%} vs {hit['least_conn']:.1%}; "
              f"TTFT p50 of turns 2+ x{later['prefix'] / later['least_conn']:.2f}")
        if any(r["errors"] for _w, _run, r in rows):
            sys.exit(1)
    finally:
        for root, _url in roots.values():
            stop_nginx(root)
        for server in servers:
            stop_process_group(server)


if __name__ == "__main__":
    main()
