# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Stage 2: the model's profile, where the engine reads it, whether the engine runs it, and a context extended with YaRN."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Dict, Mapping, Optional, Tuple

from .._engine import parse_version, vstr
from .._host_needs import LOOPBACK, NeedsError, drain_timeout, model_source, stop_timeout
from .._models import YARN, ModelError, ModelProfile, resolve_model, yarn_extension, yarn_limit
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
    """Stage 2b: where the engine reads the model, where it listens, how long a stop and a drain may take."""
    try:
        source = model_source(m.id, d["model"], options.model_root)
    except NeedsError as exc:
        raise Refusal(f"{req.name}: {exc}") from exc
    ctx.why(f"model_dir={source['dir']}", "the local path given with the deployment" if not source["fetch"]
            else f"model_store fetches {m.id} into <model root>/<name>, the one folder both it and the engine use")
    ctx.why(f"bind_address={LOOPBACK}", options.bind_why)
    stop_s, stop_why = stop_timeout()
    ctx.why(f"stop_timeout_s={stop_s}", stop_why)
    try:
        drain_s, drain_why = drain_timeout(req.overrides.get("drain_timeout_s"))
    except NeedsError as exc:
        raise Refusal(f"{req.name}: {exc}") from exc
    ctx.why(f"drain_timeout_s={drain_s}", drain_why)
    return Serving(source, drain_s)


def profile_summary(m: ModelProfile) -> Dict[str, Any]:
    """The plan's model_profile: what the planner read of the model, and from where."""
    return {"family": m.family, "weights_gib": gib(m.weight_bytes), "weight_bytes_source": m.weight_bytes_source,
            "provenance": m.provenance, "hybrid": m.is_hybrid, "moe": m.is_moe, "thinking": m.thinking, "thinking_from": m.thinking_from}


def check_engine_runs(m: ModelProfile, req: Request) -> None:
    """Stage 2c: the engine version knows the model's architecture."""
    if req.version < parse_version(m.min_engine):
        raise Refusal(f"{req.name}: {m.id} needs vLLM >= {m.min_engine}; engine.version is {vstr(req.version)}")


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
