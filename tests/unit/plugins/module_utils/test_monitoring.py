"""The monitoring model (plugins/module_utils/_monitoring.py): scrape targets from the plans (vLLM through the engine host's
edge, node and accelerator exporters), prometheus.yml checked by the real `promtool check config`, every alert rule run by
`promtool test rules` both firing and not firing, and the Grafana dashboards' queries checked as PromQL by promtool."""

from __future__ import annotations

import copy
import json
import pathlib
import shutil
import subprocess

import pytest
import yaml

from ansible_collections.llmfleet.serving.plugins.module_utils import _monitoring as m

PROMTOOL = shutil.which("promtool")


@pytest.fixture()
def promtool_installed():
    """Not a skip: `make units` installs Debian's prometheus (it has promtool)."""
    assert PROMTOOL, "promtool is not installed: run `make units` (tests/host-packages.sh prometheus)"


needs_promtool = pytest.mark.usefixtures("promtool_installed")

NVIDIA = {"accelerators": [{"index": 0, "vendor": "nvidia", "model": "H200", "arch": "sm90", "memory_mib": 143771}]}


def instance(name, port, served, edge=None, seqs=128, model_dir="/models/Qwen3-0.6B"):
    return {"name": name, "port": port, "served_model_name": served, "bind_address": "127.0.0.1", "max_num_seqs": seqs,
            "edge": {"address": edge, "port": port} if edge else None, "model_dir": model_dir}


def plan(host, deployments, hardware=None, errors=None):
    return {"host": host, "errors": errors or [], "hardware": hardware or {"accelerators": []},
            "deployments": [{"name": name, "engine_version": version, "served_model_name": insts[0]["served_model_name"],
                             "instances": insts} for name, version, insts in deployments]}


# e1: an NVIDIA host reached through its edge; gw: the gateway host, its instance on loopback, also the monitoring host
FLEET = {
    "e1": plan("e1", [("qwen", "0.32.0", [instance("qwen-0", 8002, "qwen", "10.0.0.11"),
                                          instance("qwen-1", 8003, "qwen", "10.0.0.11", seqs=64)])], NVIDIA),
    "gw": plan("gw", [("tiny", "0.12.0", [instance("tiny-0", 8002, "tiny")])]),
}
HOSTS = ["e1", "gw", "web"]
ADDRESSES = {"e1": "10.0.0.11", "gw": "10.0.0.10", "web": "10.0.0.12"}


def test_vllm_targets_go_through_the_edge_or_loopback_on_the_monitoring_host_with_their_labels():
    out = m.scrape_targets(FLEET, HOSTS, "gw", ADDRESSES)
    assert out["errors"] == [] and out["warnings"] == []
    assert out["files"]["vllm"] == [
        {"targets": ["10.0.0.11:8002"], "labels": {"host": "e1", "deployment": "qwen", "served_model": "qwen",
                                                   "instance": "e1/qwen-0", "engine_version": "0.32.0"}},
        {"targets": ["10.0.0.11:8003"], "labels": {"host": "e1", "deployment": "qwen", "served_model": "qwen",
                                                   "instance": "e1/qwen-1", "engine_version": "0.32.0"}},
        {"targets": ["127.0.0.1:8002"], "labels": {"host": "gw", "deployment": "tiny", "served_model": "tiny",
                                                   "instance": "gw/tiny-0", "engine_version": "0.12.0"}}]
    # the edge of e1 must let /metrics in from the monitoring host's private address, and only that
    assert out["edge_metrics_allow"] == {"e1": ["10.0.0.10"]}


def test_node_exporters_on_every_host_and_the_accelerators_read_into_them_with_the_vendors_tool():
    fleet = dict(FLEET, d1=plan("d1", [], {"accelerators": [{"vendor": "hygon"}]}),
                 a1=plan("a1", [], {"accelerators": [{"vendor": "amd"}, {"vendor": "amd"}]}))
    out = m.scrape_targets(fleet, HOSTS + ["d1", "a1"], "gw", dict(ADDRESSES, d1="10.0.0.21", a1="10.0.0.22"))
    assert [(g["targets"], g["labels"]["host"]) for g in out["files"]["node"]] == [
        (["10.0.0.22:9100"], "a1"), (["10.0.0.21:9100"], "d1"), (["10.0.0.11:9100"], "e1"), (["10.0.0.10:9100"], "gw"),
        (["10.0.0.12:9100"], "web")]
    # every vendor's numbers come as a node exporter textfile, no target of their own; a CPU host has none
    assert sorted(out["files"]) == ["gateway", "node", "vllm"]
    assert {(a["host"], a["tool"], a["job"]) for a in out["accelerators"]} == {
        ("a1", "rocm-smi", "node"), ("d1", "hy-smi", "node"), ("e1", "nvidia-smi", "node")}


