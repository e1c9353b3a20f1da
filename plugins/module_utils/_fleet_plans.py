# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The fleet's plans as the roles after plan.yml read them: each host's llmfleet_plan fact, else the plan file
<plan_dir>/<host>.json that playbooks/plan.yml wrote. Reads files on the controller; nothing else.
Private to llmfleet.serving.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Mapping, Sequence


class FleetPlanError(ValueError):
    """A host without a plan, or a plan that is not a mapping; the message names the fix."""


def read_fleet_plans(hosts: Sequence[str], fact_plans: Mapping[str, Any], plan_dir: str) -> Dict[str, Dict[str, Any]]:
    """Each host's plan: the llmfleet_plan fact when this run has one (fact_plans[host]), else the plan
    file <plan_dir>/<host>.json that playbooks/plan.yml wrote. A host with neither raises, naming the fix."""
    plans: Dict[str, Dict[str, Any]] = {}
    for host in hosts:
        plan = fact_plans.get(host)
        if not plan:
            path = os.path.join(plan_dir, f"{host}.json")
            if not os.path.exists(path):
                raise FleetPlanError(f"{host} has no plan: no llmfleet_plan fact in this run and no {path}; "
                                     "run playbooks/plan.yml (site.yml does) or set llmfleet_plan_dir")
            with open(path, encoding="utf-8") as handle:
                plan = json.load(handle)
        if not isinstance(plan, Mapping):
            raise FleetPlanError(f"{host}: the plan must be a mapping, got {type(plan).__name__}")
        plans[host] = dict(plan)
    return plans
