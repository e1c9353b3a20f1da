# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Filters over the gateway's rotation (the gateway role owns it): gateway_planned_instances and gateway_rotation_out
(docs in the sidecar YAML files)."""

from __future__ import annotations


from ansible_collections.llmfleet.serving.plugins.module_utils import _rotation as rot
from ansible_collections.llmfleet.serving.plugins.plugin_utils.filter_errors import call


def _call(func, *args, **kwargs):
    return call(func, (rot.RotationError,), *args, **kwargs)


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
