# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Built-in hardware profiles (`llmfleet_hardware_profile: <name>`), in the schema of
`llmfleet_hardware`, for the field reports' machines and common servers. Plans can be made for
them without reaching the host. Where a number was read from a real machine, the comment says
where; the rest are the vendor's published layout.

Private to llmfleet.serving.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Dict, List, Optional

from ._hardware import HardwareError, validate_hardware


def _gpus(n: int, vendor: str, model: str, arch: str, cc: Optional[str], mib: int, numa: Callable[[int], Optional[int]]) -> List[Dict[str, Any]]:
    return [{"index": i, "vendor": vendor, "model": model, "arch": arch, "compute_capability": cc,
             "memory_mib": mib, "numa_node": numa(i)} for i in range(n)]


def _matrix(n: int, word: Callable[[int, int], str]) -> List[List[str]]:
    return [["X" if i == j else word(i, j) for j in range(n)] for i in range(n)]


def _numa_split(n: int, nodes: int) -> Callable[[int], int]:
    per = n // nodes
    return lambda i: i // per


def _pcie(numa: Callable[[int], Optional[int]], same: str = "NODE") -> Callable[[int, int], str]:
    return lambda i, j: same if numa(i) == numa(j) else "SYS"


# DGX-1 hybrid cube-mesh (nvidia-smi topo -m of an 8x V100-SXM2 DGX-1 box, fixture
# nvidia-smi-topo-dgx1-v100-hybrid-cube-mesh.txt): two fully linked quads joined by NV2 pairs.
_DGX1_LINKS = [
    ["X", "NV1", "NV1", "NV2", "NV2", "SYS", "SYS", "SYS"],
    ["NV1", "X", "NV2", "NV1", "SYS", "NV2", "SYS", "SYS"],
    ["NV1", "NV2", "X", "NV2", "SYS", "SYS", "NV1", "SYS"],
    ["NV2", "NV1", "NV2", "X", "SYS", "SYS", "SYS", "NV1"],
    ["NV2", "SYS", "SYS", "SYS", "X", "NV1", "NV1", "NV2"],
    ["SYS", "NV2", "SYS", "SYS", "NV1", "X", "NV2", "NV1"],
    ["SYS", "SYS", "NV1", "SYS", "NV1", "NV2", "X", "NV2"],
    ["SYS", "SYS", "SYS", "NV1", "NV2", "NV1", "NV2", "X"],
]


def _k100ai_numa(i: int) -> int:
    # Field report 003: cards 0-3 on NUMA node 3, cards 4-7 on node 7.
    return 3 if i < 4 else 7


def _eight_gpu_server(model: str, arch: str, cc: str, mib: int, link: str, cores_per_socket: int, memory_mib: int,
                      driver: str) -> Dict[str, Any]:
    """An 8-GPU, two-socket server, GPUs 0-3 on socket 0 and 4-7 on socket 1, one link word between all pairs."""
    c = cores_per_socket
    return {
        "accelerators": _gpus(8, "nvidia", model, arch, cc, mib, _numa_split(8, 2)),
        "links": _matrix(8, lambda i, j: link),
        "numa_cpus": {0: f"0-{c - 1},{2 * c}-{3 * c - 1}", 1: f"{c}-{2 * c - 1},{3 * c}-{4 * c - 1}"},
        "cpu_count": 4 * c, "memory_mib": memory_mib, "driver_version": driver,
    }


