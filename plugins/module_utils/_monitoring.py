# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""PRIVATE module_utils of llmfleet.serving: the fleet's plans turned into what Prometheus scrapes, the alert rules it
evaluates and the Grafana dashboards an operator imports.

Not a public API; may change without notice. Pure and typed: no Ansible imports, no I/O (the plan files are read by
_fleet_plans; promtool runs in the role's `validate:` and in the tests).

Facts behind the names (docs/monitoring.md has them with their sources):
- vLLM's metrics: vllm/v1/metrics/loggers.py. Every series carries `model_name` (the served name) and `engine`; counters are
  exposed as `<name>_total`. The KV cache gauge is `vllm:kv_cache_usage_perc` from 0.9 on, `vllm:gpu_cache_usage_perc` before
  (removed in 0.12), so the rules read `new or old`: PromQL's `or` matches without the metric name, one series either way.
  `vllm:request_success_total{finished_reason="error"}` exists from 0.13 on; before it only stop/length/abort.
- vLLM's `--api-key` does not guard /metrics (vllm/entrypoints/serve/middleware/authenticate.py guards /v1, /v2, /inference
  and /cohere only): the engine's metrics are reached through the engine host's edge, which lets in only allow-listed
  sources, never from the network at large.
- Prometheus file_sd (prometheus.io/docs/prometheus/2.42/configuration/configuration/#file_sd_config): a JSON list of
  {targets, labels}; Prometheus re-reads the file when it changes, so a plan change rewrites target files and not the
  configuration. A label `instance` given with the target replaces the address as the instance label.
- Grafana: `${DS_PROMETHEUS}` works only for a UI import (it reads `__inputs`); a `datasource` template variable works for both
  a UI import and file provisioning (grafana/grafana#10786).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from ._engine import EngineError, parse_version
from ._fleet_plans import api_instances
from ._syntax import served_name
from ._units import Unit, UnitError, render

LOOPBACK = "127.0.0.1"
METRICS_PATH = "/metrics"
# where Prometheus listens by default (roles/monitoring/defaults monitoring_prometheus_listen says the same)
PROMETHEUS_LISTEN = "127.0.0.1:9090"
NODE_EXPORTER_PORT = 9100
# mtail on each gateway host, serving the counters it reads from the gateway's access log (roles/monitoring/files/
# llmfleet_gateway.mtail); 3903 is mtail's own default port
GATEWAY_METRICS_PORT = 3903
# job -> file_sd file name; the configuration lists every job whatever the plans hold, so a plan change never rewrites it
JOBS = ("vllm", "node", "gateway")
# the jobs of exporters (ExporterDown watches them)
EXPORTER_JOBS = ("node", "gateway")
# where Prometheus runs: the first host of the first of these groups that has one
MONITOR_GROUPS = ("llm_monitor", "llm_gateway")
# Each vendor's own tool, read by roles/monitoring/files/llmfleet-accelerator-metrics into the node exporter's textfile
# folder (the node job): it comes with the driver, where the vendors' exporters (dcgm-exporter, AMD's
# device-metrics-exporter) come from registries and repositories a fleet may not reach. The folders it is looked for in
# besides PATH: NVIDIA's container images put nvidia-smi in /usr/local/nvidia/bin; ROCm in /opt/rocm/bin; Hygon's in the
# hyhal folder (llmfleet_hyhal_dir, /opt/hyhal by default).
ACCELERATOR_TOOLS: Dict[str, Dict[str, Any]] = {
    "nvidia": {"tool": "nvidia-smi", "dirs": ["/usr/bin", "/usr/local/nvidia/bin"]},
    "amd": {"tool": "rocm-smi", "dirs": ["/opt/rocm/bin"]},
    "hygon": {"tool": "hy-smi", "dirs": []},
}
ACCELERATOR_TEXTFILE = "llmfleet_accelerators.prom"
ACCELERATOR_READER = "/usr/local/libexec/llmfleet-accelerator-metrics"
# how long each condition must hold before its alert fires (Prometheus `for:`), and the thresholds; the role's defaults
# say the same (monitoring_alert_for, monitoring_thresholds)
ALERT_FOR: Dict[str, str] = {"down": "2m", "kv_cache": "5m", "queued": "5m", "ttft": "10m", "errors": "5m", "preemptions": "15m",
                             "gpu": "5m", "disk": "10m", "textfile": "10m", "exporter": "5m"}
THRESHOLDS: Dict[str, Any] = {"kv_cache_ratio": 0.9, "ttft_p95_s": 2.0, "error_ratio": 0.05, "gpu_temperature_c": 85,
                              "disk_free_ratio": 0.1, "textfile_max_age_s": 900}
RATE_WINDOW = "5m"
# PromQL durations (prometheus/common model.ParseDuration: units y w d h m s ms, in that order)
DURATION = re.compile(r"^(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?$")
# Grafana's own variables in the dashboards' queries, and what a test against Prometheus puts in their place
GRAFANA_RATE = "$__rate_interval"
GRAFANA_INSTANCE = '"$instance"'


class MonitoringError(ValueError):
    """Malformed input to the monitoring model; the message names the value and the fix."""


@dataclass(frozen=True)
class Instance:
    """One planned vLLM instance as monitoring sees it."""
    host: str
    deployment: str
    served: str
    name: str
    port: int
    bind_address: str
    edge: Optional[Tuple[str, int]]
    engine_version: str
    max_num_seqs: Optional[int]

    @property
    def label(self) -> str:
        """The `instance` label: host/instance, the same words the gateway's rotation uses."""
        return f"{self.host}/{self.name}"


def _q(value: str) -> str:
    """A PromQL string literal (double-quoted; Go's escapes, which JSON's are a subset of for these characters)."""
    return json.dumps(str(value))


def _re(values: Sequence[str]) -> str:
    """An RE2 alternation matching exactly `values` (regex metacharacters escaped), as a PromQL string literal."""
    return _q("|".join(re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", v) for v in values))


def _duration(name: str, value: Any) -> str:
    text = str(value).strip()
    if not text or not DURATION.match(text) or isinstance(value, bool):
        raise MonitoringError(f"{name}={value!r}: a Prometheus duration such as 30s, 5m or 1h")
    return text


DURATION_UNITS = (("y", 365 * 86400.0), ("w", 7 * 86400.0), ("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0), ("ms", 0.001))


def duration_seconds(text: str) -> float:
    """A checked Prometheus duration in seconds (DURATION's groups are in DURATION_UNITS' order); also the usage report's
    retention (_usage.retention_start)."""
    match = DURATION.match(text)
    if match is None:
        raise MonitoringError(f"{text!r}: a Prometheus duration such as 30s, 5m or 1h")
    return sum(float(group[:-len(unit)]) * factor for group, (unit, factor) in zip(match.groups(), DURATION_UNITS) if group)


def plan_instances(plans: Mapping[str, Mapping[str, Any]]) -> Tuple[List[Instance], List[str]]:
    """Every instance of every plan without errors, sorted by host and name; and a warning per plan with errors (its host
    runs nothing the plan would start, so nothing of it is scraped but its host exporter)."""
    out: List[Instance] = []
    warnings: List[str] = []
    for host in sorted(plans):
        plan = plans[host]
        if plan.get("errors"):
            warnings.append(f"{host}: its plan has errors, so none of its instances is scraped; fix them and rerun "
                            "playbooks/plan.yml")
            continue
        for dep in plan.get("deployments") or []:
            for inst in api_instances(dep):
                served = str(inst.get("served_model_name") or dep.get("served_model_name") or dep.get("name"))
                problem = served_name(served)
                if problem:
                    raise MonitoringError(f"{host}: instance {inst.get('name')!r} serves {served!r}: {problem}; rerun "
                                          "playbooks/plan.yml")
                edge = inst.get("edge")
                seqs = inst.get("max_num_seqs")
                out.append(Instance(host=str(host), deployment=str(dep.get("name")), served=served, name=str(inst["name"]),
                                    port=int(inst["port"]), bind_address=str(inst.get("bind_address") or LOOPBACK),
                                    edge=(str(edge["address"]), int(edge["port"])) if edge else None,
                                    engine_version=str(dep.get("engine_version") or inst.get("engine_version") or ""),
                                    max_num_seqs=int(seqs) if seqs else None))
    return out, warnings


def _address(host: str, addresses: Mapping[str, Any]) -> Optional[str]:
    text = addresses.get(host)
    if not text:
        return None
    try:
        return str(ipaddress.ip_address(str(text).strip()))
    except ValueError as exc:
        raise MonitoringError(f"{host}: llmfleet_private_address={text!r} is not an IP address") from exc


def monitor_host(groups: Mapping[str, Any]) -> Optional[str]:
    """The monitoring host: the first host of llm_monitor, else of llm_gateway (a small fleet's gateway already reaches every
    engine host's edge); None when the inventory has neither. playbooks/monitoring.yml runs Prometheus there and every edge
    lets that host's private address read /metrics (edge_metrics_allow): one answer for both."""
    for group in MONITOR_GROUPS:
        hosts = list(groups.get(group) or [])
        if hosts:
            return str(hosts[0])
    return None


def edge_metrics_allow(groups: Mapping[str, Any], addresses: Mapping[str, Any]) -> List[str]:
    """Who an engine host's edge lets read /metrics: the monitoring host's llmfleet_private_address, and no one else. [] when
    there is no monitoring host, or it has no private address (scrape_targets then stops the monitoring role, naming it)."""
    host = monitor_host(groups)
    address = _address(host, addresses) if host else None
    return [address] if address else []


def hostport(address: str, port: int) -> str:
    """address:port, an IPv6 address in brackets."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def node_exporter_listen(host: str, addresses: Mapping[str, Any], port: int = NODE_EXPORTER_PORT) -> str:
    """Where a host's exporter (the node exporter, a gateway's mtail) listens: its private address (what the monitoring host
    reaches), else loopback (a host without one is reached only from itself)."""
    return hostport(_address(host, addresses) or LOOPBACK, int(port))


def accelerator_vendors(plan: Mapping[str, Any]) -> List[str]:
    """The accelerator vendors of a plan's hardware (the facts the plan was made from); [] on a CPU host."""
    hardware = plan.get("hardware") or {}
    return sorted({str(a.get("vendor")) for a in hardware.get("accelerators") or [] if a.get("vendor")})


def scrape_targets(plans: Mapping[str, Mapping[str, Any]], hosts: Sequence[str], monitor_host: str,
                   addresses: Mapping[str, Any], node_port: int = NODE_EXPORTER_PORT, gateways: Sequence[str] = (),
                   gateway_port: int = GATEWAY_METRICS_PORT) -> Dict[str, Any]:
    """What the monitoring host scrapes, as file_sd groups per job ({job: [{targets, labels}]}, every job of JOBS present).

    - a vLLM instance on the monitoring host itself: its loopback listener; one elsewhere: its host's edge
      (edge.address:port, path /metrics), which must let in the monitoring host's private address for /metrics
      (`edge_metrics_allow`, per engine host); an instance elsewhere without an edge cannot be reached: `errors`.
    - a node exporter on every host of `hosts` (node_exporter_listen, on `node_port`);
    - the accelerators its plan's hardware lists, read with the vendor's tool into the node exporter (ACCELERATOR_TOOLS);
    - the gateway counters (mtail) of every host of `gateways`, on `gateway_port` (node_exporter_listen).
    Labels: host, and for vLLM deployment, served_model, instance (host/instance), engine_version."""
    instances, warnings = plan_instances(plans)
    monitor_address = _address(monitor_host, addresses)
    files: Dict[str, List[Dict[str, Any]]] = {job: [] for job in JOBS}
    errors: List[str] = []
    allow: Dict[str, List[str]] = {}
    for inst in instances:
        labels = {"host": inst.host, "deployment": inst.deployment, "served_model": inst.served, "instance": inst.label,
                  "engine_version": inst.engine_version}
        if inst.host == monitor_host:
            target = hostport(inst.bind_address, inst.port)
        elif inst.edge and monitor_address:
            target = hostport(*inst.edge)
            allow.setdefault(inst.host, [])
            if monitor_address not in allow[inst.host]:
                allow[inst.host].append(monitor_address)
        elif inst.edge:
            errors.append(f"{monitor_host} (llm_monitor) has no llmfleet_private_address: the edge of {inst.host} lets its "
                          f"/metrics in only from the monitoring host's private address; set it for {monitor_host}")
            continue
        else:
            errors.append(f"{inst.host}: instance {inst.name} ({inst.served}) listens on loopback only and has no edge, so "
                          f"Prometheus on {monitor_host} cannot scrape it; put the monitoring on {inst.host} (llm_monitor), "
                          f"or give {inst.host} an edge (set its llmfleet_private_address, keep it out of llm_gateway and rerun "
                          "playbooks/plan.yml)")
            continue
        files["vllm"].append({"targets": [target], "labels": labels})
    accelerators: List[Dict[str, Any]] = []
    for host in sorted(set(hosts)):
        address = _address(host, addresses)
        if address is None and host != monitor_host:
            errors.append(f"{host} has no llmfleet_private_address: its node exporter listens there for the monitoring host "
                          f"{monitor_host}; set it")
            continue
        files["node"].append({"targets": [node_exporter_listen(host, addresses, node_port)], "labels": {"host": host, "instance": host}})
        for vendor in accelerator_vendors(plans.get(host) or {}):
            if vendor in ACCELERATOR_TOOLS:
                accelerators.append({"host": host, "vendor": vendor, "tool": ACCELERATOR_TOOLS[vendor]["tool"], "job": "node"})
    for host in sorted(set(gateways)):
        if _address(host, addresses) is None and host != monitor_host:
            errors.append(f"{host} (llm_gateway) has no llmfleet_private_address: its gateway counters are served there for "
                          f"the monitoring host {monitor_host}; set it")
            continue
        files["gateway"].append({"targets": [node_exporter_listen(host, addresses, gateway_port)],
                                 "labels": {"host": host, "instance": host}})
    errors += [f"{host}: not in the fleet's hosts but planned" for host in sorted(set(plans) - set(hosts))]
    return {"files": files, "edge_metrics_allow": {h: sorted(a) for h, a in sorted(allow.items())},
            "accelerators": accelerators, "errors": errors, "warnings": warnings}


def accelerator_reader(plan: Mapping[str, Any], hyhal_dir: str = "/opt/hyhal") -> Dict[str, Any]:
    """What reads this host's accelerators: {vendor, tool, dirs} (the folders the tool is looked for in besides PATH), or {}
    on a host whose plan lists none. A host with accelerators of two vendors is read for the first (such a host does not
    serve one model across both)."""
    for vendor in accelerator_vendors(plan):
        if vendor in ACCELERATOR_TOOLS:
            found = dict(ACCELERATOR_TOOLS[vendor])
            dirs = list(found["dirs"]) + ([f"{str(hyhal_dir).rstrip('/')}/bin"] if vendor == "hygon" else [])
            return {"vendor": vendor, "tool": found["tool"], "dirs": dirs}
    return {}


def accelerator_unit(vendor: str, tool: str, textfile_dir: str, interval_s: int = 15) -> str:
    """The service that runs the reader every `interval_s` seconds (ACCELERATOR_READER --every), writing
    <textfile_dir>/ACCELERATOR_TEXTFILE; as root (the DCU tools need it), without new privileges, the file system
    read-only but for the textfile folder."""
    if vendor not in ACCELERATOR_TOOLS:
        raise MonitoringError(f"vendor={vendor!r}: no reader for it; known: {', '.join(sorted(ACCELERATOR_TOOLS))}")
    if not str(tool).startswith("/") or not str(textfile_dir).startswith("/"):
        raise MonitoringError(f"the accelerator reader needs absolute paths, got tool={tool!r} textfile_dir={textfile_dir!r}")
    if not 1 <= int(interval_s) <= 3600:
        raise MonitoringError(f"monitoring_accelerator_interval={interval_s!r}: give 1 to 3600 seconds")
    folder = str(textfile_dir).rstrip("/")
    try:
        return render(Unit(
            comments=("Managed by llmfleet.serving (role monitoring): edits are overwritten.",),
            description=f"Read this host's {vendor} accelerators with {tool} for the node exporter (llmfleet.serving)",
            unit=(("After", "local-fs.target"),),
            service=(("Type", "simple"), ("Restart", "always"), ("RestartSec", "10"), ("NoNewPrivileges", "yes"),
                     ("ProtectSystem", "strict"), ("ProtectHome", "yes"), ("PrivateTmp", "yes"), ("ReadWritePaths", folder)),
            # python3 named here: Debian has no `python` unless python-is-python3 is installed
            exec_start=["/usr/bin/python3", ACCELERATOR_READER, "--vendor", vendor, "--tool", str(tool), "--out", f"{folder}/{ACCELERATOR_TEXTFILE}",
                        "--every", str(int(interval_s))]))
    except UnitError as exc:
        raise MonitoringError(f"the accelerator reader's unit cannot carry this value: {exc}") from exc


def prometheus_config(targets_dir: str, rule_files: Sequence[str], options: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """prometheus.yml: one scrape job per JOBS entry reading <targets_dir>/<job>.json (file_sd), Prometheus itself at its
    `self` address, the rule files. It depends on no plan: a plan change rewrites only the target and rule files.
    The scrape timeout, when none is given, is 10s (Prometheus's default), or the scrape interval when that is shorter:
    Prometheus refuses a global timeout over the interval (promtool 2.42: "global scrape timeout greater than scrape
    interval").
    With `self_username` (the first of monitoring_prometheus_users) the prometheus job sends basic auth, its password read
    from `self_password_file`: prometheus.yml (shown in --diff) never holds the password."""
    opts = dict({"scrape_interval": "15s", "evaluation_interval": "15s", "scrape_timeout": None, "self": PROMETHEUS_LISTEN,
                 "refresh_interval": "1m", "self_username": None, "self_password_file": None}, **(options or {}))
    if not opts["scrape_timeout"]:
        interval = _duration("monitoring option scrape_interval", opts["scrape_interval"])
        opts["scrape_timeout"] = interval if duration_seconds(interval) < 10 else "10s"
    for key in ("scrape_interval", "evaluation_interval", "scrape_timeout", "refresh_interval"):
        _duration(f"monitoring option {key}", opts[key])
    if duration_seconds(str(opts["scrape_timeout"]).strip()) > duration_seconds(str(opts["scrape_interval"]).strip()):
        raise MonitoringError(f"scrape_timeout={opts['scrape_timeout']} is longer than scrape_interval={opts['scrape_interval']}: "
                              "Prometheus refuses it; set scrape_timeout to at most the interval")
    if not str(targets_dir).startswith("/"):
        raise MonitoringError(f"targets_dir={targets_dir!r}: an absolute path")
    own: Dict[str, Any] = {"job_name": "prometheus", "static_configs": [{"targets": [str(opts["self"])], "labels": {"host": "prometheus"}}]}
    if opts["self_username"]:
        if not str(opts["self_password_file"] or "").startswith("/"):
            raise MonitoringError(f"self_password_file={opts['self_password_file']!r}: Prometheus's own scrape needs the absolute "
                                  "path of the file holding its password")
        own["basic_auth"] = {"username": str(opts["self_username"]), "password_file": str(opts["self_password_file"])}
    jobs: List[Dict[str, Any]] = [own]
    for job in JOBS:
        jobs.append({"job_name": job, "metrics_path": METRICS_PATH, "scheme": "http",
                     "file_sd_configs": [{"files": [f"{targets_dir.rstrip('/')}/{job}.json"],
                                          "refresh_interval": str(opts["refresh_interval"])}]})
    return {"global": {"scrape_interval": str(opts["scrape_interval"]), "evaluation_interval": str(opts["evaluation_interval"]),
                       "scrape_timeout": str(opts["scrape_timeout"])},
            "rule_files": [str(f) for f in rule_files], "scrape_configs": jobs}


def model_mounts(plans: Mapping[str, Mapping[str, Any]], host_mounts: Mapping[str, Sequence[str]]) -> Dict[str, str]:
    """Per planned host, the mount point holding its instances' model directories: the longest mount point of the host's
    `host_mounts` (ansible_facts.mounts' mount values) that contains each model_dir; `/` when none does or none is known."""
    out: Dict[str, str] = {}
    for host in sorted(plans):
        mounts = [str(m).rstrip("/") or "/" for m in host_mounts.get(host) or []] + ["/"]
        for dep in plans[host].get("deployments") or []:
            for inst in dep.get("instances") or []:
                path = str(inst.get("model_dir") or "")
                if not path.startswith("/"):
                    continue
                best = max((m for m in mounts if m == "/" or path == m or path.startswith(m + "/")), key=len)
                if len(best) >= len(out.get(host, "")):
                    out[host] = best
    return out


def _options(options: Optional[Mapping[str, Any]]) -> Tuple[Dict[str, str], Dict[str, Any], str, Dict[str, float]]:
    opts = dict(options or {})
    unknown = sorted(set(opts) - {"for", "thresholds", "rate_window", "ttft_p95_s_by_model"})
    if unknown:
        raise MonitoringError(f"unknown monitoring rule options {unknown}; known: for, thresholds, rate_window, ttft_p95_s_by_model")
    windows = dict(ALERT_FOR, **(opts.get("for") or {}))
    bad = sorted(set(windows) - set(ALERT_FOR))
    if bad:
        raise MonitoringError(f"monitoring_alert_for: unknown alerts {bad}; known: {sorted(ALERT_FOR)}")
    windows = {k: _duration(f"monitoring_alert_for.{k}", v) for k, v in windows.items()}
    limits = dict(THRESHOLDS, **(opts.get("thresholds") or {}))
    bad = sorted(set(limits) - set(THRESHOLDS))
    if bad:
        raise MonitoringError(f"monitoring_thresholds: unknown thresholds {bad}; known: {sorted(THRESHOLDS)}")
    for key, value in limits.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise MonitoringError(f"monitoring_thresholds.{key}={value!r}: a positive number")
    ttft = {}
    for model, value in (opts.get("ttft_p95_s_by_model") or {}).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise MonitoringError(f"monitoring_ttft_p95_s_by_model[{model!r}]={value!r}: a positive number of seconds")
        ttft[str(model)] = float(value)
    return windows, limits, _duration("monitoring_rate_window", opts.get("rate_window") or RATE_WINDOW), ttft


def _version_at_least(version: str, minimum: Tuple[int, int, int]) -> bool:
    try:
        return parse_version(version) >= minimum
    except EngineError:
        return True   # an unreadable version is taken as current


def _by_served(instances: Sequence[Instance]) -> Iterator[Tuple[str, List[Instance]]]:
    served: Dict[str, List[Instance]] = {}
    for inst in instances:
        served.setdefault(inst.served, []).append(inst)
    for name in sorted(served):
        yield name, served[name]


def kv_cache_expr(selector: str) -> str:
    """The KV cache usage (0-1) of every vLLM version: the name from 0.9 on, else the one before (gone in 0.12)."""
    return f"(vllm:kv_cache_usage_perc{{{selector}}} or vllm:gpu_cache_usage_perc{{{selector}}})"


def _rule(alert: str, expr: str, window: str, severity: str, summary: str, labels: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    return {"alert": alert, "expr": expr, "for": window, "labels": dict({"severity": severity}, **(labels or {})),
            "annotations": {"summary": summary}}


def _deployment_rules(served: str, insts: Sequence[Instance], windows: Mapping[str, str], limits: Mapping[str, Any],
                      rate: str, ttft: float) -> List[Dict[str, Any]]:
    sel = f'job="vllm",served_model={_q(served)}'
    by = "instance, served_model"
    labels = {"served_model": served}
    rules = [
        _rule("VllmInstanceDown", f"up{{{sel}}} == 0", windows["down"], "critical",
              "vLLM instance {{ $labels.instance }} (" + served + ") does not answer /metrics", labels),
        _rule("VllmKvCacheNearlyFull", f"max by ({by}) {kv_cache_expr(sel)} > {limits['kv_cache_ratio']}", windows["kv_cache"],
              "warning", "{{ $labels.instance }}: KV cache {{ $value | humanizePercentage }} full", labels)]
    seqs: Dict[int, List[str]] = {}
    for inst in insts:
        if inst.max_num_seqs:
            seqs.setdefault(inst.max_num_seqs, []).append(inst.label)
    for limit in sorted(seqs):
        isel = f"{sel},instance=~{_re(sorted(seqs[limit]))}"
        rules.append(_rule(
            "VllmRequestsQueued",
            f"(sum by ({by}) (vllm:num_requests_waiting{{{isel}}}) > 0) and on ({by}) "
            f"(sum by ({by}) (vllm:num_requests_running{{{isel}}}) >= {limit})",
            windows["queued"], "warning",
            "{{ $labels.instance }}: requests wait while all " + str(limit) + " sequences (max_num_seqs) run",
            dict(labels, max_num_seqs=str(limit))))
    rules.append(_rule(
        "VllmTtftP95High",
        f"histogram_quantile(0.95, sum by (le, {by}) (rate(vllm:time_to_first_token_seconds_bucket{{{sel}}}[{rate}]))) > {ttft}",
        windows["ttft"], "warning", "{{ $labels.instance }}: TTFT p95 {{ $value | humanizeDuration }} over " + f"{ttft:g} s", labels))
    # finished_reason="error" exists from vLLM 0.13 on; an older engine reports failures as nothing but aborts
    versions = sorted({i.engine_version for i in insts})
    for version in versions:
        reasons = "error" if _version_at_least(version, (0, 13, 0)) else "abort"
        vsel = f'{sel},engine_version={_q(version)}'
        rules.append(_rule(
            "VllmErrorRatio",
            f"sum by ({by}) (rate(vllm:request_success_total{{{vsel},finished_reason=~{_q(reasons)}}}[{rate}])) / "
            f"sum by ({by}) (rate(vllm:request_success_total{{{vsel}}}[{rate}])) > {limits['error_ratio']}",
            windows["errors"], "warning",
            "{{ $labels.instance }}: {{ $value | humanizePercentage }} of requests end with " + reasons, labels))
    rules.append(_rule("VllmPreempting", f"sum by ({by}) (rate(vllm:num_preemptions_total{{{sel}}}[{rate}])) > 0",
                       windows["preemptions"], "warning",
                       "{{ $labels.instance }}: preempts requests (KV cache too small for the load)", labels))
    return rules


def _fleet_rules(plans: Mapping[str, Mapping[str, Any]], mounts: Mapping[str, str], windows: Mapping[str, str],
                 limits: Mapping[str, Any]) -> List[Dict[str, Any]]:
    rules = [_rule("ExporterDown", f'up{{job=~"{"|".join(EXPORTER_JOBS)}"}} == 0', windows["exporter"], "warning",
                   "{{ $labels.job }} exporter on {{ $labels.host }} does not answer")]
    if any(accelerator_vendors(plan) for plan in plans.values()):
        acc = 'job="node"'
        where = "{{ $labels.host }} {{ $labels.vendor }} {{ $labels.gpu }}"
        rules.append(_rule("GpuTemperatureHigh", f'llmfleet_accelerator_temperature_celsius{{{acc}}} > {limits["gpu_temperature_c"]}',
                           windows["gpu"], "warning", where + ": {{ $value }} C"))
        rules.append(_rule("GpuEccUncorrectable", f"llmfleet_accelerator_ecc_uncorrected_errors{{{acc}}} > 0", "0s", "critical",
                           where + ": uncorrectable ECC errors since the driver loaded"))
        rules.append(_rule("GpuThrottled", f"llmfleet_accelerator_throttled{{{acc}}} == 1", windows["gpu"], "warning",
                           where + ": heat or a hardware slowdown holds the clocks back"))
        rules.append(_rule("AcceleratorReadFailed", f"llmfleet_accelerator_read_ok{{{acc}}} == 0", windows["exporter"], "warning",
                           "{{ $labels.host }}: the vendor's tool does not answer "
                           "(journalctl -u llmfleet-accelerator-metrics on the host)"))
    for host in sorted(mounts):
        sel = f'job="node",host={_q(host)},mountpoint={_q(mounts[host])}'
        rules.append(_rule("ModelDiskSpaceLow",
                           f"node_filesystem_avail_bytes{{{sel}}} / node_filesystem_size_bytes{{{sel}}} < {limits['disk_free_ratio']}",
                           windows["disk"], "warning",
                           "{{ $labels.host }}: {{ $value | humanizePercentage }} free on " + mounts[host] + " (the models)"))
    rules.append(_rule("NodeTextfileStale",
                       f'time() - node_textfile_mtime_seconds{{job="node"}} > {limits["textfile_max_age_s"]}',
                       windows["textfile"], "warning", "{{ $labels.host }}: textfile {{ $labels.file }} not rewritten"))
    rules.append(_rule("NodeTextfileError", 'node_textfile_scrape_error{job="node"} > 0', windows["textfile"], "warning",
                       "{{ $labels.host }}: a textfile in the node exporter's directory does not parse"))
    return rules


def _gateway_rules(windows: Mapping[str, str], limits: Mapping[str, Any], rate: str) -> List[Dict[str, Any]]:
    """What the gateways' counters show (GATEWAY_METRICS): a served model whose requests end in 5xx at the gateway (an
    engine down or failing: 502, 503 engine_unavailable, 504) over the error ratio. Requests routed to no model (401,
    404) are the clients' errors and are left out."""
    sel = 'job="gateway",model!=""'
    return [_rule("GatewayServerErrors",
                  f'sum by (model) (rate(llmfleet_gateway_requests_total{{{sel},status=~"5.."}}[{rate}])) '
                  f"/ sum by (model) (rate(llmfleet_gateway_requests_total{{{sel}}}[{rate}])) > {limits['error_ratio']}",
                  windows["errors"], "warning",
                  "gateway: {{ $value | humanizePercentage }} of the requests for {{ $labels.model }} answered 5xx")]


def alert_rules(plans: Mapping[str, Mapping[str, Any]], mounts: Optional[Mapping[str, str]] = None,
                options: Optional[Mapping[str, Any]] = None, gateways: bool = False) -> Dict[str, Any]:
    """The rule file: one group per served model (instance down, KV cache nearly full, requests queued at the plan's
    max_num_seqs, TTFT p95 over its target, error ratio, preemptions), one for the fleet (exporters down, GPU temperature
    and ECC for the vendors the plans' hardware has, model disk space per host from `mounts`, textfile staleness) and, with
    `gateways`, one for the gateways' counters (5xx ratio per served model).
    options: for ({alert: duration}, ALERT_FOR), thresholds (THRESHOLDS), rate_window, ttft_p95_s_by_model."""
    windows, limits, rate, ttft = _options(options)
    instances, _warnings = plan_instances(plans)
    groups = [{"name": f"llmfleet-deployment-{served}",
               "rules": _deployment_rules(served, insts, windows, limits, rate, ttft.get(served, float(limits["ttft_p95_s"])))}
              for served, insts in _by_served(instances)]
    groups.append({"name": "llmfleet-fleet", "rules": _fleet_rules(plans, mounts or {}, windows, limits)})
    if gateways:
        groups.append({"name": "llmfleet-gateway", "rules": _gateway_rules(windows, limits, rate)})
    return {"groups": groups}


# --- Grafana ---

def _uid(kind: str, name: str) -> str:
    """A stable dashboard uid (Grafana allows 40 characters)."""
    slug = re.sub(r"[^A-Za-z0-9-]", "-", name)[:20]
    return f"llmfleet-{kind}-{slug}-{hashlib.sha256(name.encode()).hexdigest()[:6]}"[:40]


def _panel(pid: int, title: str, exprs: Sequence[Tuple[str, str]], unit: str, x: int, y: int, width: int = 12) -> Dict[str, Any]:
    return {"id": pid, "type": "timeseries", "title": title, "gridPos": {"x": x, "y": y, "w": width, "h": 8},
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "targets": [{"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend,
                         "datasource": {"type": "prometheus", "uid": "${datasource}"}} for i, (expr, legend) in enumerate(exprs)]}


def _dashboard(uid: str, title: str, panels: Sequence[Tuple[str, Sequence[Tuple[str, str]], str]],
               variables: Sequence[Dict[str, Any]] = ()) -> Dict[str, Any]:
    laid = [_panel(i + 1, title_, exprs, unit, 12 * (i % 2), 8 * (i // 2)) for i, (title_, exprs, unit) in enumerate(panels)]
    return {"uid": uid, "title": title, "tags": ["llmfleet"], "schemaVersion": 39, "version": 1, "editable": True,
            "time": {"from": "now-6h", "to": "now"}, "refresh": "30s",
            "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus",
                                     "current": {}, "hide": 0}] + list(variables)},
            "panels": laid}


def _rate(expr: str) -> str:
    return expr.replace("[RATE]", f"[{GRAFANA_RATE}]")


def overview_dashboard(plans: Mapping[str, Mapping[str, Any]]) -> Dict[str, Any]:
    """The fleet overview: instances up, requests, KV cache, tokens, TTFT p95 and errors per served model, host CPU and
    memory, and the accelerators' utilization and temperature for the vendors the plans' hardware has."""
    kv = 'max by (served_model) ' + kv_cache_expr('job="vllm"')
    panels: List[Tuple[str, Sequence[Tuple[str, str]], str]] = [
        ("vLLM instances up", [('sum by (served_model) (up{job="vllm"})', "{{served_model}}")], "short"),
        ("Requests running / waiting", [('sum by (served_model) (vllm:num_requests_running{job="vllm"})', "{{served_model}} running"),
                                        ('sum by (served_model) (vllm:num_requests_waiting{job="vllm"})', "{{served_model}} waiting")],
         "short"),
        ("KV cache usage (highest instance)", [(kv, "{{served_model}}")], "percentunit"),
        ("Tokens per second", [(_rate('sum by (served_model) (rate(vllm:prompt_tokens_total{job="vllm"}[RATE]))'),
                                "{{served_model}} prompt"),
                               (_rate('sum by (served_model) (rate(vllm:generation_tokens_total{job="vllm"}[RATE]))'),
                                "{{served_model}} generated")], "short"),
        ("TTFT p95", [(_rate('histogram_quantile(0.95, sum by (le, served_model) '
                             '(rate(vllm:time_to_first_token_seconds_bucket{job="vllm"}[RATE])))'), "{{served_model}}")], "s"),
        ("Finished requests by reason", [(_rate('sum by (served_model, finished_reason) '
                                                '(rate(vllm:request_success_total{job="vllm"}[RATE]))'),
                                          "{{served_model}} {{finished_reason}}")], "reqps"),
        ("Host CPU busy", [(_rate('1 - avg by (host) (rate(node_cpu_seconds_total{job="node",mode="idle"}[RATE]))'), "{{host}}")],
         "percentunit"),
        ("Host memory available", [('node_memory_MemAvailable_bytes{job="node"} / node_memory_MemTotal_bytes{job="node"}',
                                    "{{host}}")], "percentunit"),
    ]
    if any(accelerator_vendors(plan) for plan in plans.values()):
        acc = 'job="node"'
        legend = "{{host}} {{vendor}} {{gpu}}"
        panels += [("Accelerator utilization", [(f"llmfleet_accelerator_utilization_ratio{{{acc}}}", legend)], "percentunit"),
                   ("Accelerator memory used",
                    [(f"llmfleet_accelerator_memory_used_bytes{{{acc}}} / llmfleet_accelerator_memory_total_bytes{{{acc}}} "
                      f"or llmfleet_accelerator_memory_used_ratio{{{acc}}}", legend)], "percentunit"),
                   ("Accelerator temperature", [(f"llmfleet_accelerator_temperature_celsius{{{acc}}}", legend)], "celsius"),
                   ("Accelerator power", [(f"llmfleet_accelerator_power_watts{{{acc}}}", legend)], "watt")]
    return _dashboard(_uid("fleet", "overview"), "llmfleet: fleet overview", panels)


def deployment_dashboard(served: str, instances: Sequence[Instance]) -> Dict[str, Any]:
    """One served model's board, per instance (the `instance` variable: its instances as the plans list them)."""
    sel = f'job="vllm",served_model={_q(served)},instance=~{GRAFANA_INSTANCE}'
    labels = sorted({i.label for i in instances})
    variable = {"name": "instance", "type": "custom", "label": "Instance", "multi": True, "includeAll": True, "allValue": ".+",
                "query": ",".join(labels), "current": {"text": "All", "value": "$__all"},
                "options": [{"text": x, "value": x, "selected": False} for x in labels]}
    panels: List[Tuple[str, Sequence[Tuple[str, str]], str]] = [
        ("Up", [(f"up{{{sel}}}", "{{instance}}")], "short"),
        ("Requests running / waiting", [(f"sum by (instance) (vllm:num_requests_running{{{sel}}})", "{{instance}} running"),
                                        (f"sum by (instance) (vllm:num_requests_waiting{{{sel}}})", "{{instance}} waiting")], "short"),
        ("KV cache usage", [(f"max by (instance) {kv_cache_expr(sel)}", "{{instance}}")], "percentunit"),
        ("Tokens per second", [(_rate(f"sum by (instance) (rate(vllm:prompt_tokens_total{{{sel}}}[RATE]))"), "{{instance}} prompt"),
                               (_rate(f"sum by (instance) (rate(vllm:generation_tokens_total{{{sel}}}[RATE]))"),
                                "{{instance}} generated")], "short"),
        ("TTFT p50 / p95", [(_rate(f"histogram_quantile({q}, sum by (le, instance) "
                                   f"(rate(vllm:time_to_first_token_seconds_bucket{{{sel}}}[RATE])))"), "{{instance}} p" + p)
                            for q, p in (("0.5", "50"), ("0.95", "95"))], "s"),
        ("End-to-end latency p95", [(_rate(f"histogram_quantile(0.95, sum by (le, instance) "
                                           f"(rate(vllm:e2e_request_latency_seconds_bucket{{{sel}}}[RATE])))"), "{{instance}}")], "s"),
        ("Queue time p95", [(_rate(f"histogram_quantile(0.95, sum by (le, instance) "
                                   f"(rate(vllm:request_queue_time_seconds_bucket{{{sel}}}[RATE])))"), "{{instance}}")], "s"),
        ("Finished requests by reason", [(_rate(f"sum by (instance, finished_reason) (rate(vllm:request_success_total{{{sel}}}[RATE]))"),
                                          "{{instance}} {{finished_reason}}")], "reqps"),
        ("Preemptions per second", [(_rate(f"sum by (instance) (rate(vllm:num_preemptions_total{{{sel}}}[RATE]))"), "{{instance}}")],
         "short"),
    ]
    return _dashboard(_uid("model", served), f"llmfleet: {served}", panels, [variable])


def gateway_dashboard() -> Dict[str, Any]:
    """The gateways' board, per key name and served model (GATEWAY_METRICS): requests by status, tokens, duration, errors."""
    sel = 'job="gateway"'
    panels: List[Tuple[str, Sequence[Tuple[str, str]], str]] = [
        ("Requests per second by key and status",
         [(_rate(f"sum by (key_name, status) (rate(llmfleet_gateway_requests_total{{{sel}}}[RATE]))"), "{{key_name}} {{status}}")],
         "reqps"),
        ("Requests per second by model",
         [(_rate(f'sum by (model) (rate(llmfleet_gateway_requests_total{{{sel},model!=""}}[RATE]))'), "{{model}}")], "reqps"),
        ("Prompt tokens per second by key and model",
         [(_rate(f"sum by (key_name, model) (rate(llmfleet_gateway_prompt_tokens_total{{{sel}}}[RATE]))"), "{{key_name}} {{model}}")],
         "short"),
        ("Completion tokens per second by key and model",
         [(_rate(f"sum by (key_name, model) (rate(llmfleet_gateway_completion_tokens_total{{{sel}}}[RATE]))"),
           "{{key_name}} {{model}}")], "short"),
        ("Request duration p50 / p95 by model (whole answer)",
         [(_rate(f"histogram_quantile({q}, sum by (le, model) "
                 f'(rate(llmfleet_gateway_request_duration_seconds_bucket{{{sel},model!=""}}[RATE])))'), "{{model}} p" + p)
          for q, p in (("0.5", "50"), ("0.95", "95"))], "s"),
        ("Refused and failed requests by key and status (4xx, 5xx)",
         [(_rate(f'sum by (key_name, status) (rate(llmfleet_gateway_requests_total{{{sel},status=~"[45].."}}[RATE]))'),
           "{{key_name}} {{status}}")], "reqps"),
        ("Tokens per key over the last 24 hours",
         [(f"sum by (key_name) (increase(llmfleet_gateway_prompt_tokens_total{{{sel}}}[1d]))", "{{key_name}} prompt"),
          (f"sum by (key_name) (increase(llmfleet_gateway_completion_tokens_total{{{sel}}}[1d]))", "{{key_name}} completion")],
         "short"),
    ]
    return _dashboard(_uid("gateway", "keys"), "llmfleet: gateway, per key and model", panels)


def dashboards(plans: Mapping[str, Mapping[str, Any]], gateways: bool = False) -> Dict[str, Dict[str, Any]]:
    """Every dashboard by file name: llmfleet-overview.json, llmfleet-model-<served>.json per served model and, with
    `gateways`, llmfleet-gateway.json."""
    instances, _warnings = plan_instances(plans)
    out = {"llmfleet-overview.json": overview_dashboard(plans)}
    if gateways:
        out["llmfleet-gateway.json"] = gateway_dashboard()
    for served, insts in _by_served(instances):
        out[f"llmfleet-model-{re.sub(r'[^A-Za-z0-9._-]', '_', served)}.json"] = deployment_dashboard(served, insts)
    return out


def panel_queries(dashboard: Mapping[str, Any], rate_interval: str = "1m") -> List[Tuple[str, str]]:
    """(panel title, PromQL) for every target of every panel, with Grafana's own parts replaced so Prometheus runs it:
    $__rate_interval by `rate_interval`, the `instance` variable by all instances (its allValue)."""
    _duration("rate_interval", rate_interval)
    out = []
    for panel in dashboard.get("panels") or []:
        for target in panel.get("targets") or []:
            expr = str(target["expr"]).replace(GRAFANA_RATE, rate_interval).replace(GRAFANA_INSTANCE, '".+"')
            if "$" in expr.replace("$labels", ""):
                raise MonitoringError(f"panel {panel.get('title')!r}: {expr!r} keeps a Grafana variable Prometheus cannot read")
            out.append((str(panel.get("title")), expr))
    return out
