# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""PRIVATE module_utils of llmfleet.serving: what playbooks/reach.yml prints at the end of site.yml - the
fleet's instances from their plans, where the gateway and the web UI answer, which key to use and a
ready-to-paste request. Pure and typed; it reads plans and inventory values, never a secret's value."""

from __future__ import annotations

import ipaddress
import json
import shlex
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ansible_collections.llmfleet.serving.plugins.module_utils._fleet_plans import api_instances
from ansible_collections.llmfleet.serving.plugins.module_utils._monitoring import hostport
from ansible_collections.llmfleet.serving.plugins.module_utils._verify import QUESTION


class ReachError(ValueError):
    """Malformed input."""


def _arg(args: Sequence[Any], flag: str) -> str:
    args = [str(a) for a in args]
    return args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) else "-"


def instance_rows(plans: Mapping[str, Mapping[str, Any]]) -> List[List[str]]:
    """host, instance, served model, port, vLLM version, dtype, max model len, max seqs - one row per instance."""
    rows = []
    for host in sorted(plans):
        plan = plans[host]
        if not isinstance(plan, Mapping):
            raise ReachError(f"the plan of {host} is not a mapping: run playbooks/plan.yml")
        for dep in plan.get("deployments") or []:
            for inst in api_instances(dep):
                args = inst.get("args") or []
                rows.append([host, str(inst["name"]), str(inst.get("served_model_name") or dep["name"]), str(inst["port"]),
                             str(dep.get("engine_version", "")), _arg(args, "--dtype"), _arg(args, "--max-model-len"),
                             _arg(args, "--max-num-seqs")])
    return rows


def chat_models(plans: Mapping[str, Mapping[str, Any]]) -> List[str]:
    """The served models a chat request can try: every model none of whose instances is a pooling model (runner pooling
    answers /v1/embeddings, /score or /classify, never a chat)."""
    chat, pooling = set(), set()
    for plan in plans.values():
        for dep in (plan.get("deployments") or []) if isinstance(plan, Mapping) else []:
            for inst in api_instances(dep):
                (pooling if inst.get("runner") == "pooling" else chat).add(str(inst.get("served_model_name") or dep["name"]))
    return sorted(chat - pooling)


def _table(head: Sequence[str], body: Sequence[Sequence[str]]) -> List[str]:
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*head).rstrip()] + [fmt.format(*b).rstrip() for b in body]


