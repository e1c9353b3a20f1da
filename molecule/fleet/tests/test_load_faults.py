"""Faults under a continuous streaming load through the gateway (issue 35), on the fleet lab: an engine killed (SIGKILL
to its whole unit, as the kernel's OOM killer or a crash would) costs its clients only the streams it held, no request
is sent twice, the gateway stops sending it requests while it is down (the edge answers 503 without forwarding, the
gateway passes those to the model's other instance), and it serves again once systemd restarted it. (A valid change
of the gateway's nginx under load, a reload that keeps every stream: test_keys.py's keys.yml run.) Runs in file order
after test_keys.py and before test_rolling.py; every instance is left as it was."""

import calendar
import json
import time

from test_fleet import EPHEMERAL, host
from test_rolling import during_load

ENGINE = "llmfleet-fleet-engine1"
GATEWAY_HOST = "llmfleet-fleet-gateway"
GATEWAY_LOG = "/var/log/nginx/llmfleet-gateway.access.log"
EDGE_LOG = "/var/log/nginx/llmfleet-edge.access.log"


def tiny_a():
    plan = json.loads((EPHEMERAL / "plans" / f"{ENGINE}.json").read_text())
    return next(i for d in plan["deployments"] for i in d["instances"] if i["served_model_name"] == "tiny-a")


def log_lines(name, path, since):
    """The JSON access log lines of `path` on host `name` written at or after `since` (epoch seconds; the log's time has
    whole seconds)."""
    out = []
    for line in host(name).file(path).content_string.splitlines():
        entry = json.loads(line)
        if calendar.timegm(time.strptime(entry["time"][:19], "%Y-%m-%dT%H:%M:%S")) >= int(since):
            out.append(entry)
    return out


def started(entry):
    """When the request of an access log line started (epoch seconds): the line's time (its end, whole seconds) less its
    request_time."""
    return calendar.timegm(time.strptime(entry["time"][:19], "%Y-%m-%dT%H:%M:%S")) - float(entry["request_time"] or 0)


def test_an_engine_killed_under_load_costs_only_its_streams_and_leaves_the_rotation_until_it_is_back():
    inst = tiny_a()
    unit = f"llmfleet-vllm-{inst['name']}"
    edge = f"{inst['edge']['address']}:{inst['edge']['port']}"
    engine = host(ENGINE)
    restarts = int(engine.check_output(f"systemctl show -p NRestarts --value {unit}"))
    moments = {}

    def kill_and_wait():
        # killed while it holds a stream: its own gauge read on loopback, the kill in the same shell right after
        held = engine.run(f"for i in $(seq 1 300); do n=$(curl -s --max-time 2 http://127.0.0.1:{inst['port']}/metrics | "
                          "awk '/^vllm:num_requests_running/ {print int($2); exit}'); "
                          "[ \"${n:-0}\" -ge 1 ] && break; sleep 0.1; done; "
                          f"echo ${{n:-0}}; systemctl kill -s KILL {unit}")
        moments["kill"] = time.time()
        moments["held"] = int(held.stdout.split()[0]) if held.stdout.split() else 0
        # down_until: when the last /health probe that failed was sent. The engine only gets ready once after its
        # restart, so it served nothing from the kill to then; a request that started later may be its new process's
        moments["down_until"] = moments["kill"]
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            sent = time.time()
            if engine.run(f"curl -sf -o /dev/null --max-time 2 http://127.0.0.1:{inst['port']}/health").rc == 0:
                break
            moments["down_until"] = sent
            time.sleep(1)
        moments["back"] = time.time()
        time.sleep(10)    # the load reaches it again
        return engine.run(f"systemctl show -p NRestarts --value {unit}").stdout.strip()

    after, stats, took = during_load(kill_and_wait, f"{unit} on {ENGINE} killed (SIGKILL), restarted by systemd")
    kill, back = moments["kill"], moments["back"]
    assert int(after) == restarts + 1, "systemd restarted the killed engine once"
    assert back - kill < 290, f"{unit} did not answer /health again within 290 s"
    # only streams in flight at the kill failed: each started before it, no more than it held
    assert moments["held"] >= 1, "the engine was killed while it held a stream"
    for failure in stats["failures"]:
        assert failure["start"] <= kill, (failure, kill, stats["errors"])
    assert stats["failed"] + stats["truncated"] <= moments["held"], stats
    lines = log_lines(GATEWAY_HOST, GATEWAY_LOG, kill)
    tiny = [e for e in lines if e["model"] == "tiny-a"]
    while_down = [e for e in tiny if e["time"][:19] < time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(back)))]
    passed_on = [e for e in while_down if e["upstream_addr"].startswith(edge + " : ")]
    # what the gateway sent there while it was down came back 503 from its edge (nothing reached the engine) and went to
    # the other instance: no client was answered by the killed one
    assert passed_on, "no request tried the killed instance while it was down (least_conn sends the next one there)"
    assert all(e["upstream_status"].startswith("503 : ") and e["status"] == "200" for e in passed_on), passed_on[:5]
    # no request that started after the kill, while the engine was down, was answered by its edge alone. A line's time
    # is when the request ended, in whole seconds, so started() is up to 1 s early: a stream the kill cut (200 was sent
    # already) is logged when the gateway saw its end, and one that started in the last second before down_until may
    # have met the new process, which was ready by the next probe
    down_until = moments["down_until"]
    assert not [e for e in tiny if e["upstream_addr"] == edge and e["status"] == "200"
                and kill + 1 < started(e) <= down_until - 1], "answered by a killed engine"
    # a request the engine had received (its edge answered 502: bytes were sent to it) was never tried again
    sent_ids = {e["request_id"] for e in log_lines(ENGINE, EDGE_LOG, kill) if e["status"] == "502"}
    for e in lines:
        if e["request_id"] in sent_ids:
            assert " : " not in e["upstream_addr"] and "," not in e["upstream_addr"], e
    # back: it serves again
    assert [e for e in log_lines(GATEWAY_HOST, GATEWAY_LOG, back) if e["upstream_addr"] == edge and e["status"] == "200"], \
        "the restarted instance got no request after it was back"
    print(f"[fault] killed {unit}: back after {back - kill:.0f} s; {len(passed_on)} requests met its edge's 503 and were "
          f"answered by the other instance; it held {moments['held']} stream(s) at the kill: {stats['failed']} failed + "
          f"{stats['truncated']} truncated; "
          f"{len(sent_ids)} requests it had received, none sent again; {took:.0f} s")
