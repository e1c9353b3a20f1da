#!/usr/bin/python
# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: accelerator_facts
short_description: Gather a host's accelerators, their links and NUMA layout as llmfleet_hardware
version_added: 0.1.0
description:
  - Reads C(nvidia-smi) (query, C(topo -m), C(-q -x)), or Hygon's C(hy-smi), or AMD's C(rocm-smi),
    and sysfs (NUMA CPU lists, PCI NUMA nodes, memory), and returns C(ansible_facts.llmfleet_hardware)
    in the schema the planner reads (the same schema a declared C(llmfleet_hardware) uses).
  - Adds C(groups), the groupings the planner places instances by, NVLink islands, fully
    connected NVLink groups, PCIe switch groups and GPUs per NUMA node.
  - A host with none of the tools is a CPU-only host, an empty accelerator list.
  - Every host also gets its CPU features from C(/proc/cpuinfo) (C(cpu_flags), only those the planner reads,
    AVX2, AVX-512, AVX-512 BF16/FP16, AMX) and one CPU per physical core of each NUMA node from sysfs
    C(thread_siblings_list) (C(numa_cores)); the planner chooses the CPU dtype and the OpenMP thread binding from them.
  - A tool that exists but fails, or prints something that cannot be parsed, fails the task with
    the command and the first offending line.
  - Hygon and AMD link types map onto nvidia-smi's words, XGMI becomes C(NV<hops>), PCIe inside one
    NUMA node C(NODE), across nodes C(SYS).
author:
  - llmfleet.serving developers (!UNKNOWN)
options:
  vendors:
    description:
      - Which vendor tools to look for, in this order; the first one found is used.
    type: list
    elements: str
    choices: [nvidia, hygon, amd]
    default: [nvidia, hygon, amd]
  search_paths:
    description:
      - Folders to look for the vendor tools in before C(PATH) and the vendors' usual folders (for Hygon, the
        hyhal folder the plan mounts, C(llmfleet_hyhal_dir); C(/opt/hyhal/bin) and C(/opt/rocm/bin) are always looked in).
    type: list
    elements: path
    default: []
  return_raw:
    description:
      - Also return the captured command output and sysfs readings as RV(raw), from which the
        same facts can be rebuilt (used to make test fixtures from real hosts).
    type: bool
    default: false
attributes:
  check_mode:
    description: Only reads; runs the same way in check mode.
    support: full
  diff_mode:
    description: Changes nothing, so there is no diff.
    support: none
  facts:
    description: Returns C(ansible_facts.llmfleet_hardware).
    support: full
  idempotent:
    description: Reads only.
    support: full
notes:
  - The NUMA node of a GPU comes from its PCI device in sysfs; where that is -1 (virtual
    machines) it falls back to the NUMA affinity nvidia-smi topo reports.
  - Drivers older than R510 lack the C(compute_cap) query field; the capability then comes from
    the product name.
"""

EXAMPLES = r"""
- name: Gather accelerator facts
  llmfleet.serving.accelerator_facts:

- name: Show what the planner will see
  ansible.builtin.debug:
    var: ansible_facts.llmfleet_hardware.groups

- name: Keep the raw outputs for a bug report
  llmfleet.serving.accelerator_facts:
    return_raw: true
  register: hw
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to the host.
  returned: always
  type: dict
  contains:
    llmfleet_hardware:
      description: The host's hardware in the llmfleet_hardware schema (see the collection's docs/hardware.md).
      returned: always
      type: dict
      sample:
        accelerators:
          - index: 0
            vendor: nvidia
            model: NVIDIA H200
            arch: sm90
            compute_capability: "9.0"
            memory_mib: 143771
            numa_node: 0
        links: [["X"]]
        numa_cpus: {"0": "0-15"}
        numa_cores: {"0": "0-15"}
        cpu_flags: [avx2, avx512f, avx512_bf16, avx512_fp16, amx_tile, amx_bf16, amx_int8]
        cpu_count: 16
        memory_mib: 131072
        driver_version: "580.159.04"
        cuda_version: "13.0"
        source: nvidia-smi
        groups:
          nvlink_islands: []
          nvlink_cliques: []
          pcie_switches: []
          numa_domains: {"0": [0]}
          all_nvlink: false
summary:
  description: A one-screen description of the hardware.
  returned: always
  type: list
  elements: str
raw:
  description: The captured command output and sysfs readings the facts were built from.
  returned: when O(return_raw=true)
  type: dict
