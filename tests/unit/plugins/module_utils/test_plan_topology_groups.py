"""Issue 34, class 5 (topology): tensor-parallel groups from the link matrix (NVLink first, then one NUMA node, then the
PCIe path), the CPU set of each GPU instance from its group's node, and CPU hosts that use every NUMA node the way vLLM's
CPU docs describe (one TP rank per node, VLLM_CPU_OMP_THREADS_BIND lists separated by '|', VLLM_CPU_KVCACHE_SPACE per
rank). The link matrices are real `nvidia-smi topo -m` / `rocm-smi --showtopo` outputs under tests/fixtures/hardware/."""

from __future__ import annotations

import itertools
import json
import math
import pathlib

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _hardware as hw_facts
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware import validate_hardware
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._models import catalog_profile, kv_bytes_per_token
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.topology import (
    EXHAUSTIVE_LIMIT, group_score, link_key, partition_count, tp_groups,
)
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host

from llmfleet_testing import accepting

FIXTURES = pathlib.Path(__file__).resolve().parents[4] / "tests" / "fixtures" / "hardware"


def from_topo(name, model, arch, cc, mib, numa_cpus, numa=None):
    """Facts from a real `nvidia-smi topo -m`: its link matrix, each GPU's node from its NUMA Affinity column or, where the
    output has none (old drivers), from which node's CPU list its CPU Affinity is."""
    topo = hw_facts.parse_nvidia_topo((FIXTURES / name).read_text())
    by_cpus = {cpus: node for node, cpus in numa_cpus.items()}
    nodes = numa or [topo["numa_affinity"][i] if topo["numa_affinity"][i] is not None else by_cpus.get(topo["cpu_affinity"][i])
                     for i in range(len(topo["links"]))]
    accs = [{"index": i, "vendor": "nvidia", "model": model, "arch": arch, "compute_capability": cc, "memory_mib": mib,
             "numa_node": nodes[i]} for i in range(len(topo["links"]))]
    return validate_hardware({"accelerators": accs, "links": topo["links"], "numa_cpus": numa_cpus, "cpu_count": 64,
                              "memory_mib": 512 * 1024, "driver_version": "550.54.14"}, source="test")


def bridged_four():
    """The issue's host: four GPUs, NVLink bridges joining 0-2 and 1-3, GPUs 0 and 2 on NUMA node 0, 1 and 3 on node 1
    (two bridged pairs of 48 GB cards, one pair on each socket)."""
    nv = {(0, 2), (1, 3)}
    links = [["X" if i == j else "NV4" if (min(i, j), max(i, j)) in nv else "SYS" for j in range(4)] for i in range(4)]
    accs = [{"index": i, "vendor": "nvidia", "model": "NVIDIA RTX A6000", "arch": "sm86", "compute_capability": "8.6",
             "memory_mib": 49140, "numa_node": i % 2} for i in range(4)]
    return validate_hardware({"accelerators": accs, "links": links, "numa_cpus": {0: "0-15,32-47", 1: "16-31,48-63"},
                              "cpu_count": 64, "memory_mib": 512 * 1024, "driver_version": "550.54.14"}, source="test")


def dgx1():
    return from_topo("nvidia-smi-topo-dgx1-v100-hybrid-cube-mesh.txt", "Tesla V100-SXM2-16GB", "sm70", "7.0", 16160,
                     {0: "0-11,24-35", 1: "12-23,36-47"})


def a100():
    return from_topo("nvidia-smi-topo-8x-a100-sxm.txt", "NVIDIA A100-SXM4-80GB", "sm80", "8.0", 81920, {0: "0-103"})


def plan(hw, dep):
    out = plan_host("h", hw, [dep])
    assert out["errors"] == [], out["errors"]
    return out


def reason(inst, prefix):
    return next(r for r in inst["reasons"] if r["decision"].startswith(prefix))


QWEN32 = {"name": "q", "model": "Qwen/Qwen3-32B", "engine": {"version": "0.26.0"},
          "workload": {"max_model_len": 8192, "concurrency": 4, "goal": "latency"}}


# --- the case ---------------------------------------------------------------------------

