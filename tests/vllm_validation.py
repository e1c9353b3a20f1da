"""vLLM's own validation of every plan: the harness tests/crosscheck/test_vllm_validation.py runs (and
tests/unit/test_vllm_validation_harness.py checks with a stand-in vLLM).

Every model of the corpus (tests/fixtures/corpus/*.json: {"source", "categories", "config", "files"}; and the config
excerpts of tests/fixtures/models/*.json: {"source", "config"}) is planned by the real planner on every built-in hardware
profile for each vLLM version under test, its config.json (and side files) handed to plan_host the way role fleet_plan
hands fetched metadata (options.model_metadata: {id: {dir, weight_bytes, source}}). Each instance of a plan without errors
becomes a job for that version's worker (tests/crosscheck/vllm_config_worker.py, one long-lived process per version):
vLLM's own `serve` parser and EngineArgs -> ModelConfig -> VllmConfig, with the plan's arguments and the model's folder.
Identical jobs (same version, model and arguments) are sent once per run; nothing is kept between runs.
"""

from __future__ import annotations

import glob
import json
import os
import pathlib
import re
import subprocess
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

ROOT = pathlib.Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "crosscheck" / "vllm_config_worker.py"
CORPUS_DIR = ROOT / "tests" / "fixtures" / "corpus"
EXCERPT_DIR = ROOT / "tests" / "fixtures" / "models"
# the floor: at least this many corpus models checked (LLMFLEET_CORPUS_MIN lowers it while a corpus is incomplete)
CORPUS_MIN = 80
HUB_ID = re.compile(r"huggingface\.co/([^/\s]+/[^/\s?#]+)")


@dataclass(frozen=True)
class Model:
    label: str                      # the fixture file's stem
    model_id: str                   # the hub id: the corpus file's "model", else the one its source names
    source: str
    config: Dict[str, Any]
    files: Dict[str, Any]           # side files: name -> JSON content (or text)
    corpus: bool                    # from tests/fixtures/corpus (counts towards CORPUS_MIN)


@dataclass
class Job:
    version: str
    model: Model
    args: List[str]
    plans: List[Tuple[str, str]] = field(default_factory=list)   # (profile, instance) that planned these args
    bare: bool = False      # the model's folder alone, no plan arguments: does this release load its config.json at all?


@dataclass
class Verdict:
    verdict: str                    # accepted | rejected
    stage: str
    message: str
    where: str = ""
    seconds: float = 0.0


@dataclass
class VersionReport:
    version: str
    plans: int = 0                                   # plans without errors
    instances: int = 0
    refused: "OrderedDict[str, List[str]]" = field(default_factory=OrderedDict)    # reason -> examples (model @ profile)
    accepted: int = 0                                # instances vLLM accepted
    rejected: List[Tuple[Job, Verdict]] = field(default_factory=list)
    # rejections the model's config.json alone gets, with no plan arguments at all (its bare job, same stage and message):
    # this release (its transformers) refuses the published config itself; no plan can change that
    own_config: List[Tuple[Job, Verdict]] = field(default_factory=list)
    bare: Dict[str, Verdict] = field(default_factory=dict)    # model label -> the verdict on its folder alone
    unchecked: List[Tuple[Job, Verdict]] = field(default_factory=list)   # the venv cannot import the model class
    jobs: int = 0                                    # distinct command lines sent
    seconds: float = 0.0
    skips: List[List[str]] = field(default_factory=list)
    job_seconds: List[Tuple[float, str]] = field(default_factory=list)   # (seconds, model) of each job


def load_models(folders: Sequence[pathlib.Path] = (CORPUS_DIR, EXCERPT_DIR)) -> List[Model]:
    """Every model of the corpus folder(s): a corpus file, or a config excerpt ({"source", "config"})."""
    models: List[Model] = []
    seen = set()
    for folder in folders:
        for path in sorted(glob.glob(str(pathlib.Path(folder) / "*.json"))):
            data = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
            if not isinstance(data, dict) or not isinstance(data.get("config"), dict):
                raise ValueError(f"{path}: not a corpus file ({{source, config, files}}): fix or remove it")
            stem = pathlib.Path(path).stem
            found = HUB_ID.search(str(data.get("source", "")))
            model_id = str(data.get("model") or (found.group(1) if found else f"local/{stem}"))   # the hub id
            files = dict(data.get("files") or {})
            # an excerpt's published side files (tests/fixtures/models: modules, sentence_bert_config, tokenizer_config)
            files.update({name: data[key] for key, name in EXCERPT_SIDE_FILES.items() if key in data and name not in files})
            if model_id.lower() in seen:
                # the corpus's full config.json wins over an excerpt of the same model; the excerpt's side files it lacks join it
                first = next(m for m in models if m.model_id.lower() == model_id.lower())
                first.files.update({name: text for name, text in files.items() if name not in first.files})
                continue
            seen.add(model_id.lower())
            models.append(Model(stem, model_id, str(data.get("source", "")), data["config"], files,
                                corpus="files" in data or "categories" in data))
    return models


