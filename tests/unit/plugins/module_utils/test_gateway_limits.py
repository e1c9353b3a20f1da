"""The gateway's front door on a real nginx (Debian's nginx 1.22 + njs 0.7.9, installed by `make units`), on the tree the
role's own templates render: a request without a valid key is answered 401 from its headers, before any body is read
(timed, counted in bytes sent, and the worker's memory across 200 such connections); requests in flight are limited per
key and per client address (429 in OpenAI's error shape); with TLS on, the plain-HTTP listener answers 426 to every
client outside gateway_tls_plain_allow, never a proxied answer. Plus gateway_client_policy's checks, and `nginx -t` on
every combination of the new inputs.

The engine behind the gateway is a second server of the same nginx (gateway_extra_http_config, the role's own input),
answering `{"object":"engine",...}` on any path: it stands in for vLLM, whose only part here is to show whether a
request was proxied. A request is held "in flight" the way a slow client holds it: its headers and part of its body
are sent, so njs (js_content) waits for the rest with the request counted by limit_conn."""

from __future__ import annotations

import http.client
import json
import pathlib
import select
import socket
import ssl
import subprocess
import time

import pytest
import yaml

from ansible_collections.llmfleet.serving.plugins.filter import gateway as gateway_filter
from ansible_collections.llmfleet.serving.plugins.module_utils import _gateway as gw

from llmfleet_testing import ROOT, free_port, start_nginx, stop_nginx
from test_gateway import _nginx_t, _render

KEY_A, KEY_B = "a" * 32, "b" * 32
KEYS = [{"name": "alice", "key": KEY_A}, {"name": "bob", "key": KEY_B}]
MIB = 1024 * 1024
CHAT = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}).encode()


def certificate(where):
    """A self-signed pair (gateway.crt, gateway.key) in where/tls, as the role's self_signed mode leaves it."""
    tls_dir = where / "tls"
    tls_dir.mkdir(parents=True)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                    "-subj", "/CN=gw", "-keyout", str(tls_dir / "gateway.key"), "-out", str(tls_dir / "gateway.crt")],
                   check=True, capture_output=True)
    return tls_dir


def serve(tmp_path, policy=None, tls=False, **values):
    """Render the gateway (one model `tiny` on the engine stand-in) with `policy` (gateway_client_policy's input),
    check it with nginx -t and start it. Returns the ports, the tree and the TLS context; stop with stop_nginx."""
    engine, plain, secure = free_port(), free_port(), free_port()
    plans = {"gw": {"host": "gw", "deployments": [{"name": "tiny", "instances": [
        {"name": "tiny-0", "served_model_name": "tiny", "port": engine, "bind_address": "127.0.0.1"}]}]}}
    tls_dir = None
    if tls:
        tls_dir = certificate(tmp_path)
    stand_in = f"""server {{ listen 127.0.0.1:{engine}; location / {{ return 200 '{{"object":"engine","uri":"$uri"}}'; }} }}"""
    root = _render(tmp_path, gw.gateway_model(plans, "gw"), tls_dir=tls_dir, gateway_listen=[f"127.0.0.1:{plain}"],
                   gateway_tls_listen=[f"127.0.0.1:{secure} ssl"], **dict({"__gateway_keys": gw.api_keys(KEYS)}, **values),
                   __gateway_client_policy=gw.client_policy(policy), gateway_extra_http_config=stand_in,
                   gateway_worker_connections=1024)
    checked = _nginx_t(root)       # also moves the pid file into the tree
    assert checked.returncode == 0, checked.stderr
    start_nginx(str(root))
    context = ssl.create_default_context(cafile=str(tls_dir / "gateway.crt")) if tls else None
    if context:
        context.check_hostname = False
    return {"root": root, "plain": plain, "secure": secure, "engine": engine, "context": context}


@pytest.fixture()
def gateway(tmp_path):
    started = []

    def start(policy=None, tls=False, **values):
        server = serve(tmp_path / f"gw{len(started)}", policy, tls, **values)
        started.append(server)
        return server
    yield start
    for server in started:
        stop_nginx(str(server["root"]))


def connect(port, source="127.0.0.1", context=None):
    sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    return context.wrap_socket(sock) if context else sock


def send_head(sock, path, key=None, length=0, method="POST", start=b""):
    """A request's headers (Content-Length `length`) and the first bytes of its body."""
    head = f"{method} {path} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n"
    head += f"Authorization: Bearer {key}\r\n" if key else ""
    sock.sendall(head.encode() + b"\r\n" + start)


