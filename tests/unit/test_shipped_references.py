"""Every file the collection ships stands alone: it names no file the repository does not contain.

Two checks over the shipped files (what git knows about, tracked or new and not ignored; in a copy
without git, such as an unpacked build, the tree minus galaxy.yml's build_ignore):

(a) no mention of the team's private notes (the note file names, `shared/`, `seeds/`) in any shipped
    file: the facts the collection relies on are in docs/sources.md with their upstream sources, the
    field reports in docs/field_reports.md;
(b) in Markdown files, Python files (comments and strings) and YAML files, every relative Markdown link
    and every path of this repository (one starting with a top-level folder: docs/, roles/, plugins/,
    playbooks/, tests/, inventories/, molecule/, changelogs/, meta/, or a bare `name.md`) resolves to
    a shipped file or folder, and a `#anchor` on a Markdown target to a heading or `<a id>` there.
    Upstream paths such as `vllm/config/model.py` start with no folder of this repository and are
    not checked.
"""

from __future__ import annotations

import fnmatch
import io
import pathlib
import posixpath
import re
import subprocess
import tokenize
from typing import Dict, Iterable, Iterator, List, Optional, Set, Tuple

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]

# The team's notes, which users of the collection do not have.
NOTE_NAMES = ("KNOWLEDGE", "MODELS", "DESIGN", "EDGE", "TENANCY", "OBSERVABILITY", "MULTINODE", "RELIABILITY", "STYLE",
              "LAB", "MODELSCOPE")
_NOTES = "|".join(NOTE_NAMES)
NOTE_RE = re.compile(
    rf"\b(?:{_NOTES})\.md\b"                      # KNOWLEDGE.md, MODELS.md ...
    r"|(?<![\w.-])(?:shared|seeds)/"              # shared/seeds/, ../shared/EDGE.md, /work/shared/
    r"|\bKNOWLEDGE\b"                             # "KNOWLEDGE 7", "KNOWLEDGE part B"
    rf"|\b(?:{_NOTES}) (?:§ ?)?\d"                # "MODELS 3", "EDGE § 2"
    rf"|\((?:{_NOTES})\)")                        # "(LAB)"

TOP_FOLDERS = ("docs", "roles", "plugins", "playbooks", "tests", "inventories", "molecule", "changelogs", "meta")
# A path of this repository: a top-level folder, then path characters; an optional #anchor.
PATH_RE = re.compile(r"(?<![\w./$\-{}<>*@:])((?:%s)/[\w./\-]*)(#[\w\-]+)?" % "|".join(TOP_FOLDERS))
# A bare Markdown file name (not part of a longer path).
MD_NAME_RE = re.compile(r"(?<![\w./\-])([\w\-]+\.md)\b(#[\w\-]+)?")
# [text](target): a relative Markdown link.
LINK_RE = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
HEADING_RE = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
ANCHOR_RE = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")

# Files the repository will hold but does not yet, each with where it comes from.
NOT_YET: Dict[str, str] = {
    "tests/fixtures/gpu/h200x8-vllm-0.26.0.json": "written by the first 8-GPU session (tests/gpu/README.md)",
}
# This file spells the patterns it looks for.
SELF = "tests/unit/test_shipped_references.py"


def _galaxy_ignores(root: pathlib.Path) -> List[str]:
    galaxy = root / "galaxy.yml"
    if not galaxy.is_file():
        return []
    return [str(p) for p in (yaml.safe_load(galaxy.read_text(encoding="utf-8")) or {}).get("build_ignore") or []]


def _ignored(rel: str, patterns: Iterable[str]) -> bool:
    """ansible-galaxy's build_ignore rule: a pattern matches the path, or a folder above it."""
    parts = rel.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    for pattern in patterns:
        pattern = pattern.rstrip("/")
        if any(fnmatch.fnmatch(p, pattern) or fnmatch.fnmatch(pathlib.PurePosixPath(p).name, pattern) for p in prefixes):
            return True
    return False


