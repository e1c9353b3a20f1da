"""Every filter the collection ships has its documentation: a sidecar plugins/filter/<name>.yml whose name is the
filter's, whose options are the function's parameters (the first one as _input), and which ansible-doc renders."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import pathlib
import shutil
import subprocess
import sys
from typing import Callable, Dict

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
FILTERS = ROOT / "plugins" / "filter"


def all_filters() -> Dict[str, Callable]:
    """Every filter name of every FilterModule in plugins/filter/*.py, with its function."""
    found: Dict[str, Callable] = {}
    for path in sorted(FILTERS.glob("*.py")):
        module = importlib.import_module(f"ansible_collections.llmfleet.serving.plugins.filter.{path.stem}")
        for name, func in module.FilterModule().filters().items():
            assert name not in found, f"filter {name} is defined twice (plugins/filter/{path.name})"
            found[name] = func
    return found


def sidecar(name: str) -> Dict:
    path = FILTERS / f"{name}.yml"
    assert path.is_file(), f"filter {name} has no documentation: add plugins/filter/{name}.yml (see vllm_plan.yml)"
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def test_the_filters_are_found():
    names = all_filters()
    assert len(names) >= 53 and "vllm_plan" in names and "vllm_stale" in names


@pytest.mark.parametrize("name", sorted(all_filters()))
def test_every_filter_has_its_sidecar(name):
    doc = sidecar(name)
    documentation = doc["DOCUMENTATION"]
    assert documentation["name"] == name
    for key in ("short_description", "description", "author", "version_added", "options"):
        assert documentation.get(key), f"plugins/filter/{name}.yml: DOCUMENTATION has no {key}"
    assert str(doc.get("EXAMPLES") or "").strip(), f"plugins/filter/{name}.yml has no EXAMPLES"
    assert (doc.get("RETURN") or {}).get("_value", {}).get("description"), f"plugins/filter/{name}.yml: RETURN has no _value"
    assert f"llmfleet.serving.{name}" in doc["EXAMPLES"], f"plugins/filter/{name}.yml: the example does not use the filter"


@pytest.mark.parametrize("name", sorted(all_filters()))
def test_sidecar_options_are_the_parameters(name):
    documentation = sidecar(name)["DOCUMENTATION"]
    parameters = list(inspect.signature(all_filters()[name]).parameters.values())
    wanted = ["_input"] + [p.name for p in parameters[1:]]
    options = documentation["options"]
    assert sorted(options) == sorted(wanted), f"plugins/filter/{name}.yml documents {sorted(options)}, the filter takes {wanted}"
    positional = [p.strip() for p in str(documentation.get("positional") or "").split(",") if p.strip()]
    assert positional == wanted[:len(positional)], f"plugins/filter/{name}.yml positional {positional}: the order is {wanted}"
    for key, parameter in zip(wanted, parameters):
        required = parameter.default is inspect.Parameter.empty
        assert bool(options[key].get("required")) == required, \
            f"plugins/filter/{name}.yml: {key} is {'required' if required else 'optional'} in the filter"


def _ansible_doc() -> str:
    found = shutil.which("ansible-doc") or str(pathlib.Path(sys.executable).parent / "ansible-doc")
    if not os.access(found, os.X_OK):
        pytest.fail(f"ansible-doc is not at {found}: make venv installs ansible-core")
    return found


def test_ansible_doc_renders_every_filter():
    names = sorted(all_filters())
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"), ANSIBLE_NOCOLOR="1")
    run = subprocess.run([_ansible_doc(), "-t", "filter", "--json"] + [f"llmfleet.serving.{n}" for n in names],
                         capture_output=True, text=True, env=env, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    docs = json.loads(run.stdout)
    missing = [n for n in names if not (docs.get(f"llmfleet.serving.{n}") or {}).get("doc")]
    assert not missing, f"ansible-doc renders no documentation for {missing}:\n{run.stderr[-3000:]}"
