"""The gateway model: fleet plans -> upstreams, routes, /v1/models, keys, edges; and the role's templates
rendered from the reference inventories' plans (checked with the real `nginx -t` of Debian's nginx + njs)."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess

import jinja2
import pytest

from ansible_collections.llmfleet.serving.plugins.filter import gateway as gateway_filter
from ansible_collections.llmfleet.serving.plugins.filter import webui as webui_filter
from ansible_collections.llmfleet.serving.plugins.module_utils import _gateway as gw

from llmfleet_testing import ROOT, plan_of

TEMPLATES = pathlib.Path(ROOT) / "roles" / "gateway" / "templates"


def plan(host, *instances, errors=None):
    """A plan with one deployment per (name, port, model, edge address or None)."""
    deps = {}
    for name, port, model, edge in instances:
        deps.setdefault(model, []).append({"name": name, "port": port, "served_model_name": model, "bind_address": "127.0.0.1",
                                           "edge": {"address": edge, "port": port} if edge else None})
    return {"host": host, "errors": errors or [], "deployments": [{"name": m, "instances": i} for m, i in deps.items()]}


FLEET = {
    "e1": plan("e1", ("tiny-a-0", 8002, "tiny-a", "10.0.0.11")),
    "e2": plan("e2", ("tiny-a-0", 8002, "tiny-a", "10.0.0.12"), ("tiny-b-0", 8003, "tiny-b", "10.0.0.12")),
}


def test_one_upstream_per_model_with_edges_for_remote_instances():
    model = gw.gateway_model(FLEET, "gw")
    assert model["errors"] == []
    by_model = {u["model"]: u for u in model["upstreams"]}
    assert [s["address"] for s in by_model["tiny-a"]["servers"]] == ["10.0.0.11:8002", "10.0.0.12:8002"]
    assert [s["address"] for s in by_model["tiny-b"]["servers"]] == ["10.0.0.12:8003"]
    up = by_model["tiny-a"]
    assert up["keepalive_timeout"] == "4s"  # below uvicorn's 5 s default keep-alive
    assert (up["max_fails"], up["fail_timeout"], up["keepalive"]) == (2, "10s", 16)
    assert model["routes"] == {"tiny-a": up["name"], "tiny-b": by_model["tiny-b"]["name"]}
    assert model["models"] == {"object": "list", "data": [
        {"id": "tiny-a", "object": "model", "created": 0, "owned_by": "llmfleet"},
        {"id": "tiny-b", "object": "model", "created": 0, "owned_by": "llmfleet"}]}


def test_instances_on_the_gateways_own_host_use_loopback():
    fleet = {"gw": plan("gw", ("tiny-a-0", 8002, "tiny-a", None)), "e2": FLEET["e2"]}
    servers = gw.gateway_model(fleet, "gw")["upstreams"][0]["servers"]
    assert [s["address"] for s in servers] == ["10.0.0.12:8002", "127.0.0.1:8002"]


def test_a_remote_instance_without_an_edge_is_an_error_naming_host_instance_and_fix():
    fleet = {"e1": plan("e1", ("tiny-a-0", 8002, "tiny-a", None))}
    errors = gw.gateway_model(fleet, "gw")["errors"]
    assert len(errors) == 1
    assert "e1" in errors[0] and "tiny-a-0" in errors[0] and "llmfleet_private_address" in errors[0]


def test_a_plan_with_errors_is_reported():
    errors = gw.gateway_model({"e1": plan("e1", errors=["does not fit"])}, "gw")["errors"]
    assert "does not fit" in errors[0]


@pytest.mark.parametrize("options", [{"retries": 3}, {"non_idempotent": True}])
def test_unknown_options_are_refused(options):
    with pytest.raises(gw.GatewayError, match="unknown gateway options"):
        gw.gateway_model(FLEET, "gw", options)


@pytest.mark.parametrize("model", ["tiny-a", "Qwen/Qwen3-8B", "a b;c{}", "x" * 200])
def test_upstream_names_are_nginx_safe_and_distinct(model):
    name = gw.upstream_name(model)
    assert name.replace("_", "").isalnum() and len(name) <= 60
    assert name != gw.upstream_name(model + "!")


def test_keys_become_names_and_digests_and_never_appear_in_errors():
    keys = gw.api_keys([{"name": "webui", "key": "k" * 32}, {"name": "ops", "key": "o" * 32}])
    assert keys[0] == {"name": "webui", "sha256": __import__("hashlib").sha256(b"k" * 32).hexdigest()}
    assert "k" * 32 not in json.dumps(keys)


@pytest.mark.parametrize("keys, match", [
    ([], "non-empty list"),
    ("k", "non-empty list"),
    ([{"name": "a"}], "must have name and key"),
    ([{"name": "a b", "key": "k" * 32}], "name="),
    ([{"name": "a", "key": "short"}], "16-256"),
    ([{"name": "a", "key": 'has"quote' + "k" * 20}], "16-256"),
    ([{"name": "a", "key": "k" * 32}, {"name": "a", "key": "j" * 32}], "unique"),
    ([{"name": "a", "key": "k" * 32}, {"name": "b", "key": "k" * 32}], "unique"),
])
def test_bad_keys_are_refused_without_showing_the_key(keys, match):
    with pytest.raises(gw.GatewayError, match=match) as exc:
        gw.api_keys(keys)
    assert "k" * 20 not in str(exc.value)


def test_gateway_addresses_need_every_gateway_hosts_private_address():
    assert gw.gateway_addresses(["g1", "g2"], {"g1": "10.0.0.2", "g2": "10.0.0.1"}) == ["10.0.0.1", "10.0.0.2"]
    with pytest.raises(gw.GatewayError, match="g2 .*llmfleet_private_address"):
        gw.gateway_addresses(["g1", "g2"], {"g1": "10.0.0.2"})
    with pytest.raises(gw.GatewayError, match="not an IP"):
        gw.gateway_addresses(["g1"], {"g1": "gw.example"})


def test_edge_listens_on_the_edge_address_and_proxies_to_loopback():
    edge = gw.edge_model(FLEET["e2"], ["10.0.0.10"])
    assert edge["allow"] == ["10.0.0.10/32"]
    assert [(s["listen"], s["backend"]) for s in edge["servers"]] == [
        ("10.0.0.12:8002", "127.0.0.1:8002"), ("10.0.0.12:8003", "127.0.0.1:8003")]
    assert edge["paths"] == list(gw.ALLOWED_PATHS)
    assert gw.edge_model(plan("gw", ("a-0", 8002, "a", None)), ["10.0.0.10"])["servers"] == []
    # no edge planned (an inventory without llm_gateway, or the gateway on the host): nothing to allow, no error
    nothing = {"servers": [], "allow": [], "metrics_allow": [], "metrics_only": [], "paths": list(gw.ALLOWED_PATHS)}
    assert gw.edge_model(plan("gw", ("a-0", 8002, "a", None)), []) == nothing
    with pytest.raises(gw.GatewayError, match="have an edge .* but there is no gateway address to allow"):
        gw.edge_model(FLEET["e2"], [])
    with pytest.raises(gw.GatewayError, match="not an address"):
        gw.edge_model(FLEET["e2"], ["everyone"])


def test_plans_come_from_facts_first_then_files(tmp_path):
    (tmp_path / "e2.json").write_text(json.dumps(FLEET["e2"]))
    plans = gw.read_fleet_plans(["e1", "e2"], {"e1": FLEET["e1"], "e2": None}, str(tmp_path))
    assert plans == FLEET
    with pytest.raises(gw.GatewayError, match="e3 has no plan.*playbooks/plan.yml"):
        gw.read_fleet_plans(["e3"], {}, str(tmp_path))


def test_the_filters_read_hostvars_and_turn_errors_into_filter_errors(tmp_path):
    from ansible.errors import AnsibleFilterError  # pylint: disable=import-outside-toplevel
    hostvars = {"e1": {"llmfleet_plan": FLEET["e1"]}, "e2": {}, "gw": {"llmfleet_private_address": "10.0.0.10"}}
    (tmp_path / "e2.json").write_text(json.dumps(FLEET["e2"]))
    plans = gateway_filter.gateway_plans(["e1", "e2"], hostvars, str(tmp_path))
    assert gateway_filter.gateway_model(plans, "gw")["routes"].keys() == {"tiny-a", "tiny-b"}
    assert gateway_filter.gateway_addresses(["gw"], hostvars) == ["10.0.0.10"]
    with pytest.raises(AnsibleFilterError, match="16-256"):
        gateway_filter.gateway_api_keys([{"name": "a", "key": "x"}])
    assert set(gateway_filter.FilterModule().filters()) == {"gateway_plans", "gateway_model", "gateway_api_keys",
                                                            "gateway_key_scopes", "gateway_key_limits", "gateway_key_budgets",
                                                            "gateway_key_digests", "gateway_key_summary", "gateway_key_probes",
                                                            "gateway_probe_misses", "gateway_probe_answered", "gateway_addresses",
                                                            "gateway_edge",
                                                            "gateway_client_policy", "gateway_settings"}
    with pytest.raises(AnsibleFilterError, match="which no plan serves"):
        gateway_filter.gateway_key_scopes(gw.api_keys([{"name": "a", "key": "k" * 32, "models": ["nope"]}]),
                                          gateway_filter.gateway_model(plans, "gw"))
    with pytest.raises(AnsibleFilterError, match="gateway_key_max_conns"):
        gateway_filter.gateway_client_policy({"key_max_conns": -1})
    with pytest.raises(AnsibleFilterError, match="a mapping"):
        gateway_filter.gateway_settings(["gateway_listen"])
    assert gateway_filter.gateway_settings({"gateway_rate_limit": "20r/s; x"}) == ["gateway_rate_limit='20r/s; x': a rate such as 20r/s"]


def test_the_reference_inventories_plans_make_a_gateway():
    """v100_pair: the gateway shares the host (loopback); h100: engines behind an edge on a private address."""
    local = plan_of("v100_pair", gateway_on_host=True)
    remote = plan_of("h100", gateway_on_host=False, private_address="10.0.0.5")
    model = gw.gateway_model({local["host"]: local, remote["host"]: remote}, local["host"])
    assert model["errors"] == []
    addresses = [s["address"] for u in model["upstreams"] for s in u["servers"]]
    assert any(a.startswith("127.0.0.1:") for a in addresses)
    assert any(a.startswith("10.0.0.5:") for a in addresses)
    edge = gw.edge_model(remote, ["10.0.0.1"])
    assert len(edge["servers"]) == sum(len(d["instances"]) for d in remote["deployments"])


def _render(tmp_path, model, edge=None, webui=None, tls_dir=None, **values):
    """The role's templates rendered into tmp_path/etc with the test's values (`values` override them, such as the
    listeners or __gateway_client_policy)."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined)
    env.filters["to_json"] = json.dumps
    env.filters["bool"] = lambda v: v if isinstance(v, bool) else str(v).lower() in ("true", "yes", "1")
    env.filters["ansible.builtin.items2dict"] = lambda items, key_name, value_name: {i[key_name]: i[value_name] for i in items}
    root = tmp_path / "etc"
    (root / "llmfleet").mkdir(parents=True)
    ctx = {"ansible_managed": "test", "gateway_worker_processes": 1, "gateway_worker_connections": 64,
           "gateway_extra_http_config": "", "gateway_rate_limit": "20r/s", "gateway_rate_burst": 40, "__gateway_model": model,
           "gateway_listen": ["127.0.0.1:18099"], "gateway_client_max_body_size": "1m", "gateway_proxy_read_timeout": "600s",
           "gateway_proxy_connect_timeout": "5s", "__gateway_engine_key": "E" * 48,
           "__gateway_keys": gw.api_keys([{"name": "t", "key": "k" * 32}]), "__gateway_edge": edge,
           "__gateway_webui": webui, "gateway_webui_client_max_body_size": "25m",
           "__gateway_tls_enabled": bool(tls_dir), "__gateway_tls_dir": str(tls_dir), "gateway_tls_listen": ["127.0.0.1:18443 ssl"],
           "__gateway_client_policy": gw.client_policy(), "gateway_usage_accounting": False}
    ctx.update(values)
    if not edge and "__gateway_scopes" not in ctx:   # what the role works out from the keys and the plans
        ctx["__gateway_scopes"] = gw.key_scopes(ctx["__gateway_keys"], model)
    if not edge and "__gateway_limits" not in ctx:
        ctx["__gateway_limits"] = gw.key_limits(ctx["__gateway_keys"], ctx["__gateway_client_policy"]["key_max_conns"])
    if not edge and "__gateway_digests" not in ctx:
        ctx["__gateway_digests"] = gw.key_digests(ctx["__gateway_keys"])
    if not edge and "__gateway_budgets" not in ctx:
        ctx["__gateway_budgets"] = gw.key_budgets(ctx["__gateway_keys"], ctx["gateway_usage_accounting"],
                                                  ctx.get("gateway_budget_save_interval", 2))
    files = {"nginx.conf.j2": "nginx.conf", "error_pages.inc.j2": "llmfleet/error_pages.inc"}
    files.update({"edge.conf.j2": "llmfleet/edge.conf"} if edge else
                 {"gateway.conf.j2": "llmfleet/gateway.conf", "engine_auth.inc.j2": "llmfleet/engine_auth.inc",
                  "gateway_data.js.j2": "llmfleet/gateway_data.js", "budgets.conf.j2": "llmfleet/budgets.conf"})
    files.update({"webui.conf.j2": "llmfleet/webui.conf"} if webui else {})
    for src, dest in files.items():
        (root / dest).write_text(env.get_template(src).render(**ctx))
    if not edge:
        shutil.copy(pathlib.Path(ROOT) / "roles" / "gateway" / "files" / "gateway.js", root / "llmfleet" / "gateway.js")
    return root


