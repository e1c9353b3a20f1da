"""The web UI's decisions: version floor, the gateway key it uses, the gateway's URL on its host, its
environment (signup off, persistent config off, offline, no local embedding model) and its unit."""

from __future__ import annotations

import json
import pathlib

import pytest
import yaml

from ansible_collections.llmfleet.serving.plugins.filter import webui as webui_filter
from ansible_collections.llmfleet.serving.plugins.module_utils import _gateway as gw
from ansible_collections.llmfleet.serving.plugins.module_utils import _webui as w
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host

from llmfleet_testing import ROOT

KEYS = [{"name": "load", "key": "l" * 32}, {"name": "webui", "key": "w" * 32}]
OPTIONS = {"version": "0.12.4", "venv_root": "/opt/llmfleet/open-webui", "data_dir": "/var/lib/open-webui",
           "env_path": "/etc/llmfleet/open-webui.env", "user": "open-webui", "port": 3080, "admin_email": "admin@lab.example",
           "admin_password": "Secret-pass-1", "admin_name": "Admin", "secret_key": "s" * 48, "gateway_key_name": "webui",
           "gateway_listen": ["80"], "gateway_url": "", "public_url": "", "slim": True, "extra_env": {}}


def env_of(text):
    return dict(line.split("=", 1) for line in text.strip().splitlines())


def test_the_service_points_at_the_gateway_on_loopback_with_its_own_key():
    svc = w.service(OPTIONS, KEYS)
    assert svc["package"] == "open-webui==0.12.4" and svc["venv"] == "/opt/llmfleet/open-webui/0.12.4"
    assert svc["gateway_url"] == "http://127.0.0.1/v1" and svc["url"] == "http://127.0.0.1:3080"
    env = env_of(svc["env_text"])
    assert env["OPENAI_API_BASE_URLS"] == '"http://127.0.0.1/v1"' and env["OPENAI_API_KEYS"] == '"' + "w" * 32 + '"'
    for name, value in {"ENABLE_SIGNUP": "false", "DEFAULT_USER_ROLE": "pending", "ENABLE_PERSISTENT_CONFIG": "false",
                        "ENABLE_OLLAMA_API": "false", "OFFLINE_MODE": "true", "RAG_EMBEDDING_ENGINE": "openai",
                        "USE_SLIM_DOCKER": "true", "WEBUI_AUTH": "true", "FORWARDED_ALLOW_IPS": "127.0.0.1"}.items():
        assert env[name] == f'"{value}"', name
    assert "l" * 32 not in svc["env_text"] and "w" * 32 not in svc["unit_text"] and "Secret-pass-1" not in svc["unit_text"]
    unit = svc["unit_text"]
    assert "ExecStart=/opt/llmfleet/open-webui/0.12.4/bin/open-webui serve --host 127.0.0.1 --port 3080" in unit
    assert "User=open-webui" in unit and "EnvironmentFile=/etc/llmfleet/open-webui.env" in unit and "NoNewPrivileges=yes" in unit
    assert "USE_SLIM_DOCKER" not in w.service(dict(OPTIONS, slim=False), KEYS)["env_text"]


@pytest.mark.parametrize("version", ["0.12.3", "0.11.4", "0.6.5"])
def test_releases_before_the_security_fixes_are_refused(version):
    with pytest.raises(w.WebUIError, match=f"webui_version={version} is older than 0.12.4"):
        w.service(dict(OPTIONS, version=version), KEYS)


def test_versions_must_be_exact():
    with pytest.raises(w.WebUIError, match="exact release"):
        w.check_version("latest")
    assert w.check_version("0.13.0") == "0.13.0"


def test_the_gateway_key_is_picked_by_name_and_a_missing_one_names_the_others_not_their_keys():
    assert w.gateway_key(KEYS, "load") == "l" * 32
    with pytest.raises(w.WebUIError, match="no key named 'ui'.*names: load, webui") as err:
        w.gateway_key(KEYS, "ui")
    assert "l" * 32 not in str(err.value)
    with pytest.raises(w.WebUIError, match="not a list"):
        w.gateway_key(None, "webui")


