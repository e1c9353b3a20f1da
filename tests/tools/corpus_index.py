"""Check the corpus of published config.json files and write its README table.

Every tests/fixtures/corpus/<slug>.json is
  {"model": <Hugging Face id>, "source": <URL the text was read from>, "note": <optional provenance note>,
   "categories": [...], "config": {<the whole published config.json>},
   "files": {<optional side files, verbatim>}, "cut": [<optional keys cut from a side file>],
   "excerpt": <optional, true when config is not the whole file>}

  python tests/tools/corpus_index.py          # rewrite tests/fixtures/corpus/README.md
  python tests/tools/corpus_index.py --check  # fail when the README is stale or a file is malformed
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fixtures" / "corpus"
README = CORPUS / "README.md"

CATEGORIES = {
    "dense": "one dense decoder stack",
    "moe": "mixture of experts",
    "mla": "multi-head latent attention (kv_lora_rank)",
    "sliding": "sliding-window or chunked-local attention in some or all layers",
    "hybrid": "mamba / linear-attention / gated-delta / short-convolution layers next to attention",
    "multimodal": "a vision or audio encoder next to the language model",
    "pooling-embed": "an embedding model (vLLM pooling runner, /v1/embeddings)",
    "pooling-classify": "a cross-encoder, reranker or *ForSequenceClassification (/score, /rerank, /classify)",
    "gptq": "quantization_config quant_method gptq",
    "awq": "quantization_config quant_method awq",
    "fp8": "quantization_config quant_method fp8 (or a compressed-tensors FP8 scheme)",
    "mxfp4": "quantization_config quant_method mxfp4",
    "nvfp4": "NVFP4 / ModelOpt quantization (quant_method modelopt or compressed-tensors nvfp4)",
    "bnb": "bitsandbytes quantization",
    "gguf": "a GGUF checkpoint: the base config.json the GGUF file is served with",
    "remote-code": "auto_map or a model_type transformers does not ship: needs trust_remote_code",
    "float16-refusing": "a model type vLLM refuses in float16 (_FLOAT16_NOT_SUPPORTED_MODELS, vllm/config/model.py)",
    "mistral-format": "published with Mistral's params.json",
    "long-context": "rope scaling (llama3, yarn, longrope, linear) or 128k+ positions",
}

# vLLM 0.32.0 vllm/config/model.py _FLOAT16_NOT_SUPPORTED_MODELS
FLOAT16_REFUSED_MODEL_TYPES = frozenset({"gemma2", "gemma3", "gemma3_text", "glm4"})

MINIMUM = {
    "pooling": 8, "multimodal": 6, "gptq": 2, "awq": 2, "fp8": 2, "mxfp4": 2, "nvfp4": 2, "bnb": 2,
    "gguf": 2, "mla": 4, "hybrid": 5, "float16-refusing": 5, "remote-code": 3,
}
# Categories below their minimum, each with the reason; a category leaves this table the moment it is filled
# (the unit test fails while a filled category is still listed, and fails for any unlisted shortfall).
SHORTFALL = {
    "awq": "no whole AWQ config.json with a nameable source was reachable: the indexed copies of AWQ configs are "
           "docs excerpts with elided keys (TheBloke/zephyr-7B-alpha-AWQ in transformers' docs), printouts of a "
           "loaded Qwen3Config in a report, or code that writes one; no repository holds an *-AWQ model folder's "
           "config.json (looked up by path for the Qwen2.5/Qwen3/Llama-3 AWQ repos and by repository name)",
    "nvfp4": "no whole NVFP4 / ModelOpt config.json with a nameable source was reachable; the one public copy found "
             "is only the side file hf_quant_config.json of an NVFP4 DeepSeek-R1 export, without its config.json, "
             "and the repositories named for NVFP4 hold serving recipes and benchmarks, not the exported folders",
    "bnb": "one published bitsandbytes config.json (a Molmo NF4 export) was reachable; the other indexed copies "
           "are BitsAndBytesConfig printouts or code, and the repositories named *-bnb-4bit hold apps, not the "
           "unsloth model folders",
    "mxfp4": "openai/gpt-oss-120b is the one whole MXFP4 config.json reachable with a nameable source; the "
             "gpt-oss-20b copies found are the dequantized BF16 form (gpt-oss-20b-bf16.json), one whose "
             "quant_method was edited to gptq, the original/ (non-transformers) config, or quotes in articles "
             "whose file cannot be named",
}
MINIMUM_FILES = 80
MAX_EXCERPTS = 10
KNOWN_KEYS = {"model", "source", "note", "categories", "config", "files", "cut", "excerpt", "exception"}


def load() -> Dict[str, Dict[str, Any]]:
    """Every corpus file by slug, in name order."""
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(CORPUS.glob("*.json"))}


def model_types(config: Dict[str, Any]) -> List[str]:
    """The config's model_type and those of its text/language sub-configs."""
    found = [config.get("model_type")]
    for key in ("text_config", "language_config", "llm_config"):
        sub = config.get(key)
        if isinstance(sub, dict):
            found.append(sub.get("model_type"))
    return [t for t in found if isinstance(t, str) and t]