def test_the_accelerator_reader_follows_the_plans_hardware_and_its_unit_passes_systemd(tmp_path):
    assert m.accelerator_reader(FLEET["e1"]) == {"vendor": "nvidia", "tool": "nvidia-smi", "dirs": ["/usr/bin", "/usr/local/nvidia/bin"]}
    assert m.accelerator_reader(plan("d1", [], {"accelerators": [{"vendor": "hygon"}]}), "/data/hyhal/") == {
        "vendor": "hygon", "tool": "hy-smi", "dirs": ["/data/hyhal/bin"]}
    assert m.accelerator_reader(FLEET["gw"]) == {}
    unit = m.accelerator_unit("nvidia", "/usr/local/nvidia/bin/nvidia-smi", "/var/lib/prometheus/node-exporter/", 15)
    assert ("ExecStart=/usr/bin/python3 /usr/local/libexec/llmfleet-accelerator-metrics --vendor nvidia --tool /usr/local/nvidia/bin/nvidia-smi "
            "--out /var/lib/prometheus/node-exporter/llmfleet_accelerators.prom --every 15") in unit.splitlines()
    assert "ReadWritePaths=/var/lib/prometheus/node-exporter" in unit.splitlines()
    # the role's copy of the reader's path is the module's
    role_vars = (pathlib.Path(__file__).resolve().parents[4] / "roles" / "monitoring" / "vars" / "main.yml").read_text()
    assert f"__monitoring_accelerator_reader: {m.ACCELERATOR_READER}" in role_vars.splitlines()
    reader = tmp_path / "llmfleet-accelerator-metrics"
    reader.write_text("#!/bin/sh\n")
    reader.chmod(0o755)
    (tmp_path / "llmfleet-accelerator-metrics.service").write_text(unit.replace(m.ACCELERATOR_READER, str(reader)))
    verify = subprocess.run(["systemd-analyze", "verify", str(tmp_path / "llmfleet-accelerator-metrics.service")],
                            capture_output=True, text=True, check=False)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    with pytest.raises(m.MonitoringError, match="no reader for it"):
        m.accelerator_unit("intel", "/usr/bin/xpu-smi", "/var/lib/prometheus/node-exporter")
    with pytest.raises(m.MonitoringError, match="monitoring_accelerator_interval=0"):
        m.accelerator_unit("nvidia", "/usr/bin/nvidia-smi", "/var/lib/prometheus/node-exporter", 0)


def test_each_gateway_hosts_counters_on_its_private_address_else_loopback_on_the_monitoring_host():
    out = m.scrape_targets(FLEET, HOSTS, "gw", ADDRESSES, gateways=["gw", "web"])
    assert out["files"]["gateway"] == [{"targets": ["10.0.0.10:3903"], "labels": {"host": "gw", "instance": "gw"}},
                                       {"targets": ["10.0.0.12:3903"], "labels": {"host": "web", "instance": "web"}}]
    alone = m.scrape_targets(FLEET, HOSTS, "gw", {"e1": "10.0.0.11"}, gateways=["gw"], gateway_port=13903)
    assert alone["files"]["gateway"] == [{"targets": ["127.0.0.1:13903"], "labels": {"host": "gw", "instance": "gw"}}]
    far = m.scrape_targets(FLEET, HOSTS, "gw", dict(ADDRESSES, web=None), gateways=["web"])
    assert far["files"]["gateway"] == [] and any(e.startswith("web (llm_gateway) has no llmfleet_private_address") for e in far["errors"])
    assert m.scrape_targets(FLEET, HOSTS, "gw", ADDRESSES)["files"]["gateway"] == []


