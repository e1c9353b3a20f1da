"""Runs on the lent H200 (its python3, the carried site on PYTHONPATH): for each run in a runs file,
start `vllm serve` with --load-format dummy, wait for /health, read vLLM's memory log lines,
run `vllm bench serve` (random dataset, fixed lengths, a concurrency sweep), stop the server, and
append the numbers to OUT/results.json (written after every run, so a cut call keeps what ran).
Around every measured step the server's /metrics counters are read (preemptions, prompt tokens computed
or served from the prefix cache, ...): the step records their difference; `bench.poll_metrics: S` also
samples running / waiting requests and KV cache use every S seconds during the step.

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
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/: llmfleet_testing (stdlib only)
from llmfleet_testing import wait_healthy  # noqa: E402  pylint: disable=wrong-import-position

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


def dataset_args(spec: dict) -> list:
    """`bench.dataset`: "random" (the default: vLLM's random dataset, fixed lengths) or "prefix_repetition" with no
    shared prefix. The random dataset builds each prompt as (offset + index + 0, 1, 2 ...) mod the vocabulary, and
    the carried tokenizer has 465 tokens: of 256 prompts only ~196 are distinct (the rest repeat one exactly and
    share its KV blocks through the prefix cache). prefix_repetition with prefix length 0 draws every token at
    random: all distinct (checked with the carried tokenizer; 7,000 +- 2 tokens after re-encoding)."""
    if spec.get("dataset", "random") == "random":
        return ["--dataset-name", "random", "--random-input-len", str(spec["input"]), "--random-output-len", str(spec["output"])]
    if spec["dataset"] == "prefix_repetition":
        return ["--dataset-name", "prefix_repetition", "--prefix-repetition-prefix-len", "0", "--prefix-repetition-num-prefixes", "1",
                "--prefix-repetition-suffix-len", str(spec["input"]), "--prefix-repetition-output-len", str(spec["output"])]
    raise SystemExit(f"unknown bench.dataset {spec['dataset']!r}")


def bench_cmd(run: dict, model_dir: str, conc: int, prompts: int, out_dir: str, name: str, seed: int = 0) -> list:
    spec = run["bench"]
    return [sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "serve", "--backend", "vllm",
            "--base-url", f"http://127.0.0.1:{run['port']}", "--model", run["served"], "--tokenizer", model_dir,
            *dataset_args(spec), "--num-prompts", str(prompts), "--max-concurrency", str(conc),
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
    with few sequences, whose sweep takes minutes); `bench.warmup: {"prompts": N, "concurrency": C}` sends N
    at C (a short warm-up at the run's lengths). Returns its wall time."""
    spec = run["bench"]
    sizes = [(conc, prompts_for(spec, conc)) for conc in spec["concurrency"]]
    if isinstance(spec.get("warmup"), int):
        sizes = [(max(spec["concurrency"]), spec["warmup"])]
    elif isinstance(spec.get("warmup"), dict):
        sizes = [(int(spec["warmup"]["concurrency"]), int(spec["warmup"]["prompts"]))]
    started = time.monotonic()
    for conc, prompts in sizes:
        name = f"{run['label']}-warmup-c{conc}.json"
        try:
            subprocess.run(bench_cmd(run, model_dir, conc, prompts, out_dir, name, seed=1), env=env, capture_output=True, text=True,
                           timeout=spec.get("timeout", 240), check=False)
        except subprocess.TimeoutExpired:
            print(f"   warm-up at {conc} cut after {spec.get('timeout', 240)} s", flush=True)
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


# Histograms whose _sum and _count a step records besides every counter (seconds a request spent waiting for a
# slot, in prefill, in decode; prompt tokens its prefill computed, i.e. without prefix-cache hits).
HISTOGRAMS = ("vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
              "vllm:request_inference_time_seconds", "vllm:request_prefill_kv_computed_tokens", "vllm:e2e_request_latency_seconds")
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfINFaN]+)")
DROP_LABELS = re.compile(r'(model_name|engine)="[^"]*",?')


