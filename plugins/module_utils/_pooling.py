# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""PRIVATE module_utils of llmfleet.serving: pooling models (embeddings, rerankers, classifiers) - how vLLM tells one from a
generative model, which API paths it then answers, the flags that say it per version, and the request that proves it serves.

Not a public API; may change without notice. Pure and typed: no Ansible imports, no I/O. Every table is read from vLLM's
source (docs/sources.md#pooling-models): vllm 0.32.0 config/model.py (_get_default_runner_type, _get_default_convert_type,
_SUFFIX_TO_DEFAULTS), model_executor/models/registry.py, entrypoints/pooling/factories.py and utils.py (which routers a
pooling model gets), model_executor/models/roberta.py (position ids), transformers_utils/config.py (sentence-transformers
side files); older releases' config.py _get_preferred_task and api_server.py (the --task era).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ._engine import FLAG_SINCE, Version

# vLLM's suffix rules (config/model.py _SUFFIX_TO_DEFAULTS, 0.32.0), in its order: the first suffix an architecture ends
# with decides (runner, convert); a bare "...Model" last, so that the longer suffixes win.
SUFFIX_DEFAULTS: Tuple[Tuple[str, str, str], ...] = (
    ("ForCausalLM", "generate", "none"),
    ("ForConditionalGeneration", "generate", "none"),
    ("ChatModel", "generate", "none"),
    ("LMHeadModel", "generate", "none"),
    ("ForTextEncoding", "pooling", "embed"),
    ("EmbeddingModel", "pooling", "embed"),
    ("ForSequenceClassification", "pooling", "classify"),
    ("ForTokenClassification", "pooling", "classify"),
    ("ForAudioClassification", "pooling", "classify"),
    ("ForImageClassification", "pooling", "classify"),
    ("ForVideoClassification", "pooling", "classify"),
    ("ClassificationModel", "pooling", "classify"),
    ("ForRewardModeling", "pooling", "embed"),
    ("RewardModel", "pooling", "embed"),
    ("Model", "pooling", "embed"),
)
# Registered architectures whose suffix says pooling but that vLLM registers as text generation (registry.py
# _TEXT_GENERATION_MODELS / _MULTIMODAL_MODELS, 0.32.0): the registry is asked before the suffix, so they generate.
GENERATIVE_DESPITE_SUFFIX = frozenset({"ChatGLMModel", "MiDashengLMModel", "MossAudioModel", "Qwen2_5OmniModel", "UltravoxModel"})
# Registered pooling architectures whose suffix does not say so (registry.py _EMBEDDING_MODELS, _TOKEN_CLASSIFICATION_MODELS,
# 0.32.0; the late-interaction retrievers are left out: their token-level outputs are not a plan's embeddings).
POOLING_DESPITE_SUFFIX: Dict[str, str] = {"BertForMaskedLM": "embed", "RobertaForMaskedLM": "embed", "Terratorch": "embed",
                                          "ClefOmniForJointSchema": "classify"}
# Architectures vLLM runs with encoder-only attention in every case (the model files bert.py, roberta.py, bert_with_rope.py,
# modernbert.py build EncoderOnlyAttention, whose get_kv_cache_spec returns None: no KV cache at all).
ENCODER_ONLY_ARCHITECTURES = frozenset({
    "BertForMaskedLM", "BertForSequenceClassification", "BertForTokenClassification", "BertModel", "BertSpladeSparseEmbeddingModel",
    "BgeM3EmbeddingModel", "GteModel", "GteNewForSequenceClassification", "GteNewModel", "ModernBertForSequenceClassification",
    "ModernBertForTokenClassification", "ModernBertModel", "NomicBertModel", "RobertaForMaskedLM", "RobertaForSequenceClassification",
    "RobertaForTokenClassification", "RobertaModel", "XLMRobertaForSequenceClassification", "XLMRobertaForTokenClassification",
    "XLMRobertaModel",
})
# Architectures vLLM serves with roberta.py, whose position ids start at padding_idx + 1 (RobertaEmbedding.forward): a request
# may use max_position_embeddings - (pad_token_id + 1) positions, not max_position_embeddings.
ROBERTA_POSITION_ARCHITECTURES = frozenset({
    "BgeM3EmbeddingModel", "RobertaForMaskedLM", "RobertaForSequenceClassification", "RobertaForTokenClassification", "RobertaModel",
    "XLMRobertaForSequenceClassification", "XLMRobertaForTokenClassification", "XLMRobertaModel",
})

