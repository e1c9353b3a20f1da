# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Filters over the planner: vllm_plan, vllm_plan_table, vllm_plan_groups, plan_metadata_needed, plan_metadata,
fleet_served_names and fleet_group_problems (docs in the sidecar YAML files)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.serving.plugins.module_utils._fleet_plans import (
    FleetPlanError, group_problems, read_fleet_plans, served_name_conflicts,
)
from ansible_collections.llmfleet.serving.plugins.module_utils._models import metadata_needed
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.group import group_views
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import PlanError, plan_host, ports_in_force, summary_table


def vllm_plan(deployments, hardware, host="host", options=None, in_force=None):
    options = dict(options or {})
    if in_force is not None:
        options["ports_in_force"] = ports_in_force(in_force)
    try:
        return plan_host(str(host), hardware, deployments, options)
    except PlanError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def vllm_plan_table(plan):
    try:
        return summary_table(plan)
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"vllm_plan_table: not a plan ({exc})") from exc


def vllm_plan_groups(deployments, groups, hostvars, planned_here=None):
    return group_views(deployments, groups, hostvars, planned_here)


def plan_metadata_needed(deployments):
    if not isinstance(deployments, list):
        raise AnsibleFilterError(f"plan_metadata_needed: llmfleet_deployments must be a list, got {type(deployments).__name__}")
    return metadata_needed(deployments)


def plan_metadata(fetches, source="modelscope", endpoint=None):
    """{id: {dir, weight_bytes, source}} from the registered loop of model_fetch (config_only) results."""
    out = {}
    for result in (fetches or {}).get("results", []) if isinstance(fetches, dict) else []:
        if result.get("skipped") or result.get("failed"):
            continue
        item = result.get("item") or {}
        where = f"{source} ({endpoint})" if endpoint else str(source)
        out[item["id"]] = {"dir": result["dest"], "weight_bytes": int(result.get("weight_bytes") or 0),
                           "source": f"{where} at revision {result['revision']}"}
    return out


def fleet_served_names(hosts, hostvars, plan_dir, planned_here=None):
    """served_name_conflicts over the fleet as plan.yml sees it: this run's plan of every host it planned (planned_here),
    the plan file of every other host that has one (a run limited to some hosts still sees the rest of the fleet)."""
    here = set(planned_here or [])
    facts = {h: hostvars[h].get("llmfleet_plan") for h in hosts if h in here and h in hostvars}
    others = [h for h in hosts if h not in here]
    try:
        plans = read_fleet_plans(others, {}, str(plan_dir), missing_ok=True)
    except FleetPlanError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    plans.update({h: dict(p) for h, p in facts.items() if p})
    return served_name_conflicts(plans)


def fleet_group_problems(hosts, hostvars, planned_here=None):
    """group_problems over this run's plans (a group is planned whole in one run, so no plan file is read)."""
    here = set(planned_here or [])
    return group_problems({h: dict(hostvars[h].get("llmfleet_plan") or {}) for h in hosts if h in here and h in hostvars})


class FilterModule:
    def filters(self):
        return {"vllm_plan": vllm_plan, "vllm_plan_table": vllm_plan_table, "vllm_plan_groups": vllm_plan_groups,
                "plan_metadata_needed": plan_metadata_needed,
                "plan_metadata": plan_metadata, "fleet_served_names": fleet_served_names, "fleet_group_problems": fleet_group_problems}
