# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The one owner of the collection-wide names and defaults.

FLEET_VARS lists every global `llmfleet_*` variable the roles, playbooks and plugins read: what an inventory may
set (kind "input") and what the plays set themselves (kind "fact"), each with its default and a one-line meaning.
ENGINE_DEFAULTS holds how the vllm role runs an instance when nothing else is said (its folders, user, Docker
settings). Everything else refers here: the planner's defaults (`_plan.base`, `_host_needs`), the vllm_instances
filter, the lookup `llmfleet.serving.fleet_var` that role defaults and playbooks use instead of repeating a default
expression, and docs/inventory.md (generated from this table). Names that only look like variables (nginx
variables and zones, the engine patches' module) are NOT_VARIABLES, so that a test can hold every other
`llmfleet_*` name in the code to this table.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Tuple


class FleetVarError(ValueError):
    """A name the registry does not hold, or a default that cannot be worked out."""


@dataclass(frozen=True)
class FleetVar:
    """One collection-wide variable.

    default: the value when the inventory does not set it (None: no value, the code reads it as unset);
    computed: instead of `default`, a text whose `{PWD}` (the controller's working folder), `{inventory_dir}` or
    `{llmfleet_...}` (another variable of this table, resolved the same way) is filled in when it is read;
    shown: how docs/inventory.md writes the default; kind: "input" (the inventory sets it) or "fact" (a play sets it).
    """

    meaning: str
    default: Any = None
    computed: Optional[str] = None
    shown: str = ""
    kind: str = "input"


FLEET_VARS: Dict[str, FleetVar] = {
    # what each host serves and on what
    "llmfleet_deployments": FleetVar("The deployments to plan for this host (schema below).",
                                     shown="*required on llm_serve hosts*"),
    "llmfleet_hardware": FleetVar("Declared hardware in the `accelerator_facts` schema (docs/hardware.md); wins over a profile "
                                  "and over what is read from the host."),
    "llmfleet_hardware_profile": FleetVar("A built-in hardware profile instead."),
    "llmfleet_accelerator_vendors": FleetVar("Which vendor stack prepare.yml installs (`[nvidia]`, `[hygon]`, `[]`), e.g. for a "
                                             "host whose driver is not installed yet.", shown="from the hardware"),
    "llmfleet_container_runtime": FleetVar("Whether prepare.yml manages the Docker engine. Unset, the plan decides: yes when an "
                                           "instance runs in a container (or nothing is planned yet), no when every instance "
                                           "runs from a venv.", shown="from the plan"),
    # which playbooks touch the host
    "llmfleet_fetch_models": FleetVar("false: models.yml, and the model staging of serve.yml, skip this host (it cannot "
                                      "reach the hub; the model is put there another way).", default=True),
    "llmfleet_serve": FleetVar("false: serve.yml (and verify.yml, bench.yml) leave this host's instances alone.", default=True),
    "llmfleet_serve_serial": FleetVar("How many hosts serve.yml changes at once (each passes the health gate first).", default=1),
    "llmfleet_upgrade_serial": FleetVar("How many hosts playbooks/upgrade.yml rolls at once; the first failed batch stops the "
                                        "roll.", default=1),
    "llmfleet_gateway": FleetVar("false: gateway.yml sets up no gateway or edge on this host (its front door is provided "
                                 "another way).", default=True),
    "llmfleet_break_lock": FleetVar("true (`-e` only): take the fleet's run lock whoever holds it, after checking that the run "
                                    "it names has ended (docs/day2.md).", default=False),
    "llmfleet_webui": FleetVar("false: webui.yml sets up no web UI on this host.", default=True),
    "llmfleet_monitoring": FleetVar("false: monitoring.yml sets up nothing on this host (no node exporter; on the monitoring "
                                    "host no Prometheus, and no edge serves it /metrics).", default=True),
    # plan options
    "llmfleet_vllm_base_port": FleetVar("Where new instances' ports start (plan option `base_port`); an instance keeps the port "
                                        "it has in the plan in force (docs/day2.md, Ports).", default=8002),
    "llmfleet_model_root": FleetVar("Folder the models live under, `<root>/<name>@<revision>` each (`<root>/<name>` for a "
                                    "model that pins no revision; plan option `model_root`; also `model_store_root`'s "
                                    "default).", default="/models"),
    "llmfleet_private_address": FleetVar("The host's private-network address: where its edge nginx listens for a gateway on "
                                         "another host (plan option `private_address`; vLLM's API stays on loopback; a public "
                                         "or malformed one fails the plan). The ranks of a multi-host deployment also meet on "
                                         "it (docs/multi-host.md)."),
    "llmfleet_private_interface": FleetVar("The network interface that holds `llmfleet_private_address` (e.g. eth0, ens1f0, "
                                           "ib0): where the ranks of a multi-host deployment meet (torch's Gloo and NCCL bind "
                                           "it). Needed on every host of a deployment's `hosts` group only."),
    "llmfleet_hyhal_dir": FleetVar("Where hyhal lives on Hygon hosts, mounted read-only into the engine (plan option "
                                   "`hyhal_dir`).", default="/opt/hyhal"),
    # the controller's folders
    "llmfleet_plan_dir": FleetVar("Folder of the plan files, `<host>.json` each, on the controller.", computed="{PWD}/plans",
                                  shown="`./plans` (the folder ansible-playbook runs in)"),
    "llmfleet_secrets_dir": FleetVar("Folder of the secrets the collection generates on the controller (the engines' API key "
                                     "`vllm_api_key`, Open WebUI's `webui_secret_key`), mode 0700.",
                                     computed="{inventory_dir}/.secrets", shown="`<inventory>/.secrets`"),
    "llmfleet_metadata_cache": FleetVar("The controller's cache of the config.json, index and side files plan.yml reads from "
                                        "the hub for models outside the catalog (<source>/<id>/<revision>).",
                                        default="~/.cache/llmfleet/model-metadata"),
    # what reach.yml and verify.yml print or use
    "llmfleet_reach_key_file": FleetVar("On a gateway host: the file that holds the client key; reach.yml names it as where "
                                        "the key lies (it prints no secret)."),
    "llmfleet_reach_key_name": FleetVar("On a gateway host: the client key reach.yml's curl names.",
                                        shown="the first `gateway_api_keys` entry"),
    "llmfleet_reach_password_file": FleetVar("On a web UI host: the file that holds the admin password; reach.yml names it "
                                             "(it prints no secret)."),
    "llmfleet_reach_prometheus_password_file": FleetVar("On the monitoring host: the file that holds the password of the first "
                                                        "of monitoring_prometheus_users; reach.yml names it (it prints no secret)."),
    "llmfleet_verify_key_name": FleetVar("The gateway key verify.yml uses (`-e` on the command line).",
                                         shown="the first `gateway_api_keys` entry"),
    # set by the plays themselves
    "llmfleet_plan": FleetVar("This host's plan, set by plan.yml (or read from `<llmfleet_plan_dir>/<host>.json`).",
                              kind="fact"),
    "llmfleet_plan_source": FleetVar("Where `llmfleet_plan` came from (this run or the plan file), for the messages.",
                                     kind="fact"),
    "llmfleet_hardware_resolved": FleetVar("The hardware the plan was made for (declared, profile or gathered).", kind="fact"),
    "llmfleet_lock_release": FleetVar("false: the playbook leaves the fleet's run lock to the playbook that imports it "
                                      "(site.yml and upgrade.yml release it once, at the end of the whole run).", default=True,
                                      kind="fact"),
    "llmfleet_verify_rows": FleetVar("verify.yml's answers per instance, which reach.yml shows.", kind="fact"),
    "llmfleet_docker_contributions": FleetVar("What roles add to Docker's daemon.json (the nvidia runtime ...); "
                                              "container_runtime merges it.", default={}, kind="fact"),
}

# How the vllm role runs an instance unless told otherwise: the vllm_instances filter's settings, _serving's keyword
# defaults, and the vllm role's variables ENGINE_VARS (roles/vllm/defaults/main.yml and its spec show the same values,
# checked by tests/unit/test_fleet_vars.py).
ENGINE_DEFAULTS: Dict[str, Any] = {
    "runtime": "auto", "state_dir": "/var/lib/llmfleet/vllm", "venv_root": "/opt/llmfleet/vllm",
    "patches_dir": "/opt/llmfleet/patches", "env_dir": "/etc/llmfleet/vllm", "user": "llmfleet-vllm",
    "shm_size": "16g", "ipc_host": False, "restart_policy": "unless-stopped", "entrypoint": ("vllm", "serve"),
}
# Each one's name in the vllm role (the lookup fleet_var answers these names too).
ENGINE_VARS: Dict[str, str] = {key: f"vllm_docker_{key}" if key in ("shm_size", "ipc_host", "restart_policy", "entrypoint")
                               else f"vllm_{key}" for key in ENGINE_DEFAULTS}

# `llmfleet_*` names in the code that are not Ansible variables: what each one is.
NOT_VARIABLES: Dict[str, str] = {
    "llmfleet_gw": "nginx: the njs module of the gateway (gateway.conf js_import)",
    "llmfleet_key_name": "nginx: the client key's name ($llmfleet_key_name, js_set)",
    "llmfleet_affinity": "nginx: a conversation's digest, the hash key of a model routed by session or prefix (js_var)",
    "llmfleet_stream": "nginx: 1 for a streamed request (js_var, the token budgets' estimate)",
    "llmfleet_events": "nginx: the events of a streamed answer that passed (js_var, the token budgets' estimate)",
    "llmfleet_budgets": "nginx: the token budgets' shared memory zone and the Lua table of their code (budgets.conf)",
    "llmfleet_key_missing": "nginx: 1 for a request without a valid key, answered 401 (map)",
    "llmfleet_key_conns": "nginx: the requests-in-flight zone per client key (limit_conn_zone)",
    "llmfleet_address_conns": "nginx: the requests-in-flight zone per client address (limit_conn_zone)",
    "llmfleet_plain_allowed": "nginx: the addresses that may use plain HTTP with TLS on (geo)",
    "llmfleet_plain_refused": "nginx: 1 for a plain-HTTP request refused with TLS on, answered 426 (map)",
    "llmfleet_upstream": "nginx: the routed engine (js_var)",
    "llmfleet_model": "nginx: the request's model (js_var)",
    "llmfleet_path": "nginx: the proxied path (js_var)",
    "llmfleet_engine": "nginx: the named location that proxies to an engine",
    "llmfleet_engine_again": "nginx: the named location that sends a request its first server answered 503 to another",
    "llmfleet_retry_upstream": "nginx: the model's upstream without the server that answered 503 (map)",
    "llmfleet_body": "nginx: the body the gateway sends to the engine (js_var, gateway_usage_accounting)",
    "llmfleet_usage_strip": "nginx: the gateway asked for a stream's usage event on the client's behalf (js_var)",
    "llmfleet_usage_accounting": "nginx: gateway_usage_accounting as the njs code reads it (js_var)",
    "llmfleet_prompt_tokens": "nginx: the answer's usage.prompt_tokens, for the access log (js_var)",
    "llmfleet_completion_tokens": "nginx: the answer's usage.completion_tokens, for the access log (js_var)",
    "llmfleet_gateway_requests_total": "Prometheus: the gateway's requests per key name, model and status (mtail)",
    "llmfleet_gateway_prompt_tokens_total": "Prometheus: the gateway's prompt tokens per key name and model (mtail)",
    "llmfleet_gateway_completion_tokens_total": "Prometheus: the gateway's completion tokens per key name and model (mtail)",
    "llmfleet_gateway_request_duration_seconds": "Prometheus: the gateway's request duration histogram (mtail)",
    "llmfleet_gateway_request_duration_seconds_bucket": "Prometheus: that histogram's buckets",
    "llmfleet_key_rate_fleet": "nginx: the key's name for the fleet-wide request rate, empty for a key with its own (map)",
    "llmfleet_key_conns_fleet": "nginx: the key's name for the fleet-wide requests in flight, empty for a key with its own (map)",
    "llmfleet_accelerator_clock_event_reasons": "Prometheus: the accelerator reader's NVML clock event reasons (textfile)",
    "llmfleet_accelerators": "the accelerator reader's textfile (llmfleet_accelerators.prom), not a variable",
    "llmfleet_accelerators_listed": "Prometheus: how many accelerators the vendor's tool listed (the accelerator reader)",
    "llmfleet_accelerator_utilization_ratio": "Prometheus: the accelerator reader's utilization ratio (node exporter textfile)",
    "llmfleet_accelerator_memory_used_bytes": "Prometheus: the accelerator reader's memory used bytes (node exporter textfile)",
    "llmfleet_accelerator_memory_total_bytes": "Prometheus: the accelerator reader's memory total bytes (node exporter textfile)",
    "llmfleet_accelerator_memory_used_ratio": "Prometheus: the accelerator reader's memory used ratio (node exporter textfile)",
    "llmfleet_accelerator_temperature_celsius": "Prometheus: the accelerator reader's temperature celsius (node exporter textfile)",
    "llmfleet_accelerator_power_watts": "Prometheus: the accelerator reader's power watts (node exporter textfile)",
    "llmfleet_accelerator_ecc_uncorrected_errors": "Prometheus: the accelerator reader's ecc uncorrected errors (node exporter textfile)",
    "llmfleet_accelerator_throttled": "Prometheus: the accelerator reader's throttled (node exporter textfile)",
    "llmfleet_accelerator_read_ok": "Prometheus: the accelerator reader's read ok (node exporter textfile)",
    "llmfleet_accelerator_read_timestamp_seconds": "Prometheus: the accelerator reader's read timestamp seconds (node exporter textfile)",
    "llmfleet_edge_failed": "nginx: the edge's error location (503 when nothing reached the engine, else 502)",
    "llmfleet_edge": "nginx: the edge's log format",
    "llmfleet_edge_allowed": "nginx: the edge's client allow list (geo)",
    "llmfleet_webui_connection": "nginx: the web UI's Connection header (map)",
    "llmfleet_tls": "nginx: the TLS session cache",
    "llmfleet_403": "nginx: an error page location", "llmfleet_404": "nginx: an error page location",
    "llmfleet_413": "nginx: an error page location", "llmfleet_429": "nginx: an error page location",
    "llmfleet_502": "nginx: an error page location", "llmfleet_426": "nginx: an error page location",
    "llmfleet_patches": "Python: the engine patches' package (roles/vllm/files/patches)",
    "llmfleet_moe_wna16_num_experts": "Python: a context variable of an engine patch",
}


def fleet_var(name: str) -> FleetVar:
    try:
        return FLEET_VARS[name]
    except KeyError:
        raise FleetVarError(f"{name!r} is not a collection-wide variable; known: {', '.join(sorted(FLEET_VARS))}; "
                            f"or one of the vllm role's engine defaults: {', '.join(sorted(ENGINE_VARS.values()))}") from None


def default_of(name: str, read: Callable[[str], Tuple[bool, Any]], env: Mapping[str, str]) -> Any:
    """The default of `name` (a FLEET_VARS name, or an ENGINE_VARS name of ENGINE_DEFAULTS). `read(var)` gives (set, value) of
    another variable, for the `{inventory_dir}` and `{llmfleet_...}` parts of a computed default; `env` the
    controller's environment, for `{PWD}`."""
    engine = {var: key for key, var in ENGINE_VARS.items()}
    if name in engine:
        value = ENGINE_DEFAULTS[engine[name]]
        return list(value) if isinstance(value, tuple) else value
    var = fleet_var(name)
    if var.computed is None:
        return dict(var.default) if isinstance(var.default, dict) else var.default
    parts: Dict[str, str] = {}
    for field in _fields(var.computed):
        if field == "PWD":
            parts[field] = str(env.get("PWD", ""))
        elif field.startswith("llmfleet_"):
            parts[field] = str(value_of(field, read, env))
        else:
            found, value = read(field)
            if not found or value is None:
                raise FleetVarError(f"{name}: its default {var.computed} needs {field}, which this host does not have "
                                    f"(a host outside any inventory file?): set {name}")
            parts[field] = str(value)
    return var.computed.format(**parts)


def value_of(name: str, read: Callable[[str], Tuple[bool, Any]], env: Mapping[str, str]) -> Any:
    """What `name` is on a host: its own value when set (even to null), else its default."""
    found, value = read(name)
    return value if found else default_of(name, read, env)


def _fields(text: str) -> Tuple[str, ...]:
    return tuple(part[1] for part in string.Formatter().parse(text) if part[1])


__all__ = ["FleetVarError", "FleetVar", "FLEET_VARS", "ENGINE_DEFAULTS", "ENGINE_VARS", "NOT_VARIABLES", "fleet_var",
           "default_of", "value_of"]
