"""Verify the vllm role's docker runtime: two real vLLM (CPU build) containers on this machine.

Issue 35: the containers run in the host's network and the engines listen on its loopback, as a systemd unit's do: no
neighbour container on Docker's default bridge reaches them, at the bridge's gateway address or any other address of this
machine, whatever the path, and an edge (the gateway role's templates, rendered and checked by Ansible, served by this
machine's nginx) passes keyed requests to them. Traffic goes only to this machine's own addresses and to a neighbour
container started here."""

import datetime
import http.client
import http.server
import ipaddress
import json
import os
import pathlib
import shlex
import sys
import threading
import urllib.error
import urllib.request

import pytest

EPHEMERAL = pathlib.Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
INSTANCES = {"tiny-a-0": 18002, "tiny-b-0": 18003}
MODEL = "/var/tmp/llmfleet-lab/models/tiny-qwen3"
IMAGE = "llmfleet-lab/vllm-cpu:lab"
ROOT = pathlib.Path(__file__).resolve().parents[3]
# the paths a neighbour tries on every vLLM port: the ones vLLM's --api-key leaves open (docs/sources.md#vllm-api-surface)
# and the ones it guards
PROBES = [("POST", "/invocations"), ("POST", "/tokenize"), ("POST", "/pooling"), ("GET", "/metrics"), ("GET", "/v1/models"),
          ("GET", "/health")]
# the lab host has no private network: its edge listens on a second loopback address (the gateway role renders it as it
# renders an edge on llmfleet_private_address), and allows this machine's loopback as its gateway address
EDGE_ADDRESS = "127.0.0.2"
EDGE_ALLOW = ["127.0.0.1"]
# PROBES the edge does not pass on, whatever the key (/pooling it does: pooling models are served through it)
EDGE_REFUSED = [("POST", "/invocations"), ("POST", "/tokenize"), ("GET", "/metrics")]
# what a neighbour container runs: every (address, port, method, path) as HTTP, no proxy, 3 s each; prints JSON
NEIGHBOUR = """
import json, sys, urllib.error, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
out = []
for address, port, method, path in json.loads(sys.argv[1]):
    request = urllib.request.Request(f"http://{address}:{port}{path}", data=b"{}" if method == "POST" else None,
                                     method=method, headers={"Content-Type": "application/json"})
    try:
        with opener.open(request, timeout=3) as answer:
            result = answer.status
    except urllib.error.HTTPError as exc:
        result = exc.code
    except Exception as exc:
        result = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
    out.append([address, port, method, path, result])
print(json.dumps(out))
"""
# run in an instance's container (it shares the host's network, so /proc/net is the host's): the TCP listeners of the
# container's own processes, as address:port
LISTENERS = """
import json, os, socket
def table(path, family):
    out = {}
    if not os.path.exists(path):   # no IPv6 in this kernel
        return out
    for line in open(path).read().splitlines()[1:]:
        fields = line.split()
        if fields[3] != "0A":
            continue
        address, port = fields[1].split(":")
        raw = bytes.fromhex(address)
        raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
        out[fields[9]] = f"{socket.inet_ntop(family, raw)}:{int(port, 16)}"
    return out
listening = {**table("/proc/net/tcp", socket.AF_INET), **table("/proc/net/tcp6", socket.AF_INET6)}
mine = set()
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                mine.add(target[8:-1])
    except OSError:
        pass
print(json.dumps(sorted({listening[i] for i in mine if i in listening})))
"""


def api_key():
    return (EPHEMERAL / "secrets" / "vllm_api_key").read_text().strip()


def planned(name):
    plan = json.loads((EPHEMERAL / "plans" / "lab-docker-host.json").read_text())
    return next(i for d in plan["deployments"] for i in d["instances"] if i["name"] == name)


def inspect(host, name):
    return json.loads(host.check_output(f"docker inspect llmfleet-vllm-{name}"))[0]