def test_bridged_pairs_that_are_also_numa_local_are_the_groups():
    hw = bridged_four()
    assert tp_groups([0, 1, 2, 3], hw, 2, 2) == [[0, 2], [1, 3]]
    # cut by index, the pairs would be unbridged and cross-socket: the weakest link the rule avoids
    assert link_key(0, 1, hw) == (0, 0, 1) < link_key(0, 2, hw) == (4, 1, 6)


def test_the_plan_gives_each_instance_a_bridged_pair_and_its_nodes_cpus():
    out = plan(bridged_four(), QWEN32)
    insts = out["deployments"][0]["instances"]
    assert [(i["gpus"], i["numa_node"], i["cpuset"], i["env"]["CUDA_VISIBLE_DEVICES"]) for i in insts] == [
        ([0, 2], 0, "0-15,32-47", "0,2"), ([1, 3], 1, "16-31,48-63", "1,3")]
    why = reason(insts[0], "tp_groups=")
    assert why["decision"] == "tp_groups=0,2|1,3"
    assert "0,2: weakest link NV4 (NUMA node 0)" in why["why"] and "1,3: weakest link NV4 (NUMA node 1)" in why["why"]
    assert not [w for w in out["warnings"] if "spans NUMA" in w or "sit on NUMA nodes" in w]


def test_an_explicit_gpu_list_that_gives_no_good_group_is_warned_about():
    out = plan(bridged_four(), dict(QWEN32, gpus=[0, 1]))
    [inst] = out["deployments"][0]["instances"]
    assert inst["gpus"] == [0, 1]                  # the operator's list is kept
    [warning] = [w for w in out["warnings"] if "TP group" in w]
    assert "q-0: its TP group [0, 1]" in warning and "SYS (across NUMA nodes 0, 1)" in warning
    assert "GPUs [0, 2] of this host are joined by NV4 (NUMA node 0)" in warning and "to fix it" in warning
    # a list that is a bridged pair draws no such warning
    assert not [w for w in plan(bridged_four(), dict(QWEN32, gpus=[1, 3]))["warnings"] if "TP group" in w]


def test_a_gpu_count_takes_a_bridged_pair():
    out = plan(bridged_four(), dict(QWEN32, gpus=2))
    assert [i["gpus"] for i in out["deployments"][0]["instances"]] == [[0, 2]]


# --- DGX-1 hybrid cube mesh (real nvidia-smi topo -m) -------------------------------------------