@pytest.mark.parametrize("listen, url", [
    (["80"], "http://127.0.0.1/v1"),
    (["8080"], "http://127.0.0.1:8080/v1"),
    (["10.0.0.5:80"], "http://10.0.0.5/v1"),
    (["0.0.0.0:8000"], "http://127.0.0.1:8000/v1"),
    (["*:81"], "http://127.0.0.1:81/v1"),
    (["[::]:80"], "http://[::1]/v1"),
    (["443 ssl", "80"], "http://127.0.0.1/v1"),
    (["443 ssl http2"], "https://127.0.0.1/v1"),
    (["unix:/run/x.sock", "8001 reuseport"], "http://127.0.0.1:8001/v1"),
])
def test_the_gateways_own_url_comes_from_its_listen_values(listen, url):
    assert gw.local_url(listen) == url


def test_listen_values_without_a_tcp_listener_are_refused():
    with pytest.raises(gw.GatewayError, match="empty"):
        gw.local_url([])
    with pytest.raises(gw.GatewayError, match="no TCP listener"):
        gw.local_url(["unix:/run/x.sock"])
    with pytest.raises(gw.GatewayError, match="not an nginx listen"):
        gw.local_url(["10.0.0.1:80:90"])


@pytest.mark.parametrize("change, match", [
    ({"admin_email": "admin"}, "webui_admin_email='admin' is not an e-mail address"),
    ({"admin_password": "short"}, "must have 8 to 72 bytes"),
    ({"admin_password": "ü" * 40}, "must have 8 to 72 bytes"),   # 80 bytes: bcrypt would refuse it and leave no admin
    ({"secret_key": "abc"}, "secret key must have at least 24"),
    ({"extra_env": {"ENABLE_SIGNUP": "true", "X": "1"}}, "webui_extra_env sets ENABLE_SIGNUP, which the webui role manages"),
    ({"public_url": "chat.example.org"}, "must be an http"),
    ({"port": 70000}, "not a TCP port"),
])
def test_bad_inputs_fail_with_the_variable_named_and_no_secret(change, match):
    with pytest.raises(w.WebUIError, match=match) as err:
        w.service(dict(OPTIONS, **change), KEYS)
    assert "Secret-pass-1" not in str(err.value) and "s" * 48 not in str(err.value)


def test_public_url_and_extra_env_reach_the_environment():
    env = env_of(w.service(dict(OPTIONS, public_url="https://chat.example.org/", extra_env={"GLOBAL_LOG_LEVEL": "DEBUG"}), KEYS)["env_text"])
    assert env["WEBUI_URL"] == env["CORS_ALLOW_ORIGIN"] == '"https://chat.example.org"' and env["GLOBAL_LOG_LEVEL"] == '"DEBUG"'


def test_errors_lists_the_problem_without_secrets_and_nothing_when_good():
    assert w.errors(OPTIONS, KEYS) == []
    problems = w.errors(dict(OPTIONS, version="0.9.0"), [{"name": "load", "key": "l" * 32}])
    assert len(problems) == 1 and "older than 0.12.4" in problems[0]
    assert "no key named 'webui'" in w.errors(OPTIONS, [{"name": "load", "key": "l" * 32}])[0]


def test_inputs_are_checked_before_the_session_key_is_made_and_the_key_once_read():
    assert w.errors(dict(OPTIONS, secret_key=""), KEYS) == [], "before controller_secret.yml: the other inputs only"
    assert "admin_password" in w.errors(dict(OPTIONS, secret_key="", admin_password="short"), KEYS)[0]
    assert "at least 24" in w.errors(dict(OPTIONS, secret_key="abc"), KEYS)[0]
    with pytest.raises(w.WebUIError, match="at least 24"):
        w.service(dict(OPTIONS, secret_key=""), KEYS)


def test_an_https_public_url_makes_cookies_secure_and_is_the_only_origin():
    env = env_of(w.service(dict(OPTIONS, public_url="https://chat.example.org"), KEYS)["env_text"])
    assert env["WEBUI_SESSION_COOKIE_SECURE"] == '"true"' and env["CORS_ALLOW_ORIGIN"] == '"https://chat.example.org"'
    assert "WEBUI_SESSION_COOKIE_SECURE" not in w.service(dict(OPTIONS, public_url="http://10.0.0.5:3000"), KEYS)["env_text"]