# --runner/--convert replaced --task in vLLM PR #21470 (merged 2025-07-24; 0.10.1 is the first release planned with them, 0.10.0
# is left on --task, which 0.10-0.12 still accept as deprecated); --task is gone from 0.13.0 (vLLM PR #30397): _engine.FLAG_SINCE
RUNNER_FLAGS_SINCE: Version = FLAG_SINCE["--runner"]
# the tasks a plan names, and the values of the inventory's deployment key `pooling` (false: the generate runner)
TASKS = ("embed", "classify")

SCORE_PATHS = ("/score", "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank")
# every path a pooling instance may answer (the gateway's allow-list takes them all; vLLM answers a model that lacks one)
POOLING_PATHS = ("/v1/embeddings", "/pooling", "/classify") + SCORE_PATHS


class PoolingError(ValueError):
    """A pooling request the inventory states wrongly (the message says what to change)."""


@dataclass(frozen=True)
class Pooling:
    """What the plan says of a pooling model: the task, whether the score API is on, the flags, the paths, the probe."""
    task: str                       # embed | classify
    score: bool                     # the score/rerank API: embed models, classifiers with one label
    convert: str                    # none (vLLM's own pooling architecture) | embed | classify (a generative one adapted)
    why: str                        # what decided it, with its source
    encoder_only: bool              # no KV cache (EncoderOnlyAttention)
    dimensions: Optional[int]       # length of one embedding (embed), None when unknown / classify
    num_labels: Optional[int]       # classify: how many scores one input gets


def architecture_default(architecture: str) -> Tuple[str, str]:
    """(runner, convert) vLLM derives from an architecture name alone (registry first, then _SUFFIX_TO_DEFAULTS)."""
    if architecture in GENERATIVE_DESPITE_SUFFIX:
        return "generate", "none"
    if architecture in POOLING_DESPITE_SUFFIX:
        return "pooling", POOLING_DESPITE_SUFFIX[architecture]
    for suffix, runner, convert in SUFFIX_DEFAULTS:
        if architecture.endswith(suffix):
            return runner, convert
    return "generate", "none"


def num_labels(config: Mapping[str, Any]) -> int:
    """transformers' PretrainedConfig: num_labels if given, else len(id2label), else 2."""
    if config.get("num_labels") is not None:
        return int(config["num_labels"])
    labels = config.get("id2label")
    return len(labels) if isinstance(labels, Mapping) and labels else 2


def st_pooling(modules: Any) -> bool:
    """A sentence-transformers modules.json with a Pooling module (vLLM get_pooling_config reads it and answers 'pooling')."""
    return isinstance(modules, list) and any(isinstance(m, Mapping) and str(m.get("type", "")).endswith("Pooling") for m in modules)