def post(port, path, body, key=None):
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(), headers)
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def started(container):
    return datetime.datetime.fromisoformat(container["State"]["StartedAt"][:26].rstrip("Z") + "+00:00")


@pytest.mark.parametrize("name", INSTANCES)
def test_container_is_locked_down(host, name):
    c = inspect(host, name)
    hc = c["HostConfig"]
    assert c["State"]["Running"] and c["Config"]["Image"] == "llmfleet-lab/vllm-cpu:lab"
    assert hc["Privileged"] is False and hc["IpcMode"] == "private" and "no-new-privileges" in hc["SecurityOpt"]
    assert hc["ShmSize"] == 1024 ** 3 and hc["RestartPolicy"]["Name"] == "unless-stopped"
    # the plan's CPU set (molecule.yml declares this machine's second core) is the container's
    assert hc["CpusetCpus"] == str(planned(name)["cpuset"]) == "1"
    model = next(m for m in c["Mounts"] if m["Destination"] == MODEL)
    assert model["RW"] is False, "the model must be mounted read-only"
    # the host's network: no address of its own on a Docker network, no published port
    assert hc["NetworkMode"] == "host" and not hc.get("PortBindings")
    assert not any(n.get("IPAddress") for n in (c["NetworkSettings"].get("Networks") or {}).values())
    assert {cap.upper().removeprefix("CAP_") for cap in hc.get("CapDrop") or []} == {"NET_RAW"}
    assert c["Config"]["Labels"]["io.llmfleet.plan-hash"] == planned(name)["plan_hash"]
    assert c["Config"]["StopTimeout"] > 0


@pytest.mark.parametrize("name", INSTANCES)
def test_container_runs_the_plans_arguments(host, name):
    c = inspect(host, name)
    args = planned(name)["args"]
    assert c["Config"]["Entrypoint"] == ["vllm", "serve"]
    cmd = c["Config"]["Cmd"]
    # exactly the plan's arguments; the plan's --host is the bind address, the host's loopback, as a unit's
    assert cmd == args and cmd[cmd.index("--host") + 1] == "127.0.0.1" and cmd[cmd.index("--port") + 1] == str(INSTANCES[name])
    env = dict(e.split("=", 1) for e in c["Config"]["Env"])
    assert env["VLLM_API_KEY"] == api_key() and env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    # the engine's own listeners (torch's Gloo groups, vLLM's address for its processes) pinned to loopback by the plan
    assert env["GLOO_SOCKET_IFNAME"] == "lo" and env["VLLM_HOST_IP"] == "127.0.0.1"
    assert env["VLLM_CACHE_ROOT"].startswith("/var/cache/llmfleet-vllm/")


@pytest.mark.parametrize("name", INSTANCES)
def test_real_completions_with_the_key_only(host, name):
    port, served = INSTANCES[name], name.rsplit("-", 1)[0]
    body = {"model": served, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}
    code, text = post(port, "/v1/chat/completions", body, api_key())
    assert code == 200, text
    assert json.loads(text)["usage"]["completion_tokens"] >= 1
    code, text = post(port, "/v1/chat/completions", dict(body, stream=True), api_key())
    events = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    assert code == 200 and events[-1] == "[DONE]" and len(events) >= 3
    assert post(port, "/v1/chat/completions", body)[0] == 401
    assert post(port, "/v1/completions", {"model": served, "prompt": "x", "max_tokens": 1}, "nope")[0] == 401


def test_startup_to_ready_per_instance(host):
    for name in INSTANCES:
        c = inspect(host, name)
        logs = host.run(f"docker logs -t llmfleet-vllm-{name}")
        line = next(line for line in (logs.stdout + logs.stderr).splitlines() if "Application startup complete" in line)
        ready = datetime.datetime.fromisoformat(line.split()[0][:26].rstrip("Z") + "+00:00")
        seconds = (ready - started(c)).total_seconds()
        print(f"[vllm_docker] {name}: ready {seconds:.1f} s after its start")
        assert 0 < seconds < planned(name)["startup_budget_s"]