def shipped_files(root: pathlib.Path) -> List[str]:
    """Repository-relative paths of the files that ship: git's (tracked, or new and not ignored) in a work tree
    whose top is `root`; otherwise every file under `root` outside galaxy.yml's build_ignore and .git."""
    try:
        top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                             check=True).stdout.strip()
        if pathlib.Path(top).resolve() == root.resolve():
            out = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                 capture_output=True, text=True, check=True).stdout
            return sorted({f for f in out.split("\0") if f and (root / f).is_file()})
    except (OSError, subprocess.CalledProcessError):
        pass
    ignores = _galaxy_ignores(root) + [".git"]
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and not _ignored(p.relative_to(root).as_posix(), ignores))


def _text(root: pathlib.Path, rel: str) -> Optional[str]:
    try:
        return (root / rel).read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None     # a binary file names nothing


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"<[^>]+>", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(markdown: str) -> Set[str]:
    """The anchors a Markdown file offers: its headings' slugs (GitHub's -1, -2 for repeats) and <a id="...">."""
    found: Set[str] = set(ANCHOR_RE.findall(markdown))
    seen: Dict[str, int] = {}
    fenced = False
    for line in markdown.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        match = None if fenced else HEADING_RE.match(line)
        if match:
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def _pieces(rel: str, text: str) -> Iterator[Tuple[int, str]]:
    """(line, text) of what is checked for paths: a Python file's comments and strings, every line of the others."""
    if rel.endswith(".py"):
        try:
            for tok in tokenize.generate_tokens(io.StringIO(text).readline):
                if tok.type in (tokenize.COMMENT, tokenize.STRING):
                    yield tok.start[0], tok.string
        except (tokenize.TokenError, IndentationError, SyntaxError):
            yield from enumerate(text.splitlines(), 1)
    else:
        yield from enumerate(text.splitlines(), 1)


class Tree:
    """The shipped files of one checkout, for resolving paths."""

    def __init__(self, root: pathlib.Path, files: List[str]):
        self.root = root
        self.files = set(files)
        self.folders: Set[str] = set()
        for rel in files:
            parent = pathlib.PurePosixPath(rel).parent
            while str(parent) != ".":
                self.folders.add(str(parent))
                parent = parent.parent
        self.names = {pathlib.PurePosixPath(f).name for f in files}
        self.ignores = _galaxy_ignores(root) + self._gitignore()
        self._anchors: Dict[str, Set[str]] = {}

    def _gitignore(self) -> List[str]:
        path = self.root / ".gitignore"
        if not path.is_file():
            return []
        return [line.strip().lstrip("/") for line in path.read_text(encoding="utf-8").splitlines()
                if line.strip() and not line.startswith(("#", "!"))]

    def exists(self, rel: str) -> bool:
        rel = rel.rstrip("/")
        return rel in self.files or rel in self.folders

    def anchors_of(self, rel: str) -> Set[str]:
        if rel not in self._anchors:
            self._anchors[rel] = anchors(_text(self.root, rel) or "")
        return self._anchors[rel]

    def resolve(self, path: str, base: str) -> Optional[str]:
        """The shipped file or folder a repository path names: from the top, from the folder of the file that
        names it or one above (a role's `meta/...`, a scenario's `tests/...`), or as the end of a shipped path."""
        path = path.rstrip("/")
        parent = pathlib.PurePosixPath(base).parent
        candidates = [path]
        while True:
            candidates.append(str(parent / path) if str(parent) != "." else path)
            if str(parent) == ".":
                break
            parent = parent.parent
        for candidate in candidates:
            if self.exists(candidate):
                return candidate
        tails = sorted(f for f in self.files | self.folders if f.endswith("/" + path))
        return tails[0] if tails else None

    def skip(self, path: str) -> bool:
        """Not a reference to check: an elision (tests/unit/.../x.py), a placeholder (playbooks/NAME), an output
        the repository does not ship (tests/output/, a .secrets folder), or a file that is still to come."""
        clean = path.rstrip("/.")
        parts = clean.split("/")
        return ("..." in clean or any(re.fullmatch(r"[A-Z][A-Z_]*", p) for p in parts[1:])
                or _ignored(clean, self.ignores) or clean in NOT_YET)


