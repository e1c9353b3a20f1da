"""The monitoring role's accelerator tasks on a lab host (issue 36): the reader installed, its unit written and started by
the role, idempotent on the second run, and its readings through the node exporter in the lab's Prometheus.

The lab has no GPU, so nvidia-smi is a STAND-IN: a script that prints what the real nvidia-smi printed on the lent H200
(driver 580.159.04) for the reader's own query (tests/fixtures/monitoring/nvidia-smi-h200-driver580.csv). The reader
itself ran against the real tool on the H200. The role's entry point normally learns the vendor from the host's plan
(`__monitoring_accelerator`, from `monitoring_accelerator_reader`); the lab's plans are CPU plans, so the test gives that
fact as the plan of an NVIDIA host would. Everything is removed at the end: the later tests see the lab as it was.

Runs in file order after test_monitoring.py (it reads Prometheus the same way)."""

import json
import os
import pathlib
import subprocess
import tempfile

from test_fleet import ADDRESS, INVENTORY, host
from test_monitoring import query, wait_for

ROOT = pathlib.Path(__file__).resolve().parents[3]
FIXTURE = ROOT / "tests" / "fixtures" / "monitoring" / "nvidia-smi-h200-driver580.csv"
HOST = "llmfleet-fleet-engine2"
STANDIN_DIR = "/usr/local/lib/llmfleet-standin"
UNIT = "llmfleet-accelerator-metrics"
PROM = "/var/lib/prometheus/node-exporter/llmfleet_accelerators.prom"
PLAY = """- hosts: {host}
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: llmfleet.serving.monitoring
        tasks_from: accelerators
      vars:
        __monitoring_accelerator: {{vendor: nvidia, tool: nvidia-smi, dirs: ["{dirs}"]}}
        monitoring_accelerator_interval: 2
"""


def converge(playbook):
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="false", ANSIBLE_NOCOLOR="1", ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    result = subprocess.run(["ansible-playbook", "-i", INVENTORY, playbook], capture_output=True, text=True, timeout=300, env=env,
                            cwd=str(ROOT), check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    recap = [line for line in result.stdout.splitlines() if line.startswith(HOST) and "changed=" in line]
    assert recap, result.stdout[-2000:]
    return int(recap[-1].split("changed=")[1].split()[0])


def test_the_role_runs_the_reader_on_a_host_and_prometheus_reads_the_gpu():
    engine = host(HOST)
    standin = f"#!/bin/sh\n# STAND-IN for nvidia-smi (no GPU in the lab): what the H200's nvidia-smi printed for the reader's query\n" \
              f"cat <<'EOF'\n{FIXTURE.read_text().strip()}\nEOF\n"
    engine.run(f"mkdir -p {STANDIN_DIR}")
    with tempfile.TemporaryDirectory() as tmp:
        script = pathlib.Path(tmp) / "nvidia-smi"
        script.write_text(standin)
        copied = subprocess.run(["docker", "cp", str(script), f"{HOST}:{STANDIN_DIR}/nvidia-smi"], capture_output=True, text=True,
                                check=False)
        assert copied.returncode == 0, copied.stderr
        assert engine.run(f"chmod 0755 {STANDIN_DIR}/nvidia-smi").rc == 0
        playbook = pathlib.Path(tmp) / "accelerators.yml"
        playbook.write_text(PLAY.format(host=HOST, dirs=STANDIN_DIR))
        try:
            first = converge(str(playbook))
            second = converge(str(playbook))
            print(f"[accelerators] role on {HOST}: changed={first}, then changed={second}")
            assert first >= 3 and second == 0     # folder or reader, unit, start; nothing the second time
            assert engine.service(UNIT).is_running and engine.service(UNIT).is_enabled
            unit = engine.file(f"/etc/systemd/system/{UNIT}.service").content_string
            assert f"--tool {STANDIN_DIR}/nvidia-smi" in unit and "NoNewPrivileges=yes" in unit
            text = wait_for("the reader's file", lambda: engine.file(PROM).exists and engine.file(PROM).content_string, timeout=30)
            assert "llmfleet_accelerator_read_ok 1" in text, text
            gpu = '{vendor="nvidia",gpu="0",uuid="GPU-712db037-dd55-2264-16d4-2fd2846a530f",name="NVIDIA H200"}'
            assert f"llmfleet_accelerator_temperature_celsius{gpu} 33" in text, text
            # through the node exporter (at ADDRESS:9100, reachable from the monitoring host only) into the lab's Prometheus,
            # which labels the node job's series with the host's inventory name
            series = wait_for("Prometheus's GPU series", lambda: query(f'llmfleet_accelerator_power_watts{{job="node",host="{HOST}"}}'),
                              timeout=90)
            print(f"[accelerators] Prometheus, node exporter at {ADDRESS[HOST]}:9100:",
                  json.dumps([[s["metric"].get("name"), s["value"][1]] for s in series]))
            assert float(series[0]["value"][1]) == 79.57 and series[0]["metric"]["name"] == "NVIDIA H200"
            ok = query(f'llmfleet_accelerator_read_ok{{job="node",host="{HOST}"}}')
            assert ok and ok[0]["value"][1] == "1", ok
        finally:
            engine.run(f"systemctl disable --now {UNIT}; rm -f /etc/systemd/system/{UNIT}.service {PROM} "
                       f"/usr/local/libexec/llmfleet-accelerator-metrics; rm -rf {STANDIN_DIR}; systemctl daemon-reload")
    assert not engine.service(UNIT).is_running