def test_a_changed_flag_recreated_only_its_container(host):
    effect = json.loads((EPHEMERAL / "side-effect.json").read_text())
    (a_before, b_before), (a_after, b_after) = effect["before"], effect["after"]
    assert a_after == a_before, "tiny-a-0 was restarted although its plan did not change"
    assert b_after > b_before, "tiny-b-0 was not restarted after its max_num_seqs changed"
    cmd = inspect(host, "tiny-b-0")["Config"]["Cmd"]
    assert cmd[cmd.index("--max-num-seqs") + 1] == "6"
    assert inspect(host, "tiny-a-0")["RestartCount"] == 0


@pytest.mark.parametrize("name", INSTANCES)
def test_every_listener_of_the_engine_is_on_loopback(host, name):
    """The API server and whatever the engine opens for its own processes (Gloo, ZMQ over TCP, a rendezvous store) listen
    on the host's loopback only: nothing of the container faces a network."""
    out = host.check_output(shlex.join(["docker", "exec", f"llmfleet-vllm-{name}", "python3", "-c", LISTENERS]))
    listening = json.loads(out)
    print(f"[vllm_docker] {name}: listeners {listening}")
    assert f"127.0.0.1:{INSTANCES[name]}" in listening, listening
    assert all(ipaddress.ip_address(a.rsplit(":", 1)[0]).is_loopback for a in listening), listening


def host_addresses(host):
    """This machine's IPv4 addresses other than loopback (the default bridge's gateway among them)."""
    out = host.check_output("ip -4 -o addr show")
    return sorted({line.split()[3].split("/")[0] for line in out.splitlines()} - {"127.0.0.1"})


def bridge_gateway(host):
    network = json.loads(host.check_output("docker network inspect bridge"))[0]
    config = network["IPAM"]["Config"]
    gateway = next((c["Gateway"] for c in config if c.get("Gateway") and ipaddress.ip_address(c["Gateway"]).version == 4), None)
    if not gateway:
        # Docker 20.10 (Debian's docker.io) records only the subnet: the gateway is the bridge interface's own address
        bridge = (network.get("Options") or {}).get("com.docker.network.bridge.name", "docker0")
        out = host.check_output(f"ip -4 -o addr show dev {bridge}")
        gateway = next((line.split()[3].split("/")[0] for line in out.splitlines()), None)
    assert gateway, f"Docker's default bridge names no IPv4 gateway: {config}"
    return gateway


class _Control(http.server.BaseHTTPRequestHandler):
    """A listener of the test's own on the bridge's gateway address: what a neighbour reaches there proves its path works."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"control")

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def neighbour(host):
    """What a container on Docker's default bridge gets from every vLLM port at the bridge's gateway address and every
    other address of this machine (and at the instances' own container addresses, which the host's network leaves none
    of), for every path in PROBES; and from a control listener on the gateway address."""
    gateway = bridge_gateway(host)
    control = http.server.ThreadingHTTPServer((gateway, 0), _Control)
    threading.Thread(target=control.serve_forever, daemon=True).start()
    own = sorted({n["IPAddress"] for name in INSTANCES for n in (inspect(host, name)["NetworkSettings"].get("Networks") or {}).values()
                  if n.get("IPAddress")})
    addresses = sorted(set(host_addresses(host)) | {gateway} | set(own))
    targets = [[a, port, method, path] for a in addresses for port in INSTANCES.values() for method, path in PROBES]
    targets.append([gateway, control.server_address[1], "GET", "/control"])
    try:
        run = host.run(shlex.join(["docker", "run", "--rm", "--network", "bridge", "--entrypoint", "python3", IMAGE, "-c", NEIGHBOUR,
                                   json.dumps(targets)]))
    finally:
        control.shutdown()
        control.server_close()
    assert run.rc == 0, run.stderr
    results = json.loads(run.stdout)
    return {"gateway": gateway, "addresses": addresses, "control": results[-1], "vllm": results[:-1]}


def test_no_vllm_port_answers_a_neighbour_container_whatever_the_path(neighbour):
    """From a container on the default bridge, at the bridge's gateway address and every other address of this machine,
    no vLLM port answers: no HTTP status at all, on any path (before issue 35, the container's own bridge address answered
    /invocations, /tokenize, /pooling and /metrics without a key). The control listener on the gateway address answers the
    same neighbour, so the refusals are the engines' loopback bind, not a broken path."""
    assert neighbour["control"][-1] == 200, f"the neighbour did not reach the control listener: {neighbour['control']}"
    print(f"[vllm_docker] neighbour probes: {len(neighbour['vllm'])} (addresses {neighbour['addresses']}, gateway {neighbour['gateway']})")
    answered = [r for r in neighbour["vllm"] if isinstance(r[-1], int)]
    assert not answered, f"vLLM ports answered a neighbour container: {answered}"
    assert {(r[0], r[1]) for r in neighbour["vllm"]} >= {(neighbour["gateway"], p) for p in INSTANCES.values()}


