# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Filters over the gateway model: gateway_plans, gateway_model, gateway_api_keys, gateway_key_scopes, gateway_key_limits,
gateway_key_budgets, gateway_key_digests, gateway_key_summary, gateway_key_probes, gateway_probe_misses,
gateway_probe_answered, gateway_addresses, gateway_edge, gateway_client_policy and gateway_settings (docs in the
sidecar YAML files)."""

from __future__ import annotations

import time

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.serving.plugins.module_utils import _gateway as gw
from ansible_collections.llmfleet.serving.plugins.module_utils._fleet_plans import FleetPlanError, read_fleet_plans
from ansible_collections.llmfleet.serving.plugins.plugin_utils.filter_errors import call


def _call(func, *args, **kwargs):
    return call(func, (gw.GatewayError, FleetPlanError), *args, malformed=(KeyError, TypeError), **kwargs)


def gateway_plans(hosts, hostvars, plan_dir):
    facts = {}
    for host in hosts:
        plan = hostvars[host].get("llmfleet_plan") if host in hostvars else None
        facts[host] = plan
    return _call(read_fleet_plans, list(hosts), facts, str(plan_dir))


def gateway_model(plans, gateway_host, options=None):
    return _call(gw.gateway_model, plans, str(gateway_host), dict(options or {}))


def gateway_api_keys(keys):
    return _call(gw.api_keys, keys)


def gateway_key_scopes(keys, model):
    return _call(gw.key_scopes, list(keys or []), dict(model or {}))


def gateway_key_summary(keys, now=None):
    return _call(gw.key_summary, list(keys or []), time.time() if now is None else float(now))


def gateway_key_probes(keys, checked, now=None):
    return _call(gw.key_probes, list(keys or []), list(checked or []), time.time() if now is None else float(now))


def gateway_probe_misses(results):
    return _call(gw.probe_misses, list(results or []))


def gateway_probe_answered(got, expected):
    return _call(gw.probe_answered, got, expected)


def gateway_key_digests(keys):
    return _call(gw.key_digests, list(keys or []))


def gateway_key_budgets(keys, accounting=True, interval=2):
    return _call(gw.key_budgets, list(keys or []), bool(accounting), interval)


def gateway_key_limits(keys, key_max_conns=0):
    return _call(gw.key_limits, list(keys or []), int(key_max_conns or 0))


def gateway_addresses(gateway_hosts, hostvars):
    addresses = {h: (hostvars[h].get("llmfleet_private_address") if h in hostvars else None) for h in gateway_hosts}
    return _call(gw.gateway_addresses, list(gateway_hosts), addresses)


def gateway_edge(plan, allow, options=None, metrics_allow=None):
    return _call(gw.edge_model, plan, list(allow or []), dict(options or {}), list(metrics_allow or []))


def gateway_client_policy(options):
    return _call(gw.client_policy, dict(options or {}))


def gateway_settings(settings):
    if not isinstance(settings, dict):
        raise AnsibleFilterError(f"gateway_settings: a mapping of the gateway role's variables, got {type(settings).__name__}")
    return _call(gw.settings_problems, settings)


class FilterModule:
    def filters(self):
        return {"gateway_plans": gateway_plans, "gateway_model": gateway_model, "gateway_api_keys": gateway_api_keys,
                "gateway_key_scopes": gateway_key_scopes, "gateway_key_limits": gateway_key_limits,
                "gateway_key_budgets": gateway_key_budgets, "gateway_key_digests": gateway_key_digests,
                "gateway_key_summary": gateway_key_summary, "gateway_key_probes": gateway_key_probes,
                "gateway_probe_misses": gateway_probe_misses, "gateway_probe_answered": gateway_probe_answered,
                "gateway_addresses": gateway_addresses, "gateway_edge": gateway_edge,
                "gateway_client_policy": gateway_client_policy, "gateway_settings": gateway_settings}