def note_mentions(root: pathlib.Path, files: Iterable[str]) -> List[str]:
    """(a): every mention of a team note in the shipped files, as 'path:line: text'."""
    problems = []
    for rel in files:
        if rel == SELF:
            continue
        text = _text(root, rel)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for match in NOTE_RE.finditer(line):
                problems.append(f"{rel}:{number}: names a team note ({match.group(0)!r}): {line.strip()[:160]}")
    return problems


def _check_anchor(tree: Tree, target: str, anchor: Optional[str]) -> Optional[str]:
    if not anchor or not target.endswith(".md") or target not in tree.files:
        return None
    name = anchor.lstrip("#")
    if name in tree.anchors_of(target):
        return None
    return f"{target} has no anchor #{name}"


def broken_references(root: pathlib.Path, files: Iterable[str]) -> List[str]:
    """(b): links and repository paths in Markdown, Python and YAML files that name no shipped file or anchor."""
    files = list(files)
    tree = Tree(root, files)
    problems = []
    for rel in files:
        if rel == SELF or not rel.endswith((".md", ".py", ".yml", ".yaml")):
            continue
        text = _text(root, rel)
        if text is None:
            continue
        here = pathlib.PurePosixPath(rel).parent
        for number, piece in _pieces(rel, text):
            if rel.endswith(".md"):
                for target in LINK_RE.findall(piece):
                    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
                        continue    # a URL (https:, mailto:) or an absolute path on a host
                    path, _sep, anchor = target.partition("#")
                    resolved = posixpath.normpath(posixpath.join(str(here), path)) if path else rel
                    if not tree.exists(resolved):
                        problems.append(f"{rel}:{number}: link to {target}: no such file in the repository")
                        continue
                    error = _check_anchor(tree, resolved, anchor and "#" + anchor)
                    if error:
                        problems.append(f"{rel}:{number}: link to {target}: {error}")
            if rel.endswith(".md"):
                piece = LINK_RE.sub("", piece)      # link targets are checked above, as links
            for match in PATH_RE.finditer(piece):
                path, anchor = match.group(1).rstrip("."), match.group(2)
                if tree.skip(path):
                    continue
                found = tree.resolve(path, rel)
                if found is None:
                    problems.append(f"{rel}:{number}: names {path}: no such file or folder in the repository")
                    continue
                error = _check_anchor(tree, found, anchor)
                if error:
                    problems.append(f"{rel}:{number}: names {path}{anchor}: {error}")
            for match in MD_NAME_RE.finditer(piece):
                name, anchor = match.group(1), match.group(2)
                if name not in tree.names:
                    problems.append(f"{rel}:{number}: names {name}: no such file in the repository")
                elif anchor:
                    local = str(here / name) if str(here) != "." else name
                    target = local if local in tree.files else tree.resolve(name, rel)
                    error = target and _check_anchor(tree, target, anchor)
                    if error:
                        problems.append(f"{rel}:{number}: names {name}{anchor}: {error}")
    return problems


def test_no_shipped_file_names_a_team_note():
    problems = note_mentions(ROOT, shipped_files(ROOT))
    assert not problems, ("the collection's users do not have the team's notes: cite the upstream source or "
                          "docs/sources.md / docs/field_reports.md instead:\n" + "\n".join(problems))


def test_every_reference_resolves():
    problems = broken_references(ROOT, shipped_files(ROOT))
    assert not problems, "references to files or anchors the repository does not contain:\n" + "\n".join(problems)


# --- the checks themselves, on a planted tree -------------------------------------------------------------

