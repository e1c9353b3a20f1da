# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Filters of verify.yml: verify_targets, verify_gateway_targets, verify_rows, verify_table, verify_answers, verify_failures
and gateway_local_url (docs in the sidecar YAML files)."""

from __future__ import annotations


from ansible_collections.llmfleet.serving.plugins.module_utils import _gateway as gw
from ansible_collections.llmfleet.serving.plugins.module_utils import _verify as v
from ansible_collections.llmfleet.serving.plugins.plugin_utils.filter_errors import call


def _call(func, *args, **kwargs):
    return call(func, (v.VerifyError, gw.GatewayError), *args, malformed=(KeyError, TypeError, ValueError), **kwargs)


def verify_targets(plan):
    return _call(v.instance_targets, plan)


def verify_gateway_targets(plans, gateway_url, gateway_host):
    return _call(v.gateway_targets, dict(plans), str(gateway_url), str(gateway_host))


def verify_rows(hosts, hostvars):
    rows = []
    for host in hosts:
        rows.extend(hostvars[host].get("llmfleet_verify_rows") or [] if host in hostvars else [])
    return rows


def verify_table(rows):
    return _call(v.table, list(rows))


def verify_answers(rows):
    return _call(v.answers, list(rows))


def verify_failures(rows):
    return _call(v.failures, list(rows))


def gateway_local_url(listen, address=None):
    return _call(gw.local_url, list(listen or []), str(address) if address else None)


class FilterModule:
    def filters(self):
        return {"verify_targets": verify_targets, "verify_gateway_targets": verify_gateway_targets, "verify_rows": verify_rows,
                "verify_table": verify_table, "verify_answers": verify_answers, "verify_failures": verify_failures, "gateway_local_url": gateway_local_url}
