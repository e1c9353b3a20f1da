# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Filter model_fetch_jobs: the model_store role's started downloads in model_fetch_wait's terms."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.serving.plugins.module_utils._model_store import StoreError, fetch_jobs


def model_fetch_jobs(started, before=None):
    try:
        return fetch_jobs(list(started or []), list(before or []))
    except (StoreError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self):
        return {"model_fetch_jobs": model_fetch_jobs}
