#!/usr/bin/python
# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_ready
short_description: Health gate of one vLLM instance - /health, a real request with the key, warm-up
version_added: 0.1.0
description:
  - Waits until the instance answers C(/health) with 200 B(and) a one-token completion sent with the API key,
    then checks that the same request without the key is refused (401), then sends warm-up requests (the
    first requests after a start compile kernels and capture graphs).
  - A pooling model (its plan entry says C(runner=pooling)) answers no completions; it is probed with its own
    endpoint instead, the plan's C(health_probe) (C(/v1/embeddings), C(/score) or C(/classify)), and warmed up with it.
  - Stops waiting as soon as the unit or container is no longer running, or when the startup budget is spent.
    The failure message carries the instance's last log lines and the likely cause read from them.
  - Reports the time from the instance's own start (systemd or Docker start time) to ready. Never changes anything.
author:
  - llmfleet.serving developers (!UNKNOWN)
options:
  name:
    description: The systemd unit (without C(.service)) or container name of the instance.
    type: str
    required: true
  runtime:
    description: How the instance runs; decides how its state and log are read.
    type: str
    choices: [docker, systemd]
    required: true
  url:
    description: Base URL of the instance, for example C(http://127.0.0.1:8002).
    type: str
    required: true
  model:
    description: The served model name to send requests to.
    type: str
    required: true
  api_key:
    description: The key the instance requires (C(VLLM_API_KEY)), the one the gateway sends.
    type: str
    required: true
  also_accepted_keys:
    description:
      - More keys the instance must accept, during a key rotation (the key the gateway switches to next, or the one it
        sent before); each is tried with C(GET /v1/models) once the gate passed, and a refusal fails the gate.
    type: list
    elements: str
    default: []
  timeout:
    description: Startup budget in seconds, counted from the instance's start.
    type: int
    default: 600
  interval:
    description: Seconds between probes.
    type: float
    default: 2
  warmup_requests:
    description: Chat completions sent after the gate passes (C(max_tokens=32) each); for a pooling model, its probe request.
    type: int
    default: 3
  log_lines:
    description: How many of the instance's last log lines a failure shows (causes are looked for in the last 400).
    type: int
    default: 40
  instance:
    description:
      - The instance's plan entry; its memory numbers make the failure diagnosis concrete.
      - Its C(runner) and C(health_probe) decide the request of a pooling model.
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
    description: In check mode nothing is probed; the module reports that it would wait.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no diff.
notes:
  - Needs C(systemctl)/C(journalctl) (systemd runtime) or the C(docker) CLI (docker runtime) on the host.
"""

EXAMPLES = r"""
- name: Wait for qwen-0 to serve
  llmfleet.serving.vllm_ready:
    name: llmfleet-vllm-qwen-0
    runtime: systemd
    url: http://127.0.0.1:8002
    model: qwen
    api_key: "{{ vllm_api_key }}"
    timeout: 900
  no_log: true
"""

RETURN = r"""
ready:
  description: Whether the gate passed.
  returned: success
  type: bool
startup_s:
  description: Seconds from the instance's start to passing the gate (null when the start time is unknown).
  returned: success
  type: float
waited_s:
  description: Seconds this task waited.
  returned: success
  type: float
warmup_s:
  description: Seconds the warm-up requests took, all together.
  returned: success
  type: float
auth_enforced:
  description: The request without the key was refused with 401.
  returned: success
  type: bool
log_tail:
  description: The instance's last log lines (on failure).
  returned: failure
  type: list
  elements: str
error_lines:
  description: ERROR records and exceptions from the log before its last lines (on failure).
  returned: failure
  type: list
  elements: str
causes:
  description: Likely causes read from the log (on failure).
  returned: failure
  type: list
  elements: str
"""

import datetime
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.serving.plugins.module_utils._openai_http import call, error_text
from ansible_collections.llmfleet.serving.plugins.module_utils._pooling import PoolingError, gate_passed, gate_request
from ansible_collections.llmfleet.serving.plugins.module_utils._serving import diagnose


def _monotonic_now():
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def started_at(module, runtime, name):
    """The instance's start on the monotonic clock (seconds), or None."""
    if runtime == "systemd":
        rc, out, _err = module.run_command(["systemctl", "show", "-p", "ActiveEnterTimestampMonotonic", "--value", name + ".service"])
        if rc == 0 and out.strip().isdigit() and int(out.strip()) > 0:
            return int(out.strip()) / 1e6
        return None
    rc, out, _err = module.run_command(["docker", "inspect", "-f", "{{.State.StartedAt}}", name])
    if rc != 0:
        return None
    text = out.strip()
    try:
        moment = datetime.datetime.strptime(text[:26].rstrip("Z"), "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return None
    return _monotonic_now() - (time.time() - moment.timestamp())


def alive(module, runtime, name):
    """(running, state words, restart count)."""
    if runtime == "systemd":
        _rc, out, _err = module.run_command(["systemctl", "show", "-p", "ActiveState", "-p", "SubState", "-p", "NRestarts",
                                             name + ".service"])
        props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        state = f"{props.get('ActiveState', 'unknown')} ({props.get('SubState', '')})"
        restarts = int(props.get("NRestarts") or 0)
        return props.get("ActiveState") in ("active", "reloading"), state, restarts
    rc, out, _err = module.run_command(["docker", "inspect", "-f", "{{.State.Status}} {{.RestartCount}}", name])
    words = out.split() if rc == 0 else ["missing", "0"]
    return words[0] == "running", words[0], int(words[1]) if len(words) > 1 and words[1].isdigit() else 0


def log_tail(module, runtime, name, count):
    if runtime == "systemd":
        cmd = ["journalctl", "-u", name + ".service", "-n", str(count), "--no-pager", "-o", "cat"]
    else:
        cmd = ["docker", "logs", "--tail", str(count), name]
    _rc, out, err = module.run_command(cmd)
    return [line for line in (out + err).splitlines() if line.strip()][-count:]


def error_lines(lines, limit=12):
    """The lines that say what went wrong (ERROR records, exceptions), without repeats."""
    seen, out = set(), []
    for line in lines:
        text = line.strip()
        if (" ERROR " in line or "Error:" in line or "Exception:" in line) and text not in seen:
            seen.add(text)
            out.append(line)
    return out[-limit:]


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "runtime": {"type": "str", "required": True, "choices": ["docker", "systemd"]},
            "url": {"type": "str", "required": True},
            "model": {"type": "str", "required": True},
            "api_key": {"type": "str", "required": True, "no_log": True},
            "also_accepted_keys": {"type": "list", "elements": "str", "default": [], "no_log": True},
            "timeout": {"type": "int", "default": 600},
            "interval": {"type": "float", "default": 2},
            "warmup_requests": {"type": "int", "default": 3},
            "log_lines": {"type": "int", "default": 40},
            "instance": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    p = module.params
    if module.check_mode:
        module.exit_json(changed=False, ready=False, msg=f"check mode: would wait up to {p['timeout']} s for {p['name']}")
    base = p["url"].rstrip("/")
    name, runtime = p["name"], p["runtime"]
    began = _monotonic_now()
    start = started_at(module, runtime, name) or began
    deadline = start + p["timeout"]
    try:
        path, probe, expect = gate_request(p["instance"], p["model"])
    except PoolingError as exc:
        module.fail_json(msg=str(exc), ready=False)
    what = "a one-token completion" if expect == "choices" else f"a {path} request"
    last = "no answer yet"

    def fail(why):
        # causes are looked for in a long stretch of the log (a worker's root error comes well before
        # the API server's traceback), the message shows its error lines and the last lines
        lines = log_tail(module, runtime, name, max(400, p["log_lines"]))
        causes = diagnose(lines, p["instance"])
        tail = lines[-p["log_lines"]:]
        earlier = error_lines(lines[:-p["log_lines"]])
        text = f"{name} is not serving: {why}. Likely cause: {causes[0]}."
        if earlier:
            text += " Error lines earlier in the log:\n" + "\n".join(earlier) + "\n"
        module.fail_json(msg=text + " Last log lines:\n" + "\n".join(tail), log_tail=tail, error_lines=earlier, causes=causes, ready=False)

    restarts_before = alive(module, runtime, name)[2]
    while True:
        running, state, restarts = alive(module, runtime, name)
        if restarts > restarts_before:
            fail(f"it exited and was restarted {restarts - restarts_before} time(s) while starting (now {state})")
        if not running:
            fail(f"it is {state}: it stopped while starting")
        status, _body = call(base + "/health", timeout=10)
        if status == 200:
            status, body = call(base + path, probe, p["api_key"], timeout=120)
            if status == 200 and gate_passed(body, expect):
                break
            last = f"/health is 200 but {what} with the key answered {status}: {error_text(body)}"
        else:
            last = f"/health answered {status}: {error_text(_body, 200)}"
        if _monotonic_now() > deadline:
            fail(f"not ready {p['timeout']} s after its start ({last})")
        time.sleep(p["interval"])
    ready_at = _monotonic_now()
    # vLLM checks the key only on paths under /v1, /v2, /inference and /cohere (entrypoints/serve/middleware/authenticate.py
    # GUARDED_PREFIX at 0.32.0): /health, /score, /classify and /pooling answer without it whatever VLLM_API_KEY says. The
    # key's arrival is proved where vLLM guards: GET /v1/models without it must be refused.
    status, body = call(base + "/v1/models", None, None, timeout=60)
    if status != 401:
        module.fail_json(msg=f"{name} answers without the API key (HTTP {status}): VLLM_API_KEY did not reach the engine; "
                             "check the unit's environment file or the container's env", ready=False)
    for n, key in enumerate(p["also_accepted_keys"], start=2):
        status, body = call(base + "/v1/models", None, key, timeout=60)
        if status != 200:
            fail(f"it refuses the key rotation's other key (key {n} of its --config file): GET /v1/models answered {status}: "
                 f"{error_text(body)}")
    chat = {"model": p["model"], "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 32}
    for _i in range(p["warmup_requests"]):
        if expect == "choices":
            status, body = call(base + "/v1/chat/completions", chat, p["api_key"], timeout=300)
        else:
            status, body = call(base + path, probe, p["api_key"], timeout=300)
        if status != 200:
            fail(f"a warm-up {'chat completion' if expect == 'choices' else path + ' request'} answered {status}: {error_text(body)}")
    done = _monotonic_now()
    module.exit_json(changed=False, ready=True, startup_s=round(ready_at - start, 1), waited_s=round(ready_at - began, 1),
                     warmup_s=round(done - ready_at, 1), auth_enforced=True,
                     msg=f"{name} ready {ready_at - start:.1f} s after its start; warm-up {done - ready_at:.1f} s")


if __name__ == "__main__":
    main()
