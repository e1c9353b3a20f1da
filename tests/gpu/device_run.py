"""Runs on the lent H200 (its python3, the carried site on PYTHONPATH): for each run in a runs file,
start `vllm serve` with --load-format dummy, wait for /health, read vLLM's memory log lines,
run `vllm bench serve` (random dataset, fixed lengths, a concurrency sweep), stop the server, and
append the numbers to OUT/results.json (written after every run, so a cut call keeps what ran).
Around every measured step the server's /metrics counters are read (preemptions, prompt tokens computed
or served from the prefix cache, ...): the step records their difference; `bench.poll_metrics: S` also
samples running / waiting requests and KV cache use every S seconds during the step.

A runs file of several GPUs (runs-multi.json, make_multi_runs.py) gives each configuration a list of `instances`: all
of them start together, each with its CUDA_VISIBLE_DEVICES, port, log and compile caches, and every benchmark step is
split over them (run_configuration); `--gpus 4` runs such a file on a machine of 4 GPUs (on_fewer_gpus). `--dry-run`
prints every command with the environment the runner sets and starts nothing (any machine, no vLLM needed).

The benchmark client of a single-server run runs in this process (InProcessBench): vLLM's own `vllm bench serve` code
(vllm.benchmarks.serve.main with its own argument parser), imported once while the server starts. Session 31 measured
35-41 s of wall time a step on the lent H100 for 5-10 s of load: a fresh `vllm bench serve` process pays the import
of vLLM every time. `--bench-subprocess` runs one process a step as before.

    python3 device_run.py --carry /tmp/carry --runs tests/gpu/runs.json --only LABEL[,LABEL] --out $OUT
    python3 device_run.py --carry /tmp/carry --runs tests/gpu/runs-multi.json --only LABEL --out $OUT
    python3 device_run.py --carry /tmp/carry --runs tests/gpu/runs-multi.json --dry-run
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from typing import Dict, Iterator, List, Optional, Tuple

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
            "--ignore-eos", "--percentile-metrics", "ttft,tpot,itl", "--metric-percentiles", "50,95,99",
            "--save-result", "--result-dir", out_dir, "--result-filename", name, "--seed", str(seed)]


class InProcessBench:
    """vLLM's benchmark client called in this process (the module docstring says why): `start()` imports it in a
    thread while the server starts; `run(cmd, timeout)` takes bench_cmd's command line and answers like
    subprocess.run (returncode, stdout, stderr), falling back to a subprocess when the import failed."""

    def __init__(self) -> None:
        self.entry: Optional[tuple] = None
        self.error = ""
        self.thread = threading.Thread(target=self._load, daemon=True)

    def start(self) -> "InProcessBench":
        self.thread.start()
        return self

    def _load(self) -> None:
        try:
            from vllm.benchmarks.serve import add_cli_args, main  # pylint: disable=import-outside-toplevel
            from vllm.utils.argparse_utils import FlexibleArgumentParser  # pylint: disable=import-outside-toplevel
            self.entry = (add_cli_args, main, FlexibleArgumentParser)
        except Exception as exc:  # pylint: disable=broad-except
            self.error = f"{type(exc).__name__}: {exc}"

    def run(self, cmd: List[str], env: dict, timeout: float) -> subprocess.CompletedProcess:
        self.thread.join()
        if self.entry is None:
            print(f"   in-process benchmark client unavailable ({self.error}): one process a step", flush=True)
            return run_client(cmd, env, timeout)
        add_cli_args, main, parser_class = self.entry
        parser = parser_class()
        add_cli_args(parser)
        args = parser.parse_args(cmd[cmd.index("serve") + 1:])
        out, box = io.StringIO(), {}

        def call() -> None:
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                    main(args)
                box["rc"] = 0
            except BaseException as exc:  # pylint: disable=broad-except
                box["rc"], box["error"] = 1, f"{type(exc).__name__}: {exc}"

        worker = threading.Thread(target=call, daemon=True)
        worker.start()
        worker.join(timeout)
        if worker.is_alive():
            return subprocess.CompletedProcess(cmd, -1, "", f"timed out after {timeout} s")
        return subprocess.CompletedProcess(cmd, box["rc"], out.getvalue()[-3000:], box.get("error", ""))


def run_client(cmd: List[str], env: dict, timeout: float, client: Optional[InProcessBench] = None) -> subprocess.CompletedProcess:
    """One benchmark run: in this process when `client` is given, else its own process."""
    if client is not None:
        return client.run(cmd, env, timeout)
    try:
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as cut:
        return subprocess.CompletedProcess(cmd, -1, str(cut.stdout or ""), f"timed out after {cut.timeout} s")


def step_seed(spec: dict, conc: int) -> int:
    """The measured step's prompt seed: its own per step (100 + its place in the sweep), never the warm-up's 1.
    vLLM's random dataset draws each prompt's start from one generator per run, and with fixed lengths the length draws
    take nothing from it (numpy's integers over a one-value range), so two runs of one seed start with the same prompts:
    session 32's step at 128 (256 prompts, seed 0 as every step then) found 98 of them - those of the step at 32 - in the
    prefix cache (50,112 of 131,074 prompt tokens)."""
    return 100 + list(spec["concurrency"]).index(conc)


def prompts_for(spec: dict, conc: int) -> int:
    """Requests of one step: 10 for a single user; otherwise the run's count, and at least two per concurrent
    slot (a step at 4x the declared concurrency must fill every slot twice, not stop half-way)."""
    return 10 if conc == 1 else max(int(spec["prompts"]), 2 * conc)


def warmup_sizes(spec: dict) -> List[Tuple[int, int]]:
    """(concurrency, prompts) of each warm-up run (warm_up's docstring)."""
    sizes = [(conc, prompts_for(spec, conc)) for conc in spec["concurrency"]]
    if isinstance(spec.get("warmup"), int):
        sizes = [(max(spec["concurrency"]), spec["warmup"])]
    elif isinstance(spec.get("warmup"), dict):
        sizes = [(int(spec["warmup"]["concurrency"]), int(spec["warmup"]["prompts"]))]
    return sizes


def warm_up(run: dict, model_dir: str, env: dict, out_dir: str, client: Optional[InProcessBench] = None) -> float:
    """The sweep once, unrecorded, with other prompts of the same lengths (seed 1: the measured prompts,
    step_seed's, must not be in the prefix cache yet - session 4 replayed seed 0 and measured cache hits): Triton JIT of kernels for new
    batch shapes (fused MoE picks a block config by batch size; GDN) happens here instead of inside a
    measured run. `bench.warmup: N` sends N prompts at the largest concurrency instead (configurations
    with few sequences, whose sweep takes minutes); `bench.warmup: {"prompts": N, "concurrency": C}` sends N
    at C (a short warm-up at the run's lengths). Returns its wall time."""
    spec = run["bench"]
    started = time.monotonic()
    for conc, prompts in warmup_sizes(spec):
        name = f"{run['label']}-warmup-c{conc}.json"
        proc = run_client(bench_cmd(run, model_dir, conc, prompts, out_dir, name, seed=1), env, spec.get("timeout", 240), client)
        if proc.returncode == -1:
            print(f"   warm-up at {conc} cut after {spec.get('timeout', 240)} s", flush=True)
        if os.path.exists(os.path.join(out_dir, name)):
            os.remove(os.path.join(out_dir, name))
    return round(time.monotonic() - started, 1)


def fresh_caches(label: str, make: bool = True) -> dict:
    """Compile caches of this configuration alone. Triton's (~/.triton/cache), Inductor's and vLLM's
    torch.compile cache otherwise live on between configurations in one lease, and a configuration run
    later starts with the kernels an earlier one compiled - the third session's MoE rows got faster in
    the order they ran (1,172 -> 1,212 -> 1,354 -> 1,504 tok/s)."""
    root = os.path.join("/tmp/llmfleet-caches", f"{label}-{int(time.time())}")
    paths = {"VLLM_CACHE_ROOT": "vllm", "TRITON_CACHE_DIR": "triton", "TORCHINDUCTOR_CACHE_DIR": "inductor"}
    env = {}
    for var, sub in paths.items():
        env[var] = os.path.join(root, sub)
        if make:
            os.makedirs(env[var], exist_ok=True)
    return env


# What the runner adds to every server's environment: no FlashInfer sampler (not carried), no usage stats, NVLink
# multicast off (NCCL NVLS and torch symmetric memory; the lent machines' notes ask for it)
RUNNER_ENV = {"VLLM_USE_FLASHINFER_SAMPLER": "0", "VLLM_NO_USAGE_STATS": "1", "PYTHONUNBUFFERED": "1", "NCCL_NVLS_ENABLE": "0",
              "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}


def server_env(label: str, run_env: dict, shared_caches: bool, make: bool = True) -> Tuple[Dict[str, str], Dict[str, str]]:
    """A server's environment and the part of it the runner sets (what --dry-run prints): the caller's environment and
    `run_env` without CUDA_VISIBLE_DEVICES (one GPU: the machine's own), RUNNER_ENV, and compile caches of its own."""
    own = {**run_env, **RUNNER_ENV}
    own.pop("CUDA_VISIBLE_DEVICES", None)
    if not shared_caches:
        own.update(fresh_caches(label, make))
    env = dict(os.environ, **own)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env, own


def serve_cmd(model_dir: str, args: List[str]) -> List[str]:
    return [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", model_dir, *args, "--load-format", "dummy"]


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


def bench(run: dict, model_dir: str, env: dict, out_dir: str, results: list, save, client: Optional[InProcessBench] = None) -> list:
    """The sweep; `save()` after each concurrency, so a call cut at its limit keeps the steps that ran."""
    spec = run["bench"]
    for conc in spec["concurrency"]:
        name = f"{run['label']}-c{conc}.json"
        cmd = bench_cmd(run, model_dir, conc, prompts_for(spec, conc), out_dir, name, seed=step_seed(spec, conc))
        before = scrape(run["port"])
        poller = MetricsPoller(run["port"], float(spec["poll_metrics"]), before.get("vllm:num_preemptions_total", 0.0)) if spec.get("poll_metrics") else None
        if poller:
            poller.start()
        started = time.monotonic()
        proc = run_client(cmd, env, spec.get("timeout", 240), client)
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
                                                    "median_ttft_ms", "p95_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms",
                                                    "median_itl_ms", "p99_itl_ms", "total_input_tokens", "total_output_tokens")},
                        # a counter that did not move is left out of the deltas: no preemption reads 0, no /metrics None
                        "preemptions": counters.get("vllm:num_preemptions_total", 0) if counters else None, "metrics": counters,
                        **({"sampled": sampled} if sampled else {})})
        save()
    return results


