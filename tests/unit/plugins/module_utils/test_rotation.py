"""The gateway's rotation (the gateway role owns it): the state an operator's change leaves, how one server line goes
down and comes back byte for byte, and the routes a gateway reports."""

from __future__ import annotations

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _rotation as rot

CONF = """upstream llm_tiny_a {
    zone llm_tiny_a 64k;
    server 172.30.77.11:8002 max_fails=1 fail_timeout=10s;  # llmfleet-fleet-engine1 tiny-a-0
    server 172.30.77.12:8002 max_fails=1 fail_timeout=10s;  # llmfleet-fleet-engine2 tiny-a-0
    keepalive 16;
}"""
E1, E2 = "llmfleet-fleet-engine1/tiny-a-0", "llmfleet-fleet-engine2/tiny-a-0"


def test_one_server_goes_down_and_comes_back_byte_for_byte():
    down = rot.apply(CONF, [E2])
    assert "172.30.77.12:8002 max_fails=1 fail_timeout=10s down;  # llmfleet-fleet-engine2 tiny-a-0" in down
    assert "172.30.77.11:8002 max_fails=1 fail_timeout=10s;  #" in down          # the other untouched
    assert rot.apply(down, [E2]) == down                                         # idempotent
    assert rot.apply(down, []) == CONF
    assert [(r["instance"], r["down"]) for r in rot.routes(down)] == [("tiny-a-0", False), ("tiny-a-0", True)]
    assert rot.routes(down)[1] == {"host": "llmfleet-fleet-engine2", "instance": "tiny-a-0", "address": "172.30.77.12:8002",
                                   "down": True}


def test_two_changes_of_one_batch_both_stay_out():
    """Each change updates the state it reads under the gateway's lock, and the configuration follows the whole state:
    the second change cannot put the first one back."""
    state = rot.update(rot.parse_state(""), E1, True)
    state = rot.update(rot.parse_state(rot.render_state(state)), E2, True)
    conf = rot.apply(CONF, state)
    assert [r["down"] for r in rot.routes(conf)] == [True, True]
    state = rot.update(state, E1, False)
    assert state == [E2] and rot.apply(conf, state) == rot.apply(CONF, [E2])


def test_one_change_touches_one_line():
    both = rot.apply(CONF, [E1, E2])
    assert rot.set_one(both, E2, False) == rot.apply(CONF, [E1])
    assert rot.set_one(CONF, E2, True) == rot.apply(CONF, [E2])
    assert rot.down_in(both) == [E1, E2] and rot.down_in(CONF) == []


def test_names_match_only_themselves():
    # a host name that is a prefix of another's, and regex characters in names
    assert rot.apply(CONF, ["llmfleet-fleet-engine/tiny-a-0", "llmfleet-fleet-engine./tiny-a-0"]) == CONF
    assert rot.set_one(CONF, "llmfleet-fleet-engine./tiny-a-0", True) == CONF
    with pytest.raises(rot.RotationError, match="host/instance"):
        rot.update([], "tiny-a-0", True)


def test_the_state_file_is_canonical_and_a_broken_one_says_what_to_do():
    assert rot.render_state([E2, E1, E2]) == rot.render_state([E1, E2])
    assert rot.parse_state(rot.render_state([E2, E1])) == [E1, E2]
    assert rot.parse_state("") == []
    with pytest.raises(rot.RotationError, match="remove the file and run playbooks/gateway.yml"):
        rot.parse_state("{not json")
    with pytest.raises(rot.RotationError, match="remove the file"):
        rot.parse_state('{"out": "x"}')


def test_the_full_render_keeps_what_the_rotation_took_out():
    """gateway.conf.j2 renders `down` for the servers gateway_model marks (from the rotation state): what apply()
    would write on the live file."""
    from ansible_collections.llmfleet.serving.plugins.module_utils import _gateway as gw  # pylint: disable=import-outside-toplevel
    plans = {h: {"host": h, "deployments": [{"name": "tiny-a", "instances": [
        {"name": "tiny-a-0", "served_model_name": "tiny-a", "port": 8002, "bind_address": "127.0.0.1",
         "edge": {"address": addr, "port": 8002}}]}]}
        for h, addr in (("llmfleet-fleet-engine1", "172.30.77.11"), ("llmfleet-fleet-engine2", "172.30.77.12"))}
    servers = gw.gateway_model(plans, "gw", {"out_of_rotation": [E2]})["upstreams"][0]["servers"]
    assert [(s["host"], s["down"]) for s in servers] == [("llmfleet-fleet-engine1", False), ("llmfleet-fleet-engine2", True)]
    assert not any(s["down"] for s in gw.gateway_model(plans, "gw")["upstreams"][0]["servers"])
