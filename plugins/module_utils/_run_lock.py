# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""PRIVATE module_utils of llmfleet.serving: the fleet's run lock, owned by the gateway role. Pure and typed; the
gateway_lock module reads and writes the lock file on each gateway host, its action plugin says who runs on the
controller.

One run at a time changes a fleet. serve.yml, site.yml, upgrade.yml and gateway.yml take the lock before their first
change and release it at their end; a second run stops before any change and names the first. The lock lives on every
gateway host, beside the rotation state: that is what two runs fight over (which instances are out, the live
configuration a render replaces), it is the one place every run of the fleet reaches whichever controller it starts
from, and a lock per serving host would let two runs on two hosts take out both instances of one model.

The record says who holds it: the run (controller/pid/process start), the controller's host name, the user, the
ansible-playbook process id, the playbooks named on its command line, and since when (the gateway host's clock, so
that the age is read on the clock that wrote it). A run that takes the lock again (site.yml imports serve.yml and
gateway.yml) keeps it. A run that provably ended without releasing it (same controller, same boot and process
namespace, its process gone) is taken over by the next run, which says so; any other holder stops the run until it
ends or an operator breaks the lock (-e llmfleet_break_lock=true, or removing the file).
"""

from __future__ import annotations

import calendar
import json
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence

Record = Dict[str, Any]

# what a holder's record carries (the action plugin fills them on the controller, the module adds `since`)
FIELDS = ("run", "controller", "user", "pid", "pid_start", "boot_id", "pid_ns", "playbook")
# ansible-playbook options whose next word is a value, never a playbook
_VALUED = {"-i", "--inventory", "--inventory-file", "-e", "--extra-vars", "--vault-id", "--vault-password-file",
           "--vault-pass-file", "-M", "--module-path", "--private-key", "--key-file", "-u", "--user", "-l", "--limit",
           "-t", "--tags", "--skip-tags", "-f", "--forks", "-c", "--connection", "-T", "--timeout", "--start-at-task",
           "--become-user", "--become-method", "--ssh-common-args", "--sftp-extra-args", "--scp-extra-args",
           "--ssh-extra-args"}

# the decisions of `decide`
TAKE, KEEP, BREAK, TAKE_OVER, REFUSE = "take", "keep", "break", "take_over", "refuse"


class LockError(ValueError):
    """A lock file or an owner the lock cannot use."""


def playbooks_of(argv: Sequence[str]) -> str:
    """The playbooks of an ansible-playbook command line (its positional .yml/.yaml words), for the record."""
    words = [str(a) for a in argv]
    found: List[str] = []
    for i, word in enumerate(words[1:], start=1):
        if word.startswith("-") or words[i - 1] in _VALUED or word.startswith("@"):
            continue
        if word.endswith((".yml", ".yaml")):
            found.append(word)
    return " ".join(found)


def check_owner(owner: Any) -> Record:
    """The owner a run passes, with its fields checked: `run`, `controller` and `user` are text, `pid` a number."""
    if not isinstance(owner, Mapping):
        raise LockError(f"the run's owner must be a mapping of {', '.join(FIELDS)}, got {owner!r}")
    out = {k: owner.get(k) for k in FIELDS}
    for key in ("run", "controller", "user"):
        if not isinstance(out[key], str) or not out[key].strip():
            raise LockError(f"the run's owner needs {key} (text), got {out[key]!r}")
    if isinstance(out["pid"], bool) or not isinstance(out["pid"], int) or out["pid"] <= 0:
        raise LockError(f"the run's owner needs pid (a process id), got {out['pid']!r}")
    return out


def parse(text: Optional[str], path: str = "the lock file") -> Optional[Record]:
    """The holder's record from the lock file's text; None when there is none (no file, or an empty one)."""
    if text is None or not text.strip():
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise LockError(f"{path} is not JSON ({exc}): if no run is changing the fleet, remove it and run again") from exc
    if not isinstance(data, dict) or not isinstance(data.get("run"), str):
        raise LockError(f"{path} is not a run lock ({{\"run\": ..., ...}}): if no run is changing the fleet, remove it and "
                        "run again")
    return data


def render(record: Mapping[str, Any]) -> str:
    """The lock file's text: one canonical form."""
    return json.dumps(dict(record), indent=1, sort_keys=True) + "\n"


