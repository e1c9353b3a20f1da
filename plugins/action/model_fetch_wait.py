# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Action model_fetch_wait: follow model_fetch jobs started with async/poll 0 and print, every
interval, how far each download is (percent of the bytes this run needs, rate, time left), from the
bytes on disk under its folder. Returns each job's own result when all have finished."""

from __future__ import annotations

import shlex
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.llmfleet.serving.plugins.module_utils._model_store import progress_line

display = Display()


class ActionModule(ActionBase):
    _requires_connection = True
    TRANSFERS_FILES = False

    def _disk_bytes(self, dest):
        """Bytes of the files under dest, as model_fetch's bytes_on_disk counts them (module_utils bytes_under)."""
        out = self._low_level_execute_command(
            f"find {shlex.quote(dest)} -type f -printf '%s\\n' 2>/dev/null | awk '{{s += $1}} END {{print s + 0}}'")
        try:
            return int((out.get("stdout") or "0").split()[0])
        except (ValueError, IndexError):
            return 0

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        jobs = list(args.get("jobs") or [])
        interval = max(1, int(args.get("interval", 15)))
        timeout = int(args.get("timeout", 21600))
        for job in jobs:
            missing = {"jid", "label", "dest", "needed"} - set(job)
            if missing:
                raise AnsibleActionFail(f"model_fetch_wait: job {job} lacks {sorted(missing)}")
        host = task_vars.get("inventory_hostname", "?")
        # where the async jobs write their results (what ansible.builtin.async_status's action computes)
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))
        started = time.monotonic()
        final = {}
        while len(final) < len(jobs):
            if time.monotonic() - started > timeout:
                running = [j["label"] for j in jobs if j["jid"] not in final]
                raise AnsibleActionFail(f"{', '.join(running)} still downloading after {timeout} s (model_store_download_timeout); "
                                        "re-run to resume from what is on disk")
            time.sleep(min(interval, max(1, timeout)))
            for job in jobs:
                if job["jid"] in final:
                    continue
                status = self._execute_module(module_name="ansible.legacy.async_status",
                                              module_args={"jid": job["jid"], "_async_dir": async_dir}, task_vars=task_vars)
                if status.get("finished"):
                    final[job["jid"]] = status
                    self._execute_module(module_name="ansible.legacy.async_status",
                                         module_args={"jid": job["jid"], "mode": "cleanup", "_async_dir": async_dir}, task_vars=task_vars)
                    continue
                done = self._disk_bytes(job["dest"]) - int(job.get("start_bytes", 0))
                display.display(f"[{host}] " + progress_line(job["label"], done, int(job["needed"]), time.monotonic() - started))
        results = [final[j["jid"]] for j in jobs]
        failed = [(j["label"], r) for j, r in zip(jobs, results) if r.get("failed")]
        result.update(changed=any(r.get("changed") for r in results), results=results)
        if failed:
            result["failed"] = True
            result["msg"] = " | ".join(f"{label}: {r.get('msg', 'failed')}" for label, r in failed)
        return result
