#!/usr/bin/python
# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: kernel_tunables
short_description: Apply sysctl values and the CPU frequency governor to the running kernel
version_added: 0.1.0
description:
  - Sets sysctl values under C(/proc/sys) and the cpufreq scaling governor of every CPU, live.
  - Persisting them across reboots is the caller's job (the C(llmfleet.serving.host_tuning) role
    writes a file under C(/etc/sysctl.d/) and a boot unit for the governor).
  - Every key and value is checked before anything is written, so a key this kernel lacks fails
    the task without changing anything.
  - Where the kernel interface cannot be written (a container's read-only C(/proc/sys)), the value
    is reported as not applied live, with the reason, and a warning is emitted; with
    O(live_required=true) that is an error instead.
author:
  - llmfleet.serving developers (!UNKNOWN)
options:
  sysctl:
    description:
      - Map of sysctl key (dotted, or slash form for names containing dots) to the desired value.
    type: dict
    default: {}
  live:
    description:
      - Apply the O(sysctl) values to the running kernel. With V(false) they are only checked
        (every key must exist on this kernel, every value must be printable) and reported.
    type: bool
    default: true
  cpu_governor:
    description:
      - cpufreq scaling governor to set on every CPU, for example V(performance).
      - Hosts without a cpufreq interface (most VMs and containers) report RV(cpu_governor.available=false).
    type: str
  live_required:
    description:
      - Fail when a value cannot be applied to the running kernel instead of warning.
    type: bool
    default: false
attributes:
  check_mode:
    description: Reports what would be written without writing it.
    support: full
  diff_mode:
    description: Shows the running values before and after.
    support: full
  idempotent:
    description: A second run with the same options writes nothing and reports no change.
    support: full
notes:
  - On a host whose values already match, nothing is written and the task reports no change.
"""

EXAMPLES = r"""
- name: Disable automatic NUMA balancing and use the performance governor
  llmfleet.serving.kernel_tunables:
    sysctl:
      kernel.numa_balancing: 0
    cpu_governor: performance

- name: Require the live value (bare-metal hosts only)
  llmfleet.serving.kernel_tunables:
    sysctl:
      kernel.numa_balancing: 0
    live_required: true
"""

RETURN = r"""
sysctl:
  description: One entry per requested key.
  returned: always
  type: list
  elements: dict
  sample:
    - key: kernel.numa_balancing
      desired: "0"
      before: "1"
      after: "0"
      changed: true
      live_applied: true
      reason: ""
cpu_governor:
  description: What was found and done for the CPU governor; absent when O(cpu_governor) is not set.
  returned: when O(cpu_governor) is set
  type: dict
  contains:
    available:
      description: Whether the host has a cpufreq interface at all.
      type: bool
    cpus:
      description: Number of CPUs with a cpufreq governor.
      type: int
    before:
      description: Governor name to CPU count before the task.
      type: dict
    after:
      description: Governor name to CPU count after the task.
      type: dict
    live_applied:
      description: Whether every CPU now runs the desired governor.
      type: bool
    reason:
      description: Why the governor was skipped or could not be set.
      type: str
  sample:
    desired: performance
    available: true
    cpus: 64
    before: {powersave: 64}
    after: {performance: 64}
    changed: true
    live_applied: true
    reason: ""
live_applied:
  description: Whether every requested value now holds in the running kernel.
  returned: always
  type: bool
summary:
  description: One readable line per setting, saying what holds live and what does not, and why.
  returned: always
  type: list
  elements: str
  sample:
    - "sysctl kernel.numa_balancing = 0 NOT live (running kernel has 1): /proc/sys/kernel is mounted read-only here"
    - "cpu governor performance: skipped, no cpufreq interface on this host"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.serving.plugins.module_utils._host_tuning import (
    TunableError,
    apply_cpu_governor,
    apply_sysctl,
    as_dict,
    summarize,
    validate_sysctl,
)


def main() -> None:
    argument_spec = dict(
        sysctl=dict(type="dict", default={}),
        live=dict(type="bool", default=True),
        cpu_governor=dict(type="str"),
        live_required=dict(type="bool", default=False),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    governor = module.params["cpu_governor"]
    try:
        if module.params["live"]:
            sysctl = apply_sysctl(module.params["sysctl"], check_mode=module.check_mode)
        else:
            validate_sysctl(module.params["sysctl"])
            sysctl = []
        gov = apply_cpu_governor(governor, check_mode=module.check_mode) if governor else None
    except TunableError as exc:
        module.fail_json(msg=str(exc))

    not_live = [f"sysctl {r.key}={r.desired} (now {r.before}): {r.reason}" for r in sysctl if not r.live_applied]
    if gov is not None and gov.available and not gov.live_applied:
        not_live.append(f"cpu governor {gov.desired}: {gov.reason}")
    result = dict(
        changed=any(r.changed for r in sysctl) or bool(gov and gov.changed),
        sysctl=[as_dict(r) for r in sysctl],
        live_applied=not not_live,
        summary=summarize(sysctl, gov),
        diff=dict(
            before="".join(f"{r.key} = {r.before}\n" for r in sysctl) + (f"cpu_governor = {gov.before}\n" if gov else ""),
            after="".join(f"{r.key} = {r.after}\n" for r in sysctl) + (f"cpu_governor = {gov.after}\n" if gov else ""),
        ),
    )
    if gov is not None:
        result["cpu_governor"] = as_dict(gov)
    if not_live:
        text = "not applied to the running kernel: " + "; ".join(not_live)
        if module.params["live_required"]:
            module.fail_json(msg=text + " (live_required=true)", **result)
        module.warn(text + ". The persisted setting takes effect when the host boots its own kernel.")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