# the keys tests/fixtures/models excerpts keep a model's published side files under, and the file each one is
EXCERPT_SIDE_FILES = {"modules": "modules.json", "sentence_bert_config": "sentence_bert_config.json",
                      "tokenizer_config": "tokenizer_config.json"}


def write_model_dir(model: Model, parent: pathlib.Path) -> pathlib.Path:
    """A folder with the model's config.json and side files, as model_fetch's config_only leaves it (no weights)."""
    folder = parent / model.label
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(model.config, indent=1), encoding="utf-8")
    for name, content in model.files.items():
        parts = pathlib.PurePosixPath(name).parts
        if not parts or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"{model.label}: side file {name!r} must be a path inside the model's folder (e.g. 1_Pooling/config.json)")
        text = content if isinstance(content, str) else json.dumps(content, indent=1)
        path = folder.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return folder


def deployment(model: Model, version: str, hardware: Mapping[str, Any]) -> Dict[str, Any]:
    """The deployment a user of that hardware writes for the model: default workload; on hardware whose official images
    stop before `version` (Hygon DCUs, V100 from 0.20) their own build, named as engine.image (as test_engine_flags does)."""
    engine: Dict[str, Any] = {"version": version}
    accs = hardware.get("accelerators") or []
    if accs and accs[0].get("vendor") == "hygon":
        engine["image"] = f"registry.example/dcu/vllm:{version}-dtk26.04"
    elif accs and accs[0].get("compute_capability") == "7.0" and tuple(int(x) for x in version.split(".")[:2]) >= (0, 20):
        engine["image"] = f"registry.example/vllm:{version}-cu126-sm70"
    return {"name": "m", "model": model.model_id, "engine": engine}


