"""_plan.base and _plan.inputs on their own: the host's options as HostOptions, the deployment checks, stage 1."""

from __future__ import annotations

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.base import Ctx, PlanError, Refusal, slug
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.inputs import (
    DEPLOYMENT_DOC, PLAN_OPTIONS, check_deployments, check_host, read_request,
)
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.stages import HostOptions

CPU_HW = {"accelerators": [], "links": None, "numa_cpus": {0: "0-3"}, "cpu_count": 4, "memory_mib": 16384, "driver_version": None}


def test_check_host_gives_typed_options_and_leaves_the_mapping_alone():
    options = {"base_port": "9000", "gateway_on_host": True, "model_root": "/srv/models"}
    before = dict(options)
    hw, opts = check_host("h", CPU_HW, options)
    assert options == before, "the caller's options are not mutated"
    assert isinstance(opts, HostOptions) and opts.base_port == 9000          # -e arrives as a string
    assert (opts.edge_address, opts.model_root) == (None, "/srv/models") and "gateway runs on this host" in opts.bind_why
    assert hw["accelerators"] == []


def test_check_host_defaults_are_the_documented_ones():
    _hw, opts = check_host("h", CPU_HW, None)
    assert str(opts.base_port) in DEPLOYMENT_DOC["options.base_port"]
    assert opts.model_root in DEPLOYMENT_DOC["options.model_root"]


@pytest.mark.parametrize("options, hardware, message", [
    ({"colour": 1}, {"accelerators": "x"}, r"unknown planner options \['colour'\]"),     # options are checked before hardware
    ({"base_port": 1023}, CPU_HW, r"a port between 1024 and 65535"),
    ({"base_port": True}, CPU_HW, r"a port between 1024 and 65535"),
    ({"model_root": "models"}, CPU_HW, r"an absolute folder"),
    ({}, {"accelerators": "x"}, r"llmfleet_hardware"),
])
def test_check_host_refuses_malformed_input_naming_the_value(options, hardware, message):
    with pytest.raises(PlanError, match=message):
        check_host("h", hardware, options)


def test_every_plan_option_is_a_host_options_field_or_its_source():
    fields = set(HostOptions.__dataclass_fields__)
    # gateway_on_host and private_address become edge_address and bind_why (_host_needs.edge_address)
    assert PLAN_OPTIONS - fields == {"gateway_on_host", "private_address"}


def test_names_are_dns_labels():
    """RFC 1035: a label has at most 63 characters; instance names become container and unit names."""
    assert slug("a" * 63) and not slug("a" * 64) and not slug("Upper") and not slug("-lead")


def test_read_request_takes_the_override_over_the_workload_and_says_the_oldest():
    [d] = check_deployments([{"name": "d", "model": "Qwen/Qwen3-8B", "engine": {"version": "0.26.0"},
                              "workload": {"max_model_len": 8192}, "overrides": {"max_model_len": 4096}}], "h")
    req = read_request(d, Ctx([]))
    assert req.max_model_len == 4096 and req.concurrency == 8
    [old] = check_deployments([{"name": "d", "model": "Qwen/Qwen3-8B", "engine": {"version": "0.8.4"}}], "h")
    with pytest.raises(Refusal, match=r"older than 0.8.5"):
        read_request(old, Ctx([]))


def test_check_deployments_copies_and_refuses_a_planned_flag():
    deps = [{"name": "d", "model": "Qwen/Qwen3-8B", "engine": {"version": "0.26.0"}}]
    [copy] = check_deployments(deps, "h")
    assert copy == deps[0] and copy is not deps[0]
    with pytest.raises(PlanError, match=r"sets --max-model-len, which the planner decides: set overrides.max_model_len"):
        check_deployments([dict(deps[0], extra_args=["--max-model-len=9"])], "h")
    assert hardware_profile("h200x1")["accelerators"]    # the profiles the other stage tests plan on exist


@pytest.mark.parametrize("arg,named", [("--max_model_len=9", "--max-model-len"), ("--no-enforce-eager", "--enforce-eager"),
                                       ("--pipeline-parallel-size=2", "--pipeline-parallel-size"),
                                       ("--load_format=mistral", "--load-format")])
def test_a_planned_flag_is_refused_in_every_spelling_vllms_parser_takes(arg, named):
    """vLLM's parser reads `_` for `-` and --no-<switch> for a switch turned off: the plan's own flags cannot come back
    through extra_args in another spelling and replace what the plan sized."""
    deps = [{"name": "d", "model": "Qwen/Qwen3-8B", "engine": {"version": "0.26.0"}}]
    with pytest.raises(PlanError, match=f"sets {named}, which the planner decides"):
        check_deployments([dict(deps[0], extra_args=[arg])], "h")


def test_a_layout_flag_the_planner_does_not_plan_is_refused_in_extra_args():
    deps = [{"name": "d", "model": "Qwen/Qwen3-8B", "engine": {"version": "0.26.0"}}]
    with pytest.raises(PlanError, match="sets --data-parallel-size, which changes how many GPUs an instance spans"):
        check_deployments([dict(deps[0], extra_args=["--data_parallel_size=2"])], "h")