def curl(url: str, model: str, key: str) -> str:
    """One chat request with curl; `key` is a shell word (a $VAR or $(cat FILE)), left unquoted for the shell. An
    HTTP error (a wrong key: 401) prints the gateway's answer and exits non-zero."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": QUESTION}], "max_tokens": 64, "temperature": 0})
    return (f"curl -sS --fail-with-body {shlex.quote(url.rstrip('/') + '/chat/completions')} -H \"Authorization: Bearer {key}\" "
            f"-H 'Content-Type: application/json' -d {shlex.quote(body)}")


def try_script(url: str, model: str, key: str, key_name: str, key_file: Optional[str] = None) -> str:
    """A shell script holding the same request as the printed curl (`sh FILE` runs it): the command a summary offers
    must run as printed, whatever the terminal or the callback does to a long line. It stops with a sentence when
    the key is not there (an empty key would only get a 401)."""
    if key_file:
        guard = (f"[ -r {shlex.quote(key_file)} ] || {{ echo \"the key '{key_name}' is not in {shlex.quote(key_file)} on this "
                 f"machine\" >&2; exit 1; }}")
    else:
        guard = f": \"${{LLMFLEET_KEY:?export the gateway key named {key_name} as LLMFLEET_KEY}}\""
    return "\n".join([
        "#!/bin/sh",
        f"# One chat request through the gateway with the key '{key_name}' (written by playbooks/reach.yml; no secret in it).",
        "set -e",
        guard,
        curl(url, model, key),
        "",
    ])


def try_file(folder: str, host: str) -> str:
    """Where the try-script of one gateway host lies on the controller."""
    return f"{folder.rstrip('/')}/try-{host}.sh"


def scripts(gateways: Sequence[Mapping[str, Any]], models: Sequence[str], folder: str) -> List[Dict[str, str]]:
    """[{path, content}]: one try-script per gateway host (none when no model is planned)."""
    if not models:
        return []
    return [{"path": try_file(folder, str(gw["host"])),
             "content": try_script(str(gw["url"]), sorted(models)[0], _key_word(gw), str(gw["key_name"]), gw.get("key_file"))}
            for gw in gateways]


def _key_word(gw: Mapping[str, Any]) -> str:
    """The key as a shell word: read from its file on the controller, else the LLMFLEET_KEY environment variable."""
    return f"$(cat {shlex.quote(str(gw['key_file']))})" if gw.get("key_file") else "$LLMFLEET_KEY"


def lines(plans: Mapping[str, Mapping[str, Any]], gateways: Sequence[Mapping[str, Any]],
          webuis: Sequence[Mapping[str, Any]], answers: Sequence[str] = (), folder: Optional[str] = None,
          monitoring: Optional[Mapping[str, Any]] = None) -> List[str]:
    """The closing summary. gateways: {host, url, key_name, key_file (optional: a controller file holding the
    key)}; webuis: {host, url, email, password_file (optional)}; answers: verify_answers' lines; folder: where
    scripts() wrote the try-scripts (their `sh` command is offered too); monitoring: {host, listen, dashboards, user,
    password_file} where Prometheus listens on its host, who signs in there, and the folder of the Grafana dashboards on
    this controller."""
    rows = instance_rows(plans)
    models = sorted({r[2] for r in rows})
    chat = chat_models(plans)
    out = [f"The fleet: {len(rows)} instance(s) of {len(models)} model(s) on {len({r[0] for r in rows})} host(s)"]
    if rows:
        out += _table(["host", "instance", "model", "port", "vLLM", "dtype", "max-model-len", "max-num-seqs"], rows)
    for gw in gateways:
        for need in ("host", "url", "key_name"):
            if not gw.get(need):
                raise ReachError(f"a gateway entry lacks {need}: {dict(gw)}")
        out.append(f"Gateway on {gw['host']}: {gw['url']} (OpenAI-compatible API; every request needs a key)")
        if gw.get("key_file"):
            out.append(f"  key '{gw['key_name']}': in {gw['key_file']} on this controller")
        else:
            out.append(f"  key '{gw['key_name']}': the gateway_api_keys entry of that name (your vault); export it as LLMFLEET_KEY")
        if models and not chat:
            out.append(f"  try:  POST {str(gw['url']).rstrip('/')}/embeddings (or the model's /score, /classify) - the fleet "
                       "serves pooling models only, which answer no chat")
        if chat:
            out.append(f"  try:  {curl(str(gw['url']), chat[0], _key_word(gw))}")
            if folder:
                out.append(f"  or:   sh {shlex.quote(try_file(folder, str(gw['host'])))}")
    for ui in webuis:
        if not ui.get("url"):
            out.append(f"Open WebUI on {ui['host']}: behind its gateway's nginx (set webui_public_url to print its address)")
            continue
        where = f"password in {ui['password_file']}" if ui.get("password_file") else "password: webui_admin_password (your vault)"
        out.append(f"Open WebUI on {ui['host']}: {ui['url']}  login {ui.get('email') or '(webui_admin_email)'}, {where}")
    if monitoring:
        out += monitoring_lines(monitoring)
    out += list(answers)
    return out


def _prometheus_login(monitoring: Mapping[str, Any], loopback: bool) -> str:
    """Who to sign in as: the first of monitoring_prometheus_users (`user`) and where its password lies (`password_file`,
    else the vault), never the password; without a user, that none is asked."""
    user = monitoring.get("user")
    if not user:
        return "no credential: keep it there" if loopback else "no credential: the monitoring role refuses this; set monitoring_prometheus_users"
    where = f"password in {monitoring['password_file']}" if monitoring.get("password_file") \
        else "password: its monitoring_prometheus_users entry (your vault)"
    return f"user {user}, {where}"


# The alerts page of the distributions' Prometheus 2.x: Debian's package (2.42.0+ds) builds no React UI, so `/alerts` is 404
# there and `/` redirects to `/classic/graph`; the classic pages are served under /classic by every 2.x since the React UI
# became the default (seen in the demo: /classic/alerts 200, /alerts 404)
ALERTS_PATH = "/classic/alerts"


def monitoring_lines(monitoring: Mapping[str, Any]) -> List[str]:
    """Where Prometheus and its alerts are, who to sign in as, and the dashboards: a loopback listener is reached through an
    SSH tunnel to the host (`ssh_host`: its ansible_host, else its name); one on every address at the host's `address`."""
    host, listen = str(monitoring["host"]), str(monitoring["listen"])
    text, _sep, port = listen.rpartition(":")
    text = text.strip("[]")
    try:
        ip = ipaddress.ip_address(text) if text else None
    except ValueError:
        ip = None
    if text == "localhost" or (ip is not None and ip.is_loopback):
        where = (f"on loopback there: ssh -N -L {port}:{listen} {monitoring.get('ssh_host') or host}, then "
                 f"http://127.0.0.1:{port}{ALERTS_PATH} ({_prometheus_login(monitoring, True)})")
    else:
        shown = listen
        if not text or (ip is not None and ip.is_unspecified):
            shown = hostport(str(monitoring.get("address") or host), int(port))
        where = f"http://{shown}{ALERTS_PATH} ({_prometheus_login(monitoring, False)})"
    return [f"Prometheus on {host}: {listen} scrapes every instance and host; alerts {where}",
            f"  Grafana dashboards: {monitoring['dashboards']}/llmfleet-*.json on this controller (import them into your Grafana)"]


def gateway_entry(host: str, url: str, keys: Sequence[Mapping[str, Any]], key_name: Optional[str] = None,
                  key_file: Optional[str] = None) -> Dict[str, Any]:
    """One gateway's entry for lines(): the named key (default the first), never its value."""
    names = [str(k.get("name")) for k in keys or [] if isinstance(k, Mapping)]
    if not names:
        raise ReachError(f"{host}: gateway_api_keys is empty; the gateway refuses every request without a key")
    name = key_name or names[0]
    if name not in names:
        raise ReachError(f"{host}: no gateway_api_keys entry is named {name!r} (there are {', '.join(names)})")
    return {"host": host, "url": url, "key_name": name, "key_file": key_file or None}
