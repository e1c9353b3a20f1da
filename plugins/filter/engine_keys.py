# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Filters of the engines' key (module_utils/_engine_keys): vllm_api_keys, vllm_key_phase, vllm_key_rotation_refusal and
vllm_key_missing_stop and vllm_key_wrong_stop (docs in the sidecar YAML files)."""

from __future__ import annotations


from ansible_collections.llmfleet.serving.plugins.module_utils import _engine_keys as k
from ansible_collections.llmfleet.serving.plugins.plugin_utils.filter_errors import call


def _call(func, *args, **kwargs):
    return call(func, (k.EngineKeyError,), *args, **kwargs)


def vllm_api_keys(current, next_key=None, previous=None, drop_previous=False):
    return _call(k.accepted_keys, current, next_key or None, previous or None, bool(drop_previous))


def vllm_key_phase(has_next, has_previous):
    return k.rotation_phase(bool(has_next), bool(has_previous))


def vllm_key_rotation_refusal(instances, host=""):
    return _call(k.rotation_refusal, _call(k.rotation_blockers, list(instances or []), str(host or "")))


def vllm_key_missing_stop(key_file, holders, unasked=None, unknown=None):
    return _call(k.missing_key_stop, str(key_file), dict(holders or {}), list(unasked or []), list(unknown or []))


def vllm_key_wrong_stop(key_file, host, accepted, lines):
    return _call(k.wrong_key_stop, str(key_file), str(host), list(accepted or []), k.running_keys(list(lines or [])))


class FilterModule:
    def filters(self):
        return {"vllm_api_keys": vllm_api_keys, "vllm_key_phase": vllm_key_phase, "vllm_key_rotation_refusal": vllm_key_rotation_refusal,
                "vllm_key_missing_stop": vllm_key_missing_stop, "vllm_key_wrong_stop": vllm_key_wrong_stop}