def problems(slug: str, doc: Dict[str, Any]) -> List[str]:
    """What is wrong with one corpus file, as sentences that say what to fix."""
    out = []
    extra = set(doc) - KNOWN_KEYS
    if extra:
        out.append(f"{slug}: unknown keys {sorted(extra)}; use only {sorted(KNOWN_KEYS)}")
    if not str(doc.get("source", "")).startswith("https://"):
        out.append(f"{slug}: source must be the https URL the config.json was read from")
    if not isinstance(doc.get("model"), str) or "/" not in doc.get("model", ""):
        out.append(f"{slug}: model must be the Hugging Face id (owner/name) the config.json was published under")
    cats = doc.get("categories")
    if not isinstance(cats, list) or not cats:
        out.append(f"{slug}: categories must be a non-empty list from {sorted(CATEGORIES)}")
    else:
        unknown = [c for c in cats if c not in CATEGORIES]
        if unknown:
            out.append(f"{slug}: unknown categories {unknown}; pick from {sorted(CATEGORIES)}")
    config = doc.get("config")
    if not isinstance(config, dict):
        out.append(f"{slug}: config must be the published config.json object")
        return out
    if not doc.get("exception"):
        if not model_types(config):
            out.append(f"{slug}: config has no model_type; add an 'exception' entry saying why the published file lacks it")
        if not (config.get("architectures") or (config.get("text_config") or {}).get("architectures")):
            out.append(f"{slug}: config has no architectures; add an 'exception' entry saying why the published file lacks it")
    if isinstance(cats, list) and "float16-refusing" in cats and not FLOAT16_REFUSED_MODEL_TYPES & set(model_types(config)):
        out.append(f"{slug}: float16-refusing but no model_type in {sorted(FLOAT16_REFUSED_MODEL_TYPES)}")
    if isinstance(cats, list) and "gguf" in cats and not any(k.endswith(".gguf") for k in doc.get("files") or {}):
        out.append(f"{slug}: a gguf entry names its .gguf file under files")
    if "cut" in doc and not (isinstance(doc["cut"], list) and doc["cut"]):
        out.append(f"{slug}: cut lists the keys cut from side files, or is left out")
    return out


def counts(corpus: Dict[str, Dict[str, Any]]) -> Dict[str, int]:
    """Files per category, plus 'pooling' (embed and classify together)."""
    out = {c: 0 for c in CATEGORIES}
    for doc in corpus.values():
        for c in doc.get("categories", []):
            if c in out:
                out[c] += 1
    out["pooling"] = out["pooling-embed"] + out["pooling-classify"]
    return out


def render(corpus: Dict[str, Dict[str, Any]]) -> str:
    """The README: format, categories with counts, and one row per file."""
    n = counts(corpus)
    lines = [
        "# Corpus of published config.json files",
        "",
        "<!-- generated by tests/tools/corpus_index.py; edit the JSON files, then run it -->",
        "",
        f"{len(corpus)} files. Each `<slug>.json` is one model's published `config.json`, whole and with its",
        "values as published, and where it was read:",
        "",
        "```",
        '{"model": "<Hugging Face id>", "source": "<URL the text was read from>", "note": "<provenance>",',
        ' "categories": [...], "config": {<the whole config.json>},',
        ' "files": {"<side file>": <verbatim>}, "cut": ["<keys cut from a side file>"], "excerpt": true}',
        "```",
        "",
        "`files`, `cut`, `excerpt` and `note` are optional. A GGUF entry carries the base `config.json` the",
        "GGUF file is served with and names the `.gguf` file under `files` (the weights are not stored).",
        "Where `source` is a GitHub copy, `note` names the published model file it mirrors.",
        "",
        "## Categories",
        "",
        "| category | files | meaning |",
        "| --- | --- | --- |",
    ]
    for cat, meaning in CATEGORIES.items():
        lines.append(f"| {cat} | {n[cat]} | {meaning} |")
    short = [c for c in MINIMUM if n[c] < MINIMUM[c]]
    if short:
        lines += ["", "## Below the minimum", "", "| category | files | minimum | why |", "| --- | --- | --- | --- |"]
        for cat in short:
            lines.append(f"| {cat} | {n[cat]} | {MINIMUM[cat]} | {SHORTFALL.get(cat, 'not recorded')} |")
    lines += ["", "## Files", "", "| file | model | categories | source |", "| --- | --- | --- | --- |"]
    for slug, doc in corpus.items():
        cats = ", ".join(doc.get("categories", []))
        lines.append(f"| {slug}.json | {doc.get('model', '')} | {cats} | {doc.get('source', '')} |")
    return "\n".join(lines) + "\n"


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="fail when README.md is stale or a file is malformed")
    args = parser.parse_args(argv)
    corpus = load()
    errors = [p for slug, doc in corpus.items() for p in problems(slug, doc)]
    text = render(corpus)
    if args.check:
        if not README.exists() or README.read_text(encoding="utf-8") != text:
            errors.append(f"{README.relative_to(ROOT)} is stale: run python tests/tools/corpus_index.py")
        for e in errors:
            print(e, file=sys.stderr)
        return 1 if errors else 0
    README.write_text(text, encoding="utf-8")
    for e in errors:
        print(e, file=sys.stderr)
    print(f"wrote {README.relative_to(ROOT)}: {len(corpus)} files")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
