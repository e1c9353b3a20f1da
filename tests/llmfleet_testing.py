"""Run ansible / ansible-playbook from the project's venv against this machine and read their
results as JSON (the ansible.posix.json callback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Dict, Optional

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
