# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Filters over the planner: vllm_plan and vllm_plan_table (docs in the sidecar YAML files)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.serving.plugins.module_utils._planner import PlanError, plan_host, summary_table


def vllm_plan(deployments, hardware, host="host", options=None):
    try:
        return plan_host(str(host), hardware, deployments, dict(options or {}))
    except PlanError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def vllm_plan_table(plan):
    try:
        return summary_table(plan)
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"vllm_plan_table: not a plan ({exc})") from exc


class FilterModule:
    def filters(self):
        return {"vllm_plan": vllm_plan, "vllm_plan_table": vllm_plan_table}
