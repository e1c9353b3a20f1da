# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Filters for the monitoring role over module_utils/_monitoring: monitoring_targets (what Prometheus scrapes, from the plans),
monitoring_config (prometheus.yml), monitoring_rules (the alert rules), monitoring_dashboards (Grafana JSON),
monitoring_node_listen (where a host's node exporter listens), monitoring_host (which host runs Prometheus),
monitoring_edge_allow (who an edge lets read /metrics), monitoring_accelerator_reader (what reads a host's accelerators)
monitoring_accelerator_unit (its service), monitoring_gateway_hosts (the gateway hosts whose log is counted) and
monitoring_auth_problems (what stops the role before any change about Prometheus's users, over module_utils/_prometheus_auth);
docs in the sidecar YAML files."""

from __future__ import annotations

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.llmfleet.serving.plugins.module_utils import _monitoring as m
from ansible_collections.llmfleet.serving.plugins.module_utils import _prometheus_auth as pa
from ansible_collections.llmfleet.serving.plugins.module_utils._fleet_vars import FLEET_VARS
from ansible_collections.llmfleet.serving.plugins.plugin_utils.filter_errors import call


ON = FLEET_VARS["llmfleet_monitoring"].default
GATEWAY_ON = FLEET_VARS["llmfleet_gateway"].default


def _call(func, *args, **kwargs):
    return call(func, (m.MonitoringError,), *args, **kwargs)


def _addresses(hosts, hostvars):
    return {h: hostvars[h].get("llmfleet_private_address") for h in hosts if h in hostvars}


def monitoring_targets(plans, hosts, monitor_host, hostvars, node_port=m.NODE_EXPORTER_PORT, gateways=None,
                       gateway_port=m.GATEWAY_METRICS_PORT):
    hosts = sorted(set(hosts or []) | {str(monitor_host)})
    gateways = sorted(set(gateways or []))
    return _call(m.scrape_targets, dict(plans or {}), hosts, str(monitor_host), _addresses(sorted(set(hosts) | set(gateways)), hostvars),
                 int(node_port), gateways, int(gateway_port))


def monitoring_config(targets_dir, rule_files, options=None):
    return _call(m.prometheus_config, str(targets_dir), list(rule_files or []), dict(options or {}))


def monitoring_rules(plans, hostvars, options=None, gateways=False):
    # each planned host's mount points as its facts list them (none gathered: its model folders count as on /)
    mounts = {}
    for host in plans or {}:
        facts = (hostvars[host].get("ansible_facts") or {}) if host in hostvars else {}
        mounts[host] = [str(item.get("mount")) for item in facts.get("mounts") or [] if item.get("mount")]
    plans = dict(plans or {})
    return _call(m.alert_rules, plans, _call(m.model_mounts, plans, mounts), dict(options or {}), bool(gateways))


def monitoring_dashboards(plans, gateways=False):
    return _call(m.dashboards, dict(plans or {}), bool(gateways))


def monitoring_node_listen(host, hostvars, port=m.NODE_EXPORTER_PORT):
    return _call(m.node_exporter_listen, str(host), _addresses([host], hostvars), int(port))


def monitoring_accelerator_reader(plan, hyhal_dir="/opt/hyhal"):
    return _call(m.accelerator_reader, dict(plan or {}), str(hyhal_dir))


def monitoring_accelerator_unit(vendor, tool, textfile_dir, interval=15):
    return _call(m.accelerator_unit, str(vendor), str(tool), str(textfile_dir), int(interval))


def monitoring_gateway_hosts(groups, hostvars):
    """The llm_gateway hosts that run the gateway (llmfleet_gateway not false): those with an access log to count."""
    return [str(h) for h in (dict(groups or {}).get("llm_gateway") or [])
            if boolean((hostvars[h] if h in hostvars else {}).get("llmfleet_gateway", GATEWAY_ON), strict=False)]


def monitoring_host(groups):
    return _call(m.monitor_host, dict(groups or {})) or ""


def monitoring_edge_allow(groups, hostvars):
    groups = dict(groups or {})
    host = m.monitor_host(groups)
    # a monitoring host with llmfleet_monitoring false runs no Prometheus: no edge serves it /metrics
    if host and host in hostvars and not boolean(hostvars[host].get("llmfleet_monitoring", ON), strict=False):
        return []
    return _call(m.edge_metrics_allow, groups, _addresses([host] if host else [], hostvars))


def monitoring_auth_problems(listen, users):
    """Why the role stops before any change about monitoring_prometheus_users: each bad entry (by index and name, never its
    password), or a listener off loopback without a user. Empty when all is well."""
    return pa.problems(str(listen), users)


class FilterModule:
    def filters(self):
        return {"monitoring_targets": monitoring_targets, "monitoring_config": monitoring_config, "monitoring_rules": monitoring_rules,
                "monitoring_dashboards": monitoring_dashboards, "monitoring_node_listen": monitoring_node_listen,
                "monitoring_host": monitoring_host, "monitoring_edge_allow": monitoring_edge_allow,
                "monitoring_accelerator_reader": monitoring_accelerator_reader,
                "monitoring_accelerator_unit": monitoring_accelerator_unit,
                "monitoring_gateway_hosts": monitoring_gateway_hosts, "monitoring_auth_problems": monitoring_auth_problems}
