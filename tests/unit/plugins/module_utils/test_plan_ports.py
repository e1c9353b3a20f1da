"""Stable ports (issue #35): an instance keeps its port across plan changes (the plan in force, by name), a deployment's
`port` holds for every instance (port + k), and two users of one port on a host are refused, naming both."""

from __future__ import annotations

import pathlib
import re

import pytest
import yaml

from ansible_collections.llmfleet.serving.plugins.filter.plan import vllm_plan
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.base import PlanError
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.compose import plan_host
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.ports import (
    HOST_PORT_USERS, PortAsk, assign_ports, host_ports, listen_ports, ports_in_force,
)

HW = hardware_profile("h200_sxm_8x")
GATEWAY = {"gateway_on_host": True}


def dep(name, gpus=1, **extra):
    return {"name": name, "model": "Qwen/Qwen3-8B", "engine": {"version": "0.26.0"}, "gpus": gpus, **extra}


def two_instances(name, **extra):
    """Two GPUs at TP=1: two instances of one deployment."""
    return dep(name, gpus=2, overrides={"tensor_parallel_size": 1}, **extra)


def ports_of(plan):
    assert plan["errors"] == [], plan["errors"]
    return {i["name"]: i["port"] for d in plan["deployments"] for i in d["instances"]}


def replan(deployments, previous, **options):
    """The next run: plan.yml passes the plan in force (the file the last run wrote) to the filter."""
    return vllm_plan(deployments, HW, "h", dict(GATEWAY, **options), previous)


# ---- an instance keeps its port -------------------------------------------------------------------------------------

def test_inserting_a_deployment_before_an_existing_one_keeps_the_existing_port():
    first = vllm_plan([dep("b")], HW, "h", GATEWAY, {})
    assert ports_of(first) == {"b-0": 8002}
    second = replan([dep("a"), dep("b")], first)
    # b-0 still runs on 8002 while a-0 starts: a-0 must not take it, b-0 must not move
    assert ports_of(second) == {"a-0": 8003, "b-0": 8002}
    assert second["ports"] == {"a-0": 8003, "b-0": 8002}
    # and the plan after that changes nothing
    assert ports_of(replan([dep("a"), dep("b")], second)) == {"a-0": 8003, "b-0": 8002}


def test_a_kept_port_is_on_the_command_line_the_edge_and_the_hash():
    options = {"private_address": "10.0.0.5"}
    a, b = dep("a", gpus=[0]), dep("b", gpus=[3])     # GPU lists: only the port is at stake here
    first = vllm_plan([b], HW, "h", options, {})
    second = vllm_plan([a, b], HW, "h", options, first)
    [b_before] = first["deployments"][0]["instances"]
    a_now, b_now = (d["instances"][0] for d in second["deployments"])
    assert b_now == b_before      # same port, flags, reasons and hash: the runtime sees no change and restarts nothing
    args = a_now["args"]
    assert (a_now["port"], args[args.index("--port") + 1], a_now["edge"]) == (8003, "8003", {"address": "10.0.0.5", "port": 8003})
    alone = vllm_plan([a], HW, "h", dict(options, base_port=8003), {})["deployments"][0]["instances"][0]
    assert a_now["plan_hash"] == alone["plan_hash"]   # re-stamping the port gives the hash a plan made on that port has


def test_a_removed_instance_keeps_its_port_from_new_ones_until_the_next_plan():
    first = vllm_plan([dep("a"), dep("b")], HW, "h", GATEWAY, {})
    assert ports_of(first) == {"a-0": 8002, "b-0": 8003}
    # a is replaced by c in one change: the stale a-0 is removed after c-0 started, so c-0 must not take 8002
    second = replan([dep("c"), dep("b")], first)
    assert ports_of(second) == {"c-0": 8004, "b-0": 8003}
    # once the plan in force no longer has a-0, 8002 is free again
    assert ports_of(replan([dep("c"), dep("b"), dep("d")], second))["d-0"] == 8002


def test_a_failed_plan_keeps_the_ports_in_force_for_the_next_one():
    first = vllm_plan([dep("b")], HW, "h", GATEWAY, {})
    second = replan([dep("a"), dep("b")], first)
    broken = replan([dep("a"), dep("b"), dep("z", port=8002)], second)   # b-0's port: refused
    assert broken["errors"] and broken["ports"] == {"a-0": 8003, "b-0": 8002}
    assert ports_of(replan([dep("a"), dep("b")], broken)) == {"a-0": 8003, "b-0": 8002}


