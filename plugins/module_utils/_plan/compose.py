# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The composer: one deployment's stages in order (plan_deployment), a host's deployments (plan_host), its table."""

from __future__ import annotations

import json
from typing import AbstractSet, Any, Dict, List, Mapping, Optional, Tuple, Union

from .._engine import parse_version, vstr
from .._syntax import env_value, unit_value
from .base import Ctx, PlanError, Refusal
from .engine import engine_build
from .features import choose_features
from .group import cpu_group, group_layout, read_group
from .hints import variant_fits
from .inputs import check_deployments, check_host, read_request
from .instances import cpu_instances, gpu_instances, with_port
from .layout import choose_layout
from .levers import experts_refusal, kv_for_speed, unpulled, weights_at_load
from .model import (
    check_architecture, check_engine_runs, check_remote_code, choose_model, extend_context, profile_summary, serving_source,
)
from .pooling import choose_runner, plan_fields
from .ports import PortAsk, Ports, assign_ports
from .precision import choose_precision
from .sizer import Sizer, forced_seqs, gpu_budget, stage_view
from .sizing import CPU_DEFAULT_MAX_BATCHED, CPU_HOST_RESERVE_GIB, cpu_weights, size_cpu, size_instances
from .stages import HostOptions, Planned
from .topology import cpu_layout, cpu_nodes, place


