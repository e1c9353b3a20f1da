# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Hardware and topology: which GPUs a deployment takes, how they are linked, their NUMA nodes and CPU sets."""

from __future__ import annotations

import itertools
import math
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .._hardware import compress_cpulist, expand_cpulist
from .._models import ModelProfile
from .base import GIB, MIB, Ctx, Refusal, cc_of, gib
from .sharding import valid_tp
from .stages import CpuLayout, Placement, Request


def _select_gpus(d: Mapping[str, Any], hw: Mapping[str, Any], taken: Dict[int, str]) -> Optional[List[int]]:
    indices = [a["index"] for a in hw["accelerators"]]
    want = d.get("gpus", "all")
    if want == "all":
        chosen = list(indices)
    elif isinstance(want, int):
        free = [i for i in indices if i not in taken]
        if want > len(free):
            return None
        # the free GPUs of one kind best linked together (tp_groups' order: NVLink, then one NUMA node, then the PCIe path)
        kinds: Dict[Tuple[Any, ...], List[int]] = {}
        for a in hw["accelerators"]:
            if a["index"] in free:
                kinds.setdefault((a["vendor"], a["arch"], a["memory_mib"]), []).append(a["index"])
        pools = [g for g in kinds.values() if len(g) >= want] or [free]
        keys = _keys(hw)
        chosen = max((best_group(g, hw, want) for g in pools), key=lambda g: (group_score(g, hw, keys), [-i for i in g]))
    else:
        chosen = list(want)
    return sorted(chosen)


# --------------------------------------------------------------------------------------------
# Tensor-parallel groups from the link matrix (nvidia-smi topo -m words; hy-smi / rocm-smi mapped onto them by
# _hardware.smi_link_words). A pair's link is ranked by (NVLink count, same NUMA node, PCIe distance); a group by its
# pairs, weakest first; a partition by its groups, weakest first ("leximin"), then by the lowest GPU indices.

# nvidia-smi's legend, nearest first: PIX one bridge, PXB several bridges, PHB through the host bridge, NODE between host
# bridges of one NUMA node, SYS across the CPUs' interconnect; an NVLink pair ranks above them all
PCIE_RANK = {"PIX": 5, "PXB": 4, "PHB": 3, "NODE": 2, "SYS": 1}
NVLINK_PCIE_RANK = 6
_NV = re.compile(r"^NV(\d+)$")
# above this many candidate partitions, tp_groups takes the best group first, then the best of the rest (greedy); every
# layout of 8 GPUs stays below it (the most: 3 pairs out of 8, 420 partitions)
EXHAUSTIVE_LIMIT = 2000
# above this many candidate groups, best_group grows a group from each GPU instead of trying every one
GROUP_LIMIT = 5000


def link_word(i: int, j: int, hw: Mapping[str, Any]) -> str:
    """The topology word between GPUs i and j ('SYS' where the host reported no links)."""
    links = hw.get("links")
    if not links:
        return "SYS"
    pos = {a["index"]: k for k, a in enumerate(hw["accelerators"])}
    return str(links[pos[i]][pos[j]])


def link_key(i: int, j: int, hw: Mapping[str, Any]) -> Tuple[int, int, int]:
    """(NVLink count, 1 if both GPUs are on one known NUMA node, PCIe rank): larger is a better link."""
    word = link_word(i, j, hw)
    numa = {a["index"]: a.get("numa_node") for a in hw["accelerators"]}
    same = int(numa.get(i) is not None and numa.get(i) == numa.get(j))
    nv = _NV.match(word)
    if nv:
        return int(nv.group(1)), same, NVLINK_PCIE_RANK
    return 0, same, PCIE_RANK.get(word, 0)


Keys = Dict[Tuple[int, int], Tuple[int, int, int]]


def _keys(hw: Mapping[str, Any]) -> Keys:
    """link_key of every pair of the host's GPUs, once."""
    indices = sorted(a["index"] for a in hw["accelerators"])
    return {(i, j): link_key(i, j, hw) for i, j in itertools.combinations(indices, 2)}


def group_score(group: Sequence[int], hw: Mapping[str, Any], keys: Optional[Keys] = None) -> Tuple[Tuple[int, int, int], ...]:
    """The group's links, weakest first (a group of one GPU has none)."""
    keys = keys if keys is not None else _keys(hw)
    return tuple(sorted(keys[p] for p in itertools.combinations(sorted(group), 2)))