def _profiles() -> Dict[str, Dict[str, Any]]:
    two_socket = _numa_split(8, 2)
    return {
        # Field report 000: 8x Tesla V100-SXM2-32GB, DGX-1-like NVLink (NV1/NV2); the host
        # numbers (CPUs, memory, driver) are the collection's example for that box (docs/hardware.md).
        "dgx1_v100_32gb": {
            "accelerators": _gpus(8, "nvidia", "Tesla V100-SXM2-32GB", "sm70", "7.0", 32768, two_socket),
            "links": copy.deepcopy(_DGX1_LINKS),
            "numa_cpus": {0: "0-19,40-59", 1: "20-39,60-79"},
            "cpu_count": 80, "memory_mib": 483328, "driver_version": "570.86.15",
        },
        # Field report 001: 2x V100-SXM2-32GB joined by NVLink on an adapter card, i7-9700K
        # (8 cores), 32 GB RAM, driver 570. The NVLink brick count is assumed (NV2).
        "v100x2_nvlink": {
            "accelerators": _gpus(2, "nvidia", "Tesla V100-SXM2-32GB", "sm70", "7.0", 32768, lambda i: 0),
            "links": _matrix(2, lambda i, j: "NV2"),
            "numa_cpus": {0: "0-7"}, "cpu_count": 8, "memory_mib": 32768, "driver_version": "570.133.07",
        },
        # Field report 003: 8x Hygon K100_AI (64 GB) on PCIe; cards 0-3 on NUMA node 3 (CPUs
        # 24-31,88-95), cards 4-7 on node 7 (56-63,120-127); a 2-socket Hygon C86 host with
        # 8 NUMA nodes of 8 cores + 8 siblings.
        "k100ai_8x_pcie": {
            "accelerators": _gpus(8, "hygon", "K100_AI", "gfx928", None, 65536, _k100ai_numa),
            "links": _matrix(8, _pcie(_k100ai_numa)),
            "numa_cpus": {n: f"{8 * n}-{8 * n + 7},{64 + 8 * n}-{64 + 8 * n + 7}" for n in range(8)},
            "cpu_count": 128, "memory_mib": 1031168, "driver_version": None,
        },
        # HGX H100 8-GPU: NVSwitch, NV18 between every pair (fixture nvidia-smi-topo-8x-h100-sxm-nvswitch.txt).
        "h100_sxm_8x": _eight_gpu_server("NVIDIA H100 80GB HBM3", "sm90", "9.0", 81559, "NV18", 48, 2063872, "570.124.06"),
        # HGX H200 8-GPU: the H100 board with 141 GB parts (memory as nvidia-smi reports an H200).
        "h200_sxm_8x": _eight_gpu_server("NVIDIA H200", "sm90", "9.0", 143771, "NV18", 48, 2063872, "580.159.04"),
        # One H200 in a VM, as gathered by accelerator_facts on the lent machine
        # (tests/fixtures/hardware/h200x1-accelerator-facts/, 2026-11-29).
        "h200x1": {
            "accelerators": _gpus(1, "nvidia", "NVIDIA H200", "sm90", "9.0", 143771, lambda i: 0),
            "links": [["X"]],
            "numa_cpus": {0: "0-15"}, "cpu_count": 16, "memory_mib": 128887, "driver_version": "580.159.04",
        },
        # 8x RTX 4090 on PCIe, no P2P: every pair SYS (fixture nvidia-smi-topo-8x-rtx4090-pcie.txt).
        "rtx4090_8x_pcie": _eight_gpu_server("NVIDIA GeForce RTX 4090", "sm89", "8.9", 24564, "SYS", 56, 1031168, "550.54.14"),
        # HGX A100 80 GB: NVSwitch, NV12 between every pair (fixture nvidia-smi-topo-8x-a100-sxm.txt).
        "a100_sxm_8x_80gb": _eight_gpu_server("NVIDIA A100-SXM4-80GB", "sm80", "8.0", 81920, "NV12", 64, 2063872, "570.124.06"),
        # 4x T4 (16 GB, PCIe, no NVLink), two per socket: a common inference server layout.
        "t4x4": {
            "accelerators": _gpus(4, "nvidia", "Tesla T4", "sm75", "7.5", 15360, _numa_split(4, 2)),
            "links": _matrix(4, _pcie(_numa_split(4, 2), same="PHB")),
            "numa_cpus": {0: "0-15,32-47", 1: "16-31,48-63"},
            "cpu_count": 64, "memory_mib": 257024, "driver_version": "550.54.14",
        },
    }


PROFILE_NAMES = tuple(sorted(_profiles()))


def hardware_profile(name: str) -> Dict[str, Any]:
    """A built-in profile, validated and with its groupings, as a fresh copy."""
    profiles = _profiles()
    if name not in profiles:
        raise HardwareError(f"llmfleet_hardware_profile={name!r} is not a built-in profile; known: {', '.join(sorted(profiles))}")
    hw = profiles[name]
    hw["source"] = f"profile:{name}"
    return validate_hardware(hw, source=f"hardware profile {name}")
