# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""A folder of configuration files that is only ever replaced by a copy its program accepted: which files
differ from the live folder, which are stale, and the diff to show (never a secret file's content).

The config_tree module does the file system work around these pure functions: the whole tree is written
to a staging folder, checked there (`nginx -t -c <staging>/nginx.conf`), and only then the files that differ
are installed. The files use paths relative to their folder, so the staging copy and the live copy are the
same bytes (nginx resolves a relative `include`, `js_path` or `js_import` against the folder of the main
configuration file it was given). `write_beside` is the one file write both the config_tree and the
gateway_rotation modules use to replace a live file."""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple


class ConfigTreeError(ValueError):
    """A file list the module cannot install as given."""


def read_text(path: str) -> Optional[str]:
    """The file's text, or None when there is no file (a state or lock file that was never written)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def write_beside(target: str, content: bytes, mode: int, uid: int, gid: int) -> None:
    """Write `content` beside `target` (owner and mode set before it is visible), then rename it over `target`: a reader
    sees the old file or the new one, never a part."""
    temp = os.path.join(os.path.dirname(target), "." + os.path.basename(target) + ".llmfleet-new")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, content)
        os.fchown(fd, uid, gid)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    os.replace(temp, target)


@dataclass(frozen=True)
class Wanted:
    """One file of the tree: its path under the folder, its bytes and mode, and whether its content is secret."""
    path: str
    content: bytes
    mode: int
    secret: bool


@dataclass(frozen=True)
class Present:
    """A live file as found: its bytes, mode and owner (None when missing)."""
    content: bytes
    mode: int
    uid: int
    gid: int


def parse_mode(text: Any) -> int:
    """An octal mode given as text ("0644") to its number; anything else is refused."""
    value = str(text)
    if not value or any(c not in "01234567" for c in value) or len(value) > 4:
        raise ConfigTreeError(f"mode {text!r} is not an octal mode such as 0644")
    return int(value, 8)


def check_path(path: str) -> str:
    """A relative path inside the folder (no `..`, not absolute, no empty part)."""
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ConfigTreeError(f"{path!r} is not a plain relative path inside the folder: use a path such as llmfleet/x.conf")
    return path


def wanted_files(files: Sequence[Mapping[str, Any]], private_files: Sequence[Mapping[str, Any]]) -> List[Wanted]:
    """The module's two lists as one, each path once."""
    out: List[Wanted] = []
    seen = set()
    for entries, secret in ((files, False), (private_files, True)):
        for entry in entries:
            path = check_path(str(entry["path"]))
            if path in seen:
                raise ConfigTreeError(f"{path} is given twice: keep one entry per path")
            seen.add(path)
            out.append(Wanted(path, str(entry["content"]).encode("utf-8"), parse_mode(entry["mode"]), secret))
    return out


def differing(wanted: Sequence[Wanted], present: Mapping[str, Optional[Present]], uid: int, gid: int) -> List[str]:
    """The wanted paths whose live file is missing or differs in bytes, mode or owner."""
    out = []
    for item in wanted:
        live = present.get(item.path)
        if live is None or live.content != item.content or live.mode != item.mode or (live.uid, live.gid) != (uid, gid):
            out.append(item.path)
    return out


def stale(found: Iterable[str], wanted: Sequence[Wanted], prune: Sequence[str]) -> List[str]:
    """Files found under a pruned folder that the tree no longer has (an earlier layout's listeners would stay
    live through `include llmfleet/*.conf`)."""
    keep = {w.path for w in wanted}
    dirs = [check_path(p.rstrip("/")) for p in prune]
    return sorted(p for p in found if p not in keep and posixpath.dirname(p) in dirs)


def diff_entries(wanted: Sequence[Wanted], present: Mapping[str, Optional[Present]], changed: Sequence[str],
                 removed: Sequence[str], root: str) -> List[Dict[str, str]]:
    """Ansible's diff for each changed or removed file; a secret file shows only that it changes."""
    by_path = {w.path: w for w in wanted}
    out: List[Dict[str, str]] = []
    for path in changed:
        item, live = by_path[path], present.get(path)
        name = posixpath.join(root, path)
        if item.secret:
            out.append({"before_header": name, "after_header": name,
                        "before": "(secret: content not shown)\n" if live else "",
                        "after": "(secret: content not shown, changed)\n"})
            continue
        out.append({"before_header": name if live else "(absent)", "after_header": name,
                    "before": live.content.decode("utf-8", "replace") if live else "",
                    "after": item.content.decode("utf-8", "replace")})
    for path in removed:
        name = posixpath.join(root, path)
        out.append({"before_header": name, "after_header": "(absent)", "before": "(a file of an earlier layout)\n",
                    "after": ""})
    return out


def validate_argv(argv: Sequence[str], staging: str) -> List[str]:
    """The validation command with %s replaced by the staging folder (it must name it)."""
    if not argv:
        return []
    if not any("%s" in a for a in argv):
        raise ConfigTreeError(f"validate {list(argv)} must name the staging folder as %s")
    return [a.replace("%s", staging.rstrip("/")) for a in argv]


def summary(changed: Sequence[str], removed: Sequence[str]) -> Tuple[bool, str]:
    """(changed, a one-line message)."""
    if not changed and not removed:
        return False, "the live files are as wanted"
    parts = []
    if changed:
        parts.append("installed " + ", ".join(changed))
    if removed:
        parts.append("removed " + ", ".join(removed))
    return True, "; ".join(parts)
