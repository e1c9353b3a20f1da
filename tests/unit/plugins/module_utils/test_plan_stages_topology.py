"""_plan.topology on its own: the GPUs a deployment takes, their links, NUMA nodes and CPU sets."""

from __future__ import annotations

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils._hardware import validate_hardware
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.base import Ctx, Refusal
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.inputs import check_deployments, read_request
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.topology import (
    cpu_binding, link_domains, numa_of, place, placeable_instances,
)


def hw_of(name):
    return validate_hardware(hardware_profile(name), source="test")


def test_links_name_the_domain_kind():
    """H200 SXM: NVSwitch links every pair; DGX-1: two NVLink quads joined by NV2 pairs, not all pairs (its nvidia-smi topo);
    the RTX 4090 server: PCIe only, four GPUs on each of two NUMA nodes."""
    assert link_domains(list(range(8)), hw_of("h200_sxm_8x")) == ("nvlink_all", [list(range(8))])
    kind, _groups = link_domains(list(range(8)), hw_of("dgx1_v100_32gb"))
    assert kind == "nvlink_mesh"
    assert link_domains(list(range(8)), hw_of("rtx4090_8x_pcie")) == ("pcie", [[0, 1, 2, 3], [4, 5, 6, 7]])


def test_placeable_counts_whole_instances_inside_nodes():
    assert placeable_instances("pcie", [[0, 1, 2], [3]], 2) == 1       # 3 + 1 GPUs: one TP=2 instance fits a node
    assert placeable_instances("pcie", [[0, 1, 2, 3], [4, 5, 6, 7]], 8) == 1   # wider than a node: across them
    assert placeable_instances("nvlink_all", [list(range(8))], 2) == 4


def test_place_a_count_takes_free_gpus_and_refuses_a_shortfall():
    hw = hw_of("rtx4090_8x_pcie")
    [d] = check_deployments([{"name": "d", "model": "Qwen/Qwen3-8B", "engine": {"version": "0.26.0"}, "gpus": 4}], "h")
    req = read_request(d, Ctx([]))
    p = place(d, req, hw, "h", {0: "x"}, Ctx([]))
    assert p.gpus == [4, 5, 6, 7] and p.vendor == "nvidia" and p.cc == 89   # a whole free NUMA node; RTX 4090 is sm89
    with pytest.raises(Refusal, match=r"only 3 GPU\(s\) are free"):
        place(d, req, hw, "h", {i: "x" for i in range(5)}, Ctx([]))


def test_numa_of_a_group_and_a_cpu_binding():
    hw = hw_of("rtx4090_8x_pcie")
    assert numa_of([0, 1], hw, [], "x") == (0, hw["numa_cpus"][0])
    warnings = []
    node, cpus = numa_of([3, 4], hw, warnings, "x")
    assert node is None and cpus == "0-223" and "NUMA nodes [0, 1]" in warnings[0]
    cpu = validate_hardware({"accelerators": [], "links": None, "numa_cpus": {0: "0-3", 1: "4-11"}, "numa_cores": {1: "4-7"},
                             "cpu_count": 12, "memory_mib": 65536, "driver_version": None}, source="test")
    ctx = Ctx([])
    assert cpu_binding(cpu, ctx) == (1, "4-11", "4-7")      # the larger node, one thread per physical core
    assert [r["decision"] for r in ctx.reasons] == ["numa_node=1", "omp_threads_bind=4-7"]
