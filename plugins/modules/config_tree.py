#!/usr/bin/python
# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: config_tree
short_description: Install a folder of configuration files only after its program accepted the whole new tree
version_added: 0.1.0
description:
  - Compares each file with the live one under O(root) (bytes, mode, owner). When none differs and no stale file is
    left, nothing is written and nothing is run.
  - Otherwise writes the whole tree to O(staging), runs O(validate) on it (for nginx C(nginx -t -q -c %s/nginx.conf)),
    and only when that passes installs the files that differ (each written beside its target, then renamed over it)
    and removes the stale files under O(prune). A tree the program rejects fails the task with the program's own
    message; the live files are untouched.
  - The files must use paths relative to their folder so the staging copy and the live copy are the same bytes
    (nginx resolves a relative C(include), C(js_path) and C(js_import) against the folder of the main
    configuration file).
  - "With the action plugin of the same name, O(templates) are rendered on the controller (like the template module:
    role templates, every variable of the task) and handed to the module as O(files) and O(private_files): one task
    and one round trip to the host for the whole tree."
author:
  - llmfleet.serving developers (!UNKNOWN)
options:
  templates:
    description:
      - "Rendered by the action plugin on the controller: each C({src, dest, mode, secret}); C(src) is found like the
        template module's (the role's C(templates/) folder), C(dest) is the path under O(root), C(secret) keeps the
        content out of every output and diff."
      - The module itself refuses them (they are replaced by O(files) and O(private_files)).
    type: list
    elements: dict
    default: []
  files:
    description: The files whose content may be shown in a diff.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Path under O(root) (relative, no C(..)).
        type: str
        required: true
      content:
        description: The file's text.
        type: str
        required: true
      mode:
        description: Its octal mode, for example C(0644).
        type: str
        required: true
  private_files:
    description: Files holding a secret; their content is never shown (no diff, no log; the content is a no_log value).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Path under O(root) (relative, no C(..)).
        type: str
        required: true
      content:
        description: The file's text.
        type: str
        required: true
      mode:
        description: Its octal mode, for example C(0600).
        type: str
        required: true
  root:
    description: The live folder, for example C(/etc/nginx); it must exist (in check mode a missing one is reported
      as every file to install).
    type: path
    required: true
  staging:
    description: Where the whole new tree is written and checked first (emptied each time).
    type: path
    required: true
  validate:
    description: The command (argv) that checks the staging tree; C(%s) stands for O(staging). Empty checks nothing.
    type: list
    elements: str
    default: []
  prune:
    description: Folders under O(root) whose files not in the tree are removed (an earlier layout's leftovers).
    type: list
    elements: str
    default: []
  owner:
    description: Owner of every file and created folder.
    type: str
    default: root
  group:
    description: Group of every file and created folder.
    type: str
    default: root
  directory_mode:
    description: Mode of the folders it creates (under O(root) and the staging folder).
    type: str
    default: "0700"
attributes:
  check_mode:
    support: full
    description: Reports which files would be installed or removed (with their diff); writes and runs nothing.
  diff_mode:
    support: full
    description: Before and after of each changed file; a secret file shows only that it changes.
  idempotent:
    support: full
    description: A tree already live changes nothing and runs no validation.
notes:
  - Runs on the host whose folder it manages.
"""

EXAMPLES = r"""
- name: Render, check with nginx -t, then install
  llmfleet.serving.config_tree:
    templates:
      - {src: nginx.conf.j2, dest: nginx.conf, mode: "0644", secret: false}
      - {src: engine_auth.inc.j2, dest: llmfleet/engine_auth.inc, mode: "0600", secret: true}
    root: /etc/nginx
    staging: /etc/nginx/.llmfleet-staging
    validate: [nginx, -t, -q, -c, "%s/nginx.conf"]
    prune: [llmfleet]
  notify: Reload nginx
"""

RETURN = r"""
installed:
  description: Paths (under O(root)) written because they differed.
  returned: always
  type: list
  elements: str
removed:
  description: Stale paths removed from the pruned folders.
  returned: always
  type: list
  elements: str
stage:
  description: Where it failed, C(input), C(validate) or C(install) (on failure).
  returned: failure
  type: str
"""

import os
import shutil
import stat as statmod

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.serving.plugins.module_utils._config_tree import (
    ConfigTreeError, Present, diff_entries, differing, parse_mode, stale, summary, validate_argv, wanted_files, write_beside)

try:
    import grp
    import pwd
except ImportError:  # pragma: no cover - not a POSIX host
    grp = pwd = None


def _present(root, path):
    full = os.path.join(root, path)
    try:
        info = os.lstat(full)
        if not statmod.S_ISREG(info.st_mode):
            return None
        with open(full, "rb") as handle:
            return Present(handle.read(), statmod.S_IMODE(info.st_mode), info.st_uid, info.st_gid)
    except FileNotFoundError:
        return None


def _found(root, prune):
    out = []
    for folder in prune:
        base = os.path.join(root, folder.strip("/"))
        if os.path.isdir(base):
            out.extend(folder.strip("/") + "/" + name for name in sorted(os.listdir(base))
                       if os.path.isfile(os.path.join(base, name)) or os.path.islink(os.path.join(base, name)))
    return out


def _makedirs(top, path, dir_mode, uid, gid):
    """The folders of path under top, created with dir_mode and the owner when missing."""
    parent = os.path.dirname(path)
    if not parent:
        return
    current = top
    for part in parent.split("/"):
        current = os.path.join(current, part)
        if not os.path.isdir(current):
            os.mkdir(current, dir_mode)
            os.chown(current, uid, gid)


def _write(top, item, uid, gid, dir_mode):
    """Write item beside its target, then rename it over: a reader sees the old file or the new one."""
    _makedirs(top, item.path, dir_mode, uid, gid)
    write_beside(os.path.join(top, item.path), item.content, item.mode, uid, gid)


def main():
    file_spec = {"path": {"type": "str", "required": True}, "content": {"type": "str", "required": True},
                 "mode": {"type": "str", "required": True}}
    secret_spec = dict(file_spec, content={"type": "str", "required": True, "no_log": True})
    module = AnsibleModule(
        argument_spec={
            "templates": {"type": "list", "elements": "dict", "default": []},
            "files": {"type": "list", "elements": "dict", "default": [], "options": file_spec},
            "private_files": {"type": "list", "elements": "dict", "default": [], "options": secret_spec},
            "root": {"type": "path", "required": True},
            "staging": {"type": "path", "required": True},
            "validate": {"type": "list", "elements": "str", "default": []},
            "prune": {"type": "list", "elements": "str", "default": []},
            "owner": {"type": "str", "default": "root"},
            "group": {"type": "str", "default": "root"},
            "directory_mode": {"type": "str", "default": "0700"},
        },
        supports_check_mode=True,
    )
    p = module.params
    root, staging = p["root"].rstrip("/"), p["staging"].rstrip("/")
    if p["templates"]:
        module.fail_json(msg="config_tree: templates are rendered by the action plugin on the controller; use "
                             "llmfleet.serving.config_tree in a task, not the module file alone", stage="input")
    try:
        wanted = wanted_files(p["files"], p["private_files"])
        argv = validate_argv(p["validate"], staging)
        dir_mode = parse_mode(p["directory_mode"])
        uid, gid = pwd.getpwnam(p["owner"]).pw_uid, grp.getgrnam(p["group"]).gr_gid
    except (ConfigTreeError, KeyError) as exc:
        module.fail_json(msg=f"config_tree: {exc} (the owner and group must exist on the host)"
                         if isinstance(exc, KeyError) else f"config_tree: {exc}", stage="input")
    if not os.path.isdir(root):
        if module.check_mode:
            # check mode on a fresh host: the program is not installed yet, so there is nothing to compare with
            module.exit_json(changed=True, installed=[w.path for w in wanted], removed=[],
                             msg=f"check mode: {root} does not exist yet (the program is not installed); a real run "
                                 "renders, checks and installs every file")
        module.fail_json(msg=f"config_tree: {root} does not exist (install the program first)", stage="input")
    present = {w.path: _present(root, w.path) for w in wanted}
    changed_paths = differing(wanted, present, uid, gid)
    removed = stale(_found(root, p["prune"]), wanted, p["prune"])
    changed, msg = summary(changed_paths, removed)
    result = {"changed": changed, "msg": msg, "installed": changed_paths, "removed": removed}
    if module._diff and changed:
        result["diff"] = diff_entries(wanted, present, changed_paths, removed, root)
    if not changed or module.check_mode:
        module.exit_json(**result)
    # the whole tree, fresh, in the staging folder, checked there before any live file is touched
    if os.path.isdir(staging):
        shutil.rmtree(staging)
    os.makedirs(staging, dir_mode)
    os.chown(staging, uid, gid)
    for item in wanted:
        _write(staging, item, uid, gid, dir_mode)
    if argv:
        rc, out, err = module.run_command(argv)
        if rc != 0:
            module.fail_json(msg=f"{' '.join(argv)} rejected the new tree (the live files under {root} are unchanged): "
                                 f"{(err or out).strip()} -- fix the template or the variable the message names, and run again",
                             stage="validate", rc=rc, installed=[], removed=[])
    try:
        for item in wanted:
            if item.path in changed_paths:
                _write(root, item, uid, gid, dir_mode)
        for path in removed:
            os.unlink(os.path.join(root, path))
    except OSError as exc:
        result.update(msg=f"config_tree: installing under {root} failed: {exc}; check the folder's free space and "
                          "permissions, then run again (the files installed so far are listed)", stage="install")
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
