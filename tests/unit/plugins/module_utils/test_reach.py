"""What site.yml prints at its end (playbooks/reach.yml): the instances from their plans, the gateway's URL,
the key's name and where it lies (never its value), a curl that parses, the web UI's login."""

from __future__ import annotations

import json
import os
import pathlib
import shlex
import subprocess

import pytest
import yaml

from ansible_collections.llmfleet.serving.plugins.filter import reach as reach_filter
from ansible_collections.llmfleet.serving.plugins.module_utils import _monitoring as mon
from ansible_collections.llmfleet.serving.plugins.module_utils import _reach as r

ROOT = pathlib.Path(__file__).resolve().parents[4]

PLANS = {"e2": {"host": "e2", "deployments": [{"name": "smollm2", "engine_version": "0.32.0", "instances": [
    {"name": "smollm2-0", "port": 8002, "served_model_name": "smollm2",
     "args": ["/m", "--dtype", "float32", "--max-model-len", "2048", "--max-num-seqs", "11"]}]}]},
    "e1": {"host": "e1", "deployments": [{"name": "smollm2", "engine_version": "0.32.0", "instances": [
        {"name": "smollm2-0", "port": 8002, "served_model_name": "smollm2", "args": ["/m", "--dtype", "float32"]}]}]}}
KEYS = [{"name": "demo", "key": "s3cret-value-never-printed"}, {"name": "other", "key": "x"}]


def test_instances_are_rows_sorted_by_host_with_their_launch_values():
    assert r.instance_rows(PLANS) == [["e1", "smollm2-0", "smollm2", "8002", "0.32.0", "float32", "-", "-"],
                                      ["e2", "smollm2-0", "smollm2", "8002", "0.32.0", "float32", "2048", "11"]]


def test_the_curl_is_one_shell_command_whose_body_is_json():
    words = shlex.split(r.curl("http://10.0.0.1/v1/", "smollm2", "KEY"))
    assert words[:4] == ["curl", "-sS", "--fail-with-body", "http://10.0.0.1/v1/chat/completions"]
    assert words[words.index("-H") + 1] == "Authorization: Bearer KEY"
    assert json.loads(words[words.index("-d") + 1])["model"] == "smollm2"


def test_the_summary_names_the_key_and_its_file_never_its_value():
    gw = r.gateway_entry("g", "http://10.0.0.1/v1", KEYS, key_file="/inv/secrets/gateway_demo_key")
    out = r.lines(PLANS, [gw], [{"host": "g", "url": "http://10.0.0.1:3000", "email": "admin@x.example",
                                 "password_file": "/inv/secrets/pw"}], ["Q: q", "A (smollm2, through the gateway): Paris."])
    text = "\n".join(out)
    assert out[0] == "The fleet: 2 instance(s) of 1 model(s) on 2 host(s)"
    assert "s3cret" not in text
    assert "key 'demo': in /inv/secrets/gateway_demo_key" in text
    assert "Bearer $(cat /inv/secrets/gateway_demo_key)" in text
    assert "http://10.0.0.1:3000  login admin@x.example, password in /inv/secrets/pw" in text
    assert out[-1] == "A (smollm2, through the gateway): Paris."


def test_without_a_key_file_the_key_comes_from_the_environment():
    out = r.lines(PLANS, [r.gateway_entry("g", "http://g/v1", KEYS, key_name="other")], [])
    assert any("key 'other': the gateway_api_keys entry of that name" in line for line in out)
    assert any("Bearer $LLMFLEET_KEY" in line for line in out)


@pytest.mark.parametrize("keys, name, fails", [([], None, "gateway_api_keys is empty"), (KEYS, "nope", "no gateway_api_keys entry is named 'nope'")])
def test_a_key_that_is_not_there_is_named(keys, name, fails):
    with pytest.raises(r.ReachError, match=fails):
        r.gateway_entry("g", "http://g/v1", keys, key_name=name)


