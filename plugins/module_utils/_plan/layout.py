# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Stage 7 on GPUs: tensor parallelism by the links and the goal, the instances, expert parallelism, fp8 KV where needed."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .._models import ModelProfile
from .base import Ctx, Refusal, gib
from .hints import does_not_fit, fits_somewhere, hosts_needed
from .precision import catalog_alternatives
from .sharding import (
    PIPELINE_PARALLEL_SINCE, fp8_block_problems, fp8_kv_sound, mla_fp8_kv_unavailable, pp_problem, tp_choices, valid_tp,
)
from .sizer import AUTO_KV_MARGIN, AUTO_LONG_LEN, AUTO_MIN_LEN, Sizer, auto_floor, auto_length
from .stages import Layout, Placement, Request
from .topology import link_domains, placeable_instances


# Throughput plans: a wider TP is chosen for the KV cache it frees (weights split over more GPUs) only when its instances
# together hold this many times the requests of the narrower layout's, until one holds the declared concurrency. A judgment,
# not a measurement: the all-reduce a wider TP adds was never measured here (issue 21 needs a multi-GPU machine).
WIDER_TP_GAIN = 1.25


def _tp_sizes(m: ModelProfile, n: int, ep_forced: Optional[bool], ctx: Ctx) -> Tuple[List[int], Dict[int, str], Dict[int, str]]:
    """The TP sizes vLLM can load this model at on n GPUs; those FP8 blocks exclude; those that need expert parallelism.
    A TP whose sharded widths break the block cannot load; one that breaks only the routed experts loads with expert
    parallelism (unless overrides.expert_parallel is false)."""
    tps = tp_choices(m, n)
    if not tps:
        raise Refusal(f"no tensor-parallel size up to {n} divides {m.id} ({valid_tp(m, n)})")
    block_excluded: Dict[int, str] = {}
    ep_needed: Dict[int, str] = {}
    for t in tps:
        fixed, expert_problems = fp8_block_problems(m, t)
        if fixed or (expert_problems and ep_forced is False):
            block_excluded[t] = "; ".join(fixed or expert_problems)
        elif expert_problems and not ep_forced:
            ep_needed[t] = "; ".join(expert_problems)
    if block_excluded:
        tps = [t for t in tps if t not in block_excluded]
        ctx.why("fp8_block_tp_excluded=" + ",".join(str(t) for t in sorted(block_excluded)),
                f"{m.id} is block-quantized FP8 (weight_block_size {list(m.weight_block_size or ())}): vLLM refuses to load at "
                + "; ".join(f"TP={t} ({why})" for t, why in sorted(block_excluded.items())) + " (vLLM quantization/fp8.py)")
    return tps, block_excluded, ep_needed