def _plant(root: pathlib.Path, files: Dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


GOOD_TREE = {
    "galaxy.yml": "build_ignore:\n  - .cache\n  - '*.tar.gz'\n  - tests/output\n",
    "README.md": "# Demo\n\nSee [the sources](docs/sources.md#sm70), docs/guide.md and [below](#demo).\n",
    "docs/sources.md": "# Sources\n\n<a id=\"sm70\"></a>\nsm70 facts, from vLLM's `vllm/config/model.py`.\n\n## Two words\n",
    "docs/guide.md": "# Guide\n\nBack to [the README](../README.md), [two](sources.md#two-words); field report 000.\n"
                     "Results land in tests/output/run/ (not shipped).\n",
    "roles/demo/meta/argument_specs.yml": "---\n# each role's meta/argument_specs.yml; docs/guide.md\nargument_specs: {}\n",
    "plugins/module_utils/_demo.py": "# vLLM platforms/cuda.py supported_dtypes (docs/sources.md#sm70)\nWHY = 'see docs/guide.md'\n",
    ".cache/junk.md": "KNOWLEDGE.md and [x](nowhere.md) are outside the shipped files\n",
    "demo.tar.gz": "KNOWLEDGE.md\n",
}


def test_planted_tree_without_git_is_clean(tmp_path):
    _plant(tmp_path, GOOD_TREE)
    files = shipped_files(tmp_path)
    assert ".cache/junk.md" not in files and "demo.tar.gz" not in files     # galaxy.yml's build_ignore
    assert "docs/guide.md" in files
    assert note_mentions(tmp_path, files) == []
    assert broken_references(tmp_path, files) == []


def test_planted_bad_references_are_found(tmp_path):
    bad = dict(GOOD_TREE)
    bad["docs/guide.md"] += "As KNOWLEDGE.md 0 says; the seeds (shared/seeds/) too.\n"
    bad["plugins/module_utils/_demo.py"] += ("# docs/missing.md and docs/sources.md#nowhere\n"
                                             "MSG = 'float16 (KNOWLEDGE 2)'\n")
    bad["roles/demo/tasks/main.yml"] = "---\n# see docs/gone.md and NOTES.md\n- name: Demo (EDGE.md 1)\n  ansible.builtin.debug: {}\n"
    bad["README.md"] += "A [broken link](docs/absent.md) and a [bad anchor](docs/sources.md#sm80).\n"
    _plant(tmp_path, bad)
    files = shipped_files(tmp_path)
    notes = note_mentions(tmp_path, files)
    # KNOWLEDGE.md, shared/ and seeds/ in the guide; KNOWLEDGE in a message; EDGE.md in a task name
    assert [n.split(":")[0] for n in notes] == ["docs/guide.md"] * 3 + ["plugins/module_utils/_demo.py", "roles/demo/tasks/main.yml"]
    broken = broken_references(tmp_path, files)
    expected = ["README.md:4: link to docs/absent.md", "README.md:4: link to docs/sources.md#sm80",
                "plugins/module_utils/_demo.py:3: names docs/missing.md", "plugins/module_utils/_demo.py:3: names docs/sources.md#nowhere",
                "roles/demo/tasks/main.yml:2: names docs/gone.md", "roles/demo/tasks/main.yml:2: names NOTES.md",
                # a note's name is also a file the repository does not contain
                "docs/guide.md:5: names KNOWLEDGE.md", "roles/demo/tasks/main.yml:3: names EDGE.md"]
    assert len(broken) == len(expected), "\n".join(broken)
    for problem, start in zip(sorted(broken), sorted(expected)):
        assert problem.startswith(start), (problem, start)


def test_upstream_paths_and_urls_are_not_checked(tmp_path):
    tree = dict(GOOD_TREE)
    tree["docs/guide.md"] = ("# Guide\n\nvLLM's `vllm/config/model.py`, `v1/core/kv_cache_utils.py`, recipes `Qwen/Qwen3.5.md`,\n"
                             "github.com/gpustack/gpustack/blob/main/docs/installation/hygon/installation.md and\n"
                             "[nginx](https://nginx.org/en/docs/http/ngx_http_upstream_module.html).\n")
    _plant(tmp_path, tree)
    assert broken_references(tmp_path, shipped_files(tmp_path)) == []


def test_git_work_tree_lists_what_git_knows(tmp_path):
    _plant(tmp_path, {"README.md": "# x\n", "docs/a.md": "# a\n", "build/out.md": "KNOWLEDGE.md\n", ".gitignore": "build/\n"})
    try:
        subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return      # no git here: the fallback above is what runs
    files = shipped_files(tmp_path)
    assert "docs/a.md" in files and "build/out.md" not in files


def test_slug_is_githubs():
    assert slug("Field report 004: Qwen3.5-35B-A3B with vLLM in Docker") == "field-report-004-qwen35-35b-a3b-with-vllm-in-docker"
    assert slug("vLLM: the releases read") == "vllm-the-releases-read"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n<a id=\"x\"></a>\n") == {"a", "a-1", "x"}
