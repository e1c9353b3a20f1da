# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Filters of playbooks/reach.yml: fleet_reach and fleet_try_scripts (docs in the sidecar YAML files)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.llmfleet.serving.plugins.module_utils import _gateway as gw
from ansible_collections.llmfleet.serving.plugins.module_utils._fleet_vars import FLEET_VARS
from ansible_collections.llmfleet.serving.plugins.module_utils import _monitoring as mon
from ansible_collections.llmfleet.serving.plugins.module_utils import _reach as r


def _var(hostvars, host, name, default=None):
    return hostvars[host].get(name, default) if host in hostvars else default


def _gateways(groups, hostvars):
    """Each gateway host's entry: its URL (its gateway_listen at its llmfleet_private_address) and the key to use (its
    name; llmfleet_reach_key_file when the inventory says where the key lies)."""
    gateways = []
    for host in groups.get("llm_gateway") or []:
        if not _var(hostvars, host, "llmfleet_gateway", FLEET_VARS["llmfleet_gateway"].default):
            continue
        address = _var(hostvars, host, "llmfleet_private_address") or _var(hostvars, host, "ansible_host") or host
        url = gw.local_url(list(_var(hostvars, host, "gateway_listen", ["80"]) or []), str(address))
        gateways.append(r.gateway_entry(host, url, _var(hostvars, host, "gateway_api_keys", []) or [],
                                        _var(hostvars, host, "llmfleet_reach_key_name"), _var(hostvars, host, "llmfleet_reach_key_file")))
    return gateways


def _monitoring(groups, hostvars):
    """Where playbooks/monitoring.yml put Prometheus (its listen address), its first user's name and where its password lies
    (llmfleet_reach_prometheus_password_file), and the dashboards; None without a monitoring host."""
    host = mon.monitor_host(dict(groups or {}))
    if not host or not boolean(_var(hostvars, host, "llmfleet_monitoring", FLEET_VARS["llmfleet_monitoring"].default), strict=False):
        return None
    users = _var(hostvars, host, "monitoring_prometheus_users") or []
    return {"host": host, "listen": _var(hostvars, host, "monitoring_prometheus_listen", mon.PROMETHEUS_LISTEN),
            "user": users[0].get("name") if users and isinstance(users[0], Mapping) else None,
            "password_file": _var(hostvars, host, "llmfleet_reach_prometheus_password_file"),
            "ssh_host": _var(hostvars, host, "ansible_host"),
            "address": _var(hostvars, host, "llmfleet_private_address") or _var(hostvars, host, "ansible_host"),
            "dashboards": (_var(hostvars, host, "monitoring_dashboards_dir", None)
                           or os.path.join(os.environ.get("PWD", os.getcwd()), "dashboards"))}


def _guard(name, func):
    try:
        return func()
    except (r.ReachError, gw.GatewayError) as exc:
        raise AnsibleFilterError(str(exc)) from exc
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"{name}: malformed input ({type(exc).__name__}: {exc})") from exc


def fleet_try_scripts(plans, groups, hostvars, folder):
    """[{path, content}]: per gateway host, a shell script with the summary's curl (reach.yml writes them)."""
    def make():
        # a chat request: the models that answer one (a pooling model answers only its own endpoints)
        return r.scripts(_gateways(groups, hostvars), r.chat_models(dict(plans or {})), str(folder))
    return _guard("fleet_try_scripts", make)


def fleet_reach(plans, groups, hostvars, answers=None, folder=None):
    """The closing lines: each gateway host's URL and key (see _gateways), a curl (and, with `folder`, the `sh`
    command of its try-script), each web UI host's URL and login (llmfleet_reach_password_file says where the
    password lies)."""
    def make():
        gateways = _gateways(groups, hostvars)
        webuis = [{"host": h, "url": _var(hostvars, h, "webui_public_url", ""), "email": _var(hostvars, h, "webui_admin_email", ""),
                   "password_file": _var(hostvars, h, "llmfleet_reach_password_file")}
                  for h in groups.get("llm_webui") or [] if _var(hostvars, h, "llmfleet_webui", FLEET_VARS["llmfleet_webui"].default)]
        return r.lines(dict(plans or {}), gateways, webuis, list(answers or []), folder, _monitoring(groups, hostvars))
    return _guard("fleet_reach", make)


class FilterModule:
    def filters(self):
        return {"fleet_reach": fleet_reach, "fleet_try_scripts": fleet_try_scripts}
