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
  - "The rotation state (the instances taken out, as C({\"out\": [\"host/instance\", ...]})) is kept in O(state_file); the
    gateway role's full render reads it, so a re-render keeps a drained instance out."
  - With O(instance) and O(down), updates the state and sets or clears C(down) on that instance's upstream server line
    in O(conf). The changed configuration is checked first on a copy of the live tree in O(staging) with O(validate),
    then written beside the live file and renamed over it. The caller reloads nginx when it changed.
  - Without O(instance), reads only and reports the routes and the state.
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
  conf:
    description: The gateway's live configuration with the upstream server lines.
    type: path
    default: /etc/nginx/llmfleet/gateway.conf
  state_file:
    description: The rotation state.
    type: path
    default: /var/lib/llmfleet/gateway/rotation.json
  root:
    description: The configuration folder copied to O(staging) for the check (its dot-folders are left out).
    type: path
    default: /etc/nginx
  staging:
    description: Where the copy of O(root) with the new O(conf) is checked (emptied each time).
    type: path
    default: /etc/nginx/.llmfleet-rotation
  validate:
    description: The command (argv) that checks the staging copy; C(%s) stands for O(staging). Empty checks nothing.
    type: list
    elements: str
    default: [nginx, -t, -q, -c, "%s/nginx.conf"]
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
  description: Whether O(conf) changed (then nginx must reload to use it).
  returned: always
  type: bool
out:
  description: The instances out of the rotation after the change (C(host/instance)).
  returned: always
  type: list
  elements: str
"""

import fcntl
import os
import shutil

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.serving.plugins.module_utils._config_tree import ConfigTreeError, validate_argv
from ansible_collections.llmfleet.serving.plugins.module_utils._rotation import (
    RotationError, apply, parse_state, render_state, routes, update)


def _read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def _replace(path, text, like=None, mode=0o644):
    """Write beside path, then rename over it: a reader sees the old file or the new one. Keeps like's mode and owner."""
    temp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".llmfleet-new")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, text.encode("utf-8"))
        if like is not None:
            os.fchown(fd, like.st_uid, like.st_gid)
            os.fchmod(fd, like.st_mode & 0o7777)
        else:
            os.fchmod(fd, mode)
    finally:
        os.close(fd)
    os.replace(temp, path)


def main():
    module = AnsibleModule(
        argument_spec={
            "instance": {"type": "str"},
            "down": {"type": "bool"},
            "conf": {"type": "path", "default": "/etc/nginx/llmfleet/gateway.conf"},
            "state_file": {"type": "path", "default": "/var/lib/llmfleet/gateway/rotation.json"},
            "root": {"type": "path", "default": "/etc/nginx"},
            "staging": {"type": "path", "default": "/etc/nginx/.llmfleet-rotation"},
            "validate": {"type": "list", "elements": "str", "default": ["nginx", "-t", "-q", "-c", "%s/nginx.conf"]},
        },
        required_together=[("instance", "down")],
        supports_check_mode=True,
    )
    p = module.params
    root, staging = p["root"].rstrip("/"), p["staging"].rstrip("/")
    try:
        argv = validate_argv(p["validate"], staging)
    except ConfigTreeError as exc:
        module.fail_json(msg=f"gateway_rotation: {exc} (fix the validate option)")
    folder = os.path.dirname(p["state_file"])
    writing = p["instance"] is not None and not module.check_mode
    if writing:
        os.makedirs(folder, 0o755, exist_ok=True)
    lock = open(p["state_file"] + ".lock", "a") if writing else None   # pylint: disable=consider-using-with
    try:
        if lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
        state_text = _read(p["state_file"])
        conf = _read(p["conf"])
        try:
            out = parse_state(state_text or "")
            new_out = update(out, p["instance"], p["down"]) if p["instance"] is not None else out
            new_conf = apply(conf, new_out) if conf is not None else None
        except RotationError as exc:
            module.fail_json(msg=f"gateway_rotation on {p['state_file']}: {exc} (see the gateway role's README, rotation)")
        state_changed = (state_text or "") != render_state(new_out) if p["instance"] is not None else False
        conf_changed = new_conf != conf
        result = {"changed": state_changed or conf_changed, "reload": conf_changed, "out": new_out,
                  "routes": routes(new_conf or "")}
        if p["instance"] is None:
            # a report: what the live file says (the state may be ahead of a configuration not rendered yet)
            result.update(changed=False, reload=False, out=out, routes=routes(conf or ""))
            module.exit_json(**result)
        if module.check_mode or not result["changed"]:
            module.exit_json(**result)
        if conf_changed:
            if os.path.isdir(staging):
                shutil.rmtree(staging)
            shutil.copytree(root, staging, symlinks=True, ignore=lambda d, names: [n for n in names if n.startswith(".")]
                            if os.path.samefile(d, root) else [])
            os.chmod(staging, 0o700)
            _replace(os.path.join(staging, os.path.relpath(p["conf"], root)), new_conf, like=os.stat(p["conf"]))
            if argv:
                rc, stdout, stderr = module.run_command(argv)
                if rc != 0:
                    module.fail_json(msg=f"{' '.join(argv)} rejected the gateway's configuration with {p['instance']} "
                                         f"{'out of' if p['down'] else 'back in'} the rotation (nothing changed): "
                                         f"{(stderr or stdout).strip()} -- run playbooks/gateway.yml to render it again, "
                                         "then run again", rc=rc)
            _replace(p["conf"], new_conf, like=os.stat(p["conf"]))
        if state_changed:
            _replace(p["state_file"], render_state(new_out))
    except OSError as exc:
        module.fail_json(msg=f"gateway_rotation: {exc}; check the folder's free space and permissions, then run again")
    finally:
        if lock:
            lock.close()
    module.exit_json(**result)


if __name__ == "__main__":
    main()
