# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""PRIVATE module_utils of llmfleet.serving: the gateway's rotation, owned by the gateway role. Pure and typed; the
gateway_rotation module does the I/O on the gateway host.

The rotation state is the set of instances ("host/instance") an operator's change took out of the gateway's upstreams.
The gateway keeps it in one file beside its configuration; the gateway role's full render reads it (a server it names is
rendered `down`), and the role's `rotation` entry point changes it and sets or clears `down` on that one server line of
the live configuration. So a re-render keeps a drained instance out, and no other role edits the gateway's files.

Fact (nginx ngx_http_upstream_module, `server ... down`): open-source nginx has no drain, only `down` on an upstream
server; after a reload a stream in flight finishes on the old worker (docs/sources.md#drain).
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Sequence, Set

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


def parse_state(text: str) -> List[str]:
    """The instances out of rotation, from the state file's text ({"out": [...]}); an empty text is an empty state."""
    if not text.strip():
        return []
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise RotationError(f"the rotation state is not JSON ({exc}): remove the file and run playbooks/gateway.yml "
                            "to route every planned instance again") from exc
    if not isinstance(data, dict) or not isinstance(data.get("out"), list):
        raise RotationError("the rotation state must be {\"out\": [\"host/instance\", ...]}: remove the file and run "
                            "playbooks/gateway.yml to route every planned instance again")
    return sorted({check_name(n) for n in data["out"]})


def render_state(out: Sequence[str]) -> str:
    """The state file's text: sorted, one canonical form (a rewrite of the same set is byte-identical)."""
    return json.dumps({"out": sorted({check_name(n) for n in out})}, indent=1) + "\n"


def update(out: Sequence[str], instance: str, down: bool) -> List[str]:
    """The state after `instance` goes out of (`down`) or back into the rotation."""
    current: Set[str] = set(out)
    name = check_name(instance)
    return sorted(current | {name} if down else current - {name})


def routes(conf: str) -> List[Dict[str, Any]]:
    """Every upstream server line of a gateway configuration: {host, instance, address, down}."""
    out = []
    for line in str(conf).split("\n"):
        m = SERVER_LINE.match(line)
        if m:
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


__all__ = ["SERVER_LINE", "RotationError", "check_name", "parse_state", "render_state", "update", "routes", "down_in", "set_one",
           "apply"]
