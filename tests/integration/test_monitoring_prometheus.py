"""The monitoring generators (plugins/module_utils/_monitoring.py) against a real Prometheus (Debian's `prometheus` 2.42 binary)
and a real node exporter (`prometheus-node-exporter`) on 127.0.0.1, without Docker: every dashboard panel's query returns data,
every alert expression runs, and the instance-down alert goes pending, then firing, when the engine stops answering.

The vLLM engine is a stand-in here: a small HTTP server that serves tests/fixtures/monitoring/vllm-0.32.0-metrics.txt
(vLLM 0.32's metric names, help texts, labels and buckets) with its counters and histograms growing at every scrape. This
tests the generators (targets, configuration, rules, dashboards) and Prometheus's reading of them, not vLLM: the fleet lab
scrapes the real engines through their edges."""

from __future__ import annotations

import http.server
import json
import pathlib
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
import yaml

from ansible_collections.llmfleet.serving.plugins.module_utils import _monitoring as m
from llmfleet_testing import ROOT, free_port

PROMETHEUS = shutil.which("prometheus")
NODE_EXPORTER = shutil.which("prometheus-node-exporter")
FIXTURE = pathlib.Path(ROOT) / "tests" / "fixtures" / "monitoring" / "vllm-0.32.0-metrics.txt"
GROWING = re.compile(r"^(vllm:\S+?(?:_total|_bucket|_count|_sum)(?:\{[^}]*\})?) (\S+)$")


@pytest.fixture(autouse=True)
def packages_installed():
    """Not a skip: `make integration` installs them, so a missing one is a harness fault, said as such."""
    assert PROMETHEUS and NODE_EXPORTER, ("prometheus or prometheus-node-exporter is not installed: run `make integration` "
                                          "(tests/host-packages.sh prometheus prometheus-node-exporter)")


class Engine(http.server.BaseHTTPRequestHandler):
    """Serves the recorded /metrics, its counters multiplied by the number of scrapes so far (rates are not zero)."""
    scrapes = 0

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.path != "/metrics":
            self.send_error(404)
            return
        Engine.scrapes += 1
        lines = []
        for line in FIXTURE.read_text().splitlines():
            match = GROWING.match(line)
            lines.append(f"{match.group(1)} {float(match.group(2)) * Engine.scrapes}" if match else line)
        body = ("\n".join(lines) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def api(port, path, **params):
    url = f"http://127.0.0.1:{port}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"{path} {params}: HTTP {exc.code} {exc.read()[:300]!r}") from None


def wait(what, check, budget_s):
    end = time.monotonic() + budget_s
    last = None
    while time.monotonic() < end:
        try:
            found = check()
        except (urllib.error.URLError, ConnectionError) as exc:   # Prometheus not listening yet
            found, last = None, exc
        if found:
            return found
        time.sleep(0.25)
    raise AssertionError(f"{what}: not within {budget_s} s ({last})")


def test_dashboards_and_the_down_alert_on_a_live_prometheus(tmp_path):
    started = time.monotonic()
    engine = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    threading.Thread(target=engine.serve_forever, daemon=True).start()
    # the monitoring host serves one instance itself, on loopback (as on the gateway host of a small fleet)
    plans = {"mon": {"host": "mon", "errors": [], "hardware": {"accelerators": []},
                     "deployments": [{"name": "tiny", "engine_version": "0.32.0", "served_model_name": "tiny", "instances": [
                         {"name": "tiny-0", "port": engine.server_address[1], "served_model_name": "tiny", "bind_address": "127.0.0.1",
                          "edge": None, "max_num_seqs": 4, "model_dir": "/models/tiny"}]}]}}
    node_port, prom_port = free_port(), free_port()
    targets = m.scrape_targets(plans, ["mon"], "mon", {}, node_port=node_port)
    assert targets["errors"] == []
    (tmp_path / "targets").mkdir()
    for job, groups in targets["files"].items():
        (tmp_path / "targets" / f"{job}.json").write_text(json.dumps(groups))
    # the lab's windows: the same rules, shorter `for:` and rate window
    rules = m.alert_rules(plans, m.model_mounts(plans, {}), {"for": {"down": "3s"}, "rate_window": "10s"})
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules))
    config = m.prometheus_config(str(tmp_path / "targets"), [str(tmp_path / "rules.yml")],
                                 {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s",
                                  "self": f"127.0.0.1:{prom_port}", "refresh_interval": "5s"})
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    check = subprocess.run(["promtool", "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True, text=True,
                           check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    node = subprocess.Popen([NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{node_port}",
                             f"--collector.textfile.directory={tmp_path}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    prometheus = subprocess.Popen([PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'data'}",
                                   f"--web.listen-address=127.0.0.1:{prom_port}"],
                                  stdout=subprocess.DEVNULL, stderr=(tmp_path / "prometheus.log").open("w"))
    try:
        def all_up():
            active = api(prom_port, "/api/v1/targets")["data"]["activeTargets"]
            return len(active) == 3 and all(t["health"] == "up" for t in active) and Engine.scrapes >= 4

        try:
            wait("every target up and 4 scrapes of the engine", all_up, 30)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{(tmp_path / 'prometheus.log').read_text()[-2000:]}") from None
        empty = []
        queries = [q for board in m.dashboards(plans).values() for q in m.panel_queries(board, "10s")]
        for title, expr in queries:
            if not api(prom_port, "/api/v1/query", query=expr)["data"]["result"]:
                empty.append((title, expr))
        assert not empty, f"panels without data: {empty}"
        print(f"{len(queries)} panel queries returned data")
        for group in rules["groups"]:   # every alert expression is PromQL Prometheus runs (a bad one is HTTP 400)
            for rule in group["rules"]:
                api(prom_port, "/api/v1/query", query=rule["expr"])

        engine.shutdown()
        engine.server_close()
        stopped = time.monotonic()
        states = []

        def down_alert(state):
            alerts = api(prom_port, "/api/v1/alerts")["data"]["alerts"]
            got = [a["state"] for a in alerts if a["labels"]["alertname"] == "VllmInstanceDown"
                   and a["labels"]["instance"] == "mon/tiny-0"]
            states.extend(s for s in got if not states or states[-1] != s)
            return state in got

        wait("VllmInstanceDown pending", lambda: down_alert("pending"), 10)
        wait("VllmInstanceDown firing", lambda: down_alert("firing"), 15)
        print(f"VllmInstanceDown: {' -> '.join(states)} {time.monotonic() - stopped:.1f} s after the engine stopped "
              f"(for: 3s, scrape and evaluation every 1 s); whole test {time.monotonic() - started:.1f} s")
        assert states[0] == "pending"
    finally:
        for proc in (prometheus, node):
            proc.terminate()
            proc.wait(timeout=10)
