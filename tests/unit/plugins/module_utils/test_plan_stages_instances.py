"""_plan.instances and _plan.compose on their own: ports, the plan hash, and the composer's typed inputs."""

from __future__ import annotations

from ansible_collections.llmfleet.serving.plugins.module_utils._hardware import validate_hardware
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.compose import plan_deployment, plan_host
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.inputs import check_deployments
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.instances import _hashed, _port_of
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.stages import HostOptions
from llmfleet_testing import accepting

OPTS = HostOptions(bind_why="the gateway runs on this host", base_port=9000)


def test_ports_start_at_the_base_and_skip_used_ones():
    assert _port_of({}, 9000, {9000, 9001}) == 9002
    assert _port_of({"port": 8100}, 9000, set()) == 8100


def test_the_plan_hash_ignores_reasons_and_the_drain_timeout():
    """Restarting an engine because a reason's wording or the change path's wait changed would be a needless outage."""
    one = _hashed({"name": "a", "args": ["x"], "reasons": [1], "drain_timeout_s": 120})
    two = _hashed({"name": "a", "args": ["x"], "reasons": [2], "drain_timeout_s": 30})
    three = _hashed({"name": "a", "args": ["y"], "reasons": [1], "drain_timeout_s": 120})
    assert one["plan_hash"] == two["plan_hash"] != three["plan_hash"]


def test_the_composer_reads_typed_options_and_a_mapping_alike():
    hw = validate_hardware(hardware_profile("h200_sxm_8x"), source="test")
    [d] = check_deployments([{"name": "d", "model": "Qwen/Qwen3-8B", "engine": {"version": "0.26.0"}, "gpus": 2}], "h")
    typed = plan_deployment(d, hw, "h", {}, frozenset({9000}), OPTS)
    as_mapping = {"bind_why": OPTS.bind_why, "base_port": 9000}
    mapping = plan_deployment(d, hw, "h", {}, frozenset({9000}), as_mapping)
    assert typed == mapping and typed.ports == [9001, 9002] and typed.gpus == [0, 1]
    args = typed.deployment["instances"][0]["args"]
    assert args[args.index("--port") + 1] == "9001"


def test_plan_host_leaves_the_callers_options_alone():
    options = {"base_port": "9100", "gateway_on_host": True}
    plan = plan_host("h", hardware_profile("h200x1"), [{"name": "d", "model": "Qwen/Qwen3-8B", "engine": {"version": "0.26.0"}}],
                     options)
    assert options == {"base_port": "9100", "gateway_on_host": True}
    assert plan["errors"] == [] and plan["deployments"][0]["instances"][0]["port"] == 9100


def _grace_plan(version, overrides=None):
    hw = validate_hardware(hardware_profile("h200_sxm_8x"), source="test")
    deployment = {"name": "d", "model": "Qwen/Qwen3-8B", "engine": accepting(version), "gpus": 1}
    if overrides:
        deployment["overrides"] = overrides
    return plan_host("h", hw, [deployment], {"base_port": 9000, "gateway_on_host": True})


def test_the_engine_gets_its_own_shutdown_grace_where_the_version_has_it_and_the_stop_outlasts_it():
    """From vLLM 0.18 (--shutdown-timeout) a stop lets the engine finish what it holds; the runtime waits longer than that
    grace before it kills. 0.17 has no such flag: none is written, and its plan does not change (no needless restart)."""
    new = _grace_plan("0.26.0")["deployments"][0]["instances"][0]
    args = new["args"]
    assert args[args.index("--shutdown-timeout") + 1] == str(new["shutdown_timeout_s"]) == "30"
    assert new["stop_timeout_s"] > new["shutdown_timeout_s"]
    assert any(r["decision"] == "shutdown_timeout_s=30" and "PR #34730" in r["why"] for r in new["reasons"])
    old = _grace_plan("0.17.0")["deployments"][0]["instances"][0]
    assert "--shutdown-timeout" not in old["args"] and old["shutdown_timeout_s"] == 0 and old["stop_timeout_s"] == 30
    # the grace is in the command line and the stop timeout; the field alone changes nothing that runs
    unhashed = {k: v for k, v in old.items() if k != "plan_hash"}
    assert _hashed(dict(unhashed, shutdown_timeout_s=99))["plan_hash"] == old["plan_hash"]


def test_the_grace_can_be_set_or_turned_off_and_is_refused_where_the_engine_has_none():
    longer = _grace_plan("0.26.0", {"shutdown_timeout_s": 300})["deployments"][0]["instances"][0]
    assert longer["args"][longer["args"].index("--shutdown-timeout") + 1] == "300" and longer["stop_timeout_s"] == 330
    off = _grace_plan("0.26.0", {"shutdown_timeout_s": 0})["deployments"][0]["instances"][0]
    assert "--shutdown-timeout" not in off["args"] and off["stop_timeout_s"] == 30
    refused = _grace_plan("0.17.0", {"shutdown_timeout_s": 60})
    assert refused["errors"] and "vLLM 0.17.0 has no --shutdown-timeout" in refused["errors"][0]
    assert "overrides.shutdown_timeout_s must be a whole number" in _grace_plan("0.26.0", {"shutdown_timeout_s": "60"})["errors"][0]
