"""Write each role's README.md from its meta/argument_specs.yml (the spec is the one source).

    role_readme.py            rewrite roles/*/README.md
    role_readme.py --check    exit 1 when a README differs from what its spec gives
"""

from __future__ import annotations

import difflib
import pathlib
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
MARK = "<!-- Generated from meta/argument_specs.yml by tests/tools/role_readme.py; edit the spec, not this file. -->"


def _text(value) -> str:
    if isinstance(value, list):
        return " ".join(str(v).strip() for v in value)
    return " ".join(str(value or "").split())


def _default(option: dict) -> str:
    if option.get("required"):
        return "*required*"
    if "default" not in option:
        return ""
    value = option["default"]
    rendered = yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
    rendered = rendered.removesuffix("\n...").removesuffix("...").strip()
    return f"`{rendered}`"


def kind_of(option: dict) -> str:
    """An option's type as the docs show it: `list of str`, `str (a, b)`."""
    kind = option.get("type", "str")
    if kind == "list" and option.get("elements"):
        kind = f"list of {option['elements']}"
    if option.get("choices"):
        kind += " (" + ", ".join(str(c) for c in option["choices"]) + ")"
    return kind


def shares_main(spec: dict, entry: str) -> bool:
    """An entry point that takes exactly main's variables (a YAML alias in the spec): documented once, under main."""
    return entry != "main" and bool(spec[entry].get("options")) and spec[entry].get("options") == spec.get("main", {}).get("options")


def render(role: pathlib.Path) -> str:
    spec = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    lines = [MARK, "", f"# Role `llmfleet.serving.{role.name}`", ""]
    for entry, body in spec.items():
        if entry != "main":
            lines += [f"## Entry point `{entry}`", ""]
        lines += [_text(body.get("short_description")), ""]
        for paragraph in body.get("description", []) or []:
            lines.append(f"- {_text(paragraph)}")
        if shares_main(spec, entry):
            lines += ["", "Takes the same variables as the main entry point.", ""]
            continue
        lines += ["", "| Variable | Type | Default | Description |", "|---|---|---|---|"]
        for name, option in sorted((body.get("options") or {}).items()):
            lines.append(f"| `{name}` | {kind_of(option)} | {_default(option)} | {_text(option.get('description'))} |")
        lines.append("")
    lines += [
        "Every input is checked against this spec before the role changes anything.",
        f"Tags: `{role.name}` for the whole role; see `tasks/main.yml` for the `{role.name}_*` sub-tags.",
        "",
    ]
    return "\n".join(lines)


def spec_mismatches(role: pathlib.Path) -> list[str]:
    """defaults/main.yml and the spec must agree: same public names, same default values."""
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    # a role of shared steps (host_common, fleet_plan) documents each input under the entry point that takes it
    options = {}
    for entry in specs.values():
        options.update(entry.get("options") or {})
    defaults_file = role / "defaults" / "main.yml"
    defaults = (yaml.safe_load(defaults_file.read_text()) if defaults_file.is_file() else None) or {}
    public = {k: v for k, v in defaults.items() if not k.startswith("__")}
    problems = []
    for name in sorted(set(public) - set(options)):
        problems.append(f"{role.name}: {name} is in defaults/main.yml but not in meta/argument_specs.yml")
    for name, option in sorted(options.items()):
        if option.get("required"):
            if name in public:
                problems.append(f"{role.name}: {name} is required in the spec but has a default")
        elif name not in public:
            problems.append(f"{role.name}: {name} is in the spec but has no entry in defaults/main.yml")
        elif option.get("default") != public[name]:
            problems.append(f"{role.name}: {name} defaults to {public[name]!r} but the spec says {option.get('default')!r}")
    return problems


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    mismatches = [p for role in sorted((ROOT / "roles").iterdir()) if (role / "meta" / "argument_specs.yml").is_file()
                  for p in spec_mismatches(role)]
    if mismatches:
        print("\n".join(mismatches), file=sys.stderr)
        return 1
    for role in sorted((ROOT / "roles").iterdir()):
        if not (role / "meta" / "argument_specs.yml").is_file():
            continue
        want = render(role)
        readme = role / "README.md"
        have = readme.read_text() if readme.is_file() else ""
        if have == want:
            continue
        if check:
            stale.append(str(readme.relative_to(ROOT)))
            sys.stdout.writelines(difflib.unified_diff(have.splitlines(True), want.splitlines(True), str(readme), "from spec"))
        else:
            readme.write_text(want)
            print(f"wrote {readme.relative_to(ROOT)}")
    if stale:
        print(f"\n{', '.join(stale)} out of date with the argument specs: run `make role-docs`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
