"""playbooks/usage.yml through a real ansible-playbook on this machine (local connection), both sources:

- the gateway's access log with logrotate's copies beside it (`.1`, `.2.gz`), lines as the gateway's log_format writes
  them: every request counted on its UTC day, exactly;
- a real Prometheus (Debian's 2.42) over recorded counters of three days, put into its storage with `promtool tsdb
  create-blocks-from openmetrics` (the counters mtail makes of the log, sampled every minute): one query per day, the
  day's increase; Prometheus asks a user (its web configuration, as the monitoring role writes it) and the report
  sends monitoring_prometheus_users' first; a day older than monitoring_retention is warned of.

Each run writes the JSON, the Markdown and the PNG chart; the charts are kept in tests/output/usage/ to look at."""

from __future__ import annotations

import datetime
import gzip
import json
import pathlib
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _prometheus_auth as pa

from llmfleet_testing import free_port, run_ansible, task_result

ARTIFACTS = pathlib.Path(__file__).resolve().parents[1] / "output" / "usage"
PROMETHEUS = "/usr/bin/prometheus"


@pytest.fixture(autouse=True)
def prometheus_installed():
    """Not a skip: `make integration` installs Debian's prometheus (promtool with it)."""
    assert shutil.which("promtool") and pathlib.Path(PROMETHEUS).exists(), \
        "prometheus is not installed: run `make integration` (tests/host-packages.sh prometheus)"


def utc_day(days_ago):
    return datetime.datetime.now(datetime.timezone.utc).date() - datetime.timedelta(days=days_ago)


def line(when, key, model, status="200", prompt="", completion=""):
    return json.dumps({"time": when.isoformat(), "remote_addr": "10.0.0.5", "request_id": "r", "method": "POST",
                       "uri": "/v1/chat/completions", "status": status, "key_name": key, "model": model,
                       "upstream": "u" if model else "", "upstream_addr": "", "upstream_status": "", "request_time": "0.120",
                       "upstream_connect_time": "", "upstream_header_time": "", "upstream_response_time": "",
                       "request_length": "100", "bytes_sent": "100", "prompt_tokens": prompt,
                       "completion_tokens": completion}, separators=(",", ":"))


