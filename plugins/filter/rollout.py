# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Filters of the change path (the vllm role's instance.yml, plan.yml): rollout_in_flight, rollout_peers,
rollout_live_peers, rollout_reconcile, rollout_changes, rollout_at_version, rollout_prune and rollout_image_candidates
(docs in the sidecar YAML files)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.llmfleet.serving.plugins.module_utils import _rollout as r
from ansible_collections.llmfleet.serving.plugins.module_utils import _rotation as rot
from ansible_collections.llmfleet.serving.plugins.module_utils._fleet_vars import FLEET_VARS
from ansible_collections.llmfleet.serving.plugins.plugin_utils.filter_errors import call


def _call(func, *args, **kwargs):
    return call(func, (r.RolloutError,), *args, **kwargs)


def rollout_in_flight(metrics):
    return _call(r.in_flight, str(metrics))


def rollout_peers(plans, host, instance):
    return _call(r.peers, dict(plans), str(host), str(instance))


def rollout_live_peers(peers, gateway_routes, out=None):
    return _call(r.live_peers, list(peers or []), [list(routes or []) for routes in gateway_routes or []], list(out or []))


def rollout_reconcile(out, plans, in_run, hostvars):
    """The rows of _rollout.reconcile, with the planned instances read from `plans` and the hosts left alone (llmfleet_serve
    false) from `hostvars`; `lines` is what the run prints."""
    default = FLEET_VARS["llmfleet_serve"].default
    try:
        alone = [h for h in in_run or [] if h in hostvars and not boolean(hostvars[h].get("llmfleet_serve", default), strict=False)]
        planned = rot.planned(dict(plans or {}))
    except (rot.RotationError, KeyError, TypeError, AttributeError) as exc:
        raise AnsibleFilterError(f"rollout_reconcile: malformed input ({type(exc).__name__}: {exc})") from exc
    rows = _call(r.reconcile, dict(out or {}), planned, list(in_run or []), alone)
    return {"rows": rows, "lines": r.reconcile_lines(rows), "forget": [row["instance"] for row in rows if row["action"] == r.FORGET],
            "planned": planned}


def rollout_changes(new_plan, old_plan):
    return _call(r.changes, old_plan or {}, new_plan)


def rollout_at_version(deployments, version, deployment=None):
    return _call(r.at_version, list(deployments or []), str(version), deployment)


def rollout_prune(installed, in_use, keep):
    return _call(r.prune, list(installed or []), list(in_use or []), int(keep))


def rollout_image_candidates(images, planned, container_images):
    return _call(r.image_candidates, list(images or []), list(planned or []), list(container_images or []))


class FilterModule:
    def filters(self):
        return {"rollout_in_flight": rollout_in_flight,
                "rollout_peers": rollout_peers, "rollout_live_peers": rollout_live_peers, "rollout_reconcile": rollout_reconcile,
                "rollout_changes": rollout_changes,
                "rollout_at_version": rollout_at_version,
                "rollout_prune": rollout_prune, "rollout_image_candidates": rollout_image_candidates}