def choose_layout(m: ModelProfile, req: Request, p: Placement, hw: Mapping[str, Any], sizer: Sizer, ctx: Ctx) -> Layout:
    """Stage 7 (GPUs): TP by the links between the GPUs and the goal, instances, expert parallelism where the FP8 block
    requires it, and fp8 KV where no TP holds max_model_len in the model's dtype."""
    name, o, n, vendor, cc = req.name, req.overrides, len(p.gpus), p.vendor, p.cc
    kind, domains = link_domains(p.gpus, hw)
    kv_forced = o.get("kv_cache_dtype")
    kv_dtype = kv_forced or "auto"
    mla_no_fp8 = mla_fp8_kv_unavailable(p, m, req.version)
    if mla_no_fp8 and kv_forced and str(kv_forced).startswith("fp8"):
        raise Refusal(f"{name}: overrides.kv_cache_dtype {kv_forced} for {m.id}, an MLA model: {mla_no_fp8}; remove the override "
                      "(the plan keeps the KV cache in the model's dtype)")
    if not kv_forced and m.kv_cache_quant == "fp8" and fp8_kv_sound(p, m, req.version):
        # vLLM's auto turns fp8 only for ModelOpt, and only from PR #30785; the flag uses the checkpoint's scales on every version
        kv_dtype = "fp8"
        ctx.why("kv_cache_dtype=fp8", "the checkpoint carries FP8 KV-cache scales (ModelOpt kv_cache_quant_algo or compressed-tensors "
                "kv_cache_scheme): --kv-cache-dtype fp8 uses them on every vLLM version (auto resolves to fp8 only for ModelOpt "
                "checkpoints, and only in recent releases)")
    ep_forced = o.get("expert_parallel")
    if ep_forced and not m.is_moe:
        raise Refusal(f"{name}: overrides.expert_parallel: true needs a mixture-of-experts model and {m.id} has no experts; "
                      "remove it")
    try:
        tps, block_excluded, ep_needed = _tp_sizes(m, n, ep_forced, ctx)
    except Refusal as exc:
        raise Refusal(f"{name}: {exc}") from exc
    if not tps:
        raise Refusal(f"{name}: {m.id} is FP8 block-quantized ({'x'.join(map(str, m.weight_block_size or ()))} blocks) and no "
                      f"tensor-parallel size up to {n} keeps every sharded width a multiple of the block: "
                      + "; ".join(f"TP={t}: {why}" for t, why in sorted(block_excluded.items()))
                      + " (vLLM raises ValueError at load; quantization/fp8.py); what would: "
                      + ", ".join(filter(None, [catalog_alternatives(m, vendor, cc, req.version, fits_somewhere(sizer, p, n)),
                                                "expert parallelism (overrides.expert_parallel: true)" if ep_forced is False else "",
                                                "fewer or more GPUs so that another TP fits"])))
    forced_tp = o.get("tensor_parallel_size")
    if forced_tp:
        problem = valid_tp(m, int(forced_tp))
        if problem or forced_tp > n or int(forced_tp) in block_excluded:
            why = problem or block_excluded.get(int(forced_tp)) or f"only {n} GPUs are assigned"
            raise Refusal(f"{name}: tensor_parallel_size {forced_tp} cannot be used: {why}"
                          + (f"; TP in {tps} can" if int(forced_tp) in block_excluded else ""))
        tp = int(forced_tp)
        ctx.why(f"tensor_parallel_size={tp}", "forced by overrides")
    else:
        fitting = [t for t in tps if sizer.fits(t, kv_dtype)]
        if not fitting and fp8_kv_sound(p, m, req.version) and not kv_forced and any(sizer.fits(t, "fp8") for t in tps):
            kv_dtype = "fp8"
            fitting = [t for t in tps if sizer.fits(t, "fp8")]
            ctx.why("kv_cache_dtype=fp8", f"max_model_len {req.max_model_len} does not fit in a {m.torch_dtype} KV cache on any TP up to {n}; "
                    f"fp8 KV halves the bytes per token (sound on {p.arch if vendor != 'nvidia' else f'sm{cc}'})")
        if not fitting:
            staged = _pipeline_layout(m, req, p, kind, domains, tps, sizer, kv_dtype, kv_forced, ctx)
            if staged:
                return staged
            raise Refusal(does_not_fit(name, m, tps[-1], sizer, p, req)
                          + "".join(f"; TP={t} is excluded: {why} (vLLM raises ValueError at load; quantization/fp8.py)"
                                    + ("; expert parallelism (overrides.expert_parallel: true) would allow it"
                                       if ep_forced is False and not fp8_block_problems(m, t)[0] else "")
                                    for t, why in sorted(block_excluded.items())), data=hosts_needed(m, sizer, p))
        tp = _choose_tp(m, req, p, kind, domains, fitting, sizer, kv_dtype, ctx)
    if m.is_mla and m.is_moe and req.goal == "throughput" and tp > 1:
        _consider_dp_ep(m, tp, sizer, kv_dtype, ctx)
    inside_nodes = kind == "pcie" and tp <= max(len(g) for g in domains)
    placeable = placeable_instances(kind, domains, tp)
    instances = int(o.get("instances", placeable))
    if instances * tp > n:
        raise Refusal(f"{name}: {instances} instances x TP={tp} need {instances * tp} GPUs; {n} are assigned")
    if instances > placeable:
        raise Refusal(f"{name}: {instances} instances x TP={tp} do not fit inside the NUMA nodes' GPUs "
                      f"({', '.join(str(len(g)) for g in domains)}); at most {placeable}: lower overrides.instances, or give gpus "
                      "that fill whole nodes")
    if n - instances * tp:
        ctx.warn(f"{name}: {n - instances * tp} of its GPUs stay idle (TP={tp} x {instances} instances"
                 + (", each inside one NUMA node)" if inside_nodes and placeable < n // tp else ")"))
    split = f", each instance inside one NUMA node ({placeable} fit)" if inside_nodes and placeable < n // tp else ""
    ctx.why(f"instances={instances}", f"{n} GPUs / TP={tp}" + split)
    if tp in ep_needed:
        ctx.why("expert_parallel=true", f"{m.id} is block-quantized FP8: at TP={tp} {ep_needed[tp]}, which vLLM refuses at load "
                "(vLLM quantization/fp8.py); --enable-expert-parallel places whole experts on each GPU instead of slicing them"
                + (f" (TP without it: {', '.join(str(t) for t in tps if t not in ep_needed)})" if any(t not in ep_needed for t in tps) else ""))
    problem = valid_tp(m, tp)
    if problem:
        raise Refusal(f"{name}: TP={tp}: {problem}")
    return Layout(tp, instances, kv_dtype, bool(ep_forced) or tp in ep_needed, tp in ep_needed, kind, domains)


def _choose_tp(m: ModelProfile, req: Request, p: Placement, kind: str, domains: List[List[int]], fitting: List[int], sizer: Sizer,
               kv_dtype: str, ctx: Ctx) -> int:
    """The TP among those that fit, by the links, the goal and (for throughput) the declared concurrency."""
    gpu_mib = p.accs[0]["memory_mib"]
    domain_size = max(len(g) for g in domains)
    goal = req.goal
    if goal == "throughput" and (fitting[0] == 1 or kind == "nvlink_all" or (kind == "pcie" and len(domains) == 1)):
        return _weigh_tp(m, req, p, sorted(t for t in fitting if t <= domain_size) or fitting[:1], sizer, kv_dtype, kind, domains, ctx)
    if kind == "nvlink_all":
        tp = max(fitting)
        ctx.why(f"tensor_parallel_size={tp}", "NVLink between every pair: the widest TP gives the lowest latency")
        return tp
    if kind == "nvlink_mesh":
        inside = [t for t in fitting if t <= domain_size]
        tp = max(inside) if inside else fitting[0]
        ctx.why(f"tensor_parallel_size={tp}", f"NVLink island of {domain_size} GPUs (not all pairs linked): one instance spans it; "
                "field report 000 measured TP=8 faster than TP=4 x 2 (DP) and TP+EP on the DGX-1 cube mesh")
        return tp
    inside = [t for t in fitting if t <= domain_size]
    if inside and len(domains) == 1 and max(inside) == fitting[0]:
        tp = fitting[0]
        ctx.why(f"tensor_parallel_size={tp}", f"the smallest TP that holds {gib(m.weight_bytes)} GiB of weights and the KV cache "
                f"on {gpu_mib / 1024:.0f} GiB GPUs; the GPUs share one NUMA node, so all-reduce stays off the CPU interconnect")
        return tp
    if inside:
        tp = max(inside)
        ctx.why(f"tensor_parallel_size={tp}", f"PCIe only: TP stays inside one NUMA node's {domain_size} GPUs, one instance per node; "
                "field report 003 measured cross-NUMA TP=8 all-reduce at 80% of step time and doubled throughput with 2 x TP=4")
        return tp
    tp = fitting[0]
    ctx.why(f"tensor_parallel_size={tp}", f"{m.id} does not fit in one NUMA node's {domain_size} GPUs; TP={tp} crosses nodes")
    ctx.warn(f"{req.name}: TP={tp} spans NUMA nodes over PCIe (SYS): all-reduce crosses the CPU interconnect and will dominate step time")
    return tp


def _weigh_tp(m: ModelProfile, req: Request, p: Placement, candidates: List[int], sizer: Sizer, kv_dtype: str, kind: str,
              domains: List[List[int]], ctx: Ctx) -> int:
    """Throughput at a declared max_model_len: the smallest TP whose instances together hold the declared concurrency
    (more replicas, no or less all-reduce), counting fp8 KV where stage 8 would take it; when none does, a wider TP
    only for WIDER_TP_GAIN x the requests held. A wider TP splits the weights over more GPUs and leaves each more KV
    cache: 32 requests of 32k on 4 x L40S are held 8.4 at a time by TP=1 x 4 and about 24 by TP=2 x 2 (issue 17)."""
    first = ((f"{m.id} fits on one GPU and the goal is throughput: one instance per GPU, no all-reduce") if candidates[0] == 1 else
             "NVLink between every pair: the smallest TP that fits leaves the most replicas for throughput" if kind == "nvlink_all" else
             "the GPUs share one NUMA node: the smallest TP that fits leaves the most replicas, all-reduce stays off the CPU interconnect")
    auto = req.max_model_len == "auto"
    # under auto the layout must hold the declared concurrency at the floor (auto_floor), within the margin stage 8 keeps
    max_model_len = auto_floor(m) if auto else int(req.max_model_len)
    fraction = 1 - AUTO_KV_MARGIN if auto else 1.0
    fp8_allowed = not req.overrides.get("kv_cache_dtype") and fp8_kv_sound(p, m, req.version)

    # the instances stage 7 places: the inventory's count, where the TP leaves room for it, else what the GPUs hold
    forced = int(req.overrides["instances"]) if "instances" in req.overrides else None
    if forced is not None:
        candidates = [t for t in candidates if placeable_instances(kind, domains, t) >= forced] or candidates[:1]
    count = {t: forced or placeable_instances(kind, domains, t) for t in candidates}

    def held(t: int) -> Tuple[float, str, int]:
        """Requests of max_model_len the TP=t layout holds, in which KV dtype (stage 8's decision, Sizer.for_load), and
        under auto the length stage 8 would plan for each instance's share of the declared requests (auto_length)."""
        share = math.ceil(req.concurrency / count[t])
        mem, _seqs, _max_model_len, kv = sizer.for_load(t, kv_dtype, share, fp8_allowed)
        return count[t] * mem.held_at(max_model_len, fraction), kv, auto_length(m, mem, share)[0] if auto else 0

    holds = {t: held(t) for t in candidates}
    enough = [t for t in candidates if holds[t][0] >= req.concurrency]
    longer = ""
    if enough:
        tp = enough[0]
        if auto:
            # then the length: a wider TP that holds the declared requests is taken only for WIDER_TP_GAIN x the length each
            # instance then gives all of its share at once (fewer replicas, each with more KV cache), as the load rule widens
            for k, t in enumerate(enough[1:], start=1):
                best = max(holds[c][2] for c in enough[:k])
                if best >= AUTO_LONG_LEN or holds[t][2] < WIDER_TP_GAIN * best:
                    break
                tp = t
            longer = "; then the length each instance gives its share of them at once: " + ", ".join(
                f"TP={t}: {holds[t][2]}" for t in enough) + (f" (a wider TP only for {WIDER_TP_GAIN}x the length, and only while "
                                                             f"the narrower gives less than {AUTO_LONG_LEN})")
    else:
        # widen only while each step holds WIDER_TP_GAIN x what every narrower layout holds: a TP that gains a few percent
        # over the next narrower one is not taken for its gain over the narrowest
        tp = candidates[0]
        for k, t in enumerate(candidates[1:], start=1):
            if holds[t][0] < WIDER_TP_GAIN * max(holds[c][0] for c in candidates[:k]):
                break
            tp = t
    said = {t: f"TP={t} x {count[t]}: {holds[t][0]:.1f}" + (" with fp8 KV" if holds[t][1] == "fp8" else "") for t in candidates}
    table = f"requests of {max_model_len} tokens held at once: " + ", ".join(said[t] for t in candidates)
    if auto:
        table = (f"max_model_len is auto: the layout first holds the declared requests at {max_model_len} tokens (the useful floor: "
                 f"{AUTO_MIN_LEN} or the model's context), in {100 - 100 * AUTO_KV_MARGIN:.0f} % of the KV cache; " + table)
    if tp == candidates[0]:
        ctx.why(f"tensor_parallel_size={tp}", first + (f"; it holds the {req.concurrency} declared ({table}{longer})" if enough else
                f"; no TP holds the {req.concurrency} declared and no wider one {WIDER_TP_GAIN}x as many ({table})"))
    else:
        head = ((f"the TP whose instances hold the {req.concurrency} declared at the longest length" if longer and tp != enough[0] else
                 f"the smallest TP whose instances hold the {req.concurrency} declared") if enough else
                f"no TP holds the {req.concurrency} declared; each step up to this one holds at least {WIDER_TP_GAIN}x as many as "
                "every narrower layout, the next does not")
        ctx.why(f"tensor_parallel_size={tp}", head + f" ({table}{longer}): a wider TP splits the weights and leaves each GPU more KV cache"
                + (", and NVLink links every pair" if kind == "nvlink_all" else ""))
    return tp


def _pipeline_layout(m: ModelProfile, req: Request, p: Placement, kind: str, domains: List[List[int]], tps: List[int], sizer: Sizer,
                     kv_dtype: str, kv_forced: Optional[str], ctx: Ctx) -> Optional[Layout]:
    """No TP the heads allow fits these GPUs: pipeline stages (vLLM --pipeline-parallel-size) over TP x PP GPUs, each stage
    holding its share of the layers and of their KV cache (Sizer.stage_view). The fewest GPUs per instance first (the most
    replicas), then the widest TP among them (TP splits each step's work, PP only the layers), then the layout that holds
    the declared requests at the planned length (auto: the floor). None when PP is not possible or does not fit either."""
    n = len(p.gpus)
    if req.version < PIPELINE_PARALLEL_SINCE or pp_problem(m, 2):
        return None
    kvs = [kv_dtype] + (["fp8"] if not kv_forced and kv_dtype == "auto" and fp8_kv_sound(p, m, req.version) else [])
    options = sorted(((t, s) for t in tps for s in range(2, n // t + 1) if t * s <= n and not pp_problem(m, s)),
                     key=lambda ts: (ts[0] * ts[1], -ts[0]))
    length = auto_floor(m) if req.max_model_len == "auto" else int(req.max_model_len)
    fraction = 1 - AUTO_KV_MARGIN if req.max_model_len == "auto" else 1.0
    for kv in kvs:
        fitting = [(t, s) for t, s in options if sizer.fits(t, kv, s)]
        if not fitting:
            continue
        holds = {(t, s): placeable_instances(kind, domains, t * s) * sizer.evaluate(t, kv, s)[0].held_at(length, fraction)
                 for t, s in fitting}
        enough = [ts for ts in fitting if holds[ts] >= req.concurrency]
        tp, pp = enough[0] if enough else max(fitting, key=lambda ts: holds[ts])
        width = tp * pp
        same = [(t, s) for t, s in fitting if t * s == width]
        count, held = placeable_instances(kind, domains, width), holds[(tp, pp)]
        ctx.why(f"pipeline_parallel_size={pp}", f"no tensor-parallel size the heads allow ({', '.join(map(str, tps))}) holds {m.id} on "
                f"{p.accs[0]['memory_mib'] / 1024:.0f} GiB GPUs; {pp} pipeline stages of TP={tp} split its {m.num_layers} layers "
                f"({-(-m.num_layers // pp)} a stage at most, with one vocabulary matrix) and their KV cache over {width} GPUs: "
                + (f"the fewest whose instances hold the {req.concurrency} declared" if enough else
                   f"no layout holds the {req.concurrency} declared, this one the most")
                + f" ({count} instance{'s' if count > 1 else ''}, {held:.1f} requests of {length} tokens at once; layouts that fit: "
                + ", ".join(f"TP={t} x PP={s}: {holds[(t, s)]:.1f}" for t, s in fitting) + "); "
                "vLLM --pipeline-parallel-size (V1 with the multiprocessing executor from v0.8.2, PR #14219; the model class "
                "implements SupportsPP)" + (", fp8 KV" if kv == "fp8" else ""))
        ctx.why(f"tensor_parallel_size={tp}", f"the widest TP the heads allow among the {width}-GPU layouts that fit "
                f"({', '.join(f'TP={t} x PP={s}' for t, s in same)}): TP splits each step, PP only the layers")
        if kv == "fp8" and kv != kv_dtype:
            ctx.why("kv_cache_dtype=fp8", f"no pipeline layout holds max_model_len {req.max_model_len} in a {m.torch_dtype} KV cache on "
                    f"{n} GPUs; fp8 KV halves the bytes per token")
        if len({tuple(sorted(g)) for g in domains}) > 1 and width > max(len(g) for g in domains):
            ctx.warn(f"{req.name}: TP={tp} x PP={pp} spans {'NVLink islands' if kind == 'nvlink_mesh' else 'NUMA nodes'}: stage-to-stage "
                     "transfers cross the slower link")
        forced = int(req.overrides["instances"]) if "instances" in req.overrides else None
        if forced is not None and forced > count:
            raise Refusal(f"{req.name}: overrides.instances={forced}, but TP={tp} x PP={pp} places only {count} instance(s) on these "
                          f"{n} GPUs (no tensor-parallel size alone holds {m.id}); lower overrides.instances or add GPUs")
        if forced is not None:
            count = forced
            ctx.why(f"instances={count}", "forced by overrides")
        else:
            ctx.why(f"instances={count}", f"{n} GPUs / (TP={tp} x PP={pp})")
        if n - count * width:
            ctx.warn(f"{req.name}: {n - count * width} of its GPUs stay idle (TP={tp} x PP={pp} x {count} instances)")
        expert_parallel = bool(req.overrides.get("expert_parallel")) and m.is_moe
        if expert_parallel:
            ctx.why("expert_parallel=true", "forced by overrides: the routed experts are spread over each stage's TP ranks")
        return Layout(tp, count, kv, expert_parallel, False, kind, domains, pp)
    return None


def _consider_dp_ep(m: ModelProfile, tp: int, sizer: Sizer, kv_dtype: str, ctx: Ctx) -> None:
    """An MLA mixture-of-experts model on TP > 1 for throughput: data-parallel attention with expert parallelism
    (`--data-parallel-size N --enable-expert-parallel`) is what vLLM's docs recommend there (docs "Data Parallel Deployment",
    "Expert Parallel Deployment"): MLA's latent KV is the same on every TP rank (MLAAttentionSpec), so TP=N keeps N copies
    of each request's cache, while N attention ranks each keep their own requests. The plan records the comparison and
    keeps TP: the DP+EP memory (attention and dense layers whole on every GPU, the routed experts split) is not measured on
    any lease, and the only multi-GPU measurement (field report 000) found TP+EP slower than TP on NVLink."""
    mem = sizer.evaluate(tp, kv_dtype)[0]
    ctx.why("data_parallel_size=1 (DP attention + EP considered)",
            f"{m.id} is an MLA mixture-of-experts model: at TP={tp} every GPU holds the same {mem.kv_per_token} B/token latent, "
            f"so {tp} GPUs keep one KV pool of {mem.tokens} tokens; data-parallel attention with expert parallelism "
            f"(--data-parallel-size {tp} --enable-expert-parallel, vLLM docs 'Data Parallel Deployment' / 'Expert Parallel "
            f"Deployment') would keep {tp} pools, up to {tp}x the requests where the replicated attention weights leave room. "
            "Not chosen: its memory (attention whole on each GPU, routed experts split) has not been measured here and report 000 "
            "measured TP+EP slower than TP on NVLink. The planner does not plan it yet (no overrides key: --data-parallel-size and "
            "--enable-expert-parallel are planned flags, refused in extra_args); overrides.expert_parallel: true adds expert "
            "parallelism to the TP layout")
