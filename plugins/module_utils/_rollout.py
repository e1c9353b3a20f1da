# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""PRIVATE module_utils of llmfleet.serving: the one change path of a running instance (the vllm role's
instance.yml): out of the gateway's rotation (the gateway role's `rotation` entry point does it), wait for its in-flight
requests, replace, gate, back in.
Pure and typed; the role does the I/O.

Facts (nginx 1.22 ngx_http_upstream_module; vLLM v1/engine/core.py; docs/sources.md#drain): open-source nginx has no drain, only `down` on an upstream server;
after `nginx -s reload` a stream in flight finishes on the old worker. vLLM's `/health` stays 200 while it
drains, so the engine's own `vllm:num_requests_running` and `vllm:num_requests_waiting` (on /metrics, open
on loopback) say when nothing is in flight.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Sequence

from ._engine import EngineError, parse_version
from ._fleet_plans import api_instances

IN_FLIGHT = ("vllm:num_requests_running", "vllm:num_requests_waiting")


class RolloutError(ValueError):
    """Input the change path cannot use."""


def in_flight(metrics: str) -> int:
    """Requests the engine holds (running + waiting), from its Prometheus text; every label set summed."""
    seen = False
    total = 0.0
    for line in str(metrics).splitlines():
        if line.startswith("#"):
            continue
        name = re.split(r"[{\s]", line, maxsplit=1)[0]
        if name in IN_FLIGHT:
            seen = True
            try:
                total += float(line.rsplit(None, 1)[-1])
            except ValueError as exc:
                raise RolloutError(f"a metrics line does not end with a number: {line[:120]!r}") from exc
    if not seen:
        raise RolloutError(f"the engine's /metrics has neither {IN_FLIGHT[0]} nor {IN_FLIGHT[1]}: not a vLLM metrics page")
    return int(total)


def peers(plans: Mapping[str, Mapping[str, Any]], host: str, instance: str) -> List[str]:
    """The other instances of the fleet that serve the same model as `instance` of `host` ("host/instance")."""
    served: Dict[str, List[str]] = {}
    mine = None
    for name in sorted(plans):
        for dep in (plans[name] or {}).get("deployments") or []:
            for inst in api_instances(dep):
                model = str(inst.get("served_model_name") or dep.get("name"))
                served.setdefault(model, []).append(f"{name}/{inst['name']}")
                if name == host and inst["name"] == instance:
                    mine = model
    if mine is None:
        raise RolloutError(f"{instance} is not in the plan of {host}")
    return [p for p in served[mine] if p != f"{host}/{instance}"]


def live_peers(peers_: Sequence[str], gateway_routes: Sequence[Sequence[Mapping[str, Any]]],
               out: Sequence[str] = ()) -> List[str]:
    """The peers ("host/instance") that still serve while this instance is away: in rotation on every gateway that
    routes them (`gateway_routes`: one list per gateway host of {host, instance, down}, what the gateway role's `routes`
    entry point reports) and held out by no gateway's rotation state (`out`, its gateway_out_of_rotation: a state may
    hold an instance that a gateway does not route yet). A peer that no gateway routes yet (a first deploy, before
    gateway.yml) counts as planned. A peer some gateway has `down` (another change, a failed restore) does not count."""
    held = {str(o) for o in out}
    found = []
    for peer in peers_:
        host, _sep, instance = str(peer).partition("/")
        lines = [r for routes in gateway_routes for r in routes if r.get("host") == host and r.get("instance") == instance]
        if str(peer) not in held and not any(r.get("down") for r in lines):
            found.append(str(peer))
    return found


# what the next run does with an instance an earlier change left out of the gateway's rotation (reconcile)
READMIT, FORGET, REPORT = "readmit", "forget", "report"


def reconcile(out: Mapping[str, Mapping[str, Any]], planned: Sequence[str], in_run: Sequence[str],
              left_alone: Sequence[str] = ()) -> List[Dict[str, Any]]:
    """For each instance some gateway holds out (`out`: {"host/instance": {since, by, gateways}}, the gateway role's
    gateway_out_since), what this serve run does with it: FORGET one no plan has any more (`planned`: every planned
    "host/instance"); READMIT one whose host this run serves (`in_run`): it goes back in once its health gate passes;
    REPORT any other, with why it stays out (its host is outside this run, or llmfleet_serve is false there:
    `left_alone`). Each row: {instance, action, since, by, gateways, why}."""
    plan = set(planned)
    serving_hosts, alone = set(in_run), set(left_alone)
    rows = []
    for name in sorted(out):
        entry = out[name] or {}
        host = str(name).partition("/")[0]
        if name not in plan:
            action, why = FORGET, ("no plan has it any more: forgotten by the gateways' rotation state (the next "
                                   "playbooks/gateway.yml no longer routes it)")
        elif host in alone:
            action, why = REPORT, (f"llmfleet_serve is false on {host}: no run of this collection changes or re-admits it; "
                                   f"run playbooks/serve.yml with llmfleet_serve true for {host}, or take {name} out of "
                                   "each gateway's rotation state by hand (docs/day2.md)")
        elif host not in serving_hosts:
            action, why = REPORT, (f"{host} is not in this run (--limit): it stays out until a serve.yml run that includes "
                                   f"{host}")
        else:
            action, why = READMIT, "its host is in this run: it goes back in once its health gate passes"
        rows.append({"instance": str(name), "action": action, "since": entry.get("since"), "by": entry.get("by"),
                     "gateways": list(entry.get("gateways") or []), "why": why})
    return rows


