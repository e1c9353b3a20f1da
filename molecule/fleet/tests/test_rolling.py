"""Day 2 on the fleet lab: changes to running instances go through the vllm role's one change path (out of the
gateway's rotation, drained, replaced, gated, back in) under a continuous streaming load through the gateway.
tiny-a runs on both engines, so one of them serves while the other changes. These tests run after
test_fleet.py (file order) and leave tiny-a on engine1 at --max-num-seqs 3."""

import copy
import json
import os
import re
import subprocess
import time

import pytest
import yaml

from test_fleet import EPHEMERAL, GATEWAY, HERE, LOAD_KEY, host, run_playbook

# Opt-in (LLMFLEET_FLEET_DAY2=1): on the gate's 2-core machine a CPU vLLM restart next to an engine under load took
# 36 s to more than 4 minutes, and once hung in its worker's start until the gate's budget ran out (seen 2026-12-01),
# so the gate's time and verdict would hang on the machine's load. Run it where cores are not all taken:
#   LLMFLEET_FLEET_DAY2=1 make molecule SCENARIO=fleet
pytestmark = pytest.mark.skipif(os.environ.get("LLMFLEET_FLEET_DAY2") != "1",
                                reason="day-2 roll under load: opt-in with LLMFLEET_FLEET_DAY2=1 (see the comment above)")
ENGINES = ("llmfleet-fleet-engine1", "llmfleet-fleet-engine2")
PYTHON = os.path.join(os.environ["LLMFLEET_VLLM_CPU_VENV"], "bin", "python")
UNIT = "/etc/systemd/system/llmfleet-vllm-tiny-a-0.service"


def deployments(name):
    return yaml.safe_load((EPHEMERAL / "inventory" / "host_vars" / name).read_text())["llmfleet_deployments"]


def tiny_a(name, overrides=None, extra_args=None):
    """The host's deployments from the lab's inventory, tiny-a with these overrides added / extra_args."""
    deps = copy.deepcopy(deployments(name))
    for d in deps:
        if d["name"] == "tiny-a":
            d["overrides"] = dict(d.get("overrides") or {}, **(overrides or {}))
            if extra_args:
                d["extra_args"] = list(extra_args)
    return deps


def roll(tmp_path, targets, *extra):
    """playbooks/upgrade.yml with these deployments per host, under the streaming load: (result, load stats, roll s)."""
    vars_file = tmp_path / "day2.json"
    vars_file.write_text(json.dumps({"day2_targets": targets,
                                     "llmfleet_deployments": "{{ day2_targets[inventory_hostname] | default([]) }}"}))
    stop = tmp_path / "stop"
    # two clients streaming 96 tokens each, a second apart, for as long as the roll runs (a 2-core machine: a
    # saturated engine would starve the roll itself)
    load = subprocess.Popen([PYTHON, str(HERE / "stream_load.py"), GATEWAY + "/v1", LOAD_KEY, "tiny-a", str(stop),
                             "--workers", "2", "--tokens", "96", "--pause", "1", "--max", "5000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)   # streams in flight before the first instance leaves
    t0 = time.monotonic()
    result = run_playbook("upgrade.yml", "-e", f"@{vars_file}", *extra)
    took = time.monotonic() - t0
    time.sleep(2)
    stop.write_text("")
    out, err = load.communicate(timeout=300)
    assert load.returncode == 0, err[-2000:]
    stats = json.loads(out)
    print(f"\nroll: {took:.0f} s; load: sent {stats['sent']}, failed {stats['failed']}, truncated {stats['truncated']}, "
          f"longest gap without a token {stats['longest_gap_s']} s, {stats['tokens']} tokens in {stats['wall_s']} s")
    return result, stats, took


def exec_start(name):
    return next(line for line in host(name).file(UNIT).content_string.splitlines() if line.startswith("ExecStart="))


def recap_changed(stdout, name):
    return int(re.search(rf"^{re.escape(name)}\s+: ok=\d+\s+changed=(\d+)", stdout, re.M).group(1))


def gateway_conf():
    return host("llmfleet-fleet-gateway").file("/etc/nginx/llmfleet/gateway.conf").content_string


def test_a_roll_under_load_keeps_every_request_and_a_target_the_engine_rejects_is_rolled_back(tmp_path):
    # both engines get a new flag, and the second one also a flag vLLM refuses: engine1 rolls to the new plan
    # (out of rotation, drained, replaced, gated, back in) while engine2 serves; then engine2's gate fails, its
    # previous unit comes back, and the play stops naming it and vLLM's error. The load sees none of it.
    targets = {"llmfleet-fleet-engine1": tiny_a("llmfleet-fleet-engine1", overrides={"max_num_seqs": 3}),
               "llmfleet-fleet-engine2": tiny_a("llmfleet-fleet-engine2", overrides={"max_num_seqs": 3}, extra_args=["--no-such-flag"])}
    result, stats, took = roll(tmp_path, targets)
    print(result.stdout[-2500:], f"({took:.0f} s)")
    assert result.returncode != 0
    assert len(re.findall(r"tiny-a-0: --max-num-seqs \d+ -> 3", result.stdout)) == 2   # plan.yml's diff per instance
    assert "llmfleet-fleet-engine2 / tiny-a-0" in result.stdout
    assert "--no-such-flag" in result.stdout and "unrecognized arguments" in result.stdout
    assert "the previous version and flags are running again" in result.stdout
    assert stats["sent"] > 0 and stats["failed"] == 0 and stats["truncated"] == 0, stats
    assert "--max-num-seqs 3" in exec_start("llmfleet-fleet-engine1")      # the first one keeps the new plan
    restored = exec_start("llmfleet-fleet-engine2")
    assert "--max-num-seqs 3" not in restored and "--no-such-flag" not in restored
    assert host("llmfleet-fleet-engine2").service("llmfleet-vllm-tiny-a-0").is_running
    assert " down;" not in gateway_conf()
    # the host that rolled, served again from the plan the roll wrote, changes nothing
    again = run_playbook("serve.yml", "--limit", "llmfleet-fleet-engine1")
    assert again.returncode == 0, again.stdout[-3000:]
    assert recap_changed(again.stdout, "llmfleet-fleet-engine1") == 0, again.stdout[-3000:]
