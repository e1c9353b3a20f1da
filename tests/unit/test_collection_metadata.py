"""One statement of what the collection supports, and every other place agreeing with it.

- ansible-core: meta/runtime.yml's requires_ansible (a floor) is the statement; every role's meta/main.yml
  min_ansible_version, the README's Requirements and requirements.txt's pin (the tested line) agree with it.
- Python: ansible-core's own floor for that line (its Requires-Python), which the README names.
- Collections: galaxy.yml's dependencies are exactly the collections the roles and plugins call by FQCN, and
  the README names each with the same floor; the pinned `ansible` bundle carries versions that satisfy them.
- Platforms: every role says Debian bookworm only (what the tests run on), and the README says Debian 12.
"""

from __future__ import annotations

import importlib.metadata
import json
import pathlib
import re
from typing import Dict, Set, Tuple

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
# An FQCN of a collection outside ansible.builtin, as roles and plugins call modules, filters and callbacks.
FQCN_RE = re.compile(r"(?<![\w.])((?:community|ansible|containers|kubernetes)\.[a-z_]+)\.[a-z_]+\b")
# ansible.builtin / ansible.legacy are ansible-core itself; ansible.utils.display etc. are ansible-core Python imports.
CORE = {"ansible.builtin", "ansible.legacy", "ansible.module_utils", "ansible.errors", "ansible.utils", "ansible.plugins",
        "ansible.parsing", "ansible.template", "ansible.playbook", "ansible.executor", "ansible.inventory", "ansible.vars",
        "ansible.config", "ansible.constants", "ansible.release", "ansible.cli", "ansible.galaxy", "ansible.collections",
        "ansible.module", "ansible._internal"}


def version(text: str) -> Tuple[int, ...]:
    parts = [int(p) for p in re.findall(r"\d+", str(text))]
    return tuple(parts + [0] * (3 - len(parts)))


def runtime_floor() -> Tuple[int, ...]:
    spec = str(yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text(encoding="utf-8"))["requires_ansible"])
    match = re.fullmatch(r"\s*>=\s*([\d.]+)\s*", spec)
    assert match, f"meta/runtime.yml requires_ansible {spec!r}: state the floor only ('>=X.Y.Z')"
    return version(match.group(1))


def galaxy() -> Dict:
    return yaml.safe_load((ROOT / "galaxy.yml").read_text(encoding="utf-8"))


def readme_requirements() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"^## Requirements\n(.*?)(?=^## )", text, re.S | re.M)
    assert match, "README.md has no '## Requirements' section"
    return match.group(1)


def roles_meta() -> Dict[str, Dict]:
    return {p.name: yaml.safe_load((p / "meta" / "main.yml").read_text(encoding="utf-8")) if (p / "meta" / "main.yml").is_file() else None
            for p in sorted((ROOT / "roles").iterdir()) if p.is_dir()}


