"""vLLM's /metrics at an engine host's edge, on a real nginx (Debian's nginx 1.22) with the edge rendered from the gateway
role's own template: vLLM's --api-key does not guard /metrics, so the edge serves it to the monitoring host's address
only, and that address reaches nothing else there; the gateway hosts reach their paths and not /metrics.

Each client connects from its own loopback address (127.0.0.2 the gateway, 127.0.0.3 the monitoring host, 127.0.0.4
anyone else: Linux answers on all of 127/8). The engine is a stand-in that answers every GET with its path: what is
checked is which request the edge passes on."""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _gateway as gw
from ansible_collections.llmfleet.serving.plugins.module_utils import _monitoring as mon

from llmfleet_testing import free_port, start_nginx, stop_nginx
from test_gateway import _nginx_t, _render

GATEWAY, MONITOR, OTHER = "127.0.0.2", "127.0.0.3", "127.0.0.4"


class Engine(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port):
        self.seen = []
        super().__init__(("127.0.0.1", port), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.server.seen.append(self.path)
        body = f"engine {self.path}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def get(port, path, source):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    conn.request("GET", path)
    response = conn.getresponse()
    status, body = response.status, response.read().decode()
    conn.close()
    return status, body


@pytest.fixture()
def edge(tmp_path):
    """make(metrics_allow) -> (edge port, engine): the edge of one instance, allowing the gateway's address, checked with
    nginx -t and started."""
    started = []

    def make(metrics_allow):
        engine = Engine(free_port())
        port = free_port()
        plan = {"host": "eng", "deployments": [{"name": "tiny", "instances": [
            {"name": "tiny-0", "served_model_name": "tiny", "port": engine.server_address[1], "bind_address": "127.0.0.1",
             "edge": {"address": "127.0.0.1", "port": port}}]}]}
        root = _render(tmp_path / f"e{len(started)}", None, gw.edge_model(plan, [GATEWAY], None, metrics_allow))
        checked = _nginx_t(root)
        assert checked.returncode == 0, checked.stderr
        start_nginx(str(root))
        started.append((root, engine))
        return port, engine
    yield make
    for root, engine in started:
        stop_nginx(str(root))
        engine.shutdown()
        engine.server_close()


def test_the_monitoring_host_reads_metrics_and_nothing_else(edge):
    port, engine = edge([MONITOR])
    assert get(port, "/metrics", MONITOR) == (200, "engine /metrics\n")
    # the monitoring host's address opens a connection, and gets nothing but /metrics
    assert [get(port, path, MONITOR)[0] for path in ("/health", "/v1/models", "/tokenize", "/nope")] == [403] * 4
    # the gateway's paths stay the gateway's; /metrics is not one of them
    assert get(port, "/health", GATEWAY) == (200, "engine /health\n")
    assert get(port, "/metrics", GATEWAY)[0] == 403
    # anyone else: nothing at all
    assert [get(port, path, OTHER)[0] for path in ("/metrics", "/health", "/nope")] == [403] * 3
    assert engine.seen == ["/metrics", "/health"]


def test_a_gateway_that_monitors_reads_both(edge):
    port, engine = edge([GATEWAY])
    assert get(port, "/metrics", GATEWAY)[0] == 200 and get(port, "/health", GATEWAY)[0] == 200
    assert get(port, "/metrics", OTHER)[0] == 403
    assert engine.seen == ["/metrics", "/health"]


def test_without_a_monitoring_host_no_one_reads_metrics(edge):
    port, engine = edge([])
    assert get(port, "/metrics", GATEWAY)[0] == 404 and get(port, "/metrics", MONITOR)[0] == 403
    assert engine.seen == []


def test_the_edge_and_the_monitoring_role_name_the_same_host():
    """One answer for both: the host playbooks/monitoring.yml runs Prometheus on is the one whose address the edges let in."""
    addresses = {"ops": "10.0.0.5", "gw": "10.0.0.2"}
    assert mon.monitor_host({"llm_monitor": ["ops"], "llm_gateway": ["gw"]}) == "ops"
    assert mon.edge_metrics_allow({"llm_monitor": ["ops"], "llm_gateway": ["gw"]}, addresses) == ["10.0.0.5"]
    # an empty llm_monitor group falls back to the gateway, as a small fleet wants
    assert mon.monitor_host({"llm_monitor": [], "llm_gateway": ["gw"]}) == "gw"
    assert mon.edge_metrics_allow({"llm_gateway": ["gw"]}, addresses) == ["10.0.0.2"]
    assert mon.monitor_host({"llm_serve": ["e1"]}) is None and mon.edge_metrics_allow({"llm_serve": ["e1"]}, addresses) == []
    # a monitoring host without a private address: no edge serves /metrics (the monitoring role stops, naming it)
    assert mon.edge_metrics_allow({"llm_monitor": ["ops"]}, {}) == []
    with pytest.raises(mon.MonitoringError, match="not an IP address"):
        mon.edge_metrics_allow({"llm_monitor": ["ops"]}, {"ops": "ops.example"})


def test_a_bad_metrics_address_is_named():
    plan = {"host": "eng", "deployments": [{"name": "t", "instances": [
        {"name": "t-0", "served_model_name": "t", "port": 8000, "edge": {"address": "10.0.0.1", "port": 8000}}]}]}
    with pytest.raises(gw.GatewayError, match="gateway_edge_metrics_allow: 'ops' is not an address"):
        gw.edge_model(plan, ["10.0.0.2"], None, ["ops"])


def test_a_monitoring_address_inside_a_gateway_network_keeps_the_gateways_paths():
    plan = {"host": "eng", "deployments": [{"name": "t", "instances": [
        {"name": "t-0", "served_model_name": "t", "port": 8000, "edge": {"address": "10.0.0.1", "port": 8000}}]}]}
    inside = gw.edge_model(plan, ["10.0.0.0/24"], None, ["10.0.0.5"])
    assert inside["metrics_allow"] == ["10.0.0.5/32"] and inside["metrics_only"] == []
    assert gw.edge_model(plan, ["10.0.0.2"], None, ["10.0.1.5", "fd00::5"])["metrics_only"] == ["10.0.1.5/32", "fd00::5/128"]
