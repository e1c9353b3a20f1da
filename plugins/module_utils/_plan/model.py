# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Stage 2: the model's profile, where the engine reads it, whether the engine runs it, and a context extended with YaRN."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Dict, Mapping, Optional, Tuple

from .._engine import Version, parse_version, shutdown_drains, vstr
from .._hf_names import TRANSFORMERS_MODEL_TYPES, TRANSFORMERS_VERSION
from .._host_needs import LOOPBACK, NeedsError, drain_timeout, model_source, shutdown_grace, stop_timeout
from .._models import YARN, ModelError, ModelProfile, remote_code_at, resolve_model, yarn_extension, yarn_limit
from .._vllm_archs import ARCH_SUFFIXES, REGISTRY_ARCHS, RELEASES_READ
from .base import Ctx, Refusal, gib
from .stages import HostOptions, Request, Serving


def choose_model(d: Mapping[str, Any], req: Request, metadata: Optional[Mapping[str, Any]]) -> ModelProfile:
    """Stage 2a: the model's profile: the catalog, a local folder's or the controller's fetched config.json (`metadata`:
    HostOptions.model_metadata), or the inventory's."""
    try:
        m = resolve_model(d["model"], metadata)
    except ModelError as exc:
        raise Refusal(f"{req.name}: {exc}") from exc
    return m


def serving_source(d: Mapping[str, Any], req: Request, m: ModelProfile, options: HostOptions, ctx: Ctx) -> Serving:
    """Stage 2b: where the engine reads the model, where it listens, how long a drain, the engine's own shutdown grace and a
    stop may take: the change path waits drain_timeout_s for the requests in flight, the stop then gives what still runs
    the engine's --shutdown-timeout (where the version has it), and the runtime's stop timeout is longer than that grace."""
    try:
        source = model_source(m.id, d["model"], options.model_root)
        drain_s, drain_why = drain_timeout(req.overrides.get("drain_timeout_s"))
        grace_s, grace_why = shutdown_grace(shutdown_drains(req.version), req.overrides.get("shutdown_timeout_s"),
                                            vstr(req.version))
    except NeedsError as exc:
        raise Refusal(f"{req.name}: {exc}") from exc
    if not source["fetch"]:
        where = "the local path given with the deployment"
    elif source["revision"]:
        where = (f"model_store fetches {m.id} at revision {source['revision']} into <model root>/<name>@<revision>, the one "
                 "folder both it and the engine use; another revision gets its own folder beside it, so a revision change "
                 "rolls the instance like an engine version change and never rewrites a folder an engine serves from")
    else:
        where = (f"model_store fetches {m.id} into <model root>/<name>, the one folder both it and the engine use (no "
                 "revision pinned: the hub's default branch; pin one for a folder of its own per revision)")
    ctx.why(f"model_dir={source['dir']}", where)
    ctx.why(f"bind_address={LOOPBACK}", options.bind_why)
    ctx.why(f"drain_timeout_s={drain_s}", drain_why)
    ctx.why(f"shutdown_timeout_s={grace_s}", grace_why)
    stop_s, stop_why = stop_timeout(grace_s)
    ctx.why(f"stop_timeout_s={stop_s}", stop_why)
    return Serving(source, drain_s, grace_s)


def profile_summary(m: ModelProfile) -> Dict[str, Any]:
    """The plan's model_profile: what the planner read of the model, and from where."""
    return {"family": m.family, "weights_gib": gib(m.weight_bytes), "weight_bytes_source": m.weight_bytes_source,
            "provenance": m.provenance, "hybrid": m.is_hybrid, "moe": m.is_moe, "thinking": m.thinking, "thinking_from": m.thinking_from}


def check_engine_runs(m: ModelProfile, req: Request) -> None:
    """Stage 2c: the engine version knows the model's architecture."""
    if req.version < parse_version(m.min_engine):
        raise Refusal(f"{req.name}: {m.id} needs vLLM >= {m.min_engine}; engine.version is {vstr(req.version)}")


