# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Filters of bench.yml: bench_items, bench_gateway_share (docs in the sidecar YAML files)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.serving.plugins.module_utils import _bench as b


def bench_items(targets, instances, settings=None, deployments=None, only=None):
    try:
        return b.items(list(targets), list(instances), dict(settings or {}),
                       [str(d) for d in deployments or []], [str(o) for o in only or []])
    except b.BenchError as exc:
        raise AnsibleFilterError(f"bench_items: {exc}") from exc
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"bench_items: malformed input ({type(exc).__name__}: {exc}); pass verify targets and "
                                 "the vllm_engines of this host (the vllm role's output)") from exc


def bench_gateway_share(targets, plans, host):
    try:
        return b.gateway_share(list(targets), dict(plans), str(host))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise AnsibleFilterError(f"bench_gateway_share: malformed input ({type(exc).__name__}: {exc}); pass verify_gateway_targets "
                                 "and the fleet's plans (gateway_plans)") from exc


class FilterModule:
    def filters(self):
        return {"bench_items": bench_items, "bench_gateway_share": bench_gateway_share}