def test_without_a_plan_in_force_ports_follow_the_plan_order():
    assert ports_of(vllm_plan([dep("a"), dep("b")], HW, "h", GATEWAY)) == {"a-0": 8002, "b-0": 8003}
    plan = vllm_plan([dep("a"), dep("b")], HW, "h", GATEWAY, {})
    assert plan["ports"] == {"a-0": 8002, "b-0": 8003}
    why = [r["why"] for r in plan["deployments"][0]["reasons"] if r["decision"] == "port=8002"]
    assert why == ["the port the instance has in the plan in force; a new instance the lowest free one from "
                   "llmfleet_vllm_base_port (8002)"]


def test_planning_again_from_the_plan_just_written_gives_the_same_plan():
    """plan.yml writes the plan file with a copy: a second run over an unchanged inventory must report no change."""
    deployments = [dep("a"), two_instances("b", port=9100), dep("c")]
    first = vllm_plan(deployments, HW, "h", GATEWAY, {})
    assert replan(deployments, first) == first


def test_a_plan_file_written_before_plans_carried_ports_is_read_from_its_instances():
    old_file = {"host": "h", "deployments": [{"name": "b", "instances": [{"name": "b-0", "port": 8007}]}]}
    assert ports_in_force(old_file) == {"b-0": 8007}
    assert ports_of(replan([dep("a"), dep("b")], old_file)) == {"a-0": 8002, "b-0": 8007}
    assert ports_in_force(None) == {} and ports_in_force({"ports": {"x-0": "8002", "y-0": 80, "z-0": 9000}}) == {"z-0": 9000}


def test_changing_the_base_port_moves_no_instance_that_has_one():
    first = vllm_plan([dep("a")], HW, "h", GATEWAY, {})
    assert ports_of(replan([dep("a"), dep("b")], first, base_port=9000)) == {"a-0": 8002, "b-0": 9000}


def test_a_port_in_force_that_a_host_listener_now_holds_moves():
    first = vllm_plan([dep("a")], HW, "h", GATEWAY, {})
    second = replan([dep("a")], first, host_ports={"webui_port": 8002})
    assert ports_of(second) == {"a-0": 8003}
    assert "a-0: its port 8002 in the plan in force is now Open WebUI's (webui_port): it moves to 8003" in second["warnings"]


# ---- a deployment's port, for every instance --------------------------------------------------------------------------

def test_every_instance_of_a_deployment_honours_its_port():
    plan = vllm_plan([two_instances("a", port=9100)], HW, "h", GATEWAY)
    assert ports_of(plan) == {"a-0": 9100, "a-1": 9101}
    second = plan["deployments"][0]["instances"][1]
    assert second["args"][second["args"].index("--port") + 1] == "9101"


def test_an_explicit_port_is_reserved_before_automatic_ones_are_given():
    # b's second instance asks for 8003: a (planned first, no port) does not take it and b is not shifted
    plan = vllm_plan([dep("a"), two_instances("b", port=8002)], HW, "h", GATEWAY)
    assert ports_of(plan) == {"a-0": 8004, "b-0": 8002, "b-1": 8003}


def test_a_port_range_past_65535_is_refused():
    plan = vllm_plan([two_instances("a", port=65535)], HW, "h", GATEWAY)
    assert plan["errors"] == ["a: port 65535 with 2 instances (instance k listens on port + k) runs to 65536, past 65535: "
                              "give it a port of at most 65534"]


# ---- collisions, refused with both names -------------------------------------------------------------------------------

def test_two_equal_explicit_ports_are_refused_naming_both():
    plan = vllm_plan([dep("a", port=9000), dep("b", port=9000)], HW, "h", GATEWAY)
    assert plan["errors"] == ["port 9000: a-0 (a: port 9000) and b-0 (b: port 9000) both ask for it on this host; give one of the "
                              "two deployments another port (instance k of a deployment listens on its port + k)"]
    assert all(d["instances"] == [] for d in plan["deployments"])


def test_overlapping_explicit_ranges_are_refused_naming_both():
    plan = vllm_plan([two_instances("a", port=9000), dep("b", port=9001)], HW, "h", GATEWAY)
    assert plan["errors"] == ["port 9001: a-1 (a: port 9000 + 1) and b-0 (b: port 9001) both ask for it on this host; give one of "
                              "the two deployments another port (instance k of a deployment listens on its port + k)"]


def test_an_explicit_port_equal_to_the_gateways_is_refused():
    plan = vllm_plan([dep("a", port=8080)], HW, "h", dict(GATEWAY, host_ports={"gateway_listen": ["8080", "443 ssl"]}))
    assert plan["errors"] == ["port 8080: a-0 (a: port 8080) asks for the port the gateway's nginx (gateway_listen) listens on, on "
                              "this host; give a another port, or set gateway_listen to another"]