def _registry_lists(arch: str, version: Version) -> bool:
    """Whether vLLM `version`'s model registry lists `arch` (_vllm_archs; a release newer than the newest read: as it)."""
    return any(arch in names and any(since <= version and (until is None or version < until) for since, until in spans)
               for spans, names in REGISTRY_ARCHS)


def registry_serves(arch: str, version: Version) -> Optional[str]:
    """The registry architecture vLLM `version` serves `arch` with: itself, or the one its _normalize_arch finds by
    swapping the name's suffix (config/model.py _SUFFIX_TO_DEFAULTS: Qwen3ForSequenceClassification -> Qwen3ForCausalLM);
    None where neither is listed."""
    if _registry_lists(arch, version):
        return arch
    suffixes = next((row for since, row in reversed(ARCH_SUFFIXES) if version >= since), ())
    suffix = next((sfx for sfx in suffixes if arch.endswith(sfx)), None)
    if suffix is None:
        return None
    return next((arch.replace(suffix, other) for other in suffixes if _registry_lists(arch.replace(suffix, other), version)), None)


def check_architecture(m: ModelProfile, req: Request, ctx: Ctx) -> None:
    """Stage 2c'': vLLM's model registry serves the model's architecture on this release (vllm/model_executor/models/
    registry.py inspect_model_cls), or its Transformers backend may (model_impl auto: transformers' own class for a model
    type transformers ships, or the repository's auto_map AutoModel class with --trust-remote-code, each only where the class
    supports vLLM's attention interface); else vLLM refuses it: "Model architectures [...] are not supported for now"."""
    arch = m.architecture
    if arch == "unknown" or registry_serves(arch, req.version):
        return
    v = vstr(req.version)
    other = [r for r in RELEASES_READ if registry_serves(arch, r)]
    elsewhere = (f"; the vLLM releases read that serve it: {', '.join(vstr(r) for r in other)}" if other else
                 f"; no vLLM release read serves it ({vstr(RELEASES_READ[0])} to {vstr(RELEASES_READ[-1])})")
    source = f"vLLM {v}'s vllm/model_executor/models/registry.py (plugins/module_utils/_vllm_archs.py)"
    backend = ("vLLM then tries its Transformers backend (registry.py _try_resolve_transformers, model_impl auto), which "
               "serves a class only where it supports vLLM's attention interface (is_backend_compatible), and the planner "
               "cannot read that")
    if m.auto_model_refs:
        if not req.trust_remote_code:
            raise Refusal(f"{req.name}: {m.id}'s architecture {arch} is not in {source}{elsewhere}. Its config.json auto_map "
                          f"names the repository's own class ({', '.join(m.auto_model_refs)}), which vLLM's Transformers backend "
                          "loads only with --trust-remote-code: without it vLLM refuses the model ('Model architectures "
                          f"['{arch}'] are not supported for now'). What would work: review that code and set "
                          "trust_remote_code: true on this deployment (llmfleet_deployments[].trust_remote_code) if the class "
                          "supports vLLM's attention interface, or a checkpoint of an architecture vLLM serves")
        ctx.why(f"architecture={arch} (Transformers backend)", f"not in {source}; the deployment trusts remote code, so "
                f"{backend}: the repository's {', '.join(m.auto_model_refs)} must support it, or vLLM refuses the model")
        return
    if m.model_type in TRANSFORMERS_MODEL_TYPES:
        ctx.why(f"architecture={arch} (Transformers backend)", f"not in {source}; model_type {m.model_type!r} is one "
                f"transformers {TRANSFORMERS_VERSION} ships, so {backend}: where transformers has no class {arch} or it "
                "is not compatible, vLLM refuses the model")
        return
    raise Refusal(f"{req.name}: {m.id}'s architecture {arch} is not in {source}{elsewhere}; its model_type "
                  f"{m.model_type or 'none'!r} is not one transformers {TRANSFORMERS_VERSION} ships and config.json's auto_map "
                  "names no AutoModel class, so vLLM's Transformers backend has nothing to load either: vLLM refuses it "
                  f"('Model architectures [\'{arch}\'] are not supported for now'). What would work: "
                  + (f"engine.version {vstr(other[-1])}" if other else "a checkpoint of an architecture vLLM serves"))