def detect(architecture: str, hidden_size: int, labels: int, is_causal: Optional[bool], st: bool, dense_out: Optional[int],
           forced: Any) -> Optional[Pooling]:
    """The pooling plan of a model, or None for a generative one. `labels`: num_labels() of its config; `st`: st_pooling() of its
    modules.json; `dense_out`: the out_features of a sentence-transformers Dense module; `forced`: the inventory's `pooling`
    (None: not given)."""
    runner, convert = architecture_default(architecture)
    if forced is False:
        return None
    if forced in TASKS:
        task = str(forced)
        native = runner == "pooling" and convert == task
        why = (f"pooling: {task} in the inventory" + ("" if native or st and task == "embed" else
               f"; vLLM would run {architecture} as {runner}, so the plan passes the conversion ({task}) itself"))
        convert_flag = "none" if native or (st and task == "embed") else task
    elif st:
        task, convert_flag = "embed", "none"   # vLLM infers both from modules.json itself
        why = ("modules.json names a sentence-transformers Pooling module: vLLM serves it as an embedding model whatever its "
               f"architecture ({architecture}; vllm 0.32 config/model.py _get_default_runner_type, get_pooling_config)")
    elif runner == "pooling":
        task, convert_flag = convert, "none"
        why = (f"{architecture} is a pooling architecture in vLLM (registry.py, or the suffix rule of config/model.py "
               f"_SUFFIX_TO_DEFAULTS: {convert})")
    else:
        return None
    n = labels if task == "classify" else None
    score = task == "embed" or n == 1
    encoder_only = architecture in ENCODER_ONLY_ARCHITECTURES or is_causal is False
    # a Dense module whose config was not read (-1): the length is not known, verify then checks only the shape
    dims = None if task != "embed" or (dense_out or 0) < 0 else (dense_out or hidden_size or None)
    return Pooling(task, score, convert_flag, why, encoder_only, dims, n)


def max_len_limit(architecture: str, mpe: int, pad_token_id: Optional[int], max_seq_length: Optional[int]) -> Tuple[int, str]:
    """The longest request a pooling model takes, and why: sentence_bert_config.json's max_seq_length wins (vLLM 0.32
    config/model.py _get_and_verify_max_len: `derived_max_model_len = encoder_config["max_seq_length"]`), else
    max_position_embeddings less RoBERTa's position offset (roberta.py: positions start at padding_idx + 1)."""
    if max_seq_length:
        return int(max_seq_length), ("sentence_bert_config.json max_seq_length (vLLM takes it as the model's length: "
                                     "config/model.py _get_and_verify_max_len)")
    if architecture in ROBERTA_POSITION_ARCHITECTURES:
        pad = 1 if pad_token_id is None else int(pad_token_id)   # RobertaConfig's default pad_token_id
        return mpe - pad - 1, (f"max_position_embeddings {mpe} less RoBERTa's position offset pad_token_id + 1 = {pad + 1} (vLLM "
                               "roberta.py: positions start at padding_idx + 1, so a longer request indexes past the table)")
    return mpe, "max_position_embeddings"


def runner_args(p: Pooling, version: Version) -> List[str]:
    """The flags that make vLLM `version` serve the model as this pooling task: --runner pooling (explicit: vLLM logs
    'Pass the value explicitly') and --convert where vLLM would not infer it; --task before RUNNER_FLAGS_SINCE."""
    if version >= RUNNER_FLAGS_SINCE:
        return ["--runner", "pooling"] + (["--convert", p.convert] if p.convert != "none" else [])
    # the --task era: cross-encoders (one label) are task score, which opens /score and /rerank (api_server.py of 0.8-0.9)
    return ["--task", "score" if p.task == "classify" and p.score else p.task]


def endpoints(p: Pooling, version: Version) -> List[str]:
    """The API paths vLLM `version` answers for this model (besides /v1/models and /health)."""
    if version >= RUNNER_FLAGS_SINCE:
        # entrypoints/pooling/factories.py register_pooling_api_routers: /pooling for every pooling task, /classify and
        # /v1/embeddings by task, the score routers where enable_scoring_api (embed, or classify with num_labels == 1)
        paths = ["/v1/embeddings"] if p.task == "embed" else ["/classify"]
        return paths + ["/pooling"] + (list(SCORE_PATHS) if p.score else [])
    # api_server.py of the --task era: embed -> embeddings, pooling, score; score -> score, rerank, pooling; classify -> classify
    if p.task == "embed":
        return ["/v1/embeddings", "/pooling", "/score", "/v1/score"]
    if p.score:
        return ["/pooling"] + list(SCORE_PATHS)
    return ["/classify", "/pooling"]


