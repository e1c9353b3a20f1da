# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Filters for the model_store role: model_fetch_jobs (its started downloads in model_fetch_wait's terms),
model_fetch_summary (what a check-mode pass found to fetch, one line per model) and model_hub (a hub
source's endpoint, default revision and SDK package)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

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


class FilterModule:
    def filters(self):
        return {"model_fetch_jobs": model_fetch_jobs, "model_fetch_summary": model_fetch_summary, "model_hub": model_hub}
