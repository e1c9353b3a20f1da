# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""PRIVATE module_utils of llmfleet.serving: Open WebUI on a gateway host - its environment, its unit and
where it points. Not a public API. Pure and typed.

Facts behind the settings (read in open-webui 0.12.4's env.py, config.py, main.py, utils/middleware.py,
utils/models.py and routers/models.py; docs/gateway.md "Open WebUI" says the same for operators):
- WEBUI_ADMIN_EMAIL/PASSWORD/NAME create the admin in the app's lifespan start-up when no user exists, and
  uvicorn accepts connections only after the lifespan start-up: the port never answers before the admin
  exists (until a user exists the first signup would become admin, ENABLE_SIGNUP or not).
- Signup, default role, Ollama, OPENAI_API_BASE_URLS/KEYS and the RAG engine are written to the database at
  first start and the database wins afterwards, unless ENABLE_PERSISTENT_CONFIG=false: then the environment
  wins at every start, so a key changed in the inventory reaches the UI at the next run.
- USE_SLIM_DOCKER=true is the mode of the requirements-slim.txt install (no torch, no chromadb; vector
  store pgvector only when used); RAG_EMBEDDING_ENGINE=openai means no embedding model is loaded or
  downloaded; OFFLINE_MODE=true sets HF_HUB_OFFLINE and skips the version check.
- Tools: a chat's `params.function_calling` defaults to native; for chats from the UI (with capability
  `builtin_tools`, default on) Open WebUI then sends `tools` (its built-in time, knowledge and chat-history tools).
  vLLM treats `tools` without `tool_choice` as "auto" and answers 400 ("auto" tool choice requires
  --enable-auto-tool-choice and --tool-call-parser) when the instance has no tool parser. Only "legacy" turns native
  tools off (utils/middleware.py compares with 'legacy'). So every model gets a row of its own (routers/models.py
  /create, /model/update) whose function calling follows its plan, and DEFAULT_MODEL_PARAMS /
  DEFAULT_MODEL_METADATA make "legacy, no built-in tools" the default for a model no plan describes.
- A connection model without a row is visible to admins only (utils/models.py get_filtered_models); the row's
  public read grant (principal user:*) shows it to every signed-in user.
