"""llmfleet.serving.bench_report through Ansible on the controller: the three report files and a real PNG, the
first run becomes the baseline, the next prints its ratios, a slower one fails the gate and stays out of the
baseline, compare= puts two runs side by side, an unknown run is named with the runs that exist."""

from __future__ import annotations

import json

from llmfleet_testing import run_ansible

PLANS = {"e1": {"host": "e1", "hardware": {"accelerators": [], "cpu_count": 2},
                "deployments": [{"name": "a", "engine_version": "0.32.0",
                                 "instances": [{"name": "a-0", "port": 8002, "args": ["/m", "--max-num-seqs", "4"]}]}]}}


def rows(tput):
    return [{"deployment": "a", "target": t, "via": "gateway" if t == "gateway" else "instance", "host": "e1", "model": "a",
             "engine_version": "0.32.0", "concurrency": c, "num_prompts": 8, "input_len": 64, "output_len": 16,
             "metrics": {"completed": 8, "failed": 0, "output_throughput": tput * c, "median_e2el_ms": 1000.0 / tput,
                         "median_ttft_ms": 5.0, "request_throughput": tput / 10}}
            for t in ("gateway", "e1/a-0") for c in (1, 4)]


def report(tmp_path, run_id, tput, **extra):
    playbook = tmp_path / f"{run_id}.yml"
    args = dict({"rows": rows(tput), "plans": PLANS, "settings": {"concurrency": [1, 4], "input_len": 64, "output_len": 16},
                 "run_id": run_id, "dir": str(tmp_path / "bench")}, **extra)
    playbook.write_text(json.dumps([{"hosts": "localhost", "connection": "local", "gather_facts": False,
                                     "tasks": [{"name": "r", "llmfleet.serving.bench_report": args, "ignore_errors": True}]}]))
    return run_ansible("ansible-playbook", str(playbook))["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_report_files_baseline_ratios_gate_and_compare(tmp_path):
    first = report(tmp_path, "r1", 100.0)
    assert not first.get("failed"), first
    out = tmp_path / "bench" / "r1"
    assert sorted(p.name for p in out.iterdir()) == ["a.png", "bench.json", "bench.md"]
    assert (out / "a.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (out / "a.png").stat().st_size > 10000
    assert first["accepted"] == ["a"] and first["ratios"] == []
    assert json.loads((tmp_path / "bench" / "baselines" / "a.json").read_text())["run"] == "r1"
    assert "No baseline yet" in (out / "bench.md").read_text()

    second = report(tmp_path, "r2", 104.0, gate=True)
    assert not second.get("failed") and second["accepted"] == ["a"]
    assert "a · gateway · concurrency 4: output tok/s ×1.04, TTFT p50 ×1.00, e2e p50 ×0.96 of run r1" in second["ratio_lines"]

    slow = report(tmp_path, "r3", 50.0, gate=True, tolerance=0.25)
    assert not slow.get("failed"), "the module reports; bench.yml's assert stops the play"
    assert slow["accepted"] == [] and len(slow["regressions"]) == 8   # 2 targets x 2 steps x (throughput, e2e)
    assert "output_throughput is ×0.48 of baseline r2" in slow["regressions"][0]
    assert json.loads((tmp_path / "bench" / "baselines" / "a.json").read_text())["run"] == "r2", "a slower run is no baseline"

    side = report(tmp_path, "r4", 100.0, compare="r3", accept=False)
    assert side["accepted"] == [] and "Side by side with run r3" in side["report"]
    assert "| gateway | 4 | 400.0 | 200.0 | ×2.00 |" in side["report"]

    missing = report(tmp_path, "r5", 100.0, compare="nope")
    assert missing["failed"] and "compare=nope: no run of that name" in missing["msg"] and "r1, r2, r3, r4" in missing["msg"]
