"""One owner for every shared name and default (issue 33), read from the code:

- every `llmfleet_*` name in roles/, playbooks/, plugins/ and site.yml is in plugins/module_utils/_fleet_vars.py
  (FLEET_VARS, or NOT_VARIABLES for the nginx and Python names that only look like variables), and every registered
  name is used;
- a registered default is never written again: no `llmfleet_x | default(<value>)` (role defaults and playbooks use
  `lookup('llmfleet.serving.fleet_var', 'llmfleet_x')`), no second copy of a computed default such as the plan folder
  (`<PWD>/plans`) or the secrets folder (`<inventory_dir>/.secrets`), no engine default of the vllm role written
  outside it and the registry;
- the engine version is parsed by `_engine.parse_version` only, and the "never latest" rule is `_engine.image_pinned`
  only: a function that parses a version-like text or compares a tag with `latest` anywhere else fails here.
"""

from __future__ import annotations

import ast
import inspect
import pathlib
import re
from typing import Dict, Iterator, List, Tuple

import pytest
import yaml

from ansible_collections.llmfleet.serving.plugins.module_utils import _engine as engine
from ansible_collections.llmfleet.serving.plugins.module_utils import _fleet_vars as fv

ROOT = pathlib.Path(__file__).resolve().parents[2]
NAME = re.compile(r"\bllmfleet_[a-z0-9_]*[a-z0-9]\b")
SAMPLE_VERSIONS = ("0.17.0", "0.32.0", "v0.8.5", "0.11.0+cu129")
NOT_VERSIONS = ("qwen", "a.b.c", "x")


def code_files() -> Iterator[pathlib.Path]:
    """Every text file the collection runs or renders: roles (tasks, defaults, templates, files), playbooks, plugins."""
    for top in ("roles", "playbooks", "plugins"):
        for path in sorted((ROOT / top).rglob("*")):
            if path.is_file() and path.suffix not in (".md",) and "__pycache__" not in path.parts:
                yield path
    yield ROOT / "site.yml"


