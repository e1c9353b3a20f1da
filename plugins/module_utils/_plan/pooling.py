# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Stage 2e: pooling models (embeddings, rerankers, classifiers): decided as vLLM decides, from the architecture and the
sentence-transformers side files, or by the deployment's `pooling` key; the length within what the model takes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Dict, Mapping, Optional, Tuple

from .._engine import has_flag, vstr
from .._models import ModelProfile
from .._pooling import Pooling, architecture_default, detect, endpoints, health_probe, max_len_limit, runner_args
from .base import Ctx, Refusal
from .stages import Request


def choose_runner(d: Mapping[str, Any], req: Request, m: ModelProfile,
                  ctx: Ctx) -> Tuple[ModelProfile, Optional[Pooling], Tuple[str, ...]]:
    """The pooling plan (None: a generative model), the profile with its length capped at what the pooling model takes, and
    the runner flags (a pooling model's, or --runner generate where the inventory overrules a modules.json)."""
    forced = d.get("pooling")
    p = detect(m.architecture, m.hidden_size, m.num_labels, m.is_causal, m.st_pooling, m.st_dense_out or None, forced)
    if p is None:
        if forced is False and architecture_default(m.architecture)[0] == "pooling":
            raise Refusal(f"{req.name}: pooling: false, but {m.architecture} is a pooling architecture in vLLM, which refuses "
                          "`--runner generate` for it (config/model.py: 'Embedding models do not support --runner generate'); "
                          "remove pooling: false")
        if forced is False and m.st_pooling:
            args = ("--runner", "generate") if has_flag(req.version, "--runner") else ("--task", "generate")
            ctx.why(" ".join(args), "pooling: false in the inventory: modules.json would make vLLM serve it as an embedding model "
                    "(get_pooling_config), so the plan names the generate runner itself")
            return m, None, args
        return m, None, ()
    ctx.why("runner=pooling", p.why)
    if p.convert == "classify":
        ctx.warn(f"{req.name}: pooling: classify converts {m.architecture}, a generative architecture: vLLM builds the classifier "
                 "from the checkpoint's `score` weights, or from LM-head rows where the config names classifier_from_token "
                 "(model_executor/models/adapters.py); a reranker made from an LM head needs the --hf-overrides its model card "
                 "gives: add them to extra_args")
    ctx.why(f"pooling_task={p.task}", {"embed": "one vector per input: /v1/embeddings",
                                       "classify": f"{p.num_labels} score(s) per input: /classify"}[p.task]
            + ("; the score and rerank API is on (embed models, and classifiers with one label: vllm 0.32 "
               "entrypoints/pooling/utils.py enable_scoring_api)" if p.score else ""))
    ctx.why("parsers=none, thinking=none", "a pooling model generates no text: no reasoning or tool-call parser and no chat-template "
            "thinking default (vLLM answers only the pooling endpoints: entrypoints/pooling/factories.py)")
    limit, limit_why = max_len_limit(m.architecture, m.max_position_embeddings, m.pad_token_id, m.st_max_seq_length or None)
    if req.max_model_len != "auto" and int(req.max_model_len) > limit:
        raise Refusal(f"{req.name}: max_model_len {req.max_model_len} exceeds what the pooling model {m.id} takes: {limit} tokens "
                      f"({limit_why}); set workload.max_model_len to {limit} or less, or leave it auto")
    if limit != m.max_position_embeddings:
        ctx.why(f"model_length={limit}", limit_why)
    batched = req.overrides.get("max_num_batched_tokens")
    longest = limit if req.max_model_len == "auto" else int(req.max_model_len)
    if p.encoder_only and batched is not None and int(batched) < longest:
        # bidirectional attention: no chunked prefill (config/model.py is_chunked_prefill_supported), and the scheduler refuses
        # a batch budget below the length (config/scheduler.py verify_max_model_len); vLLM raises its own default to the length
        raise Refusal(f"{req.name}: overrides.max_num_batched_tokens {batched} is below the {longest} tokens one request of the "
                      f"encoder-only {m.architecture} may have: it cannot split a prompt (no chunked prefill), so vLLM refuses "
                      f"to start; raise it to {longest} or more, or remove it (vLLM then takes max_model_len)")
    if p.encoder_only:
        ctx.why("kv_cache=none", f"{m.architecture} runs encoder-only attention in vLLM (EncoderOnlyAttention.get_kv_cache_spec returns "
                "None: no KV cache, and no KV-cache line in the start-up log); the plan's KV numbers are 0 and every admitted "
                "request runs at once")
    return replace(m, max_position_embeddings=limit), p, runner_flags(p, req, ctx)


def runner_flags(p: Pooling, req: Request, ctx: Ctx) -> Tuple[str, ...]:
    args = runner_args(p, req.version)
    ctx.why(" ".join(args), (f"vLLM {vstr(req.version)} spells the runner --runner/--convert (from 0.10.1, vLLM PR #21470); "
                             "--runner pooling explicitly (vLLM logs 'Pass the value explicitly'), "
                             + ("--convert " + p.convert + " because vLLM would run the architecture as a generative model"
                                if p.convert != "none" else "no --convert: vLLM infers it")) if args[0] == "--runner" else
            (f"vLLM {vstr(req.version)} selects a pooling model with --task (before 0.10.1); a classifier with one label is task "
             "score there, which opens /score and /rerank (api_server.py of the --task era)"))
    return tuple(args)


def plan_fields(p: Pooling, req: Request) -> Dict[str, Any]:
    """The instance's pooling fields (only pooling instances carry them: the pooling plan contract, docs/planner.md)."""
    return {"runner": "pooling", "pooling_task": p.task, "score": p.score, "endpoints": endpoints(p, req.version),
            "embedding_dimensions": p.dimensions, "num_labels": p.num_labels,
            "health_probe": health_probe(p, req.version)}