def test_no_vllm_port_answers_at_this_machines_other_addresses(host):
    """On this machine itself: each engine answers on loopback, and at the bridge's gateway address or any other address
    of the machine the port is closed."""
    for port in INSTANCES.values():
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as answer:
            assert answer.status == 200
        for address in sorted(set(host_addresses(host)) | {bridge_gateway(host)}):
            connection = http.client.HTTPConnection(address, port, timeout=3)
            with pytest.raises(OSError):
                connection.request("GET", "/metrics")
                connection.getresponse()
            connection.close()


@pytest.fixture(scope="module")
def edge(tmp_path_factory):
    """This host's edge in front of the two containers: the scenario's plan with each instance's edge on EDGE_ADDRESS at its
    port (where the planner puts llmfleet_private_address), rendered by Ansible from the gateway role's templates (nginx -t
    checked) and served by this machine's nginx."""
    sys.path.insert(0, str(ROOT / "tests"))
    import llmfleet_testing  # pylint: disable=import-outside-toplevel

    plan = json.loads((EPHEMERAL / "plans" / "lab-docker-host.json").read_text())
    for dep in plan["deployments"]:
        for inst in dep["instances"]:
            inst["edge"] = {"address": EDGE_ADDRESS, "port": inst["port"]}
    root = llmfleet_testing.render_edge(str(tmp_path_factory.mktemp("edge")), plan, EDGE_ALLOW)
    llmfleet_testing.start_nginx(root)
    yield EDGE_ADDRESS
    llmfleet_testing.stop_nginx(root)


def edge_request(address, port, method, path, body=None, key=None, source=None):
    connection = http.client.HTTPConnection(address, port, timeout=120, source_address=(source, 0) if source else None)
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    connection.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
    answer = connection.getresponse()
    text = answer.read().decode()
    connection.close()
    return answer.status, text


@pytest.mark.parametrize("name", INSTANCES)
def test_the_edge_passes_keyed_requests_to_the_container(edge, name):
    """Through the edge, as the gateway reaches an engine host: a keyed chat completion is answered by the container's
    engine, one without the key is refused by it (401), the paths the edge does not allow are not passed (404, the key
    notwithstanding), and a client outside the allow list is refused (403)."""
    port, served = INSTANCES[name], name.rsplit("-", 1)[0]
    body = {"model": served, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}
    code, text = edge_request(edge, port, "POST", "/v1/chat/completions", body, api_key())
    assert code == 200, text
    assert json.loads(text)["usage"]["completion_tokens"] >= 1
    assert edge_request(edge, port, "POST", "/v1/chat/completions", body)[0] == 401
    assert edge_request(edge, port, "GET", "/v1/models", key=api_key())[0] == 200
    assert edge_request(edge, port, "GET", "/health")[0] == 200
    for method, path in EDGE_REFUSED:
        assert edge_request(edge, port, method, path, {} if method == "POST" else None, api_key())[0] == 404, path
    assert edge_request(edge, port, "GET", "/health", source="127.0.0.3")[0] == 403