@pytest.mark.parametrize("variable, value, what", [
    ("gateway_tls_listen", ["10.0.0.5:8443 ssl"], "the gateway's TLS listener"),
    ("gateway_webui_listen", ["[::]:8443"], "the web UI's nginx front"),
    ("webui_port", 8443, "Open WebUI"),
    ("model_store_share_port", "8443", "the model share of model_store_distribution via_peer"),
])
def test_an_explicit_port_equal_to_another_listener_of_the_host_is_refused(variable, value, what):
    plan = vllm_plan([dep("a", port=8443)], HW, "h", dict(GATEWAY, host_ports={variable: value}))
    assert plan["errors"] == [f"port 8443: a-0 (a: port 8443) asks for the port {what} ({variable}) listens on, on this host; "
                              f"give a another port, or set {variable} to another"]


def test_the_edge_is_named_when_the_instance_has_one():
    plan = vllm_plan([dep("a", port=8443)], HW, "h", {"private_address": "10.0.0.5", "host_ports": {"webui_port": 8443}})
    assert "(the instance listens on 127.0.0.1 and its edge on 10.0.0.5)" in plan["errors"][0]


def test_automatic_ports_skip_the_hosts_other_listeners():
    plan = vllm_plan([dep("a"), dep("b")], HW, "h", dict(GATEWAY, host_ports={"gateway_listen": ["8002"], "webui_port": "8003"}))
    assert ports_of(plan) == {"a-0": 8004, "b-0": 8005}


def test_an_explicit_port_that_another_instance_holds_in_the_plan_in_force_is_refused():
    first = vllm_plan([dep("a")], HW, "h", GATEWAY, {})
    plan = replan([dep("a"), dep("b", port=8002)], first)
    assert plan["errors"] == ["port 8002: b-0 (b: port 8002) asks for it, but a-0 holds it in the plan in force and still runs while "
                              "b-0 starts; give b another port, or first move a-0 (give its deployment another port, or remove it) and "
                              "run serve.yml, then give b this port"]
    # the instance itself may be given the port it holds
    assert ports_of(replan([dep("a", port=8002), dep("b")], first)) == {"a-0": 8002, "b-0": 8003}


def test_collisions_are_per_host():
    for host in ("h1", "h2"):
        assert ports_of(plan_host(host, HW, [dep("a", port=9000)], GATEWAY)) == {"a-0": 9000}


# ---- the pieces -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, ports", [
    (["80"], [80]), ("8080", [8080]), (8765, [8765]),
    (["10.0.0.5:8443 ssl", "[::]:3000", "[::1]", "localhost", "*:81"], [8443, 3000, 80, 80, 81]),
    (["unix:/run/x.sock"], []), ([], []),
])
def test_listen_ports_reads_nginx_listen_values(value, ports):
    assert listen_ports(value, "gateway_listen") == ports


@pytest.mark.parametrize("value", [["10.0.0.5:http"], [True], ["[::]:99999"]])
def test_a_malformed_listen_value_fails_naming_it(value):
    with pytest.raises(PlanError, match="gateway_listen"):
        host_ports({"gateway_listen": value}, "h")


@pytest.mark.parametrize("option", [{"a-0": "8002"}, {"a-0": 80}, ["a-0"]])
def test_a_malformed_ports_in_force_option_fails(option):
    with pytest.raises(PlanError, match="ports_in_force"):
        plan_host("h", HW, [dep("a")], dict(GATEWAY, ports_in_force=option))


def test_assign_ports_on_its_own():
    result = assign_ports([PortAsk("a", ("a-0", "a-1")), PortAsk("b", ("b-0",), 9000)], 8002, {"a-1": 8010}, {8002: ("x", "y")})
    assert result.ports == {"a-0": 8003, "a-1": 8010, "b-0": 9000} and result.errors == []
    assert result.why["a"][0] == "port=8003,8010"


# ---- playbooks/plan.yml ----------------------------------------------------------------------------------------------

def test_plan_yml_falls_back_to_each_listeners_role_default():
    """plan.yml runs no gateway, webui or model_store role, so it repeats their defaults for the host's listeners: the same."""
    root = pathlib.Path(__file__).resolve().parents[4]
    [task] = [t for t in yaml.safe_load((root / "playbooks/plan.yml").read_text())[0]["tasks"] if "__plan_host_ports" in t.get("vars", {})]
    fallbacks = dict(re.findall(r"\b([a-z_]+) \| default\(([^()]*)\)", " ".join(task["vars"]["__plan_host_ports"].values())))
    assert set(HOST_PORT_USERS) == set(task["vars"]["__plan_host_ports"])
    assert set(fallbacks) == set(HOST_PORT_USERS) | {"gateway_tls_mode", "model_store_distribution"}
    defaults = {}
    for role in ("gateway", "webui", "model_store"):
        defaults.update(yaml.safe_load((root / "roles" / role / "defaults/main.yml").read_text()))
    for name, text in fallbacks.items():
        assert yaml.safe_load(text.replace("'", '"')) == defaults[name], f"plan.yml's default for {name} is not its role's"