def answer(sock):
    """(status, headers, JSON body) of the response on sock."""
    response = http.client.HTTPResponse(sock)
    response.begin()
    return response.status, dict(response.getheaders()), json.loads(response.read() or b"{}")


def request(port, path, key=None, body=CHAT, method="POST", source="127.0.0.1", context=None):
    with connect(port, source, context) as sock:
        send_head(sock, path, key, len(body), method, body)
        return answer(sock)


def hold(port, key, source="127.0.0.1"):
    """A request in flight: valid headers and 16 of its 4096 body bytes; njs waits for the rest."""
    sock = connect(port, source)
    send_head(sock, "/v1/chat/completions", key, 4096, start=b'{"model":"tiny",')
    return sock


def until_refused(port, key, source="127.0.0.1", within=5.0):
    """A complete request, again until it gets 429 or `within` seconds pass (the held requests are counted once nginx
    has read their headers, which a loaded machine may take a moment to do): the last answer."""
    deadline = time.monotonic() + within
    while True:
        status, headers, body = request(port, "/v1/chat/completions", key, source=source)
        if status == 429 or time.monotonic() > deadline:
            return status, headers, body
        time.sleep(0.1)


def worker_rss_kib(root):
    """VmRSS of the test nginx's (single) worker. The port accepts connections as soon as the master listens, before
    it has forked its worker: wait up to 10 s for the worker."""
    master = pathlib.Path(root, "nginx.pid").read_text().strip()
    deadline = time.monotonic() + 10
    while not (workers := subprocess.run(["pgrep", "-P", master], capture_output=True, text=True,
                                         check=False).stdout.split()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(workers) == 1, f"nginx master {master} has workers {workers} 10 s after start, expected one"
    [worker] = workers
    status = pathlib.Path(f"/proc/{worker}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))


@pytest.mark.parametrize("key", [None, "not-" + KEY_A], ids=["missing", "wrong"])
def test_a_missing_or_wrong_key_is_answered_401_before_the_body_is_sent(gateway, key):
    """Headers announcing a 10 MiB body: the 401 is there before one body byte is sent (today's js_content read all
    10 MiB first, then answered 401)."""
    server = gateway({}, gateway_client_max_body_size="16m")
    total, chunk = 10 * MIB, b"x" * (64 * 1024)
    with connect(server["plain"]) as sock:
        began = time.monotonic()
        send_head(sock, "/v1/chat/completions", key, total)
        sent = 0
        # give nginx 2 s to answer from the headers alone; a gateway that reads the body first gets it all
        ready, _w, _x = select.select([sock], [], [], 2.0)
        while not ready and sent < total:
            sock.sendall(chunk)
            sent += len(chunk)
            ready, _w, _x = select.select([sock], [], [], 0)
        status, _headers, body = answer(sock)
        took = time.monotonic() - began
    print(f"\n{'no key' if key is None else 'wrong key'}, 10 MiB announced: {status} after {took * 1000:.0f} ms, "
          f"{sent // 1024} KiB of {total // 1024} KiB sent")
    assert status == 401 and body["error"]["code"] == "invalid_api_key", (status, body)
    assert sent == 0 and took < 1.5, f"answered only after {sent} body bytes ({took:.2f} s): the body was read before the key check"


def test_the_key_is_checked_before_the_body_size(gateway):
    """An announced body over gateway_client_max_body_size: 401 without a valid key (nothing about the gateway's limits
    is told to a stranger), 413 with one; neither waits for the body."""
    server = gateway({})
    statuses = {}
    for key in (None, KEY_A):
        with connect(server["plain"]) as sock:
            send_head(sock, "/v1/chat/completions", key, 2 * MIB)
            sock.settimeout(2)
            statuses[key is not None] = answer(sock)[0]
    assert statuses == {False: 401, True: 413}, statuses


def test_200_wrong_key_connections_from_one_address_hold_no_body_memory(gateway):
    """200 connections with a wrong key, each announcing 10 MiB and sending 1 MiB of it, all open at once: each is
    answered 401 at once, and the worker grows by ~40 KiB per connection (measured: +8 MiB; the gateway that read
    bodies before the key check answered none of them and grew by 60 MiB, +160 MiB for 20 x 8 MiB)."""
    server = gateway({}, gateway_client_max_body_size="16m")
    part = b"x" * MIB
    before = worker_rss_kib(server["root"])
    socks, statuses = [], []
    try:
        for _i in range(200):
            sock = connect(server["plain"])
            socks.append(sock)
            send_head(sock, "/v1/chat/completions", "wrong-" + KEY_A, 10 * MIB, start=part)
        # every answer within 3 s of the last send (a gateway that waits for the bodies answers none)
        waiting, deadline = set(socks), time.monotonic() + 3
        while waiting and time.monotonic() < deadline:
            ready, _w, _x = select.select(list(waiting), [], [], 0.1)
            waiting -= set(ready)
        held = worker_rss_kib(server["root"])
        statuses = [None if sock in waiting else answer(sock)[0] for sock in socks]
    finally:
        for sock in socks:
            sock.close()
    grown = held - before
    print(f"\n200 wrong-key connections x 1 MiB sent (200 MiB): worker RSS {before // 1024} MiB -> {held // 1024} MiB "
          f"(+{grown / 1024:.1f} MiB, {grown / 200:.0f} KiB per connection); answers: "
          f"{statuses.count(401)} x 401, {len(statuses) - statuses.count(401)} other")
    assert statuses == [401] * 200
    assert grown < 24 * 1024, f"the worker grew by {grown} KiB for 200 refused connections: it kept their bodies"


def test_a_key_gets_429_above_its_requests_in_flight_and_others_pass(gateway):
    server = gateway({"key_max_conns": 2, "address_max_conns": 0})
    port = server["plain"]
    held = [hold(port, KEY_A), hold(port, KEY_A)]
    try:
        status, _headers, body = until_refused(port, KEY_A)
        other = request(port, "/v1/chat/completions", KEY_B)
        models = request(port, "/v1/models", KEY_A, body=b"", method="GET")[0]
        print(f"\nkey limit 2, 2 held: alice's third {status}, bob's {other[0]}, alice's /v1/models {models}")
        assert status == 429 and body["error"]["code"] == "rate_limit_exceeded" and "in flight" in body["error"]["message"], body
        # the other key is not limited, and still routed by the body's model to the engine
        assert other[0] == 200 and other[2] == {"object": "engine", "uri": "/v1/chat/completions"}, other
        assert models == 429
        held.pop().close()
        deadline = time.monotonic() + 5
        while request(port, "/v1/chat/completions", KEY_A)[0] == 429 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert request(port, "/v1/chat/completions", KEY_A)[0] == 200, "a finished request frees its slot"
    finally:
        for sock in held:
            sock.close()


def test_an_address_gets_429_above_its_requests_in_flight_whatever_the_keys(gateway):
    server = gateway({"key_max_conns": 2, "address_max_conns": 3})
    port = server["plain"]
    held = [hold(port, KEY_A), hold(port, KEY_A), hold(port, KEY_B)]
    try:
        # bob has one request in flight of his 2, but 127.0.0.1 has 3 of its 3
        status, _headers, body = until_refused(port, KEY_B)
        elsewhere = request(port, "/v1/chat/completions", KEY_B, source="127.0.0.2")
        print(f"\naddress limit 3, 3 held from 127.0.0.1: bob's next from there {status}, from 127.0.0.2 {elsewhere[0]}")
        assert status == 429 and "in flight" in body["error"]["message"], body
        assert elsewhere[0] == 200 and elsewhere[2]["object"] == "engine", elsewhere
    finally:
        for sock in held:
            sock.close()


def test_tls_mode_plain_http_never_serves_the_api_outside_its_allowed_addresses(gateway):
    server = gateway({"plain_allow": ["127.0.0.2"]}, tls=True)
    plain, secure = server["plain"], server["secure"]
    seen = {}
    for name, args in {"chat with a key": ("/v1/chat/completions", KEY_A), "chat without a key": ("/v1/chat/completions", None),
                       "embeddings with a key": ("/v1/embeddings", KEY_A), "another path": ("/tokenize", KEY_A)}.items():
        status, headers, body = request(plain, *args)
        seen[name] = status
        assert status == 426 and body["error"]["code"] == "https_required" and "TLS" in headers.get("Upgrade", ""), (name, status, body)
        assert body.get("object") != "engine"
    status, _headers, body = request(plain, "/v1/models", KEY_A, body=b"", method="GET")
    seen["models with a key"] = status
    assert status == 426, body
    health = request(plain, "/health", body=b"", method="GET")[0]
    allowed = request(plain, "/v1/chat/completions", KEY_A, source="127.0.0.2")
    over_tls = request(secure, "/v1/chat/completions", KEY_A, context=server["context"])
    over_tls_no_key = request(secure, "/v1/chat/completions", None, context=server["context"])[0]
    print(f"\nTLS on, plain from 127.0.0.1: {seen}; /health {health}; plain from allowed 127.0.0.2: {allowed[0]}; "
          f"TLS: {over_tls[0]}, TLS without a key: {over_tls_no_key}")
    assert health == 200
    assert allowed[0] == 200 and allowed[2]["object"] == "engine"
    assert over_tls[0] == 200 and over_tls[2]["object"] == "engine" and over_tls_no_key == 401


@pytest.mark.parametrize("policy", [{"key_max_conns": 0, "address_max_conns": 0}, {"key_max_conns": 1, "address_max_conns": 0},
                                    {"key_max_conns": 0, "address_max_conns": 7}, {"plain_allow": []},
                                    {"plain_allow": ["10.0.0.0/8", "fd00::/8", "192.0.2.7"]}])
@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_every_policy_renders_a_tree_nginx_accepts(tmp_path, policy, tls):
    tls_dir = certificate(tmp_path) if tls else None
    checked = gw.client_policy(policy)
    plans = {"gw": {"host": "gw", "deployments": [{"name": "m", "instances": [{"name": "m-0", "port": 8002}]}]}}
    root = _render(tmp_path, gw.gateway_model(plans, "gw"), tls_dir=tls_dir, __gateway_client_policy=checked)
    conf = (root / "llmfleet" / "gateway.conf").read_text()
    assert conf.count("limit_conn llmfleet_key_conns") == (1 if checked["key_max_conns"] else 0)
    assert conf.count("limit_conn llmfleet_address_conns") == (1 if checked["address_max_conns"] else 0)
    assert ("if ($llmfleet_plain_refused)" in conf) == tls
    # the key check comes before any location: a server-level `if`, ahead of the first location
    assert conf.index("if ($llmfleet_key_missing)") < conf.index("location = /v1/chat/completions")
    result = _nginx_t(root)
    assert result.returncode == 0, result.stderr


def test_the_client_policy_is_checked_and_normalized():
    assert gw.client_policy() == {"key_max_conns": 128, "address_max_conns": 256, "plain_allow": ["127.0.0.0/8", "::1/128"]}
    checked = gw.client_policy({"key_max_conns": "8", "address_max_conns": 0, "plain_allow": ["::1", "10.1.2.3", "10.0.0.0/8 "]})
    assert checked == {"key_max_conns": 8, "address_max_conns": 0, "plain_allow": ["10.0.0.0/8", "10.1.2.3/32", "::1/128"]}
    assert gateway_filter.FilterModule().filters()["gateway_client_policy"]({"plain_allow": []})["plain_allow"] == []


@pytest.mark.parametrize("options, named", [({"key_max_conns": -1}, "gateway_key_max_conns=-1"),
                                            ({"address_max_conns": "lots"}, "gateway_address_max_conns='lots'"),
                                            ({"key_max_conns": True}, "gateway_key_max_conns=True"),
                                            ({"plain_allow": "127.0.0.1"}, "must be a list"),
                                            ({"plain_allow": ["10.0.0.300"]}, "'10.0.0.300' is not an address"),
                                            ({"max_conns": 3}, "unknown client policy options ['max_conns']")])
def test_a_bad_client_policy_is_refused_naming_the_value(options, named):
    with pytest.raises(gw.GatewayError) as refused:
        gw.client_policy(options)
    assert named in str(refused.value)


def test_the_roles_defaults_are_the_policys_defaults():
    """defaults/main.yml and meta/argument_specs.yml say what client_policy assumes when an input is missing."""
    role = pathlib.Path(ROOT) / "roles" / "gateway"
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text())
    spec = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    for name, var in (("key_max_conns", "gateway_key_max_conns"), ("address_max_conns", "gateway_address_max_conns")):
        assert defaults[var] == spec[var]["default"] == gw.CLIENT_POLICY[name], var
    assert defaults["gateway_tls_plain_allow"] == spec["gateway_tls_plain_allow"]["default"]
    assert "'127.0.0.0/8', '::1'" in defaults["gateway_tls_plain_allow"]


# --- a key's own limits (gateway_api_keys[].rate, .burst, .max_conns; issue 37) ---

def own_limits(alice):
    return gw.api_keys([dict(KEYS[0], **alice), KEYS[1]])


def test_a_key_with_its_own_in_flight_limit_gets_429_at_it_while_the_others_keep_the_fleets(gateway):
    """alice may hold 1 request in flight, bob the fleet-wide 3."""
    server = gateway({"key_max_conns": 3, "address_max_conns": 0}, __gateway_keys=own_limits({"max_conns": 1}))
    port = server["plain"]
    held = [hold(port, KEY_A)]
    try:
        status, _headers, body = until_refused(port, KEY_A)
        assert status == 429 and "in flight" in body["error"]["message"], body
        held += [hold(port, KEY_B), hold(port, KEY_B)]
        time.sleep(0.3)
        assert request(port, "/v1/chat/completions", KEY_B)[0] == 200, "bob's third of 3 passes"
        print(f"\nalice (max_conns 1) with 1 held: {status}; bob (fleet's 3) with 2 held: 200")
    finally:
        for sock in held:
            sock.close()


def test_a_key_with_no_in_flight_limit_is_left_out_of_the_fleets(gateway):
    server = gateway({"key_max_conns": 1, "address_max_conns": 0}, __gateway_keys=own_limits({"max_conns": 0}))
    port = server["plain"]
    held = [hold(port, KEY_A), hold(port, KEY_A)]
    try:
        time.sleep(0.3)
        assert request(port, "/v1/chat/completions", KEY_A)[0] == 200, "alice has no limit"
        held.append(hold(port, KEY_B))
        assert until_refused(port, KEY_B)[0] == 429, "bob has the fleet's 1"
    finally:
        for sock in held:
            sock.close()


def test_a_key_with_its_own_rate_gets_429_past_it_and_the_others_keep_the_fleets(gateway):
    """alice: 1 request a minute and a burst of 2 (3 at once, then 429); bob the fleet-wide 20r/s, burst 40."""
    server = gateway({"key_max_conns": 0, "address_max_conns": 0}, __gateway_keys=own_limits({"rate": "1r/m", "burst": 2}))
    port = server["plain"]
    alice = [request(port, "/v1/chat/completions", KEY_A)[0] for _n in range(5)]
    bob = [request(port, "/v1/chat/completions", KEY_B)[0] for _n in range(5)]
    print(f"\nalice (1r/m, burst 2): {alice}; bob (fleet's 20r/s, burst 40): {bob}")
    assert alice == [200, 200, 200, 429, 429] and bob == [200] * 5
    status, _headers, body = request(port, "/v1/chat/completions", KEY_A)
    assert status == 429 and body["error"]["code"] == "rate_limit_exceeded" and "Rate limit" in body["error"]["message"]


@pytest.mark.parametrize("alice, match", [
    ({"rate": "5/s"}, r"\(alice\)\.rate='5/s': give requests per second or minute"),
    ({"rate": "5r/s", "burst": -1}, r"\(alice\)\.burst=-1: give a whole number"),
    ({"max_conns": "many"}, r"\(alice\)\.max_conns='many': give a whole number"),
    ({"burst": 3}, r"\(alice\) has burst without rate"),
    ({"quota": 5}, r"may have budgets, burst, max_conns, models, previous_key, previous_until, rate; it has"),
])
def test_a_bad_own_limit_is_named_without_the_key(alice, match):
    with pytest.raises(gw.GatewayError, match=match) as exc:
        own_limits(alice)
    assert KEY_A not in str(exc.value)


@pytest.mark.parametrize("name", ["default", "include", "hostnames", "volatile"])
def test_a_key_named_as_one_of_maps_own_words_keeps_its_own_limit(gateway, name):
    """nginx's map reads a bare `default` or `include` as its own parameter: the maps read "k:<name>"."""
    keys = gw.api_keys([{"name": name, "key": KEY_A, "rate": "1r/m"}, KEYS[1]])
    server = gateway({"key_max_conns": 0, "address_max_conns": 0}, __gateway_keys=keys)
    port = server["plain"]
    assert [request(port, "/v1/chat/completions", KEY_A)[0] for _n in range(2)] == [200, 429]
    assert [request(port, "/v1/chat/completions", KEY_B)[0] for _n in range(3)] == [200] * 3


def test_own_limits_become_one_zone_per_distinct_value():
    keys = gw.api_keys([{"name": "a", "key": "a" * 32, "rate": "5r/s", "burst": 10, "max_conns": 4},
                        {"name": "b", "key": "b" * 32, "rate": "5r/s", "burst": 10, "max_conns": 128},
                        {"name": "c", "key": "c" * 32, "rate": "1r/m"}, {"name": "d", "key": "d" * 32}])
    limits = gw.key_limits(keys, 128)
    assert [(z["rate"], z["burst"], z["keys"]) for z in limits["rate_zones"]] == [("1r/m", 0, ["c"]), ("5r/s", 10, ["a", "b"])]
    # b's 128 is the fleet's: it stays in the fleet's zone
    assert [(z["max"], z["keys"]) for z in limits["conn_zones"]] == [(4, ["a"])]
    assert limits["own_rate"] == ["a", "b", "c"] and limits["own_conns"] == ["a"]
