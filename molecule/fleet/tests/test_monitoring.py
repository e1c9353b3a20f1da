"""Monitoring on the fleet lab (issue 36): Prometheus from Debian's package on the gateway host (a small fleet's monitoring
host), at its private address 172.30.77.10:9090 (molecule.yml), scraping the real vLLM CPU instances through their edges
and the node exporter of every host; the dashboards monitoring.yml wrote on the controller; the token counters against
what the client received; a screenshot of Prometheus's graph page in Debian's chromium. Prometheus asks the lab's user
(molecule.yml's monitoring_prometheus_users): every request here sends it, and one checks the 401 without it. The instance-down alert is
checked where an instance is stopped anyway (test_fleet.py, test_verify_names_a_stopped_instance_and_the_error).

Runs in file order after test_load_faults.py (the lab is back to its plan) and before test_rolling.py."""

import base64
import json
import os
import pathlib
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from test_fleet import ADDRESS, EPHEMERAL, LOAD_KEY, host, instances, request

sys.path.insert(0, os.environ["ANSIBLE_COLLECTIONS_PATH"].split(":")[0])
from ansible_collections.llmfleet.serving.plugins.module_utils import _monitoring as mon  # noqa: E402

PROMETHEUS = "http://172.30.77.10:9090"
# molecule.yml's monitoring_prometheus_users (a lab-only password)
PROMETHEUS_USER, PROMETHEUS_PASSWORD = "lab", "lab-prometheus-pass-0123"
AUTH = "Basic " + base64.b64encode(f"{PROMETHEUS_USER}:{PROMETHEUS_PASSWORD}".encode()).decode()
GATEWAY_HOST = "llmfleet-fleet-gateway"
# the key name of test_fleet.LOAD_KEY (molecule.yml's gateway_api_keys)
LOAD_KEY_NAME = "load"
ARTIFACTS = pathlib.Path(__file__).resolve().parents[3] / "tests" / "output" / "monitoring"
CHROMIUM = "/usr/lib/chromium/chromium"   # Debian's package, as tests/tools/webui_chat.py


def api(path, **params):
    url = f"{PROMETHEUS}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Authorization": AUTH}), timeout=30) as resp:
        body = json.loads(resp.read().decode())
    assert body["status"] == "success", body
    return body["data"]


def query(expr):
    return api("/api/v1/query", query=expr)["result"]


def wait_for(what, check, timeout=90):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(2)


def alert(name, instance, state="firing"):
    """The alert `name` for `instance` (host/instance label) in `state` (None: pending or firing), or None (Prometheus's
    /api/v1/alerts lists the active ones)."""
    for item in api("/api/v1/alerts")["alerts"]:
        if item["labels"].get("alertname") == name and item["labels"].get("instance") == instance and state in (None, item["state"]):
            return item
    return None


def test_prometheus_scrapes_every_instance_through_its_edge_and_every_host():
    expected = ({("vllm", f"{h}/{i['name']}") for h, i in instances()} | {("node", h) for h in ADDRESS}
                | {("gateway", GATEWAY_HOST)})

    def targets():
        active = api("/api/v1/targets", state="active")["activeTargets"]
        healthy = {(t["labels"]["job"], t["labels"]["instance"]): t for t in active if t["health"] == "up"}
        return healthy if expected <= set(healthy) else None
    up = wait_for("every target up", targets)
    for hostname, inst in instances():
        target = up[("vllm", f"{hostname}/{inst['name']}")]
        # through the engine host's edge (the gateway host is not an engine host): its private address and edge port
        assert target["scrapeUrl"] == f"http://{ADDRESS[hostname]}:{inst['edge']['port']}/metrics", target
        assert target["labels"]["served_model"] == inst["served_model_name"]
    for hostname, address in ADDRESS.items():
        assert up[("node", hostname)]["scrapeUrl"] == f"http://{address}:9100/metrics"
    # the gateway's counters: mtail on the gateway host's private address
    assert up[("gateway", GATEWAY_HOST)]["scrapeUrl"] == f"http://{ADDRESS[GATEWAY_HOST]}:3903/metrics"
    print(f"[monitoring] {len(up)} targets up: {sorted(up)}")


