"""Verify the web UI of the fleet lab: Open WebUI on the gateway host, on loopback behind nginx, in a real
browser (Debian's chromium driven by Playwright from the controller), after side_effect.yml changed its
gateway key and put it back.

Traffic goes only to the lab's gateway container (172.30.77.10) from the controller; loads are bounded."""

import json
import os
import pathlib
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
import testinfra

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "tests" / "tools"))
import webui_chat  # noqa: E402  (tests/tools/webui_chat.py: the browser chat, also run against `make demo`)

EPHEMERAL = pathlib.Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
INVENTORY = os.environ.get("MOLECULE_INVENTORY_FILE", str(EPHEMERAL / "inventory" / "ansible_inventory.yml"))
UI = "http://172.30.77.10:3000"
ADMIN = {"email": "admin@lab.example", "password": "lab-admin-pass-0123"}
ARTIFACTS = pathlib.Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", ".")) / "tests" / "output" / "webui"
UI_LOG = "/var/log/nginx/llmfleet-webui.access.log"
GATEWAY_LOG = "/var/log/nginx/llmfleet-gateway.access.log"


def gateway_host():
    return testinfra.get_host("ansible://llmfleet-fleet-gateway", ansible_inventory=INVENTORY)


def call(path, body=None, token=None, timeout=60):
    req = urllib.request.Request(UI + path, data=json.dumps(body).encode() if body is not None else None,
                                 method="POST" if body is not None else "GET")
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_open_webui_runs_as_its_own_user_on_loopback_only():
    host = gateway_host()
    service = host.service("llmfleet-open-webui")
    assert service.is_running and service.is_enabled
    assert host.socket("tcp://127.0.0.1:3080").is_listening
    assert not host.socket("tcp://0.0.0.0:3080").is_listening
    assert not host.socket("tcp://172.30.77.10:3080").is_listening
    # user:32 - plain `user` cuts names to 8 characters (open-we+)
    owners = host.check_output("ps -eo user:32=,args= | grep '[o]pen-webui serve' | awk '{print $1}'")
    assert owners and set(owners.split()) == {"open-webui"}, owners
    env = host.file("/etc/llmfleet/open-webui.env")
    assert env.mode == 0o640 and env.user == "root" and env.group == "open-webui"
    assert 'ENABLE_PERSISTENT_CONFIG="false"' in env.content_string and 'ENABLE_SIGNUP="false"' in env.content_string
    unit = host.file("/etc/systemd/system/llmfleet-open-webui.service").content_string
    assert "--host 127.0.0.1 --port 3080" in unit and "lab-admin-pass" not in unit
    # the slim install: no torch, no CUDA wheels
    listed = host.check_output("/opt/llmfleet/open-webui/0.12.4/bin/python -m pip list --format=freeze")
    assert "open-webui==0.12.4" in listed and "torch==" not in listed and "nvidia-" not in listed
    size = host.check_output("du -sm /opt/llmfleet/open-webui/0.12.4 | cut -f1")
    print(f"[webui] venv /opt/llmfleet/open-webui/0.12.4: {size} MiB")


def test_signup_is_refused_and_the_config_says_so():
    status, _text = call("/api/v1/auths/signup", {"email": "eve@lab.example", "password": "eve-pass-0123", "name": "Eve"})
    assert status == 403
    status, config = call("/api/config")
    assert status == 200 and config["features"]["enable_signup"] is False and config["features"]["auth"] is True
    status, _text = call("/api/v1/auths/signin", {"email": "eve@lab.example", "password": "eve-pass-0123"})
    assert status in (400, 401, 403)


def test_changing_the_web_uis_gateway_key_keeps_it_answering():
    rounds = json.loads(gateway_host().file("/var/tmp/llmfleet-webui-key-change.json").content_string)
    print(f"[webui] key change rounds: {rounds}")
    for label in ("changed", "back"):
        got = rounds[label]
        assert got["models"] == ["tiny-a", "tiny-b"], (label, got)
        assert got["chat_status"] == 200 and got["chat_model"] == "tiny-a" and got["chat_choices"] == 1, (label, got)
    assert rounds["changed"]["old_key_status"] == 401, "the replaced key is refused by the gateway"
    assert rounds["back"]["old_key_status"] == 200, "the inventory's key works again once it is back"


def test_the_ui_lists_the_fleets_models_through_the_gateway():
    status, signed = call("/api/v1/auths/signin", ADMIN)
    assert status == 200 and signed["role"] == "admin"
    status, models = call("/api/models", token=signed["token"])
    assert status == 200
    assert sorted(m["id"] for m in models["data"]) == ["tiny-a", "tiny-b"]


def test_each_models_chat_settings_follow_its_plan():
    """tiny-a is planned with a tool parser (tools: true), tiny-b as the demo's model is (tools: false, no parser):
    Open WebUI's own rows for them say native and legacy function calling, visible to every signed-in user."""
    status, signed = call("/api/v1/auths/signin", ADMIN)
    assert status == 200
    status, rows = call("/api/v1/models/all", token=signed["token"])
    assert status == 200
    by_id = {r["id"]: r for r in rows}
    assert by_id["tiny-a"]["params"]["function_calling"] == "native"
    assert by_id["tiny-a"]["meta"]["capabilities"]["builtin_tools"] is True
    assert by_id["tiny-b"]["params"]["function_calling"] == "legacy"
    assert by_id["tiny-b"]["meta"]["capabilities"]["builtin_tools"] is False
    for row in by_id.values():
        assert {"principal_type": "user", "principal_id": "*", "permission": "read"} in [
            {k: g[k] for k in ("principal_type", "principal_id", "permission")} for g in row["access_grants"]]
    plans = {p.stem: json.loads(p.read_text()) for p in (EPHEMERAL / "plans").glob("*.json")}
    args = {i["served_model_name"]: i["args"] for plan in plans.values() for d in plan["deployments"] for i in d["instances"]}
    assert "--tool-call-parser" in args["tiny-a"] and "--tool-call-parser" not in args["tiny-b"]


