"""Layers that only point down (issue 33): which module of plugins/module_utils may import which, read from the code with
`ast`. The planner (_planner and the package _plan) imports nothing that consumes a plan; every import edge between
module_utils modules is in LAYERS, and every edge in LAYERS exists, so the table is the map docs/architecture.md shows."""

from __future__ import annotations

import ast
import functools
import pathlib
from typing import Dict, Set

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODULE_UTILS = ROOT / "plugins" / "module_utils"
ABSOLUTE = "ansible_collections.llmfleet.serving.plugins.module_utils."

# Modules that read plans (the planner's output): the planner may import none of them, directly or through another module.
PLAN_CONSUMERS = {"_serving", "_gateway", "_fleet_plans", "_host_runtime", "_verify", "_bench", "_rollout", "_webui", "_reach", "_monitoring",
                  "_rotation"}
# The planner's own modules; each of their imports must stay below them (facts, tables, the host's needs) or inside _plan.
PLANNER = {"_planner"} | {f"_plan.{p.stem}" for p in (MODULE_UTILS / "_plan").glob("*.py") if p.stem != "__init__"} | {"_plan"}

# module -> the module_utils modules it may import. Lower layers first: facts and tables, the planner's stages in the order
# compose.py runs them, the contract, then the modules that consume plans.
LAYERS: Dict[str, Set[str]] = {
    # facts and tables: below everything
    "_fleet_vars": set(), "_engine": set(), "_hf_config": set(), "_hf_names": set(), "_vllm_archs": set(), "_pooling": {"_engine"},
    "_models": {"_hf_config", "_hf_names", "_pooling"}, "_hardware": set(), "_host_needs": {"_fleet_vars"},
    "_nvidia_driver": set(),
    "_hardware_profiles": {"_hardware"},
    # what an engine version does with its key (one, or two during a rotation)
    "_engine_keys": {"_engine"},
    # tools that neither make nor read plans
    "_model_store": set(), "_hub_http": {"_model_store"}, "_venv": set(), "_openai_http": set(),
    "_config_tree": set(), "_run_lock": set(), "_units": set(), "_host_tuning": {"_units"},
    # what each file syntax can carry (nginx, systemd, environment files) and the served name's rule: the planner refuses
    # an inventory value with it, the gateway re-checks the plans it reads
    "_syntax": set(),
    # the planner's package, stage by stage
    "_plan": set(),
    "_plan.base": {"_fleet_vars"},
    "_plan.memory": {"_engine", "_models", "_plan.base"},
    "_plan.stages": {"_engine", "_plan.base", "_plan.memory"},
    "_plan.ports": {"_plan.base"},
    "_plan.inputs": {"_engine", "_hardware", "_host_needs", "_plan.base", "_plan.group", "_plan.ports", "_plan.stages", "_pooling",
                     "_syntax"},
    "_plan.pooling": {"_engine", "_models", "_plan.base", "_plan.stages", "_pooling"},
    "_plan.model": {"_engine", "_hf_names", "_host_needs", "_models", "_plan.base", "_plan.stages", "_vllm_archs"},
    # topology reads the model's heads (sharding.valid_tp) to lay TP ranks over a CPU host's NUMA nodes (issue 34)
    "_plan.topology": {"_hardware", "_models", "_plan.base", "_plan.sharding", "_plan.stages"},
    "_plan.engine": {"_engine", "_nvidia_driver", "_plan.base", "_plan.stages"},
    "_plan.sharding": {"_engine", "_models", "_plan.stages"},
    "_plan.precision": {"_engine", "_models", "_plan.base", "_plan.stages"},
    "_plan.sizer": {"_engine", "_models", "_plan.base", "_plan.memory", "_plan.stages"},
    "_plan.hints": {"_models", "_plan.base", "_plan.precision", "_plan.sharding", "_plan.sizer", "_plan.stages"},
    # the speed levers (issue 39): read the model and the fit rules, decide before the layout and the sizing
    "_plan.levers": {"_models", "_plan.base", "_plan.sharding", "_plan.sizer", "_plan.stages"},
    "_plan.layout": {"_models", "_plan.base", "_plan.hints", "_plan.precision", "_plan.sharding", "_plan.sizer", "_plan.stages",
                     "_plan.topology"},
    "_plan.sizing": {"_engine", "_models", "_plan.base", "_plan.hints", "_plan.memory", "_plan.sharding", "_plan.sizer",
                     "_plan.stages"},
    "_plan.features": {"_engine", "_models", "_plan.base", "_plan.memory", "_plan.stages"},
    # a deployment over several hosts (issue 38): its group, its layout across them, each rank's environment
    "_plan.group": {"_engine", "_host_needs", "_models", "_plan.base", "_plan.hints", "_plan.sharding", "_plan.sizer", "_plan.stages",
                    "_plan.topology"},
    "_plan.instances": {"_engine", "_host_needs", "_models", "_plan.base", "_plan.engine", "_plan.group", "_plan.stages",
                        "_plan.topology"},
    "_plan.compose": {"_engine", "_plan.base", "_plan.engine", "_plan.features", "_plan.group", "_plan.hints", "_plan.inputs", "_plan.instances",
                      "_plan.layout", "_plan.levers", "_plan.model", "_plan.pooling", "_plan.ports", "_plan.precision", "_plan.sizer", "_plan.sizing",
                      "_plan.stages", "_plan.topology", "_syntax"},
    # the contract: re-exports the stages' names
    "_planner": {"_plan.base", "_plan.compose", "_plan.engine", "_plan.features", "_plan.hints", "_plan.inputs", "_plan.instances",
                 "_plan.layout", "_plan.memory", "_plan.model", "_plan.ports", "_plan.precision", "_plan.sharding", "_plan.sizer", "_plan.sizing",
                 "_plan.stages", "_plan.topology",
                 # the lower-layer names its namespace held before the split, kept importable from the contract
                 "_engine", "_hardware", "_host_needs", "_models", "_nvidia_driver"},
    # plan consumers: above the planner
    "_fleet_plans": set(), "_serving": {"_engine", "_engine_keys", "_fleet_vars", "_host_needs", "_syntax", "_units"},
    "_gateway": {"_fleet_plans", "_pooling", "_syntax"},
    # every consumer of the instances that serve the API reads them through _fleet_plans.api_instances (no headless rank)
    "_verify": {"_engine", "_fleet_plans", "_pooling"}, "_reach": {"_fleet_plans", "_verify", "_monitoring"},
    "_bench": {"_engine", "_fleet_plans"}, "_rollout": {"_engine", "_fleet_plans"},
    "_webui": {"_fleet_plans", "_gateway", "_serving", "_units"}, "_rotation": {"_fleet_plans"},
    "_host_runtime": {"_host_needs", "_nvidia_driver", "_serving"},
    "_monitoring": {"_engine", "_fleet_plans", "_syntax", "_units"},
    # reads the gateway log and Prometheus answers: no plan
    "_usage": {"_monitoring"},
    # Prometheus's web configuration (its basic auth users): no plan
    "_prometheus_auth": set(),
}


