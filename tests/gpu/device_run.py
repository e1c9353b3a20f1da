"""Runs on the lent H200 (its python3, the carried site on PYTHONPATH): for each run in a runs file,
start `vllm serve` with --load-format dummy, wait for /health, read vLLM's memory log lines,
run `vllm bench serve` (random dataset, fixed lengths, a concurrency sweep), stop the server, and
append the numbers to OUT/results.json (written after every run, so a cut call keeps what ran).

    python3 device_run.py --carry /tmp/carry --runs tests/gpu/runs.json --only LABEL[,LABEL] --out $OUT
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

PATTERNS = {
    "weights_gib": r"Model loading took ([\d.]+) GiB",
    "available_kv_gib": r"Available KV cache memory: ([\d.]+) GiB",
    "kv_cache_tokens": r"KV cache size: ([\d,]+) tokens",
    "max_concurrency": r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x",
    "peak_activation_gib": r"torch peak memory increase: ([\d.]+)GiB",
    "non_torch_gib": r"non-torch forward increase memory: ([\d.]+)GiB",
    "cudagraph_gib": r"Graph capturing finished in [\d.]+ secs?, took ([\d.-]+) GiB",
    "cudagraph_estimate_gib": r"[Ee]stimated CUDA graph memory: ([\d.]+) GiB",
    "block_size": r"Setting attention block size to (\d+) tokens",
    "torch_compile_s": r"torch.compile takes ([\d.]+) s in total",
}


def parse_log(text: str) -> dict:
    found = {}
    for key, pattern in PATTERNS.items():
        matches = re.findall(pattern, text)
        if matches:
            value = matches[-1].replace(",", "")
            found[key] = int(value) if key in ("kv_cache_tokens", "block_size") else float(value)
    return found


def wait_health(port: int, proc: subprocess.Popen, budget: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < budget:
        if proc.poll() is not None:
            return -1.0
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                if answer.status == 200:
                    return time.monotonic() - start
        except OSError:
            time.sleep(1)
    return -1.0


def bench_cmd(run: dict, model_dir: str, conc: int, prompts: int, out_dir: str, name: str, seed: int = 0) -> list:
    spec = run["bench"]
    return [sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "serve", "--backend", "vllm",
            "--base-url", f"http://127.0.0.1:{run['port']}", "--model", run["served"], "--tokenizer", model_dir,
            "--dataset-name", "random", "--random-input-len", str(spec["input"]), "--random-output-len", str(spec["output"]),
            "--num-prompts", str(prompts), "--max-concurrency", str(conc),
            "--ignore-eos", "--percentile-metrics", "ttft,tpot,itl", "--metric-percentiles", "50,99",
            "--save-result", "--result-dir", out_dir, "--result-filename", name, "--seed", str(seed)]


def prompts_for(spec: dict, conc: int) -> int:
    """Requests of one step: 10 for a single user; otherwise the run's count, and at least two per concurrent
    slot (a step at 4x the declared concurrency must fill every slot twice, not stop half-way)."""
    return 10 if conc == 1 else max(int(spec["prompts"]), 2 * conc)


def warm_up(run: dict, model_dir: str, env: dict, out_dir: str) -> float:
    """The sweep once, unrecorded, with other prompts of the same lengths (seed 1: the measured prompts,
    seed 0, must not be in the prefix cache yet - session 4 replayed seed 0 and measured cache hits): Triton JIT of kernels for new
    batch shapes (fused MoE picks a block config by batch size; GDN) happens here instead of inside a
    measured run. `bench.warmup: N` sends N prompts at the largest concurrency instead (configurations
    with few sequences, whose sweep takes minutes). Returns its wall time."""
    spec = run["bench"]
    sizes = [(conc, prompts_for(spec, conc)) for conc in spec["concurrency"]]
    if isinstance(spec.get("warmup"), int):
        sizes = [(max(spec["concurrency"]), spec["warmup"])]
    started = time.monotonic()
    for conc, prompts in sizes:
        name = f"{run['label']}-warmup-c{conc}.json"
        subprocess.run(bench_cmd(run, model_dir, conc, prompts, out_dir, name, seed=1), env=env, capture_output=True, text=True,
                       timeout=spec.get("timeout", 240), check=False)
        if os.path.exists(os.path.join(out_dir, name)):
            os.remove(os.path.join(out_dir, name))
    return round(time.monotonic() - started, 1)


def fresh_caches(label: str) -> dict:
    """Compile caches of this configuration alone. Triton's (~/.triton/cache), Inductor's and vLLM's
    torch.compile cache otherwise live on between configurations in one lease, and a configuration run
    later starts with the kernels an earlier one compiled - the third session's MoE rows got faster in
    the order they ran (1,172 -> 1,212 -> 1,354 -> 1,504 tok/s)."""
    root = os.path.join("/tmp/llmfleet-caches", f"{label}-{int(time.time())}")
    paths = {"VLLM_CACHE_ROOT": "vllm", "TRITON_CACHE_DIR": "triton", "TORCHINDUCTOR_CACHE_DIR": "inductor"}
    env = {}
    for var, sub in paths.items():
        env[var] = os.path.join(root, sub)
        os.makedirs(env[var], exist_ok=True)
    return env


def bench(run: dict, model_dir: str, env: dict, out_dir: str, results: list, save) -> list:
    """The sweep; `save()` after each concurrency, so a call cut at its limit keeps the steps that ran."""
    spec = run["bench"]
    for conc in spec["concurrency"]:
        name = f"{run['label']}-c{conc}.json"
        cmd = bench_cmd(run, model_dir, conc, prompts_for(spec, conc), out_dir, name)
        started = time.monotonic()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=spec.get("timeout", 240), check=False)
        path = os.path.join(out_dir, name)
        if proc.returncode != 0 or not os.path.exists(path):
            results.append({"concurrency": conc, "error": (proc.stdout + proc.stderr)[-1500:]})
            save()
            continue
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        os.remove(path)
        results.append({"concurrency": conc, "wall_s": round(time.monotonic() - started, 1),
                        **{k: data.get(k) for k in ("completed", "output_throughput", "request_throughput", "total_token_throughput",
                                                    "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms",
                                                    "median_itl_ms", "p99_itl_ms")}})
        save()
    return results


def write_results(path: str, results: list) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=1)


def write_log(logs, title: str, text: str) -> None:
    """vLLM's memory, graph, compile and error lines of `text` (the last 60) and its last 15 lines."""
    interesting = [line for line in text.splitlines() if "Capturing CUDA graphs" not in line  # progress bars
                   and re.search(r"KV cache|memory|Memory|GiB|graph|Error|error|Traceback|ready|compile|non-default|Running:", line)]
    logs.write(f"===== {title}\n" + "\n".join(interesting[-60:]) + "\n" + "\n".join(text.splitlines()[-15:]) + "\n")
    logs.flush()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--carry", required=True)
    parser.add_argument("--runs", required=True)
    parser.add_argument("--only", default="")
    parser.add_argument("--out", required=True)
    parser.add_argument("--no-bench", action="store_true", help="memory numbers only (when device time is short)")
    parser.add_argument("--shared-caches", action="store_true", help="let configurations share compile caches (before session 4)")
    parser.add_argument("--concurrency", default="", help="only these concurrency steps of each run's sweep, e.g. 32 (a slow "
                        "hand-flag run whose whole sweep does not fit one call)")
    args = parser.parse_args()
    with open(args.runs, encoding="utf-8") as handle:
        runs = json.load(handle)["runs"]
    wanted = [w for w in args.only.split(",") if w]
    results_path = os.path.join(args.out, "results.json")
    results = json.load(open(results_path, encoding="utf-8")) if os.path.exists(results_path) else []
    logs = open(os.path.join(args.out, "logs.txt"), "a", encoding="utf-8")
    for run in runs:
        if wanted and run["label"] not in wanted:
            continue
        if args.concurrency:
            steps = [int(c) for c in args.concurrency.split(",")]
            unknown = sorted(set(steps) - set(run["bench"]["concurrency"]))
            if unknown:
                raise SystemExit(f"{run['label']}: its sweep has no concurrency {unknown} (it has {run['bench']['concurrency']})")
            run = {**run, "bench": {**run["bench"], "concurrency": steps}}
        model_dir = os.path.join(args.carry, "models", run["model_dir"])
        env = dict(os.environ, **run.get("env", {}), VLLM_USE_FLASHINFER_SAMPLER="0", VLLM_NO_USAGE_STATS="1", PYTHONUNBUFFERED="1",
                   NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
        env.pop("CUDA_VISIBLE_DEVICES", None)
        if not args.shared_caches:
            env.update(fresh_caches(run["label"]))
        cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", model_dir, *run["args"], "--load-format", "dummy"]
        probe = socket.socket()
        if probe.connect_ex(("127.0.0.1", run["port"])) == 0:
            probe.close()
            raise SystemExit(f"port {run['port']} is already served by another process: stop it first (a left-over server?)")
        probe.close()
        log_file = f"/tmp/{run['label']}.log"
        print(f"== {run['label']}: {' '.join(cmd[3:])}", flush=True)
        with open(log_file, "w", encoding="utf-8") as log:
            server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        ready = wait_health(run["port"], server, run.get("startup_budget", 300))
        startup = open(log_file, encoding="utf-8", errors="replace").read()
        # written now, so a call cut during the benchmark still brings the start-up log back
        write_log(logs, f"{run['label']} (ready {ready:.1f} s)", startup)
        entry = {"label": run["label"], "model": run["model"], "config": run["config"], "args": run["args"], "ready_s": round(ready, 1),
                 "caches": "shared" if args.shared_caches else "fresh", "engine_log": parse_log(startup), "planned": run.get("planned", {})}
        results.append(entry)

        save = functools.partial(write_results, results_path, results)
        save()
        if ready > 0 and not args.no_bench:
            entry["warmup_s"] = warm_up(run, model_dir, env, args.out)
            entry["bench"] = []
            bench(run, model_dir, env, args.out, entry["bench"], save)
        elif ready <= 0:
            entry["error"] = "server did not become healthy"
            save()
        try:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=60)
        except ProcessLookupError:
            pass  # it had already exited (a failed start)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        text = open(log_file, encoding="utf-8", errors="replace").read()
        write_log(logs, f"{run['label']} (serving and shutdown)", text[len(startup):])
        print(json.dumps({k: entry.get(k) for k in ("label", "ready_s", "engine_log")}), flush=True)
        for b in entry.get("bench", []):
            print("   ", json.dumps(b), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