"""

import os
import traceback

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.serving.plugins.module_utils._hardware import (
    NVIDIA_QUERY,
    NVIDIA_QUERY_OLD,
    NVIDIA_TOPO,
    NVIDIA_XML,
    SMI_MEMORY,
    SMI_PRODUCT,
    SMI_TOPO,
    HardwareError,
    assemble,
    expand_cpulist,
    parse_cpu_flags,
    parse_meminfo_mib,
    read_numa_cpus,
    read_pci_numa,
    read_thread_siblings,
    summary_lines,
)

TOOL_DIRS = {"nvidia": ("nvidia-smi", []), "hygon": ("hy-smi", ["/opt/hyhal/bin"]), "amd": ("rocm-smi", ["/opt/rocm/bin"])}


def run(module, binary, command, required=True):
    """Run one of our fixed command lines with the resolved binary; fail or return None."""
    args = [binary] + command.split()[1:]
    rc, out, err = module.run_command(args, environ_update={"LC_ALL": "C"})
    if rc == 0:
        return out
    first = (err or out or "").strip().splitlines()
    detail = first[0] if first else f"exit code {rc}"
    if required:
        module.fail_json(msg=f"{command} failed (exit code {rc}): {detail}. Is the driver loaded? "
                             f"Check that `{command}` works on the host, or declare llmfleet_hardware for it.", rc=rc)
    module.warn(f"{command} failed (exit code {rc}): {detail}; continuing without it")
    return None


def capture_host():
    with open("/proc/meminfo", encoding="ascii") as handle:
        memory = parse_meminfo_mib(handle.read())
    try:
        with open("/sys/devices/system/cpu/online", encoding="ascii") as handle:
            cpus = len(expand_cpulist(handle.read().strip()))
    except OSError:
        cpus = os.cpu_count() or 1
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            flags = parse_cpu_flags(handle.read())
    except OSError:
        flags = None
    return {"numa_cpus": read_numa_cpus(), "pci_numa": read_pci_numa(), "memory_mib": memory, "cpu_count": cpus,
            "cpu_flags": flags, "thread_siblings": read_thread_siblings()}


def capture_nvidia(module, binary):
    commands = {}
    rc, out, err = module.run_command([binary] + NVIDIA_QUERY.split()[1:], environ_update={"LC_ALL": "C"})
    if rc == 0:
        commands[NVIDIA_QUERY] = out
    elif "compute_cap" in (out + err):
        commands[NVIDIA_QUERY_OLD] = run(module, binary, NVIDIA_QUERY_OLD)
    else:
        run(module, binary, NVIDIA_QUERY)  # fails with the message
    for command in (NVIDIA_TOPO, NVIDIA_XML):
        out = run(module, binary, command, required=False)
        if out is not None:
            commands[command] = out
    return commands


def capture_smi(module, tool, binary):
    commands = {}
    for template, required in ((SMI_PRODUCT, False), (SMI_MEMORY, True), (SMI_TOPO, False)):
        command = template.format(tool=tool)
        out = run(module, binary, command, required=required)
        if out is not None:
            commands[command] = out
    return commands


def main():
    module = AnsibleModule(
        argument_spec=dict(
            vendors=dict(type="list", elements="str", choices=["nvidia", "hygon", "amd"], default=["nvidia", "hygon", "amd"]),
            search_paths=dict(type="list", elements="path", default=[]),
            return_raw=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    raw = {"commands": {}, "host": capture_host()}
    for vendor in module.params["vendors"]:
        tool, extra_dirs = TOOL_DIRS[vendor]
        binary = module.get_bin_path(tool, opt_dirs=list(module.params["search_paths"]) + extra_dirs)
        if not binary:
            continue
        raw["commands"] = capture_nvidia(module, binary) if vendor == "nvidia" else capture_smi(module, tool, binary)
        break
    try:
        hardware = assemble(raw)
    except HardwareError as exc:
        module.fail_json(msg=str(exc), raw=raw)
    except Exception as exc:  # pylint: disable=broad-except
        module.fail_json(msg=f"could not understand the accelerator tools' output ({type(exc).__name__}: {exc}); "
                             "this is a bug in llmfleet.serving: please report it with the raw output returned here",
                         raw=raw, exception=traceback.format_exc())
    result = dict(changed=False, ansible_facts={"llmfleet_hardware": hardware}, summary=summary_lines(hardware))
    if module.params["return_raw"]:
        result["raw"] = raw
    module.exit_json(**result)


if __name__ == "__main__":
    main()