def weakest_link(group: Sequence[int], hw: Mapping[str, Any]) -> str:
    """The weakest link inside the group in nvidia-smi's words, and whether it crosses NUMA nodes."""
    if len(group) < 2:
        return "one GPU"
    i, j = min(itertools.combinations(sorted(group), 2), key=lambda p: link_key(p[0], p[1], hw))
    word = link_word(i, j, hw)
    nodes = sorted({a["numa_node"] for a in hw["accelerators"] if a["index"] in group and a.get("numa_node") is not None})
    where = (f"NUMA node {nodes[0]}" if len(nodes) == 1 and link_key(i, j, hw)[1] else
             f"across NUMA nodes {', '.join(map(str, nodes))}" if len(nodes) > 1 else "NUMA node unknown")
    return f"{word} ({where})"


def best_group(gpus: Sequence[int], hw: Mapping[str, Any], size: int) -> List[int]:
    """The `size` GPUs of `gpus` best linked together (leximin over their links), the lowest indices of equals."""
    keys = _keys(hw)
    pool = sorted(gpus)
    if math.comb(len(pool), size) > GROUP_LIMIT:
        candidates = []
        for seed in pool:
            group = [seed]
            while len(group) < size:
                group.append(max((g for g in pool if g not in group), key=lambda g: (group_score(group + [g], hw, keys), -g)))
            candidates.append(sorted(group))
    else:
        candidates = [list(c) for c in itertools.combinations(pool, size)]
    best: Optional[Tuple[Any, ...]] = None
    chosen: List[int] = pool[:size]
    for combo in candidates:
        score = group_score(combo, hw, keys)
        if best is None or score > best or (score == best and combo < chosen):
            best, chosen = score, combo
    return chosen


def _partitions(gpus: Tuple[int, ...], size: int, count: int) -> Any:
    """Every choice of `count` disjoint groups of `size` GPUs, each group once (groups in order of their lowest GPU)."""
    if count == 0:
        yield []
        return
    for k, first in enumerate(gpus):
        rest = gpus[k + 1:]
        if len(rest) + 1 < size * count:
            return
        for others in itertools.combinations(rest, size - 1):
            group = (first,) + others
            left = tuple(g for g in rest if g not in others)
            for tail in _partitions(left, size, count - 1):
                yield [list(group)] + tail


def partition_count(n: int, size: int, count: int) -> int:
    """How many ways there are to take `count` disjoint unordered groups of `size` out of n GPUs."""
    if size * count > n:
        return 0
    return math.factorial(n) // (math.factorial(size) ** count * math.factorial(count) * math.factorial(n - size * count))


def tp_groups(gpus: Sequence[int], hw: Mapping[str, Any], tp: int, count: int) -> List[List[int]]:
    """`count` disjoint groups of `tp` GPUs out of `gpus`: the partition whose weakest group has the best weakest link
    (NVLink count, then one NUMA node, then the PCIe distance), then the next weakest and so on; of equals, the lowest
    GPU indices. Exhaustive up to EXHAUSTIVE_LIMIT partitions (every layout of 8 GPUs), else greedy: the best group,
    then the best of the rest. Deterministic: the same GPUs and links always give the same groups, in index order."""
    pool = tuple(sorted(gpus))
    if tp * count > len(pool):
        raise ValueError(f"{count} groups of {tp} do not fit {len(pool)} GPUs; the layout stage must give at most "
                         f"{len(pool) // tp} groups of {tp}")
    if tp == 1:
        return [[g] for g in pool[:count]]
    keys = _keys(hw)
    if len({keys[p] for p in itertools.combinations(pool, 2)}) == 1:     # every pair alike (NVSwitch): the index cut
        return [list(pool[k * tp:(k + 1) * tp]) for k in range(count)]
    if partition_count(len(pool), tp, count) <= EXHAUSTIVE_LIMIT:
        scores: Dict[Tuple[int, ...], Tuple[Any, ...]] = {}
        best: Optional[Tuple[Any, ...]] = None
        chosen: List[List[int]] = []
        for groups in _partitions(pool, tp, count):
            score = tuple(sorted(scores.get(tuple(g)) or scores.setdefault(tuple(g), group_score(g, hw, keys)) for g in groups))
            if best is None or score > best:        # strictly better: the first of equals (lowest indices) stays
                best, chosen = score, groups
        return sorted(chosen)
    left, out = list(pool), []
    for _group in range(count):
        group = best_group(left, hw, tp)
        out.append(group)
        left = [g for g in left if g not in group]
    return sorted(out)