def _nginx_t(root):
    # Debian's nginx 1.22 with njs (the gateway's packages): `make units` installs them on this machine
    assert shutil.which("nginx") and pathlib.Path("/etc/nginx/modules-enabled").exists(), \
        "nginx is not installed here: run `make units` (tests/host-packages.sh nginx libnginx-mod-http-js)"
    conf = (root / "nginx.conf").read_text().replace("pid /run/nginx.pid;", f"pid {root}/nginx.pid;")
    (root / "nginx.conf").write_text(conf)
    return subprocess.run(["nginx", "-t", "-q", "-c", str(root / "nginx.conf")], capture_output=True, text=True, check=False)


def test_the_gateway_config_renders_from_the_reference_plans(tmp_path):
    local = plan_of("v100_pair", gateway_on_host=True)
    remote = plan_of("h100", gateway_on_host=False, private_address="10.0.0.5")
    model = gw.gateway_model({local["host"]: local, remote["host"]: remote}, local["host"])
    root = _render(tmp_path, model)
    conf = (root / "llmfleet" / "gateway.conf").read_text()
    for up in model["upstreams"]:
        assert f"upstream {up['name']} {{" in conf
    # each model's upstream, and per server of a model with more than one the upstream without it (the 503's second try)
    blocks = len(model["upstreams"]) + sum(len(u["servers"]) for u in model["upstreams"] if len(u["servers"]) > 1)
    assert conf.count("least_conn;") == blocks == conf.count("keepalive_timeout 4s;")
    for up in model["upstreams"]:
        for i, server in enumerate(up["servers"] if len(up["servers"]) > 1 else []):
            assert f'"{server["address"]}" {up["name"]}__not{i};' in conf
    assert "non_idempotent" not in conf.replace("(no non_idempotent)", "")
    assert "proxy_buffering off;" in conf and 'proxy_set_header Connection "";' in conf
    assert "client_body_in_single_buffer on;" in conf
    for path in gw.ALLOWED_PATHS:
        assert f"location = {path} {{" in conf
    data = (root / "llmfleet" / "gateway_data.js").read_text()
    assert "k" * 32 not in data
    result = _nginx_t(root)
    assert result.returncode == 0, result.stderr


