"""Each role owns its state (issue 33): every role states in its argument spec (the main entry point's description, a
line that starts with "Owns") the folders, files and services that only it writes, and this test reads every task and
handler of every role and fails when one writes a path or acts on a service that another role owns, or writes an
absolute path it does not own itself.

What a task writes is read from the module's own destination option (dest, path, root, conf, state_file, name of a
service ...), with the role's plain defaults and vars substituted; the part before the first value known only at run
time (a loop item, a fact) is the static prefix that is checked. A role that needs another role's state asks that role
(include_role tasks_from one of its entry points), as the day-2 path asks the gateway to take an instance out."""

from __future__ import annotations

import pathlib
import re
from typing import Dict, Iterator, List, Mapping, Optional, Tuple

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
ROLES = ROOT / "roles"

# module (short name) -> the options that name what it writes; "service:" marks a unit it starts, stops or reloads
WRITES: Dict[str, Tuple[str, ...]] = {
    "template": ("dest",), "copy": ("dest",), "file": ("path", "dest"), "lineinfile": ("path", "dest"),
    "blockinfile": ("path", "dest"), "replace": ("path",), "unarchive": ("dest",), "get_url": ("dest",),
    "config_tree": ("root",), "gateway_rotation": ("conf", "state_file"), "gateway_lock": ("path",), "pip_venv": ("path",),
    "model_fetch": ("dest",), "kernel_tunables": ("path",),
    "apt_repository": ("filename",), "sysctl": ("sysctl_file",),
    "systemd_service": ("service:name",), "systemd": ("service:name",), "service": ("service:name",),
    # a container is a service of the role that names it
    "docker_container": ("service:name",),
}
# system folders every role may put its own named file in (a unit, an apt source, a keyring) or unpack into: a write
# whose static prefix stops at one of them names its file only at run time, from its own role's values
SHARED = ("/etc/systemd/system", "/etc/apt/sources.list.d", "/etc/apt/keyrings", "/opt")
OWNS = re.compile(r"^Owns\b")
TOKEN = re.compile(r"C\(([^)]+)\)")
JINJA = re.compile(r"{{\s*([A-Za-z_][A-Za-z0-9_]*)\s*}}")


def owned(role_dir: pathlib.Path) -> Optional[List[str]]:
    """What the role says it owns: the C(...) tokens of its main entry point's "Owns" line (paths start with '/', the
    rest are service names or name prefixes), or None when it says nothing."""
    spec = yaml.safe_load((role_dir / "meta" / "argument_specs.yml").read_text(encoding="utf-8"))
    description = spec["argument_specs"]["main"].get("description") or []
    lines = [d for d in ([description] if isinstance(description, str) else description) if OWNS.match(d)]
    return [t for line in lines for t in TOKEN.findall(line)] if lines else None


def plain_vars(role_dir: pathlib.Path) -> Dict[str, str]:
    """The role's defaults and vars whose value is a plain string (no template in it)."""
    out: Dict[str, str] = {}
    for name in ("defaults", "vars"):
        path = role_dir / name / "main.yml"
        data = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else None
        out.update({k: v for k, v in (data or {}).items() if isinstance(v, str) and "{{" not in v and "{%" not in v})
    return out


def static_prefix(value: str, variables: Mapping[str, str]) -> str:
    """The value with plain variables substituted, cut at the first part known only at run time."""
    text = JINJA.sub(lambda m: variables.get(m.group(1)) or m.group(0), str(value))
    return text.split("{{", 1)[0].split("{%", 1)[0]


def tasks(items) -> Iterator[dict]:
    for task in items or []:
        if isinstance(task, dict):
            for key in ("block", "rescue", "always"):
                yield from tasks(task.get(key))
            yield task


def writes(role_dir: pathlib.Path) -> Iterator[Tuple[str, str, str]]:
    """(file, kind, static prefix) of every write of the role's tasks and handlers; kind is "path" or "service"."""
    variables = plain_vars(role_dir)
    for folder in ("tasks", "handlers"):
        for path in sorted((role_dir / folder).glob("*.yml")):
            for task in tasks(yaml.safe_load(path.read_text(encoding="utf-8"))):
                for key, args in task.items():
                    options = WRITES.get(key.split(".")[-1])
                    if not options or not isinstance(args, dict):
                        continue
                    for option in options:
                        kind, _sep, name = option.rpartition(":")
                        value = args.get(name)
                        for item in value if isinstance(value, list) else [value]:
                            if isinstance(item, str) and item:
                                yield f"{role_dir.name}/{folder}/{path.name}", kind or "path", static_prefix(item, variables)