def status_of(url, headers=None):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_prometheus_asks_the_labs_user_on_every_path():
    """Off loopback Prometheus asks monitoring_prometheus_users' credential: its UI, its API and /-/ready answer 401
    without it or with a wrong password, 200 with it; the web configuration holds bcrypt hashes only, readable by root and
    prometheus, and prometheus.yml names the self-scrape's password file, never the password."""
    # /classic/alerts: the page site.yml's closing summary prints (Debian's package has no React UI: /alerts is 404)
    for path in ("/api/v1/query?query=up", "/graph", "/classic/alerts", "/-/ready"):
        assert status_of(PROMETHEUS + path) == 401, path
        wrong = "Basic " + base64.b64encode(f"{PROMETHEUS_USER}:not-the-password".encode()).decode()
        assert status_of(PROMETHEUS + path, {"Authorization": wrong}) == 401, path
        assert status_of(PROMETHEUS + path, {"Authorization": AUTH}) == 200, path
    gateway = host(GATEWAY_HOST)
    web = gateway.file("/etc/prometheus/llmfleet-web.yml")
    assert (web.user, web.group, web.mode) == ("root", "prometheus", 0o640)
    assert PROMETHEUS_PASSWORD not in web.content_string and '"lab": "$2b$12$' in web.content_string
    assert "--web.config.file=/etc/prometheus/llmfleet-web.yml" in gateway.file("/etc/default/prometheus").content_string
    assert PROMETHEUS_PASSWORD not in gateway.file("/etc/prometheus/prometheus.yml").content_string
    assert gateway.run("promtool check web-config /etc/prometheus/llmfleet-web.yml").rc == 0
    # Prometheus's scrape of itself sends the user too
    own = api("/api/v1/targets", state="active")["activeTargets"]
    assert [t["health"] for t in own if t["labels"]["job"] == "prometheus"] == ["up"], own


def test_prometheus_runs_in_the_unprivileged_container_sandboxed_but_for_the_user_namespace():
    """The lab's hosts are unprivileged containers, which cannot create user namespaces: the role's drop-in turns the
    package unit's PrivateUsers off, and nothing else of its sandboxing."""
    gateway = host("llmfleet-fleet-gateway")
    assert gateway.run("unshare --user true").rc != 0
    dropin = gateway.file("/etc/systemd/system/prometheus.service.d/llmfleet-userns.conf")
    assert dropin.exists and "PrivateUsers=false" in dropin.content_string
    shown = gateway.check_output("systemctl show prometheus -p PrivateUsers -p ProtectSystem -p NoNewPrivileges -p ActiveState")
    assert sorted(shown.split()) == ["ActiveState=active", "NoNewPrivileges=yes", "PrivateUsers=no", "ProtectSystem=full"], shown


def usage_of(model, stream):
    body = {"model": model, "messages": [{"role": "user", "content": f"Count to {7 if stream else 5}"}],
            "max_tokens": 12, "temperature": 0}
    if not stream:
        status, text = request("/v1/chat/completions", body)
        assert status == 200, text
        return json.loads(text)["usage"]
    body.update(stream=True, stream_options={"include_usage": True})
    req = urllib.request.Request("http://172.30.77.10/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Authorization": f"Bearer {LOAD_KEY}", "Content-Type": "application/json"})
    usage = None
    with urllib.request.urlopen(req, timeout=120) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith("data: {"):
                usage = json.loads(line[6:]).get("usage") or usage
    assert usage, "the stream's last chunk carries usage (stream_options.include_usage)"
    return usage


# vLLM's counters per served model (model_name), the gateway's per key name and model (mtail)
VLLM_COUNTERS = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total")
GATEWAY_COUNTERS = ("llmfleet_gateway_prompt_tokens_total", "llmfleet_gateway_completion_tokens_total")


def counters():
    """{(model, counter): value} summed over every instance (vLLM's, by model_name) and for the load key (the gateway's,
    by model), as Prometheus last scraped them, and the oldest sample's time."""
    out, oldest = {}, None
    load = f'job="gateway",key_name="{LOAD_KEY_NAME}"'
    selectors = [(c, f'{c}{{job="vllm"}}', "model_name") for c in VLLM_COUNTERS] + \
        [(c, f"{c}{{{load}}}", "model") for c in GATEWAY_COUNTERS] + \
        [("llmfleet_gateway_requests_total", f'llmfleet_gateway_requests_total{{{load},model!="",status="200"}}', "model")]
    # the sample times first, then the sums: a scrape landing in between only makes the sums newer
    for _counter, selector, _by in selectors:
        for series in query(f"timestamp({selector})"):
            stamp = float(series["value"][1])
            oldest = stamp if oldest is None else min(oldest, stamp)
    for counter, selector, by in selectors:
        for series in query(f"sum by ({by}) ({selector})"):
            # an empty label is no label in Prometheus: a request routed to no model (GET /v1/models) has none
            out[(series["metric"].get(by, ""), counter)] = float(series["value"][1])
    return out, oldest


def settled_after(moment):
    """counters() once every instance's series was scraped after `moment`."""
    def fresh():
        got = counters()
        return got if got[1] and got[1] > moment else None
    return wait_for("a scrape after the load", fresh, 60)[0]


