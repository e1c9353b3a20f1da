"""Verify the fleet lab: the gateway in front of two engine hosts (real vLLM CPU instances), their edges.

Traffic goes only to the lab's own containers (172.30.77.0/24, fixed in molecule.yml) and loopback; every
load is bounded (fixed counts, timeouts)."""

import concurrent.futures
import http.client
import json
import os
import pathlib
import shlex
import socket
import ssl
import subprocess
import threading
import urllib.error
import urllib.request

import pytest
import testinfra

EPHEMERAL = pathlib.Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
INVENTORY = os.environ.get("MOLECULE_INVENTORY_FILE", str(EPHEMERAL / "inventory" / "ansible_inventory.yml"))
HERE = pathlib.Path(__file__).parent
GATEWAY = "http://172.30.77.10"
ADDRESS = {"llmfleet-fleet-engine1": "172.30.77.11", "llmfleet-fleet-engine2": "172.30.77.12", "llmfleet-fleet-gateway": "172.30.77.10"}
LOAD_KEY = "lab-load-key-0123456789abcdef"
BURST_KEY = "lab-burst-key-0123456789abcdef"
SCOPED_KEY = "lab-scoped-key-0123456789abcdef"
ACCESS_LOG = "/var/log/nginx/llmfleet-gateway.access.log"


def host(name):
    return testinfra.get_host(f"ansible://{name}", ansible_inventory=INVENTORY)


def engine_key():
    return (EPHEMERAL / "secrets" / "vllm_api_key").read_text().strip()


def instances():
    """(host, instance) for every planned instance."""
    out = []
    for name in ("llmfleet-fleet-engine1", "llmfleet-fleet-engine2"):
        plan = json.loads((EPHEMERAL / "plans" / f"{name}.json").read_text())
        out += [(name, i) for d in plan["deployments"] for i in d["instances"]]
    return out


def request(path, body=None, key=LOAD_KEY, method=None, raw_body=None, timeout=60):
    data = raw_body if raw_body is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(GATEWAY + path, data=data, method=method or ("POST" if data is not None else "GET"))
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def curl_in(hostname, url, key=None, body=None, path_as_is=True):
    cmd = f"curl -s --max-time 30 -o /dev/null -w '%{{http_code}}' {'--path-as-is ' if path_as_is else ''}{shlex.quote(url)}"
    if key:
        cmd += f" -H {shlex.quote('Authorization: Bearer ' + key)}"
    if body is not None:
        cmd += f" -H 'Content-Type: application/json' -d {shlex.quote(json.dumps(body))}"
    return int(host(hostname).run(cmd).stdout.strip() or 0)


def probe_controller(model):
    python = os.path.join(os.environ["LLMFLEET_VLLM_CPU_VENV"], "bin", "python")
    out = subprocess.run([python, str(HERE / "chat_probe.py"), GATEWAY + "/v1", LOAD_KEY, model],
                         capture_output=True, text=True, timeout=180, check=True)
    return json.loads(out.stdout)


def engine_python(hostname):
    """The Python of the engine venv the host's plan runs (its first deployment's vLLM version)."""
    plan = json.loads((EPHEMERAL / "plans" / f"{hostname}.json").read_text())
    return f"/opt/llmfleet/vllm/{plan['deployments'][0]['engine_version']}/bin/python"


def probe_direct(hostname, port, model):
    code = (HERE / "chat_probe.py").read_text()
    cmd = f"{engine_python(hostname)} -c {shlex.quote(code)} http://127.0.0.1:{port}/v1 {shlex.quote(engine_key())} {model}"
    return json.loads(host(hostname).check_output(cmd))


def error_shape(text):
    error = json.loads(text)["error"]
    assert set(error) >= {"message", "type", "param", "code"}
    return error


def test_vllm_listens_on_loopback_and_the_edge_on_the_private_address():
    for hostname, inst in instances():
        ss = host(hostname).check_output("ss -Hltn")
        port = inst["port"]
        assert f"127.0.0.1:{port} " in ss
        assert f"0.0.0.0:{port} " not in ss and f"*:{port} " not in ss
        assert f"{ADDRESS[hostname]}:{port} " in ss, f"{hostname}: no edge on {ADDRESS[hostname]}:{port}"


