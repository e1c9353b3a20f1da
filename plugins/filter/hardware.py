# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Filters over the hardware schema: resolve_hardware and hardware_summary (docs in the sidecar
YAML files beside this one)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.serving.plugins.module_utils._hardware import HardwareError, summary_lines, validate_hardware
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile


def resolve_hardware(declared, profile=None, gathered=None):
    """Declared llmfleet_hardware wins, then a built-in profile, then gathered facts."""
    try:
        if declared:
            return validate_hardware(declared, source="llmfleet_hardware")
        if profile:
            return hardware_profile(str(profile))
        if gathered:
            return validate_hardware(gathered, source="gathered llmfleet_hardware")
    except HardwareError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    raise AnsibleFilterError(
        "no hardware for this host: declare llmfleet_hardware, name a llmfleet_hardware_profile, "
        "or gather it with llmfleet.serving.accelerator_facts")


def hardware_summary(hardware, host=""):
    try:
        return summary_lines(validate_hardware(hardware), str(host or ""))
    except (HardwareError, KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"hardware_summary: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"resolve_hardware": resolve_hardware, "hardware_summary": hardware_summary}
