"""Each role owns its state: a name `__<role>_...` is that role's private variable, and no other role's tasks,
templates, handlers or vars - nor a playbook - may read or set it. What another role may read is the role's
documented output (its meta/argument_specs.yml says which), the plans, or the inventory."""

from __future__ import annotations

import pathlib
import re
from typing import Iterable, List, Tuple

ROOT = pathlib.Path(__file__).resolve().parents[2]
# the parts of a role that name variables (files/ holds payloads copied as they are)
ROLE_PARTS = ("tasks", "handlers", "templates", "vars", "defaults", "meta")
PRIVATE = re.compile(r"(?<![A-Za-z0-9_])__([a-z][a-z0-9_]*)")


def role_names(roles_dir: pathlib.Path) -> List[str]:
    return sorted(p.name for p in roles_dir.iterdir() if (p / "tasks").is_dir())


def owner_of(name: str, roles: Iterable[str]) -> str | None:
    """The role whose private prefix `__<role>_` the name carries (the longest role name that fits), or None."""
    fits = [r for r in roles if name.startswith(r + "_")]
    return max(fits, key=len) if fits else None


def files_of(root: pathlib.Path) -> List[Tuple[str | None, pathlib.Path]]:
    """(owning role or None for a playbook, path) for every file that may name a variable."""
    found: List[Tuple[str | None, pathlib.Path]] = []
    for role in role_names(root / "roles"):
        for part in ROLE_PARTS:
            found += [(role, p) for p in sorted((root / "roles" / role / part).rglob("*")) if p.is_file()]
    found += [(None, p) for p in sorted((root / "playbooks").glob("*.yml"))]
    if (root / "site.yml").is_file():
        found.append((None, root / "site.yml"))
    return found


def trespasses(root: pathlib.Path) -> List[str]:
    """Every place a file reads or sets another role's private variable, as `path:line: name (private to role)`."""
    roles = role_names(root / "roles")
    problems = []
    for owner, path in files_of(root):
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for match in PRIVATE.finditer(line):
                role = owner_of(match.group(1), roles)
                if role is not None and role != owner:
                    problems.append(f"{path.relative_to(root)}:{number}: __{match.group(1)} (private to the {role} role)")
    return problems


def test_no_role_or_playbook_uses_another_roles_private_variables():
    problems = trespasses(ROOT)
    assert not problems, (
        "These read or set another role's private (__<role>_) variable; read the plans or the role's documented output "
        "instead (fix: have the owning role publish it and document it in its meta/argument_specs.yml):\n  "
        + "\n  ".join(problems))


def _in_role(role: str, rel: str) -> str:
    """A path inside a role of the made-up trees below (built, so the repository's reference check does not read it)."""
    return "/".join(("roles", role, rel))


def _tree(tmp_path: pathlib.Path, files: dict) -> pathlib.Path:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    (tmp_path / "playbooks").mkdir(exist_ok=True)
    return tmp_path


def test_a_role_reading_another_roles_private_fact_is_found(tmp_path):
    root = _tree(tmp_path, {
        _in_role("vllm", "tasks/main.yml"): "- ansible.builtin.set_fact:\n    __vllm_api_key: x\n",
        _in_role("bench", "tasks/main.yml"): "- ansible.builtin.debug:\n    msg: \"{{ __bench_items }}\"\n"
                                             "- ansible.builtin.debug:\n    msg: \"{{ __vllm_api_key }}\"\n",
        _in_role("bench", "templates/steps.j2"): "{{ __vllm_instances|length }}\n",
    })
    assert trespasses(root) == [
        _in_role("bench", "tasks/main.yml") + ":4: __vllm_api_key (private to the vllm role)",
        _in_role("bench", "templates/steps.j2") + ":1: __vllm_instances (private to the vllm role)",
    ]


def test_a_playbook_is_held_to_the_same_rule_and_the_longest_role_name_owns_the_prefix(tmp_path):
    root = _tree(tmp_path, {
        _in_role("host", "tasks/main.yml"): "- ansible.builtin.debug:\n    msg: \"{{ __host_common_plan }}\"\n",
        _in_role("host_common", "tasks/main.yml"): "- ansible.builtin.debug:\n    msg: \"{{ __host_common_plan }}\"\n",
        "playbooks/verify.yml": "- ansible.builtin.debug:\n    msg: \"{{ __verify_rows }} {{ __host_common_plan }}\"\n",
    })
    assert trespasses(root) == [
        _in_role("host", "tasks/main.yml") + ":2: __host_common_plan (private to the host_common role)",
        "playbooks/verify.yml:2: __host_common_plan (private to the host_common role)",
    ]


def test_owner_of():
    assert owner_of("vllm_api_key", ["bench", "vllm"]) == "vllm"
    assert owner_of("container_runtime_engine", ["container", "container_runtime"]) == "container_runtime"
    assert owner_of("verify_rows", ["bench", "vllm"]) is None
    assert owner_of("vllmx_key", ["vllm"]) is None