def test_vllms_and_the_gateways_token_counters_agree_with_what_the_client_received():
    """A load of known size through the gateway (non-streamed and streamed, both models): the increase of vLLM's own
    counters and of the gateway's counters for the load key, read from Prometheus, equals the sum of the `usage` the
    client received, exactly: both count the same `usage` objects, no sampling. Nothing else sends tokens to the lab's
    engines while this runs (the web UI's title and tag generation are off); a counter reset (an engine or mtail
    restarted) would show as a negative increase and fail."""
    before = settled_after(time.time())
    sent = {}
    for model in ("tiny-a", "tiny-b"):
        for n in range(4):
            usage = usage_of(model, stream=bool(n % 2))
            got = sent.setdefault(model, {"prompt": 0, "completion": 0, "requests": 0})
            got["prompt"] += usage["prompt_tokens"]
            got["completion"] += usage["completion_tokens"]
            got["requests"] += 1
    # a second's margin: nginx logs a request once it is finalized, mtail reads the log every 250 ms
    after = settled_after(time.time() + 1)
    for model, got in sent.items():
        seen = {name: after[(model, counter)] - before.get((model, counter), 0.0) for name, counter in
                (("prompt", "vllm:prompt_tokens_total"), ("completion", "vllm:generation_tokens_total"),
                 ("requests", "vllm:request_success_total"))}
        keyed = {name: after[(model, counter)] - before.get((model, counter), 0.0) for name, counter in
                 (("prompt", "llmfleet_gateway_prompt_tokens_total"), ("completion", "llmfleet_gateway_completion_tokens_total"),
                  ("requests", "llmfleet_gateway_requests_total"))}
        print(f"[monitoring] {model}: the client received {got}, vLLM's counters rose by {seen}, the gateway's for key "
              f"{LOAD_KEY_NAME!r} by {keyed}")
        assert seen == {k: float(v) for k, v in got.items()}, (model, got, seen)
        assert keyed == {k: float(v) for k, v in got.items()}, (model, got, keyed)


def test_every_dashboard_query_returns_data_from_the_labs_prometheus():
    folder = EPHEMERAL / "dashboards"
    boards = sorted(folder.glob("llmfleet-*.json"))
    assert [b.name for b in boards] == ["llmfleet-gateway.json", "llmfleet-model-tiny-a.json", "llmfleet-model-tiny-b.json",
                                        "llmfleet-overview.json"]
    empty, count = [], 0
    for board in boards:
        for title, expr in mon.panel_queries(json.loads(board.read_text()), "1m"):
            count += 1
            if not query(expr):
                empty.append((board.name, title, expr))
    print(f"[monitoring] {count} panel queries of {len(boards)} dashboards, {count - len(empty)} returned data")
    assert not empty, f"panels without data on the lab: {empty}"


def test_every_alert_rule_is_loaded_and_none_fires_on_a_healthy_lab():
    groups = api("/api/v1/rules")["groups"]
    names = {g["name"] for g in groups}
    assert names == {"llmfleet-fleet", "llmfleet-deployment-tiny-a", "llmfleet-deployment-tiny-b", "llmfleet-gateway"}, names
    rules = [r for g in groups for r in g["rules"]]
    assert all(r["health"] == "ok" for r in rules), [r for r in rules if r["health"] != "ok"]
    firing = [a["labels"] for a in api("/api/v1/alerts")["alerts"] if a["state"] == "firing"]
    print(f"[monitoring] {len(rules)} rules loaded, healthy; firing now: {firing}")
    assert not firing


def test_a_screenshot_of_prometheus_graph_page_with_the_kv_cache_and_token_series():
    from playwright import sync_api   # requirements.txt; a missing package must fail, not skip
    assert pathlib.Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: install Debian's chromium"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "prometheus-graph.png"
    params = {"g0.expr": "vllm:kv_cache_usage_perc", "g0.tab": "0", "g0.range_input": "15m",
              "g1.expr": "sum by (model_name) (rate(vllm:generation_tokens_total[1m]))", "g1.tab": "0", "g1.range_input": "15m"}
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        # Prometheus asks the lab's user (HTTP basic auth): the browser context answers its challenge
        context = browser.new_context(viewport={"width": 1400, "height": 1500},
                                      http_credentials={"username": PROMETHEUS_USER, "password": PROMETHEUS_PASSWORD})
        page = context.new_page()
        page.goto(f"{PROMETHEUS}/graph?{urllib.parse.urlencode(params)}", timeout=60000)
        # Debian's Prometheus 2.42 serves the classic UI: each panel's series drawn by rickshaw (an svg) once its range
        # query answered, the expression in a textarea, an error in an .alert-danger box, the series named in a legend
        page.wait_for_function("document.querySelectorAll('.rickshaw_graph svg').length >= 2", timeout=60000)
        page.wait_for_timeout(1000)
        expressions = page.eval_on_selector_all("textarea", "els => els.map(e => e.value)")
        errors = [e.inner_text().strip() for e in page.query_selector_all(".alert-danger") if e.inner_text().strip()]
        legends = [e.inner_text() for e in page.query_selector_all(".rickshaw_legend")]
        page.screenshot(path=str(shot), full_page=True)
        browser.close()
    print(f"[monitoring] screenshot {shot} ({shot.stat().st_size} bytes); legends: {[len(x.splitlines()) for x in legends]} series")
    assert expressions == [params["g0.expr"], params["g1.expr"]] and not errors, (expressions, errors)
    assert len(legends) == 2 and all("tiny-a" in x and "tiny-b" in x for x in legends), legends