def test_the_filter_reads_the_inventory_values():
    hostvars = {"g": {"llmfleet_private_address": "172.30.78.10", "gateway_listen": ["80"], "gateway_api_keys": KEYS,
                      "webui_public_url": "http://172.30.78.10:3000", "webui_admin_email": "a@b.example"},
                "off": {"llmfleet_gateway": False}}
    out = reach_filter.fleet_reach(PLANS, {"llm_gateway": ["g", "off"], "llm_webui": ["g"]}, hostvars)
    text = "\n".join(out)
    assert "Gateway on g: http://172.30.78.10/v1" in text and "off" not in text
    assert "password: webui_admin_password (your vault)" in text


def test_the_summary_says_where_prometheus_and_the_dashboards_are(monkeypatch):
    hostvars = {"g": {"llmfleet_private_address": "172.30.78.10", "gateway_listen": ["80"], "gateway_api_keys": KEYS},
                "ops": {"monitoring_prometheus_listen": "10.0.0.5:9090", "monitoring_dashboards_dir": "/srv/dash"}}
    monkeypatch.setenv("PWD", "/work/fleet")
    # a small fleet: Prometheus on the gateway host, on loopback (the role's default), reached through a tunnel
    text = "\n".join(reach_filter.fleet_reach(PLANS, {"llm_gateway": ["g"]}, hostvars))
    assert "Prometheus on g: 127.0.0.1:9090 scrapes every instance and host; alerts on loopback there: ssh -N -L " \
           "9090:127.0.0.1:9090 g, then http://127.0.0.1:9090/classic/alerts (no credential: keep it there)" in text
    assert "Grafana dashboards: /work/fleet/dashboards/llmfleet-*.json on this controller" in text
    # llm_monitor wins, with its own listen address and folder
    text = "\n".join(reach_filter.fleet_reach(PLANS, {"llm_gateway": ["g"], "llm_monitor": ["ops"]}, hostvars))
    assert "Prometheus on ops: 10.0.0.5:9090 scrapes every instance and host; alerts http://10.0.0.5:9090/classic/alerts" in text
    assert "/srv/dash/llmfleet-*.json" in text
    # on every address: shown at the host's private address; a loopback one through the host's ansible_host
    hostvars["ops"].update(monitoring_prometheus_listen="0.0.0.0:9090", llmfleet_private_address="10.0.0.5")
    text = "\n".join(reach_filter.fleet_reach(PLANS, {"llm_gateway": ["g"], "llm_monitor": ["ops"]}, hostvars))
    assert "alerts http://10.0.0.5:9090/classic/alerts" in text
    hostvars["ops"].update(monitoring_prometheus_listen="127.0.0.2:9091", ansible_host="ops.example")
    text = "\n".join(reach_filter.fleet_reach(PLANS, {"llm_gateway": ["g"], "llm_monitor": ["ops"]}, hostvars))
    assert "ssh -N -L 9091:127.0.0.2:9091 ops.example, then http://127.0.0.1:9091/classic/alerts" in text
    # with users: the first one's name and where its password lies (the inventory's file, else the vault), never it
    hostvars["ops"].update(monitoring_prometheus_users=[{"name": "ops-user", "password": "pw-not-shown"}, {"name": "b", "password": "x"}])
    text = "\n".join(reach_filter.fleet_reach(PLANS, {"llm_gateway": ["g"], "llm_monitor": ["ops"]}, hostvars))
    assert "http://127.0.0.1:9091/classic/alerts (user ops-user, password: its monitoring_prometheus_users entry (your vault))" in text
    hostvars["ops"].update(monitoring_prometheus_listen="10.0.0.5:9090", llmfleet_reach_prometheus_password_file="/inv/.secrets/prometheus_password")
    text = "\n".join(reach_filter.fleet_reach(PLANS, {"llm_gateway": ["g"], "llm_monitor": ["ops"]}, hostvars))
    assert "alerts http://10.0.0.5:9090/classic/alerts (user ops-user, password in /inv/.secrets/prometheus_password)" in text
    assert "pw-not-shown" not in text
    # monitoring turned off on the monitoring host: nothing said
    hostvars["g"]["llmfleet_monitoring"] = "false"
    assert "Prometheus" not in "\n".join(reach_filter.fleet_reach(PLANS, {"llm_gateway": ["g"]}, hostvars))


