# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Stage 9: attention backends, the family's parsers, the chat template's thinking default, CUDA-graph sizes, patches."""

from __future__ import annotations

import json
from typing import Any, List, Mapping, Optional, Tuple

from .._engine import (
    ATTENTION_SINK_MODEL_TYPES, FLAG_SINCE, MOE_WNA16_AFFECTED, PARSERS, QWEN3_PARSER_THINKING_ONLY_SINCE,
    SELECTOR_HANDLES_FP8_KV_SINCE, TOOL_TEMPLATES, Version, backend_name, has_flag, reasoning_parser_name, tool_parser_name, vstr,
)
from .._models import ModelProfile
from .base import Ctx
from .memory import cudagraph_capture_size
from .stages import Features, Placement, Precision, Request


def _attention(m: ModelProfile, vendor: str, cc: int, version: Version, kv_dtype: str, ctx: Ctx,
               forced: Optional[str], warnings: Optional[List[str]] = None, name: str = "") -> Tuple[Optional[str], Optional[str]]:
    """(decoder backend, multimodal encoder backend); None = leave vLLM's default. A backend is forced only
    where vLLM's own selector would pick one that fails, and under the name the version takes
    (_engine.BACKEND_NAMES)."""
    backend = None
    sinks = m.model_type in ATTENTION_SINK_MODEL_TYPES
    # capability gates (each backend's supports_compute_capability in vLLM 0.33, docs/sources.md#attention-backends):
    # FLASH_ATTN and FLASHINFER from sm80, fp8 KV in FLASH_ATTN only with FA3 (sm90) or FA4 (sm100)
    if forced:
        backend = backend_name(str(forced), version)
        ctx.why(f"attention_backend={backend}", "forced by overrides" + (f" (vLLM {vstr(version)} calls {forced} {backend})"
                                                                         if backend != forced else ""))
        if sinks and str(forced).startswith("FLASHINFER") and cc < 100 and warnings is not None:
            warnings.append(f"{name}: overrides.attention_backend={forced} on sm{cc}: {m.model_type} has attention sinks, which "
                            "FlashInfer takes only on sm100 (v1/attention/backends/flashinfer.py); vLLM will refuse the backend. "
                            "Remove the override: vLLM's own selector picks a backend that takes them")
    elif m.is_mla:
        ctx.why("attention_backend=default", f"{m.model_type or m.architecture} uses MLA: vLLM picks one of its MLA backends (FlashMLA, "
                "CUTLASS MLA, FlashInfer MLA, Triton MLA) by architecture; a dense-attention backend forced here would not load it")
    elif vendor == "nvidia" and cc < 80:
        backend = backend_name("TRITON_ATTN", version)
        ctx.why(f"attention_backend={backend}", f"sm{cc}: FlashAttention and FlashInfer need sm80+; Triton runs on Volta/Turing "
                "(field reports 000/001)" + (f"; vLLM {vstr(version)} names it {backend} (TRITON_ATTN from 0.11.0, "
                                             "platforms/interface.py _Backend)" if backend != "TRITON_ATTN" else ""))
    elif vendor == "nvidia" and kv_dtype.startswith("fp8") and cc < 90:
        if version >= SELECTOR_HANDLES_FP8_KV_SINCE:
            ctx.why("attention_backend=default", f"fp8 KV cache on sm{cc}: vLLM {vstr(version)}'s own selector moves off FlashAttention "
                    "(fp8 KV only with FA3 on sm90) to a backend that takes fp8 KV and this model's features, so none is forced; "
                    "forcing FLASHINFER would break attention-sink models such as gpt-oss (FlashInfer takes sinks only on sm100)")
        elif sinks:
            backend = backend_name("TRITON_ATTN", version)
            ctx.why(f"attention_backend={backend}", f"fp8 KV cache on sm{cc} before 0.11: FlashAttention takes fp8 KV only with FA3 "
                    f"(sm90) and FlashInfer takes {m.model_type}'s attention sinks only on sm100; Triton takes both on any arch")
        else:
            backend = "FLASHINFER"
            ctx.why("attention_backend=FLASHINFER", f"fp8 KV cache on sm{cc} before 0.11: FlashAttention takes fp8 KV only with FA3 "
                    "(sm90), and vLLM's selector of this version does not move off it itself")
    elif vendor == "nvidia" and cc >= 100 and m.family.startswith("qwen3_5"):
        backend = "FLASH_ATTN"
        ctx.why("attention_backend=FLASH_ATTN", "Blackwell + Qwen3.5: the recipe reports FlashInfer (the default there) degrades")
    else:
        ctx.why("attention_backend=default", "vLLM's own choice is the right one on this architecture")
    encoder = None
    # the flag exists from 0.11.1, but the Triton ViT default it works around arrived in 0.17 (field report 000)
    if m.vision and vendor == "nvidia" and cc < 80 and version >= (0, 17, 0) and has_flag(version, "--mm-encoder-attn-backend"):
        encoder = "TORCH_SDPA"
        ctx.why("mm_encoder_attn_backend=TORCH_SDPA", f"sm{cc}: from 0.17 the default Triton ViT attention JIT-compiles slowly and runs "
                "slower than SDPA (field report 000)")
    return backend, encoder