# The lab's models have random weights: unbounded, an answer runs to max_model_len (512 tokens, about three minutes
# on this CPU per chat). The admin's own chat setting (Open WebUI's Settings > General > Advanced Params, sent as
# `params.max_tokens` with each chat) bounds it; the product sets none, the request path is the same.
ANSWER_TOKENS = 32


def cap_answers(tokens):
    status, signed = call("/api/v1/auths/signin", ADMIN)
    assert status == 200
    status, settings = call("/api/v1/users/user/settings", token=signed["token"])
    assert status == 200
    ui = dict((settings or {}).get("ui") or {})
    ui["params"] = dict(ui.get("params") or {}, max_tokens=tokens)
    status, saved = call("/api/v1/users/user/settings/update", {"ui": ui}, token=signed["token"])
    assert status == 200 and saved["ui"]["params"]["max_tokens"] == tokens, saved


@pytest.mark.parametrize("model, tools", [("tiny-b", False), ("tiny-a", True)])
def test_in_a_browser_the_admin_signs_in_picks_a_model_and_gets_a_streamed_answer(model, tools):
    """The newcomer's first chat, for a model without a tool parser (the demo's configuration) and one with: the
    page shows an answer, no error box, and every chat request the web UI sent through the gateway got 200 (a
    model without a parser refuses native `tools` with 400)."""
    gateway = gateway_host()
    cap_answers(ANSWER_TOKENS)
    before = len(gateway.file(UI_LOG).content_string.splitlines())
    before_gw = len(gateway.file(GATEWAY_LOG).content_string.splitlines())
    shot = ARTIFACTS / f"chat-{'tools' if tools else 'no-tools'}-{model}.png"
    got = webui_chat.chat(UI, ADMIN["email"], ADMIN["password"], model, "Say hello to the fleet", shot)
    text = got["text"]
    print(f"[webui] {model} (tools {tools}) answer ({len(text)} characters): {text[:80]!r}; error box: {got['error']!r}; "
          f"screenshot {shot}")
    calls = [json.loads(line) for line in gateway.file(GATEWAY_LOG).content_string.splitlines()[before_gw:]]
    chats = [c for c in calls if c["uri"] == "/v1/chat/completions" and c["key_name"] == "webui" and c["model"] == model]
    print(f"[webui] the web UI's chat requests for {model} through the gateway: {[c['status'] for c in chats]}")
    assert chats and all(c["status"] == "200" for c in chats), chats
    assert not got["error"], got["error"]
    assert text, "the answer stayed empty"
    # Open WebUI sends the answer to the browser as socket.io "events" (chat:completion / response:completion),
    # one per delta and a last one when done: several of them is a streamed answer
    streamed = [f for f in got["frames"] if '"chat:completion"' in f or '"response:completion"' in f]
    print(f"[webui] socket.io completion events: {len(streamed)}")
    assert len(streamed) >= 3, "the answer reached the browser in pieces over the WebSocket, not at once"
    lines = [json.loads(line) for line in gateway.file(UI_LOG).content_string.splitlines()[before:]]
    assert any(line["uri"].startswith("/ws/socket.io") and line["status"] == "101" for line in lines), \
        "the WebSocket upgrade went through nginx"


def test_a_check_run_with_diff_shows_changes_but_no_secret(tmp_path):
    """--check --diff with a new web UI key: the environment file and the key digests would change, and no
    secret reaches the output (the new key, the other keys, the admin's password, the engines' key)."""
    root = pathlib.Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
    new_key = "lab-webui-key-diff-check-0123456789"
    keys = [{"name": "load", "key": "lab-load-key-0123456789abcdef"}, {"name": "burst", "key": "lab-burst-key-0123456789abcdef"},
            {"name": "webui", "key": new_key}]
    extra = tmp_path / "keys.json"
    extra.write_text(json.dumps({"gateway_api_keys": keys}))
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="false", ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    result = subprocess.run(["ansible-playbook", "-i", INVENTORY, "--check", "--diff", "-e", f"@{extra}", "--limit", "llm_gateway",
                             str(root / "playbooks" / "gateway.yml"), str(root / "playbooks" / "webui.yml")],
                            capture_output=True, text=True, timeout=600, env=env, cwd=str(root), check=False)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert "Environment file (the secret key, the admin's password, the gateway key)" in out
    engine_key = (EPHEMERAL / "secrets" / "vllm_api_key").read_text().strip()
    webui_secret = (EPHEMERAL / "secrets" / "webui_secret_key").read_text().strip()
    for secret in [new_key, ADMIN["password"], engine_key, webui_secret] + [k["key"] for k in keys]:
        assert secret not in out, "a secret is in the --diff output"
    recap = [line for line in out.splitlines() if line.startswith("llmfleet-fleet-gateway")][-1]
    assert "changed=0" not in recap, f"the new key should show as a change: {recap}"