def probe_once(port: int, probe: dict) -> dict:
    """One request a run names (`probe`: path and JSON body) sent to the ready server: its status and the answer's shape
    (an embedding's length, a completion's text), so a memory-only run still shows the server answers its own API."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{probe['path']}", data=json.dumps(probe["body"]).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            status, body = resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return {"path": probe["path"], "status": exc.code, "error": exc.read().decode(errors="replace")[:500]}
    except (OSError, ValueError) as exc:
        return {"path": probe["path"], "status": 0, "error": str(exc)[:500]}
    data = body.get("data") or body.get("choices") or []
    first = data[0] if data else {}
    shape = {"items": len(data)}
    if isinstance(first.get("embedding"), list):
        shape["embedding_length"] = len(first["embedding"])
    if "score" in first:
        shape["score"] = first["score"]
    if "text" in first or "message" in first:
        shape["text"] = str(first.get("text") or first.get("message", {}).get("content"))[:80]
    return {"path": probe["path"], "status": status, **shape}


def write_results(path: str, results: list) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=1)


def write_log(logs, title: str, text: str) -> None:
    """vLLM's memory, graph, compile and error lines of `text` (the last 60) and its last 15 lines."""
    interesting = [line for line in text.splitlines() if "Capturing CUDA graphs" not in line  # progress bars
                   and re.search(r"KV cache|memory|Memory|GiB|graph|Error|error|Traceback|ready|compile|non-default|Running:", line)]
    logs.write(f"===== {title}\n" + "\n".join(interesting[-60:]) + "\n" + "\n".join(text.splitlines()[-15:]) + "\n")
    logs.flush()