def group_warnings(name: str, groups: List[List[int]], hw: Mapping[str, Any]) -> List[str]:
    """Where the deployment's own GPU list (gpus: [...]) gives a TP group a weaker link than the host's GPUs of that kind
    allow: a warning naming the better group (whether other deployments use it is the operator's to weigh)."""
    out = []
    for k, group in enumerate(groups):
        acc = next(a for a in hw["accelerators"] if a["index"] == group[0])
        same_kind = [a["index"] for a in hw["accelerators"] if (a["vendor"], a["arch"], a["memory_mib"]) ==
                     (acc["vendor"], acc["arch"], acc["memory_mib"])]
        better = best_group(same_kind, hw, len(group))
        keys = _keys(hw)
        if group_score(better, hw, keys)[0] > group_score(group, hw, keys)[0]:
            out.append(f"{name}-{k}: its TP group {group}, cut from the deployment's gpus list, is joined by {weakest_link(group, hw)} "
                       f"at its weakest, while GPUs {better} of this host are joined by {weakest_link(better, hw)}: the all-reduce "
                       f"of every layer crosses the weaker link; to fix it, list GPUs that are linked so in gpus (or give a count and let "
                       f"the planner choose)")
    return out


def groups_reason(gpus: Sequence[int], groups: List[List[int]], hw: Mapping[str, Any]) -> Tuple[str, str]:
    """The plan's reason for the groups: (decision, why)."""
    n = len(groups)
    return ("tp_groups=" + "|".join(",".join(map(str, g)) for g in groups),
            f"{n} group{'s' if n > 1 else ''} of {len(groups[0])} out of GPUs {compress_cpulist(gpus)}, the weakest link inside each as "
            "strong as the link matrix allows (NVLink count first, then one NUMA node, then the PCIe path: PIX, PXB, PHB, NODE, SYS; "
            f"nvidia-smi topo -m): {groups_why(groups, hw)}")


def groups_why(groups: List[List[int]], hw: Mapping[str, Any]) -> str:
    """The groups and the weakest link inside each, for the plan's reason."""
    return "; ".join(f"{compress_cpulist(g) if len(g) > 2 else ','.join(map(str, g))}: weakest link {weakest_link(g, hw)}"
                     for g in groups)


def link_domains(gpus: List[int], hw: Mapping[str, Any]) -> Tuple[str, List[List[int]]]:
    """How the chosen GPUs are linked: ('nvlink_all' | 'nvlink_mesh' | 'pcie', groups)."""
    pos = {a["index"]: k for k, a in enumerate(hw["accelerators"])}
    links = hw.get("links")

    def word(i: int, j: int) -> str:
        return links[pos[i]][pos[j]] if links else "SYS"

    nv = [[i, j] for i in gpus for j in gpus if i < j and word(i, j).startswith("NV")]
    if len(gpus) > 1 and len(nv) == len(gpus) * (len(gpus) - 1) // 2:
        return "nvlink_all", [gpus]
    islands = [[i for i in g if i in gpus] for g in hw["groups"]["nvlink_islands"]]
    islands = [g for g in islands if len(g) > 1]
    if islands and sum(len(g) for g in islands) == len(gpus):
        return "nvlink_mesh", islands
    numa: Dict[str, List[int]] = {}
    for a in hw["accelerators"]:
        if a["index"] in gpus:
            numa.setdefault(str(a["numa_node"]), []).append(a["index"])
    return "pcie", [sorted(numa[k]) for k in sorted(numa)]


# --------------------------------------------------------------------------------------------


def _platform(accs: Sequence[Mapping[str, Any]]) -> Tuple[str, str, int]:
    """(vendor, arch, cc*10 for NVIDIA else 0)."""
    if not accs:
        return "cpu", "cpu", 0
    return accs[0]["vendor"], accs[0]["arch"], cc_of(accs[0]) if accs[0]["vendor"] == "nvidia" else 0


