# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""PRIVATE module_utils of llmfleet.serving: the fleet's plans turned into the gateway's model.

Not a public API; may change without notice. Pure and typed: no Ansible imports, no I/O (the plan files are
read by _fleet_plans).

Facts behind the numbers (nginx 1.22 ngx_http_upstream_module and ngx_http_proxy_module; docs/sources.md#nginx-upstreams):
- nginx 1.22 open source has passive health only: max_fails/fail_timeout per server, shared between
  workers only when the upstream has a `zone`.
- upstream keepalive_timeout must be below the engine's own idle timeout, or nginx reuses a connection
  the engine is closing: vLLM runs uvicorn, whose default timeout_keep_alive is 5 s
  (uvicorn/config.py `timeout_keep_alive: int = 5`), so 4 s.
- never `proxy_next_upstream non_idempotent`: a POST the engine received would run a second generation.
- limit_conn counts a connection only once its whole request header is read and a request is being processed
  (nginx.org/en/docs/http/ngx_http_limit_conn_module.html; docs/sources.md#nginx-before-body); an empty key is not
  counted. So the per-key zone is keyed by the key's name (never the key), and a request refused by the server-level
  key check (rewrite phase, before the preaccess phase where limit_conn runs) is counted by neither zone: it holds
  no body buffer either.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import json
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ._fleet_plans import FleetPlanError, api_instances, read_fleet_plans as read_plan_files, served_name_conflicts
from ._pooling import POOLING_PATHS
from ._syntax import ROUTING, nginx_word, served_name

# POST paths routed by the JSON body's model: the generative ones, and the pooling models' (vLLM 0.32 entrypoints/pooling:
# embed/, pooling/, classify/, scoring/ api_router.py; _pooling.POOLING_PATHS). A path a model does not serve (a pooling path
# to a chat model, a chat path to an embedding model) is forwarded all the same: vLLM answers with its own error (404 for a
# route it did not register), so the client sees the engine's reason, not the gateway's
ROUTED_PATHS = ("/v1/chat/completions", "/v1/completions") + POOLING_PATHS
ALLOWED_PATHS = ROUTED_PATHS + ("/v1/models", "/health")
# vLLM's Prometheus endpoint: an edge serves it to the monitoring host only (edge_model's metrics_allow); the gateway never
METRICS_PATH = "/metrics"
LOOPBACK = "127.0.0.1"
# uvicorn's default keep-alive is 5 s (uvicorn/config.py timeout_keep_alive=5): stay below it
UPSTREAM_KEEPALIVE_TIMEOUT = "4s"
# out_of_rotation: the instances ("host/instance") the gateway's rotation state holds out; their servers are rendered `down`
DEFAULTS: Dict[str, Any] = {"keepalive": 16, "max_fails": 2, "fail_timeout": "10s", "out_of_rotation": ()}
# requests in flight at once per client key and per client address (limit_conn; 0: no limit), and who may use the
# plain-HTTP listeners when TLS is on (loopback: this host's own clients). The role's defaults say the same.
CLIENT_POLICY: Dict[str, Any] = {"key_max_conns": 128, "address_max_conns": 256, "plain_allow": ("127.0.0.0/8", "::1")}
# the role variable behind each option, named in messages
CLIENT_POLICY_VARS = {"key_max_conns": "gateway_key_max_conns", "address_max_conns": "gateway_address_max_conns",
                      "plain_allow": "gateway_tls_plain_allow"}
KEY_RE = re.compile(r"^[A-Za-z0-9._~+/=-]{16,256}$")
NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
LISTEN_RE = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^\s:\[\]]+))?(?::?(?P<port>\d+))?$")
# an nginx time (ngx_parse_time: a number with ms, s, m, h, d, w, M or y; seconds without a unit)
NGINX_TIME = re.compile(r"^\d+(ms|s|m|h|d|w|M|y)?$")
# the other kinds of value the gateway's templates write as they are (ngx_parse_size: bytes, k or m; limit_req_zone's rate)
NGINX_SIZE = re.compile(r"^\d+[kKmMgG]?$")
NGINX_RATE = re.compile(r"^\d+r/[sm]$")
# what an entry of gateway_api_keys may hold: its name and key, the served models it may use, its own request rate
# (and burst) and requests in flight
KEY_FIELDS = frozenset({"name", "key", "models", "rate", "burst", "max_conns", "budgets", "previous_key", "previous_until"})
# the end of a rotated key's overlap, in UTC
UNTIL_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2})?Z$")
# a token budget's period: a calendar window in UTC (a week starts on Monday 00:00), counted from its start
BUDGET_PERIODS = ("minute", "hour", "day", "week", "month")
# The gateway role's variables its nginx templates write as they are, by kind (gateway_extra_http_config is nginx text by
# design, validated by `nginx -t` with the rest): each must be what the kind says, one word nginx reads back unchanged.
SETTING_KINDS: Dict[str, str] = {
    "gateway_listen": "listen", "gateway_webui_listen": "listen", "gateway_tls_listen": "listen",
    "gateway_client_max_body_size": "size", "gateway_webui_client_max_body_size": "size",
    "gateway_proxy_read_timeout": "time", "gateway_proxy_connect_timeout": "time", "gateway_upstream_fail_timeout": "time",
    "gateway_rate_limit": "rate", "gateway_rate_burst": "number", "gateway_worker_connections": "number",
    "gateway_upstream_keepalive": "number", "gateway_upstream_max_fails": "number", "gateway_webui_port": "number",
    "gateway_worker_processes": "workers",
}