def test_the_prometheus_listen_default_is_the_roles():
    defaults = yaml.safe_load((ROOT / "roles" / "monitoring" / "defaults" / "main.yml").read_text())
    assert defaults["monitoring_prometheus_listen"] == mon.PROMETHEUS_LISTEN


def test_the_try_script_holds_the_printed_curl_and_no_key(tmp_path):
    gw = r.gateway_entry("g", "http://10.0.0.1/v1", KEYS, key_file="/inv/secrets/gateway demo key")
    [script] = r.scripts([gw], ["smollm2", "other"], str(tmp_path) + "/")
    assert script["path"] == f"{tmp_path}/try-g.sh"
    body = script["content"].splitlines()
    assert body[0] == "#!/bin/sh" and "s3cret" not in script["content"]
    curl_line = next(line for line in body if line.startswith("curl "))
    assert curl_line == r.curl("http://10.0.0.1/v1", "other", "$(cat '/inv/secrets/gateway demo key')")
    out = r.lines(PLANS, [gw], [], folder=str(tmp_path))
    assert f"  or:   sh {tmp_path}/try-g.sh" in out
    assert r.scripts([gw], [], str(tmp_path)) == [], "no model, no request to offer"


def test_the_try_script_runs_in_sh_and_sends_the_request_the_summary_shows(tmp_path):
    """The script as written, run by /bin/sh with a stand-in curl on PATH that records its arguments: the same words
    as the printed curl, the key read from its file."""
    (tmp_path / "key").write_text("k-123")
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "curl"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    fake.chmod(0o755)
    gw = r.gateway_entry("g", "http://10.0.0.1/v1", KEYS, key_file=str(tmp_path / "key"))
    [script] = r.scripts([gw], ["smollm2"], str(tmp_path))
    path = tmp_path / "try-g.sh"
    path.write_text(script["content"])
    ran = subprocess.run(["sh", str(path)], capture_output=True, text=True, check=True,
                         env=dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}"))
    words = ran.stdout.splitlines()
    assert words[:3] == ["-sS", "--fail-with-body", "http://10.0.0.1/v1/chat/completions"]
    assert "Authorization: Bearer k-123" in words
    assert json.loads(words[words.index("-d") + 1])["model"] == "smollm2"


def test_the_filters_offer_the_script_when_given_the_folder():
    hostvars = {"g": {"llmfleet_private_address": "172.30.78.10", "gateway_listen": ["80"], "gateway_api_keys": KEYS}}
    groups = {"llm_gateway": ["g"], "llm_webui": []}
    [script] = reach_filter.fleet_try_scripts(PLANS, groups, hostvars, "/p")
    assert script["path"] == "/p/try-g.sh" and "$LLMFLEET_KEY" in script["content"]
    assert "  or:   sh /p/try-g.sh" in reach_filter.fleet_reach(PLANS, groups, hostvars, [], "/p")


def test_the_try_script_stops_with_a_sentence_when_the_key_is_not_there(tmp_path):
    for gw, env, said in [
            (r.gateway_entry("g", "http://10.0.0.1/v1", KEYS, key_file=str(tmp_path / "no key")), {}, "is not in"),
            (r.gateway_entry("g", "http://10.0.0.1/v1", KEYS), {"LLMFLEET_KEY": ""}, "export the gateway key named demo")]:
        [script] = r.scripts([gw], ["smollm2"], str(tmp_path))
        path = tmp_path / "try-g.sh"
        path.write_text(script["content"])
        ran = subprocess.run(["sh", str(path)], capture_output=True, text=True, check=False,
                             env=dict(os.environ, PATH="/nonexistent:" + os.environ["PATH"], **env))
        assert ran.returncode != 0 and said in ran.stderr, ran.stderr