def scrape(port: int) -> dict:
    """The server's /metrics as {name{labels}: value}, vLLM's series only, without the model_name and engine labels
    (one model, one engine); {} when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode("utf-8", errors="replace")
    except OSError:
        return {}
    found = {}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if not match or not match.group(1).startswith("vllm:"):
            continue
        labels = DROP_LABELS.sub("", match.group(2) or "").replace(",}", "}").replace("{}", "")
        key = match.group(1) + labels
        try:
            found[key] = found.get(key, 0.0) + float(match.group(3))
        except ValueError:
            continue
    return found


def metric_deltas(before: dict, after: dict) -> dict:
    """What a step added to every counter (`..._total`) and to the _sum / _count of HISTOGRAMS; zeros left out."""
    deltas = {}
    for key, value in after.items():
        name = key.split("{", 1)[0]
        wanted = name.endswith("_total") or any(name in (h + "_sum", h + "_count") for h in HISTOGRAMS)
        if wanted and key in before and value - before[key] != 0:
            deltas[key] = round(value - before[key], 3)
    return deltas


class MetricsPoller(threading.Thread):
    """Samples GAUGES and the preemption counter every `period` seconds while a step runs: their peaks, and a
    coarse series [seconds, running, waiting, KV use, preemptions so far]."""

    def __init__(self, port: int, period: float, preempted_before: float):
        super().__init__(daemon=True)
        self.port, self.period, self.base = port, period, preempted_before
        self.done = threading.Event()
        self.peaks, self.series = {}, []

    def run(self) -> None:
        start = time.monotonic()
        while not self.done.wait(self.period):
            values = scrape(self.port)
            if not values:
                continue
            preempted = values.get("vllm:num_preemptions_total", 0.0)
            for gauge in GAUGES:
                if gauge in values:
                    self.peaks[gauge] = max(self.peaks.get(gauge, 0.0), values[gauge])
            self.series.append([round(time.monotonic() - start, 1), *(round(values.get(g, -1.0), 3) for g in GAUGES),
                                round(preempted - self.base)])

    def result(self) -> dict:
        self.done.set()
        self.join(timeout=10)
        return {"period_s": self.period, "peaks": {k.split(":", 1)[1]: round(v, 3) for k, v in self.peaks.items()},
                "series": self.series}


def bench(run: dict, model_dir: str, env: dict, out_dir: str, results: list, save) -> list:
    """The sweep; `save()` after each concurrency, so a call cut at its limit keeps the steps that ran."""
    spec = run["bench"]
    for conc in spec["concurrency"]:
        name = f"{run['label']}-c{conc}.json"
        cmd = bench_cmd(run, model_dir, conc, prompts_for(spec, conc), out_dir, name)
        before = scrape(run["port"])
        poller = MetricsPoller(run["port"], float(spec["poll_metrics"]), before.get("vllm:num_preemptions_total", 0.0)) if spec.get("poll_metrics") else None
        if poller:
            poller.start()
        started = time.monotonic()
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=spec.get("timeout", 240), check=False)
        except subprocess.TimeoutExpired as cut:
            proc = subprocess.CompletedProcess(cmd, -1, str(cut.stdout or ""), f"timed out after {cut.timeout} s")
        counters = metric_deltas(before, scrape(run["port"]))
        sampled = poller.result() if poller else None
        path = os.path.join(out_dir, name)
        if proc.returncode != 0 or not os.path.exists(path):
            results.append({"concurrency": conc, "error": (proc.stdout + proc.stderr)[-1500:], "metrics": counters,
                            "preemptions": counters.get("vllm:num_preemptions_total", 0) if counters else None,
                            **({"sampled": sampled} if sampled else {})})
            save()
            continue
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        os.remove(path)
        results.append({"concurrency": conc, "wall_s": round(time.monotonic() - started, 1),
                        **{k: data.get(k) for k in ("completed", "output_throughput", "request_throughput", "total_token_throughput",
                                                    "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms",
                                                    "median_itl_ms", "p99_itl_ms", "total_input_tokens", "total_output_tokens")},
                        # a counter that did not move is left out of the deltas: no preemption reads 0, no /metrics None
                        "preemptions": counters.get("vllm:num_preemptions_total", 0) if counters else None, "metrics": counters,
                        **({"sampled": sampled} if sampled else {})})
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
    parser.add_argument("--warmup-prompts", type=int, default=0, help="warm up with one run of N prompts at the largest "
                        "concurrency instead of the run's own warm-up (session 14: the hybrid sweep, to fit the lease)")
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
        if args.warmup_prompts:
            run = {**run, "bench": {**run["bench"], "warmup": args.warmup_prompts}}
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
        healthy = wait_healthy(server, run["port"], run.get("startup_budget", 300), time.monotonic())
        ready = -1.0 if healthy is None else healthy
        startup = open(log_file, encoding="utf-8", errors="replace").read()
        # written now, so a call cut during the benchmark still brings the start-up log back
        write_log(logs, f"{run['label']} (ready {ready:.1f} s)", startup)
        entry = {"label": run["label"], "model": run["model"], "config": run["config"], "args": run["args"], "ready_s": round(ready, 1),
                 "caches": "shared" if args.shared_caches else "fresh", "engine_log": parse_log(startup), "planned": run.get("planned", {}),
                 "bench_shape": {k: run["bench"].get(k) for k in ("dataset", "input", "output", "prompts", "warmup") if k in run["bench"]}}
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
        # the engine's 10-second stat lines add "Preemptions: N" for an interval that had any (warm-up and sweep together):
        # a cross-check of the /metrics counter the steps record. vLLM 0.26 resets that count before it formats the line
        # (LoggingStatLogger.log: _update_stats -> _reset), so there it reads 0 whatever happened (session 14: 0 logged, 26 counted)
        entry["preemptions_logged"] = sum(int(n) for n in re.findall(r"Preemptions: (\d+)", text[len(startup):]))
        save()
        print(json.dumps({k: entry.get(k) for k in ("label", "ready_s", "engine_log")}), flush=True)
        for b in entry.get("bench", []):
            print("   ", json.dumps(b), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
