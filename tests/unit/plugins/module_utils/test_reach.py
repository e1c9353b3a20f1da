"""What site.yml prints at its end (playbooks/reach.yml): the instances from their plans, the gateway's URL,
the key's name and where it lies (never its value), a curl that parses, the web UI's login."""

from __future__ import annotations

import json
import shlex

import pytest

from ansible_collections.llmfleet.serving.plugins.filter import reach as reach_filter
from ansible_collections.llmfleet.serving.plugins.module_utils import _reach as r

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
    assert words[:3] == ["curl", "-s", "http://10.0.0.1/v1/chat/completions"]
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