def check_remote_code(m: ModelProfile, req: Request, ctx: Ctx) -> None:
    """Stage 2c': the remote-code policy. A model whose config or tokenizer is remote code (_models.remote_code_needs) is
    planned only where the deployment sets trust_remote_code: true; the plan then passes --trust-remote-code."""
    needs = remote_code_at(m, req.version)
    if needs and not req.trust_remote_code:
        raise Refusal(f"{req.name}: {m.id} needs remote code that vLLM {vstr(req.version)} runs only with --trust-remote-code: "
                      + "; ".join(needs) + ". Review that code, then set trust_remote_code: true on this deployment "
                      "(llmfleet_deployments[].trust_remote_code; extra_args cannot set it)")
    if req.trust_remote_code:
        ctx.why("trust_remote_code=true", "the deployment sets trust_remote_code: true"
                + (f"; the model needs it: {'; '.join(needs)}" if needs else
                   "; the model's config.json and tokenizer_config.json name no remote code the planner detects, the flag "
                   "still lets transformers prefer the repository's own classes where its auto_map names them"))


def extend_context(d: Mapping[str, Any], req: Request, m: ModelProfile, ctx: Ctx) -> Tuple[ModelProfile, Optional[str]]:
    """Stage 2d: a declared max_model_len beyond the model's context, where its family documents YaRN: the profile with the
    extended context, and the --hf-overrides that gives vLLM the same (None when nothing is extended)."""
    if req.max_model_len == "auto" or int(req.max_model_len) <= m.max_position_embeddings:
        return m, None
    found = yarn_extension(m, int(req.max_model_len))
    if found is None:
        raise Refusal(f"{req.name}: max_model_len {req.max_model_len} exceeds {m.id}'s context of {m.max_position_embeddings} tokens"
                      + _no_yarn(m))
    factor, native = found
    if any(str(a).split("=", 1)[0] == "--hf-overrides" for a in d.get("extra_args") or []):
        raise Refusal(f"{req.name}: max_model_len {req.max_model_len} needs YaRN (rope scaling x{factor:g} over {m.id}'s native {native} "
                      "tokens), which the plan passes as --hf-overrides; extra_args sets --hf-overrides too: merge the two, or "
                      f"lower max_model_len to {m.max_position_embeddings}")
    longest = int(native * factor)
    # vLLM before #56446 derives original x factor for rope_type yarn, from it max_position_embeddings: giving both (the
    # same length) holds on every version; rope_theta travels inside the dict, where transformers 5 keeps it (rope_parameters)
    overrides = {"rope_scaling": {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": native,
                                  "rope_theta": m.rope_theta},
                 "max_position_embeddings": longest}
    ctx.why(f"rope_scaling=yarn x{factor:g}", f"max_model_len {req.max_model_len} is beyond {m.id}'s native {native} tokens: its model card "
            f"extends the context with YaRN; x{factor:g} (the smallest power of two that covers it) gives {longest}. Static YaRN "
            "scales every request, short ones too, so only a declared max_model_len above the native context turns it on")
    return replace(m, max_position_embeddings=longest), json.dumps(overrides, separators=(",", ":"), sort_keys=True)


def _no_yarn(m: ModelProfile) -> str:
    """Why no YaRN extension was planned, for the refusal of a length beyond the context."""
    if m.rope_scaling:
        return f" (the checkpoint already scales RoPE: {m.rope_scaling})"
    native, most = yarn_limit(m)
    if native:
        return f"; YaRN, which its model card documents up to x{most:g}, reaches {int(native * most)}"
    if m.family in YARN and not m.rope_theta:
        return ("; its family documents YaRN, but its config.json gives no rope_theta, which the --hf-overrides must carry "
                "(transformers 5 keeps it inside the rope dict): lower max_model_len, or give the config with rope_theta")
    return f"; no YaRN extension is documented for {m.family} (_models.YARN)"
