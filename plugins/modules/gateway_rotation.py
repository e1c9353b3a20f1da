#!/usr/bin/python
# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: gateway_rotation
short_description: Take one instance out of the gateway's rotation or put it back, or report the rotation
version_added: 0.1.0
description:
  - The gateway role's own way to change its rotation (its C(rotation) and C(routes) entry points run it on each
    gateway host); no other role writes the gateway's files.
  - "The rotation state (the instances taken out, as C({\"out\": [\"host/instance\", ...], \"since\": {...}, \"by\": {...}})) is kept
    in O(state_file): since when each is out (UTC) and which run took it out (the holder of O(lock_file), when a run holds
    it). The gateway role's full render reads it, so a re-render keeps a drained instance out."
  - With O(instance) and O(down), updates the state and sets or clears C(down) on that instance's upstream server line
    in O(conf), and no other line. The changed configuration is checked first on a private copy (C(nginx.conf) and the
    folder of O(conf), in O(staging), removed afterwards) with O(validate); then the state is written, the configuration
    written beside the live file and renamed over it, and O(reload) run. When the reload fails, both files are put back.
  - Without a state file yet, the instances O(conf) has C(down) are the state (a gateway set up before the state
    existed, or a C(down) set by hand), so a change of one instance never puts another one back.
  - With O(peers), taking O(instance) out first checks that one of them serves on this gateway (routed without C(down)
    and not in the state, or not routed yet) - the N-1 check, made under the lock, so two changes of one batch cannot
    take out the last two instances of a model; without one, it fails and changes nothing.
  - With O(keep) and no O(instance), forgets the instances of the state that are not in O(keep) (no plan has them any
    more); the configuration is left as it is (the next full render no longer routes them).
  - Without O(instance) or O(keep), reads only and reports the routes and the state.
  - One writer at a time on a host (an exclusive lock beside the state file).
author:
  - llmfleet.serving developers (!UNKNOWN)
options:
  instance:
    description: The instance, C(host/instance) as the plan names it. Omitted, the module only reports.
    type: str
  down:
    description: C(true) takes O(instance) out of the rotation, C(false) puts it back. Required with O(instance).
    type: bool
  peers:
    description: The other instances of O(instance)'s model (C(host/instance)); with O(down), one of them must serve here.
      Empty checks nothing (the only instance, its downtime accepted).
    type: list
    elements: str
    default: []
  keep:
    description: Every planned instance (C(host/instance)); the state forgets the others. Not with O(instance).
    type: list
    elements: str
  lock_file:
    description: The fleet's run lock (the gateway_lock module's file); its holder is recorded as the run that took an
      instance out.
    type: path
    default: /var/lib/llmfleet/gateway/run-lock.json
  conf:
    description: The gateway's live configuration with the upstream server lines.
    type: path
    default: /etc/nginx/llmfleet/gateway.conf
  state_file:
    description: The rotation state.
    type: path
    default: /var/lib/llmfleet/gateway/rotation.json
  root:
    description: The folder of C(nginx.conf); C(nginx.conf) and the folder of O(conf) are copied to O(staging) for the check.
    type: path
    default: /etc/nginx
  staging:
    description: Where the private copy (mode 0700) with the new O(conf) is checked; removed afterwards.
    type: path
    default: /etc/nginx/.llmfleet-rotation
  validate:
    description: The command (argv) that checks the staging copy; C(%s) stands for O(staging). Empty checks nothing.
    type: list
    elements: str
    default: [nginx, -t, -q, -c, "%s/nginx.conf"]
  reload:
    description: The command (argv) run after O(conf) changed, so that nginx uses it (a stream in flight finishes on the
      old worker). Empty runs nothing.
    type: list
    elements: str
    default: [systemctl, reload, nginx]
attributes:
  check_mode:
    support: full
    description: Reports whether the state or the configuration would change; writes and runs nothing.
  diff_mode:
    support: none
    description: The change is one C(down) on one server line; the task's C(routes) say what the gateway routes after it.
  idempotent:
    support: full
    description: An instance already out (or in) changes nothing and runs no check.