def test_the_filters_turn_errors_into_filter_errors():
    from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match="older than 0.12.4"):
        webui_filter.webui_service(dict(OPTIONS, version="0.9.0"), KEYS)
    with pytest.raises(AnsibleFilterError, match="gateway_webui_listen is empty"):
        webui_filter.webui_front([], 3080)
    assert webui_filter.webui_front(["3000"], 3080) == {"listen": ["3000"], "backend": "127.0.0.1:3080"}


def test_the_two_roles_default_to_the_same_loopback_port():
    webui = yaml.safe_load((pathlib.Path(ROOT) / "roles" / "webui" / "defaults" / "main.yml").read_text())
    gateway = yaml.safe_load((pathlib.Path(ROOT) / "roles" / "gateway" / "defaults" / "main.yml").read_text())
    assert gateway["gateway_webui_port"] == "{{ webui_port | default(%d) }}" % webui["webui_port"]


def test_a_gateway_without_listeners_is_a_web_ui_error():
    with pytest.raises(w.WebUIError, match="gateway_listen is empty"):
        w.service(dict(OPTIONS, gateway_listen=[]), KEYS)


# --- each served model's chat settings in Open WebUI, from real plans -------------------------------------------------

def _plans():
    """Two engine hosts as the demo and the fleet lab plan them: SmolLM2 (the demo's model, no tool format) and
    Qwen3 with tools (hermes) on one host, Qwen3 again on the other."""
    cpu = {"accelerators": [], "links": None, "numa_cpus": {0: "0-7"}, "cpu_count": 8, "memory_mib": 32 * 1024, "driver_version": None}
    smol = json.loads((pathlib.Path(ROOT) / "tests" / "fixtures" / "models" / "smollm2-135m-instruct.json").read_text())["config"]
    demo = {"name": "smollm2", "model": {"id": "HuggingFaceTB/SmolLM2-135M-Instruct", "config": smol}, "engine": {"version": "0.32.0"},
            "workload": {"max_model_len": 2048, "concurrency": 4, "thinking": False, "tools": False},
            "overrides": {"cpu_kvcache_space_gib": 1}}
    qwen = {"name": "qwen", "model": "Qwen/Qwen3-0.6B", "engine": {"version": "0.32.0"},
            "workload": {"max_model_len": 2048, "concurrency": 4, "tools": True}, "overrides": {"cpu_kvcache_space_gib": 1}}
    return {"e1": plan_host("e1", cpu, [demo, qwen]), "e2": plan_host("e2", cpu, [qwen])}


def test_a_model_planned_without_a_tool_parser_chats_in_legacy_mode_and_one_with_a_parser_natively():
    plans = _plans()
    assert all(not p["errors"] for p in plans.values())
    settings = {s["id"]: s for s in w.model_settings(plans)}
    assert sorted(settings) == ["qwen", "smollm2"]
    assert settings["smollm2"]["function_calling"] == "legacy" and settings["smollm2"]["builtin_tools"] is False
    assert "without a tool parser" in settings["smollm2"]["why"]
    assert settings["qwen"]["function_calling"] == "native" and settings["qwen"]["builtin_tools"] is True
    assert "hermes" in settings["qwen"]["why"] and settings["qwen"]["reasoning_parser"] == "qwen3"


def test_a_model_whose_instances_disagree_stays_legacy_until_every_instance_has_the_parser():
    plans = _plans()
    inst = plans["e2"]["deployments"][0]["instances"][0]
    cut = inst["args"].index("--tool-call-parser")
    inst["args"] = [a for i, a in enumerate(inst["args"]) if i not in (cut, cut + 1) and a != "--enable-auto-tool-choice"]
    setting = next(s for s in w.model_settings(plans) if s["id"] == "qwen")
    assert setting["function_calling"] == "legacy" and "not every instance" in setting["why"]


def test_hosts_whose_plan_has_errors_serve_nothing_and_are_skipped():
    plans = _plans()
    plans["e1"]["errors"] = ["smollm2: something"]
    assert [s["id"] for s in w.model_settings(plans)] == ["qwen"]
    with pytest.raises(w.WebUIError, match="plan of e3"):
        w.model_settings({"e3": ["not", "a", "plan"]})


