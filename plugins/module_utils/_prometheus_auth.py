# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""PRIVATE module_utils of llmfleet.serving: the credential on Prometheus's UI and API - the users of
monitoring_prometheus_users checked, and Prometheus's web configuration file (`--web.config.file`, Prometheus >= 2.24:
`basic_auth_users`, a bcrypt hash per user name; prometheus.io/docs/prometheus/latest/configuration/https/) made from
them.

Not a public API; may change without notice. Pure and typed: the hashing is handed in (the prometheus_web_config module
hashes on the target with Python's crypt, bcrypt `$2b$`), the file is read and written by that module.

The file is written in one fixed shape (a comment, `basic_auth_users:`, one `"name": "hash"` line per user, each a JSON
string, which YAML reads as a double-quoted scalar), so it is read back without a YAML library: a user whose password
still matches its old hash keeps that hash, and an unchanged user list writes the same bytes (no new salt each run).
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

# bcrypt reads at most 72 bytes of a password: a longer one would be cut there without a word
MAX_PASSWORD_BYTES = 72
HEADER = ("# Managed by llmfleet.serving (roles/monitoring, monitoring_prometheus_users): Prometheus's web configuration,\n"
          "# read on every request. bcrypt hashes only; the passwords are in the inventory's vault.\n")
_LINE = re.compile(r'^  ("(?:[^"\\]|\\.)*"): ("(?:[^"\\]|\\.)*")$')
_BCRYPT = re.compile(r"^\$2[aby]\$\d\d\$[./A-Za-z0-9]{53}$")
VAR = "monitoring_prometheus_users"


class PrometheusAuthError(ValueError):
    """A user entry that cannot go into the web configuration; the message names the entry (never its password)."""


def is_loopback(listen: str) -> bool:
    """Whether address:port (monitoring_prometheus_listen) is on loopback only: 127.0.0.0/8, [::1] or localhost."""
    host = str(listen).rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def user_problems(users: Any) -> List[str]:
    """What is wrong with each entry of monitoring_prometheus_users, by index and name; never a password."""
    if users is None:
        return []
    if not isinstance(users, Sequence) or isinstance(users, (str, bytes)):
        return [f"{VAR} must be a list of {{name, password}}, got a {type(users).__name__}"]
    out: List[str] = []
    seen: Dict[str, int] = {}
    for i, user in enumerate(users):
        if not isinstance(user, Mapping):
            out.append(f"{VAR}[{i}] must be a mapping with name and password, got a {type(user).__name__}")
            continue
        name = user.get("name")
        label = f"{VAR}[{i}] (name {name!r})"
        extra = sorted(str(k) for k in user if k not in ("name", "password"))
        if extra:
            out.append(f"{label}: unknown keys {', '.join(extra)}; give name and password only")
        if not isinstance(name, str) or not name.strip():
            out.append(f"{label}: the name must be a non-empty string")
        elif ":" in name or any(ord(c) < 32 or ord(c) == 127 for c in name) or name != name.strip():
            out.append(f"{label}: a name may hold no ':', no control character and no leading or trailing space "
                       "(HTTP basic auth sends name:password); choose another name")
        elif name in seen:
            out.append(f"{label}: the same name as entry {seen[name]}; give each user once")
        else:
            seen[name] = i
        password = user.get("password")
        if not isinstance(password, str) or password == "":
            out.append(f"{label}: the password must be a non-empty string (from your vault)")
        elif len(password.encode("utf-8")) > MAX_PASSWORD_BYTES:
            out.append(f"{label}: the password is longer than {MAX_PASSWORD_BYTES} bytes, all bcrypt reads; "
                       f"choose one of at most {MAX_PASSWORD_BYTES}")
        elif any(ord(c) < 32 or ord(c) == 127 for c in password):
            out.append(f"{label}: the password holds a control character; choose one without")
        elif password != password.strip():
            # Prometheus trims a password_file's content (its own scrape reads the first user's from one): a leading or
            # trailing space would sign the UI in and fail that scrape
            out.append(f"{label}: the password starts or ends with a space, which Prometheus drops from its password file; "
                       "choose one without")
    return out


def problems(listen: str, users: Any) -> List[str]:
    """Every reason the role must stop before any change: a bad user entry, or Prometheus on a non-loopback address
    without a user (its UI and API would answer anyone who reaches that address)."""
    out = user_problems(users)
    if not out and not users and not is_loopback(listen):
        out.append(f"monitoring_prometheus_listen={listen} is not loopback, and {VAR} is empty: Prometheus would answer "
                   f"anyone who reaches that address. Add a user to {VAR} (name, and the password from your vault) "
                   "or keep the default 127.0.0.1:9090 and reach it through an SSH tunnel")
    return out


def checked_users(users: Any) -> List[Tuple[str, str]]:
    """(name, password) of each entry, or PrometheusAuthError naming every bad one."""
    found = user_problems(users)
    if found:
        raise PrometheusAuthError("; ".join(found))
    return [(str(u["name"]), str(u["password"])) for u in users or []]


def read_hashes(text: Optional[str]) -> Dict[str, str]:
    """name -> bcrypt hash of a web configuration file in render()'s shape; {} for none or any other shape (a file edited
    by hand: every user is hashed anew)."""
    return _parse(text) or {}


def _parse(text: Optional[str]) -> Optional[Dict[str, str]]:
    """read_hashes, with None for a file in another shape (or none)."""
    if not text:
        return None
    out: Dict[str, str] = {}
    users = False
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if line == "basic_auth_users:":
            users = True
            continue
        match = _LINE.match(line) if users else None
        if match is None:
            return None
        try:
            name, hashed = json.loads(match.group(1)), json.loads(match.group(2))
        except ValueError:
            return None
        if not _BCRYPT.match(hashed):
            return None
        out[name] = hashed
    return out if users else None


def render(users: Sequence[Tuple[str, str]], old_text: Optional[str], matches: Callable[[str, str], bool],
           make: Callable[[str], str]) -> Tuple[str, List[str]]:
    """(the file's text, the names hashed anew). A user keeps its hash from `old_text` when `matches(password, hash)`;
    any other gets `make(password)`, which must return a bcrypt hash."""
    old = read_hashes(old_text)
    lines, fresh = [HEADER.rstrip("\n"), "basic_auth_users:"], []
    for name, password in users:
        hashed = old.get(name)
        if hashed is None or not matches(password, hashed):
            hashed = make(password)
            if not isinstance(hashed, str) or not _BCRYPT.match(hashed):
                raise PrometheusAuthError(f"{VAR}: hashing {name!r}'s password gave no bcrypt hash: this host's Python crypt "
                                          "lacks Blowfish ($2b$); run the role on Debian 12 (python3.11, libxcrypt)")
            fresh.append(name)
        lines.append(f"  {json.dumps(name)}: {json.dumps(hashed)}")
    return "\n".join(lines) + "\n", fresh


def summary(text: Optional[str]) -> str:
    """What a diff may show of a web configuration: its user names, never a hash."""
    if text is None:
        return "(no file)\n"
    found = _parse(text)
    if found is None:
        return "(a file in another shape: every user is hashed anew)\n"
    return "".join(f"user {n}\n" for n in sorted(found)) or "(no user)\n"
