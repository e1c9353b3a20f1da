# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Filters over the gateway's rotation (the gateway role owns it): gateway_planned_instances and gateway_rotation_out
(docs in the sidecar YAML files)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.serving.plugins.module_utils import _rotation as rot


def _call(func, *args):
    try:
        return func(*args)
    except rot.RotationError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    except (KeyError, TypeError, AttributeError) as exc:
        raise AnsibleFilterError(f"{func.__name__}: malformed input ({type(exc).__name__}: {exc})") from exc


def gateway_planned_instances(plans):
    return _call(rot.planned, dict(plans or {}))


def gateway_rotation_out(results):
    """From the gateway_rotation module's results of a loop over the gateway hosts ({item, detail}) to merge_out's input."""
    per_gateway = {}
    for result in results or []:
        if isinstance(result, dict) and isinstance(result.get("detail"), dict):
            per_gateway[str(result.get("item"))] = result["detail"]
    return _call(rot.merge_out, per_gateway)


class FilterModule:
    def filters(self):
        return {"gateway_planned_instances": gateway_planned_instances, "gateway_rotation_out": gateway_rotation_out}
