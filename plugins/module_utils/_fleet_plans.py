# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The fleet's plans as the roles after plan.yml read them: each host's llmfleet_plan fact, else the plan file
<plan_dir>/<host>.json that playbooks/plan.yml wrote (read_fleet_plans reads files on the controller; nothing else), and
what only the whole fleet shows: one model per served name (served_name_conflicts, pure).
Private to llmfleet.serving.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple


def api_instances(dep: Mapping[str, Any]) -> List[Mapping[str, Any]]:
    """A planned deployment's instances that serve the API: every one but the --headless ranks of a multi-host deployment
    (`headless`: workers only, no port, no edge, no /metrics; the group's rank 0 serves for them). What the gateway routes
    to, verify asks, monitoring scrapes and the rotation names."""
    return [i for i in dep.get("instances") or [] if isinstance(i, Mapping) and not i.get("headless")]


class FleetPlanError(ValueError):
    """A host without a plan, or a plan that is not a mapping; the message names the fix."""


def read_fleet_plans(hosts: Sequence[str], fact_plans: Mapping[str, Any], plan_dir: str,
                     missing_ok: bool = False) -> Dict[str, Dict[str, Any]]:
    """Each host's plan: the llmfleet_plan fact when this run has one (fact_plans[host]), else the plan
    file <plan_dir>/<host>.json that playbooks/plan.yml wrote. A host with neither raises, naming the fix, or is left out
    with `missing_ok` (a host not planned yet)."""
    plans: Dict[str, Dict[str, Any]] = {}
    for host in hosts:
        plan = fact_plans.get(host)
        if not plan:
            path = os.path.join(plan_dir, f"{host}.json")
            if not os.path.exists(path):
                if missing_ok:
                    continue
                raise FleetPlanError(f"{host} has no plan: no llmfleet_plan fact in this run and no {path}; "
                                     "run playbooks/plan.yml (site.yml does) or set llmfleet_plan_dir")
            with open(path, encoding="utf-8") as handle:
                plan = json.load(handle)
        if not isinstance(plan, Mapping):
            raise FleetPlanError(f"{host}: the plan must be a mapping, got {type(plan).__name__}")
        plans[host] = dict(plan)
    return plans


def _served(plan: Mapping[str, Any], dep: Mapping[str, Any]) -> Optional[str]:
    """A deployment's served model name in a plan: the deployment's own field, else its instances' (older plans)."""
    name = dep.get("served_model_name") or next((i.get("served_model_name") for i in dep.get("instances") or []
                                                 if i.get("served_model_name")), None)
    return str(name or dep.get("name") or "") or None


def _model_of(dep: Mapping[str, Any]) -> Optional[Tuple[str, str]]:
    """(model id, revision) a deployment serves; None where the plan did not get as far as the model."""
    source = dep.get("model_source") if isinstance(dep.get("model_source"), Mapping) else {}
    model = dep.get("model") or source.get("id")
    if not model:
        return None
    return str(model), str(source.get("revision") or "the source's default")