def test_a_plan_change_adds_and_removes_targets_and_never_touches_the_configuration():
    before = m.scrape_targets(FLEET, HOSTS, "gw", ADDRESSES)
    fleet = copy.deepcopy(FLEET)
    fleet["e1"]["deployments"][0]["instances"].pop()
    after = m.scrape_targets(fleet, HOSTS, "gw", ADDRESSES)
    assert [g["labels"]["instance"] for g in after["files"]["vllm"]] == ["e1/qwen-0", "gw/tiny-0"]
    assert len(before["files"]["vllm"]) == 3
    config = m.prometheus_config("/etc/prometheus/llmfleet/targets", ["/etc/prometheus/llmfleet/rules.yml"])
    assert [j["job_name"] for j in config["scrape_configs"]] == ["prometheus", "vllm", "node", "gateway"]
    assert config["scrape_configs"][1]["file_sd_configs"] == [{"files": ["/etc/prometheus/llmfleet/targets/vllm.json"],
                                                               "refresh_interval": "1m"}]


@pytest.mark.parametrize("monitor, addresses, wanted", [
    # the monitoring host is not the gateway host: the gateway host's loopback instance cannot be reached
    ("e1", ADDRESSES, "gw: instance tiny-0 (tiny) listens on loopback only and has no edge, so Prometheus on e1 cannot scrape it"),
    # the edge lets in the monitoring host's private address: without one there is nothing to allow
    ("gw", {"e1": "10.0.0.11", "web": "10.0.0.12"}, "gw (llm_monitor) has no llmfleet_private_address"),
    ("gw", {"e1": "10.0.0.11", "gw": "10.0.0.10"}, "web has no llmfleet_private_address: its node exporter listens there"),
])
def test_what_cannot_be_scraped_is_an_error_naming_the_host_and_the_fix(monitor, addresses, wanted):
    errors = m.scrape_targets(FLEET, HOSTS, monitor, addresses)["errors"]
    assert any(e.startswith(wanted) for e in errors), errors


def test_a_plan_with_errors_is_not_scraped_and_said():
    fleet = dict(FLEET, e1=dict(FLEET["e1"], errors=["does not fit"]))
    out = m.scrape_targets(fleet, HOSTS, "gw", ADDRESSES)
    assert [g["labels"]["instance"] for g in out["files"]["vllm"]] == ["gw/tiny-0"]
    assert out["warnings"] == ["e1: its plan has errors, so none of its instances is scraped; fix them and rerun playbooks/plan.yml"]


def test_bad_addresses_and_options_are_refused_by_name():
    with pytest.raises(m.MonitoringError, match="llmfleet_private_address='10.0.0' is not an IP address"):
        m.scrape_targets(FLEET, HOSTS, "gw", dict(ADDRESSES, web="10.0.0"))
    with pytest.raises(m.MonitoringError, match=r"monitoring_alert_for.down='2 minutes'"):
        m.alert_rules(FLEET, options={"for": {"down": "2 minutes"}})
    with pytest.raises(m.MonitoringError, match=r"unknown alerts \['dwon'\]"):
        m.alert_rules(FLEET, options={"for": {"dwon": "1m"}})
    with pytest.raises(m.MonitoringError, match=r"monitoring_thresholds.kv_cache_ratio=-1"):
        m.alert_rules(FLEET, options={"thresholds": {"kv_cache_ratio": -1}})


def test_node_exporter_listens_on_the_private_address_else_loopback():
    assert m.node_exporter_listen("e1", ADDRESSES) == "10.0.0.11:9100"
    assert m.node_exporter_listen("x", {}) == "127.0.0.1:9100"
    assert m.node_exporter_listen("x", {"x": "fd00::1"}) == "[fd00::1]:9100"


def test_model_mounts_is_the_longest_mount_holding_the_model_dirs():
    mounts = {"e1": ["/", "/boot", "/models", "/models-old"], "gw": ["/", "/srv"]}
    assert m.model_mounts(FLEET, mounts) == {"e1": "/models", "gw": "/"}
    assert m.model_mounts(FLEET, {}) == {"e1": "/", "gw": "/"}


# --- the rules, run by promtool ---

def rules_file(tmp_path, options=None, fleet=None, mounts=None):
    rules = m.alert_rules(FLEET if fleet is None else fleet, mounts if mounts is not None else {"e1": "/models"}, options,
                          gateways=True)
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False))
    return rules, path


