# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Filter cpu_governor_unit: the host_tuning role's boot unit for the CPU governor (docs in cpu_governor_unit.yml)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.serving.plugins.module_utils._host_tuning import TunableError, cpu_governor_unit as _unit


def cpu_governor_unit(governor):
    try:
        return _unit(str(governor))
    except TunableError as exc:
        raise AnsibleFilterError(f"cpu_governor_unit: {exc} (check host_tuning_cpu_governor)") from exc


class FilterModule:
    def filters(self):
        return {"cpu_governor_unit": cpu_governor_unit}