def usage(tmp_path, source, first, last, fails=False, **extra):
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "ansible_become": False}
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"children": {"llm_gateway": {"hosts": {"gw": local}}}}}))
    out = tmp_path / "usage"
    result = run_ansible("ansible-playbook", "playbooks/usage.yml", "-i", str(inventory), with_inventory=False,
                         extra_vars=dict({"usage_source": source, "usage_from": first.isoformat(), "usage_to": last.isoformat(),
                                          "monitoring_usage_dir": str(out)}, **extra))
    if fails:
        return result, None, None
    assert result["stats"]["gw"]["failures"] == 0, json.dumps(result)[-3000:]
    stem = f"usage-{first.isoformat()}-{last.isoformat()}"
    report = json.loads((out / f"{stem}.json").read_text())
    png = (out / f"{stem}.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(out / f"{stem}.png", ARTIFACTS / f"usage-{source}.png")
    shutil.copy(out / f"{stem}.md", ARTIFACTS / f"usage-{source}.md")
    return result, report, (out / f"{stem}.md").read_text()


def test_the_report_from_the_gateways_log_and_its_rotated_copies(tmp_path):
    three, two, one = (datetime.datetime.combine(utc_day(n), datetime.time(12), datetime.timezone.utc) for n in (3, 2, 1))
    log = tmp_path / "access.log"
    east = datetime.timezone(datetime.timedelta(hours=8))
    # logrotate's layout: the oldest compressed, the last rotation plain, today's log
    with gzip.open(tmp_path / "access.log.2.gz", "wt") as handle:
        handle.write("\n".join([line(three, "alice", "qwen", prompt="100", completion="50")] * 3) + "\n")
    (tmp_path / "access.log.1").write_text("\n".join([
        line(two, "alice", "qwen", prompt="10", completion="5"),
        line(two, "bob", "tiny", prompt="7", completion="3"),
        line(two, "bob", "tiny", status="401"),
        line(two.astimezone(east), "bob", "tiny", prompt="1", completion="1")]) + "\n")
    log.write_text("\n".join([line(one, "alice", "qwen", prompt="20", completion="8"),
                              line(one, "carol", "qwen", status="502")]) + "\n")
    (tmp_path / "access.log.old").write_text(line(one, "mallory", "qwen", prompt="9999", completion="9999") + "\n")
    result, report, text = usage(tmp_path, "log", utc_day(3), utc_day(1), __monitoring_gateway_log=str(log))
    read = task_result(result, "usage | Read every gateway host's access log", "gw")["results"][0]
    assert read["files"] == [str(tmp_path / "access.log.2.gz"), str(tmp_path / "access.log.1"), str(log)]
    # the 401 and the 502 are not counted; the line written at UTC+8 is on its UTC day; access.log.old is no rotation
    assert report["total"] == {"requests": 7, "prompt_tokens": 338, "completion_tokens": 167}
    assert report["by_key"] == {"alice": {"requests": 5, "prompt_tokens": 330, "completion_tokens": 163},
                                "bob": {"requests": 2, "prompt_tokens": 8, "completion_tokens": 4}}
    assert [d["requests"] for d in report["by_day"].values()] == [3, 3, 1]
    assert report["source"] == "log" and report["hosts"] == ["gw"]
    assert "**Total**: 7 requests, 338 prompt tokens, 167 completion tokens." in text
    print("\n" + text)


def openmetrics(start, minutes):
    """The gateway's counters as mtail serves them, one sample a minute from `start` (OpenMetrics, seconds): alice on qwen
    makes 1 request a minute of 10 prompt and 5 completion tokens, bob on tiny one every other minute of 4 and 2, and
    20 requests a minute without a key are refused (401, no model)."""
    series = [
        ("llmfleet_gateway_requests", 'key_name="alice",model="qwen",status="200"', 1.0),
        ("llmfleet_gateway_prompt_tokens", 'key_name="alice",model="qwen"', 10.0),
        ("llmfleet_gateway_completion_tokens", 'key_name="alice",model="qwen"', 5.0),
        ("llmfleet_gateway_requests", 'key_name="bob",model="tiny",status="200"', 0.5),
        ("llmfleet_gateway_prompt_tokens", 'key_name="bob",model="tiny"', 2.0),
        ("llmfleet_gateway_completion_tokens", 'key_name="bob",model="tiny"', 1.0),
        ("llmfleet_gateway_requests", 'key_name="",model="",status="401"', 20.0),
    ]
    out = []
    for name in dict.fromkeys(s[0] for s in series):
        out.append(f"# TYPE {name} counter")
        for metric, labels, rate in series:
            if metric != name:
                continue
            for minute in range(minutes + 1):
                stamp = start + 60 * minute
                out.append(f'{name}_total{{job="gateway",instance="gw",{labels}}} {rate * minute} {stamp}')
    return "\n".join(out) + "\n# EOF\n"


def test_the_report_from_prometheus_day_by_day(tmp_path):
    first, last = utc_day(3), utc_day(1)
    start = int(datetime.datetime.combine(first, datetime.time(), datetime.timezone.utc).timestamp())
    (tmp_path / "series.om").write_text(openmetrics(start, 3 * 1440))
    data = tmp_path / "data"
    made = subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(tmp_path / "series.om"), str(data)],
                          capture_output=True, text=True, check=False)
    assert made.returncode == 0, made.stdout + made.stderr
    port = free_port()
    (tmp_path / "prometheus.yml").write_text("global: {}\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt   # pylint: disable=deprecated-module,import-outside-toplevel  # as the prometheus_web_config module
    password = "usage-report-password-0123"
    web, _fresh = pa.render([("reporter", password)], None, lambda pw, h: crypt.crypt(pw, h) == h,
                            lambda pw: crypt.crypt(pw, crypt.mksalt(crypt.METHOD_BLOWFISH)))
    (tmp_path / "web.yml").write_text(web)
    prometheus = subprocess.Popen([PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={data}",
                                   f"--web.listen-address=127.0.0.1:{port}", f"--web.config.file={tmp_path / 'web.yml'}"],
                                  stdout=subprocess.DEVNULL, stderr=(tmp_path / "prometheus.log").open("w"))
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2) as answer:
                    pass
            except urllib.error.HTTPError as exc:
                if exc.code == 401:   # up, and asking the credential
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "prometheus.log").read_text()[-2000:]
            time.sleep(0.5)
        listen = f"127.0.0.1:{port}"
        # a wrong password: the run fails naming the 401 and where the users are set, never the password
        result, _report, _text = usage(tmp_path, "prometheus", first, last, fails=True, monitoring_prometheus_listen=listen,
                                       monitoring_prometheus_users=[{"name": "reporter", "password": "wrong-" + password}])
        failed = task_result(result, "usage | Ask Prometheus for the gateway's counters, day by day", "gw")
        assert failed.get("failed") and "refused the credential (HTTP 401, user reporter)" in failed["msg"], failed
        assert password not in json.dumps(result)
        # 3 days of retention: the oldest day of the period starts before now - 3d, so it is warned of
        result, report, text = usage(tmp_path, "prometheus", first, last, monitoring_prometheus_listen=listen,
                                     monitoring_prometheus_users=[{"name": "reporter", "password": password}],
                                     monitoring_retention="3d")
    finally:
        prometheus.terminate()
        prometheus.wait(timeout=30)
    # each whole day: 1440 samples a minute apart from its first instant to its last, so increase() has nothing to
    # extrapolate and the figures are exact; the 401s carry no model and are not counted
    day = {"alice": {"requests": 1440, "prompt_tokens": 14400, "completion_tokens": 7200},
           "bob": {"requests": 720, "prompt_tokens": 2880, "completion_tokens": 1440}}
    assert report["by_key"] == {k: {n: 3 * v for n, v in row.items()} for k, row in day.items()}, report["by_key"]
    assert list(report["by_day"].values()) == [{n: day["alice"][n] + day["bob"][n] for n in day["alice"]}] * 3
    assert report["source"] == "prometheus"
    assert password not in json.dumps(result)
    assert report["outside_retention"] == [first.isoformat()]
    warning = f"{first.isoformat()}: older than Prometheus keeps samples (monitoring_retention 3d)"
    asked = task_result(result, "usage | Ask Prometheus for the gateway's counters, day by day", "gw")
    assert asked["outside_retention"] == [first.isoformat()] and any(warning in w for w in asked.get("warnings", [])), asked
    assert f"> **Warning**: {warning}" in text and "-e usage_source=log" in text
    said = task_result(result, "usage | Say where the report is and what it holds", "gw")["msg"]
    assert f"WARNING: {warning}" in said, said
    print("\n" + text)
