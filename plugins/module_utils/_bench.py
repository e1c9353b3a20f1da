# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""PRIVATE module_utils of llmfleet.serving: bench.yml's sweep, its records, the baseline ratios and the
Markdown report. Pure and typed; `vllm bench serve` is run by the bench_serve module, the files and charts
are written by the bench_report module.

Facts (vLLM vllm/benchmarks/serve.py; docs/sources.md#benchmarks): `vllm bench serve` ships in every vLLM build, the CPU one included;
`--backend openai-chat --endpoint /v1/chat/completions --dataset-name random --random-input-len I
--random-output-len O --ignore-eos --num-prompts P --max-concurrency N --percentile-metrics ttft,tpot,itl,e2el
--metric-percentiles 50,95,99 --save-result --save-detailed --result-dir D --result-filename F` writes one JSON with
`completed`, `failed`, `request_throughput`, `output_throughput`, `total_token_throughput`, `duration` and
`mean_/median_/pNN_{ttft,tpot,itl,e2el}_ms` (and, detailed, each failed request's `errors`); the key comes from `OPENAI_API_KEY`; offline it needs
`--tokenizer <local model folder>`.
Pooling models: `--backend openai-embeddings --endpoint /v1/embeddings` (vLLM PR #23000 added embedding benchmarks,
#26010/#26310 named the backend openai-embeddings: 0.11.1 is the first release planned with it) sends each random prompt
to /v1/embeddings and writes `completed`, `failed`, `request_throughput`, `input_sequence_throughput` (embeddings/s),
`total_token_throughput` and the e2el percentiles, no output tokens (serve.py calculate_metrics_for_embeddings,
EmbedBenchmarkMetrics, vllm 0.32). Classifiers and rerankers are not measured: the score and classify backends need their own
datasets, which the sweep's random prompts are not; the step says so.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ._engine import EngineError, parse_version
from ._fleet_plans import api_instances

DEFAULT_CONCURRENCY = (1, 4, 16, 64)
PERCENTILES = (50, 95, 99)
LATENCIES = ("ttft", "tpot", "itl", "e2el")
# what a row keeps of vLLM's result file
KEPT = ("completed", "failed", "duration", "request_throughput", "output_throughput", "total_token_throughput",
        "total_input_tokens", "total_output_tokens", "input_sequence_throughput") + tuple(
    f"{kind}_{name}_ms" for name in LATENCIES for kind in ("mean", "median") + tuple(f"p{p}" for p in PERCENTILES))
# the gate's metrics and which way is better: throughput and whole-request latency (over many tokens, so
# steadier than TTFT on a busy host)
GATE = {"output_throughput": "higher", "median_e2el_ms": "lower", "input_sequence_throughput": "higher"}
# `vllm bench serve --backend openai-embeddings` (see above)
EMBEDDINGS_BENCH_SINCE = (0, 11, 1)
# the report's columns: (field, heading, format)
COLUMNS = (("output_throughput", "output tok/s", "{:.1f}"), ("request_throughput", "req/s", "{:.2f}"),
           ("median_ttft_ms", "TTFT p50 ms", "{:.1f}"), ("p95_ttft_ms", "TTFT p95", "{:.1f}"),
           ("p99_ttft_ms", "TTFT p99", "{:.1f}"), ("median_tpot_ms", "TPOT p50 ms", "{:.2f}"),
           ("median_itl_ms", "ITL p50 ms", "{:.2f}"), ("median_e2el_ms", "e2e p50 ms", "{:.1f}"),
           ("p95_e2el_ms", "e2e p95", "{:.1f}"), ("p99_e2el_ms", "e2e p99", "{:.1f}"))
# a pooling deployment's columns: embeddings per second instead of output tokens, no TTFT / TPOT (one answer per request)
POOLING_COLUMNS = (("input_sequence_throughput", "embeddings/s", "{:.1f}"), ("request_throughput", "req/s", "{:.2f}"),
                   ("total_token_throughput", "input tok/s", "{:.1f}"), ("median_e2el_ms", "e2e p50 ms", "{:.1f}"),
                   ("p95_e2el_ms", "e2e p95", "{:.1f}"), ("p99_e2el_ms", "e2e p99", "{:.1f}"))
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,80}$")


class BenchError(ValueError):
    """Malformed input, said as a sentence with the fix."""


def _positive_int(value: Any, what: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if number < 1 or isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise BenchError(f"{what} must be a whole number above 0, got {value!r}")
    return number


def concurrency_steps(values: Any) -> List[int]:
    """The sweep's concurrency steps, ascending: a list, or a comma-separated string (`-e bench_concurrency=1,8`)."""
    if isinstance(values, str):
        values = [v for v in values.replace(" ", "").split(",") if v]
    if not isinstance(values, Sequence) or not values:
        raise BenchError(f"bench_concurrency must be a non-empty list of whole numbers, e.g. [1, 4, 16, 64]; got {values!r}")
    return sorted({_positive_int(v, "each bench_concurrency step") for v in values})


def check_run_id(run_id: Any, what: str = "bench_run_id") -> str:
    text = str(run_id or "")
    if not RUN_ID.match(text):
        raise BenchError(f"{what} {run_id!r} is not a run name (letters, digits, . _ -; it names a folder under the bench directory)")
    return text


SETTINGS = {"concurrency": list(DEFAULT_CONCURRENCY), "prompts_per_step": 4, "min_prompts": 8, "input_len": 256,
            "output_len": 128, "warmups": 2, "seed": 0, "timeout": 1800}


def settings_of(given: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """bench.yml's settings with defaults filled in and each value checked."""
    given = dict(given or {})
    unknown = sorted(set(given) - set(SETTINGS))
    if unknown:
        raise BenchError(f"unknown bench settings {unknown}; known: {sorted(SETTINGS)}")
    out = dict(SETTINGS, **given)
    out["concurrency"] = concurrency_steps(out["concurrency"])
    for name in ("prompts_per_step", "min_prompts", "input_len", "output_len", "timeout"):
        out[name] = _positive_int(out[name], f"bench_{name}")
    for name in ("warmups", "seed"):
        if isinstance(out[name], bool) or not isinstance(out[name], int) or out[name] < 0:
            raise BenchError(f"bench_{name} must be a whole number 0 or above, got {out[name]!r}")
    return out


def target_key(target: Mapping[str, Any]) -> str:
    """How a target is named in records and baselines: `gateway`, or host/instance."""
    return "gateway" if target.get("via") == "gateway" else f"{target['host']}/{target['instance']}"


def client_of(instance: Mapping[str, Any]) -> Dict[str, Any]:
    """How this host runs the benchmark client for one of its instances (one entry of the vllm role's output
    vllm_engines, the vllm_engines filter): the engine's own install - the instance's venv, or inside its container."""
    runtime = instance.get("runtime")
    if runtime == "systemd":
        return {"runtime": "systemd", "python": f"{instance['venv']}/bin/python", "tokenizer": str(instance["model_dir"])}
    if runtime == "docker":
        # the container mounts the model folder at the same path (_serving.docker_spec)
        return {"runtime": "docker", "container": str(instance["container"]), "tokenizer": str(instance["model_dir"])}
    raise BenchError(f"instance {instance.get('name')!r} has runtime {runtime!r}; the benchmark client runs in a venv or a container")


def items(targets: Sequence[Mapping[str, Any]], instances: Sequence[Mapping[str, Any]], settings: Mapping[str, Any],
          deployments: Optional[Sequence[str]] = None, only: Optional[Sequence[str]] = None) -> List[Dict[str, Any]]:
    """One `vllm bench serve` run per target and concurrency step, in order: targets as given (the
    gateway's first), each sweep ascending. `instances` are this host's (vllm_engines): each target's
    client is the engine install of this host's instance of the same deployment. `deployments` and `only`
    (target kinds `gateway`, `instance`, or target keys) narrow the runs."""
    s = settings_of(settings)
    clients: Dict[str, Dict[str, Any]] = {}
    for inst in instances:
        clients.setdefault(str(inst["deployment"]), client_of(inst))
    out = []
    for t in targets:
        dep = str(t["deployment"])
        if deployments and dep not in deployments:
            continue
        key = target_key(t)
        if only and not ({key, str(t.get("via"))} & set(only)):
            continue
        if dep not in clients:
            raise BenchError(f"{dep}: this host has no instance of it to run the benchmark client from "
                             "(the client is the engine's own install)")
        base = re.sub(r"/v1/?$", "", str(t["url"]).rstrip("/"))
        pooling, skip = _pooling_mode(t)
        if skip:
            # one entry that runs nothing: bench_serve reports it skipped with this reason
            out.append({"deployment": dep, "target": key, "via": t.get("via", "instance"), "host": t.get("host"), "base_url": base,
                        "model": str(t["model"]), "engine_version": str(t.get("engine_version", "")), "client": clients[dep],
                        "concurrency": s["concurrency"][0], "num_prompts": 0, "skip": skip})
            continue
        for step in s["concurrency"]:
            out.append({"deployment": dep, "target": key, "via": t.get("via", "instance"), "host": t.get("host"),
                        "base_url": base, "model": str(t["model"]), "engine_version": str(t.get("engine_version", "")),
                        "client": clients[dep], "concurrency": step,
                        "num_prompts": max(s["min_prompts"], step * s["prompts_per_step"]),
                        "input_len": s["input_len"], "output_len": s["output_len"], "warmups": s["warmups"],
                        # a new seed per step and run: random prompts the server has not seen (no prefix-cache hits);
                        # numpy takes seeds below 2**32
                        "seed": (s["seed"] * 1000 + step) % 2 ** 32, "timeout": s["timeout"],
                        **({"pooling": pooling} if pooling else {})})
    return out


def _pooling_mode(target: Mapping[str, Any]) -> Tuple[Optional[str], Optional[str]]:
    """(pooling mode, skip reason) of a target: (None, None) for a generative model; ("embed", None) for an embedding model
    whose engine has the openai-embeddings backend; (None, why) for what the sweep cannot measure."""
    if target.get("runner") != "pooling":
        return None, None
    model = str(target.get("model"))
    if target.get("pooling_task") != "embed":
        return None, (f"{model} is a {target.get('pooling_task')} pooling model (classifier or reranker): vllm bench serve measures "
                      "them only with score/classify datasets of their own, not the sweep's random prompts; not measured")
    try:
        version = parse_version(str(target.get("engine_version") or ""))
    except EngineError:
        version = (0, 0, 0)
    if version < EMBEDDINGS_BENCH_SINCE:
        return None, (f"{model} is an embedding model on vLLM {target.get('engine_version') or 'of an unknown version'}: its "
                      f"bench serve has no openai-embeddings backend before {'.'.join(map(str, EMBEDDINGS_BENCH_SINCE))}; not measured")
    return "embed", None


def label(item: Mapping[str, Any]) -> str:
    return f"{item['deployment']} · {item['target']} · concurrency {item['concurrency']} · {item['num_prompts']} prompts"


def command(item: Mapping[str, Any], result_dir: str, result_file: str) -> List[str]:
    """argv of one step. The key is passed in the environment (OPENAI_API_KEY), never on the command line."""
    client = item["client"]
    if item.get("skip"):
        raise BenchError(f"{label(item)}: not measured: {item['skip']}; pass it to bench_serve, which reports it skipped")
    embed = item.get("pooling") == "embed"
    # an embedding model: /v1/embeddings, no output length, whole-request latency only (serve.py: e2el for pooling models)
    backend = ["--backend", "openai-embeddings", "--endpoint", "/v1/embeddings"] if embed else \
        ["--backend", "openai-chat", "--endpoint", "/v1/chat/completions"]
    output = [] if embed else ["--random-output-len", str(item["output_len"]), "--ignore-eos"]
    bench = ["bench", "serve", *backend,
             "--base-url", str(item["base_url"]), "--model", str(item["model"]), "--tokenizer", str(client["tokenizer"]),
             "--dataset-name", "random", "--random-input-len", str(item["input_len"]), *output,
             "--num-prompts", str(item["num_prompts"]), "--max-concurrency", str(item["concurrency"]),
             "--num-warmups", str(item["warmups"]), "--seed", str(item["seed"]),
             "--percentile-metrics", "e2el" if embed else ",".join(LATENCIES),
             "--metric-percentiles", ",".join(str(p) for p in PERCENTILES),
             "--disable-tqdm", "--save-result", "--save-detailed", "--result-dir", result_dir, "--result-filename", result_file]
    if str(item["base_url"]).startswith("https://"):
        bench.append("--insecure")   # the gateway's certificate may be self-signed; the key still goes over TLS
    if client["runtime"] == "systemd":
        return [client["python"], "-m", "vllm.entrypoints.cli.main", *bench]
    return ["docker", "exec", "-e", "OPENAI_API_KEY", "-e", "HF_HUB_OFFLINE=1", client["container"], "vllm", *bench]


def row(item: Mapping[str, Any], raw: Mapping[str, Any]) -> Dict[str, Any]:
    """What a record keeps of one step: where, how, and vLLM's numbers."""
    metrics = {k: raw[k] for k in KEPT if isinstance(raw.get(k), (int, float)) and not isinstance(raw.get(k), bool)}
    if "completed" not in metrics:
        raise BenchError(f"{label(item)}: vLLM's result file has no `completed` field; is the client's vLLM too old for bench serve?")
    metrics.setdefault("failed", max(0, int(item["num_prompts"]) - int(metrics["completed"])))
    out = {k: item[k] for k in ("deployment", "target", "via", "host", "model", "engine_version", "concurrency",
                                "num_prompts", "input_len", "output_len")}
    out["metrics"] = metrics
    return out


def progress(r: Mapping[str, Any]) -> str:
    m = r["metrics"]
    if "input_sequence_throughput" in m:
        return (f"{r['deployment']} · {r['target']} · concurrency {r['concurrency']}: {int(m['completed'])}/{r['num_prompts']} done, "
                f"{int(m.get('failed', 0))} failed, {m['input_sequence_throughput']:.1f} embeddings/s, "
                f"e2e p50 {m.get('median_e2el_ms', 0):.1f} ms in {m.get('duration', 0):.1f} s")
    return (f"{r['deployment']} · {r['target']} · concurrency {r['concurrency']}: {int(m['completed'])}/{r['num_prompts']} done, "
            f"{int(m.get('failed', 0))} failed, {m.get('output_throughput', 0):.1f} output tok/s, "
            f"TTFT p50 {m.get('median_ttft_ms', 0):.1f} ms, e2e p50 {m.get('median_e2el_ms', 0):.1f} ms in {m.get('duration', 0):.1f} s")


def measured_plan(deployment: str, plans: Mapping[str, Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """What was measured, per instance of a deployment: host, layout, flags, engine version, hardware."""
    out = []
    for host in sorted(plans):
        plan = plans[host]
        hw = plan.get("hardware") or {}
        accel = hw.get("accelerators") or []
        hardware = (f"{len(accel)}× {accel[0].get('name') or accel[0].get('model') or 'accelerator'}" if accel
                    else f"CPU, {hw.get('cpu_count', '?')} cores")
        for dep in plan.get("deployments") or []:
            if str(dep.get("name")) != deployment:
                continue
            for inst in api_instances(dep):
                out.append({"host": host, "instance": inst.get("name"), "engine_version": dep.get("engine_version"),
                            "devices": inst.get("devices") or inst.get("gpus") or [], "args": list(inst.get("args") or []),
                            "hardware": hardware})
    return out


def record(run_id: str, rows: Sequence[Mapping[str, Any]], plans: Mapping[str, Mapping[str, Any]],
           settings: Mapping[str, Any], started: str = "") -> Dict[str, Any]:
    """One run: per deployment, the plan that was measured and every step's row."""
    check_run_id(run_id)
    deployments: Dict[str, Dict[str, Any]] = {}
    for r in rows:
        dep = deployments.setdefault(str(r["deployment"]), {"plan": measured_plan(str(r["deployment"]), plans), "rows": []})
        dep["rows"].append(dict(r))
    if not deployments:
        raise BenchError("the run measured nothing: no deployment matched bench_deployments / bench_targets on the llm_serve hosts")
    for dep in deployments.values():
        dep["rows"].sort(key=lambda r: (r["target"] != "gateway", r["target"], r["concurrency"]))
    # as the steps ran them (a concurrency given as "1,4" from -e is recorded as [1, 4])
    return {"run": run_id, "started": started, "settings": settings_of(settings), "deployments": deployments}


def _index(dep: Mapping[str, Any]) -> Dict[Tuple[str, int], Mapping[str, Any]]:
    return {(r["target"], int(r["concurrency"])): r["metrics"] for r in dep.get("rows") or []}


def ratios(run: Mapping[str, Any], other: Mapping[str, Any], deployment: str) -> List[Dict[str, Any]]:
    """Per target and step both runs measured: this run's value over the other's, for the gate metrics and TTFT."""
    mine = _index(run["deployments"].get(deployment) or {})
    theirs = _index((other.get("deployments") or {}).get(deployment) or {})
    out = []
    for (target, step), m in sorted(mine.items(), key=lambda kv: (kv[0][0] != "gateway", kv[0])):
        o = theirs.get((target, step))
        if not o:
            continue
        entry: Dict[str, Any] = {"deployment": deployment, "target": target, "concurrency": step, "baseline": other.get("run")}
        for metric in ("output_throughput", "median_ttft_ms", "median_e2el_ms") + (
                ("input_sequence_throughput",) if "input_sequence_throughput" in m else ()):
            a, b = m.get(metric), o.get(metric)
            entry[metric] = round(a / b, 3) if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0 else None
        out.append(entry)
    return out


def ratio_line(r: Mapping[str, Any]) -> str:
    return (f"{r['deployment']} · {r['target']} · concurrency {r['concurrency']}: output tok/s {_ratio(r.get('output_throughput'))}, "
            f"TTFT p50 {_ratio(r.get('median_ttft_ms'))}, e2e p50 {_ratio(r.get('median_e2el_ms'))} of run {r.get('baseline')}")


def regressions(ratio_rows: Sequence[Mapping[str, Any]], tolerance: float, baseline_run: str) -> List[str]:
    """A sentence per step worse than the tolerance on a gate metric (throughput lower, e2e latency higher)."""
    if not 0 < float(tolerance) < 1:
        raise BenchError(f"bench_tolerance must be a fraction between 0 and 1 (0.2 = 20 % worse fails), got {tolerance!r}")
    out = []
    for r in ratio_rows:
        for metric, better in GATE.items():
            ratio = r.get(metric)
            if ratio is None:
                continue
            worse = ratio < 1 - tolerance if better == "higher" else ratio > 1 + tolerance
            if worse:
                out.append(f"{r['deployment']} · {r['target']} · concurrency {r['concurrency']}: {metric} is ×{ratio:.2f} of "
                           f"baseline {baseline_run} (tolerance {tolerance:.0%})")
    return out


def failures(run: Mapping[str, Any]) -> List[str]:
    """A sentence per step that lost requests."""
    out = []
    for name, dep in sorted(run["deployments"].items()):
        for r in dep["rows"]:
            failed = int(r["metrics"].get("failed", 0))
            if failed:
                out.append(f"{name} · {r['target']} · concurrency {r['concurrency']}: {failed} of {r['num_prompts']} requests failed")
    return out


# flags every instance has with its own value: left out of the report's flags column
_OWN = ("--served-model-name", "--host", "--port")


def _flags(args: Sequence[Any]) -> str:
    """An instance's launch flags with their values, without the model folder, its name, address and port."""
    words = [str(a) for a in args]
    out, skip = [], False
    for i, word in enumerate(words):
        if skip:
            skip = False
            continue
        if word in _OWN:
            skip = True
            continue
        if i == 0 and not word.startswith("--"):
            continue
        out.append(f"`{word}`" if word.startswith("{") else word)
    return " ".join(out)


def _fmt(value: Any, spec: str) -> str:
    return spec.format(value) if isinstance(value, (int, float)) else "–"


def _ratio(value: Any) -> str:
    return f"×{value:.2f}" if isinstance(value, (int, float)) else "–"


def markdown(run: Mapping[str, Any], baselines: Optional[Mapping[str, Mapping[str, Any]]] = None,
             compare: Optional[Mapping[str, Any]] = None, charts: Optional[Mapping[str, str]] = None) -> str:
    """The run as Markdown: per deployment the plan measured, the sweep table, the ratios to its baseline
    and, with `compare`, the other run's numbers side by side."""
    s = run.get("settings") or {}
    lines = [f"# Benchmark {run['run']}", "",
             f"`vllm bench serve`, random prompts of {s.get('input_len')} tokens in / {s.get('output_len')} out (EOS ignored), "
             f"{s.get('warmups')} warm-up requests per step, concurrency {', '.join(str(c) for c in s.get('concurrency') or [])}."
             + (f" Started {run['started']}." if run.get("started") else ""), ""]
    for name, dep in sorted(run["deployments"].items()):
        lines += [f"## {name}", "", "| host | instance | engine | hardware | devices | flags |", "|---|---|---|---|---|---|"]
        for p in dep["plan"]:
            lines.append(f"| {p['host']} | {p['instance']} | {p['engine_version']} | {p['hardware']} | "
                         f"{','.join(str(d) for d in p['devices']) or '–'} | {_flags(p['args'])} |")
        columns = POOLING_COLUMNS if any("input_sequence_throughput" in r["metrics"] for r in dep["rows"]) else COLUMNS
        lines += ["", "| target | concurrency | done | failed | " + " | ".join(column[1] for column in columns) + " |",
                  "|---|---:|---:|---:|" + "---:|" * len(columns)]
        for r in dep["rows"]:
            m = r["metrics"]
            lines.append(f"| {r['target']} | {r['concurrency']} | {int(m.get('completed', 0))} | {int(m.get('failed', 0))} | "
                         + " | ".join(_fmt(m.get(field), spec) for field, _heading, spec in columns) + " |")
        if charts and charts.get(name):
            lines += ["", f"![{name}]({charts[name]})"]
        base = (baselines or {}).get(name)
        if base:
            lines += ["", f"Against the baseline, run {base['run']} (this ÷ baseline):", "",
                      "| target | concurrency | output tok/s | TTFT p50 | e2e p50 |", "|---|---:|---:|---:|---:|"]
            for r in ratios(run, base, name):
                lines.append(f"| {r['target']} | {r['concurrency']} | {_ratio(r['output_throughput'])} | "
                             f"{_ratio(r['median_ttft_ms'])} | {_ratio(r['median_e2el_ms'])} |")
        elif baselines is not None:
            lines += ["", "No baseline yet for this deployment: this run becomes it when accepted."]
        if compare is not None:
            lines += _side_by_side(run, compare, name)
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _side_by_side(run: Mapping[str, Any], other: Mapping[str, Any], name: str) -> List[str]:
    theirs = (other.get("deployments") or {}).get(name)
    if not theirs:
        return ["", f"Run {other.get('run')} did not measure {name}."]
    lines = ["", f"Side by side with run {other.get('run')}:", "", "| run | host | instance | engine | devices | flags |",
             "|---|---|---|---|---|---|"]
    for label_, dep in ((run["run"], run["deployments"][name]), (other.get("run"), theirs)):
        for p in dep["plan"]:
            lines.append(f"| {label_} | {p['host']} | {p['instance']} | {p['engine_version']} | "
                         f"{','.join(str(d) for d in p['devices']) or '–'} | {_flags(p['args'])} |")
    mine, o = _index(run["deployments"][name]), _index(theirs)
    lines += ["", f"| target | concurrency | output tok/s {run['run']} | output tok/s {other.get('run')} | ratio | "
              f"TTFT p50 {run['run']} | TTFT p50 {other.get('run')} | e2e p50 {run['run']} | e2e p50 {other.get('run')} |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for target, step in sorted(set(mine) | set(o), key=lambda k: (k[0] != "gateway", k)):
        a, b = mine.get((target, step), {}), o.get((target, step), {})
        ta, tb = a.get("output_throughput"), b.get("output_throughput")
        ratio = ta / tb if isinstance(ta, (int, float)) and isinstance(tb, (int, float)) and tb > 0 else None
        lines.append(f"| {target} | {step} | {_fmt(ta, '{:.1f}')} | {_fmt(tb, '{:.1f}')} | {_ratio(ratio)} | "
                     f"{_fmt(a.get('median_ttft_ms'), '{:.1f}')} | {_fmt(b.get('median_ttft_ms'), '{:.1f}')} | "
                     f"{_fmt(a.get('median_e2el_ms'), '{:.1f}')} | {_fmt(b.get('median_e2el_ms'), '{:.1f}')} |")
    return lines


def series(run: Mapping[str, Any], deployment: str, metric: str) -> Dict[str, List[Tuple[int, float]]]:
    """(concurrency, value) points per target, for a chart's lines."""
    out: Dict[str, List[Tuple[int, float]]] = {}
    for r in ((run.get("deployments") or {}).get(deployment) or {}).get("rows") or []:
        value = r["metrics"].get(metric)
        if isinstance(value, (int, float)):
            out.setdefault(r["target"], []).append((int(r["concurrency"]), float(value)))
    return {k: sorted(v) for k, v in out.items()}


def client_hosts(plans: Mapping[str, Mapping[str, Any]]) -> Dict[str, str]:
    """Which host runs the gateway's benchmark for each deployment: the first host (by name) that serves it."""
    out: Dict[str, str] = {}
    for host in sorted(plans):
        for dep in (plans[host] or {}).get("deployments") or []:
            if api_instances(dep):
                out.setdefault(str(dep["name"]), host)
    return out


def gateway_share(targets: Sequence[Mapping[str, Any]], plans: Mapping[str, Mapping[str, Any]], host: str) -> List[Dict[str, Any]]:
    """The gateway targets (verify_gateway_targets) this host benchmarks: one client per deployment, so the
    gateway of a model served on several hosts is measured once."""
    chosen = client_hosts(plans)
    return [dict(t) for t in targets if chosen.get(str(t["deployment"])) == host]
