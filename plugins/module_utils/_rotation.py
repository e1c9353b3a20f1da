# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""PRIVATE module_utils of llmfleet.serving: the gateway's rotation, owned by the gateway role. Pure and typed; the
gateway_rotation module does the I/O on the gateway host.

The rotation state is the set of instances ("host/instance") an operator's change took out of the gateway's upstreams.
The gateway keeps it in one file beside its configuration; the gateway role's full render reads it (a server it names is
rendered `down`), and the role's `rotation` entry point changes it and sets or clears `down` on that one server line of
the live configuration. So a re-render keeps a drained instance out, and no other role edits the gateway's files.
The state also says since when each instance is out and which run took it out, so that the next run can report what an
interrupted one left behind; an instance no plan has any more is forgotten (`forget`), and taking one out checks,
under the gateway's lock, that another instance of its model still serves there (`serving`).

Fact (nginx ngx_http_upstream_module, `server ... down`): open-source nginx has no drain, only `down` on an upstream
server; after a reload a stream in flight finishes on the old worker (docs/sources.md#drain).
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set

from ansible_collections.llmfleet.serving.plugins.module_utils._fleet_plans import api_instances

# one line per instance in the gateway's upstream blocks (roles/gateway/templates/gateway.conf.j2):
#     server 172.30.77.11:8002 max_fails=1 fail_timeout=10s;  # llmfleet-fleet-engine1 tiny-a-0
SERVER_LINE = re.compile(r"^(?P<head>[ \t]*server[ \t]+(?P<address>\S+)(?:[ \t]+(?!down\b)[^\s;#]+)*?)(?P<down>[ \t]+down)?;"
                         r"(?P<tail>[ \t]+#[ \t]+(?P<host>\S+)[ \t]+(?P<inst>\S+))[ \t]*$")
NAME = re.compile(r"^[^\s/]+/[^\s/]+$")


class RotationError(ValueError):
    """A rotation request or state the gateway cannot use."""


def check_name(name: Any) -> str:
    """An instance as the rotation names it: "host/instance"."""
    if not isinstance(name, str) or not NAME.match(name):
        raise RotationError(f"an instance in the gateway's rotation must be named \"host/instance\" (one '/', no spaces), "
                            f"got {name!r}")
    return name


Entry = Dict[str, Optional[str]]
State = Dict[str, Entry]


def read_state(text: str) -> State:
    """The instances out of rotation with, for each, since when (UTC) and which run took it out, from the state file's
    text ({"out": [...], "since": {...}, "by": {...}}); a state written before the times were kept has no `since`."""
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise RotationError(f"the rotation state is not JSON ({exc}): remove the file and run playbooks/gateway.yml "
                            "to route every planned instance again") from exc
    if not isinstance(data, dict) or not isinstance(data.get("out"), list) \
            or not all(isinstance(data.get(k, {}), dict) for k in ("since", "by")):
        raise RotationError("the rotation state must be {\"out\": [\"host/instance\", ...]}: remove the file and run "
                            "playbooks/gateway.yml to route every planned instance again")
    since, by = data.get("since") or {}, data.get("by") or {}
    return {check_name(n): {"since": _text(since.get(n)), "by": _text(by.get(n))} for n in data["out"]}


def _text(value: Any) -> Optional[str]:
    return str(value) if value not in (None, "") else None


def write_state(state: Mapping[str, Mapping[str, Any]]) -> str:
    """The state file's text: sorted, one canonical form (a rewrite of the same state is byte-identical)."""
    names = sorted({check_name(n) for n in state})
    data: Dict[str, Any] = {"out": names}
    for key in ("since", "by"):
        values = {n: str(state[n][key]) for n in names if (state[n] or {}).get(key)}
        if values:
            data[key] = values
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def parse_state(text: str) -> List[str]:
    """The instances out of rotation, from the state file's text; an empty text is an empty state."""
    return sorted(read_state(text))


def render_state(out: Sequence[str]) -> str:
    """The state file's text of these instances, with no times (see write_state)."""
    return write_state({n: {} for n in out})


def update(out: Sequence[str], instance: str, down: bool) -> List[str]:
    """The state after `instance` goes out of (`down`) or back into the rotation."""
    current: Set[str] = set(out)
    name = check_name(instance)
    return sorted(current | {name} if down else current - {name})


def mark(state: Mapping[str, Entry], instance: str, down: bool, since: Optional[str] = None, by: Optional[str] = None) -> State:
    """The state after `instance` goes out of (`down`, recorded with since when and by which run) or back into the
    rotation. An instance already out keeps the time it went out."""
    name = check_name(instance)
    out = {n: dict(e) for n, e in state.items()}
    if not down:
        out.pop(name, None)
    elif name not in out:
        out[name] = {"since": since, "by": by}
    return out


def forget(state: Mapping[str, Entry], keep: Sequence[str]) -> State:
    """The state without the instances no plan has any more (`keep`: every planned one): nothing would put them back,
    and a render no longer routes them."""
    kept = set(keep)
    return {n: dict(e) for n, e in state.items() if n in kept}


def planned(plans: Mapping[str, Mapping[str, Any]]) -> List[str]:
    """Every instance of the fleet's plans, as the rotation names it ("host/instance")."""
    return sorted(f"{host}/{inst['name']}" for host in plans for dep in ((plans[host] or {}).get("deployments") or [])
                  for inst in api_instances(dep))


def merge_out(per_gateway: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> Dict[str, Dict[str, Any]]:
    """The instances some gateway holds out, from each gateway's state ({gateway: {instance: {since, by}}}): for each,
    the earliest time one went out, by which run, and on which gateways."""
    out: Dict[str, Dict[str, Any]] = {}
    for gateway in sorted(per_gateway):
        for name, entry in sorted((per_gateway[gateway] or {}).items()):
            row = out.setdefault(name, {"since": None, "by": None, "gateways": []})
            row["gateways"].append(gateway)
            since = (entry or {}).get("since")
            if since and (row["since"] is None or str(since) < str(row["since"])):
                row["since"], row["by"] = str(since), (entry or {}).get("by")
            elif row["by"] is None and (entry or {}).get("by"):
                row["by"] = entry["by"]
    return out


def serving(conf_routes: Sequence[Mapping[str, Any]], out: Sequence[str], peers: Sequence[str]) -> List[str]:
    """The peers that serve on this gateway now: routed with no `down` (or not routed yet: a first deploy, before the
    gateway's render) and not held out by its state."""
    held = set(out)
    found = []
    for peer in peers:
        host, _sep, instance = str(peer).partition("/")
        lines = [r for r in conf_routes if r.get("host") == host and r.get("instance") == instance]
        if str(peer) not in held and not any(r.get("down") for r in lines):
            found.append(str(peer))
    return found


def routes(conf: str) -> List[Dict[str, Any]]:
    """Every upstream server of a gateway configuration, once: {host, instance, address, down}. A server is written again
    in the upstreams a 503's second try uses (the model's upstream without one server) and in the hashing upstream of a
    model routed by session or prefix; set_one and apply keep every copy alike, and the first (the model's own upstream)
    is the one reported."""
    out, seen = [], set()
    for line in str(conf).split("\n"):
        m = SERVER_LINE.match(line)
        if m and (m.group("host"), m.group("inst"), m.group("address")) not in seen:
            seen.add((m.group("host"), m.group("inst"), m.group("address")))
            out.append({"host": m.group("host"), "instance": m.group("inst"), "address": m.group("address"),
                        "down": bool(m.group("down"))})
    return out


def down_in(conf: str) -> List[str]:
    """The instances a configuration has `down` ("host/instance"): the state of a gateway that has no state file yet (one
    set up before the state existed, or a `down` set by hand), so that the first change keeps them out."""
    return sorted({f"{r['host']}/{r['instance']}" for r in routes(conf) if r["down"]})


def set_one(conf: str, instance: str, down: bool) -> str:
    """The configuration with `down` set on (or cleared from) the server line(s) of `instance` alone; every other line
    as it was."""
    name = check_name(instance)
    lines = []
    for line in str(conf).split("\n"):
        m = SERVER_LINE.match(line)
        if m and f"{m.group('host')}/{m.group('inst')}" == name:
            line = f"{m.group('head')}{' down' if down else ''};{m.group('tail')}"
        lines.append(line)
    return "\n".join(lines)


def apply(conf: str, out: Sequence[str]) -> str:
    """The configuration with exactly the servers of `out` marked `down` (every other server line without it); nothing
    else in the text changes."""
    gone = set(out)
    lines = []
    for line in str(conf).split("\n"):
        m = SERVER_LINE.match(line)
        if m:
            down = " down" if f"{m.group('host')}/{m.group('inst')}" in gone else ""
            line = f"{m.group('head')}{down};{m.group('tail')}"
        lines.append(line)
    return "\n".join(lines)


__all__ = ["SERVER_LINE", "RotationError", "Entry", "State", "check_name", "read_state", "write_state", "parse_state", "render_state",
           "update", "mark", "forget", "planned", "merge_out", "serving", "routes", "down_in", "set_one", "apply"]
