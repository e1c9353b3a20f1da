"""Every plan the repository can make from its reference inputs, written as canonical JSON: the check that a change
to the planner's code leaves its plans byte-identical.

    .venv/bin/python tests/tools/plan_snapshot.py OUT_DIR [--root CHECKOUT]

Renders (each into OUT_DIR/<group>/<name>.json, keys sorted; a PlanError as <name>.error.txt):
- inventories: every host of every inventory under inventories/, with the options playbooks/plan.yml passes;
- grid: every hardware profile of _hardware_profiles (and two CPU hosts) x every model of tests/fixtures/models and of the
  catalog x three workloads x four engine versions, one deployment a host;
- fleet: tests/benchmarks/plan_fleet.py's reference deployments;
- malformed: inputs plan_host refuses with PlanError.
`--root` plans with another checkout's code (e.g. a worktree of main): run it twice and `diff -r` the two folders.
"""

from __future__ import annotations

import argparse
import glob
import importlib
import json
import os
import pathlib
import re
import sys
import tempfile
from typing import Any, Callable, Dict, Iterator, List, Mapping, Tuple

HERE = pathlib.Path(__file__).resolve().parents[2]
VERSIONS = ("0.11.0", "0.17.0", "0.26.0", "0.33.0")
WORKLOADS = {"auto": {}, "8k-c32": {"max_model_len": 8192, "concurrency": 32},
             "32k-latency": {"max_model_len": 32768, "concurrency": 8, "goal": "latency", "thinking": True, "tools": False}}
CPU_HOSTS = {
    "cpu-avx512bf16": {"accelerators": [], "links": None, "numa_cpus": {0: "0-15", 1: "16-31"}, "numa_cores": {0: "0-7", 1: "16-23"},
                       "cpu_count": 32, "memory_mib": 128 * 1024, "driver_version": None,
                       "cpu_flags": ["avx512f", "avx512_bf16"]},
    "cpu-unknown-flags": {"accelerators": [], "links": None, "numa_cpus": {0: "0-1"}, "cpu_count": 2, "memory_mib": 24105,
                          "driver_version": None},
}
MALFORMED: List[Tuple[str, Any, Any, Dict[str, Any]]] = [
    ("not-a-list", CPU_HOSTS["cpu-unknown-flags"], {"name": "d"}, {}),
    ("unknown-key", CPU_HOSTS["cpu-unknown-flags"], [{"name": "d", "model": "Qwen/Qwen3-0.6B", "engine": {"version": "0.32.0"}, "x": 1}], {}),
    ("bad-name", CPU_HOSTS["cpu-unknown-flags"], [{"name": "D!", "model": "Qwen/Qwen3-0.6B", "engine": {"version": "0.32.0"}}], {}),
    ("bad-length", CPU_HOSTS["cpu-unknown-flags"],
     [{"name": "d", "model": "Qwen/Qwen3-0.6B", "engine": {"version": "0.32.0"}, "workload": {"max_model_len": "32k"}}], {}),
    ("planned-flag", CPU_HOSTS["cpu-unknown-flags"],
     [{"name": "d", "model": "Qwen/Qwen3-0.6B", "engine": {"version": "0.32.0"}, "extra_args": ["--max-model-len", "9"]}], {}),
    ("latest-image", CPU_HOSTS["cpu-unknown-flags"],
     [{"name": "d", "model": "Qwen/Qwen3-0.6B", "engine": {"version": "0.32.0", "image": "vllm/vllm-openai:latest"}}], {}),
    ("bad-port", CPU_HOSTS["cpu-unknown-flags"], [{"name": "d", "model": "Qwen/Qwen3-0.6B", "engine": {"version": "0.32.0"}}],
     {"base_port": 80}),
    ("bad-option", CPU_HOSTS["cpu-unknown-flags"], [{"name": "d", "model": "Qwen/Qwen3-0.6B", "engine": {"version": "0.32.0"}}],
     {"colour": "red"}),
    ("bad-root", CPU_HOSTS["cpu-unknown-flags"], [{"name": "d", "model": "Qwen/Qwen3-0.6B", "engine": {"version": "0.32.0"}}],
     {"model_root": "models"}),
    ("bad-hardware", {"accelerators": "none"}, [{"name": "d", "model": "Qwen/Qwen3-0.6B", "engine": {"version": "0.32.0"}}], {}),
]