@needs_promtool
def test_the_rules_and_the_configuration_pass_promtool_check(tmp_path):
    _rules, rules = rules_file(tmp_path)
    targets = tmp_path / "targets"
    targets.mkdir()
    for job, groups in m.scrape_targets(FLEET, HOSTS, "gw", ADDRESSES, gateways=["gw"])["files"].items():
        (targets / f"{job}.json").write_text(json.dumps(groups))
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(m.prometheus_config(str(targets), [str(rules)])))
    proc = subprocess.run([PROMTOOL, "check", "config", str(config)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 22 rules found" in proc.stdout + proc.stderr


@needs_promtool
@pytest.mark.parametrize("interval, timeout", [("15s", "10s"), ("5s", "5s"), ("1m", "10s"), ("2500ms", "2500ms")])
def test_a_short_scrape_interval_gets_a_timeout_prometheus_accepts(tmp_path, interval, timeout):
    """Prometheus refuses a global scrape timeout over the scrape interval, and 10s is its default: unset, the timeout is
    10s or the interval when shorter (the lab scrapes every 5s; the fleet lab's converge found this)."""
    targets = tmp_path / "targets"
    targets.mkdir()
    config = m.prometheus_config(str(targets), [], {"scrape_interval": interval})
    assert config["global"]["scrape_timeout"] == timeout
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.run([PROMTOOL, "check", "config", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_scrape_timeout_over_the_interval_is_named_before_promtool():
    with pytest.raises(m.MonitoringError, match="scrape_timeout=20s is longer than scrape_interval=15s"):
        m.prometheus_config("/t", [], {"scrape_timeout": "20s"})


VLLM = 'job="vllm",served_model="qwen",model_name="qwen",engine="0"'


def series(metric, instance_, values, **labels):
    extra = "".join(f',{k}="{v}"' for k, v in labels.items())
    return {"series": f'{metric}{{{VLLM},instance="{instance_}"{extra}}}', "values": values}


def alert(name, eval_time, fired):
    """An alert_rule_test: `fired` the (labels, severity, summary) of each alert expected at eval_time ([] for none)."""
    exp = [{"exp_labels": dict(lab, severity=sev), "exp_annotations": {"summary": summary}} for lab, sev, summary in fired]
    return {"eval_time": eval_time, "alertname": name, "exp_alerts": exp}


QWEN = {"served_model": "qwen"}
Q0 = dict(QWEN, instance="e1/qwen-0")
Q1 = dict(QWEN, instance="e1/qwen-1")
G0 = {"job": "node", "host": "e1", "vendor": "nvidia", "gpu": "0"}
G1 = dict(G0, gpu="1")
GPU0 = 'job="node",host="e1",vendor="nvidia",gpu="0"'
GPU1 = 'job="node",host="e1",vendor="nvidia",gpu="1"'
# each case: input series and the alert tests on them (firing and not firing), with the rules' default windows
CASES = {
    "instance_down": (
        [{"series": 'up{job="vllm",served_model="qwen",instance="e1/qwen-0"}', "values": "1 1 0 0 0 0"},
         {"series": 'up{job="vllm",served_model="qwen",instance="e1/qwen-1"}', "values": "1 1 1 1 1 1"}],
        [alert("VllmInstanceDown", "3m", []),    # down 1m: pending, not firing
         alert("VllmInstanceDown", "5m", [(dict(QWEN, job="vllm", instance="e1/qwen-0"), "critical",
                                           "vLLM instance e1/qwen-0 (qwen) does not answer /metrics")])]),
    "kv_cache_new_name": (
        [series("vllm:kv_cache_usage_perc", "e1/qwen-0", "0.95x10"), series("vllm:kv_cache_usage_perc", "e1/qwen-1", "0.5x10")],
        [alert("VllmKvCacheNearlyFull", "4m", []), alert("VllmKvCacheNearlyFull", "6m", [(Q0, "warning", "e1/qwen-0: KV cache 95% full")])]),
    "kv_cache_old_name": (   # vLLM before 0.9 (and up to 0.11 with hidden metrics shown) calls it gpu_cache_usage_perc
        [series("vllm:gpu_cache_usage_perc", "e1/qwen-1", "0.99x10")],
        [alert("VllmKvCacheNearlyFull", "6m", [(Q1, "warning", "e1/qwen-1: KV cache 99% full")])]),
    "queued_at_each_instances_max_num_seqs": (   # qwen-0 runs 128 sequences, qwen-1 64 (their plans' max_num_seqs)
        [series("vllm:num_requests_running", "e1/qwen-0", "100x10"), series("vllm:num_requests_waiting", "e1/qwen-0", "5x10"),
         series("vllm:num_requests_running", "e1/qwen-1", "64x10"), series("vllm:num_requests_waiting", "e1/qwen-1", "5x10")],
        [alert("VllmRequestsQueued", "6m", [(dict(Q1, max_num_seqs="64"), "warning",
                                             "e1/qwen-1: requests wait while all 64 sequences (max_num_seqs) run")])]),
    "queued_none_waiting": (
        [series("vllm:num_requests_running", "e1/qwen-1", "64x10"), series("vllm:num_requests_waiting", "e1/qwen-1", "0x10")],
        [alert("VllmRequestsQueued", "6m", [])]),
    "ttft": (   # qwen-0: every first token in 2.5-5 s; qwen-1: under 1 s; 10 per minute each
        [series("vllm:time_to_first_token_seconds_bucket", "e1/qwen-0", "0+0x30", le="1"),
         series("vllm:time_to_first_token_seconds_bucket", "e1/qwen-0", "0+0x30", le="2.5"),
         series("vllm:time_to_first_token_seconds_bucket", "e1/qwen-0", "0+10x30", le="5"),
         series("vllm:time_to_first_token_seconds_bucket", "e1/qwen-0", "0+10x30", le="+Inf"),
         series("vllm:time_to_first_token_seconds_bucket", "e1/qwen-1", "0+10x30", le="1"),
         series("vllm:time_to_first_token_seconds_bucket", "e1/qwen-1", "0+10x30", le="2.5"),
         series("vllm:time_to_first_token_seconds_bucket", "e1/qwen-1", "0+10x30", le="5"),
         series("vllm:time_to_first_token_seconds_bucket", "e1/qwen-1", "0+10x30", le="+Inf")],
        [alert("VllmTtftP95High", "9m", []), alert("VllmTtftP95High", "20m", [(Q0, "warning", "e1/qwen-0: TTFT p95 4.875s over 2 s")])]),
    "errors_from_0_13": (   # 0.32: finished_reason="error"; aborts (clients that went away) are not errors
        [series("vllm:request_success_total", "e1/qwen-0", "0+10x20", finished_reason="stop", engine_version="0.32.0"),
         series("vllm:request_success_total", "e1/qwen-0", "0+1x20", finished_reason="error", engine_version="0.32.0"),
         series("vllm:request_success_total", "e1/qwen-1", "0+10x20", finished_reason="stop", engine_version="0.32.0"),
         series("vllm:request_success_total", "e1/qwen-1", "0+5x20", finished_reason="abort", engine_version="0.32.0")],
        [alert("VllmErrorRatio", "12m", [(Q0, "warning", "e1/qwen-0: 9.091% of requests end with error")])]),
    "preemptions": (
        [series("vllm:num_preemptions_total", "e1/qwen-0", "0+1x30"), series("vllm:num_preemptions_total", "e1/qwen-1", "3x30")],
        [alert("VllmPreempting", "10m", []),
         alert("VllmPreempting", "25m", [(Q0, "warning", "e1/qwen-0: preempts requests (KV cache too small for the load)")])]),
    "gpu": (   # the reader's textfile, through the node exporter
        [{"series": f'llmfleet_accelerator_temperature_celsius{{{GPU0}}}', "values": "90x10"},
         {"series": f'llmfleet_accelerator_temperature_celsius{{{GPU1}}}', "values": "60x10"},
         {"series": f'llmfleet_accelerator_ecc_uncorrected_errors{{{GPU1}}}', "values": "0 0 2"},
         {"series": f'llmfleet_accelerator_ecc_uncorrected_errors{{{GPU0}}}', "values": "0 0 0"},
         {"series": f'llmfleet_accelerator_throttled{{{GPU0}}}', "values": "0 0 1 1 1 1 1 1 1 1"},
         {"series": f'llmfleet_accelerator_throttled{{{GPU1}}}', "values": "0 1 0 1 0 1 0 1 0 1"},
         {"series": 'llmfleet_accelerator_read_ok{job="node",host="e1"}', "values": "1x10"},
         {"series": 'llmfleet_accelerator_read_ok{job="node",host="d1"}', "values": "1 1 0 0 0 0 0 0 0 0"}],
        [alert("GpuTemperatureHigh", "6m", [(dict(G0), "warning", "e1 nvidia 0: 90 C")]),
         alert("GpuEccUncorrectable", "1m", []),
         alert("GpuEccUncorrectable", "2m", [(dict(G1), "critical", "e1 nvidia 1: uncorrectable ECC errors since the driver loaded")]),
         alert("GpuThrottled", "8m", [(dict(G0), "warning", "e1 nvidia 0: heat or a hardware slowdown holds the clocks back")]),
         alert("AcceleratorReadFailed", "6m", []),
         alert("AcceleratorReadFailed", "8m", [({"job": "node", "host": "d1"}, "warning",
                                                "d1: the vendor's tool does not answer (journalctl -u llmfleet-accelerator-metrics "
                                                "on the host)")])]),
    "disk": (   # only e1's model mount counts; / filling up on e1 is not this alert's business
        [{"series": 'node_filesystem_avail_bytes{job="node",host="e1",mountpoint="/models"}', "values": "5x20"},
         {"series": 'node_filesystem_size_bytes{job="node",host="e1",mountpoint="/models"}', "values": "100x20"},
         {"series": 'node_filesystem_avail_bytes{job="node",host="e1",mountpoint="/"}', "values": "1x20"},
         {"series": 'node_filesystem_size_bytes{job="node",host="e1",mountpoint="/"}', "values": "100x20"}],
        [alert("ModelDiskSpaceLow", "5m", []),
         alert("ModelDiskSpaceLow", "15m", [({"job": "node", "host": "e1", "mountpoint": "/models"}, "warning",
                                             "e1: 5% free on /models (the models)")])]),
    "textfile": (   # a file written at t=0 and never again; a second rewritten every minute
        [{"series": 'node_textfile_mtime_seconds{job="node",host="d1",file="hy_smi.prom"}', "values": "0x40"},
         {"series": 'node_textfile_mtime_seconds{job="node",host="d1",file="fresh.prom"}', "values": "0+60x40"},
         {"series": 'node_textfile_scrape_error{job="node",host="d1"}', "values": "0x40"}],
        [alert("NodeTextfileStale", "20m", []),
         alert("NodeTextfileStale", "30m", [({"job": "node", "host": "d1", "file": "hy_smi.prom"}, "warning",
                                             "d1: textfile hy_smi.prom not rewritten")]),
         alert("NodeTextfileError", "30m", [])]),
    "gateway_server_errors": (   # qwen: 2 of 12 requests a minute answered 502 at the gateway; tiny: only 401s and 404s,
        # which are routed to no model (model="") and are the clients' errors
        [{"series": 'llmfleet_gateway_requests_total{job="gateway",key_name="a",model="qwen",status="200"}', "values": "0+10x20"},
         {"series": 'llmfleet_gateway_requests_total{job="gateway",key_name="a",model="qwen",status="502"}', "values": "0+2x20"},
         {"series": 'llmfleet_gateway_requests_total{job="gateway",key_name="b",model="tiny",status="200"}', "values": "0+10x20"},
         {"series": 'llmfleet_gateway_requests_total{job="gateway",key_name="",model="",status="401"}', "values": "0+50x20"}],
        [alert("GatewayServerErrors", "3m", []),
         alert("GatewayServerErrors", "12m", [({"model": "qwen"}, "warning",
                                               "gateway: 16.67% of the requests for qwen answered 5xx")])]),
    "exporter_down": (
        [{"series": 'up{job="node",host="web",instance="web"}', "values": "0x10"},
         {"series": 'up{job="node",host="e1",instance="e1"}', "values": "1x10"},
         {"series": 'up{job="vllm",served_model="qwen",instance="e1/qwen-0"}', "values": "0x10"}],
        [alert("ExporterDown", "6m", [({"job": "node", "host": "web", "instance": "web"}, "warning",
                                       "node exporter on web does not answer")])]),
}


def promtool_test(tmp_path, rules, input_series, tests, name):
    test = {"rule_files": [str(rules)], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": input_series, "alert_rule_test": tests}]}
    path = tmp_path / f"test_{name}.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    return subprocess.run([PROMTOOL, "test", "rules", str(path)], capture_output=True, text=True, check=False)


@needs_promtool
@pytest.mark.parametrize("case", sorted(CASES))
def test_each_rule_fires_when_it_should_and_not_otherwise(tmp_path, case):
    _rules, path = rules_file(tmp_path)
    input_series, tests = CASES[case]
    proc = promtool_test(tmp_path, path, input_series, tests, case)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@needs_promtool
def test_every_alert_the_rules_hold_has_a_case():
    rules, _path = m.alert_rules(FLEET, {"e1": "/models"}, gateways=True), None
    names = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    tested = {t["alertname"] for _series, tests in CASES.values() for t in tests}
    assert names == tested


@needs_promtool
def test_an_engine_before_0_13_counts_aborts_as_its_errors(tmp_path):
    """tiny runs 0.12, which has no finished_reason="error": its rule reads aborts."""
    _rules, path = rules_file(tmp_path)
    sel = 'job="vllm",served_model="tiny",model_name="tiny",engine="0",instance="gw/tiny-0",engine_version="0.12.0"'
    input_series = [{"series": f'vllm:request_success_total{{{sel},finished_reason="stop"}}', "values": "0+10x20"},
                    {"series": f'vllm:request_success_total{{{sel},finished_reason="abort"}}', "values": "0+5x20"}]
    fired = [({"served_model": "tiny", "instance": "gw/tiny-0"}, "warning", "gw/tiny-0: 33.33% of requests end with abort")]
    proc = promtool_test(tmp_path, path, input_series, [alert("VllmErrorRatio", "12m", fired)], "abort")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@needs_promtool
def test_the_lab_shortens_a_window_and_keeps_the_rule(tmp_path):
    rules, path = rules_file(tmp_path, {"for": {"down": "30s"}})
    default = m.alert_rules(FLEET, {"e1": "/models"})
    down = [r for g in rules["groups"] for r in g["rules"] if r["alert"] == "VllmInstanceDown"]
    assert [r["for"] for r in down] == ["30s", "30s"]
    assert [r["expr"] for r in down] == [r["expr"] for g in default["groups"] for r in g["rules"] if r["alert"] == "VllmInstanceDown"]
    input_series = [{"series": 'up{job="vllm",served_model="qwen",instance="e1/qwen-0"}', "values": "1 0 0"}]
    fired = [(dict(QWEN, job="vllm", instance="e1/qwen-0"), "critical", "vLLM instance e1/qwen-0 (qwen) does not answer /metrics")]
    proc = promtool_test(tmp_path, path, input_series, [alert("VllmInstanceDown", "1m", []),
                                                        alert("VllmInstanceDown", "2m", fired)], "short")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_served_models_own_ttft_target():
    rules = m.alert_rules(FLEET, options={"ttft_p95_s_by_model": {"qwen": 8}})
    ttft = {g["name"]: r["expr"] for g in rules["groups"] for r in g["rules"] if r["alert"] == "VllmTtftP95High"}
    assert ttft["llmfleet-deployment-qwen"].endswith("> 8.0")
    assert ttft["llmfleet-deployment-tiny"].endswith("> 2.0")


def test_gpu_rules_only_for_the_vendors_the_plans_hardware_has():
    alerts = {r["alert"] for g in m.alert_rules({"gw": FLEET["gw"]})["groups"] for r in g["rules"]}
    assert "GpuTemperatureHigh" not in alerts and "VllmInstanceDown" in alerts


# --- the dashboards ---

def test_dashboards_use_the_datasource_variable_that_works_for_import_and_provisioning():
    assert sorted(m.dashboards(FLEET)) == ["llmfleet-model-qwen.json", "llmfleet-model-tiny.json", "llmfleet-overview.json"]
    boards = m.dashboards(FLEET, gateways=True)
    assert sorted(boards) == ["llmfleet-gateway.json", "llmfleet-model-qwen.json", "llmfleet-model-tiny.json",
                              "llmfleet-overview.json"]
    for board in boards.values():
        assert board["templating"]["list"][0] == {"name": "datasource", "type": "datasource", "query": "prometheus",
                                                  "label": "Prometheus", "current": {}, "hide": 0}
        assert "__inputs" not in board and "DS_PROMETHEUS" not in json.dumps(board)
        for panel in board["panels"]:
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert 0 <= panel["gridPos"]["x"] and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        assert len(board["uid"]) <= 40
    qwen = boards["llmfleet-model-qwen.json"]
    assert qwen["templating"]["list"][1]["query"] == "e1/qwen-0,e1/qwen-1"
    assert len({b["uid"] for b in boards.values()}) == 4
    keyed = [t["expr"] for p in boards["llmfleet-gateway.json"]["panels"] for t in p["targets"]]
    assert all('job="gateway"' in expr for expr in keyed) and any("key_name" in expr for expr in keyed)
    gpu = [p["title"] for p in boards["llmfleet-overview.json"]["panels"] if "Accelerator" in p["title"]]
    assert gpu == ["Accelerator utilization", "Accelerator memory used", "Accelerator temperature", "Accelerator power"]
    assert not [p for p in m.dashboards({"gw": FLEET["gw"]})["llmfleet-overview.json"]["panels"] if "Accelerator" in p["title"]]


@needs_promtool
def test_every_panel_query_is_promql_once_grafanas_parts_are_replaced(tmp_path):
    """Each query as a recording rule: promtool parses it (a Grafana-only part left in would fail here)."""
    queries = [q for board in m.dashboards(FLEET, gateways=True).values() for q in m.panel_queries(board, "2m")]
    assert all("$" not in expr for _title, expr in queries)
    assert any('[2m]' in expr for _title, expr in queries) and any('instance=~".+"' in expr for _title, expr in queries)
    path = tmp_path / "panels.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": [{"record": f"panel_{i}", "expr": expr}
                                                                            for i, (_t, expr) in enumerate(queries)]}]}))
    proc = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_grafana_variable_left_in_a_query_is_refused():
    board = {"panels": [{"title": "x", "targets": [{"expr": "up{host=~\"$host\"}"}]}]}
    with pytest.raises(m.MonitoringError, match="keeps a Grafana variable"):
        m.panel_queries(board)