class GatewayError(ValueError):
    """Malformed input to the gateway model."""


def upstream_name(model: str) -> str:
    """An nginx-safe, unique upstream name for a served model name."""
    slug = re.sub(r"[^A-Za-z0-9_]", "_", model)[:40]
    return f"llmfleet_{slug}_{hashlib.sha256(model.encode()).hexdigest()[:8]}"


def read_fleet_plans(hosts: Sequence[str], fact_plans: Mapping[str, Any], plan_dir: str) -> Dict[str, Dict[str, Any]]:
    """_fleet_plans.read_fleet_plans, its refusal as a GatewayError (for callers that catch the gateway's errors)."""
    try:
        return read_plan_files(hosts, fact_plans, plan_dir)
    except FleetPlanError as exc:
        raise GatewayError(str(exc)) from exc


def _instances(plan: Mapping[str, Any]):
    for dep in plan.get("deployments") or []:
        for inst in api_instances(dep):
            yield dep, inst


def gateway_model(plans: Mapping[str, Mapping[str, Any]], gateway_host: str,
                  options: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The gateway's upstreams, routes and model list from every serving host's plan.

    An instance on gateway_host is reached on 127.0.0.1:port; one elsewhere through its host's edge
    (edge.address:port). An instance elsewhere without an edge cannot be reached: it goes to `errors`
    (the role fails on them before any change)."""
    opts = dict(DEFAULTS, **(options or {}))
    unknown = sorted(set(opts) - set(DEFAULTS))
    if unknown:
        raise GatewayError(f"unknown gateway options {unknown}; known: {sorted(DEFAULTS)}")
    # rendered into each upstream's server lines as they are
    for key in ("keepalive", "max_fails"):
        if not str(opts[key]).isdigit():
            raise GatewayError(f"gateway option {key}={opts[key]!r}: a whole number")
    if not NGINX_TIME.match(str(opts["fail_timeout"])):
        raise GatewayError(f"gateway option fail_timeout={opts['fail_timeout']!r}: an nginx time such as 10s")
    by_model: Dict[str, List[Dict[str, Any]]] = {}
    routing: Dict[str, str] = {}
    errors: List[str] = []
    out_of_rotation = {str(n) for n in opts["out_of_rotation"] or ()}
    for host in sorted(plans):
        plan = plans[host]
        if plan.get("errors"):
            errors.append(f"{host}: its plan has errors ({' | '.join(plan['errors'])}); fix them and rerun playbooks/plan.yml")
            continue
        for dep, inst in _instances(plan):
            model = inst.get("served_model_name") or dep.get("name")
            if host == gateway_host:
                address = f"{inst.get('bind_address') or LOOPBACK}:{int(inst['port'])}"
            elif inst.get("edge"):
                address = f"{inst['edge']['address']}:{int(inst['edge']['port'])}"
            else:
                errors.append(
                    f"{host}: instance {inst.get('name')} ({model}) listens on loopback only and has no edge, so the gateway "
                    f"on {gateway_host} cannot reach it; set llmfleet_private_address for {host} (its private-network "
                    "address), rerun playbooks/plan.yml and apply the edge (playbooks/gateway.yml does), or add "
                    f"{host} to llm_gateway")
                continue
            problem = served_name(model) or nginx_word(host) or nginx_word(inst.get("name"))
            if problem:
                # the name, the host and the instance are written into the configuration's comments and routes
                errors.append(f"{host!r}: instance {inst.get('name')!r} serves {model!r}: {problem}; the plan was written by an "
                              "older planner or edited by hand: rerun playbooks/plan.yml")
                continue
            by_model.setdefault(model, []).append({"address": address, "host": host, "instance": inst.get("name"),
                                                   "down": f"{host}/{inst.get('name')}" in out_of_rotation})
            routing.setdefault(model, str(dep.get("routing") or "least_conn"))
    # one upstream per name: a name two models share would mix their answers (the plan refuses it; plan files may be older)
    errors += served_name_conflicts(plans)
    upstreams = []
    for model in sorted(by_model):
        servers = sorted(by_model[model], key=lambda s: (s["host"], s["address"]))
        name = upstream_name(model)
        # session or prefix routing: a second upstream over the same servers, picked by consistent hashing on the request's
        # conversation key (gateway.js sets it); a request without one goes to the least_conn upstream
        way = routing[model] if routing[model] in ROUTING else "least_conn"
        upstreams.append({"name": name, "model": model, "servers": servers, "retry": retry_upstreams(name, servers),
                          "routing": way, "affinity": f"{name}__affinity" if way != "least_conn" else "",
                          "keepalive": int(opts["keepalive"]), "keepalive_timeout": UPSTREAM_KEEPALIVE_TIMEOUT,
                          "max_fails": int(opts["max_fails"]), "fail_timeout": str(opts["fail_timeout"])})
    return {"upstreams": upstreams, "routes": {u["model"]: u["name"] for u in upstreams},
            "affinity": {u["model"]: {"upstream": u["affinity"], "mode": u["routing"]} for u in upstreams if u["affinity"]},
            "models": models_list(sorted(by_model)), "errors": errors, "paths": list(ROUTED_PATHS)}


def settings_problems(settings: Mapping[str, Any]) -> List[str]:
    """What is wrong with each gateway role variable the templates write as it is (SETTING_KINDS), named: a listen value is
    nginx words (its address[:port] first, then parameters such as ssl), a size, time or rate nginx's own syntax, a number
    digits. A value that would need quoting, or that ends a directive, is refused before any file is written."""
    problems = []
    expect = {"size": (NGINX_SIZE, "a size such as 1m"), "time": (NGINX_TIME, "a time such as 10s"),
              "rate": (NGINX_RATE, "a rate such as 20r/s"), "number": (re.compile(r"^\d+$"), "a whole number"),
              "workers": (re.compile(r"^(auto|\d+)$"), "auto or a whole number")}
    for name in sorted(settings):
        kind, value = SETTING_KINDS.get(name, "word"), settings[name]
        if kind == "listen":
            values = value if isinstance(value, list) else [value]
            for item in values:
                words = str(item).split(" ") if isinstance(item, (str, int)) and not isinstance(item, bool) else [""]
                bad = next((w for w in words if nginx_word(w)), None)
                if bad is not None or not (LISTEN_RE.match(words[0]) or words[0].startswith("unix:/")):
                    problems.append(f"{name}: {item!r} is not an nginx listen value (address[:port] or unix:/path, then parameters "
                                    "such as ssl, separated by single blanks)" + (f": {bad!r} holds {nginx_word(bad)}" if bad else ""))
        elif kind in expect:
            pattern, wanted = expect[kind]
            if isinstance(value, bool) or not pattern.match(str(value)):
                problems.append(f"{name}={value!r}: {wanted}")
        elif nginx_word(value):
            problems.append(f"{name}={value!r}: {nginx_word(value)}")
    return problems


def models_list(models: Sequence[str]) -> Dict[str, Any]:
    """/v1/models in OpenAI's list shape."""
    return {"object": "list", "data": [{"id": m, "object": "model", "created": 0, "owned_by": "llmfleet"} for m in models]}


def api_keys(keys: Any) -> List[Dict[str, Any]]:
    """Checked gateway_api_keys ([{name, key, models?}]) as [{name, sha256, models?}]: what the gateway stores. The key
    itself never appears in a message. `models`, when given, is the served models the key may use (key_scopes checks
    them against the plans)."""
    if not isinstance(keys, list) or not keys:
        raise GatewayError(f"gateway_api_keys must be a non-empty list of {{name, key}}, got {type(keys).__name__}")
    out: List[Dict[str, Any]] = []
    names = set()
    digests = set()
    for i, item in enumerate(keys):
        if not isinstance(item, Mapping) or not {"name", "key"} <= set(item) or set(item) - KEY_FIELDS:
            raise GatewayError(f"gateway_api_keys[{i}] must have name and key, and may have {', '.join(sorted(KEY_FIELDS - {'name', 'key'}))}"
                               f"; it has {sorted(str(k) for k in item) if isinstance(item, Mapping) else type(item).__name__}")
        name, key = str(item["name"]), str(item["key"])
        if not NAME_RE.match(name):
            raise GatewayError(f"gateway_api_keys[{i}].name={name!r} must be 1-64 letters, digits, '.', '_' or '-'")
        if name == "__proto__":   # a JavaScript object's name for its prototype: gateway_data.js holds keys by name
            raise GatewayError(f"gateway_api_keys[{i}].name={name!r} is JavaScript's own word; give the key another name")
        if not KEY_RE.match(key):
            raise GatewayError(f"gateway_api_keys[{i}] ({name}): the key must be 16-256 characters of A-Z a-z 0-9 . _ ~ + / = -")
        digest = hashlib.sha256(key.encode()).hexdigest()
        if name in names or digest in digests:
            raise GatewayError(f"gateway_api_keys[{i}] ({name}): names and keys must be unique")
        names.add(name)
        digests.add(digest)
        entry: Dict[str, Any] = {"name": name, "sha256": digest}
        if "previous_key" in item or "previous_until" in item:
            entry["previous"] = _previous(f"gateway_api_keys[{i}] ({name})", item, digests)
        if "models" in item:
            models = item["models"]
            if not isinstance(models, list) or not models or not all(isinstance(m, str) and m.strip() for m in models):
                raise GatewayError(f"gateway_api_keys[{i}] ({name}).models must be a non-empty list of served model names "
                                   f"(leave models out for a key that may use every model), got {models!r}")
            entry["models"] = sorted({m.strip() for m in models})
        if "rate" in item and not NGINX_RATE.match(str(item["rate"])):
            raise GatewayError(f"gateway_api_keys[{i}] ({name}).rate={item['rate']!r}: give requests per second or minute, "
                               "such as 5r/s or 300r/m")
        for field in ("burst", "max_conns"):
            if field in item and (isinstance(item[field], bool) or not re.fullmatch(r"\d+", str(item[field]))):
                raise GatewayError(f"gateway_api_keys[{i}] ({name}).{field}={item[field]!r}: give a whole number, 0 or more")
        if "burst" in item and "rate" not in item:
            raise GatewayError(f"gateway_api_keys[{i}] ({name}) has burst without rate: give its rate too (burst is the "
                               "requests over that rate answered at once)")
        if "budgets" in item:
            entry["budgets"] = _budgets(f"gateway_api_keys[{i}] ({name}).budgets", item["budgets"])
        entry.update({f: str(item[f]) for f in ("rate",) if f in item})
        entry.update({f: int(item[f]) for f in ("burst", "max_conns") if f in item})
        out.append(entry)
    return out


def _previous(where: str, item: Mapping[str, Any], digests: set) -> Dict[str, Any]:
    """A rotated key's previous key, valid beside the new one until `previous_until` (UTC): {sha256, until (seconds
    since the epoch), until_text}. The digest joins `digests` (a previous key is unique as any other)."""
    if not {"previous_key", "previous_until"} <= set(item):
        raise GatewayError(f"{where}: a rotated key needs previous_key and previous_until together (the old key, and when it "
                           "stops: 2026-12-06T12:00:00Z); take both out once the overlap is over")
    until = item["previous_until"]
    if isinstance(until, datetime.datetime):
        # YAML reads an unquoted 2026-12-06T12:00:00Z as a timestamp: taken as it is (one without a zone is UTC)
        moment = until.astimezone(datetime.timezone.utc).replace(tzinfo=None) if until.tzinfo else until
        until = moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    until = str(until)
    if not UNTIL_RE.match(until):
        raise GatewayError(f"{where}.previous_until={until!r}: give the end of the overlap in UTC, such as 2026-12-06T12:00:00Z")
    try:
        moment = datetime.datetime.strptime(until.rstrip("Z") + (":00" if until.count(":") == 1 else ""), "%Y-%m-%dT%H:%M:%S")
    except ValueError as exc:
        raise GatewayError(f"{where}.previous_until={until!r} is not a date and time ({exc}): give one such as "
                           "2026-12-06T12:00:00Z") from None
    previous = str(item["previous_key"])
    if not KEY_RE.match(previous):
        raise GatewayError(f"{where}: the previous key must be 16-256 characters of A-Z a-z 0-9 . _ ~ + / = -")
    digest = hashlib.sha256(previous.encode()).hexdigest()
    if digest in digests:
        raise GatewayError(f"{where}: the previous key is the key itself or another key's; keys must be unique")
    digests.add(digest)
    seconds = int(moment.replace(tzinfo=datetime.timezone.utc).timestamp())
    return {"sha256": digest, "until": seconds, "until_text": moment.strftime("%Y-%m-%dT%H:%M:%SZ")}


def key_digests(keys: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """What gateway.js reads to know a key: {names: {sha256: name} for every key and every previous key, until:
    {sha256: milliseconds since the epoch} for the previous keys (refused from then on, at every request)."""
    names = {str(k["sha256"]): str(k["name"]) for k in keys}
    until: Dict[str, int] = {}
    for k in keys:
        if k.get("previous"):
            names[str(k["previous"]["sha256"])] = str(k["name"])
            until[str(k["previous"]["sha256"])] = int(k["previous"]["until"]) * 1000
    return {"names": names, "until": until}


def key_summary(keys: Sequence[Mapping[str, Any]], now: float) -> List[str]:
    """One line per checked key, names and policies only: its models, limits, budgets and a previous key's overlap."""
    lines = []
    for k in keys:
        parts = [f"models {', '.join(k['models'])}" if k.get("models") else "every model"]
        parts += [f"rate {k['rate']}" + (f" burst {k['burst']}" if k.get("burst") else "")] if k.get("rate") else []
        parts += [f"max_conns {k['max_conns']}"] if "max_conns" in k else []
        parts += [f"budget {b['tokens']} tokens per {b['per']}" for b in k.get("budgets") or []]
        previous = k.get("previous")
        if previous:
            left = int(previous["until"] - now)
            parts.append(f"previous key accepted until {previous['until_text']} ({_duration(left)} from now)" if left > 0 else
                         f"previous key refused since {previous['until_text']}: take previous_key and previous_until out")
        lines.append(f"{k['name']}: {'; '.join(parts)}")
    return lines


def _duration(seconds: int) -> str:
    if seconds >= 7200:
        return f"{seconds // 3600} h"
    return f"{seconds // 60} min" if seconds >= 120 else f"{seconds} s"


def key_probes(keys: Any, checked: Sequence[Mapping[str, Any]], now: float, margin: int = 5) -> List[Dict[str, Any]]:
    """What each key should get from the gateway right after a render: [{name, which, key, status}] - 200 for every key
    and for a previous key inside its overlap, 401 for a previous key past it; a previous key within `margin` seconds of
    its end is left out (either answer is right). `keys` is gateway_api_keys as given (the values), `checked` the same
    list through api_keys (in the same order). The result holds keys: keep it under no_log."""
    probes: List[Dict[str, Any]] = []
    for item, k in zip(keys, checked):
        probes.append({"name": k["name"], "which": "key", "key": str(item["key"]), "status": 200})
        previous = k.get("previous")
        if previous and abs(previous["until"] - now) > margin:
            probes.append({"name": k["name"], "which": "previous key", "key": str(item["previous_key"]),
                           "status": 200 if previous["until"] > now else 401})
    return probes


def probe_misses(results: Sequence[Mapping[str, Any]]) -> List[str]:
    """The probes (key_probes, asked by a uri loop) whose answer was not the one expected, by name only:
    ["team-a's previous key: HTTP 200, expected 401"]."""
    misses = []
    for result in results:
        probe = result.get("item") or {}
        got = result.get("status")
        if not probe_answered(got, probe.get("status")):
            said = f" ({str(result.get('msg'))[:200]})" if got in (None, -1) else ""
            misses.append(f"{probe.get('name')}'s {probe.get('which')}: HTTP {got}{said}, expected {probe.get('status')}")
    return misses


def probe_answered(got: Any, expected: Any) -> bool:
    """Whether a probe's answer is the one expected: a key that must be accepted may get 200 or 429 (known, and held
    back by its own rate: a probe is a request like any other); one that must be refused, 401."""
    return got == 401 if expected == 401 else got in (200, 429)


def _budgets(where: str, budgets: Any) -> List[Dict[str, Any]]:
    """A key's token budgets [{tokens, per}] checked: whole numbers above 0, one budget per period."""
    if not isinstance(budgets, list) or not budgets:
        raise GatewayError(f"{where} must be a non-empty list of {{tokens, per}} (per: {', '.join(BUDGET_PERIODS)}), got {budgets!r}")
    out: List[Dict[str, Any]] = []
    for n, budget in enumerate(budgets):
        if not isinstance(budget, Mapping) or set(budget) != {"tokens", "per"}:
            raise GatewayError(f"{where}[{n}] must be {{tokens, per}}, got {budget!r}")
        tokens, per = budget["tokens"], budget["per"]
        if isinstance(tokens, bool) or not re.fullmatch(r"[1-9]\d{0,14}", str(tokens)):
            raise GatewayError(f"{where}[{n}].tokens={tokens!r}: give a whole number of tokens above 0 (prompt and completion "
                               "together)")
        if per not in BUDGET_PERIODS:
            raise GatewayError(f"{where}[{n}].per={per!r}: one of {', '.join(BUDGET_PERIODS)} (a calendar window in UTC)")
        if any(b["per"] == per for b in out):
            raise GatewayError(f"{where}[{n}]: a second budget per {per}; give one budget per period")
        out.append({"tokens": int(tokens), "per": str(per)})
    return sorted(out, key=lambda b: BUDGET_PERIODS.index(b["per"]))


def key_budgets(keys: Sequence[Mapping[str, Any]], accounting: bool, interval: Any = 2) -> Dict[str, Any]:
    """The keys' token budgets for the gateway's Lua counters: {names: [key names with budgets], lua: a Lua table
    literal {["name"] = {{tokens = N, per = "day"}, ...}}} (names are [A-Za-z0-9._-]: safe in a Lua string), interval:
    the seconds between two writes of the counters (gateway_budget_save_interval). Budgets count the tokens of the
    answers' usage, which the gateway reads only with gateway_usage_accounting on."""
    budgets = {str(k["name"]): k["budgets"] for k in keys if k.get("budgets")}
    if budgets and not accounting:
        raise GatewayError(f"gateway_api_keys ({', '.join(sorted(budgets))}) have token budgets, which count the answers' usage: "
                           "set gateway_usage_accounting to true, or remove the budgets")
    if isinstance(interval, bool) or not re.fullmatch(r"[1-9]\d{0,4}", str(interval)):
        raise GatewayError(f"gateway_budget_save_interval={interval!r}: give a whole number of seconds, 1 or more")
    rows = [f'["{name}"] = {{' + ", ".join(f'{{tokens = {b["tokens"]}, per = "{b["per"]}"}}' for b in items) + "}"
            for name, items in sorted(budgets.items())]
    return {"names": sorted(budgets), "lua": "{" + ", ".join(rows) + "}", "interval": int(interval)}


def key_limits(keys: Sequence[Mapping[str, Any]], key_max_conns: int) -> Dict[str, Any]:
    """The per-key limits of keys with their own `rate` (and `burst`, 0 without) or `max_conns` (0: none), as nginx zones:
    one limit_req zone per distinct (rate, burst) and one limit_conn zone per distinct max_conns, each counting only its
    keys (by name, through a map); the fleet-wide zones (gateway_rate_limit, gateway_key_max_conns) skip those keys.
    {rate_zones: [{zone, variable, rate, burst, keys}], conn_zones: [{zone, variable, max, keys}], own_rate: [names],
    own_conns: [names]}."""
    rates: Dict[Tuple[str, int], List[str]] = {}
    conns: Dict[int, List[str]] = {}
    for key in keys:
        if "rate" in key:
            rates.setdefault((str(key["rate"]), int(key.get("burst", 0))), []).append(str(key["name"]))
        if "max_conns" in key and int(key["max_conns"]) != int(key_max_conns):
            conns.setdefault(int(key["max_conns"]), []).append(str(key["name"]))
    rate_zones = [{"zone": f"llmfleet_key_rate_{n}", "variable": f"$llmfleet_key_rate_{n}", "rate": rate, "burst": burst,
                   "keys": sorted(names)} for n, ((rate, burst), names) in enumerate(sorted(rates.items()))]
    limited = [(most, names) for most, names in sorted(conns.items()) if most > 0]
    conn_zones = [{"zone": f"llmfleet_key_conns_{n}", "variable": f"$llmfleet_key_conns_{n}", "max": most, "keys": sorted(names)}
                  for n, (most, names) in enumerate(limited)]
    return {"rate_zones": rate_zones, "conn_zones": conn_zones,
            "own_rate": sorted(n for names in rates.values() for n in names),
            "own_conns": sorted(n for names in conns.values() for n in names)}


def key_scopes(keys: Sequence[Mapping[str, Any]], model: Mapping[str, Any]) -> Dict[str, Any]:
    """Which served models each key with `models` may use, checked against what the plans serve (gateway_model), and
    the /v1/models answer each such key gets: {allowed: {name: [model]}, models: {name: JSON text}}. A key without
    `models` may use every model and is in neither."""
    served = [str(m["id"]) for m in (model.get("models") or {}).get("data") or []]
    allowed: Dict[str, List[str]] = {}
    listed: Dict[str, str] = {}
    for key in keys:
        if "models" not in key:
            continue
        unknown = [m for m in key["models"] if m not in served]
        if unknown:
            raise GatewayError(f"gateway_api_keys ({key['name']}).models names {', '.join(unknown)}, which no plan serves; "
                               f"the served models are {', '.join(served) or 'none'}: fix the name or plan the model")
        allowed[str(key["name"])] = list(key["models"])
        listed[str(key["name"])] = json.dumps(models_list(list(key["models"])))
    return {"allowed": allowed, "models": listed}


def client_policy(options: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The gateway's limits per client: requests in flight per key and per address (limit_conn, 0: none), and the
    addresses or networks that may still use the plain-HTTP listeners when TLS is on (normalized, sorted)."""
    opts = dict(CLIENT_POLICY, **(options or {}))
    unknown = sorted(set(opts) - set(CLIENT_POLICY))
    if unknown:
        raise GatewayError(f"unknown client policy options {unknown}; known: {sorted(CLIENT_POLICY)}")
    out: Dict[str, Any] = {}
    for name in ("key_max_conns", "address_max_conns"):
        value = opts[name]
        text = str(value).strip()
        if isinstance(value, bool) or not text.isdigit():
            raise GatewayError(f"{CLIENT_POLICY_VARS[name]}={value!r} must be a whole number of requests in flight at once "
                               "(0: no limit)")
        out[name] = int(text)
    allow = opts["plain_allow"]
    if isinstance(allow, (str, bytes)) or not isinstance(allow, Sequence):
        raise GatewayError(f"gateway_tls_plain_allow must be a list of addresses or networks, got {type(allow).__name__}")
    out["plain_allow"] = _networks("gateway_tls_plain_allow", allow)
    return out


def gateway_addresses(gateway_hosts: Sequence[str], addresses: Mapping[str, Any]) -> List[str]:
    """The addresses the gateway hosts connect from (their llmfleet_private_address): what each edge allows."""
    out = []
    for host in gateway_hosts:
        text = addresses.get(host)
        if not text:
            raise GatewayError(f"{host} (llm_gateway) has no llmfleet_private_address: the engine hosts' edges allow "
                               "only the gateway hosts' addresses; set it, or set gateway_edge_allow")
        try:
            out.append(str(ipaddress.ip_address(str(text).strip())))
        except ValueError as exc:
            raise GatewayError(f"{host}: llmfleet_private_address={text!r} is not an IP address") from exc
    return sorted(set(out))


def retry_upstreams(name: str, servers: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """Where a request goes once more when its first server answered 503 (nothing reached an engine there): per server of
    the model, an upstream of the model's other servers, named after the model's upstream and the server's place. nginx
    open source cannot leave the failed server out of a second pass over the same upstream for a POST (only
    proxy_next_upstream non_idempotent would, and that also resends requests an engine received), so the gateway's
    template maps the first try's address (one server of one model) to the upstream without it. A model with one server has none:
    its 503 reaches the client."""
    if len(servers) < 2:
        return []
    return [{"name": f"{name}__not{i}", "address": s["address"], "servers": [o for j, o in enumerate(servers) if j != i]}
            for i, s in enumerate(servers)]


def _networks(name: str, items: Sequence[Any]) -> List[str]:
    """Addresses or networks as nginx's allow and geo take them: normalized, without repeats, IPv4 first; `name` (the
    inventory variable) is named with a value that is neither."""
    networks = set()
    for item in items:
        try:
            networks.add(ipaddress.ip_network(str(item).strip(), strict=False))
        except ValueError as exc:
            raise GatewayError(f"{name}: {item!r} is not an address or network (such as 10.0.0.0/8)") from exc
    return [str(n) for n in sorted(networks, key=lambda n: (n.version, n))]


def edge_model(plan: Mapping[str, Any], allow: Sequence[str], options: Optional[Mapping[str, Any]] = None,
               metrics_allow: Sequence[str] = ()) -> Dict[str, Any]:
    """This engine host's edge: one server per instance with an edge (listen edge.address:port, proxy to
    127.0.0.1:port), reachable from `allow` only, with the gateway's path allow-list; and vLLM's /metrics, which its
    --api-key does not guard, for `metrics_allow` only (the monitoring host), never for `allow`'s other addresses.
    `metrics_only` is what of `metrics_allow` no network of `allow` holds: those connect, and get /metrics and 403."""
    opts = dict(DEFAULTS, **(options or {}))
    servers = []
    for _dep, inst in _instances(plan):
        edge = inst.get("edge")
        if not edge:
            continue
        servers.append({"instance": inst["name"], "listen": f"{edge['address']}:{int(edge['port'])}",
                        "upstream": f"llmfleet_edge_{int(inst['port'])}",
                        "backend": f"{inst.get('bind_address') or LOOPBACK}:{int(inst['port'])}",
                        "keepalive": int(opts["keepalive"]), "keepalive_timeout": UPSTREAM_KEEPALIVE_TIMEOUT})
    if not servers:   # the gateway shares this host, or nothing is planned: no edge, whatever `allow` says
        return {"servers": [], "allow": [], "metrics_allow": [], "metrics_only": [], "paths": list(ALLOWED_PATHS)}
    if not allow:
        raise GatewayError(f"{plan.get('host')}: its instances have an edge ({', '.join(s['listen'] for s in servers)}) but there is "
                           "no gateway address to allow: put a host in llm_gateway (with llmfleet_private_address), or set "
                           "gateway_edge_allow")
    checked = _networks("gateway_edge_allow", allow)
    metrics = _networks("gateway_edge_metrics_allow", metrics_allow)
    nets = [ipaddress.ip_network(a) for a in checked]
    only = [m for m in metrics if not any(n.version == ipaddress.ip_network(m).version and ipaddress.ip_network(m).subnet_of(n)
                                          for n in nets)]
    return {"servers": servers, "allow": checked, "metrics_allow": metrics, "metrics_only": only,
            "paths": list(ALLOWED_PATHS), "metrics_path": METRICS_PATH}


def local_url(listen: Sequence[str], address: Optional[str] = None) -> str:
    """The gateway's own /v1 URL on its host (what the web UI and verify.yml use there), from its nginx
    listen values: a plain listener first; a wildcard address is reached on loopback, or, from another
    host (bench.yml's clients on the engine hosts), at the gateway's `address`."""
    if not listen:
        raise GatewayError("gateway_listen is empty: nothing on this host can reach the gateway")
    parsed: List[Tuple[bool, str, int]] = []
    for value in listen:
        words = str(value).split()
        if not words or words[0].startswith("unix:"):
            continue
        match = LISTEN_RE.match(words[0])
        if not match:
            raise GatewayError(f"gateway_listen value {value!r} is not an nginx listen address[:port]")
        tls = "ssl" in words[1:]
        host = match.group("host")
        port_text = match.group("port")
        if host and host.isdigit() and not port_text:
            host, port_text = None, host
        v6 = match.group("v6")
        if v6 is not None:
            wildcard = v6 in ("::", "0:0:0:0:0:0:0:0")
            where = (f"[{address}]" if address and ":" in address else address or "[::1]") if wildcard else f"[{v6}]"
        elif host in (None, "*", "0.0.0.0"):
            where = address or "127.0.0.1"
        else:
            where = host
        parsed.append((tls, where, int(port_text) if port_text else (443 if tls else 80)))
    if not parsed:
        raise GatewayError(f"gateway_listen {list(listen)!r} has no TCP listener")
    tls, where, port = sorted(parsed, key=lambda p: p[0])[0]
    scheme = "https" if tls else "http"
    default = 443 if tls else 80
    return f"{scheme}://{where}{'' if port == default else f':{port}'}/v1"