def import_planner(root: pathlib.Path) -> Tuple[Callable[..., Any], type, Callable[[str], Any], Tuple[str, ...], Mapping[str, Any]]:
    """plan_host, PlanError, hardware_profile, the profile names and the catalog of the checkout at `root`."""
    collections = pathlib.Path(tempfile.mkdtemp(prefix="plan-snapshot-"))
    (collections / "ansible_collections" / "llmfleet").mkdir(parents=True)
    os.symlink(root, collections / "ansible_collections" / "llmfleet" / "serving")
    sys.path.insert(0, str(collections))
    base = "ansible_collections.llmfleet.serving.plugins.module_utils"
    planner = importlib.import_module(f"{base}._planner")
    profiles = importlib.import_module(f"{base}._hardware_profiles")
    models = importlib.import_module(f"{base}._models")
    return planner.plan_host, planner.PlanError, profiles.hardware_profile, profiles.PROFILE_NAMES, models.CATALOG


def fixture_models(root: pathlib.Path) -> Iterator[Tuple[str, Dict[str, Any]]]:
    """(label, model spec) for every config.json excerpt under tests/fixtures/models, with the hub id its source names."""
    for path in sorted(glob.glob(str(root / "tests" / "fixtures" / "models" / "*.json"))):
        data = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
        found = re.search(r"huggingface\.co/([^/\s]+/[^/\s]+)/", str(data.get("source")))
        stem = pathlib.Path(path).stem
        yield f"fixture-{stem}", {"id": found.group(1) if found else f"local/{stem}", "config": data["config"]}


def lab_model_dir(root: pathlib.Path) -> str:
    """The demo's model folder for the local inventory, at a fixed path (plans name it): SmolLM2's config.json from its fixture."""
    folder = pathlib.Path(tempfile.gettempdir()) / "plan-snapshot-models"
    (folder / "SmolLM2-135M-Instruct").mkdir(parents=True, exist_ok=True)
    data = json.loads((root / "tests" / "fixtures" / "models" / "smollm2-135m-instruct.json").read_text(encoding="utf-8"))
    (folder / "SmolLM2-135M-Instruct" / "config.json").write_text(json.dumps(data["config"]), encoding="utf-8")
    return str(folder)


def inventory_hosts(root: pathlib.Path, hardware_profile: Callable[[str], Any]) -> Iterator[Tuple[str, str, Any, Any, Dict[str, Any]]]:
    """(inventory, host, hardware, deployments, options) for every host of every reference inventory that declares deployments."""
    import yaml  # pylint: disable=import-outside-toplevel

    for inv in sorted(p for p in (root / "inventories").iterdir() if (p / "hosts.yml").exists()):
        hosts_yml = yaml.safe_load((inv / "hosts.yml").read_text(encoding="utf-8"))
        groups: Dict[str, Dict[str, Any]] = {}
        for name, group in ((hosts_yml.get("all") or {}).get("children") or {}).items():
            groups[name] = {h: (v or {}) for h, v in ((group or {}).get("hosts") or {}).items()}
        for host, inline in sorted((groups.get("llm_serve") or {}).items()):
            hostvars: Dict[str, Any] = dict((hosts_yml.get("all") or {}).get("vars") or {})
            for name in ("all", "llm_serve"):
                path = inv / "group_vars" / f"{name}.yml"
                if path.exists():
                    hostvars.update(yaml.safe_load(path.read_text(encoding="utf-8")) or {})
            path = inv / "host_vars" / f"{host}.yml"
            if path.exists():
                hostvars.update(yaml.safe_load(path.read_text(encoding="utf-8")) or {})
            hostvars.update(inline)
            if "llmfleet_deployments" not in hostvars:
                continue
            # the one template the reference deployments use: the demo's model folder, with the config.json make_smollm2.py writes
            deployments = json.loads(json.dumps(hostvars["llmfleet_deployments"]).replace("{{ lab_model_dir }}", lab_model_dir(root)))
            profile = hostvars.get("llmfleet_hardware_profile")
            hardware = hostvars.get("llmfleet_hardware") or (hardware_profile(profile) if profile else None)
            options = {"base_port": hostvars.get("llmfleet_vllm_base_port", 8002),
                       "gateway_on_host": host in (groups.get("llm_gateway") or {}),
                       "private_address": hostvars.get("llmfleet_private_address"),
                       "model_root": hostvars.get("llmfleet_model_root", "/models"),
                       "hyhal_dir": hostvars.get("llmfleet_hyhal_dir"), "model_metadata": {}}
            yield inv.name, host, hardware, deployments, options