def place(d: Mapping[str, Any], req: Request, hw: Mapping[str, Any], host: str, taken: Mapping[int, str], ctx: Ctx) -> Placement:
    """Stage 3: the deployment's GPUs, disjoint from the host's other deployments, all of one kind."""
    if not hw["accelerators"]:
        flags = hw.get("cpu_flags")
        return Placement([], [], *_platform([]), cpu_flags=None if flags is None else frozenset(flags))
    name = req.name
    gpus = _select_gpus(d, hw, taken)
    if gpus is None:
        free = len([a for a in hw["accelerators"] if a["index"] not in taken])
        raise Refusal(f"{name}: gpus={d.get('gpus')} but only {free} GPU(s) are free on {host}")
    missing = [g for g in gpus if g not in {a["index"] for a in hw["accelerators"]}]
    if missing:
        raise Refusal(f"{name}: gpus {missing} do not exist on {host} (it has {[a['index'] for a in hw['accelerators']]})")
    clash = sorted({taken[g] for g in gpus if g in taken})
    if clash:
        raise Refusal(f"{name}: gpus {[g for g in gpus if g in taken]} are already used by {', '.join(clash)}; deployments need disjoint GPUs")
    accs = [a for a in hw["accelerators"] if a["index"] in gpus]
    if len({(a["vendor"], a["arch"], a["memory_mib"]) for a in accs}) > 1:
        raise Refusal(f"{name}: gpus {gpus} mix {sorted({a['model'] for a in accs})}; one deployment needs one kind of GPU")
    ctx.why(f"gpus={gpus}", "as requested" if d.get("gpus", "all") != "all" else f"all {len(gpus)} GPUs of {host}")
    return Placement(gpus, accs, *_platform(accs))