def test_rows_are_created_then_left_alone_and_an_admins_own_fields_survive_an_update():
    settings = w.model_settings(_plans())
    changes = w.model_changes(settings, [], "public")
    assert [(c["id"], c["action"]) for c in changes] == [("qwen", "create"), ("smollm2", "create")]
    smol = next(c for c in changes if c["id"] == "smollm2")
    assert smol["form"]["params"] == {"function_calling": "legacy"}
    assert smol["form"]["meta"]["capabilities"] == {"builtin_tools": False, "usage": True}
    assert smol["form"]["access_grants"] == [w.PUBLIC_READ] and smol["form"]["base_model_id"] is None
    # Open WebUI returns the rows it stored (plus ids and timestamps): nothing left to change
    stored = [dict(c["form"], user_id="u1", created_at=1, updated_at=1,
                   access_grants=[dict(g, id="g1", resource_type="model", resource_id=c["id"]) for g in c["form"]["access_grants"]])
              for c in changes]
    assert w.model_changes(settings, stored, "public") == []
    # an admin named the model, gave it a system prompt and a group grant; the plan now gives it a tool parser
    row = next(r for r in stored if r["id"] == "smollm2")
    row.update(name="Small chat", params={"function_calling": "legacy", "system": "Be brief."},
               access_grants=row["access_grants"] + [{"principal_type": "group", "principal_id": "g-team", "permission": "read"}])
    native = [dict(s, function_calling="native", builtin_tools=True) if s["id"] == "smollm2" else s for s in settings]
    [change] = w.model_changes(native, stored, "public")
    assert change["action"] == "update" and change["before"]["function_calling"] == "legacy"
    assert change["after"]["function_calling"] == "native"
    form = change["form"]
    assert form["name"] == "Small chat" and form["params"] == {"function_calling": "native", "system": "Be brief."}
    assert {"principal_type": "group", "principal_id": "g-team", "permission": "read"} in form["access_grants"]


def test_admins_only_access_removes_the_public_grant_and_nothing_else():
    settings = w.model_settings(_plans())
    rows = [dict(c["form"]) for c in w.model_changes(settings, [], "public")]
    changes = w.model_changes(settings, rows, "admins")
    assert len(changes) == 2 and all(c["form"]["access_grants"] == [] for c in changes)
    assert all(c["before"]["public_read"] and not c["after"]["public_read"] for c in changes)
    # Open WebUI's /model/update leaves grants alone: the module sends them to /model/access/update too
    assert all(c["action"] == "update" and c["grants"] for c in changes)
    assert not any(c["grants"] for c in w.model_changes(settings, [], "admins")), "a new row gets its grants from /create"
    with pytest.raises(w.WebUIError, match="webui_model_access"):
        w.model_changes(settings, [], "everyone")


def test_a_model_no_plan_describes_chats_without_native_tools_by_default():
    env = env_of(w.service(OPTIONS, KEYS)["env_text"])
    assert env["DEFAULT_MODEL_PARAMS"] == '"{\\"function_calling\\": \\"legacy\\"}"'
    assert env["DEFAULT_MODEL_METADATA"] == '"{\\"capabilities\\": {\\"builtin_tools\\": false}}"'
    with pytest.raises(w.WebUIError, match="DEFAULT_MODEL_PARAMS"):
        w.service(dict(OPTIONS, extra_env={"DEFAULT_MODEL_PARAMS": "{}"}), KEYS)


def test_the_settings_filter_is_registered():
    assert webui_filter.FilterModule().filters()["webui_model_settings"] is webui_filter.webui_model_settings


def test_an_admins_choice_to_disable_a_model_is_kept_and_the_stored_row_is_checked():
    settings = w.model_settings(_plans())
    create = next(c for c in w.model_changes(settings, [], "public") if c["id"] == "qwen")
    assert create["form"]["is_active"] is True, "a new row is active"
    stored = dict(create["form"], is_active=False)   # the admin switched it off in Admin Settings > Models
    later = [c for c in w.model_changes(settings, [stored], "public") if c["id"] == "qwen"]
    assert later == [], "whether a model is active is the admin's, not the role's"
    row = w.model_row(settings[0], stored, "public")
    assert "is_active" not in row, "an update leaves is_active as stored"
    assert w.row_as_planned(create, create["form"]) and not w.row_as_planned(create, dict(create["form"], params={}))