def text_of(path: pathlib.Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return ""


def rel(path: pathlib.Path) -> str:
    return str(path.relative_to(ROOT))


def ansible_files() -> Iterator[pathlib.Path]:
    """The YAML Ansible reads (role defaults, vars, tasks, specs; playbooks; filter docs) and the Jinja templates."""
    for path in code_files():
        if path.suffix in (".yml", ".yaml", ".j2"):
            yield path


def python_files() -> Iterator[pathlib.Path]:
    yield from sorted((ROOT / "plugins").rglob("*.py"))


# ------------------------------------------------------------------------------------------------
# The registry holds every name


def names_in_code() -> Dict[str, List[str]]:
    found: Dict[str, List[str]] = {}
    for path in code_files():
        for name in set(NAME.findall(text_of(path))):
            found.setdefault(name, []).append(rel(path))
    return found


def test_every_llmfleet_name_is_in_the_registry():
    unknown = {name: files for name, files in names_in_code().items() if name not in fv.FLEET_VARS and name not in fv.NOT_VARIABLES}
    assert not unknown, ("llmfleet_* names the registry does not hold (add each to FLEET_VARS in "
                         f"plugins/module_utils/_fleet_vars.py with its default and meaning, or to NOT_VARIABLES): {unknown}")


def test_every_registered_name_is_used():
    used = names_in_code()
    unused = sorted(name for name in list(fv.FLEET_VARS) + list(fv.NOT_VARIABLES)
                    if not any(f != "plugins/module_utils/_fleet_vars.py" for f in used.get(name, [])))
    assert not unused, f"_fleet_vars lists names nothing reads any more: {unused}; remove them"


def test_the_registry_is_well_formed():
    assert not set(fv.FLEET_VARS) & set(fv.NOT_VARIABLES)
    for name, var in fv.FLEET_VARS.items():
        assert NAME.fullmatch(name), name
        assert var.kind in ("input", "fact"), name
        assert var.meaning.strip() and "\n" not in var.meaning, f"{name}: one line of meaning"
        assert var.default is None or var.computed is None, f"{name}: a literal default or a computed one, not both"


def test_the_scan_finds_names_in_every_kind_of_file(tmp_path):
    """The pattern sees a name in YAML, Jinja, Python and nginx text, and not inside a longer identifier."""
    text = ("a: \"{{ llmfleet_x | default(1) }}\"\n_var(h, 'llmfleet_y')\n$llmfleet_z;\n__llmfleet_patched__ = 1\n"
            "f'llmfleet_edge_{port}'\n")
    assert set(NAME.findall(text)) == {"llmfleet_x", "llmfleet_y", "llmfleet_z"}


# ------------------------------------------------------------------------------------------------
# A default is written once


def _with_default() -> List[str]:
    return [name for name, var in fv.FLEET_VARS.items() if var.default is not None or var.computed is not None]


# `llmfleet_x | default(...)` with a value: the registry's default written again. Reading a variable as unset
# (`default(none)`, `default('')`, `default(omit)`) is not a default.
UNSET = re.compile(r"\s*(none|None|''|\"\"|omit)\s*\)")


def repeated_defaults(text: str, names: List[str]) -> List[str]:
    found = []
    for name in names:
        for match in re.finditer(rf"\b{name}\s*\|\s*default\(", text):
            if not UNSET.match(text, match.end()):
                found.append(text[match.start():match.end() + 40].split("\n")[0])
        # Python: hostvars read with the registry's default spelled out, e.g. _var(hostvars, host, "llmfleet_x", True)
        pattern = rf"[\"']{name}[\"']\s*,\s*(True|False|\d+|[\"'][^\"']+[\"']|\{{\}}|\[\])\s*\)"
        found += [m.group(0) for m in re.finditer(pattern, text)]
    return found


def computed_patterns() -> Dict[str, re.Pattern]:
    """For each computed default, a pattern of its expression written out in Jinja or Python: the variable part (the
    controller's PWD, inventory_dir ...) followed by the literal part (/plans, /.secrets)."""
    field = {"PWD": r"PWD['\"]?\)?", "inventory_dir": r"inventory_dir"}
    out = {}
    for name, var in fv.FLEET_VARS.items():
        if not var.computed:
            continue
        parts = re.split(r"\{(\w+)\}", var.computed)   # literal, field, literal, field, ...
        pattern = ""
        for i, part in enumerate(parts):
            if i % 2:
                pattern += field.get(part, re.escape(part))
            elif part:
                pattern += r"[\s~+'\"{}]*" + re.escape(part) if pattern else re.escape(part)
        out[name] = re.compile(pattern)
    return out


def test_no_registered_default_is_written_again():
    names = _with_default()
    found = {rel(p): hits for p in list(ansible_files()) + list(python_files())
             if (hits := repeated_defaults(text_of(p), names))}
    assert not found, ("a collection-wide default written again: use lookup('llmfleet.serving.fleet_var', '<name>') "
                       f"(Python: _fleet_vars.FLEET_VARS[<name>].default): {found}")


def test_no_computed_default_is_written_again():
    """The plan folder and the secrets folder (and any other computed default) are spelled in _fleet_vars only."""
    found = {}
    for path in code_files():
        if rel(path) == "plugins/module_utils/_fleet_vars.py":
            continue
        text = text_of(path)
        hits = [name for name, pattern in computed_patterns().items() if pattern.search(text)]
        if hits:
            found[rel(path)] = hits
    assert not found, f"the default expression of {found} is written out: use lookup('llmfleet.serving.fleet_var', '<name>')"


def test_the_checks_catch_a_repetition():
    """The checks above fail on the spellings the code had before the registry."""
    plan_dir = "x: \"{{ llmfleet_plan_dir | default(lookup('ansible.builtin.env', 'PWD') ~ '/plans') }}\""
    assert repeated_defaults(plan_dir, _with_default())
    assert computed_patterns()["llmfleet_plan_dir"].search(plan_dir)
    assert computed_patterns()["llmfleet_secrets_dir"].search("k: \"{{ inventory_dir ~ '/.secrets/webui_secret_key' }}\"")
    assert computed_patterns()["llmfleet_secrets_dir"].search("k: \"{{ inventory_dir }}/.secrets/vllm_api_key\"")
    assert repeated_defaults("when: llmfleet_serve | default(true) | bool", _with_default())
    assert repeated_defaults('_var(hostvars, host, "llmfleet_gateway", True)', _with_default())
    assert not repeated_defaults("'hyhal_dir': llmfleet_hyhal_dir | default(none),", _with_default())
    assert not repeated_defaults("llmfleet_hardware | default(none)", _with_default())


# ------------------------------------------------------------------------------------------------
# The engine defaults: once in the registry, mirrored by the vllm role's defaults and spec (the values users read)

ENGINE_LITERALS_ALLOWED = {
    "plugins/module_utils/_fleet_vars.py": "the one definition",
    "roles/vllm/defaults/main.yml": "the role's defaults, checked equal below",
    "roles/vllm/meta/argument_specs.yml": "the role's spec, checked equal below",
}


def test_the_vllm_role_shows_the_registry_engine_defaults():
    defaults = yaml.safe_load((ROOT / "roles" / "vllm" / "defaults" / "main.yml").read_text())
    spec = yaml.safe_load((ROOT / "roles" / "vllm" / "meta" / "argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]
    for key, value in fv.ENGINE_DEFAULTS.items():
        wanted, var = (list(value) if isinstance(value, tuple) else value), fv.ENGINE_VARS[key]
        assert defaults[var] == wanted, f"roles/vllm/defaults/main.yml {var} differs from _fleet_vars.ENGINE_DEFAULTS[{key!r}]"
        assert options[var]["default"] == wanted, f"the vllm spec's {var} default differs from ENGINE_DEFAULTS[{key!r}]"


def test_no_engine_default_is_written_elsewhere():
    """The engine defaults that are the collection's own paths and names (not Docker words such as unless-stopped or
    16g) appear as a whole value only where allowed."""
    values = [v for v in fv.ENGINE_DEFAULTS.values() if isinstance(v, str) and "llmfleet" in v]
    found = {}
    for path in code_files():
        if rel(path) in ENGINE_LITERALS_ALLOWED:
            continue
        text = text_of(path)
        hits = [v for v in values if re.search(rf"(?<![\w/.-]){re.escape(v)}(?![\w/.-])", text)]
        if path.name == "_serving.py":   # the folder the patches are mounted at inside a container is its own constant
            hits = [v for v in hits if not re.search(rf"PATCHES_DIR_IN_CONTAINER = \"{re.escape(v)}\"", text)
                    or text.count(v) > 1]
        if hits:
            found[rel(path)] = hits
    assert not found, f"engine defaults written outside _fleet_vars.ENGINE_DEFAULTS: {found}"


# ------------------------------------------------------------------------------------------------
# One version parser, one "never latest" rule


def _regex_literals(func: ast.AST) -> Iterator[str]:
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "compile", "match", "fullmatch", "search") and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            yield node.args[0].value


def _splits_on_dot(func: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("split", "rsplit", "partition")
               and n.args and isinstance(n.args[0], ast.Constant) and n.args[0].value == "." for n in ast.walk(func))


def _mentions_latest(func: ast.AST) -> bool:
    """A comparison with the tag latest: a "latest" / ":latest" constant outside a message (an f-string or a long text)."""
    messages = {id(v) for n in ast.walk(func) if isinstance(n, ast.JoinedStr) for v in n.values}
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.strip(":") == "latest"
               and id(n) not in messages for n in ast.walk(func))


def scopes(tree: ast.Module) -> Iterator[Tuple[str, ast.AST]]:
    """Each function, and the module's own top-level statements (a compiled pattern at module level)."""
    top = ast.Module(body=[s for s in tree.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))],
                     type_ignores=[])
    yield "<module>", top
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node