def module_name(path: pathlib.Path, root: pathlib.Path = MODULE_UTILS) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: pathlib.Path, root: pathlib.Path = MODULE_UTILS) -> Set[str]:
    """The module_utils modules a file imports: relative imports resolved against its package, absolute ones by prefix."""
    name = module_name(path, root).split(".")
    package = name if path.name == "__init__.py" else name[:-1]
    found: Set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[:len(package) - node.level + 1]
            found |= {".".join(base + [node.module])} if node.module else {".".join(base + [a.name]) for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(ABSOLUTE):
            found.add(node.module[len(ABSOLUTE):])
        elif isinstance(node, ast.Import):
            found |= {a.name[len(ABSOLUTE):] for a in node.names if a.name.startswith(ABSOLUTE)}
    return found


@functools.lru_cache(maxsize=None)
def edges() -> Dict[str, Set[str]]:
    return {module_name(p): imports_of(p) for p in sorted(MODULE_UTILS.rglob("*.py"))}


def reachable(start: str, graph: Dict[str, Set[str]]) -> Set[str]:
    seen: Set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph.get(todo.pop(), set()) - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_every_module_is_in_the_table():
    assert set(edges()) == set(LAYERS), "add the new module_utils module to LAYERS (or remove the one that is gone)"


@pytest.mark.parametrize("module", sorted(LAYERS))
def test_imports_follow_the_table(module):
    actual = edges().get(module, set())
    assert actual <= LAYERS[module], f"{module} imports {sorted(actual - LAYERS[module])}, which LAYERS does not allow it"
    assert LAYERS[module] <= actual, f"LAYERS lets {module} import {sorted(LAYERS[module] - actual)}, which it does not: trim the table"


@pytest.mark.parametrize("module", sorted(PLANNER))
def test_the_planner_reaches_no_plan_consumer(module):
    """Through any chain of imports: a consumer of plans imported by the planner would make a cycle of layers."""
    assert not reachable(module, edges()) & PLAN_CONSUMERS
    assert not reachable(module, LAYERS) & PLAN_CONSUMERS, "LAYERS itself lets the planner reach a plan consumer"


def test_the_table_has_no_cycle():
    for module in LAYERS:
        assert module not in reachable(module, LAYERS), f"{module} reaches itself through LAYERS"


def test_the_checker_sees_relative_and_absolute_imports(tmp_path):
    """The parser resolves the three spellings module_utils uses (so a consumer import cannot hide from the rules above)."""
    package = tmp_path / "_pkg"
    package.mkdir()
    source = (f"from ..{'_serving'} import x\nfrom . import sibling\nfrom {ABSOLUTE}_gateway import y\nimport {ABSOLUTE}_verify\n")
    (package / "mod.py").write_text(source, encoding="utf-8")
    assert imports_of(package / "mod.py", tmp_path) == {"_serving", "_pkg.sibling", "_gateway", "_verify"}


def test_planner_modules_stay_under_600_lines():
    for path in sorted((MODULE_UTILS / "_plan").glob("*.py")) + [MODULE_UTILS / "_planner.py"]:
        lines = len(path.read_text(encoding="utf-8").splitlines())
        assert lines < 600, f"{path.name} has {lines} lines: split it by concern"
