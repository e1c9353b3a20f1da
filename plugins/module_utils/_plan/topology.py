# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Hardware and topology: which GPUs a deployment takes, how they are linked, their NUMA nodes and CPU sets."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .._hardware import compress_cpulist, expand_cpulist
from .base import Ctx, Refusal, cc_of
from .stages import Placement, Request


def _select_gpus(d: Mapping[str, Any], hw: Mapping[str, Any], taken: Dict[int, str]) -> Optional[List[int]]:
    indices = [a["index"] for a in hw["accelerators"]]
    want = d.get("gpus", "all")
    if want == "all":
        chosen = list(indices)
    elif isinstance(want, int):
        free = [i for i in indices if i not in taken]
        if want > len(free):
            return None
        groups = list(hw["groups"]["nvlink_cliques"]) + list(hw["groups"]["numa_domains"].values())
        chosen = next((sorted([i for i in g if i in free])[:want] for g in groups if len([i for i in g if i in free]) >= want),
                      free[:want])
    else:
        chosen = list(want)
    return sorted(chosen)


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