def _engine_of(version: str) -> Dict[str, Any]:
    """{version} with accept_advisories naming the release's advisories, where the checkout has the table (issue 35): the grid
    plans releases below the advisory floor to see what the planner makes of them, and opts in as an operator would."""
    engine = sys.modules.get("ansible_collections.llmfleet.serving.plugins.module_utils._engine")
    accepted = [a.ghsa for a in engine.advisories_of(engine.parse_version(version))] if hasattr(engine, "advisories_of") else []
    return dict({"version": version}, **({"accept_advisories": accepted} if accepted else {}))


def cases(root: pathlib.Path, hardware_profile: Callable[[str], Any], profile_names: Tuple[str, ...],
          catalog: Mapping[str, Any]) -> Iterator[Tuple[str, str, str, Any, Any, Dict[str, Any]]]:
    """(group, name, host, hardware, deployments, options) of every plan this tool renders."""
    for inv, host, hardware, deployments, options in inventory_hosts(root, hardware_profile):
        yield "inventories", f"{inv}-{host}", host, hardware, deployments, options
    hosts = [(p, hardware_profile(p)) for p in profile_names] + sorted(CPU_HOSTS.items())
    models = list(fixture_models(root)) + [(f"catalog-{i.replace('/', '_')}", i) for i in sorted(catalog)]
    for label, hardware in hosts:
        for model_label, model in models:
            for workload_label, workload in WORKLOADS.items():
                for version in VERSIONS:
                    dep = {"name": "d", "model": model, "engine": _engine_of(version), "workload": workload}
                    yield "grid", f"{label}--{model_label}--{workload_label}--{version}", "h", hardware, [dep], {}
    fleet = importlib.import_module("plan_fleet")
    for i in range(len(fleet.FLEET)):
        hv = fleet.host_vars(i)
        yield "fleet", f"{i}-{hv['llmfleet_hardware_profile']}", f"node-{i}", hardware_profile(hv["llmfleet_hardware_profile"]), \
            hv["llmfleet_deployments"], {}
    for label, hardware, deployments, options in MALFORMED:
        yield "malformed", label, "h", hardware, deployments, options


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--root", type=pathlib.Path, default=HERE, help="the checkout whose planner plans (default: this one)")
    args = parser.parse_args()
    root = args.root.resolve()
    sys.path.insert(0, str(HERE / "tests" / "benchmarks"))
    plan_host, plan_error, hardware_profile, profile_names, catalog = import_planner(root)
    counts = {"plans": 0, "refused": 0, "plan_errors": 0}
    for group, name, host, hardware, deployments, options in cases(root, hardware_profile, profile_names, catalog):
        folder = args.out / group
        folder.mkdir(parents=True, exist_ok=True)
        try:
            plan = plan_host(host, hardware, deployments, options)
        except plan_error as exc:
            (folder / f"{name}.error.txt").write_text(f"{exc}\n", encoding="utf-8")
            counts["plan_errors"] += 1
            continue
        (folder / f"{name}.json").write_text(json.dumps(plan, sort_keys=True, indent=1) + "\n", encoding="utf-8")
        counts["plans"] += 1
        counts["refused"] += bool(plan["errors"])
    print(f"{args.out}: {counts['plans']} plans ({counts['refused']} with errors), {counts['plan_errors']} PlanError messages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