def owner_of(kind: str, target: str, owners: Mapping[str, List[str]]) -> Optional[str]:
    """The role that owns a path (the longest owned folder or file it is in) or a service (the longest owned name it
    starts with)."""
    best: Tuple[int, Optional[str]] = (-1, None)
    for role, tokens in owners.items():
        for token in tokens:
            is_path = token.startswith("/")
            if (kind == "path") != is_path:
                continue
            hit = (target == token or target.startswith(token.rstrip("/") + "/")) if is_path else target.startswith(token)
            if hit and len(token) > best[0]:
                best = (len(token), role)
    return best[1]


def violations(roles_dir: pathlib.Path) -> List[str]:
    role_dirs = sorted(p for p in roles_dir.iterdir() if (p / "meta" / "argument_specs.yml").exists())
    owners = {p.name: owned(p) or [] for p in role_dirs}
    out = []
    for role_dir in role_dirs:
        for where, kind, target in writes(role_dir):
            if kind == "path" and not target.startswith("/"):
                continue          # a path known only at run time (a loop item, a fact): its own role's task decides it
            if kind == "service" and not target or kind == "path" and target.rstrip("/") in SHARED:
                continue
            owner = owner_of(kind, target, owners)
            if owner is None and kind == "path":
                out.append(f"{where}: writes {target}, which no role owns: add it to the Owns line of "
                           f"roles/{role_dir.name}/meta/argument_specs.yml")
            elif owner is not None and owner != role_dir.name:
                out.append(f"{where}: writes {kind} {target}, which the {owner} role owns: ask that role "
                           f"(include_role tasks_from one of its entry points) instead")
    return out


def test_every_role_states_what_it_owns():
    missing = [p.name for p in sorted(ROLES.iterdir()) if (p / "meta" / "argument_specs.yml").exists() and owned(p) is None
               and next(writes(p), None) is not None]
    assert not missing, f"roles that write but do not state what they own (an 'Owns' line in meta/argument_specs.yml): {missing}"


def test_no_role_writes_what_another_role_owns():
    assert violations(ROLES) == []


def test_two_roles_never_own_the_same_thing():
    owners = {p.name: owned(p) or [] for p in sorted(ROLES.iterdir()) if (p / "meta" / "argument_specs.yml").exists()}
    seen: Dict[str, str] = {}
    for role, tokens in owners.items():
        for token in tokens:
            assert token not in seen, f"{token} is owned by both {seen[token]} and {role}"
            seen[token] = role


def _role(base: pathlib.Path, name: str, owns: str, tasks_yaml: str, defaults: str = "") -> None:
    (base / name / "meta").mkdir(parents=True)
    (base / name / "tasks").mkdir()
    (base / name / "defaults").mkdir()
    (base / name / "meta" / "argument_specs.yml").write_text(
        yaml.safe_dump({"argument_specs": {"main": {"description": [owns] if owns else ["A role."]}}}))
    (base / name / "tasks" / "main.yml").write_text(tasks_yaml)
    (base / name / "defaults" / "main.yml").write_text(defaults or "---\n{}\n")


def test_the_checker_finds_a_role_that_edits_another_roles_file(tmp_path):
    """Planted trees: what the day-2 path did before the gateway owned its rotation (a regex edit of the gateway's file
    and a reload of its nginx from the vllm role) is found; asking the gateway role is not."""
    _role(tmp_path, "gateway", "Owns C(/etc/nginx) and the service C(nginx).",
          "- ansible.builtin.template: {src: a.j2, dest: /etc/nginx/nginx.conf}\n")
    _role(tmp_path, "vllm", "Owns C(/etc/llmfleet/vllm) and the services C(llmfleet-vllm-).",
          "- ansible.builtin.replace: {path: '{{ conf_dir }}/llmfleet/gateway.conf', regexp: x, replace: y}\n"
          "- ansible.builtin.systemd_service: {name: nginx, state: reloaded}\n"
          "- ansible.builtin.copy: {dest: '/etc/llmfleet/vllm/{{ item }}.env', content: x}\n"
          "- ansible.builtin.copy: {dest: /etc/cron.d/vllm, content: x}\n"
          "- ansible.builtin.include_role: {name: gateway, tasks_from: rotation}\n",
          defaults="---\nconf_dir: /etc/nginx\n")
    found = violations(tmp_path)
    assert any("gateway.conf, which the gateway role owns" in v for v in found), found
    assert any("service nginx, which the gateway role owns" in v for v in found), found
    assert any("/etc/cron.d/vllm, which no role owns" in v for v in found), found
    assert len(found) == 3, found


def test_the_static_prefix_stops_at_what_only_the_run_knows():
    assert static_prefix("{{ root }}/llmfleet/{{ item.name }}", {"root": "/etc/nginx"}) == "/etc/nginx/llmfleet/"
    assert static_prefix("{{ item }}", {}) == ""
    assert owner_of("path", "/etc/nginx/llmfleet/", {"gateway": ["/etc/nginx"], "x": ["/etc/nginx/llmfleet-tls"]}) == "gateway"
    assert owner_of("path", "/etc/nginxfoo", {"gateway": ["/etc/nginx"]}) is None