def selected(runs: List[dict], args: argparse.Namespace) -> Iterator[dict]:
    """The runs --only names (all without it), with the sweep of --concurrency and the warm-up of --warmup-prompts."""
    wanted = [w for w in args.only.split(",") if w]
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
        if args.gpus and "instances" in run:
            run = on_fewer_gpus(run, args.gpus)
            if run is None:
                continue
        yield run


def on_fewer_gpus(run: dict, gpus: int) -> Optional[dict]:
    """`--gpus N` (a machine of 4 where the runs file declares 8): the instances on GPUs below N, and the sweep's streams
    and prompts cut in their proportion, so that every instance kept gets the load it gets on the whole host; None (and a
    line saying so) when no instance fits."""
    kept = [inst for inst in run["instances"] if max(inst["gpus"]) < gpus]
    if not kept:
        print(f"-- {run['label']}: skipped, every instance needs GPUs beyond the {gpus} of this machine", flush=True)
        return None
    n, k = len(run["instances"]), len(kept)
    spec = run["bench"]
    bench_spec = {**spec, "concurrency": [c * k // n for c in spec["concurrency"]], "prompts": -(-int(spec["prompts"]) * k // n)}
    if isinstance(spec.get("warmup"), int):
        bench_spec["warmup"] = -(-spec["warmup"] * k // n)
    return {**run, "instances": kept, "bench": bench_spec, "host_gpus": gpus, "instances_declared": n}


# ---- several instances (runs-multi.json) ----

def split(total: int, parts: int) -> List[int]:
    """`total` in `parts` shares that differ by one at most (the first ones larger)."""
    return [total // parts + (1 if k < total % parts else 0) for k in range(parts)]


def shares(run: dict, conc: int, prompts: int) -> List[Tuple[dict, int, int]]:
    """One benchmark client per instance: (the run aimed at that instance's port, its streams, its prompts). A
    least-connections gateway in front of equal instances keeps `conc` streams spread evenly, conc / n each, and so sends
    each instance its share of the prompts; fixed shares are the honest stand-in for it without a gateway on the machine
    (one difference: a gateway would move requests to an instance that finishes first, fixed shares cannot)."""
    n = len(run["instances"])
    if conc < n:
        raise SystemExit(f"{run['label']}: concurrency {conc} is below its {n} instances (every instance needs a stream)")
    return [({**run, "port": inst["port"]}, c, p) for inst, c, p in zip(run["instances"], split(conc, n), split(prompts, n))]


def instance_envs(run: dict, shared_caches: bool, make: bool = True) -> List[Tuple[Dict[str, str], Dict[str, str]]]:
    """Each instance's server environment (server_env with its own compile caches) with the plan's CUDA_VISIBLE_DEVICES,
    and the part the runner sets (CUDA_VISIBLE_DEVICES first)."""
    out = []
    for k, inst in enumerate(run["instances"]):
        env, own = server_env(f"{run['label']}-{k}", {}, shared_caches, make)
        out.append(({**env, **inst["env"]}, {**inst["env"], **own, **inst["env"]}))
    return out


def client_env() -> Tuple[Dict[str, str], Dict[str, str]]:
    """The benchmark clients' environment (they use no GPU) and the part the runner sets."""
    env, own = dict(os.environ, **RUNNER_ENV), dict(RUNNER_ENV)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env, own


BENCH_KEYS = ("completed", "duration", "output_throughput", "request_throughput", "total_token_throughput", "median_ttft_ms",
              "p95_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "median_itl_ms", "p99_itl_ms", "total_input_tokens",
              "total_output_tokens")


def bench_together(run: dict, model_dir: str, env: dict, conc: int, prompts: int, out_dir: str, tag: str, seed: int) -> List[dict]:
    """One `vllm bench serve` per instance, all at once, each with its share (shares()); one row per instance: its share, the
    numbers of its result file, or its error. Each client writes its output to a file (a full pipe would stall it)."""
    timeout = run["bench"].get("timeout", 240)
    clients = []
    for k, (sub, c, p) in enumerate(shares(run, conc, prompts)):
        name = f"{run['label']}-{tag}-i{k}.json"
        console = open(f"/tmp/{run['label']}-{tag}-i{k}.out", "w+", encoding="utf-8")
        proc = subprocess.Popen(bench_cmd(sub, model_dir, c, p, out_dir, name, seed=seed), env=env, stdout=console,
                                stderr=subprocess.STDOUT, text=True)
        clients.append((sub["port"], c, p, name, console, proc))
    deadline = time.monotonic() + timeout
    rows = []
    for port, c, p, name, console, proc in clients:
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        console.seek(0)
        tail = console.read()[-1500:]
        console.close()
        path = os.path.join(out_dir, name)
        row = {"port": port, "concurrency": c, "prompts": p}
        if proc.returncode != 0 or not os.path.exists(path):
            row["error"] = tail if proc.returncode is not None and proc.returncode >= 0 else f"cut after {timeout} s: {tail}"
        else:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
            row.update({k: data.get(k) for k in BENCH_KEYS})
        if os.path.exists(path):
            os.remove(path)
        rows.append(row)
    return rows


def merged(rows: List[dict]) -> dict:
    """One step over all instances. Counts and tokens add up. Output tok/s: every instance's output tokens over the
    longest instance's duration (the step's window as a gateway's client sees it), and the plain sum of the instances'
    own rates besides (a little higher when one finished first). Latency percentiles cannot be merged from percentiles:
    the rows keep each instance's p50 / p99 and the step reports the largest of them, an upper bound of the p50 / p99
    over all requests (if every instance has at most 1 % of its requests above X, so has their union)."""
    longest = max(r["duration"] for r in rows)
    out = {k: sum(r[k] for r in rows) for k in ("completed", "total_input_tokens", "total_output_tokens")}
    out.update({"output_throughput": round(out["total_output_tokens"] / longest, 2),
                "output_throughput_sum": round(sum(r["output_throughput"] for r in rows), 2),
                "request_throughput": round(out["completed"] / longest, 3), "longest_duration_s": round(longest, 2)})
    for metric in ("ttft", "tpot", "itl"):
        for pct in ("median", "p99"):
            out[f"max_{pct}_{metric}_ms"] = max(r[f"{pct}_{metric}_ms"] for r in rows)
    return out


def warm_up_together(run: dict, model_dir: str, env: dict, out_dir: str) -> float:
    """warm_up over all instances at once (seed 1, unrecorded); its wall time."""
    started = time.monotonic()
    for conc, prompts in warmup_sizes(run["bench"]):
        rows = bench_together(run, model_dir, env, conc, prompts, out_dir, f"warmup-c{conc}", seed=1)
        for row in rows:
            if "error" in row:
                print(f"   warm-up at {conc}, port {row['port']}: {row['error'][-300:]}", flush=True)
    return round(time.monotonic() - started, 1)


def bench_all(run: dict, model_dir: str, env: dict, out_dir: str, results: list, save) -> list:
    """The sweep over all instances; every step keeps the instances' rows, their /metrics deltas, and the merged numbers
    when every instance finished (`save()` after each step)."""
    for conc in run["bench"]["concurrency"]:
        before = [scrape(inst["port"]) for inst in run["instances"]]
        started = time.monotonic()
        rows = bench_together(run, model_dir, env, conc, prompts_for(run["bench"], conc), out_dir, f"c{conc}", seed=step_seed(run["bench"], conc))
        wall = round(time.monotonic() - started, 1)
        for row, inst, old in zip(rows, run["instances"], before):
            counters = metric_deltas(old, scrape(inst["port"]))
            row["metrics"] = counters
            row["preemptions"] = counters.get("vllm:num_preemptions_total", 0) if counters else None
        step = {"concurrency": conc, "prompts": prompts_for(run["bench"], conc), "wall_s": wall, "instances": rows}
        errors = [f"port {r['port']}: {r['error']}" for r in rows if "error" in r]
        if errors:
            step["error"] = "\n".join(errors)[-3000:]
        else:
            step.update(merged(rows))
            step["preemptions"] = None if any(r["preemptions"] is None for r in rows) else sum(r["preemptions"] for r in rows)
        results.append(step)
        save()
    return results


def stop(server: subprocess.Popen) -> None:
    try:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
    except ProcessLookupError:
        pass  # it had already exited (a failed start)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def run_configuration(run: dict, model_dir: str, args: argparse.Namespace, results: list, results_path: str, logs) -> None:
    """A configuration of several instances: all start at once (each its GPUs, port, log, compile caches), the runner
    waits for every one, records each one's memory lines, warms up and runs the sweep over all of them together, then
    stops them."""
    for inst in run["instances"]:
        probe = socket.socket()
        if probe.connect_ex(("127.0.0.1", inst["port"])) == 0:
            probe.close()
            raise SystemExit(f"port {inst['port']} is already served by another process: stop it first (a left-over server?)")
        probe.close()
    envs = instance_envs(run, args.shared_caches)
    servers, log_files = [], []
    started = time.monotonic()
    for k, (inst, (env, _own)) in enumerate(zip(run["instances"], envs)):
        cmd = serve_cmd(model_dir, inst["args"])
        log_files.append(f"/tmp/{run['label']}-{k}.log")
        print(f"== {run['label']} [{k}] CUDA_VISIBLE_DEVICES={inst['env'].get('CUDA_VISIBLE_DEVICES')}: {' '.join(cmd[3:])}", flush=True)
        with open(log_files[-1], "w", encoding="utf-8") as log:
            servers.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True))
    # one after another from the same start: an instance's ready_s is when the runner saw it healthy, not before the
    # instances ahead of it (the configuration is ready when its last one is); after a failed one the budget may be spent
    ready: List[Optional[float]] = [wait_healthy(server, inst["port"], run.get("startup_budget", 300), started)
                                    for server, inst in zip(servers, run["instances"])]
    startups = [open(path, encoding="utf-8", errors="replace").read() for path in log_files]
    for k, (text, seconds) in enumerate(zip(startups, ready)):
        write_log(logs, f"{run['label']} [{k}] (ready {-1.0 if seconds is None else seconds:.1f} s)", text)
    all_ready = all(seconds is not None for seconds in ready)
    entry = {"label": run["label"], "model": run["model"], "config": run["config"], "is_plan": run.get("is_plan", False),
             "layout": run.get("layout", {}), "ready_s": round(max(ready), 1) if all_ready else -1.0,
             # on a smaller machine (--gpus) the instances it held, of those the layout declares
             "instances_run": len(run["instances"]), "instances_declared": run.get("instances_declared", len(run["instances"])),
             "caches": "shared" if args.shared_caches else "fresh",
             "instances": [{"name": inst["name"], "port": inst["port"], "gpus": inst["gpus"], "args": inst["args"], "env": inst["env"],
                            "ready_s": -1.0 if seconds is None else round(seconds, 1), "engine_log": parse_log(text),
                            "planned": inst.get("planned", {})}
                           for inst, seconds, text in zip(run["instances"], ready, startups)],
             "bench_shape": {k: run["bench"].get(k) for k in ("dataset", "input", "output", "prompts", "warmup") if k in run["bench"]}}
    results.append(entry)
    save = functools.partial(write_results, results_path, results)
    save()
    client, _own = client_env()
    if all_ready and not args.no_bench:
        entry["warmup_s"] = warm_up_together(run, model_dir, client, args.out)
        entry["bench"] = []
        bench_all(run, model_dir, client, args.out, entry["bench"], save)
    elif not all_ready:
        entry["error"] = "not every instance became healthy: " + ", ".join(
            inst["name"] for inst, seconds in zip(run["instances"], ready) if seconds is None)
        save()
    for server in servers:
        stop(server)
    for k, (path, startup, row) in enumerate(zip(log_files, startups, entry["instances"])):
        text = open(path, encoding="utf-8", errors="replace").read()
        write_log(logs, f"{run['label']} [{k}] (serving and shutdown)", text[len(startup):])
        row["preemptions_logged"] = sum(int(n) for n in re.findall(r"Preemptions: (\d+)", text[len(startup):]))
    save()
    print(json.dumps({"label": entry["label"], "ready_s": entry["ready_s"],
                      "kv_cache_tokens": [[i["engine_log"].get("kv_cache_tokens"), i["planned"].get("kv_cache_tokens")]
                                          for i in entry["instances"]]}), flush=True)
    for step in entry.get("bench", []):
        print("   ", json.dumps({k: v for k, v in step.items() if k != "instances"}), flush=True)


# ---- --dry-run ----

def shell(own: Dict[str, str], cmd: List[str], unset_visible: bool) -> str:
    """A command as one shell line: `env` with what the runner sets, then the command."""
    return shlex.join(["env", *(["-u", "CUDA_VISIBLE_DEVICES"] if unset_visible else []), *(f"{k}={v}" for k, v in own.items()), *cmd])


def dry_run(run: dict, args: argparse.Namespace) -> None:
    """Every command `run` would start, in order, with the environment the runner sets (the rest is the caller's);
    nothing is started, no folder made. Serve lines: `serve <label> [k] port P: ...`; benchmark lines: `bench ...`."""
    model_dir = os.path.join(args.carry, "models", run["model_dir"])
    out_dir = args.out or "$OUT"
    bench_steps = [] if args.no_bench else [("warmup", conc, prompts, 1) for conc, prompts in warmup_sizes(run["bench"])] + [
        ("step", conc, prompts_for(run["bench"], conc), step_seed(run["bench"], conc)) for conc in run["bench"]["concurrency"]]
    if "instances" not in run:
        _env, own = server_env(run["label"], run.get("env", {}), args.shared_caches, make=False)
        print(f"== {run['label']} ({run['config']}): one server")
        print(f"serve {run['label']} [0] port {run['port']}: {shell(own, serve_cmd(model_dir, run['args']), True)} > /tmp/{run['label']}.log")
        for kind, conc, prompts, seed in bench_steps:
            name = f"{run['label']}-{'warmup-' if kind == 'warmup' else ''}c{conc}.json"
            print(f"bench {run['label']} {kind} c={conc}: {shell(own, bench_cmd(run, model_dir, conc, prompts, out_dir, name, seed), True)}")
        return
    layout = run.get("layout", {})
    print(f"== {run['label']} ({run['config']}{', the plan' if run.get('is_plan') else ''}): {len(run['instances'])} instance(s) of "
          f"TP={layout.get('tensor_parallel_size')}, expert parallel {layout.get('expert_parallel')}")
    for k, (inst, (_env, own)) in enumerate(zip(run["instances"], instance_envs(run, args.shared_caches, make=False))):
        print(f"serve {run['label']} [{k}] port {inst['port']}: {shell(own, serve_cmd(model_dir, inst['args']), False)} "
              f"> /tmp/{run['label']}-{k}.log")
    _client, client_own = client_env()
    for kind, conc, prompts, seed in bench_steps:
        tag = f"warmup-c{conc}" if kind == "warmup" else f"c{conc}"
        for k, (sub, c, p) in enumerate(shares(run, conc, prompts)):
            name = f"{run['label']}-{tag}-i{k}.json"
            print(f"bench {run['label']} {kind} c={conc} [{k}] port {sub['port']} ({c} of {conc} streams, {p} of {prompts} prompts): "
                  f"{shell(client_own, bench_cmd(sub, model_dir, c, p, out_dir, name, seed), True)}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--carry", required=True)
    parser.add_argument("--runs", required=True)
    parser.add_argument("--only", default="")
    parser.add_argument("--out", default="", help="where results.json and logs.txt go (required unless --dry-run)")
    parser.add_argument("--no-bench", action="store_true", help="memory numbers only (when device time is short)")
    parser.add_argument("--shared-caches", action="store_true", help="let configurations share compile caches (before session 4)")
    parser.add_argument("--concurrency", default="", help="only these concurrency steps of each run's sweep, e.g. 32 (a slow "
                        "hand-flag run whose whole sweep does not fit one call)")
    parser.add_argument("--warmup-prompts", type=int, default=0, help="warm up with one run of N prompts at the largest "
                        "concurrency instead of the run's own warm-up (session 14: the hybrid sweep, to fit the lease)")
    parser.add_argument("--gpus", type=int, default=0, help="runs of several GPUs on a machine with fewer (4 on the x4 kind): only "
                        "the instances on GPUs below N, the sweep cut in proportion; configurations that need more are skipped")
    parser.add_argument("--bench-subprocess", action="store_true", help="one `vllm bench serve` process a step (before session "
                        "32) instead of vLLM's benchmark client in this process")
    parser.add_argument("--dry-run", action="store_true", help="print every command (servers and benchmarks) with the environment "
                        "the runner sets, start nothing")
    args = parser.parse_args()
    if not args.out and not args.dry_run:
        parser.error("--out is required (unless --dry-run)")
    with open(args.runs, encoding="utf-8") as handle:
        runs = json.load(handle)["runs"]
    if args.dry_run:
        for run in selected(runs, args):
            dry_run(run, args)
        return 0
    results_path = os.path.join(args.out, "results.json")
    results = json.load(open(results_path, encoding="utf-8")) if os.path.exists(results_path) else []
    logs = open(os.path.join(args.out, "logs.txt"), "a", encoding="utf-8")
    client = None if args.bench_subprocess or args.no_bench else InProcessBench().start()
    for run in selected(runs, args):
        model_dir = os.path.join(args.carry, "models", run["model_dir"])
        if "instances" in run:
            run_configuration(run, model_dir, args, results, results_path, logs)
            continue
        env, _own = server_env(run["label"], run.get("env", {}), args.shared_caches)
        cmd = serve_cmd(model_dir, run["args"])
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
        if ready > 0 and run.get("probe"):
            entry["probe"] = probe_once(run["port"], run["probe"])
            save()
        if ready > 0 and not args.no_bench and not run.get("memory_only"):
            entry["warmup_s"] = warm_up(run, model_dir, env, args.out, client)
            entry["client"] = "subprocess" if client is None or client.entry is None else "in-process"
            entry["bench"] = []
            bench(run, model_dir, env, args.out, entry["bench"], save, client)
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
        print(json.dumps({k: entry.get(k) for k in ("label", "ready_s", "engine_log", "probe")}), flush=True)
        for b in entry.get("bench", []):
            print("   ", json.dumps(b), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