def reconcile_lines(rows: Sequence[Mapping[str, Any]]) -> List[str]:
    """One line per reconcile row, for the run's output: which instance, since when and by which run, what happens."""
    return [f"{r['instance']}: out of the rotation of {', '.join(r['gateways']) or 'a gateway'} since "
            f"{r.get('since') or 'before this collection kept the time'}"
            f"{(' (taken out by ' + str(r['by']) + ')') if r.get('by') else ''}: {r['why']}" for r in rows]


def flag_diff(old: Sequence[Any], new: Sequence[Any]) -> List[str]:
    """What changes between two launch argument lists, flag by flag: `--x a -> b`, `+ --y`, `- --z`."""
    def flags(args: Sequence[Any]) -> Dict[str, str]:
        args = [str(a) for a in args]
        out: Dict[str, str] = {}
        for i, arg in enumerate(args):
            if arg.startswith("--"):
                value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else ""
                out[arg] = value
            elif i == 0 or not args[i - 1].startswith("--"):
                out["(model)"] = arg
        return out
    a, b = flags(old), flags(new)
    lines = []
    for key in sorted(set(a) | set(b)):
        if key not in b:
            lines.append(f"- {key} {a[key]}".rstrip())
        elif key not in a:
            lines.append(f"+ {key} {b[key]}".rstrip())
        elif a[key] != b[key]:
            lines.append(f"{key} {a[key]} -> {b[key]}")
    return lines


def changes(old_plan: Mapping[str, Any], new_plan: Mapping[str, Any]) -> List[str]:
    """Per instance, what a new plan changes against the one in force: new, removed, engine version, flags."""
    def index(plan: Mapping[str, Any]) -> Dict[str, Dict[str, Any]]:
        out = {}
        for dep in (plan or {}).get("deployments") or []:
            for inst in dep.get("instances") or []:
                out[str(inst["name"])] = dict(inst, engine_version=dep.get("engine_version", ""))
        return out
    a, b = index(old_plan), index(new_plan)
    lines = []
    for name in sorted(set(a) | set(b)):
        if name not in a:
            lines.append(f"{name}: new instance (vLLM {b[name]['engine_version']})")
        elif name not in b:
            lines.append(f"{name}: removed")
        elif a[name].get("plan_hash") != b[name].get("plan_hash"):
            what = []
            if a[name]["engine_version"] != b[name]["engine_version"]:
                what.append(f"vLLM {a[name]['engine_version']} -> {b[name]['engine_version']}")
            what += flag_diff(a[name].get("args") or [], b[name].get("args") or [])
            env_a, env_b = a[name].get("env") or {}, b[name].get("env") or {}
            what += [f"env {k}: {env_a.get(k, '(unset)')} -> {env_b.get(k, '(unset)')}" for k in sorted(set(env_a) | set(env_b))
                     if env_a.get(k) != env_b.get(k) and k != "VLLM_API_KEY"]
            lines.append(f"{name}: " + ("; ".join(what) if what else "host fields (image, devices, mounts, addresses)"))
    return lines or ["no instance changes"]


def at_version(deployments: Sequence[Mapping[str, Any]], version: str, deployment: Any = None) -> List[Dict[str, Any]]:
    """The deployments with engine.version set to `version` - every one, or only the one named `deployment`."""
    try:
        parse_version(version, exact=True)
    except EngineError:
        raise RolloutError(f"upgrade_version must be a vLLM release like 0.32.0, got {version!r}") from None
    names = [str(d.get("name")) for d in deployments]
    if deployment is not None and str(deployment) not in names:
        raise RolloutError(f"upgrade_deployment {deployment!r} is not a deployment of this host (it has {', '.join(names)})")
    out = []
    for d in deployments:
        d = dict(d)
        if deployment is None or str(d.get("name")) == str(deployment):
            d["engine"] = dict(d.get("engine") or {}, version=str(version))
        out.append(d)
    return out


def prune(installed: Sequence[Mapping[str, Any]], in_use: Sequence[str], keep: int) -> List[str]:
    """The installed engine versions to remove: every one not in use except the `keep` most recent (by `mtime`).
    `installed` holds {path, mtime} (a venv folder, or an image reference with its creation time); a negative
    `keep` removes nothing (the default: old versions go only when asked). Half-built or retired venvs
    (`<path>.new-*`, `<path>.old-*`, pip_venv's own) are never candidates."""
    if int(keep) < 0:
        return []
    used = {str(p) for p in in_use}
    idle = [i for i in installed
            if str(i["path"]) not in used and not re.search(r"\.(new|old)-[0-9a-f]+$", str(i["path"]))]
    idle.sort(key=lambda i: (float(i["mtime"]), str(i["path"])), reverse=True)
    return [str(i["path"]) for i in idle[int(keep):]]


def _repository(ref: str) -> str:
    """`registry:5000/vllm/vllm-openai:v0.11.0` -> `registry:5000/vllm/vllm-openai` (a tag never holds a slash)."""
    ref = str(ref).split("@", 1)[0]
    head, sep, tag = ref.rpartition(":")
    return head if sep and "/" not in tag else ref


def image_candidates(images: Sequence[Mapping[str, Any]], planned: Sequence[str],
                     container_images: Sequence[str]) -> List[Dict[str, Any]]:
    """The host's image tags that `prune` may remove: of a repository a planned image comes from, used by no
    container (by tag or id). `images` as Docker lists them ({Id, RepoTags, Created}); {path: tag, mtime: Created}."""
    repos = {_repository(p) for p in planned}
    used = {str(c) for c in container_images}
    out = []
    for image in images:
        tags = [str(t) for t in image.get("RepoTags") or [] if t and t != "<none>:<none>"]
        if str(image.get("Id")) in used or any(t in used for t in tags):
            continue
        out += [{"path": t, "mtime": float(image.get("Created") or 0)} for t in tags if _repository(t) in repos]
    return out