def health_probe(p: Pooling, version: Version) -> Dict[str, Any]:
    """The request the health gate and verify send (the caller adds "model"), and the field of the answer's data[0] that must
    hold a number or a list of them."""
    if p.task == "classify" and not p.score and version < RUNNER_FLAGS_SINCE:
        # /classify of the --task era is not in every release read; /pooling is in all of them (runner_type pooling)
        return {"path": "/pooling", "body": {"input": "ping"}, "expect": "data"}
    if p.task == "embed":
        return {"path": "/v1/embeddings", "body": {"input": "ping"}, "expect": "embedding"}
    if p.score:
        # /v1/score, not /score: vLLM asks for the API key only under /v1 (authenticate.py GUARDED_PREFIX at 0.32.0)
        return {"path": "/v1/score", "body": {"text_1": "ping", "text_2": "pong"}, "expect": "score"}
    return {"path": "/classify", "body": {"input": "ping"}, "expect": "probs"}


def check_inventory_value(value: Any, where: str) -> None:
    if not (value is False or (isinstance(value, str) and value in TASKS)):
        raise PoolingError(f"{where}.pooling={value!r}: embed or classify (serve it as that pooling task), or false (serve it as "
                           "a generative model); remove the key to let the model's config and side files decide")


def answer_shape(task: str, answer: Any, dimensions: Optional[int], labels: Optional[int], score: bool = False) -> Optional[str]:
    """None when `answer` (a pooling endpoint's JSON) has the shape the plan expects, else what is wrong."""
    data = answer.get("data") if isinstance(answer, Mapping) else None
    if not isinstance(data, list) or not data or not isinstance(data[0], Mapping):
        return f"the answer has no data[0] (got {str(answer)[:200]!r})"
    first = data[0]
    if task == "embed":
        vec = first.get("embedding")
        if not isinstance(vec, list) or not vec or not all(isinstance(x, (int, float)) for x in vec):
            return "data[0].embedding is not a list of numbers"
        if dimensions and len(vec) != dimensions:
            return f"data[0].embedding has {len(vec)} numbers; the plan expects {dimensions} (hidden_size or the Dense layer's out_features)"
        return None
    if score:
        if not isinstance(first.get("score"), (int, float)):
            return "data[0].score is not a number"
        return None
    probs = first.get("probs")
    if not isinstance(probs, list) or not probs:
        return "data[0].probs is not a list"
    if labels and len(probs) != labels:
        return f"data[0].probs has {len(probs)} entries; the model has {labels} labels"
    return None


def gate_request(instance: Mapping[str, Any], model: str) -> Tuple[str, Dict[str, Any], str]:
    """(path, body, expect) of the health gate's request to one instance: a one-token completion for a generative model (no
    `runner` in its plan), the plan's health_probe for a pooling one (the pooling plan contract)."""
    if instance.get("runner") == "pooling":
        probe = instance.get("health_probe") or {}
        if not probe.get("path") or not probe.get("expect"):
            raise PoolingError(f"the plan of {instance.get('name', 'this instance')} says runner pooling but has no health_probe "
                               "with path and expect: rerun playbooks/plan.yml with this collection")
        return str(probe["path"]), dict(probe.get("body") or {}, model=model), str(probe["expect"])
    return "/v1/completions", {"model": model, "prompt": "Hello", "max_tokens": 1, "temperature": 0}, "choices"


def gate_passed(body: Any, expect: str) -> bool:
    """Whether an answer to gate_request is a served one: choices for a completion; data[0].<expect> a number or a non-empty
    list for a pooling endpoint."""
    if not isinstance(body, Mapping):
        return False
    if expect == "choices":
        return bool(body.get("choices"))
    data = body.get("data")
    if not isinstance(data, list) or not data or not isinstance(data[0], Mapping):
        return False
    value = data[0].get(expect)
    return (isinstance(value, (int, float)) and not isinstance(value, bool)) or (isinstance(value, list) and bool(value))