- Reasoning: streamed `reasoning` / `reasoning_content` deltas (what vLLM's reasoning parsers write) become the
  collapsible thinking block with no setting (utils/middleware.py); `<think>` tags in content are detected by default.
- Fixed advisories: 0.12.4 ("strongly recommended" security fixes), 0.11.4 (seven CVEs), 0.9.5 (SSRF),
  0.9.0 (x-api-key bypass): nothing older is accepted.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.llmfleet.serving.plugins.module_utils._fleet_plans import api_instances
from ansible_collections.llmfleet.serving.plugins.module_utils._gateway import GatewayError, local_url
from ansible_collections.llmfleet.serving.plugins.module_utils._serving import env_file
from ansible_collections.llmfleet.serving.plugins.module_utils._units import Unit, UnitError, render

MIN_VERSION: Tuple[int, int, int] = (0, 12, 4)
SERVICE = "llmfleet-open-webui"
# what the role decides; webui_extra_env may not change them
MANAGED = (
    "DATA_DIR", "HOME", "WEBUI_SECRET_KEY", "WEBUI_AUTH", "WEBUI_ADMIN_EMAIL", "WEBUI_ADMIN_PASSWORD", "WEBUI_ADMIN_NAME",
    "ENABLE_SIGNUP", "DEFAULT_USER_ROLE", "ENABLE_PERSISTENT_CONFIG", "RESET_CONFIG_ON_START", "ENABLE_OLLAMA_API",
    "ENABLE_OPENAI_API", "OPENAI_API_BASE_URLS", "OPENAI_API_KEYS", "OFFLINE_MODE", "HF_HUB_OFFLINE", "RAG_EMBEDDING_ENGINE",
    "RAG_OPENAI_API_BASE_URL", "RAG_OPENAI_API_KEY", "USE_SLIM_DOCKER", "FORWARDED_ALLOW_IPS", "PORT", "HOST",
    "WEBUI_URL", "CORS_ALLOW_ORIGIN", "DEFAULT_MODEL_PARAMS", "DEFAULT_MODEL_METADATA",
)
# A model no plan describes (one added to the gateway before this role ran again) chats without native tools: the
# safe default, since vLLM refuses `tools` where the instance has no tool parser.
DEFAULT_MODEL_PARAMS = {"function_calling": "legacy"}
DEFAULT_MODEL_METADATA = {"capabilities": {"builtin_tools": False}}
PUBLIC_READ = {"principal_type": "user", "principal_id": "*", "permission": "read"}
MODEL_ACCESS = ("public", "admins")
EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+$")


class WebUIError(ValueError):
    """Malformed web UI input: one sentence naming the variable."""


def version_tuple(version: str) -> Tuple[int, int, int]:
    match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", str(version).strip())
    if not match:
        raise WebUIError(f"webui_version={version!r} must be an exact release such as 0.12.4")
    return int(match.group(1)), int(match.group(2)), int(match.group(3))


def check_version(version: str) -> str:
    if version_tuple(version) < MIN_VERSION:
        floor = ".".join(map(str, MIN_VERSION))
        raise WebUIError(f"webui_version={version} is older than {floor}, the oldest Open WebUI with the published security "
                         f"fixes (0.12.4 security release, 0.11.4 seven CVEs, 0.9.5 SSRF): set webui_version to {floor} or newer")
    return str(version).strip()


def gateway_key(keys: Any, name: str) -> str:
    """The key named `name` in gateway_api_keys: the web UI is a client of the gateway like any other."""
    if not isinstance(keys, list):
        raise WebUIError("gateway_api_keys is not a list of {name, key}: the web UI uses one of them to reach the gateway")
    for item in keys:
        if isinstance(item, Mapping) and str(item.get("name")) == name and item.get("key"):
            return str(item["key"])
    names = sorted(str(i.get("name")) for i in keys if isinstance(i, Mapping))
    raise WebUIError(f"gateway_api_keys has no key named {name!r} (names: {', '.join(names) or 'none'}): add one "
                     f"({{name: {name}, key: <vault>}}) or set webui_gateway_key_name to one of them")


def environment(options: Mapping[str, Any]) -> Dict[str, str]:
    """Open WebUI's whole environment (the EnvironmentFile's content)."""
    email = str(options.get("admin_email") or "")
    password = str(options.get("admin_password") or "")
    if not EMAIL_RE.match(email):
        raise WebUIError(f"webui_admin_email={email!r} is not an e-mail address: the admin is created from it at the first start")
    if len(password) < 8 or len(password.encode()) > 72:
        # bcrypt refuses more than 72 bytes: Open WebUI would log the error and start with no user at all
        raise WebUIError("webui_admin_password must have 8 to 72 bytes (bcrypt's limit; keep it in vault)")
    secret = str(options.get("secret_key") or "")
    if len(secret) < 24:
        raise WebUIError("the web UI's secret key must have at least 24 characters (host_common controller_secret makes 48)")
    base_url = str(options["gateway_url"])
    key = str(options["gateway_key"])
    data_dir = str(options["data_dir"])
    env = {
        "DATA_DIR": data_dir,
        "HOME": data_dir,
        "WEBUI_SECRET_KEY": secret,
        "WEBUI_AUTH": "true",
        "WEBUI_ADMIN_EMAIL": email,
        "WEBUI_ADMIN_PASSWORD": password,
        "WEBUI_ADMIN_NAME": str(options.get("admin_name") or "Admin"),
        "ENABLE_SIGNUP": "false",
        "DEFAULT_USER_ROLE": "pending",
        "ENABLE_PERSISTENT_CONFIG": "false",
        "ENABLE_OLLAMA_API": "false",
        "ENABLE_OPENAI_API": "true",
        "OPENAI_API_BASE_URLS": base_url,
        "OPENAI_API_KEYS": key,
        "RAG_EMBEDDING_ENGINE": "openai",
        "RAG_OPENAI_API_BASE_URL": base_url,
        "RAG_OPENAI_API_KEY": key,
        "OFFLINE_MODE": "true",
        "HF_HUB_OFFLINE": "1",
        "FORWARDED_ALLOW_IPS": "127.0.0.1",
        "ENABLE_VERSION_UPDATE_CHECK": "false",
        "ANONYMIZED_TELEMETRY": "false",
        "DO_NOT_TRACK": "true",
        "SCARF_NO_ANALYTICS": "true",
        "DEFAULT_MODEL_PARAMS": json.dumps(DEFAULT_MODEL_PARAMS, sort_keys=True),
        "DEFAULT_MODEL_METADATA": json.dumps(DEFAULT_MODEL_METADATA, sort_keys=True),
    }
    if options.get("slim", True):
        env["USE_SLIM_DOCKER"] = "true"
    public = str(options.get("public_url") or "")
    if public:
        if not re.match(r"^https?://[^\s/]+", public):
            raise WebUIError(f"webui_public_url={public!r} must be an http(s) URL such as https://chat.example.org")
        # the only origin the API and the socket.io endpoint accept (Open WebUI's default '*' reflects any origin
        # with credentials allowed)
        env["WEBUI_URL"] = public.rstrip("/")
        env["CORS_ALLOW_ORIGIN"] = public.rstrip("/")
        if public.startswith("https://"):
            env["WEBUI_SESSION_COOKIE_SECURE"] = "true"
    extra = options.get("extra_env") or {}
    if not isinstance(extra, Mapping):
        raise WebUIError("webui_extra_env must be a mapping of NAME: value")
    clash = sorted(set(extra) & set(MANAGED))
    if clash:
        raise WebUIError(f"webui_extra_env sets {', '.join(clash)}, which the webui role manages (see its argument spec): "
                         "set the role's own variable instead")
    env.update({str(k): str(v) for k, v in extra.items()})
    return env


def unit(options: Mapping[str, Any]) -> str:
    """The systemd unit: loopback only, its own user, the secrets in the EnvironmentFile."""
    port = int(options["port"])
    try:
        return render(Unit(
            comments=("Managed by llmfleet.serving (role webui): edits are overwritten.",),
            description=f"Open WebUI {options['version']} on 127.0.0.1:{port} (behind the gateway's nginx)",
            unit=(("After", "network-online.target"), ("Wants", "network-online.target")),
            service=(("Type", "simple"), ("User", str(options["user"])), ("Group", str(options["user"])),
                     ("EnvironmentFile", str(options["env_path"])), ("WorkingDirectory", str(options["data_dir"]))),
            exec_start=[f"{options['venv']}/bin/open-webui", "serve", "--host", "127.0.0.1", "--port", str(port)],
            service_after=(("Restart", "on-failure"), ("RestartSec", 5), ("TimeoutStopSec", 30), ("UMask", "0027"),
                           ("NoNewPrivileges", "yes"), ("LimitNOFILE", 65536), ("SyslogIdentifier", SERVICE))))
    except UnitError as exc:
        raise WebUIError(f"the web UI's unit cannot carry this value: {exc}; fix webui_venv_root, webui_data_dir or webui_user") from exc


def service(options: Mapping[str, Any], keys: Any) -> Dict[str, Any]:
    """Everything the webui role writes and checks, from its variables."""
    version = check_version(str(options["version"]))
    key = gateway_key(keys, str(options["gateway_key_name"]))
    try:
        gateway_url = str(options.get("gateway_url") or local_url(options["gateway_listen"]))
    except GatewayError as exc:
        raise WebUIError(str(exc)) from exc
    venv = f"{str(options['venv_root']).rstrip('/')}/{version}"
    full = dict(options, version=version, venv=venv, gateway_url=gateway_url, gateway_key=key)
    port = int(options["port"])
    if not 1 <= port <= 65535:
        raise WebUIError(f"webui_port={port} is not a TCP port")
    return {
        "version": version,
        "package": f"open-webui=={version}",
        "venv": venv,
        "env_text": env_file(environment(full)),
        "unit_text": unit(full),
        "unit": SERVICE,
        "gateway_url": gateway_url,
        "url": f"http://127.0.0.1:{port}",
    }


def errors(options: Mapping[str, Any], keys: Any) -> List[str]:
    """What is wrong with the web UI's inputs, as sentences without secrets ([] when nothing is). Before the
    session key has been read (secret_key empty) every other input is checked; the key is checked once read."""
    if not options.get("secret_key"):
        options = dict(options, secret_key="s" * 48)   # not yet read: stands in for the check of the other inputs only
    try:
        service(options, keys)
    except WebUIError as exc:
        return [str(exc)]
    except (KeyError, TypeError) as exc:
        return [f"the webui role's inputs are malformed ({type(exc).__name__}: {exc})"]
    return []


def front(listen: Optional[Sequence[str]], port: int) -> Dict[str, Any]:
    """The gateway's server for the web UI: its listen values and the loopback backend."""
    values = [str(v) for v in (listen or [])]
    if not values:
        raise WebUIError("gateway_webui_listen is empty: the web UI on this host needs a listener in front of it")
    return {"listen": values, "backend": f"127.0.0.1:{int(port)}"}


def model_settings(plans: Mapping[str, Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """What the web UI sets per served model, from the fleet's plans: native function calling (and Open WebUI's
    built-in tools) only where every instance of the model was planned with a tool parser, "legacy" elsewhere (no
    `tools` in the request, which vLLM would refuse). Hosts whose plan has errors serve nothing and are skipped.
    Pooling models (runner pooling: embeddings, rerankers, classifiers) answer no chat: they get no row, so the web UI
    shows them to admins only (utils/models.py get_filtered_models), never in its users' chat model list."""
    seen: Dict[str, Dict[str, Any]] = {}
    for host in sorted(plans):
        plan = plans[host]
        if not isinstance(plan, Mapping):
            raise WebUIError(f"the plan of {host} is not a mapping: run playbooks/plan.yml")
        if plan.get("errors"):
            continue
        for dep in plan.get("deployments") or []:
            for inst in api_instances(dep):
                model = str(inst.get("served_model_name") or dep.get("name"))
                if inst.get("runner") == "pooling":
                    continue
                args = [str(a) for a in inst.get("args") or []]
                parser = args[args.index("--tool-call-parser") + 1] if "--tool-call-parser" in args[:-1] else None
                tools = bool(parser) and "--enable-auto-tool-choice" in args
                reasoning = args[args.index("--reasoning-parser") + 1] if "--reasoning-parser" in args[:-1] else None
                entry = seen.setdefault(model, {"id": model, "tools": True, "tool_parsers": set(), "reasoning_parsers": set(),
                                                "instances": 0})
                entry["instances"] += 1
                entry["tools"] = entry["tools"] and tools
                if parser:
                    entry["tool_parsers"].add(parser)
                if reasoning:
                    entry["reasoning_parsers"].add(reasoning)
    out = []
    for model in sorted(seen):
        e = seen[model]
        tools = bool(e["tools"])
        if tools:
            why = f"planned with the {'/'.join(sorted(e['tool_parsers']))} tool parser: native function calling"
        elif e["tool_parsers"]:
            why = "not every instance has a tool parser (a change in flight?): legacy function calling until they all do"
        else:
            why = "planned without a tool parser (vLLM would refuse `tools`): legacy function calling, no built-in tools"
        out.append({"id": model, "function_calling": "native" if tools else "legacy", "builtin_tools": tools,
                    "reasoning_parser": "/".join(sorted(e["reasoning_parsers"])) or None, "why": why})
    return out


def _managed(row: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """The part of an Open WebUI model row this role owns (what its diff shows). Whether a model is active is the
    admin's (Admin Settings > Models), not the role's."""
    if not row:
        return {}
    params = row.get("params") or {}
    caps = (row.get("meta") or {}).get("capabilities") or {}
    return {"function_calling": params.get("function_calling"), "builtin_tools": caps.get("builtin_tools"),
            "usage": caps.get("usage"), "public_read": _public(row.get("access_grants"))}


def _public(grants: Any) -> bool:
    return any(isinstance(g, Mapping) and all(g.get(k) == v for k, v in PUBLIC_READ.items()) for g in grants or [])


def model_row(setting: Mapping[str, Any], existing: Optional[Mapping[str, Any]], access: str) -> Dict[str, Any]:
    """The form Open WebUI's /api/v1/models/create or /model/update takes for one served model: the existing row with
    the managed fields set (a name, description, system prompt or other grants an admin gave it are kept)."""
    if access not in MODEL_ACCESS:
        raise WebUIError(f"webui_model_access={access!r} must be one of {', '.join(MODEL_ACCESS)}")
    base = dict(existing or {})
    meta = dict(base.get("meta") or {})
    caps = dict(meta.get("capabilities") or {})
    # usage: vLLM reports token usage in streams when asked (stream_options.include_usage), so the UI shows it
    caps.update({"builtin_tools": bool(setting["builtin_tools"]), "usage": True})
    meta["capabilities"] = caps
    params = dict(base.get("params") or {})
    params["function_calling"] = str(setting["function_calling"])
    grants = [{k: g.get(k) for k in ("principal_type", "principal_id", "permission")}
              for g in base.get("access_grants") or [] if isinstance(g, Mapping)]
    grants = [g for g in grants if g != PUBLIC_READ]
    if access == "public":
        grants.append(dict(PUBLIC_READ))
    form = {"id": str(setting["id"]), "base_model_id": base.get("base_model_id"), "name": str(base.get("name") or setting["id"]),
            "meta": meta, "params": params, "access_grants": grants}
    if not existing:
        form["is_active"] = True   # a new row is active; an existing one keeps what the admin chose
    return form


def model_changes(settings: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]], access: str) -> List[Dict[str, Any]]:
    """For each planned model whose row differs from what the plan wants: {id, action (create|update), form, grants,
    before, after}. `grants` is True when an existing row's public grant must change: Open WebUI 0.12's
    /model/update leaves grants alone (only /create and /model/access/update write them). [] when every row is as
    planned (the module then reports no change)."""
    by_id = {str(r.get("id")): r for r in rows if isinstance(r, Mapping)}
    changes = []
    for setting in settings:
        existing = by_id.get(str(setting["id"]))
        form = model_row(setting, existing, access)
        before, after = _managed(existing), _managed(form)
        if before != after:
            changes.append({"id": str(setting["id"]), "action": "update" if existing else "create", "form": form,
                            "grants": bool(existing) and before.get("public_read") != after["public_read"],
                            "before": before, "after": after})
    return changes


def row_as_planned(change: Mapping[str, Any], stored: Optional[Mapping[str, Any]]) -> bool:
    """Open WebUI's answer (the row it stored) holds what the change wanted."""
    return _managed(stored) == change["after"]
