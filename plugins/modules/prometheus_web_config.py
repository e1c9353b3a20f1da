#!/usr/bin/python
# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: prometheus_web_config
short_description: Prometheus's web configuration file - its basic auth users, bcrypt-hashed on the target
version_added: 0.1.0
description:
  - Writes the file Prometheus reads with C(--web.config.file) (Prometheus >= 2.24), C(basic_auth_users) with a bcrypt
    hash per user, hashed on this host with Python's C(crypt) (Blowfish, C($2b$); Debian 12's python3.11).
  - A user whose password still matches its hash in the existing file keeps that hash, so an unchanged user list writes
    nothing (a new salt each run would change the file each run); any other user is hashed anew.
  - With O(validate), the new file is checked first (C(promtool check web-config %s)) and replaces the live one only when
    the check passes. With no user the file is removed.
  - No password and no hash is ever shown (the passwords are C(no_log); the diff lists the user names only). Prometheus
    reads the file on every request, so a change needs no restart.
author:
  - llmfleet.serving developers (!UNKNOWN)
options:
  path:
    description: The web configuration file.
    type: path
    required: true
  users:
    description: The users; empty removes the file.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The user name (no C(:), no control character).
        type: str
        required: true
      password:
        description: The password (at most 72 bytes, all bcrypt reads), from a vault.
        type: str
        required: true
  owner:
    description: The file's owner.
    type: str
    default: root
  group:
    description: The file's group (C(prometheus), which must read it, once the package made it).
    type: str
    default: root
  mode:
    description: The file's mode, octal.
    type: str
    default: "0640"
  validate:
    description: A command run on the new file before it replaces the live one, C(%s) standing for its path.
    type: str
attributes:
  check_mode:
    support: full
    description: Says whether the file would change; writes nothing.
  diff_mode:
    support: partial
    description: The user names before and after, never a hash.
requirements:
  - Python's crypt with Blowfish on the target (Debian 12's python3.11)
"""

EXAMPLES = r"""
- name: Prometheus's users
  llmfleet.serving.prometheus_web_config:
    path: /etc/prometheus/llmfleet-web.yml
    users:
      - name: ops
        password: "{{ vault_prometheus_password }}"
    group: prometheus
    validate: promtool check web-config %s
"""

RETURN = r"""
users:
  description: The user names in the file.
  returned: always
  type: list
rehashed:
  description: The user names hashed anew (a new user, or a changed password).
  returned: always
  type: list
"""

import grp
import os
import pwd
import shlex
import tempfile
import warnings

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.serving.plugins.module_utils import _prometheus_auth as pa
from ansible_collections.llmfleet.serving.plugins.module_utils._config_tree import read_text, write_beside

try:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)   # crypt is deprecated in 3.11, gone in 3.13
        import crypt
    HAS_CRYPT = True
except ImportError:
    HAS_CRYPT = False


def _matches(password, hashed):
    return crypt.crypt(password, hashed) == hashed


def _make(password):
    return crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH))


def _ids(module, owner, group):
    try:
        return pwd.getpwnam(owner).pw_uid, grp.getgrnam(group).gr_gid
    except KeyError as exc:
        module.fail_json(msg=f"{module.params['path']}: no such user or group on this host ({exc}): owner={owner}, group={group}; "
                             "set owner and group to ones that exist (the prometheus package makes its group)")
    return None, None


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "users": {"type": "list", "elements": "dict", "default": [],
                      "options": {"name": {"type": "str", "required": True},
                                  "password": {"type": "str", "required": True, "no_log": True}}},
            "owner": {"type": "str", "default": "root"},
            "group": {"type": "str", "default": "root"},
            "mode": {"type": "str", "default": "0640"},
            "validate": {"type": "str"},
        },
        supports_check_mode=True,
    )
    p = module.params
    path = p["path"]
    try:
        users = pa.checked_users(p["users"])
        mode = int(p["mode"], 8)
    except pa.PrometheusAuthError as exc:
        module.fail_json(msg=str(exc))
    except ValueError:
        module.fail_json(msg=f"mode={p['mode']!r} is not an octal mode such as 0640")
    old = read_text(path)
    names = [n for n, _pw in users]
    if not users:
        if old is not None and not module.check_mode:
            os.remove(path)
        module.exit_json(changed=old is not None, users=[], rehashed=[],
                         diff={"before": pa.summary(old), "after": "(no file)\n"})
    if not HAS_CRYPT:
        module.fail_json(msg="this host's Python has no crypt module (removed in Python 3.13): run the role on Debian 12, "
                             "whose python3.11 has it with Blowfish")
    try:
        text, fresh = pa.render(users, old, _matches, _make)
    except pa.PrometheusAuthError as exc:
        module.fail_json(msg=str(exc))
    uid, gid = _ids(module, p["owner"], p["group"])
    st = os.stat(path) if old is not None else None
    changed = text != old or st is None or (st.st_mode & 0o7777, st.st_uid, st.st_gid) != (mode, uid, gid)
    diff = {"before": pa.summary(old), "after": pa.summary(text)}
    if changed and not module.check_mode:
        # checked whenever the file is written: also where only its group or mode changes (the first install's second pass,
        # once the package brought promtool), so no file Prometheus reads went unchecked
        if p["validate"]:
            if "%s" not in p["validate"]:
                module.fail_json(msg=f"validate={p['validate']!r} must name the file as %s")
            fd, temp = tempfile.mkstemp(prefix=".llmfleet-web-", suffix=".yml", dir=os.path.dirname(path) or ".")
            try:
                os.write(fd, text.encode("utf-8"))
                os.close(fd)
                rc, out, err = module.run_command(p["validate"].replace("%s", shlex.quote(temp)), use_unsafe_shell=False)
            finally:
                os.unlink(temp)
            if rc != 0:
                module.fail_json(msg=f"{path}: the new file failed `{p['validate']}` (rc {rc}); nothing changed. Fix what "
                                     f"it says and run again: {(out + err).replace(temp, path).strip()}")
        write_beside(path, text.encode("utf-8"), mode, uid, gid)
    module.exit_json(changed=changed, users=names, rehashed=fresh, diff=diff)


if __name__ == "__main__":
    main()
