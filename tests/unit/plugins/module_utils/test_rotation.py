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


def test_the_state_says_since_when_and_by_which_run_and_keeps_the_first_time():
    """What the next run reports of an instance an interrupted one left out: since when and by which run. Taking out an
    instance already out keeps its time; putting it back drops it."""
    state = rot.mark({}, E2, True, "2026-12-03T10:00:00Z", "site.yml by alice on ctl-1, pid 4242")
    state = rot.mark(state, E2, True, "2026-12-03T11:00:00Z", "serve.yml by bob on ctl-2, pid 7")
    assert state == {E2: {"since": "2026-12-03T10:00:00Z", "by": "site.yml by alice on ctl-1, pid 4242"}}
    text = rot.write_state(state)
    assert rot.read_state(text) == state and rot.parse_state(text) == [E2]
    assert rot.write_state(rot.read_state(text)) == text                      # canonical
    assert rot.mark(state, E2, False) == {}
    # a state an older release wrote ({"out": [...]}) is read as it was, without times
    assert rot.read_state('{"out": ["%s"]}' % E1) == {E1: {"since": None, "by": None}}
    assert rot.write_state({E1: {"since": None, "by": None}}) == rot.render_state([E1])
    with pytest.raises(rot.RotationError, match="remove the file"):
        rot.read_state('{"out": [], "since": []}')


def test_an_instance_no_plan_has_is_forgotten_and_the_rest_kept():
    """A removed deployment or host that a change took out: nothing would ever put it back, so the state forgets it."""
    plans = {"llmfleet-fleet-engine1": {"deployments": [{"instances": [{"name": "tiny-a-0"}]}]},
             "llmfleet-fleet-engine2": {"deployments": [{"instances": [{"name": "tiny-b-0"}]}]}}
    planned = rot.planned(plans)
    assert planned == [E1, "llmfleet-fleet-engine2/tiny-b-0"]
    state = {E1: {"since": "t1", "by": None}, E2: {"since": "t2", "by": None}}
    assert rot.forget(state, planned) == {E1: {"since": "t1", "by": None}}
    assert rot.forget({}, planned) == {}


def test_what_the_gateways_hold_out_merges_to_the_earliest_time():
    merged = rot.merge_out({"gw2": {E2: {"since": "2026-12-03T10:05:00Z", "by": "b"}},
                            "gw1": {E2: {"since": "2026-12-03T10:00:00Z", "by": "a"}, E1: {"since": None, "by": None}}})
    assert merged == {E2: {"since": "2026-12-03T10:00:00Z", "by": "a", "gateways": ["gw1", "gw2"]},
                      E1: {"since": None, "by": None, "gateways": ["gw1"]}}


def test_a_peer_serves_when_routed_without_down_and_held_out_by_no_state():
    routes = rot.routes(CONF)
    assert rot.serving(routes, [], [E1]) == [E1]
    assert rot.serving(rot.routes(rot.apply(CONF, [E1])), [E1], [E1]) == []
    # the state holds it out although this configuration does not route it down (yet): it does not serve
    assert rot.serving(routes, [E1], [E1]) == []
    # not routed here yet (a first deploy): counts, as it will be routed in rotation
    assert rot.serving(routes, [], ["llmfleet-fleet-engine3/tiny-a-0"]) == ["llmfleet-fleet-engine3/tiny-a-0"]