def _tool_template(family: str, tools: Optional[str], o: Mapping[str, Any], ctx: Ctx, warnings: Optional[List[str]],
                   name: str) -> Tuple[Optional[str], Optional[str]]:
    """(tool parser, --chat-template) for a family whose tool parser needs one of vLLM's shipped chat templates
    (_engine.TOOL_TEMPLATES): the parser only with overrides.chat_template, since neither the pip / CPU builds nor a named
    image are known to carry vLLM's examples/ folder; without it the plan serves no tool calls and says how to get them."""
    needed = TOOL_TEMPLATES.get(family)
    given = o.get("chat_template")
    if given:
        ctx.why(f"chat_template={given}", "overrides.chat_template" + (f": {family}'s {tools} tool calls need a template that "
                f"prompts for them (vllm-project/vllm:docs/features/tool_calling.md: {needed})" if needed and tools else ""))
        return tools, str(given)
    if not needed or not tools or "tool_call_parser" in o:
        return tools, None
    ctx.why("tool_call_parser=none", f"{family}'s {tools} parser expects the tool-call format of vLLM's {needed} "
            "(vllm-project/vllm:docs/features/tool_calling.md: --tool-call-parser with --chat-template), which its own chat "
            "template does not prompt for; the CPU (pip) build has no examples/ folder and an image's layout is no contract, so "
            "the plan does not emit the parser without overrides.chat_template")
    if warnings is not None:
        warnings.append(f"{name}: no tool calls: the {tools} parser needs vLLM's {needed}; copy that file (from vLLM's source at the "
                        "engine's version) into the model folder and set overrides.chat_template to its file name (or to a path "
                        "the engine reads), or set workload.tools: false to silence this")
    return None, None


