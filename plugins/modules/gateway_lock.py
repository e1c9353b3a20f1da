#!/usr/bin/python
# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: gateway_lock
short_description: Take or release the fleet's run lock on a gateway host
version_added: 0.1.0
description:
  - The gateway role's own lock (its C(lock) entry point runs it on each gateway host). One run at a time changes the
    fleet; serve.yml, site.yml, upgrade.yml and gateway.yml take it before their first change and release it at their
    end.
  - "The lock is one file beside the rotation state, C({run, controller, user, pid, playbook, since, ...}). A run that
    finds it free takes it; one that finds its own (the same run - site.yml imports serve.yml and gateway.yml) keeps it;
    one that finds another run's stops with a message that names the holder, its age, and how to clear a stale lock."
  - Its action plugin fills O(owner) on the controller and, when the holder provably ended on this same controller (the
    same host, boot and process namespace, its process gone), asks again with O(take_over) set to that run.
  - One writer at a time on a host (an exclusive lock on O(path) with C(.lock) appended).
author:
  - llmfleet.serving developers (!UNKNOWN)
options:
  path:
    description: The lock file.
    type: path
    default: /var/lib/llmfleet/gateway/run-lock.json
  state:
    description: C(present) takes (or keeps) the lock, C(absent) releases it when this run holds it.
    type: str
    choices: [present, absent]
    default: present
  owner:
    description:
      - Who runs, C({run, controller, user, pid, pid_start, boot_id, pid_ns, playbook}); the action plugin fills it on the
        controller (an owner given in the task is replaced).
    type: dict
  break_lock:
    description: Take the lock whoever holds it (the operator checked that the holder has ended); said in the result.
    type: bool
    default: false
  take_over:
    description: Take the lock when this run (a C(run) value) holds it; the action plugin sets it for a run that ended.
    type: str
attributes:
  check_mode:
    support: full
    description: Reports what it would do; a lock another run holds is a warning, not a failure, and nothing is written.
  diff_mode:
    support: none
    description: The result's C(held_by) and C(lock) are the before and after.
  idempotent:
    support: full
    description: Taking a lock this run holds, or releasing one it does not, changes nothing.
notes:
  - Runs on the gateway host, as root (the file is 0644 root, in the gateway role's state folder).
"""

EXAMPLES = r"""
- name: Take the fleet's lock on this gateway
  llmfleet.serving.gateway_lock:
    state: present

- name: Release it
  llmfleet.serving.gateway_lock:
    state: absent
"""

RETURN = r"""
decision:
  description: What was done - take, keep, break, take_over, refuse (present); release, none, not_ours (absent).
  returned: always
  type: str
held_by:
  description: The holder's record before the task; null when the lock was free.
  returned: always
  type: dict
lock:
  description: The holder's record after the task; null when the lock is free.
  returned: always
  type: dict
note:
  description: What the run should know (also a warning) - a lock taken over or broken, another run's lock in check mode
    or left at a release; empty otherwise.
  returned: success
  type: str
"""

import fcntl
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.serving.plugins.module_utils import _run_lock as rl
from ansible_collections.llmfleet.serving.plugins.module_utils._config_tree import read_text, write_beside


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "default": "/var/lib/llmfleet/gateway/run-lock.json"},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "owner": {"type": "dict"},
            "break_lock": {"type": "bool", "default": False},
            "take_over": {"type": "str"},
        },
        required_if=[("state", "present", ("owner",)), ("state", "absent", ("owner",))],
        supports_check_mode=True,
    )
    p = module.params
    path = p["path"]
    host = os.uname().nodename
    writing = not module.check_mode
    guard = None
    try:
        if writing:
            os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
            guard = open(path + ".lock", "a", encoding="utf-8")   # pylint: disable=consider-using-with
            fcntl.flock(guard, fcntl.LOCK_EX)
        now = time.time()
        try:
            held = rl.parse(read_text(path), path)
            owner = rl.check_owner(p["owner"])
        except rl.LockError as exc:
            module.fail_json(msg=f"gateway_lock on {host}: {exc}")
        result = {"held_by": held, "lock": held, "changed": False}
        if p["state"] == "absent":
            if rl.releases(held, owner):
                if writing:
                    os.unlink(path)
                module.exit_json(**{**result, "decision": "release", "lock": None, "changed": True})
            decision = "none" if held is None else "not_ours"
            note = f"the fleet's lock on {host} is held by another run ({rl.describe(held, now)}): left as it is" \
                if held is not None else ""
            if note:
                module.warn(note)
            module.exit_json(**dict(result, decision=decision, note=note))
        decision = rl.decide(held, owner, p["break_lock"], p["take_over"])
        if decision == rl.REFUSE:
            message = rl.refusal(held, now, path, host)
            if module.check_mode:
                module.warn(message)
                module.exit_json(**dict(result, decision=decision, note=message))
            module.fail_json(msg=message, **dict(result, decision=decision))
        if decision == rl.KEEP:
            module.exit_json(**dict(result, decision=decision, note=""))
        record = rl.stamp(owner, now)
        note = ""
        if decision in (rl.BREAK, rl.TAKE_OVER):
            why = "llmfleet_break_lock" if decision == rl.BREAK else "that run has ended on this controller"
            note = f"took over the fleet's lock on {host} from {rl.describe(held, now)} ({why})"
            module.warn(note)
        if writing:
            write_beside(path, rl.render(record).encode("utf-8"), 0o644, os.getuid(), os.getgid())
        module.exit_json(**{**result, "decision": decision, "lock": record, "changed": True, "note": note})
    except OSError as exc:
        module.fail_json(msg=f"gateway_lock on {host}: {exc}; check the folder's free space and permissions, then run again")
    finally:
        if guard:
            guard.close()


if __name__ == "__main__":
    main()