def test_each_unit_runs_its_plan_as_the_engine_user_with_the_key_only_in_its_protected_file():
    """The vllm role's systemd runtime, per instance: the plan's exact arguments from the version's venv, as the
    engine's own user; the key only in a 0640 root:llmfleet-vllm environment file; a persistent compile cache."""
    key = engine_key()
    for hostname, inst in instances():
        h, name = host(hostname), inst["name"]
        pid = int(h.check_output(f"systemctl show -p MainPID --value llmfleet-vllm-{name}"))
        argv = [a.decode() for a in h.file(f"/proc/{pid}/cmdline").content.split(b"\0")[:-1]]
        assert argv[:4] == [engine_python(hostname), "-m", "vllm.entrypoints.cli.main", "serve"], argv[:4]
        assert argv[4:] == inst["args"], (hostname, name)
        assert h.check_output(f"ps -o user= -p {pid}") == "llmfleet-vllm"
        env = h.file(f"/etc/llmfleet/vllm/{name}.env")
        assert env.mode == 0o640 and env.user == "root" and env.group == "llmfleet-vllm"
        assert f'VLLM_API_KEY="{key}"' in env.content_string
        assert f'VLLM_CACHE_ROOT="/var/lib/llmfleet/vllm/{name}/vllm"' in env.content_string
        # the engine's own listeners pinned to loopback by the plan (issue 35)
        assert 'GLOO_SOCKET_IFNAME="lo"' in env.content_string and 'VLLM_HOST_IP="127.0.0.1"' in env.content_string
        cache = h.file(f"/var/lib/llmfleet/vllm/{name}")
        assert cache.is_directory and cache.user == "llmfleet-vllm"
        unit = h.file(f"/etc/systemd/system/llmfleet-vllm-{name}.service").content_string
        assert key not in unit and f"EnvironmentFile=/etc/llmfleet/vllm/{name}.env" in unit
        assert "Restart=on-failure" in unit and "TimeoutStopSec=" in unit
        assert "CPUAffinity=" + inst["cpuset"].replace(",", " ") in unit
        # on loopback the engine itself checks the key too
        body = {"model": inst["served_model_name"], "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        url = f"http://127.0.0.1:{inst['port']}/v1/chat/completions"
        assert curl_in(hostname, url, body=body) == 401
        assert curl_in(hostname, url, key="wrong-" + key, body=body) == 401
        assert curl_in(hostname, url, key=key, body=body) == 200


def test_startup_to_ready_per_instance_from_the_journal():
    for hostname, inst in instances():
        unit = f"llmfleet-vllm-{inst['name']}"
        h = host(hostname)
        started = int(h.check_output(f"systemctl show -p ExecMainStartTimestampMonotonic --value {unit}"))
        lines = h.check_output(f"journalctl -u {unit} -o json --output-fields=MESSAGE,_SOURCE_MONOTONIC_TIMESTAMP").splitlines()
        ready = [json.loads(line) for line in lines if "Application startup complete" in line]
        assert ready, f"{hostname}: {unit} never logged 'Application startup complete'"
        seconds = (int(ready[-1]["__MONOTONIC_TIMESTAMP"]) - started) / 1e6
        print(f"[fleet] {hostname} {inst['name']}: ready {seconds:.1f} s after its start (budget {inst['startup_budget_s']} s)")
        assert 0 < seconds < inst["startup_budget_s"]


def test_streamed_and_whole_chat_through_the_gateway_match_the_instance():
    for hostname, inst in instances():
        if inst["served_model_name"] != "tiny-b":
            continue
        direct = probe_direct(hostname, inst["port"], "tiny-b")
        through = probe_controller("tiny-b")
        print(f"[fleet] tiny-b direct: {direct['chunks']} chunks, {direct['raw_events']} SSE events; "
              f"through the gateway: {through['chunks']} chunks, {through['raw_events']} SSE events")
        assert direct["completion_tokens"] == 24 and direct["chunks"] >= 2
        assert through["chunks"] == direct["chunks"]
        assert through["raw_events"] == direct["raw_events"]
        assert through["raw_last"] == direct["raw_last"] == "data: [DONE]"
        assert through["stream_text"] == direct["stream_text"]
        assert through["text"] == direct["text"] and through["completion_tokens"] == direct["completion_tokens"]
        assert through["model"] == "tiny-b"


def test_keys_are_checked_at_the_edge():
    body = {"model": "tiny-a", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    for path, payload in (("/v1/chat/completions", body), ("/v1/models", None)):
        for key in (None, "lab-wrong-key-0123456789abcdef", engine_key()):
            status, text = request(path, payload, key=key)
            assert status == 401, (path, status)
            assert error_shape(text)["code"] == "invalid_api_key"
    status = request("/v1/chat/completions", body)[0]
    assert status == 200


def test_only_the_allow_listed_paths_whatever_the_spelling():
    results = {}
    for name in ("invocations", "tokenize", "pause", "metrics", "scale_elastic_ep"):
        for spelling in (f"/{name}", f"//{name}", f"/v1/../{name}", f"/v1/%2e%2e/{name}", f"/v1/chat/%2E%2E/../{name}",
                         f"/./{name}", f"/v1//..//{name}"):
            code = curl_in("llmfleet-fleet-gateway", f"http://127.0.0.1{spelling}", key=LOAD_KEY, body={"model": "tiny-a"})
            results[spelling] = code
    print(f"[fleet] disallowed paths: {sorted(set(results.values()))} over {len(results)} spellings")
    assert set(results.values()) == {404}, results
    # climbing above the root is refused by nginx itself before any location
    assert curl_in("llmfleet-fleet-gateway", "http://127.0.0.1/%2e%2e/invocations", key=LOAD_KEY) == 400
    status, text = request("/tokenize", {"model": "tiny-a", "prompt": "x"})
    assert status == 404 and error_shape(text)["code"] == "not_found"
    # an allowed path spelled with extra slashes is still the allowed path
    assert curl_in("llmfleet-fleet-gateway", "http://127.0.0.1//v1//models", key=LOAD_KEY) == 200
    assert request("/health", key=None)[0] == 200


def test_unknown_model_is_404_in_openai_shape():
    status, text = request("/v1/chat/completions", {"model": "no-such-model", "messages": [{"role": "user", "content": "x"}]})
    assert status == 404
    assert error_shape(text)["code"] == "model_not_found"


def test_models_lists_both_and_requests_route_by_model():
    status, text = request("/v1/models")
    assert status == 200
    listed = json.loads(text)
    assert listed["object"] == "list"
    assert sorted(m["id"] for m in listed["data"]) == ["tiny-a", "tiny-b"]
    for model in ("tiny-a", "tiny-b"):
        status, text = request("/v1/completions", {"model": model, "prompt": "hello", "max_tokens": 2})
        assert status == 200, text
        assert json.loads(text)["model"] == model
    gateway = host("llmfleet-fleet-gateway")
    last = [json.loads(line) for line in gateway.file(ACCESS_LOG).content_string.splitlines()[-2:]]
    b_instance = next(i for h, i in instances() if i["served_model_name"] == "tiny-b")
    assert last[1]["model"] == "tiny-b" and last[1]["upstream_addr"] == f"{ADDRESS['llmfleet-fleet-engine2']}:{b_instance['port']}"
    assert "lab-load-key" not in gateway.file(ACCESS_LOG).content_string


def test_32_concurrent_requests_spread_over_both_instances_of_tiny_a():
    gateway = host("llmfleet-fleet-gateway")
    before = len(gateway.file(ACCESS_LOG).content_string.splitlines())
    # least_conn counts requests in flight: the split is even only when all 32 overlap. So every request is long
    # (64 tokens, EOS ignored: the engines queue them, 4 at a time) and all 32 start together (a barrier); with
    # short ones a loaded 2-core machine finishes the first before the last is sent, and the faster engine wins.
    body = {"model": "tiny-a", "messages": [{"role": "user", "content": "count to three"}], "max_tokens": 64,
            "ignore_eos": True, "temperature": 0}
    barrier = threading.Barrier(32)

    def one(_i):
        barrier.wait(timeout=60)
        return request("/v1/chat/completions", body, timeout=180)[0]

    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        statuses = list(pool.map(one, range(32)))
    assert statuses == [200] * 32
    lines = [json.loads(line) for line in gateway.file(ACCESS_LOG).content_string.splitlines()[before:]]
    counts = {}
    for line in lines:
        if line["model"] == "tiny-a" and line["status"] == "200":
            counts[line["upstream_addr"]] = counts.get(line["upstream_addr"], 0) + 1
    print(f"[fleet] 32 concurrent tiny-a requests per instance: {counts}")
    assert sum(counts.values()) == 32 and len(counts) == 2
    for count in counts.values():
        assert 12 <= count <= 20, counts  # 16 +- 25 %


def test_a_key_limited_to_one_model_with_the_openai_client():
    """gateway_api_keys[].models (issue 37) on the real engines: the key `scoped` may use tiny-b only. The official
    client sees one model, gets its answer from tiny-b, and raises PermissionDeniedError (403, model_not_allowed) on
    tiny-a, which no engine receives."""
    import openai  # pylint: disable=import-outside-toplevel  # requirements.txt
    client = openai.OpenAI(base_url=GATEWAY + "/v1", api_key=SCOPED_KEY, timeout=120, max_retries=0)
    assert [m.id for m in client.models.list()] == ["tiny-b"]
    answer = client.chat.completions.create(model="tiny-b", messages=[{"role": "user", "content": "Say hi"}], max_tokens=4)
    assert answer.model == "tiny-b" and answer.usage.completion_tokens >= 1
    with pytest.raises(openai.PermissionDeniedError) as refused:
        client.chat.completions.create(model="tiny-a", messages=[{"role": "user", "content": "Say hi"}], max_tokens=4)
    print(f"[fleet] scoped key on tiny-a: HTTP {refused.value.status_code} {json.dumps(refused.value.body)}")
    assert refused.value.status_code == 403 and refused.value.body["code"] == "model_not_allowed"
    gateway = host("llmfleet-fleet-gateway")
    recent = [json.loads(line) for line in gateway.file(ACCESS_LOG).content_string.splitlines()[-20:]]
    refused_lines = [x for x in recent if x["key_name"] == "scoped" and x["status"] == "403"]
    assert len(refused_lines) == 1 and refused_lines[0]["model"] == "" and not refused_lines[0]["upstream_status"], refused_lines


def test_a_burst_over_the_limit_gets_429():
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        results = list(pool.map(lambda _i: request("/v1/models", key=BURST_KEY, timeout=30), range(120)))
    statuses = [s for s, _t in results]
    print(f"[fleet] burst of 120 (rate 20r/s, burst 40): {statuses.count(200)} x 200, {statuses.count(429)} x 429")
    assert set(statuses) <= {200, 429}
    assert statuses.count(429) > 0 and statuses.count(200) >= 40
    assert error_shape(next(t for s, t in results if s == 429))["code"] == "rate_limit_exceeded"


def test_bodies_over_the_limit_get_413_and_big_ones_under_it_reach_the_engine():
    big = json.dumps({"model": "tiny-a", "messages": [{"role": "user", "content": "a " * 150_000}]}).encode()
    status, text = request("/v1/chat/completions", raw_body=big)
    assert status == 413 and error_shape(text)["code"] == "request_too_large"
    under = json.dumps({"model": "tiny-a", "messages": [{"role": "user", "content": "a " * 100_000}], "max_tokens": 1}).encode()
    status, text = request("/v1/chat/completions", raw_body=under)
    # 200 KB kept in memory, parsed by njs, forwarded: vLLM itself refuses the prompt as too long for 512 tokens
    print(f"[fleet] 300 KB body: 413; 200 KB body: {status} from the engine")
    assert status == 400 and error_shape(text)["code"] not in ("invalid_json", "missing_model"), text


def test_edges_answer_only_the_gateway_and_only_the_allow_listed_paths():
    key = engine_key()
    for hostname, inst in instances():
        edge = f"http://{ADDRESS[hostname]}:{inst['port']}"
        assert curl_in("llmfleet-fleet-gateway", edge + "/v1/models", key=key) == 200
        assert curl_in("llmfleet-fleet-gateway", edge + "/health") == 200
        for path in ("/invocations", "/tokenize", "/pause", "/scale_elastic_ep", "/version", "/v1/../tokenize",
                     "/v1/%2e%2e/invocations", "/metrics/", "/metrics/../tokenize"):
            assert curl_in("llmfleet-fleet-gateway", edge + path, key=key, body={"model": "tiny-a"}) == 404, (edge, path)
        # the gateway host is the lab's monitoring host too: it reads vLLM's /metrics (any spelling), no key needed
        for path in ("/metrics", "//metrics", "/v1/../metrics"):
            assert curl_in("llmfleet-fleet-gateway", edge + path) == 200, (edge, path)
        neighbour = "llmfleet-fleet-engine2" if hostname == "llmfleet-fleet-engine1" else "llmfleet-fleet-engine1"
        for path in ("/v1/models", "/health", "/invocations", "/metrics"):
            assert curl_in(neighbour, edge + path, key=key) == 403, (neighbour, edge, path)


def test_a_broken_template_fails_validation_and_leaves_nginx_alone():
    gateway = host("llmfleet-fleet-gateway")
    result = json.loads(gateway.file("/var/tmp/llmfleet-gateway-side-effect.json").content_string)
    print(f"[fleet] broken template: failed at {result['failed_task']!r}; master pid {result['pid_before']} -> {result['pid_after']}")
    assert "Validate the staging copy" in result["failed_task"]
    assert "llmfleet_no_such_directive" in result["message"]
    assert result["before"] == result["after"]
    assert result["pid_before"] == result["pid_after"] == gateway.file("/run/nginx.pid").content_string.strip()
    assert "llmfleet_no_such_directive" not in gateway.file("/etc/nginx/nginx.conf").content_string
    assert gateway.service("nginx").is_running


def test_secret_files_are_private():
    gateway = host("llmfleet-fleet-gateway")
    for path in ("/etc/nginx/llmfleet/engine_auth.inc", "/etc/nginx/llmfleet/gateway_data.js"):
        assert gateway.file(path).mode == 0o600 and gateway.file(path).user == "root"
    assert LOAD_KEY not in gateway.file("/etc/nginx/llmfleet/gateway_data.js").content_string


def test_a_key_removed_from_the_inventory_stops_working_at_the_next_run():
    gateway = host("llmfleet-fleet-gateway")
    result = json.loads(gateway.file("/var/tmp/llmfleet-gateway-removed-key.json").content_string)
    print(f"[fleet] key removed from the inventory: {result['removed']}, kept key: {result['kept']}, put back: {result['back']}")
    assert (result["removed"], result["kept"], result["back"]) == (401, 200, 200)


def test_gateway_overhead_benchmark_runs_and_prints_its_figures():
    """Not a timed test: tests/benchmarks/gateway_overhead.py runs on engine 2 (the direct URL is tiny-b's
    loopback port) and prints its figures; only its completing is asserted."""
    hostname = "llmfleet-fleet-engine2"
    inst = next(i for h, i in instances() if h == hostname and i["served_model_name"] == "tiny-b")
    code = (HERE.parents[2] / "tests" / "benchmarks" / "gateway_overhead.py").read_text()
    cmd = (f"{engine_python(hostname)} -c {shlex.quote(code)} --gateway {GATEWAY}/v1 --gateway-key {LOAD_KEY} "
           f"--direct http://127.0.0.1:{inst['port']}/v1 --direct-key {shlex.quote(engine_key())} --model tiny-b -n 20 --max-tokens 32")
    out = host(hostname).check_output(cmd)
    print(out)
    assert out.count("[bench] direct ") == 1 and out.count("[bench] gateway ") == 1 and "[bench] overhead:" in out


def test_tls_with_the_self_signed_certificate_of_the_gateway_host(tmp_path):
    pem = host("llmfleet-fleet-gateway").file("/etc/nginx/llmfleet-tls/gateway.crt").content_string
    (tmp_path / "ca.pem").write_text(pem)
    context = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))   # verifies the chain and 172.30.77.10 in its SANs
    req = urllib.request.Request("https://172.30.77.10/v1/models", headers={"Authorization": f"Bearer {LOAD_KEY}"})
    with urllib.request.urlopen(req, timeout=30, context=context) as resp:
        assert resp.status == 200 and sorted(m["id"] for m in json.loads(resp.read())["data"]) == ["tiny-a", "tiny-b"]
    try:
        urllib.request.urlopen("https://172.30.77.10/v1/models", timeout=30, context=context)
        status = 200
    except urllib.error.HTTPError as exc:
        status = exc.code
    assert status == 401, "over TLS the key is checked the same"
    with socket.create_connection(("172.30.77.10", 443), timeout=10) as raw, context.wrap_socket(raw, server_hostname="172.30.77.10") as tls:
        assert tls.version() in ("TLSv1.2", "TLSv1.3")


