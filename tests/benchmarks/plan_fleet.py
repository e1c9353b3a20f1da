"""Planning cost: plan.yml over a declared fleet of N hosts (default 200), wall time printed.

    .venv/bin/python tests/benchmarks/plan_fleet.py [--hosts 200]

Builds a throw-away inventory of N hosts cycling through the built-in hardware profiles and the
reference deployments, runs `ansible-playbook playbooks/plan.yml` once against it (controller
only, no SSH), then times the pure planner alone on the same inputs. It prints numbers; it asserts
nothing about speed (a benchmark, not a timed test).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / ".cache" / "collections"))

from ansible_collections.llmfleet.serving.plugins.module_utils import _engine  # noqa: E402
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile  # noqa: E402
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host  # noqa: E402

FLEET = [
    ("dgx1_v100_32gb", "Qwen/Qwen3.5-122B-A10B-GPTQ-Int4", "0.17.0", 8192),
    ("k100ai_8x_pcie", "Qwen/Qwen3.5-122B-A10B-GPTQ-Int4", "0.18.0", 8192),
    ("h100_sxm_8x", "Qwen/Qwen3.5-35B-A3B-FP8", "0.20.0", 65536),
    ("h200_sxm_8x", "Qwen/Qwen3.5-397B-A17B-FP8", "0.26.0", 32768),
    ("rtx4090_8x_pcie", "Qwen/Qwen3-30B-A3B-FP8", "0.20.0", 32768),
    ("a100_sxm_8x_80gb", "Qwen/Qwen3-32B", "0.26.0", 32768),
    ("t4x4", "Qwen/Qwen3-8B", "0.19.1", 8192),
]


def host_vars(i: int) -> dict:
    profile, model, version, length = FLEET[i % len(FLEET)]
    return {"llmfleet_hardware_profile": profile,
            "llmfleet_deployments": [{"name": "main", "model": model, "workload": {"max_model_len": length, "concurrency": 32},
                                      "engine": engine(version)}]}


def engine(version: str) -> dict:
    """The field reports' releases below the advisory floor opt in by name, as an operator's inventory does
    (docs/inventory.md#engine-advisories); a checkout without the advisory table (tests/tools/plan_snapshot.py --root) plans
    the plain version."""
    advisories_of = getattr(_engine, "advisories_of", None)
    accepted = [a.ghsa for a in advisories_of(_engine.parse_version(version))] if callable(advisories_of) else []
    return dict({"version": version}, **({"accept_advisories": accepted} if accepted else {}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--forks", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        inv = pathlib.Path(tmp) / "inventory.yml"
        hosts = {f"node-{i:04d}": host_vars(i) for i in range(args.hosts)}
        inv.write_text(json.dumps({"all": {"children": {"llm_serve": {"hosts": hosts}}}}))
        env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"),
                   ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_FORKS=str(args.forks))
        start = time.perf_counter()
        proc = subprocess.run([str(pathlib.Path(sys.executable).parent / "ansible-playbook"), "playbooks/plan.yml", "-i", str(inv),
                               "-e", json.dumps({"llmfleet_plan_dir": str(pathlib.Path(tmp) / "plans")})],
                              cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
        stats = json.loads(proc.stdout)["stats"] if proc.stdout.startswith("{") else {}
        failed = sorted(h for h, s in stats.items() if s["failures"] or s["unreachable"])
        plans = len(list((pathlib.Path(tmp) / "plans").glob("*.json")))
        print(f"plan.yml: {args.hosts} hosts, forks={args.forks}: {wall:.1f} s wall "
              f"({wall / args.hosts * 1000:.0f} ms/host), {plans} plan files, {len(failed)} failed hosts, rc={proc.returncode}")
        start = time.perf_counter()
        for name, hv in hosts.items():
            plan_host(name, hardware_profile(hv["llmfleet_hardware_profile"]), hv["llmfleet_deployments"])
        pure = time.perf_counter() - start
        print(f"planner alone (module_utils, one process): {args.hosts} hosts in {pure:.2f} s ({pure / args.hosts * 1000:.1f} ms/host)")
    return 0 if proc.returncode == 0 and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