def used_collections() -> Set[str]:
    """Collections the roles and plugins call by FQCN (tasks, templates, defaults, plugin code and docs)."""
    found: Set[str] = set()
    for folder in ("roles", "plugins"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in (".yml", ".yaml", ".py", ".j2") and "__pycache__" not in path.parts:
                for match in FQCN_RE.finditer(path.read_text(encoding="utf-8")):
                    if match.group(1) not in CORE:
                        found.add(match.group(1))
    return found


def test_every_role_states_the_runtime_floor():
    floor = runtime_floor()
    problems = []
    for role, meta in roles_meta().items():
        if meta is None:
            problems.append(f"roles/{role} has no meta/main.yml: give it galaxy_info like the others")
            continue
        stated = meta["galaxy_info"]["min_ansible_version"]
        if version(stated) != floor:
            problems.append(f"roles/{role}/meta/main.yml min_ansible_version {stated!r} differs from meta/runtime.yml's "
                            f"requires_ansible floor {'.'.join(map(str, floor))}")
    assert not problems, "\n".join(problems)


def test_every_role_lists_only_the_tested_platform():
    problems = [f"roles/{role}/meta/main.yml: platforms are what the tests run on, Debian bookworm only"
                for role, meta in roles_meta().items()
                if (meta or {}).get("galaxy_info", {}).get("platforms") != [{"name": "Debian", "versions": ["bookworm"]}]]
    assert not problems, "\n".join(problems)
    assert "Debian 12 (bookworm)" in readme_requirements()


def test_galaxy_dependencies_are_the_collections_in_use():
    deps = galaxy().get("dependencies") or {}
    used = used_collections()
    assert used, "no FQCN found in roles/ and plugins/: the scan is broken"
    assert set(deps) == used, (f"galaxy.yml dependencies {sorted(deps)} differ from the collections roles/ and plugins/ "
                               f"call: {sorted(used)}")
    for name, spec in deps.items():
        assert re.fullmatch(r">=\s*[\d.]+", str(spec)), f"galaxy.yml {name}: {spec!r}, state a floor ('>=X.Y.Z')"


def test_readme_requirements_agree():
    text = readme_requirements()
    floor = runtime_floor()
    stated = re.findall(r"ansible-core\s*>=\s*([\d.]+)", text)
    assert stated, "README's Requirements must name the ansible-core floor ('ansible-core >= X.Y.Z')"
    assert {version(s) for s in stated} == {floor}, f"README says ansible-core >= {stated}, meta/runtime.yml {floor}"
    for name, spec in (galaxy().get("dependencies") or {}).items():
        floor_text = str(spec).replace(">=", "").strip()
        assert re.search(rf"{re.escape(name)}\s*>=\s*{re.escape(floor_text)}\b", text), \
            f"README's Requirements must name {name} >= {floor_text} (galaxy.yml)"
    named = set(re.findall(r"\b((?:community|ansible)\.[a-z_]+)\b(?!\.)", text)) - {"ansible.builtin", "ansible.cfg"}
    assert named <= set(galaxy().get("dependencies") or {}), f"README names collections galaxy.yml does not: {sorted(named)}"


def test_python_floor_is_ansible_cores():
    floor = runtime_floor()
    try:
        core = importlib.metadata.version("ansible-core")
        requires = importlib.metadata.metadata("ansible-core")["Requires-Python"]
    except importlib.metadata.PackageNotFoundError:
        pytest.fail("ansible-core is not installed: make venv installs requirements.txt, which pins it")
    assert version(core)[:2] == floor[:2], f"the installed ansible-core {core} is not the floor's line {floor[:2]} (requirements.txt)"
    python = re.search(r">=\s*(\d+\.\d+)", requires).group(1)
    assert re.search(rf"\bPython {re.escape(python)}\b", readme_requirements()), \
        f"README's Requirements must name Python {python}, ansible-core {'.'.join(map(str, floor[:2]))}'s floor ({requires})"


def test_requirements_pin_the_floors_line():
    pins = dict(re.findall(r"^([\w.-]+)==([\w.]+)", (ROOT / "requirements.txt").read_text(encoding="utf-8"), re.M))
    floor = runtime_floor()
    assert "ansible-core" in pins
    assert version(pins["ansible-core"]) >= floor and version(pins["ansible-core"])[:2] == floor[:2], \
        f"requirements.txt pins ansible-core {pins['ansible-core']}: the tests run the floor's line {floor[:2]}"


def test_pinned_bundle_carries_the_dependencies():
    try:
        bundle = pathlib.Path(str(importlib.metadata.distribution("ansible").locate_file("ansible_collections")))
    except importlib.metadata.PackageNotFoundError:
        pytest.fail("the ansible bundle is not installed: make venv installs requirements.txt, which pins it")
    for name, spec in (galaxy().get("dependencies") or {}).items():
        manifest = bundle / name.replace(".", "/") / "MANIFEST.json"
        assert manifest.is_file(), f"the pinned ansible bundle has no {name}: galaxy.yml depends on it"
        have = json.loads(manifest.read_text(encoding="utf-8"))["collection_info"]["version"]
        assert version(have) >= version(str(spec).replace(">=", "")), f"the bundle's {name} {have} is older than galaxy.yml's {spec}"
