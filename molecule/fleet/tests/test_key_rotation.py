"""The engines' key on the fleet lab (issue 35): a missing key file on the running fleet stops serve.yml before any
change, naming where the key is, and so does a key file that holds another key than the one the engines run with;
an engine older than vLLM 0.11.0 refuses a rotation before any key is made; and
playbooks/rotate_key.yml moves every engine and the gateway from the old key to a new one under a continuous
streaming load through the gateway with no request refused, two hosts at a time (llmfleet_serve_serial 2: each host's
first instance together, then engine 2's second). The lab serves vLLM 0.31.0 here (test_rolling.py rolls it
to 0.32.0 later), past the floor. Runs in file order after test_fleet.py and before the other day-2 tests,
which read the key file again and so use the new key; every instance is left as it was, on the new key."""

import hashlib
import json
import re
import shutil

from test_fleet import EPHEMERAL, curl_in, engine_key, host, instances, run_playbook
from test_rolling import recap_changed, served, started_at, together, under_load

ENGINES = ("llmfleet-fleet-engine1", "llmfleet-fleet-engine2")
KEY_FILE = EPHEMERAL / "secrets" / "vllm_api_key"


def fingerprint(key):
    """What the collection's messages name a key by (sha256, 12 hex digits)."""
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def accepts(key):
    """Per instance, the status of GET /v1/models with `key` on its loopback port (vLLM's own key check)."""
    return {(name, inst["name"]): curl_in(name, f"http://127.0.0.1:{inst['port']}/v1/models", key=key) for name, inst in instances()}


def test_a_missing_key_file_stops_serve_before_any_change_and_says_where_the_key_is():
    saved = EPHEMERAL / "vllm_api_key.saved"
    shutil.move(KEY_FILE, saved)
    try:
        before = {key: started_at(*key) for key in (("llmfleet-fleet-engine1", "tiny-a-0"), ("llmfleet-fleet-engine2", "tiny-b-0"))}
        for check in ((), ("--check",)):
            result = run_playbook("serve.yml", *check)
            out = result.stdout + result.stderr
            assert result.returncode != 0, result.stdout[-3000:]
            assert f"{KEY_FILE} is missing, and nothing was changed" in out, out[-3000:]
            assert "llmfleet-fleet-engine1: /etc/llmfleet/vllm/tiny-a-0.env" in out
            assert "sudo grep '^VLLM_API_KEY=' " in out and "playbooks/rotate_key.yml" in out
            assert not KEY_FILE.exists(), "a new key was made"
        assert {key: started_at(*key) for key in before} == before, "an instance was restarted"
    finally:
        shutil.move(saved, KEY_FILE)


def test_a_key_file_that_is_not_the_running_fleets_stops_serve_before_any_change():
    # another (valid) key restored by mistake: serve.yml would roll every engine onto it while the gateway sends the old one
    saved = KEY_FILE.read_text()
    running = saved.strip()
    KEY_FILE.write_text("r" * 48 + "\n")
    try:
        before = {key: started_at(*key) for key in (("llmfleet-fleet-engine1", "tiny-a-0"), ("llmfleet-fleet-engine2", "tiny-b-0"))}
        result = run_playbook("serve.yml")
        out = result.stdout + result.stderr
        assert result.returncode != 0, result.stdout[-3000:]
        assert f"{KEY_FILE} does not hold the key the engines on llmfleet-fleet-engine1 run with, and nothing was changed" in out, out[-3000:]
        assert f"/etc/llmfleet/vllm/tiny-a-0.env (key {fingerprint(running)})" in out
        assert f"the file's is {fingerprint('r' * 48)}" in out
        assert running not in out and "r" * 48 not in out, "a key is printed"
        assert {key: started_at(*key) for key in before} == before, "an instance was restarted"
    finally:
        KEY_FILE.write_text(saved)


def test_an_engine_older_than_0_11_refuses_a_rotation_before_any_key_is_made(tmp_path):
    # the plans as they are, with tiny-b's engine said to be 0.10.2 (one key only): rotate_key.yml stops in its first play
    plans = tmp_path / "plans"
    shutil.copytree(EPHEMERAL / "plans", plans)
    path = plans / "llmfleet-fleet-engine2.json"
    plan = json.loads(path.read_text())
    for dep in plan["deployments"]:
        if dep["name"] == "tiny-b":
            dep["engine_version"] = "0.10.2"
    path.write_text(json.dumps(plan))
    old = engine_key()
    result = run_playbook("rotate_key.yml", "-e", f"llmfleet_plan_dir={plans}")
    out = result.stdout + result.stderr
    assert result.returncode != 0, result.stdout[-3000:]
    assert "llmfleet-fleet-engine2 / tiny-b-0: vLLM 0.10.2 takes one key" in out and "from vLLM 0.11.0" in out, out[-3000:]
    assert not KEY_FILE.with_name("vllm_api_key.next").exists() and engine_key() == old


def test_the_key_rotates_under_load_with_no_request_refused():
    old = engine_key()
    assert set(accepts(old).values()) == {200}
    before = {(name, inst["name"]): started_at(name, inst["name"]) for name, inst in instances()}
    result, stats, took = under_load("rotate_key.yml", "-e", "llmfleet_serve_serial=2")
    print(result.stdout[-3000:])
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert served(stats), stats                                                  # 0 failed (no 401), 0 truncated
    new = engine_key()
    assert new != old and len(new) == 48
    for suffix in (".next", ".previous"):
        assert not KEY_FILE.with_name("vllm_api_key" + suffix).exists()
    assert set(accepts(new).values()) == {200}, accepts(new)
    assert set(accepts(old).values()) == {401}, "an engine still accepts the old key"
    auth = host("llmfleet-fleet-gateway").file("/etc/nginx/llmfleet/engine_auth.inc").content_string
    assert f"Bearer {new}" in auth and old not in auth
    for name in ENGINES:                                                         # back to one key, in the environment file
        assert not host(name).run("ls /var/lib/llmfleet/vllm/*.api_keys.yaml*").stdout.strip()
        for _host, inst in (i for i in instances() if i[0] == name):
            assert f'VLLM_API_KEY="{new}"' in host(name).file(f"/etc/llmfleet/vllm/{inst['name']}.env").content_string
            unit = host(name).file(f"/etc/systemd/system/llmfleet-vllm-{inst['name']}.service").content_string
            assert "--config" not in unit and new not in unit
    after = {key: started_at(*key) for key in before}
    assert all(after[key] != before[key] for key in before), "every instance learned and then forgot a key (two restarts)"
    assert len(re.findall(r"changes: out of the gateway's rotation", result.stdout)) == 2 * len(before), "each instance changed twice"
    together(after)   # the second roll, as the first: engine 1's tiny-a with engine 2's tiny-b, then engine 2's tiny-a
    print(f"[key rotation] {took:.0f} s for {len(before)} instances, two rolls each, two hosts at a time")
    # nothing left to do: a second serve.yml changes nothing
    again = run_playbook("serve.yml")
    assert again.returncode == 0, again.stdout[-3000:]
    for name in ENGINES:
        assert recap_changed(again.stdout, name) == 0, again.stdout[-3000:]