def served_name_conflicts(plans: Mapping[str, Mapping[str, Any]]) -> List[str]:
    """One model per served name across the fleet: the gateway puts every instance of a name in one upstream and routes by
    the name alone, so two deployments (on one host or on two) that share a served name must serve the same model at the
    same revision, and be routed one way (`routing`). One message per name that does not, naming every host/deployment and
    what each serves or how it is routed."""
    by_name: Dict[str, List[Tuple[str, str, Tuple[str, str]]]] = {}
    routings: Dict[str, List[Tuple[str, str, str]]] = {}
    for host in sorted(plans):
        for dep in plans[host].get("deployments") or []:
            model = _model_of(dep)
            name = _served(plans[host], dep)
            if model is None or name is None:
                continue
            by_name.setdefault(name, []).append((host, str(dep.get("name")), model))
            routings.setdefault(name, []).append((host, str(dep.get("name")), str(dep.get("routing") or "least_conn")))
    problems = []
    for name in sorted(by_name):
        served = by_name[name]
        if len({model for _h, _d, model in served}) > 1:
            problems.append(f"served name {name!r} is given to different models: "
                            + ", ".join(f"{host}/{dep} serves {model}@{revision}" for host, dep, (model, revision) in served)
                            + "; the gateway would mix their answers in one upstream: give each model its own served_name, or "
                            "the same model and revision to every deployment of the name")
    # one routing per served name: the gateway picks among all of the name's instances one way
    for name in sorted(routings):
        ways = routings[name]
        if len({way for _h, _d, way in ways}) > 1:
            problems.append(f"served name {name!r} is routed differently: "
                            + ", ".join(f"{host}/{dep} has routing {way}" for host, dep, way in ways)
                            + "; the gateway picks among all instances of a name one way: give every deployment of the name the "
                            "same routing")
    return problems


# the words of a rank's command line that differ from rank to rank by design (_plan.engine.launch_args): its rank, and the
# API's address and port, which only rank 0 has
RANK_WORDS = {"--node-rank": 1, "--host": 1, "--port": 1, "--headless": 0}


def _shared_args(args: Sequence[Any]) -> List[str]:
    out, skip = [], 0
    for word in [str(a) for a in args]:
        if skip:
            skip -= 1
        elif word in RANK_WORDS:
            skip = RANK_WORDS[word]
        else:
            out.append(word)
    return out


def group_problems(plans: Mapping[str, Mapping[str, Any]]) -> List[str]:
    """What keeps a multi-host deployment's ranks from forming one engine, over this run's plans (each member plans its own
    rank): a host of the group without its rank (its plan has errors, or it planned the deployment differently), ranks whose
    command lines differ beyond the rank's own words (hosts that differ in what the planner reads: links, CPU features,
    memory), or ranks that name different members. One message per group deployment; empty when every group agrees."""
    ranks: Dict[Tuple[str, str], Dict[str, Mapping[str, Any]]] = {}
    for host in sorted(plans):
        for dep in (plans[host] or {}).get("deployments") or []:
            for inst in dep.get("instances") or []:
                grp = inst.get("group") if isinstance(inst, Mapping) else None
                if isinstance(grp, Mapping):
                    ranks.setdefault((str(grp.get("name")), str(dep.get("name"))), {})[host] = inst
    problems = []
    for (group, name), by_host in sorted(ranks.items()):
        first = next(iter(by_host.values()))
        members = [str(h) for h in first["group"].get("hosts") or []]
        missing = [h for h in members if h not in by_host]
        if missing:
            why = "; ".join(f"{h}: " + (" | ".join((plans.get(h) or {}).get("errors") or []) or "no rank of it in its plan")
                            for h in missing)
            problems.append(f"{name} (hosts={group}): {', '.join(missing)} planned no rank of it ({why}); no rank can start until "
                            "every host of the group plans it: fix that host's plan")
            continue
        head = by_host[members[0]]
        for host in members[1:]:
            inst = by_host[host]
            if {k: v for k, v in inst["group"].items() if k not in ("rank", "interface")} != \
                    {k: v for k, v in head["group"].items() if k not in ("rank", "interface")}:
                problems.append(f"{name} (hosts={group}): {host} and {members[0]} see different members or addresses of the group: "
                                "plan the whole group in one run")
                continue
            a, b = _shared_args(head.get("args") or []), _shared_args(inst.get("args") or [])
            if a != b:
                at = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
                problems.append(f"{name} (hosts={group}): {host} plans `{' '.join(b[max(0, at - 1):at + 2])}` where {members[0]} plans "
                                f"`{' '.join(a[max(0, at - 1):at + 2])}`: the hosts differ in what the planner reads (GPU links, CPU "
                                "features, memory), and one engine needs the same layout and limits on every rank; put only "
                                "identical hosts in the group")
    return problems