def test_tls_on_plain_http_from_outside_the_allowed_addresses_gets_426_and_no_engine():
    """gateway_tls_plain_allow here: loopback, the three lab hosts and the controller's bridge address (172.30.77.1,
    what every other test sends from). The controller's other addresses (the host's own network, docker0) are outside
    it: from there plain HTTP gets 426 on every path but /health, with a key or without, never the engine's answer;
    the access log names the key that crossed in clear text (the one to replace) and no upstream."""
    addresses = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True).stdout.split()
    sources = [a.split("/")[0] for a in addresses if "/" in a and not a.startswith(("127.", "172.30.77."))]
    assert sources, f"the controller has no address outside loopback and the lab's network to test from: {addresses}"
    gateway = host("llmfleet-fleet-gateway")
    before = len(gateway.file(ACCESS_LOG).content_string.splitlines())
    body = json.dumps({"model": "tiny-a", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    seen = {}
    for path, key, payload in (("/v1/chat/completions", LOAD_KEY, body), ("/v1/chat/completions", None, body),
                               ("/v1/models", LOAD_KEY, None), ("/health", None, None)):
        conn = http.client.HTTPConnection("172.30.77.10", 80, timeout=30, source_address=(sources[0], 0))
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
        conn.request("POST" if payload else "GET", path, body=payload, headers=headers)
        answer = conn.getresponse()
        seen[(path, key is not None)] = (answer.status, answer.getheader("Upgrade"), answer.read().decode())
        conn.close()
    print(f"[fleet] plain HTTP from {sources[0]} with TLS on: " + ", ".join(f"{p}{' +key' if k else ''} {v[0]}" for (p, k), v in seen.items()))
    for (path, _keyed), (status, upgrade, text) in seen.items():
        if path == "/health":
            assert status == 200
            continue
        assert status == 426 and upgrade and error_shape(text)["code"] == "https_required", (path, status, text)
    lines = [json.loads(line) for line in gateway.file(ACCESS_LOG).content_string.splitlines()[before:]]
    refused = [line for line in lines if line["remote_addr"] == sources[0] and line["status"] == "426"]
    assert len(refused) == 3 and all(line["upstream_addr"] == "" for line in refused), refused
    assert sorted(line["key_name"] for line in refused) == ["", "load", "load"], refused


def run_playbook(name, *extra):
    """playbooks/NAME from the controller, as an operator runs it, on this lab's inventory."""
    root = HERE.parents[2]
    # JSON results: messages stay on one line (the YAML format wraps them)
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="false", ANSIBLE_NOCOLOR="1", ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    return subprocess.run(["ansible-playbook", "-i", INVENTORY, str(root / "playbooks" / name), *extra],
                          capture_output=True, text=True, timeout=900, env=env, cwd=str(root), check=False)


def run_verify():
    return run_playbook("verify.yml")


def test_verify_passes_on_the_lab_with_one_table():
    result = run_verify()
    print(result.stdout[-3000:])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    out = result.stdout
    assert "deployment" in out and "listed" in out and "stream" in out
    for name in ("tiny-a-0", "tiny-b-0", "gateway"):
        assert name in out
    assert "5 targets answered every check" in out   # tiny-a on 2 hosts, tiny-b, and the 2 models through the gateway


def test_site_ends_with_where_to_reach_it_and_the_printed_commands_answer_pasted_as_printed():
    """site.yml's last two playbooks, in one run as there, with the output an operator sees (the repository's
    ansible.cfg: the default callback, YAML results): the curl line and the `sh` line are taken from the screen text
    as a person would select them, and run in a shell."""
    root = HERE.parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_CALLBACK")}
    env.update(ANSIBLE_CONFIG=str(root / "ansible.cfg"), ANSIBLE_FORCE_COLOR="false", ANSIBLE_NOCOLOR="1")
    result = subprocess.run(["ansible-playbook", "-i", INVENTORY, str(root / "playbooks" / "verify.yml"),
                             str(root / "playbooks" / "reach.yml")],
                            capture_output=True, text=True, timeout=900, env=env, cwd=str(root), check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    screen = result.stdout[result.stdout.index("TASK [The fleet, its front door and one answer]"):]
    print(screen[:4000])
    lines = [line.strip() for line in screen.splitlines()]
    assert "The fleet: 3 instance(s) of 2 model(s) on 2 host(s)" in lines
    assert "Gateway on llmfleet-fleet-gateway: http://172.30.77.10/v1 (OpenAI-compatible API; every request needs a key)" in lines
    assert LOAD_KEY not in screen   # the key is named, never printed
    assert any(line.startswith("Open WebUI on llmfleet-fleet-gateway: http://172.30.77.10:3000  login admin@lab.example") for line in lines)
    assert any(line.startswith("A (tiny-a, through the gateway): ") for line in lines)
    commands = [line.split("try:  ", 1)[1] for line in lines if line.startswith("try:  curl ")]
    commands += [line.split("or:   ", 1)[1] for line in lines if line.startswith("or:   sh ")]
    assert len(commands) == 2, lines
    for command in commands:
        said = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, LLMFLEET_KEY=LOAD_KEY), cwd="/", check=False)
        print(f"[reach] pasted {command[:60]!r}...: rc {said.returncode}, {said.stdout[:160]!r}")
        assert said.returncode == 0, said.stderr
        assert json.loads(said.stdout)["choices"][0]["message"]["role"] == "assistant", said.stdout


def test_verify_names_a_stopped_instance_and_the_error():
    engine = host("llmfleet-fleet-engine2")
    inst = next(i for h, i in instances() if h == "llmfleet-fleet-engine2" and i["served_model_name"] == "tiny-b")
    unit = f"llmfleet-vllm-{inst['name']}"   # the vllm role's unit name (_serving.unit_name)
    assert engine.service(unit).is_running
    engine.run(f"systemctl stop {unit}")
    try:
        result = run_verify()
        out = result.stdout + result.stderr   # the failed task's message goes to stderr when not on a terminal
        print(out[-2500:])
        assert result.returncode != 0
        assert f"tiny-b / {inst['name']} on llmfleet-fleet-engine2 (instance): listed: no answer ([Errno 111] Connection refused)" in out
        # its only instance is not running: the edge answers 503 (nothing reached it) and no other instance can take it
        assert "tiny-b / gateway on llmfleet-fleet-gateway (gateway): chat: HTTP 503" in out
        # and Prometheus on the gateway host fires its alert: the lab's rule holds 15 s (monitoring_alert_for), scraped
        # and evaluated every 5 s, so it fires within about 25 s of the stop; 90 s allowed
        import test_monitoring   # noqa: PLC0415 (it imports this module)
        firing = test_monitoring.wait_for("VllmInstanceDown firing", lambda: test_monitoring.alert(
            "VllmInstanceDown", f"llmfleet-fleet-engine2/{inst['name']}"), 90)
        print(f"[monitoring] {firing['labels']['alertname']} {firing['state']} since {firing['activeAt']}: "
              f"{firing['annotations'].get('summary')}")
    finally:
        engine.run(f"systemctl start {unit}")
        code = f"for i in $(seq 1 90); do curl -sf -o /dev/null http://127.0.0.1:{inst['port']}/health && exit 0; sleep 2; done; exit 1"
        assert engine.run(code).rc == 0, f"{unit} did not come back"
    # back up: the alert is gone (resolved at the first evaluation that scrapes it up)
    import test_monitoring   # noqa: PLC0415
    test_monitoring.wait_for("VllmInstanceDown resolved", lambda: test_monitoring.alert(
        "VllmInstanceDown", f"llmfleet-fleet-engine2/{inst['name']}", state=None) is None, 60)


# bench.yml: tiny-b only (the gateway and its one instance), two steps, short requests - the sweep, the report
# and the gate are what is tested here, not this machine's speed.
BENCH_DIR = EPHEMERAL / "bench"
BENCH_ARGS = ("-e", "bench_concurrency=1,4", "-e", '{"bench_deployments": ["tiny-b"]}', "-e", "bench_input_len=64",
              "-e", "bench_output_len=32", "-e", "bench_warmups=1", "-e", f"bench_dir={BENCH_DIR}")
BENCH_OUTPUT = HERE.parents[2] / "tests" / "output" / "bench"


def run_bench(run_id, *extra):
    result = run_playbook("bench.yml", *BENCH_ARGS, "-e", f"bench_run_id={run_id}", *extra)
    print(result.stdout[-6000:])
    return result


def test_bench_writes_the_report_the_charts_and_the_baseline():
    result = run_bench("lab-1")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    out = BENCH_DIR / "lab-1"
    assert sorted(p.name for p in out.iterdir()) == ["bench.json", "bench.md", "tiny-b.png"]
    run = json.loads((out / "bench.json").read_text())
    rows = run["deployments"]["tiny-b"]["rows"]
    assert [(r["target"], r["concurrency"]) for r in rows] == [
        ("gateway", 1), ("gateway", 4), ("llmfleet-fleet-engine2/tiny-b-0", 1), ("llmfleet-fleet-engine2/tiny-b-0", 4)]
    for r in rows:
        m = r["metrics"]
        assert m["completed"] == r["num_prompts"] and m["failed"] == 0, r
        assert min(m["output_throughput"], m["request_throughput"], m["median_ttft_ms"], m["median_tpot_ms"], m["p99_e2el_ms"]) > 0, r
    plan = run["deployments"]["tiny-b"]["plan"]
    version = os.environ.get("LLMFLEET_FLEET_ENGINE_VERSION", "0.31.0")    # molecule.yml's, before test_rolling.py
    assert plan[0]["host"] == "llmfleet-fleet-engine2" and plan[0]["engine_version"] == version and "--max-num-seqs" in plan[0]["args"]
    assert (out / "tiny-b.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((BENCH_DIR / "baselines" / "tiny-b.json").read_text())["run"] == "lab-1"
    assert "step 4/4: tiny-b · llmfleet-fleet-engine2/tiny-b-0 · concurrency 4" in result.stdout, "progress: each step numbered"
    assert "tiny-b · gateway · concurrency 1: 8/8 done, 0 failed" in result.stdout, "each step's numbers are printed"
    BENCH_OUTPUT.mkdir(parents=True, exist_ok=True)
    for name in ("bench.md", "tiny-b.png"):
        (BENCH_OUTPUT / f"lab-1-{name}").write_bytes((out / name).read_bytes())


def test_a_second_bench_run_prints_its_ratios_and_sits_beside_the_first():
    result = run_bench("lab-2", "-e", "compare=lab-1")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "tiny-b · gateway · concurrency 4: output tok/s ×" in result.stdout and "of run lab-1" in result.stdout
    report = (BENCH_DIR / "lab-2" / "bench.md").read_text()
    assert "Against the baseline, run lab-1" in report and "Side by side with run lab-1" in report
    assert json.loads((BENCH_DIR / "baselines" / "tiny-b.json").read_text())["run"] == "lab-2"
    BENCH_OUTPUT.mkdir(parents=True, exist_ok=True)
    for name in ("bench.md", "tiny-b.png"):
        (BENCH_OUTPUT / f"lab-2-{name}").write_bytes((BENCH_DIR / "lab-2" / name).read_bytes())


def test_the_baseline_gate_fails_a_run_made_slower_on_purpose():
    """Engine 2 (the container acting as that machine) is limited to a quarter of a CPU for one run: the same
    step is then several times slower than the baseline (x0.09 output tok/s when it was written), and the gate
    must say so."""
    subprocess.run(["docker", "update", "--cpus", "0.25", "llmfleet-fleet-engine2"], check=True, capture_output=True)
    try:
        # 4 requests, not 16: at a quarter of a CPU each one is slow, and one step is all the gate needs
        result = run_bench("lab-3", "-e", "bench_concurrency=4", "-e", '{"bench_targets": ["instance"]}',
                           "-e", "bench_prompts_per_step=1", "-e", "bench_min_prompts=4", "-e", "bench_warmups=0",
                           "-e", "bench_gate=true", "-e", "bench_tolerance=0.3")
    finally:
        # `--cpus 0` leaves the quota in place (cgroup v1 here): give the container every CPU of this machine again
        cpus = os.cpu_count() or 1
        subprocess.run(["docker", "update", "--cpus", str(cpus), "llmfleet-fleet-engine2"], check=True, capture_output=True)
        nano = subprocess.run(["docker", "inspect", "-f", "{{.HostConfig.NanoCpus}}", "llmfleet-fleet-engine2"],
                              check=True, capture_output=True, text=True).stdout.strip()
        assert int(nano) == cpus * 10 ** 9, f"engine 2 still limited: NanoCpus {nano}"
    out = result.stdout + result.stderr
    assert result.returncode != 0, out[-3000:]
    assert "tiny-b · llmfleet-fleet-engine2/tiny-b-0 · concurrency 4: output_throughput is ×0." in out
    assert "of baseline lab-2 (tolerance 30%)" in out
    assert json.loads((BENCH_DIR / "baselines" / "tiny-b.json").read_text())["run"] == "lab-2", "a slower run is no baseline"