def version_parsers(source: str) -> List[str]:
    """Functions (or module-level patterns) that read an engine-like version: a regex that matches 0.17.0, or a function
    about a version that splits on '.'."""
    found = []
    for name, scope in scopes(ast.parse(source)):
        for literal in _regex_literals(scope):
            try:
                pattern = re.compile(literal)
            except re.error:
                continue
            # a version reader: it takes 0.17.0 and refuses words (a name or slug pattern takes both)
            if any(pattern.fullmatch(v) for v in SAMPLE_VERSIONS) and not any(pattern.fullmatch(w) for w in NOT_VERSIONS):
                found.append(name)
        if "version" in name.lower() and _splits_on_dot(scope):
            found.append(name)
        elif isinstance(scope, ast.FunctionDef) and any("version" in a.arg for a in scope.args.args) and _splits_on_dot(scope):
            found.append(name)
    return sorted(set(found))


def latest_checks(source: str) -> List[str]:
    return sorted({name for name, scope in scopes(ast.parse(source)) if name != "<module>" and _mentions_latest(scope)})


# Version readers of other products, not of the engine: (file, function) -> what it reads.
OTHER_VERSIONS = {
    ("plugins/module_utils/_webui.py", "version_tuple"): "Open WebUI's release (webui_version)",
    ("plugins/module_utils/_host_runtime.py", "os_problem"): "the OS release (Ubuntu 24.04, Debian 12)",
    ("plugins/module_utils/_host_runtime.py", "codename"): "the OS release",
    ("plugins/module_utils/_host_runtime.py", "cuda_repo_path"): "the OS release",
    ("plugins/module_utils/_nvidia_driver.py", "driver_verdict"): "the NVIDIA driver's version",
    ("plugins/module_utils/_plan/memory.py", "gdn_prefill_checkpoint"): "the image's CUDA level (its major)",
    ("plugins/module_utils/_model_store.py", "revision_warning"): "a model's hub revision (a tag such as v1.0)",
}