notes:
  - Runs on the gateway host.
  - A configuration that does not route O(instance) yet (before the gateway's first render of its plan) is left as it
    is; the state still records it, so the first render routes it C(down).
"""

EXAMPLES = r"""
- name: Out of the rotation
  llmfleet.serving.gateway_rotation:
    instance: gpu1/qwen3-0
    down: true
  register: rotated

- name: What the gateway routes now
  llmfleet.serving.gateway_rotation: {}
  register: routes
"""

RETURN = r"""
routes:
  description: Every upstream server line of O(conf) after the change, C({host, instance, address, down}); empty when
    O(conf) does not exist.
  returned: always
  type: list
  elements: dict
reload:
  description: Whether O(conf) changed (and O(reload) ran).
  returned: always
  type: bool
out:
  description: The instances out of the rotation after the change (C(host/instance)).
  returned: always
  type: list
  elements: str
detail:
  description: For each instance out, C({since, by}) - since when (UTC; null when a state of an older release did not
    say) and by which run.
  returned: always
  type: dict
forgotten:
  description: The instances O(keep) made the state forget.
  returned: always
  type: list
  elements: str
"""

import fcntl
import os
import shutil
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.serving.plugins.module_utils._config_tree import ConfigTreeError, read_text, validate_argv, write_beside
from ansible_collections.llmfleet.serving.plugins.module_utils import _run_lock as rl
from ansible_collections.llmfleet.serving.plugins.module_utils._rotation import (
    RotationError, down_in, forget, mark, read_state, routes, serving, set_one, write_state)


def _replace(path, text, like=None, mode=0o644):
    """Replace path with text (write_beside): like's mode and owner, or mode and this process's owner."""
    write_beside(path, text.encode("utf-8"), like.st_mode & 0o7777 if like is not None else mode,
                 like.st_uid if like is not None else os.getuid(), like.st_gid if like is not None else os.getgid())


def _stage(root, conf_path, new_conf, staging):
    """A private copy of the tree nginx reads (nginx.conf and the folder of conf_path), with the new configuration in it.
    Created 0700 before anything is copied: the tree holds the engines' key."""
    if os.path.isdir(staging):
        shutil.rmtree(staging)
    os.mkdir(staging, 0o700)
    shutil.copy2(os.path.join(root, "nginx.conf"), os.path.join(staging, "nginx.conf"))
    folder = os.path.relpath(os.path.dirname(conf_path), root)
    shutil.copytree(os.path.join(root, folder), os.path.join(staging, folder), symlinks=True)
    _replace(os.path.join(staging, os.path.relpath(conf_path, root)), new_conf, like=os.stat(conf_path))


def main():
    module = AnsibleModule(
        argument_spec={
            "instance": {"type": "str"},
            "down": {"type": "bool"},
            "peers": {"type": "list", "elements": "str", "default": []},
            "keep": {"type": "list", "elements": "str"},
            "lock_file": {"type": "path", "default": "/var/lib/llmfleet/gateway/run-lock.json"},
            "conf": {"type": "path", "default": "/etc/nginx/llmfleet/gateway.conf"},
            "state_file": {"type": "path", "default": "/var/lib/llmfleet/gateway/rotation.json"},
            "root": {"type": "path", "default": "/etc/nginx"},
            "staging": {"type": "path", "default": "/etc/nginx/.llmfleet-rotation"},
            "validate": {"type": "list", "elements": "str", "default": ["nginx", "-t", "-q", "-c", "%s/nginx.conf"]},
            "reload": {"type": "list", "elements": "str", "default": ["systemctl", "reload", "nginx"]},
        },
        required_together=[("instance", "down")],
        mutually_exclusive=[("instance", "keep")],
        supports_check_mode=True,
    )
    p = module.params
    root, staging = p["root"].rstrip("/"), p["staging"].rstrip("/")
    try:
        argv = validate_argv(p["validate"], staging)
    except ConfigTreeError as exc:
        module.fail_json(msg=f"gateway_rotation: {exc} (fix the validate option)")
    changing = p["instance"] is not None or p["keep"] is not None
    writing = changing and not module.check_mode
    if writing:
        os.makedirs(os.path.dirname(p["state_file"]), 0o755, exist_ok=True)
    lock = open(p["state_file"] + ".lock", "a", encoding="utf-8") if writing else None   # pylint: disable=consider-using-with
    try:
        if lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
        state_text = read_text(p["state_file"])
        conf = read_text(p["conf"])
        host = os.uname().nodename
        try:
            # no state file yet: what the live configuration has down is the state (a gateway set up before the state
            # existed, or a `down` set by hand), so a change of one instance never puts another one back
            state = read_state(state_text) if state_text is not None else {n: {} for n in down_in(conf or "")}
            if not changing:
                module.exit_json(changed=False, reload=False, out=sorted(state), detail=state, forgotten=[],
                                 routes=routes(conf or ""))
            if p["keep"] is not None:
                new_state, new_conf = forget(state, p["keep"]), conf
            else:
                if p["down"] and p["peers"] and p["instance"] not in state and not serving(routes(conf or ""), sorted(state),
                                                                                           p["peers"]):
                    module.fail_json(msg=f"{p['instance']} stays in the rotation of {host}: none of {', '.join(p['peers'])} "
                                         "serves there now (each is out of the rotation), and taking it out would leave its "
                                         "model without an instance; nothing changed. Another change took them out (a host of "
                                         "the same batch, llmfleet_serve_serial above 1, or a run that stopped halfway): run "
                                         "again once they are back, or set vllm_allow_downtime: true",
                                     out=sorted(state), detail=state)
                holder = rl.parse(read_text(p["lock_file"]), p["lock_file"]) if p["lock_file"] else None
                now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                new_state = mark(state, p["instance"], p["down"], now, rl.short(holder) if holder else None)
                new_conf = set_one(conf, p["instance"], p["down"]) if conf is not None else None
        except (RotationError, rl.LockError) as exc:
            module.fail_json(msg=f"gateway_rotation on {p['state_file']}: {exc} (see the gateway role's README, rotation)")
        state_changed = new_state != state or (state_text is None and bool(new_state))
        conf_changed = new_conf != conf
        result = {"changed": state_changed or conf_changed, "reload": conf_changed, "out": sorted(new_state),
                  "detail": new_state, "forgotten": sorted(set(state) - set(new_state)) if p["keep"] is not None else [],
                  "routes": routes(new_conf or "")}
        if module.check_mode or not result["changed"]:
            module.exit_json(**result)
        if conf_changed:
            try:
                _stage(root, p["conf"], new_conf, staging)
                if argv:
                    rc, stdout, stderr = module.run_command(argv)
                    if rc != 0:
                        module.fail_json(msg=f"{' '.join(argv)} rejected the gateway's configuration with {p['instance']} "
                                             f"{'out of' if p['down'] else 'back in'} the rotation (nothing changed): "
                                             f"{(stderr or stdout).strip()} -- run playbooks/gateway.yml to render it again, "
                                             "then run again", rc=rc)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        # the state first: a render that reads it before the configuration is replaced already renders the change
        if state_changed:
            _replace(p["state_file"], write_state(new_state))
        if conf_changed:
            _replace(p["conf"], new_conf, like=os.stat(p["conf"]))
            if p["reload"]:
                rc, stdout, stderr = module.run_command(p["reload"])
                if rc != 0:
                    # nginx still runs the previous configuration: put the files back as they were, so that what the
                    # files say is what nginx does
                    _replace(p["conf"], conf, like=os.stat(p["conf"]))
                    if state_text is None:
                        os.unlink(p["state_file"])
                    else:
                        _replace(p["state_file"], state_text)
                    module.fail_json(msg=f"{' '.join(p['reload'])} failed ({(stderr or stdout).strip()}): the gateway still "
                                         f"routes as before and its files are as they were; look at `systemctl status nginx` "
                                         "on this host, then run again", rc=rc)
    except OSError as exc:
        module.fail_json(msg=f"gateway_rotation: {exc}; check the folder's free space and permissions, then run again")
    finally:
        if lock:
            lock.close()
    module.exit_json(**result)


if __name__ == "__main__":
    main()