def _parsers(m: ModelProfile, w: Mapping[str, Any], version: Version, ctx: Ctx, o: Mapping[str, Any],
             warnings: Optional[List[str]] = None, name: str = "") -> Tuple[Optional[str], Optional[str], Optional[str]]:
    """(reasoning parser, tool-call parser, --chat-template)."""
    family = "qwen3_coder" if "coder" in m.id.lower() else m.family
    known = family in PARSERS
    reasoning, tools = PARSERS.get(family, (None, None))
    if m.thinking == "none":
        reasoning = None
    why_r = f"{m.family} thinking model"
    if reasoning == "qwen3" and version < (0, 9, 2):
        reasoning, why_r = "deepseek_r1", f"{m.family} thinking model (0.8.5 has no qwen3 parser)"
    elif reasoning == "qwen3" and m.thinking == "always" and version < QWEN3_PARSER_THINKING_ONLY_SINCE:
        # _engine.QWEN3_PARSER_THINKING_ONLY_SINCE: the template opens <think> in the prompt, the output has only </think>
        reasoning, why_r = "deepseek_r1", (f"{m.id} is a thinking-only checkpoint (its chat template opens <think> in the prompt): "
                                           f"before {vstr(QWEN3_PARSER_THINKING_ONLY_SINCE)} the qwen3 parser leaves the whole answer in "
                                           "content (vLLM #22507, #34684); deepseek_r1 splits at </think> (field report 001)")
    if reasoning is None and m.thinking == "always" and m.template_thinking == "always":
        reasoning, why_r = "deepseek_r1", (f"{m.id}'s chat template opens <think> in the prompt, so the answer follows the first "
                                           "</think>: deepseek_r1 splits there (a missing opening tag is what it expects)")
    if reasoning and reasoning_parser_name(reasoning, version) != reasoning:
        reasoning = reasoning_parser_name(reasoning, version)
        why_r += f"; vLLM {vstr(version)} registers it as {reasoning} (reasoning parsers of 0.10.0; _engine.REASONING_PARSER_NAMES)"
    reasoning = o.get("reasoning_parser", reasoning)
    wants_tools = bool(w.get("tools", True))
    tools = o.get("tool_call_parser", tools) if wants_tools else None
    renamed = tool_parser_name(tools, version) if tools and "tool_call_parser" not in o else tools
    tools_why = (f"; vLLM {vstr(version)} registers it as {renamed} (tool_parsers of 0.10.0; _engine.TOOL_PARSER_NAMES)"
                 if renamed != tools else "")
    tools = renamed
    tools, template = _tool_template(family, tools, o, ctx, warnings, name) if wants_tools else (None, o.get("chat_template"))
    if template and not wants_tools:
        ctx.why(f"chat_template={template}", "overrides.chat_template")
    if "reasoning_parser" in o:
        why_r = "forced by overrides"
    if reasoning:
        ctx.why(f"reasoning_parser={reasoning}", why_r)
    if tools:
        formats = {"qwen3_coder": "XML <tool_call><function=...>", "hermes": "hermes JSON"}
        ctx.why(f"tool_call_parser={tools}", ("forced by overrides" if "tool_call_parser" in o else
                                              f"{family} emits {formats[tools]} tool calls" if tools in formats else
                                              f"{family}'s own tool-call format (vLLM tool_parsers/__init__.py)") + tools_why)
    elif wants_tools and family in TOOL_TEMPLATES and PARSERS.get(family, (None, None))[1]:
        pass                                # _tool_template said why and what to set
    elif wants_tools and known:
        ctx.why("tool_call_parser=none", f"{family} has no tool-call format of its own (vLLM tool_parsers/__init__.py)")
        if warnings is not None:
            warnings.append(f"{name}: {m.id} has no tool-call format of its own, so requests with tool_choice \"auto\" get HTTP 400; "
                            "set workload.tools: false, or overrides.tool_call_parser if its chat template does emit tool calls")
    elif not wants_tools:
        ctx.why("tool_call_parser=none", "workload.tools is false")
    if tools and m.template_tools is False and warnings is not None:
        warnings.append(f"{name}: {m.id}'s chat template does not render the request's `tools`: the model is never shown the tool "
                        f"list, so the {tools} parser finds nothing to parse; set workload.tools: false, or serve a chat template "
                        "that renders tools")
    if not known and warnings is not None:
        missing = []
        if wants_tools and "tool_call_parser" not in o:
            missing.append("no tool-call parser, so requests with tool_choice \"auto\" get HTTP 400: set overrides.tool_call_parser "
                           "(llama3_json for Llama 3.x, mistral for Mistral, deepseek_v3 for DeepSeek-V3/R1-0528, openai for gpt-oss, "
                           "glm45 for GLM-4.5; vLLM tool_parsers/__init__.py), or workload.tools: false")
        if "reasoning_parser" not in o and not reasoning:
            missing.append("no reasoning parser, so a thinking model's reasoning stays in content: set overrides.reasoning_parser "
                           "(deepseek_r1 for R1 and its distills, openai_gptoss for gpt-oss, mistral for Magistral) if it thinks")
        ctx.why(f"family={m.model_type or m.architecture}", "not in the planner's parser table (_engine.PARSERS): planned with the "
                "assumptions the warning names")
        warnings.append(f"{name}: {m.id} ({m.model_type or 'no model_type'}, {m.architecture}) is a family this planner has no table "
                        "for; assumed: " + "; ".join(missing + [
                            "attention read from config.json: " + _attention_summary(m),
                            f"{'MoE with ' + str(m.num_experts) + ' experts' if m.is_moe else 'a dense model'} read from config.json"]))
    return reasoning, tools, template


def _attention_summary(m: ModelProfile) -> str:
    """The layer kinds the memory model read, in the words of the unknown-family warning."""
    if m.is_mla:
        return "MLA latents (kv_lora_rank + qk_rope_head_dim, whole on every rank)"
    parts = [f"{m.sliding_layers} of {m.full_attention_layers} attention layers sliding over {m.sliding_window} tokens" if m.sliding_layers
             else f"{m.chunked_layers} of {m.full_attention_layers} attention layers in chunks of {m.attention_chunk_size} tokens"
             if m.chunked_layers else f"{m.full_attention_layers} full-attention layers (no sliding_window, chunks or MLA in the config)"]
    if m.linear_attention_layers:
        parts.append(f"{m.linear_attention_layers} {m.mamba_type or 'state'} state layers (constant memory a request)")
    return ", ".join(parts)


