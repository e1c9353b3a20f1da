# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Filters for the model_store role: model_fetch_jobs (its started downloads in model_fetch_wait's terms),
model_fetch_summary (what a check-mode pass found to fetch, one line per model), model_hub (a hub
source's endpoint, default revision and SDK package) and model_store_models (the models a host keeps:
from its plan, or the explicit list)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.serving.plugins.module_utils._fleet_vars import FLEET_VARS
from ansible_collections.llmfleet.serving.plugins.module_utils._host_needs import NeedsError, store_models
from ansible_collections.llmfleet.serving.plugins.module_utils._model_store import StoreError, fetch_jobs, fetch_summary, hub


def model_fetch_jobs(started):
    try:
        return fetch_jobs(list(started or []))
    except (StoreError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(str(exc)) from exc


def model_fetch_summary(results):
    return fetch_summary(list(results or []))


def model_hub(source):
    try:
        return hub(str(source))
    except StoreError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def model_store_models(plan, explicit=None, root=FLEET_VARS["llmfleet_model_root"].default, default_revision="master"):
    try:
        return store_models(plan, explicit, str(root), str(default_revision))
    except NeedsError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self):
        return {"model_fetch_jobs": model_fetch_jobs, "model_fetch_summary": model_fetch_summary, "model_hub": model_hub,
                "model_store_models": model_store_models}