def placeable_instances(kind: str, domains: List[List[int]], tp: int) -> int:
    """Instances of TP=tp the GPUs hold: over PCIe an instance stays inside one NUMA node where TP allows (gpu_instances),
    so nodes of unequal size place fewer."""
    n = sum(len(g) for g in domains)
    return sum(len(g) // tp for g in domains) if kind == "pcie" and tp <= max(len(g) for g in domains) else n // tp


def numa_of(group: List[int], hw: Mapping[str, Any], warnings: List[str], label: str) -> Tuple[Optional[int], Optional[str]]:
    nodes = {a["numa_node"] for a in hw["accelerators"] if a["index"] in group}
    if len(nodes) == 1 and None not in nodes:
        node = nodes.pop()
        return node, hw["numa_cpus"].get(node)
    known = sorted(n for n in nodes if n is not None)
    if len(known) > 1:
        warnings.append(f"{label}: GPUs {group} sit on NUMA nodes {known}; its CPU set covers all of them")
        cpus = sorted({c for n in known for c in expand_cpulist(hw["numa_cpus"].get(n, ""))})
        return None, compress_cpulist(cpus) if cpus else None
    return None, None


def cpu_binding(hw: Mapping[str, Any], ctx: Ctx) -> Tuple[Optional[Any], Optional[str], Optional[str]]:
    """A CPU host's instance: (NUMA node, its CPU set, the CPUs VLLM_CPU_OMP_THREADS_BIND binds to) - the node with the
    most CPUs, its OpenMP threads on one CPU per physical core of that node where the hardware facts give the cores."""
    # the NUMA node with the most CPUs (the lowest-numbered of equals), not simply node 0
    node = max(sorted(hw["numa_cpus"]), key=lambda n: len(expand_cpulist(hw["numa_cpus"][n])), default=None)
    cpuset = hw["numa_cpus"].get(node) if node is not None else None
    cores = (hw.get("numa_cores") or {}).get(node) if cpuset else None
    bind = cores or cpuset
    if cpuset:
        ctx.why(f"numa_node={node}", f"the node with the most CPUs ({len(expand_cpulist(cpuset))} of {hw['cpu_count']}): "
                "VLLM_CPU_OMP_THREADS_BIND binds the engine's threads to them, so they stay on one node")
        n_cpus, n_cores = len(expand_cpulist(cpuset)), len(expand_cpulist(cores)) if cores else 0
        if cores and n_cores < n_cpus:
            ctx.why(f"omp_threads_bind={cores}", f"one CPU per physical core of node {node}: its {n_cores} cores, the other "
                    f"{n_cpus - n_cores} CPUs (SMT siblings of those cores) left out, so no two OpenMP threads share a core "
                    "(vLLM's CPU docs, performance tips: on a machine with hyper-threading, bind only one OpenMP thread on "
                    "each physical CPU core with VLLM_CPU_OMP_THREADS_BIND)")
        elif cores:
            ctx.why(f"omp_threads_bind={cores}", f"node {node}'s {n_cpus} CPUs are {n_cores} physical cores (no SMT siblings): "
                    "one OpenMP thread on each")
        else:
            ctx.why(f"omp_threads_bind={cpuset}", f"all {n_cpus} CPUs of node {node}: the hardware facts do not say which of them "
                    "share a physical core (numa_cores), so SMT siblings, if any, are not left out")
    return node, cpuset, bind


# --------------------------------------------------------------------------------------------
# CPU hosts with several NUMA nodes: one tensor-parallel rank per node (vLLM's CPU docs, the installation page
# getting_started/installation/cpu.md in vLLM's repository, FAQ "How to decide VLLM_CPU_OMP_THREADS_BIND": "each NUMA node is
# treated as a TP/PP rank"; "We recommend configuring tensor-parallel-size to match the number of NUMA nodes").
# Measured: vLLM PR #32792 (c8g.metal.48xlarge, two nodes) - TP=2 over both nodes served 1.96x the requests/s of TP=1 on
# one node, at 0.47x its median TTFT and 0.54x its median TPOT (the shared-memory all-reduce vLLM uses on x86, Arm, POWER
# and s390x; cpu_communicator.py).
CPU_TP_EVIDENCE = ("vLLM's CPU docs (installation/cpu.md, FAQ): each NUMA node is a TP rank, tensor-parallel-size = the number "
                   "of NUMA nodes; vLLM PR #32792 measured TP=2 over two nodes at 1.96x the requests/s of TP=1 on one node and "
                   "0.54x its time per output token")


def cpu_nodes(hw: Mapping[str, Any]) -> List[int]:
    """The host's NUMA nodes that have CPUs (memory-only nodes run no rank), in number order."""
    return [n for n in sorted(hw.get("numa_cpus") or {}) if expand_cpulist(hw["numa_cpus"][n])]


def cpu_layout(m: ModelProfile, req: Request, hw: Mapping[str, Any], host: str, weights: float, reserve_gib: float,
               ctx: Ctx) -> CpuLayout:
    """Stage 7 on a CPU host: on one NUMA node (or none known) one instance of TP=1, as before; on several, one rank per
    node - the widest TP the model's heads allow that tiles the nodes (TP = the number of nodes where it can), the other
    nodes as more instances of that TP; a rank holds weights / TP and its own VLLM_CPU_KVCACHE_SPACE in its node's memory.
    overrides.tensor_parallel_size and overrides.instances choose otherwise (e.g. instances: <nodes> with
    tensor_parallel_size: 1 for one replica per node behind the gateway). `reserve_gib` is what each node keeps outside
    weights and KV cache (sizing.CPU_HOST_RESERVE_GIB)."""
    name, o = req.name, req.overrides
    nodes = cpu_nodes(hw)
    # the facts give the host's memory, not each node's: a node's share is the host's over every node with CPUs, also the
    # small ones left out below (their memory is not the other nodes')
    node_mib = int(hw["memory_mib"]) // max(1, len(nodes))
    # a rank on a node of less than half the cores of the largest would hold back every step of its instance (TP ranks
    # wait for each other): such nodes run no rank (real servers have equal nodes; VMs and isolated CPUs may not)
    cores = hw.get("numa_cores") or {}
    size = {n: len(expand_cpulist(cores.get(n) or hw["numa_cpus"][n])) for n in nodes}
    small = [n for n in nodes if 2 * size[n] < max(size.values())]
    if small and len(nodes) > 1:
        nodes = [n for n in nodes if n not in small]
        ctx.why(f"numa_nodes={','.join(map(str, nodes))}", f"NUMA node(s) {small} have less than half the "
                f"{'cores' if cores else 'CPUs'} of the largest ({max(size.values())}): a TP rank there would hold back the others")
    forced_tp, forced_n = o.get("tensor_parallel_size"), o.get("instances")
    if len(nodes) <= 1:
        if int(forced_tp or 1) > 1 or int(forced_n or 1) > 1:
            raise Refusal(f"{name}: overrides.tensor_parallel_size={forced_tp or 1}, instances={forced_n or 1} need one NUMA node per "
                          f"rank and {host} has {len(nodes) or 'no known'} NUMA node(s) with CPUs (vLLM's CPU docs: each NUMA node "
                          "is one TP rank); remove those overrides, or gather the host's facts if it has more nodes")
        return CpuLayout(1, [[nodes[0] if nodes else None]], int(hw["memory_mib"]))
    count = len(nodes)

    def fits(t: int) -> bool:
        return node_mib * MIB - weights / t - reserve_gib * GIB >= GIB

    if forced_tp:
        tp = int(forced_tp)
        problem = valid_tp(m, tp) or (f"{host} has {count} NUMA nodes with CPUs, one rank each" if tp > count else None)
        if problem:
            raise Refusal(f"{name}: overrides.tensor_parallel_size={tp} cannot be used on {host}: {problem}; choose a TP up to "
                          f"{count} that divides the model's heads, or remove the override")
        instances = int(forced_n or count // tp)
        ctx.why(f"tensor_parallel_size={tp}", "forced by overrides")
    else:
        valid = [t for t in range(count, 0, -1) if valid_tp(m, t) is None]
        if forced_n:
            valid = [t for t in valid if t * int(forced_n) <= count]
        # the widest TP that tiles the nodes first (every node used), then the widest that does not; the first whose rank fits
        order = [t for t in valid if count % t == 0] + [t for t in valid if count % t]
        tp = next((t for t in order if fits(t)), order[0] if order else 1)
        instances = int(forced_n or count // tp)
        why = (f"{count} NUMA nodes with CPUs: one rank per node ({CPU_TP_EVIDENCE}); each rank holds {gib(weights / tp)} GiB of "
               f"weights and its KV cache in its node's {node_mib // 1024} GiB (the host's memory over its nodes)")
        if tp < count:
            def wider(t: int) -> str:
                return valid_tp(m, t) or (f"leaves {count % t} node(s) idle" if count % t else "a rank does not fit its node")
            why += "; wider: " + "; ".join(f"TP={t}: {wider(t)}" for t in range(count, tp, -1) if not (forced_n and t * int(forced_n) > count))
            why += f"; the other nodes run {instances - 1} more instance(s) of TP={tp}" if instances > 1 else ""
        ctx.why(f"tensor_parallel_size={tp}", why)
    if tp * instances > count:
        raise Refusal(f"{name}: {instances} instance(s) x TP={tp} need {tp * instances} NUMA nodes, one rank each, and {host} has "
                      f"{count}; lower overrides.instances or overrides.tensor_parallel_size")
    # the nodes with the most CPUs first where some stay idle; each instance's ranks in node order
    by_size = sorted(nodes, key=lambda n: -len(expand_cpulist(hw["numa_cpus"][n])))[:tp * instances]
    used = [n for n in nodes if n in by_size]
    layout = CpuLayout(tp, [used[k * tp:(k + 1) * tp] for k in range(instances)], node_mib, spread=True)
    ctx.why(f"instances={instances}", f"{count} NUMA nodes / TP={tp}" + ("" if "instances" not in o else ": forced by overrides")
            + (f"; nodes {[n for n in nodes if n not in used]} stay idle" if len(used) < count else ""))
    return layout


def cpu_rank_binding(hw: Mapping[str, Any], ranks: Sequence[Optional[int]], ctx: Ctx, label: str) -> Tuple[Optional[int], Optional[str], Optional[str]]:
    """One instance over several NUMA nodes: (its node where it has one, else None; the CPU set of all its nodes; the
    VLLM_CPU_OMP_THREADS_BIND value: each rank's CPU list on its own node, separated by '|', one CPU per physical core where
    the facts give the cores, and with TP > 1 the last core of each rank left to vLLM's other processes)."""
    cores = hw.get("numa_cores") or {}
    lists = []
    for node in ranks:
        cpus = expand_cpulist(cores.get(node) or hw["numa_cpus"][node])
        if len(ranks) > 1 and len(cpus) > 1:
            cpus = cpus[:-1]
        lists.append(compress_cpulist(cpus))
    cpuset = compress_cpulist(sorted({c for n in ranks for c in expand_cpulist(hw["numa_cpus"][n])}))
    bind = "|".join(lists)
    per_core = all(n in cores for n in ranks)
    ctx.why(f"omp_threads_bind={bind}",
            (f"{label}: one list per TP rank, each on its own NUMA node ({', '.join(map(str, ranks))}), separated by '|' as vLLM's CPU "
             "docs give it (VLLM_CPU_OMP_THREADS_BIND=0-31|32-63 for 2 ranks; a rank's threads must stay on one node); "
             if len(ranks) > 1 else f"{label}: the CPUs of NUMA node {ranks[0]}; ")
            + ("one CPU per physical core (SMT siblings left out, vLLM's CPU docs: bind one OpenMP thread per physical core)"
               if per_core else "all CPUs of each node (the hardware facts do not say which share a physical core)")
            + ("; the last core of each rank is left to the API server and engine core, as vLLM's auto binding reserves one CPU "
               "per rank when world_size > 1 (utils/ompmultiprocessing.py)" if len(ranks) > 1 else ""))
    return (ranks[0] if len(ranks) == 1 else None), cpuset, bind