def _thinking(m: ModelProfile, w: Mapping[str, Any], version: Version, ctx: Ctx, warnings: List[str], name: str) -> Optional[str]:
    if m.thinking != "hybrid" or w.get("thinking", False):
        return None
    if has_flag(version, "--default-chat-template-kwargs"):
        ctx.why("default_chat_template_kwargs=enable_thinking:false", "workload.thinking is false: answers without a thinking section "
                "(field report 003), clients can still ask for it per request")
        return json.dumps({"enable_thinking": False}, separators=(", ", ": "))
    warnings.append(f"{name}: vLLM {vstr(version)} has no --default-chat-template-kwargs "
                    f"({vstr(FLAG_SINCE['--default-chat-template-kwargs'])}+): clients must send "
                    "chat_template_kwargs {\"enable_thinking\": false} themselves")
    return None


def _patches(m: ModelProfile, vendor: str, cc: int, quant: Optional[str], version: Version, ctx: Ctx) -> List[str]:
    low, high = MOE_WNA16_AFFECTED
    if vendor == "nvidia" and cc < 75 and m.is_moe and quant in ("gptq", "awq") and low <= version <= high:
        ctx.why("patch=moe_wna16_num_experts", "MoE layers of a GPTQ/AWQ checkpoint run moe_wna16 on sm70, whose block config reads "
                "num_experts from the wrong axis (vLLM #36008, unfixed through 0.33): BLOCK_SIZE_K // group_size errors (report 000)")
        return ["moe_wna16_num_experts"]
    return []


def choose_features(m: ModelProfile, req: Request, p: Placement, precision: Precision, seqs: int, max_batched: int, kv_dtype: str,
                    hf_overrides: Optional[str], ctx: Ctx, runner_args: Tuple[str, ...] = (), pooling: bool = False) -> Features:
    """Stage 9: attention backends, parsers, the chat template's thinking default, CUDA-graph sizes, patches."""
    name, version, w = req.name, req.version, req.workload
    capture, capture_flag = cudagraph_capture_size(m, p.vendor, version, seqs, max_batched, precision.eager) if p.accs else (None, False)
    if capture_flag:
        ctx.why(f"max_cudagraph_capture_size={capture}",
                f"a MoE model: vLLM would capture only up to {min(2 * seqs, 512)} tokens (2 x max_num_seqs), and the Triton "
                "fused-MoE kernels of larger batches would compile while serving (H200, one user, 512-token "
                "prompts: first token after 88 ms instead of 32 ms; the larger graphs cost about 0.25 GiB)")
    backend, encoder = (_attention(m, p.vendor, p.cc, version, kv_dtype, ctx, req.overrides.get("attention_backend"), ctx.warnings, name)
                        if p.accs else (None, None))
    # a pooling model generates no text: no parsers, no chat-template thinking default (pooling.choose_runner)
    reasoning, tools, template = (_parsers(m, w, version, ctx, req.overrides, ctx.warnings, name) if not pooling
                                  else (None, None, None))
    if m.mistral_format:
        ctx.why("tokenizer_mode=mistral, config_format=mistral, load_format=mistral", f"{m.id} is in Mistral's own format "
                "(params.json beside consolidated*.safetensors): vLLM's docs give these three flags for it (vllm-project/"
                "vllm:docs/features/tool_calling.md, \"Mistral Models\"); its own tokenizer (mistral_common) is what the mistral tool parser needs, "
                "and only the consolidated weights are loaded (model_loader/default_loader.py)")
    thinking_kwargs = _thinking(m, w, version, ctx, ctx.warnings, name) if not pooling else None
    patches = _patches(m, p.vendor, p.cc, precision.quant, version, ctx) if p.accs else []
    if p.accs and version >= (0, 16, 0) and reasoning:
        ctx.warn(f"{name}: vLLM {vstr(version)} returns the reasoning text in `reasoning` only (no `reasoning_content`); "
                 "clients that read reasoning_content (Dify in report 000) must be updated")
    if p.accs and m.vision and not w.get("vision", True) and has_flag(version, "--language-model-only"):
        ctx.why("language_model_only=true", "workload.vision is false: skip the vision tower and its profiling memory")
    return Features(backend, encoder, reasoning, tools, thinking_kwargs, patches, capture if capture_flag else None, hf_overrides,
                    template, tuple(runner_args))