def test_the_engine_version_has_one_parser():
    found = {}
    for path in python_files():
        for name in version_parsers(text_of(path)):
            where = (rel(path), name)
            if where in OTHER_VERSIONS or where in (("plugins/module_utils/_engine.py", "<module>"),
                                                    ("plugins/module_utils/_engine.py", "parse_version")):
                continue
            found.setdefault(rel(path), []).append(name)
    assert not found, f"a second engine version parser: {found}; call _engine.parse_version (exact=True for a release)"


def test_engine_versions_are_not_checked_in_yaml():
    """A role or playbook hands an engine version to a filter (which calls parse_version), never matches it itself."""
    found = []
    for path in ansible_files():
        for match in re.finditer(r"\b(vllm_\w*version\w*|\w*engine\w*version\w*|upgrade_version)\b[^\n]*"
                                 r"(is (match|search|version)|regex_search|version\()", text_of(path)):
            found.append(f"{rel(path)}: {match.group(0)}")
    assert not found, found


def test_never_latest_is_one_rule():
    found = {rel(p): names for p in python_files() if (names := latest_checks(text_of(p)))}
    assert found == {"plugins/module_utils/_engine.py": ["image_pinned"]}, (
        f"a second 'never latest' check: {found}; call _engine.image_pinned (Jinja: the llmfleet.serving.image_pinned filter)")
    yaml_checks = [f"{rel(p)}: {m.group(0)}" for p in ansible_files()
                   for m in re.finditer(r"(search|match|regex_search|endswith)\([^)\n]*latest[^)\n]*\)", text_of(p))]
    assert not yaml_checks, f"a 'never latest' check written in YAML: {yaml_checks}; use the llmfleet.serving.image_pinned filter"


def test_the_checkers_find_the_old_spellings():
    """The three parsers and two latest checks the code had before are each found."""
    assert version_parsers('def _version(text):\n    return tuple(int(p) for p in str(text).split("+", 1)[0].split(".")[:3])\n') \
        == ["_version"]
    assert version_parsers('import re\ndef at_version(ds, version):\n    if not re.fullmatch(r"\\d+\\.\\d+\\.\\d+", version):\n'
                           '        raise E()\n') == ["at_version"]
    assert version_parsers('import re\ndef cuda(c):\n    return re.fullmatch(r"\\d+\\.\\d+", c)\n') == []
    assert latest_checks('def check(image):\n    return str(image).endswith(":latest")\n') == ["check"]
    assert latest_checks('def check(image):\n    raise E(f"{image} is not pinned (never latest)")\n') == []


# ------------------------------------------------------------------------------------------------
# The registry's behaviour


def _reader(values):
    return lambda name: (name in values, values.get(name))


def test_value_of_prefers_the_hosts_value_even_null():
    assert fv.value_of("llmfleet_plan_dir", _reader({"llmfleet_plan_dir": "/srv/plans"}), {"PWD": "/x"}) == "/srv/plans"
    assert fv.value_of("llmfleet_private_address", _reader({"llmfleet_private_address": None}), {}) is None
    assert fv.value_of("llmfleet_serve", _reader({}), {}) is True


@pytest.mark.parametrize("name, values, env, wanted", [
    ("llmfleet_plan_dir", {}, {"PWD": "/work/fleet"}, "/work/fleet/plans"),
    ("llmfleet_plan_dir", {}, {}, "/plans"),     # as lookup('env', 'PWD') ~ '/plans' with PWD unset
    ("llmfleet_secrets_dir", {"inventory_dir": "/inv/prod"}, {}, "/inv/prod/.secrets"),
    ("llmfleet_vllm_base_port", {}, {}, 8002),
    ("llmfleet_model_root", {}, {}, "/models"),
    ("llmfleet_docker_contributions", {}, {}, {}),
    ("vllm_state_dir", {}, {}, "/var/lib/llmfleet/vllm"),
    ("vllm_docker_entrypoint", {}, {}, ["vllm", "serve"]),
])
def test_defaults(name, values, env, wanted):
    assert fv.default_of(name, _reader(values), env) == wanted


def test_a_default_is_a_fresh_copy():
    first = fv.default_of("llmfleet_docker_contributions", _reader({}), {})
    first["x"] = 1
    assert fv.default_of("llmfleet_docker_contributions", _reader({}), {}) == {}