def test_only_the_gateway_hosts_that_run_the_gateway_are_counted():
    from ansible_collections.llmfleet.serving.plugins.filter import monitoring as f  # pylint: disable=import-outside-toplevel
    groups = {"llm_gateway": ["gw1", "gw2", "gw3"]}
    hostvars = {"gw1": {}, "gw2": {"llmfleet_gateway": False}, "gw3": {"llmfleet_gateway": "yes"}}
    assert f.monitoring_gateway_hosts(groups, hostvars) == ["gw1", "gw3"]
    assert f.monitoring_gateway_hosts({}, {}) == []


@needs_promtool
def test_prometheus_scrapes_itself_with_its_first_user_and_the_password_stays_in_its_file(tmp_path):
    """With users (monitoring_prometheus_users) the prometheus job sends basic auth: the user's name and the file holding
    its password, which prometheus.yml (shown in --diff) names; the password itself is never in it."""
    targets = tmp_path / "targets"
    targets.mkdir()
    secret = tmp_path / "self-scrape.password"
    secret.write_text("the-password")
    config = m.prometheus_config(str(targets), [], {"self": "10.0.0.5:9090", "self_username": "ops",
                                                    "self_password_file": str(secret)})
    own = config["scrape_configs"][0]
    assert own["job_name"] == "prometheus" and own["basic_auth"] == {"username": "ops", "password_file": str(secret)}
    assert all("basic_auth" not in job for job in config["scrape_configs"][1:])
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    assert "the-password" not in path.read_text()
    proc = subprocess.run([PROMTOOL, "check", "config", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # without a user: no basic auth; a user without a file is refused, naming it
    assert "basic_auth" not in m.prometheus_config(str(targets), [])["scrape_configs"][0]
    with pytest.raises(m.MonitoringError, match="self_password_file=None"):
        m.prometheus_config(str(targets), [], {"self_username": "ops"})
