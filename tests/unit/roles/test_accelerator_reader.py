"""The monitoring role's accelerator reader (roles/monitoring/files/llmfleet-accelerator-metrics), run as the service runs
it, with stand-in tools that print what the vendors' tools print (the machine has no accelerator):

- NVIDIA: tests/fixtures/monitoring/nvidia-smi-h200-driver580.csv is what nvidia-smi printed on the lent H200 (driver
  580.159.04) for the reader's query; the same reader ran there against the real nvidia-smi (session note of issue 36).
- AMD rocm-smi and Hygon hy-smi: their --json shape, one object per card, with the key names of rocm-smi and of
  categraf's hy_smi input (inputs/hy_smi/README.md); no such card was reachable.
Every file it writes passes `promtool check metrics` (the node exporter's textfile collector parses the same format)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
READER = ROOT / "roles" / "monitoring" / "files" / "llmfleet-accelerator-metrics"
H200 = (ROOT / "tests" / "fixtures" / "monitoring" / "nvidia-smi-h200-driver580.csv").read_text()


def load():
    loader = importlib.machinery.SourceFileLoader("llmfleet_accelerator_metrics", str(READER))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


reader = load()


def samples(text):
    return {line.rsplit(" ", 1)[0]: line.rsplit(" ", 1)[1] for line in text.splitlines() if line and not line.startswith("#")}


def promtool_check(text):
    promtool = shutil.which("promtool")
    assert promtool, "promtool is not installed: run `make units` (tests/host-packages.sh prometheus)"
    proc = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def stand_in(tmp_path, body):
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\n" + body)
    tool.chmod(0o755)
    return str(tool)


def test_the_h200s_own_answer_becomes_exact_samples():
    text = reader.render(reader.parse_nvidia(H200), True, 1796393342.25)
    promtool_check(text)
    got = samples(text)
    gpu = '{vendor="nvidia",gpu="0",uuid="GPU-712db037-dd55-2264-16d4-2fd2846a530f",name="NVIDIA H200"}'
    assert got[f"llmfleet_accelerator_memory_total_bytes{gpu}"] == "150754820096"   # 143771 MiB, every byte
    assert got[f"llmfleet_accelerator_power_watts{gpu}"] == "79.57"
    assert got[f"llmfleet_accelerator_temperature_celsius{gpu}"] == "33"
    assert got[f"llmfleet_accelerator_clock_event_reasons{gpu}"] == "1"     # idle
    assert got[f"llmfleet_accelerator_throttled{gpu}"] == "0"
    assert got["llmfleet_accelerator_read_ok"] == "1" and got["llmfleet_accelerators_listed"] == "1"


def test_throttling_reasons_and_unsupported_fields():
    """Two GPUs in the H200's format: one held back by a thermal slowdown (0x40) while busy, one whose board reports no
    power draw and no ECC ([N/A], [Not Supported]: left out, not written as 0)."""
    rows = ("0, GPU-a, NVIDIA H200, 97, 120000, 143771, 88, 690.10, 2, 0x0000000000000040\n"
            "1, GPU-b, NVIDIA H200, 5, 10, 143771, 40, [N/A], [Not Supported], 0x0000000000000004\n")
    readings = reader.parse_nvidia(rows)
    assert readings[0][1]["throttled"] == 1.0 and readings[0][1]["utilization_ratio"] == 0.97
    assert readings[1][1]["throttled"] == 0.0      # at its power cap: full load, by design
    assert readings[1][1]["clock_event_reasons"] == 4.0
    assert "power_watts" not in readings[1][1] and "ecc_uncorrected_errors" not in readings[1][1]
    text = reader.render(readings, True, 0)
    promtool_check(text)
    assert samples(text)['llmfleet_accelerator_ecc_uncorrected_errors{vendor="nvidia",gpu="0",uuid="GPU-a",name="NVIDIA H200"}'] == "2"


@pytest.mark.parametrize("vendor, cards", [
    ("amd", {"card0": {"GPU use (%)": "87", "GPU Memory Allocated (VRAM%)": "61", "Temperature (Sensor junction) (C)": "71.0",
                       "Current Socket Graphics Package Power (W)": "512.0"},
             "card1": {"GPU use (%)": "0", "GPU Memory Allocated (VRAM%)": "0", "Temperature (Sensor junction) (C)": "35.0",
                       "Current Socket Graphics Package Power (W)": "N/A"}}),
    ("hygon", {"card0": {"HCU use (%)": "45.0", "HCU memory use (%)": "80", "Temperature (Sensor junction) (C)": "52.0",
                         "Average Graphics Package Power (W)": "210.0"},
               "card1": {"HCU use (%)": "0.0", "HCU memory use (%)": "1", "Temperature (Sensor junction) (C)": "39.0"}}),
])
def test_rocm_smi_and_hy_smi_json(vendor, cards):
    readings = reader.parse_smi_json(json.dumps(cards), vendor)
    assert [r[0] for r in readings] == [{"vendor": vendor, "gpu": "0"}, {"vendor": vendor, "gpu": "1"}]
    first = readings[0][1]
    assert set(first) == {"utilization_ratio", "memory_used_ratio", "temperature_celsius", "power_watts"}, first
    assert "power_watts" not in readings[1][1]
    promtool_check(reader.render(readings, True, 0))


def test_the_service_loop_writes_the_file_whole(tmp_path):
    tool = stand_in(tmp_path, f"cat <<'EOF'\n{H200}EOF\n")
    out = tmp_path / "textfile" / "llmfleet_accelerators.prom"
    out.parent.mkdir()
    proc = subprocess.run([sys.executable, str(READER), "--vendor", "nvidia", "--tool", tool, "--out", str(out)],
                          capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert samples(out.read_text())["llmfleet_accelerator_read_ok"] == "1"
    assert sorted(p.name for p in out.parent.iterdir()) == ["llmfleet_accelerators.prom"], "no temporary file left"
    assert oct(out.stat().st_mode & 0o777) == "0o644"


def test_a_driver_before_r535_is_asked_the_old_field_name(tmp_path):
    """What nvidia-smi answers to a field it does not know (seen on the H200 for a made-up field): exit 2 and 'is not a
    valid field to query'. The reader then asks clocks_throttle_reasons.active."""
    body = ('case "$*" in *clocks_event_reasons*) echo \'Field "clocks_event_reasons.active" is not a valid field to query.\'; '
            f"exit 2;; esac\ncat <<'EOF'\n{H200}EOF\n")
    out = tmp_path / "a.prom"
    proc = subprocess.run([sys.executable, str(READER), "--vendor", "nvidia", "--tool", stand_in(tmp_path, body), "--out", str(out)],
                          capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert samples(out.read_text())['llmfleet_accelerator_throttled{vendor="nvidia",gpu="0",uuid="GPU-712db037-dd55-2264-16d4-'
                                    '2fd2846a530f",name="NVIDIA H200"}'] == "0"


def test_a_failing_tool_still_writes_the_file_saying_so(tmp_path):
    """A driver failure is asked once (not again with the old field name) and said."""
    out = tmp_path / "a.prom"
    calls = tmp_path / "calls"
    tool = stand_in(tmp_path, f"echo x >> {calls}\n"
                              "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'; exit 9\n")
    proc = subprocess.run([sys.executable, str(READER), "--vendor", "nvidia", "--tool", tool, "--out", str(out)],
                          capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 1 and "could not communicate with the NVIDIA driver" in proc.stderr
    assert calls.read_text().count("x") == 1, "asked once: the old field name is tried only for an unknown field"
    text = out.read_text()
    promtool_check(text)
    assert samples(text) == {"llmfleet_accelerator_read_ok": "0", "llmfleet_accelerators_listed": "0",
                             "llmfleet_accelerator_read_timestamp_seconds": samples(text)["llmfleet_accelerator_read_timestamp_seconds"]}
    with pytest.raises(reader.ReadError, match="4 fields where 10 were asked"):
        reader.parse_nvidia("0, GPU-a, H200, 5\n")
