# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Action gateway_lock: say who runs (read on the controller: its host name, the user, the ansible-playbook process and
its start, the boot and process namespace, the playbooks of its command line) and hand it to the gateway_lock module on
the gateway host. When another run holds the lock and that run provably ended on this very controller (the same host,
boot and process namespace, its process gone), the lock is taken over in a second call, which the result says; any
other holder stops the run with the module's message."""

from __future__ import annotations

import getpass
import multiprocessing
import os
import socket
from typing import Any, Dict, Optional

from ansible.plugins.action import ActionBase

from ansible_collections.llmfleet.serving.plugins.module_utils import _run_lock as rl


def _text(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def process_start(pid: int) -> Optional[str]:
    """The start time of process `pid` (Linux: /proc/<pid>/stat field 22, clock ticks after boot); None when no such
    process runs here (or the system has no /proc)."""
    stat = _text(f"/proc/{int(pid)}/stat")
    if not stat:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def controller_owner() -> Dict[str, Any]:
    """Who runs: this controller, the user, and the ansible-playbook process (the parent of the worker that runs this
    action: Ansible forks its workers from it)."""
    pid = os.getppid() if multiprocessing.current_process().name != "MainProcess" else os.getpid()
    start = process_start(pid)
    host = socket.gethostname()
    try:
        pid_ns: Optional[str] = os.readlink("/proc/self/ns/pid")
    except OSError:
        pid_ns = None
    cmdline = _text(f"/proc/{pid}/cmdline")
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return {"run": f"{host}/{pid}/{start}" if start else f"{host}/{pid}", "controller": host, "user": user, "pid": pid,
            "pid_start": start, "boot_id": (_text("/proc/sys/kernel/random/boot_id") or "").strip() or None,
            "pid_ns": pid_ns, "playbook": rl.playbooks_of(cmdline.split("\0")) if cmdline else ""}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        owner = controller_owner()
        args = dict(self._task.args, owner=owner)
        answer = self._execute_module(module_name="llmfleet.serving.gateway_lock", module_args=args, task_vars=task_vars)
        held = answer.get("held_by")
        if answer.get("decision") == rl.REFUSE and held and not self._play_context.check_mode:
            if rl.provably_ended(held, owner, process_start(int(held.get("pid") or 0))):
                answer = self._execute_module(module_name="llmfleet.serving.gateway_lock",
                                              module_args=dict(args, take_over=held["run"]), task_vars=task_vars)
            elif rl.same_controller(held, owner):
                answer["msg"] = f"{answer.get('msg', '')} (pid {held.get('pid')} still runs on this controller)"
        result.update(answer)
        return result