def test_dgx1_pairs_take_the_double_links_inside_each_quad():
    """Each GPU has two NV2 neighbours; the pairs of NV2 inside one NUMA node (one quad) are 0-3, 1-2, 4-7, 5-6."""
    hw = dgx1()
    assert [a["numa_node"] for a in hw["accelerators"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    groups = tp_groups(range(8), hw, 2, 4)
    assert groups == [[0, 3], [1, 2], [4, 7], [5, 6]]
    assert all(link_key(*g, hw) == (2, 1, 6) for g in groups)


def test_dgx1_quads_are_the_fully_linked_ones():
    hw = dgx1()
    assert tp_groups(range(8), hw, 4, 2) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert tp_groups(range(8), hw, 4, 1) == [[0, 1, 2, 3]]
    # any other quad has a pair without NVLink (SYS across the sockets)
    worse = [q for q in itertools.combinations(range(8), 4) if q not in ((0, 1, 2, 3), (4, 5, 6, 7))]
    assert all(group_score(q, hw)[0][0] == 0 for q in worse)


def test_dgx1_plan_with_tp2_places_the_nv2_pairs():
    dep = {"name": "v", "model": "Qwen/Qwen3-8B", "engine": accepting("0.11.0"), "overrides": {"tensor_parallel_size": 2},
           "workload": {"max_model_len": 4096, "concurrency": 4}}
    insts = plan(dgx1(), dep)["deployments"][0]["instances"]
    assert [(i["gpus"], i["numa_node"]) for i in insts] == [([0, 3], 0), ([1, 2], 0), ([4, 7], 1), ([5, 6], 1)]
    assert "0,3: weakest link NV2 (NUMA node 0)" in reason(insts[0], "tp_groups=")["why"]


# --- NVSwitch: every pair alike, the index cut stays --------------------------------------------

@pytest.mark.parametrize("tp, count", [(2, 4), (4, 2), (8, 1), (2, 3), (4, 1)])
def test_a100_nvswitch_groups_are_the_index_cut(tp, count):
    assert tp_groups(range(8), a100(), tp, count) == [list(range(k * tp, (k + 1) * tp)) for k in range(count)]


def test_a100_plan_keeps_its_instances():
    dep = {"name": "a", "model": "Qwen/Qwen3-32B", "engine": {"version": "0.26.0"}, "overrides": {"tensor_parallel_size": 2},
           "workload": {"max_model_len": 8192, "concurrency": 8}}
    insts = plan(hardware_profile("a100_sxm_8x_80gb"), dep)["deployments"][0]["instances"]
    assert [i["gpus"] for i in insts] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert [i["numa_node"] for i in insts] == [0, 0, 1, 1]


# --- two RTX 3090 on two sockets (real output: GPU0's NUMA Affinity N/A) ------------------------

def rtx3090_facts():
    """What accelerator_facts gathers on that rig: sysfs gives the two nodes' CPU lists, the PCI node of GPU0 is unknown."""
    query = ("0, NVIDIA GeForce RTX 3090, GPU-0, 00000000:09:00.0, 24576 MiB, 8.6, 595.71.05\n"
             "1, NVIDIA GeForce RTX 3090, GPU-1, 00000000:41:00.0, 24576 MiB, 8.6, 595.71.05\n")
    raw = {"commands": {hw_facts.NVIDIA_QUERY: query,
                        hw_facts.NVIDIA_TOPO: (FIXTURES / "nvidia-smi-topo-2x-rtx3090-2numa-sys-tabs.txt").read_text()},
           "host": {"numa_cpus": {0: "0-7,16-23", 1: "8-15,24-31"}, "pci_numa": {}, "cpu_count": 32, "memory_mib": 128 * 1024}}
    return hw_facts.assemble(raw)


def test_a_gpu_without_a_numa_affinity_takes_the_node_its_cpu_affinity_is():
    hw = rtx3090_facts()
    assert [a["numa_node"] for a in hw["accelerators"]] == [0, 1]
    assert hw["groups"]["numa_domains"] == {"0": [0], "1": [1]}


def test_two_sockets_one_gpu_each_bind_each_instance_to_its_node():
    dep = {"name": "r", "model": "Qwen/Qwen3-8B", "engine": {"version": "0.26.0"}, "workload": {"max_model_len": 4096, "concurrency": 4}}
    insts = plan(rtx3090_facts(), dep)["deployments"][0]["instances"]
    assert [(i["gpus"], i["numa_node"], i["cpuset"]) for i in insts] == [([0], 0, "0-7,16-23"), ([1], 1, "8-15,24-31")]


def test_two_sockets_tp2_names_the_sys_link_and_warns():
    dep = {"name": "r", "model": "Qwen/Qwen3-14B", "engine": {"version": "0.26.0"}, "workload": {"max_model_len": 4096, "concurrency": 2}}
    out = plan(rtx3090_facts(), dep)
    [inst] = out["deployments"][0]["instances"]
    assert inst["gpus"] == [0, 1] and inst["numa_node"] is None and inst["cpuset"] == "0-31"
    assert "0,1: weakest link SYS (across NUMA nodes 0, 1)" in reason(inst, "tp_groups=")["why"]
    assert any("spans NUMA nodes over PCIe (SYS)" in w for w in out["warnings"])


# --- ROCm: XGMI ranked by the tool's weight ------------------------------------------------------

def test_xgmi_pairs_of_lower_weight_rank_higher():
    """Two XGMI weights (a package's two dies at 15, the rest at 30): the close pairs read NV2, the others NV1, so TP=2
    takes the close pairs; one weight throughout stays NV1 (rocm-smi-showtopo-mi308x-8x.txt)."""
    weight = [["0" if i == j else "15" if i // 2 == j // 2 else "30" for j in range(4)] for i in range(4)]
    tables = {"weight": weight, "hops": [["0" if i == j else "1" for j in range(4)] for i in range(4)],
              "link type": [["0" if i == j else "XGMI" for j in range(4)] for i in range(4)]}
    links = hw_facts.smi_link_words(4, tables, [0, 0, 1, 1])
    assert links[0] == ["X", "NV2", "NV1", "NV1"] and links[2] == ["NV1", "NV1", "X", "NV2"]
    mi308x = hw_facts.parse_smi_matrices((FIXTURES / "rocm-smi-showtopo-mi308x-8x.txt").read_text(), "rocm-smi --showtopo")
    assert {w for row in hw_facts.smi_link_words(8, mi308x, [0] * 4 + [1] * 4) for w in row} == {"X", "NV1"}


# --- the search itself ---------------------------------------------------------------------------

def test_idle_gpus_are_the_worst_linked():
    """Three pairs out of the four bridged GPUs plus two loose ones: the loose GPUs stay idle."""
    hw = bridged_four()
    assert tp_groups([0, 1, 2, 3], hw, 2, 1) == [[0, 2]]


def test_large_hosts_fall_back_to_greedy_and_stay_deterministic():
    """16 GPUs in pairs: 2,027,025 partitions, above the exhaustive limit; the greedy search still finds the NVLink pairs."""
    n = 16
    partner = {i: i ^ 1 for i in range(n)}             # NVLink pairs 0-1, 2-3, ... but numbered apart below
    order = [0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15]
    pos = {g: k for k, g in enumerate(order)}          # GPU g is the pos[g]-th of the pairs list
    links = [["X" if i == j else "NV2" if partner[pos[i]] == pos[j] else "NODE" for j in range(n)] for i in range(n)]
    accs = [{"index": i, "vendor": "nvidia", "model": "G", "arch": "sm90", "compute_capability": "9.0", "memory_mib": 81920,
             "numa_node": 0} for i in range(n)]
    hw = validate_hardware({"accelerators": accs, "links": links, "numa_cpus": {0: "0-63"}, "cpu_count": 64,
                            "memory_mib": 1024 * 1024, "driver_version": None}, source="test")
    assert partition_count(n, 2, 8) == 2027025 > EXHAUSTIVE_LIMIT
    groups = tp_groups(range(n), hw, 2, 8)
    assert groups == [[0, 8], [1, 9], [2, 10], [3, 11], [4, 12], [5, 13], [6, 14], [7, 15]]
    assert groups == tp_groups(list(reversed(range(n))), hw, 2, 8)


# --- CPU hosts: every NUMA node, one TP rank each (vLLM's CPU docs) -------------------------------

MODELS = pathlib.Path(__file__).resolve().parents[4] / "tests" / "fixtures" / "models"
AMX = ["avx512f", "avx512_bf16", "amx_tile", "amx_bf16"]
QWEN8 = {"name": "c", "model": "Qwen/Qwen3-8B", "engine": {"version": "0.32.0"},
         "workload": {"max_model_len": 8192, "concurrency": 8, "tools": False}}


def two_socket(**extra):
    """Two sockets of 16 cores x 2 threads, one NUMA node each, 256 GiB."""
    return {"accelerators": [], "links": None, "numa_cpus": {0: "0-15,32-47", 1: "16-31,48-63"},
            "numa_cores": {0: "0-15", 1: "16-31"}, "cpu_count": 64, "memory_mib": 256 * 1024, "driver_version": None,
            "cpu_flags": AMX, **extra}


def cpu_plan(hw, dep):
    return plan(hw, dep)["deployments"][0]["instances"]


def test_two_sockets_get_one_instance_with_a_rank_on_each_node():
    [inst] = cpu_plan(two_socket(), QWEN8)
    assert inst["tensor_parallel_size"] == 2
    assert inst["args"][inst["args"].index("--tensor-parallel-size") + 1] == "2"
    bind = inst["env"]["VLLM_CPU_OMP_THREADS_BIND"]
    # vLLM splits the value on '|', one list per rank (utils/ompmultiprocessing.py asserts as many lists as local ranks);
    # each list on one node, one CPU per physical core, the last core of each left to the API server and engine core
    assert bind == "0-14|16-30" and len(bind.split("|")) == inst["tensor_parallel_size"]
    assert (inst["numa_node"], inst["cpuset"]) == (None, "0-63")
    assert "each on its own NUMA node (0, 1)" in reason(inst, "omp_threads_bind=")["why"]
    why_tp = reason(inst, "tensor_parallel_size=2")["why"]
    assert "one rank per node" in why_tp and "PR #32792" in why_tp


def test_the_kv_space_is_each_ranks_and_holds_its_share_of_the_kv_heads():
    """Qwen3-8B: 36 layers x 8 KV heads x 128 x 2 (K, V) x 2 B; a rank of TP=2 keeps 4 of the 8 heads, so the 8 requests of
    8192 tokens need ceil(36 x 4 x 128 x 2 x 2 x 8192 x 8 / GiB) = 5 GiB on each rank, VLLM_CPU_KVCACHE_SPACE=5 (vLLM's
    CPU docs: each TP rank's memory is its weight shard plus VLLM_CPU_KVCACHE_SPACE)."""
    [inst] = cpu_plan(two_socket(), QWEN8)
    m = catalog_profile("Qwen/Qwen3-8B")
    per_rank = kv_bytes_per_token(m, 2, 2)
    assert per_rank == 36 * 4 * 128 * 2 * 2 == inst["memory"]["kv_bytes_per_token"]
    assert inst["env"]["VLLM_CPU_KVCACHE_SPACE"] == str(math.ceil(per_rank * 8192 * 8 / 2 ** 30)) == "5"
    assert inst["memory"]["weights_gib"] == pytest.approx(m.weight_bytes / 2 / 2 ** 30, abs=0.01)   # a rank holds half
    assert inst["max_num_seqs"] == 256                 # vLLM's CPU default: 128 x world size (engine/arg_utils.py)
    assert inst["memory"]["max_concurrency_at_max_len"] >= 8
    assert "VLLM_CPU_KVCACHE_SPACE is each of the 2 rank(s)' own" in reason(inst, "cpu_kvcache_space_gib=")["why"]


def test_one_replica_per_node_when_the_inventory_asks_for_it():
    dep = dict(QWEN8, overrides={"instances": 2, "tensor_parallel_size": 1})
    insts = cpu_plan(two_socket(), dep)
    assert [(i["numa_node"], i["cpuset"], i["env"]["VLLM_CPU_OMP_THREADS_BIND"], i["tensor_parallel_size"]) for i in insts] == [
        (0, "0-15,32-47", "0-15", 1), (1, "16-31,48-63", "16-31", 1)]
    assert insts[0]["port"] != insts[1]["port"]
    # each replica holds half the declared requests with every KV head: 36 x 8 x 128 x 2 x 2 B x 8192 x 4 = 4.5 GiB, and the
    # whole model (twice the weights of a TP=2 rank)
    assert [i["env"]["VLLM_CPU_KVCACHE_SPACE"] for i in insts] == ["5", "5"]
    assert insts[0]["memory"]["weights_gib"] == pytest.approx(2 * cpu_plan(two_socket(), QWEN8)[0]["memory"]["weights_gib"], abs=0.02)
    assert cpu_plan(two_socket(), dict(QWEN8, overrides={"instances": 2}))[0]["tensor_parallel_size"] == 1


def test_heads_that_do_not_divide_the_nodes_run_replicas_and_say_why(tmp_path):
    """SmolLM2-135M has 9 heads (3 KV heads): over four nodes neither TP=4 nor TP=2 shards it and TP=3 would leave a node
    idle, so four instances of TP=1, one per node; on three nodes, one instance of TP=3."""
    config = json.loads((MODELS / "smollm2-135m-instruct.json").read_text())["config"]
    dep = {"name": "s", "model": {"id": "HuggingFaceTB/SmolLM2-135M-Instruct", "config": config}, "engine": {"version": "0.32.0"},
           "workload": {"max_model_len": 2048, "concurrency": 8, "tools": False}}
    four = two_socket(numa_cpus={n: f"{8 * n}-{8 * n + 7}" for n in range(4)}, numa_cores=None, cpu_count=32)
    insts = cpu_plan(four, dep)
    assert [(i["numa_node"], i["tensor_parallel_size"], i["env"]["VLLM_CPU_OMP_THREADS_BIND"]) for i in insts] == [
        (n, 1, f"{8 * n}-{8 * n + 7}") for n in range(4)]
    why_tp = reason(insts[0], "tensor_parallel_size=1")["why"]
    assert "TP=4: 9 attention heads are not divisible by 4" in why_tp and "TP=3: leaves 1 node(s) idle" in why_tp
    three = two_socket(numa_cpus={n: f"{8 * n}-{8 * n + 7}" for n in range(3)}, numa_cores=None, cpu_count=24)
    [inst] = cpu_plan(three, dep)
    assert inst["tensor_parallel_size"] == 3 and inst["env"]["VLLM_CPU_OMP_THREADS_BIND"] == "0-6|8-14|16-22"


def test_one_node_plans_as_before_and_refuses_ranks_it_has_no_nodes_for():
    one = two_socket(numa_cpus={0: "0-31"}, numa_cores={0: "0-15"}, cpu_count=32)
    [inst] = cpu_plan(one, QWEN8)
    assert (inst["tensor_parallel_size"], inst["numa_node"], inst["cpuset"]) == (1, 0, "0-31")
    out = plan_host("h", one, [dict(QWEN8, overrides={"tensor_parallel_size": 2})])
    assert out["errors"] and "need one NUMA node per rank" in out["errors"][0] and "remove those overrides" in out["errors"][0]


def test_a_rank_that_does_not_fit_its_node_is_refused_naming_the_node():
    """Qwen3-32B in bfloat16 (about 61 GiB) on two nodes of 32 GiB: a rank holds about 30.5 GiB, which leaves no GiB of
    KV cache beside the node's system reserve."""
    small = two_socket(memory_mib=64 * 1024)
    out = plan_host("h", small, [dict(QWEN8, model="Qwen/Qwen3-32B")])
    [error] = out["errors"]
    assert "at TP=2 each rank needs" in error and "NUMA node's 32 GiB" in error and "pick a smaller model" in error


def sixteen(word_of):
    accs = [{"index": i, "vendor": "nvidia", "model": "G", "arch": "sm90", "compute_capability": "9.0", "memory_mib": 81920,
             "numa_node": i // 8} for i in range(16)]
    links = [["X" if i == j else word_of(i, j) for j in range(16)] for i in range(16)]
    return validate_hardware({"accelerators": accs, "links": links, "numa_cpus": {0: "0-31", 1: "32-63"}, "cpu_count": 64,
                              "memory_mib": 1 << 20, "driver_version": None}, source="test")


def test_sixteen_gpus_in_quads_of_nvlink_on_two_nodes():
    """Above the exhaustive limit (TP=4 x 4: 2,627,625 partitions; one group of 8: 12,870 candidates) the greedy search keeps
    the NVLink quads and the NUMA nodes together."""
    hw = sixteen(lambda i, j: "NV4" if i // 4 == j // 4 else "NODE" if i // 8 == j // 8 else "SYS")
    assert tp_groups(range(16), hw, 4, 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    assert tp_groups(range(16), hw, 8, 1) == [list(range(8))]
    assert tp_groups([3, 5, 9, 12, 13, 14, 15], hw, 4, 1) == [[12, 13, 14, 15]]


def test_hy_smi_pcie_cards_on_one_node_keep_the_index_cut():
    """hy-smi --showtopo of 8 HCUs, all PCIE and all on NUMA node 0: every pair NODE, so the groups are the index cut; the
    K100_AI profile (cards 0-3 on node 3, 4-7 on node 7) keeps each group inside a node."""
    tables = hw_facts.parse_smi_matrices((FIXTURES / "hy-smi-showtopo-8x-hcu-pcie.txt").read_text(), "hy-smi --showtopo")
    links = hw_facts.smi_link_words(8, tables, [0] * 8)
    assert {w for row in links for w in row} == {"X", "NODE"}
    k100 = hardware_profile("k100ai_8x_pcie")
    assert tp_groups(range(8), k100, 2, 4) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert tp_groups(range(8), k100, 4, 2) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert tp_groups([0, 4, 5, 1], k100, 2, 2) == [[0, 1], [4, 5]]
