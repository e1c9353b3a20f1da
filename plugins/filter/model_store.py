# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Filters for the model_store role: model_fetch_jobs (its started downloads in model_fetch_wait's terms),
model_fetch_summary (what a check-mode pass found to fetch, one line per model), model_hub (a hub
source's endpoint, default revision and SDK package), model_store_models (the models a host keeps:
from its plan, or the explicit list), model_store_in_use (the folders that must stay) and model_store_prune (the
folders of old revisions to remove, keeping N)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.serving.plugins.module_utils._fleet_vars import FLEET_VARS
from ansible_collections.llmfleet.serving.plugins.module_utils._host_needs import NeedsError, in_use_folders, prune_folders, store_models
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


def model_store_in_use(plan, models=None, root=FLEET_VARS["llmfleet_model_root"].default):
    return in_use_folders(plan, list(models or []), str(root))


def model_store_prune(found, in_use, keep, root=FLEET_VARS["llmfleet_model_root"].default):
    try:
        return prune_folders(list(found or []), list(in_use or []), int(keep), str(root))
    except NeedsError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self):
        return {"model_fetch_jobs": model_fetch_jobs, "model_fetch_summary": model_fetch_summary, "model_hub": model_hub,
                "model_store_models": model_store_models, "model_store_in_use": model_store_in_use,
                "model_store_prune": model_store_prune}