def test_unknown_names_and_missing_inventory_dir_say_what_to_do():
    with pytest.raises(fv.FleetVarError, match="known: .*llmfleet_plan_dir"):
        fv.default_of("llmfleet_nope", _reader({}), {})
    with pytest.raises(fv.FleetVarError, match="set llmfleet_secrets_dir"):
        fv.default_of("llmfleet_secrets_dir", _reader({}), {})


def test_the_planner_and_filters_take_their_defaults_from_the_registry():
    from ansible_collections.llmfleet.serving.plugins.module_utils import _host_needs
    from ansible_collections.llmfleet.serving.plugins.module_utils._plan import base
    from ansible_collections.llmfleet.serving.plugins.filter import model_store, serving
    assert base.DEFAULT_BASE_PORT == fv.FLEET_VARS["llmfleet_vllm_base_port"].default
    assert base.DEFAULT_MODEL_ROOT == fv.FLEET_VARS["llmfleet_model_root"].default
    assert _host_needs.HYHAL_DIR == fv.FLEET_VARS["llmfleet_hyhal_dir"].default
    assert {k: serving.DEFAULTS[k] for k in fv.ENGINE_DEFAULTS} == {
        k: list(v) if isinstance(v, tuple) else v for k, v in fv.ENGINE_DEFAULTS.items()}
    assert inspect.signature(model_store.model_store_models).parameters["root"].default == "/models"


# ------------------------------------------------------------------------------------------------
# The version parser and the pinned-image rule


@pytest.mark.parametrize("text, wanted", [("0.17.0", (0, 17, 0)), ("v0.8.5", (0, 8, 5)), ("0.11", (0, 11, 0)),
                                          ("0.11.0+cu129", (0, 11, 0)), (" 0.32.0 ", (0, 32, 0))])
def test_parse_version(text, wanted):
    assert engine.parse_version(text) == wanted


@pytest.mark.parametrize("text", ["0.32", "v0.32.0", "0.32.0+cpu", " 0.32.0", "latest", ""])
def test_parse_version_exact_wants_a_release(text):
    with pytest.raises(engine.EngineError, match="like 0.17.0"):
        engine.parse_version(text, exact=True)


def test_parse_version_exact_accepts_a_release():
    assert engine.parse_version("0.32.0", exact=True) == (0, 32, 0)


@pytest.mark.parametrize("image, pinned", [
    ("vllm/vllm-openai:v0.17.0", True), ("vllm/vllm-openai@sha256:" + "a" * 64, True),
    ("registry:5000/vllm/vllm-openai:v0.17.0", True), ("vllm/vllm-openai:latest", False), ("vllm/vllm-openai", False),
    ("registry:5000/vllm/vllm-openai", False), ("img:", False), ("", False), (None, False),
])
def test_image_pinned(image, pinned):
    assert engine.image_pinned(image) is pinned


def test_the_fleet_var_lookup_reads_the_host_then_the_registry(monkeypatch):
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar
    from ansible_collections.llmfleet.serving.plugins.lookup.fleet_var import LookupModule

    monkeypatch.setenv("PWD", "/work/fleet")
    lookup = LookupModule(loader=DataLoader(), templar=Templar(loader=DataLoader()))
    assert lookup.run(["llmfleet_plan_dir"], variables={}) == ["/work/fleet/plans"]
    assert lookup.run(["llmfleet_plan_dir", "llmfleet_serve"], variables={"llmfleet_plan_dir": "/srv/p"}) == ["/srv/p", True]
    assert lookup.run(["llmfleet_secrets_dir"], variables={"inventory_dir": "/inv"}) == ["/inv/.secrets"]
    from ansible.errors import AnsibleLookupError
    with pytest.raises(AnsibleLookupError, match="fleet_var: 'llmfleet_nope' is not"):
        lookup.run(["llmfleet_nope"], variables={})
    # another host's value (host=), with the same default when it sets none
    hostvars = {"gw1": {"llmfleet_gateway": False}, "gw2": {}}
    assert lookup.run(["llmfleet_gateway"], variables={"hostvars": hostvars}, host="gw1") == [False]
    assert lookup.run(["llmfleet_gateway"], variables={"hostvars": hostvars, "llmfleet_gateway": False}, host="gw2") == [True]
    with pytest.raises(AnsibleLookupError, match="host='gw9' is not in the inventory"):
        lookup.run(["llmfleet_gateway"], variables={"hostvars": hostvars}, host="gw9")
