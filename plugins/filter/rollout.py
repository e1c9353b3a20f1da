# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Filters of the change path (the vllm role's instance.yml, plan.yml): rollout_in_flight, rollout_peers,
rollout_live_peers, rollout_changes, rollout_at_version, rollout_prune and rollout_image_candidates (docs in the sidecar
YAML files)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.serving.plugins.module_utils import _rollout as r


def _call(func, *args, **kwargs):
    try:
        return func(*args, **kwargs)
    except r.RolloutError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    except (KeyError, TypeError, AttributeError) as exc:
        raise AnsibleFilterError(f"{func.__name__}: malformed input ({type(exc).__name__}: {exc})") from exc


def rollout_in_flight(metrics):
    return _call(r.in_flight, str(metrics))


def rollout_peers(plans, host, instance):
    return _call(r.peers, dict(plans), str(host), str(instance))


def rollout_live_peers(peers, gateway_routes):
    return _call(r.live_peers, list(peers or []), [list(routes or []) for routes in gateway_routes or []])


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
                "rollout_peers": rollout_peers, "rollout_live_peers": rollout_live_peers, "rollout_changes": rollout_changes,
                "rollout_at_version": rollout_at_version,
                "rollout_prune": rollout_prune, "rollout_image_candidates": rollout_image_candidates}