def reason_of(error: str) -> str:
    """A planner refusal's cause, without the model's and deployment's names and numbers: the grouping key."""
    text = re.sub(r"^[^:]{1,80}: ", "", error, count=1)            # "<deployment>: "
    text = text.split(";", 1)[0]
    text = re.sub(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", "<model>", text)
    text = re.sub(r"\d+(?:\.\d+)*", "N", text)
    return text[:160]


def job_key(args: Sequence[str]) -> Tuple[str, ...]:
    """A command line without its model path and port: the instances of one plan differ only in --port (an integer
    vLLM's parser checks the same way for each), so one of them stands for all."""
    out = list(args[1:])
    for i, arg in enumerate(out[:-1]):
        if arg == "--port":
            out[i + 1] = "<port>"
    return tuple(out)


def plan_jobs(models: Sequence[Model], versions: Sequence[str], profiles: Sequence[str], model_root: pathlib.Path,
              plan_host: Callable[..., Dict[str, Any]], hardware_profile: Callable[[str], Dict[str, Any]],
              reports: Dict[str, VersionReport]) -> List[Job]:
    """Plan every model x profile x version; record refusals in `reports`; one Job per distinct command line."""
    jobs: "OrderedDict[Tuple[str, str, Tuple[str, ...]], Job]" = OrderedDict()
    dirs = {m.label: write_model_dir(m, model_root) for m in models}
    for version in versions:
        rep = reports.setdefault(version, VersionReport(version))
        for model in models:
            meta = {model.model_id: {"dir": str(dirs[model.label]), "weight_bytes": 0, "source": f"corpus file {model.label}.json"}}
            for profile in profiles:
                hw = hardware_profile(profile)
                try:
                    plan = plan_host("host", hw, [deployment(model, version, hw)], {"model_metadata": meta})
                except Exception as exc:  # PlanError (malformed input) or a reader's ModelError: refused, by reason
                    errors = [f"{type(exc).__name__}: {exc}"]
                else:
                    errors = plan["errors"]
                if errors:
                    rep.refused.setdefault(reason_of(errors[0]), []).append(f"{model.label} @ {profile}: {errors[0]}")
                    continue
                rep.plans += 1
                for dep in plan["deployments"]:
                    for inst in dep["instances"]:
                        rep.instances += 1
                        key = (version, model.label, job_key(inst["args"]))
                        job = jobs.setdefault(key, Job(version, model, list(inst["args"])))
                        job.plans.append((profile, inst["name"]))
    return list(jobs.values())


class Worker:
    """One vLLM version's worker process: jobs in (JSON lines), verdicts out."""

    def __init__(self, python: str, env: Mapping[str, str], worker: pathlib.Path = WORKER, timeout: float = 600):
        self.proc = subprocess.Popen([python, str(worker)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=dict(env), bufsize=1)
        self.timeout = timeout
        self.stderr: List[str] = []
        self._drain = threading.Thread(target=self._read_stderr, daemon=True)
        self._drain.start()

    def _read_stderr(self) -> None:
        for line in self.proc.stderr:
            self.stderr.append(line)
            del self.stderr[:-200]      # the last 200 lines, for a failure message

    def _line(self) -> Dict[str, Any]:
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=30)
            raise RuntimeError(f"the vLLM worker stopped (rc={self.proc.returncode}); its last output:\n{''.join(self.stderr[-40:])}")
        return json.loads(line)

    def ready(self) -> Dict[str, Any]:
        hello = self._line()
        if not hello.get("ready"):
            raise RuntimeError(f"the vLLM worker did not say ready but {hello!r}")
        return hello

    def run(self, jobs: Sequence[Dict[str, Any]]) -> Dict[Any, Dict[str, Any]]:
        """Send every job (from a thread: the pipes must not fill both ways), read one answer each."""
        def feed() -> None:
            for job in jobs:
                self.proc.stdin.write(json.dumps(job) + "\n")
            self.proc.stdin.close()
        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        answers = {}
        for _job in jobs:
            answer = self._line()
            answers[answer["id"]] = answer
        writer.join()
        self.proc.wait(timeout=60)
        return answers

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def worker_env(cache: pathlib.Path, torchvision_dir: Optional[str]) -> Dict[str, str]:
    """A fresh cache for this run (nothing kept between runs could hide a change) and no network."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "HF_", "TRANSFORMERS_"))}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", PYTHONUNBUFFERED="1",
               VLLM_CACHE_ROOT=str(cache / "vllm"), HF_HOME=str(cache / "hf"), XDG_CACHE_HOME=str(cache / "xdg"),
               VLLM_LOGGING_LEVEL="WARNING")
    if torchvision_dir:
        env["LLMFLEET_TORCHVISION_DIR"] = torchvision_dir
    return env


def start_workers(pythons: Mapping[str, str], cache: pathlib.Path, torchvision_dir: Optional[str] = None,
                  worker: pathlib.Path = WORKER) -> Dict[str, Worker]:
    """One worker a version, started now: each imports its vLLM (~20 s of CPU) while the caller plans."""
    return {version: Worker(python, worker_env(cache / version, torchvision_dir), worker) for version, python in pythons.items()}


def validate(pythons: Mapping[str, str], jobs: Sequence[Job], reports: Dict[str, VersionReport], cache: pathlib.Path,
             torchvision_dir: Optional[str] = None, worker: pathlib.Path = WORKER,
             model_dirs: Optional[Mapping[str, pathlib.Path]] = None, started: Optional[Mapping[str, Worker]] = None) -> None:
    """Run each version's jobs in its own worker (`started` ones, else new ones), all versions at once; fill accepted /
    rejected / unchecked / skips. Every worker is stopped at the end."""
    workers = dict(started or start_workers(pythons, cache, torchvision_dir, worker))
    try:
        results: Dict[str, Any] = {}

        def one(version: str) -> None:
            t0 = time.monotonic()
            try:
                hello = workers[version].ready()
                if hello.get("version") != version:
                    raise RuntimeError(f"{pythons[version]} imports vLLM {hello.get('version')}, not {version}: remake its venv")
                mine = [j for j in jobs if j.version == version]
                # one bare job a model: its folder and no plan arguments, which tells a plan's fault from the config's
                labels = OrderedDict((j.model.label, j.model) for j in mine)
                mine += [Job(version, m, [m.label], bare=True) for m in labels.values()]
                dirs = [str((model_dirs or {}).get(j.model.label) or cache / "models" / j.model.label) for j in mine]
                answers = workers[version].run([{"id": i, "args": j.args, "model_dir": d} for i, (j, d) in enumerate(zip(mine, dirs))])
                results[version] = (hello, mine, answers, time.monotonic() - t0)
            except Exception as exc:  # reported after every worker has finished
                results[version] = exc

        threads = [threading.Thread(target=one, args=(v,)) for v in workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for w in workers.values():
            w.stop()
    failed = {v: r for v, r in results.items() if isinstance(r, Exception)}
    if failed:
        raise RuntimeError("; ".join(f"vLLM {v}: {e}" for v, e in failed.items()))
    for version, (hello, mine, answers, seconds) in results.items():
        rep = reports.setdefault(version, VersionReport(version))
        rep.skips, rep.jobs, rep.seconds = hello.get("skips", []), sum(not j.bare for j in mine), seconds
        verdicts = {}
        for i, job in enumerate(mine):
            answer = answers[i]
            if answer["verdict"] not in ("accepted", "rejected", "unchecked"):
                raise RuntimeError(f"vLLM {version}'s worker answered {answer!r}: not a verdict (accepted, rejected, unchecked)")
            verdicts[i] = Verdict(answer["verdict"], answer.get("stage", ""), answer.get("message", ""), answer.get("where", ""),
                                  float(answer.get("seconds") or 0))
            rep.job_seconds.append((verdicts[i].seconds, job.model.label))
            if job.bare:
                rep.bare[job.model.label] = verdicts[i]
        for i, job in enumerate(mine):
            answer, verdict = answers[i], verdicts[i]
            if job.bare:
                continue
            if answer["verdict"] == "accepted":
                rep.accepted += len(job.plans)
            elif answer["verdict"] == "unchecked":
                rep.unchecked.append((job, verdict))
            elif own_config(verdict, rep.bare.get(job.model.label)):
                rep.own_config.append((job, verdict))
            else:
                rep.rejected.append((job, verdict))


def own_config(verdict: Verdict, bare: Optional[Verdict]) -> bool:
    """Whether a plan's rejection is the one the model's folder alone gets (no plan arguments): same stage, same message."""
    return (verdict.verdict == "rejected" and bare is not None and bare.verdict == "rejected"
            and (bare.stage, bare.message) == (verdict.stage, verdict.message))


def is_known(known: Iterable[Tuple[str, str]], job: Job, verdict: Verdict) -> bool:
    """Whether a rejection is one of `known`: (model fixture label, a piece of vLLM's message)."""
    return any(label == job.model.label and piece in verdict.message for label, piece in known)


def table(reports: Mapping[str, VersionReport], known: Iterable[Tuple[str, str]] = ()) -> List[str]:
    """The printed report: per version, plans, accepted, refused by reason (count, one example), rejected in full
    ([KNOWN] where `known`, (model label, piece of vLLM's message), lists it)."""
    known = list(known)
    lines = ["per vLLM release: plans without errors, their instances, distinct command lines sent (jobs), instances vLLM "
             "accepted, plans the planner refused, instances vLLM rejected, instances not checkable here, worker seconds",
             f"{'vLLM':<8}{'plans':>7}{'instances':>10}{'jobs':>6}{'accepted':>9}{'refused':>8}{'rejected':>9}{'unchecked':>10}"
             f"{'seconds':>8}{'own config':>11}"]
    for v, r in reports.items():
        rejected = sum(len(j.plans) for j, _verdict in r.rejected)
        unchecked = sum(len(j.plans) for j, _verdict in r.unchecked)
        lines.append(f"{v:<8}{r.plans:>7}{r.instances:>10}{r.jobs:>6}{r.accepted:>9}{sum(map(len, r.refused.values())):>8}"
                     f"{rejected:>9}{unchecked:>10}{r.seconds:>8.0f}{sum(len(j.plans) for j, _verdict in r.own_config):>11}")
    for v, r in reports.items():
        lines.append(f"\nvLLM {v}: refused by the planner, by reason ({len(r.refused)} reasons):")
        for reason, examples in sorted(r.refused.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"  {len(examples):>4}  {reason}")
            lines.append(f"        e.g. {examples[0][:300]}")
        lines.append(f"vLLM {v}: rejected by vLLM ({len(r.rejected)} command lines):")
        for job, verdict in r.rejected:
            mark = " [KNOWN]" if is_known(known, job, verdict) else ""
            lines.append(f"  {job.model.label} ({job.model.model_id}) @ {', '.join(sorted({p for p, _count in job.plans}))}{mark}")
            lines.append(f"      {verdict.stage}: {verdict.message[:600]}" + (f" ({verdict.where})" if verdict.where else ""))
            lines.append(f"      args: {' '.join(job.args[1:])}")
        lines.append(f"vLLM {v}: the model's own config.json rejected by this release (its transformers), with no plan "
                     f"arguments at all: not the plan's fault ({len(r.own_config)} command lines):")
        for job, verdict in r.own_config:
            lines.append(f"  {job.model.label} ({job.model.model_id}) @ {', '.join(sorted({p for p, _count in job.plans}))}")
            lines.append(f"      {verdict.stage}: {verdict.message[:600]}" + (f" ({verdict.where})" if verdict.where else ""))
        slow = sorted(r.job_seconds, reverse=True)[:5]
        lines.append(f"vLLM {v}: {sum(t for t, _label in r.job_seconds):.0f} s in the jobs of {r.seconds:.0f} s (the rest: waiting for "
                     "its import of vLLM); slowest: " + ", ".join(f"{m} {t:.1f} s" for t, m in slow))
        lines.append(f"vLLM {v}: not checkable with this venv ({len(r.unchecked)} command lines):")
        for job, verdict in r.unchecked:
            lines.append(f"  {job.model.label} @ {', '.join(sorted({p for p, _count in job.plans}))}: {verdict.message[:300]}")
        lines.append(f"vLLM {v}: checks replaced on the CPU build ({len(r.skips)}):")
        lines += [f"  - {name}: {why}" for name, why in r.skips]
    return lines