def test_the_edge_config_renders_and_validates(tmp_path):
    remote = plan_of("h100", gateway_on_host=False, private_address="10.0.0.5")
    root = _render(tmp_path, None, gw.edge_model(remote, ["10.0.0.1"]))
    conf = (root / "llmfleet" / "edge.conf").read_text()
    assert conf.count("deny all;") == conf.count("allow 10.0.0.1/32;") == len(gw.edge_model(remote, ["10.0.0.1"])["servers"])
    assert "listen 10.0.0.5:8002;" in conf
    # the address check comes first (server-level rewrite), so a stranger gets 403 even on a 404 path
    assert "10.0.0.1/32 1;" in conf and conf.count("if ($llmfleet_edge_allowed = 0)") == conf.count("listen ")
    # nginx -t binds the listen addresses (EADDRINUSE is tolerated in test mode, a missing address is not)
    (root / "llmfleet" / "edge.conf").write_text(conf.replace("listen 10.0.0.5:", "listen 127.0.0.1:"))
    result = _nginx_t(root)
    assert result.returncode == 0, result.stderr


def test_the_web_ui_front_renders_beside_the_gateway_and_validates(tmp_path):
    local = plan_of("v100_pair", gateway_on_host=True)
    model = gw.gateway_model({local["host"]: local}, local["host"])
    root = _render(tmp_path, model, webui=webui_filter.webui_front(["127.0.0.1:18098"], 3080))
    conf = (root / "llmfleet" / "webui.conf").read_text()
    assert "listen 127.0.0.1:18098;" in conf and "server 127.0.0.1:3080;" in conf
    # WebSocket (socket.io) upgrades pass; plain requests keep the upstream keepalive (empty Connection)
    assert "proxy_set_header Upgrade $http_upgrade;" in conf and "proxy_set_header Connection $llmfleet_webui_connection;" in conf
    assert "default upgrade;" in conf and 'proxy_http_version 1.1;' in conf and "proxy_buffering off;" in conf
    result = _nginx_t(root)
    assert result.returncode == 0, result.stderr