def stamp(owner: Mapping[str, Any], now: float) -> Record:
    """The record a run writes when it takes the lock: its owner and since when (UTC, the lock host's clock)."""
    return dict(check_owner(owner), since=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)))


def decide(held: Optional[Mapping[str, Any]], owner: Mapping[str, Any], break_lock: bool = False,
           take_over: Optional[str] = None) -> str:
    """What a run that asks for the lock does: TAKE a free lock, KEEP its own (a playbook of the same run took it),
    BREAK another's when the operator said so, TAKE_OVER the named run's (one that provably ended: the caller checked),
    else REFUSE."""
    me = check_owner(owner)
    if held is None:
        return TAKE
    if held.get("run") == me["run"]:
        return KEEP
    if break_lock:
        return BREAK
    if take_over and held.get("run") == take_over:
        return TAKE_OVER
    return REFUSE


def releases(held: Optional[Mapping[str, Any]], owner: Mapping[str, Any]) -> bool:
    """Whether a run that is done releases the lock: only its own (another run's lock is left as it is)."""
    return held is not None and held.get("run") == check_owner(owner)["run"]


def age_s(held: Mapping[str, Any], now: float) -> Optional[int]:
    """Seconds since the holder took the lock, on the clock that wrote `since`; None when it is not readable."""
    try:
        since = calendar.timegm(time.strptime(str(held.get("since")), "%Y-%m-%dT%H:%M:%SZ"))
    except (TypeError, ValueError):
        return None
    return max(0, int(now - since))


def human(seconds: Optional[int]) -> str:
    """An age as people read it: 45 s, 12 min, 3 h 05 min, 2 d 4 h."""
    if seconds is None:
        return "an unknown time"
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 86400:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    return f"{seconds // 86400} d {seconds % 86400 // 3600} h"


def describe(held: Mapping[str, Any], now: float) -> str:
    """Who holds the lock, for a message: the playbooks, the user and controller, the pid, the run, since when, its age."""
    what = held.get("playbook") or "a run"
    what = f"ansible-playbook {what}" if held.get("playbook") else what
    return (f"{what} by {held.get('user', '?')} on {held.get('controller', '?')} (pid {held.get('pid', '?')}, run "
            f"{held.get('run')}), holding it since {held.get('since', '?')} ({human(age_s(held, now))} ago)")


def short(held: Mapping[str, Any]) -> str:
    """The holder in a few words, as the rotation state records the run that took an instance out."""
    return (f"{held.get('playbook') or 'a run'} by {held.get('user', '?')} on {held.get('controller', '?')}, "
            f"pid {held.get('pid', '?')}")


def refusal(held: Mapping[str, Any], now: float, path: str, host: str) -> str:
    """The message of a run that finds another run's lock: it names the holder and says how to clear a stale lock."""
    return (f"Another run is changing this fleet: {describe(held, now)}; its lock is {path} on {host}. This run stopped "
            f"before any change. Wait until it ends. If it has ended without releasing the "
            f"lock (its controller was stopped or lost), run again with -e llmfleet_break_lock=true, or remove {path} on "
            "every gateway host; an instance it left out of the gateway's rotation goes back in at the next serve.yml "
            "once its health gate passes.")


def same_controller(held: Mapping[str, Any], here: Mapping[str, Any]) -> bool:
    """Whether the holder ran on this very controller: the same host name, boot and process namespace (all known)."""
    keys = ("controller", "boot_id", "pid_ns")
    return all(held.get(k) and held.get(k) == here.get(k) for k in keys)


def provably_ended(held: Mapping[str, Any], here: Mapping[str, Any], start_now: Optional[str]) -> bool:
    """Whether the holder's run has ended: it ran on this controller (same_controller) and its process is gone
    (`start_now`: the start time of its pid as this controller reads it now, None when no such process runs) or the pid
    is another process now (another start time). Anything less is not proof: the lock stays."""
    if not same_controller(held, here) or not held.get("pid_start"):
        return False
    return start_now is None or str(start_now) != str(held["pid_start"])


__all__ = ["Record", "FIELDS", "TAKE", "KEEP", "BREAK", "TAKE_OVER", "REFUSE", "LockError", "playbooks_of", "check_owner",
           "parse", "render", "stamp", "decide", "releases", "age_s", "human", "describe", "short", "refusal", "same_controller",
           "provably_ended"]