def plan_deployment(d: Mapping[str, Any], hw: Mapping[str, Any], host: str, taken: Mapping[int, str], ports: AbstractSet[int],
                    options: Union[HostOptions, Mapping[str, Any]]) -> Planned:
    """One deployment's plan: the stages in order, each a function of the results before it. `taken` and `ports` are
    what the host's other deployments already use; the result says what this one takes."""
    opts = options if isinstance(options, HostOptions) else HostOptions.of(options)
    ctx = Ctx([])
    out: Dict[str, Any] = {"name": d["name"], "model": None, "engine_version": vstr(parse_version(d["engine"]["version"])),
                           "served_model_name": d.get("served_name") or d["name"], "routing": d.get("routing", "least_conn"),
                           "instances": [], "reasons": ctx.reasons}
    if out["routing"] != "least_conn":
        ctx.why(f"routing={out['routing']}", "the inventory's routing: the gateway sends the requests of one conversation to one "
                "instance by consistent hashing (nginx `hash ... consistent`), so vLLM's prefix cache there still holds its "
                "history at the next turn; an instance out of rotation hands its conversations to the next one on the ring")
    try:
        req = read_request(d, ctx)
        m = choose_model(d, req, opts.model_metadata)
        out["model"] = m.id
        serving = serving_source(d, req, m, opts, ctx)
        out["model_source"], out["model_profile"] = serving.source, profile_summary(m)
        check_engine_runs(m, req)
        check_remote_code(m, req, ctx)
        check_architecture(m, req, ctx)
        m, pooling, runner = choose_runner(d, req, m, ctx)
        m, hf_overrides = extend_context(d, req, m, ctx)
        p = place(d, req, hw, host, taken, ctx)
        group = read_group(d, req, host, hw, opts.groups or {}, ctx)
        build, build_problems = engine_build(d, req, p, hw, ctx)
        precision, precision_problems = choose_precision(m, req, p, ctx, variant_fits(m, req, p))
        if build_problems or precision_problems:
            raise Refusal(*build_problems, *precision_problems)
        fields = plan_fields(pooling, req) if pooling else None
        encoder_only = bool(pooling and pooling.encoder_only)
        if p.vendor == "cpu" and group:
            # one stage a host, each sized as its own layers and their KV cache (Sizer.stage_view)
            precision = cpu_group(m, req, precision, group, ctx)
            # the rank is bound to one NUMA node (topology.cpu_binding): sized in that node's share of the host's memory
            cpu = size_cpu(stage_view(m, group.nnodes), req, dict(hw, memory_mib=int(hw["memory_mib"]) // max(1, len(cpu_nodes(hw)))),
                           host, precision.dtype, ctx)
            feats = choose_features(m, req, p, precision, cpu.seqs, CPU_DEFAULT_MAX_BATCHED, cpu.kv_dtype, hf_overrides, ctx,
                                    runner, pooling is not None)
            out["instances"] = cpu_instances(d, req, m, build, precision, cpu, None, feats, serving, hw, opts, ports, ctx, fields,
                                             encoder_only, group)
        elif p.vendor == "cpu":
            cpu_lay = cpu_layout(m, req, hw, host, cpu_weights(m, precision.dtype), CPU_HOST_RESERVE_GIB, ctx)
            cpu = size_cpu(m, req, hw, host, precision.dtype, ctx, cpu_lay)
            feats = choose_features(m, req, p, precision, cpu.seqs, CPU_DEFAULT_MAX_BATCHED * cpu_lay.tp, cpu.kv_dtype, hf_overrides, ctx,
                                    runner, pooling is not None)
            out["instances"] = cpu_instances(d, req, m, build, precision, cpu, cpu_lay, feats, serving, hw, opts, ports, ctx, fields,
                                             encoder_only)
        else:
            budget = gpu_budget(req, p, precision.eager, ctx)
            said = (len(ctx.reasons), len(ctx.warnings))
            fp8, fp8_precision = weights_at_load(m, req, p, precision, budget, ctx)
            sizer = Sizer(fp8, p.vendor, req, budget, fp8_precision.dtype, fp8_precision.eager, forced_seqs(req), p.cc, build.image_cuda)
            chosen = group_layout(fp8, req, p, hw, sizer, group, ctx) if group else choose_layout(fp8, req, p, hw, sizer, ctx)
            refusal = experts_refusal(fp8, req, chosen) if fp8_precision.at_load else ""
            if refusal:
                # the FP8 layout's reasons go; the model is laid out again in 16 bits, with the reason the weights stay
                del ctx.reasons[said[0]:], ctx.warnings[said[1]:]
                ctx.why("quantization=fp8 (at load): not pulled", refusal)
                sizer = Sizer(m, p.vendor, req, budget, precision.dtype, precision.eager, forced_seqs(req), p.cc, build.image_cuda)
                chosen = group_layout(m, req, p, hw, sizer, group, ctx) if group else choose_layout(m, req, p, hw, sizer, ctx)
            else:
                m, precision = fp8, fp8_precision
            layout = kv_for_speed(m, req, p, chosen, ctx)
            unpulled(m, req, p, budget, ctx)
            sizing = size_instances(m, req, p, layout, sizer, ctx)
            feats = choose_features(m, req, p, precision, sizing.seqs, budget.max_batched, sizing.kv_dtype, hf_overrides, ctx, runner,
                                    pooling is not None)
            out["instances"] = gpu_instances(d, req, m, p, build, precision, budget, layout, sizing, feats, serving, hw, opts, ports, ctx,
                                             fields, encoder_only, group)
    except Refusal as exc:
        if exc.data:
            out["refusal"] = exc.data
        return Planned(out, exc.messages, ctx.warnings, [], [])
    _check_carried(out["instances"])
    return Planned(out, [], ctx.warnings, [g for i in out["instances"] for g in i["gpus"]],
                   [i["port"] for i in out["instances"] if i["port"] is not None])


def _check_carried(instances: List[Mapping[str, Any]]) -> None:
    """Every word of each instance's command line and every value of its environment on one line, as a systemd unit and an
    environment file carry them (_syntax); the inventory's values were checked one by one already (_plan.inputs), this
    holds for what the stages made of them too."""
    for inst in instances:
        bad = [repr(a) for a in inst["args"] if unit_value(a)] + [f"{k}={v!r}" for k, v in inst["env"].items() if env_value(v)]
        if bad:
            raise PlanError(f"{inst['name']}: the plan would write {', '.join(bad)} into the engine's unit or environment file, which "
                            "cannot carry a newline or another control character: find the inventory value it came from")


def plan_host(host: str, hardware: Any, deployments: Any, options: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The plan of one host (docs/planner.md). Malformed input raises PlanError; an impossible
    request returns `errors` and no instances."""
    hw, opts = check_host(host, hardware, options)
    deps = check_deployments(deployments, host)
    errors: List[str] = []
    warnings: List[str] = []
    taken: Dict[int, str] = {}
    ports: set = set()
    # explicit GPU lists first, so 'all' / counts take what is left
    order = sorted(range(len(deps)), key=lambda i: 0 if isinstance(deps[i].get("gpus"), list) else 1)
    results: Dict[int, Dict[str, Any]] = {}
    for i in order:
        one = plan_deployment(deps[i], hw, host, taken, ports, opts)
        results[i] = one.deployment
        errors += one.errors
        warnings += one.warnings
        taken.update({g: deps[i]["name"] for g in one.gpus})
        ports.update(one.ports)
    in_force = dict(opts.ports_in_force or {})
    # the port the ranks of a multi-host deployment meet at listens on its head (rank 0) beside the instances
    rendezvous: Dict[int, Tuple[str, str]] = {}
    for i in order:
        for inst in results[i]["instances"]:
            grp = inst.get("group")
            if grp and grp["rank"] == 0:
                if grp["master_port"] in rendezvous:
                    errors.append(f"{deps[i]['name']}: its ranks would meet at {grp['master_port']} on {host}, where "
                                  f"{rendezvous[grp['master_port']][0]} meets already: give one of the groups another first host")
                rendezvous[grp["master_port"]] = (f"the rendezvous of {deps[i]['name']} (hosts={grp['name']})", "hosts")
    book = _stable_ports([(deps[i], results[i]) for i in order], opts, in_force, rendezvous)
    errors += book.errors
    warnings += book.warnings
    planned = [results[i] for i in range(len(deps))]
    if errors:
        for dep in planned:
            dep["instances"] = []
    return {"host": host, "hardware": json.loads(json.dumps(hw)), "errors": errors, "warnings": [w for w in warnings if w], "deployments": planned,
            # what the next plan keeps (ports.ports_in_force): a plan with errors starts nothing, so the ports in force stay
            "ports": in_force if errors else {i["name"]: i["port"] for dep in planned for i in dep["instances"] if i["port"] is not None}}


def _stable_ports(planned: List[Tuple[Mapping[str, Any], Dict[str, Any]]], opts: HostOptions, in_force: Mapping[str, int],
                  rendezvous: Optional[Mapping[int, Tuple[str, str]]] = None) -> Ports:
    """Stage 11 over the host (ports.assign_ports): every instance moved to its port, in plan order, with the reason; the
    host's other listeners (host_ports) and a multi-host deployment's rendezvous on its head are not given out."""
    # a --headless rank of a multi-host deployment serves no API: it takes no port
    asks = [PortAsk(d["name"], tuple(i["name"] for i in dep["instances"] if not i.get("headless")), d.get("port")) for d, dep in planned]
    book = assign_ports(asks, opts.base_port, in_force, {**(opts.host_ports or {}), **(rendezvous or {})}, opts.edge_address)
    for d, dep in planned:
        for inst in dep["instances"]:
            if inst["name"] in book.ports:
                with_port(inst, book.ports[inst["name"]])
        if d["name"] in book.why:
            dep["reasons"].append(dict(zip(("decision", "why"), book.why[d["name"]])))
    return book


def summary_table(plan: Mapping[str, Any]) -> List[str]:
    """The compact per-host table plan.yml prints."""
    lines = [f"{plan['host']}: " + ("ERRORS" if plan["errors"] else f"{sum(len(d['instances']) for d in plan['deployments'])} instance(s)")]
    header = f"{'instance':<22}{'GPUs':<12}{'TP':>3} {'port':>5}  {'weights/GPU':>11} {'KV/GPU':>8} {'KV tokens':>10} {'max conc':>8}  cpuset"
    lines.append(header)
    for d in plan["deployments"]:
        for i in d["instances"]:
            mem = i["memory"]
            port = i["port"] if i["port"] is not None else f"r{i['group']['rank']}"   # a headless rank: its rank in the group
            lines.append(f"{i['name']:<22}{','.join(map(str, i['gpus'])) or 'cpu':<12}{i['tensor_parallel_size']:>3} {port:>5}  "
                         f"{mem.get('weights_gib_per_gpu', mem.get('weights_gib', 0)):>9.1f}Gi "
                         f"{mem.get('kv_cache_gib_per_gpu', mem.get('kv_cache_gib', 0)):>6.1f}Gi {mem['kv_cache_tokens']:>10} "
                         f"{mem['max_concurrency_at_max_len']:>8.1f}  {i['cpuset'] or '-'}")
    for d in plan["deployments"]:
        if d["instances"]:
            lines.append(f"{d['name']} ({d['model']}, vLLM {d['engine_version']}): " + "; ".join(f"{r['decision']}: {r['why']}" for r in d["reasons"]))
    lines += [f"WARNING: {w}" for w in plan["warnings"]]
    lines += [f"ERROR: {e}" for e in plan["errors"]]
    return lines
