"""Test helpers: run ansible / ansible-playbook from the project's venv against this machine and
read their results as JSON (the ansible.posix.json callback); plan a reference inventory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from typing import Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_ansible(*args: str, extra_vars: Optional[dict] = None, env: Optional[Dict[str, str]] = None, with_inventory: bool = True) -> dict:
    environment = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
                       ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
                       ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"))
    environment.update(env or {})
    # the ansible next to this interpreter (the project's venv), against localhost only
    cmd = [os.path.join(os.path.dirname(sys.executable), args[0]), *args[1:]]
    if with_inventory:
        cmd += ["-i", "localhost,", "-e", json.dumps({"ansible_python_interpreter": sys.executable})]
    if extra_vars:
        cmd += ["-e", json.dumps(extra_vars)]
    proc = subprocess.run(cmd, cwd=ROOT, env=environment, capture_output=True, text=True, check=False)
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"{' '.join(cmd)} printed no JSON (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}") from None


def task_result(result: dict, name: str, host: str = "localhost") -> dict:
    for play in result["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"].endswith(name):
                return task["hosts"][host]
    raise AssertionError(f"no task named {name!r}")


def inventory(name: str):
    """(host, hardware, deployments) as the reference inventory `inventories/<name>` declares them."""
    import pathlib  # pylint: disable=import-outside-toplevel

    import yaml  # pylint: disable=import-outside-toplevel

    from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile  # pylint: disable=import-outside-toplevel

    host_vars = next((pathlib.Path(ROOT) / "inventories" / name / "host_vars").glob("*.yml"))
    data = yaml.safe_load(host_vars.read_text())
    profile = data.get("llmfleet_hardware_profile")
    hw = data.get("llmfleet_hardware") or (hardware_profile(profile) if profile else None)
    return host_vars.stem, hw, data["llmfleet_deployments"]


# A CPU host's deployment of a catalog model (the planner knows Qwen3-0.6B's config.json without a download)
CPU_QWEN3_SMALL = [{"name": "qwen3-small", "model": "Qwen/Qwen3-0.6B", "engine": {"version": "0.32.0"},
                    "workload": {"max_model_len": 4096, "concurrency": 4, "goal": "throughput", "thinking": False, "tools": True}}]


def outside_container(args: List[str]) -> List[str]:
    """A docker-runtime plan's command line as the GPU sessions run it, on the machine itself rather than in a container:
    its --host (every address of the container's own network, _host_needs.engine_host) is the plan's bind address there."""
    from ansible_collections.llmfleet.serving.plugins.module_utils._host_needs import CONTAINER_HOST, LOOPBACK  # pylint: disable=import-outside-toplevel

    out = list(args)
    at = out.index("--host") + 1
    if out[at] == CONTAINER_HOST:
        out[at] = LOOPBACK
    return out


def plan_of(name: str, **options):
    """The planner's plan for a reference inventory."""
    from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host  # pylint: disable=import-outside-toplevel

    host, hw, deps = inventory(name)
    return plan_host(host, hw, deps, options)


def stand_in_script(tool: str, outputs: Dict[str, str], failures: Optional[Dict[str, tuple]] = None) -> str:
    """A POSIX shell script standing in for a vendor tool (nvidia-smi, hy-smi): for the exact argument
    string it cats outputs[args] (a path where the captured real output lies at run time), or exits
    like the real tool with failures[args] = (exit code, message); anything else exits 64. A relative path is
    read from beside the script (a tool unpacked wherever the host keeps it, as hyhal is)."""
    import shlex

    def where(path: str) -> str:
        return shlex.quote(path) if path.startswith("/") else '"$(dirname "$0")"/' + shlex.quote(path)
    cases = [f"  {shlex.quote(args)}) cat {where(path)} ;;" for args, path in outputs.items()]
    cases += [f"  {shlex.quote(args)}) echo {shlex.quote(message)}; exit {code} ;;" for args, (code, message) in (failures or {}).items()]
    return (f"#!/bin/sh\n# Stand-in for the vendor tool {tool} (llmfleet.serving tests): prints captured real output.\n"
            "case \"$*\" in\n" + "\n".join(cases) + "\n  *) echo \"stand-in $0: unexpected arguments: $*\" >&2; exit 64 ;;\nesac\n")


def this_machine() -> dict:
    """This machine's hardware in the llmfleet_hardware schema (CPU only: the lab has no GPU)."""
    from ansible_collections.llmfleet.serving.plugins.module_utils._hardware import (  # pylint: disable=import-outside-toplevel
        expand_cpulist, parse_meminfo_mib, read_numa_cpus)

    with open("/proc/meminfo", encoding="ascii") as handle:
        memory = parse_meminfo_mib(handle.read())
    with open("/sys/devices/system/cpu/online", encoding="ascii") as handle:
        cpus = len(expand_cpulist(handle.read().strip()))
    return {"accelerators": [], "links": None, "numa_cpus": read_numa_cpus(), "cpu_count": cpus, "memory_mib": memory,
            "driver_version": None}


def h200_model(model_id: str):
    """The `model` a deployment gives for a model of the H200 runs (tests/gpu/runs.json): the catalog id, or for a
    model outside the catalog its id with the published config.json its fixture holds (tests/fixtures/models)."""
    with open(os.path.join(ROOT, "tests", "gpu", "runs.json"), encoding="utf-8") as handle:
        runs = json.load(handle)["runs"]
    spec = next((r["deployment"]["model"] for r in runs if r["model"] == model_id and "deployment" in r), model_id)
    if isinstance(spec, dict) and isinstance(spec.get("config"), str):
        with open(os.path.join(ROOT, spec["config"]), encoding="utf-8") as handle:
            spec = {**spec, "config": json.load(handle)["config"]}
    return spec


def wait_healthy(server: "subprocess.Popen", port: int, budget_s: float, started: float) -> Optional[float]:
    """Seconds from `started` (time.monotonic) until http://127.0.0.1:port/health answers 200; None when the server
    exits first or `budget_s` runs out (the caller shows its log)."""
    while time.monotonic() - started < budget_s:
        if server.poll() is not None:
            return None
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                if answer.status == 200:
                    return time.monotonic() - started
        except OSError:
            time.sleep(1)
    return None