def test_tls_listeners_use_the_certificate_named_at_the_http_level(tmp_path):
    tls = tmp_path / "tls"
    tls.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:secp384r1", "-nodes", "-days", "2",
                    "-subj", "/CN=gw", "-keyout", str(tls / "gateway.key"), "-out", str(tls / "gateway.crt")],
                   check=True, capture_output=True)
    local = plan_of("v100_pair", gateway_on_host=True)
    model = gw.gateway_model({local["host"]: local}, local["host"])
    root = _render(tmp_path, model, webui=webui_filter.webui_front(["127.0.0.1:18098", "127.0.0.1:18444 ssl"], 3080), tls_dir=tls)
    main = (root / "nginx.conf").read_text()
    assert f"ssl_certificate {tls}/gateway.crt;" in main and "ssl_protocols TLSv1.2 TLSv1.3;" in main
    conf = (root / "llmfleet" / "gateway.conf").read_text()
    assert "listen 127.0.0.1:18099;" in conf and "listen 127.0.0.1:18443 ssl;" in conf
    result = _nginx_t(root)
    assert result.returncode == 0, result.stderr
    # without TLS no certificate is named, and the TLS listener is not there
    plain = _render(tmp_path / "plain", model)
    assert "ssl_certificate" not in (plain / "nginx.conf").read_text()
    assert "18443" not in (plain / "llmfleet" / "gateway.conf").read_text()
