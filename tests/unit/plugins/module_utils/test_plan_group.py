"""Issue 38, the planner's side of a deployment over several hosts (`hosts: <inventory group>`): the 2 x 8-GPU layouts of
DeepSeek-V3-class and Qwen3-235B-class models on H100 and H200 (TP inside each host, PP across), memory per rank from the
same memory model as one host (Sizer with the stage's layers), each rank's command line and environment, the refusals that
name the host or value at fault, and the hint that names the group that would hold a model. Config numbers come from the
model cards (tests/fixtures/models, each naming its source)."""

from __future__ import annotations

import copy
import re

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._models import profile_from_config
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import PlanError, plan_host, summary_table
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.base import Ctx
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.sizer import Sizer, gpu_budget, stage_view
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.stages import Placement, Request
from ansible_collections.llmfleet.serving.plugins.module_utils._engine import parse_version

from test_plan_layout_load import dep, fixture

DEEPSEEK_V3 = {"id": "deepseek-ai/DeepSeek-V3", "config": fixture("deepseek-v3.json")}
KIMI_K2 = {"id": "moonshotai/Kimi-K2-Instruct", "config": fixture("kimi-k2-instruct.json")}
QWEN3_235B_FP8 = {"id": "Qwen/Qwen3-235B-A22B-FP8", "config": fixture("qwen3-235b-a22b-fp8.json")}


def members(d, hw, count=2, **per_host):
    """The group's members as playbooks/plan.yml hands them over: g1..gN at 10.0.0.1..N on ens1, each with the deployment."""
    out = [{"host": f"g{k + 1}", "address": f"10.0.0.{k + 1}", "interface": "ens1", "hardware": hw, "deployment": d}
           for k in range(count)]
    for host, changes in per_host.items():
        out[int(host[1:]) - 1].update(changes)
    return out


def group_plan(model, profile, host="g1", count=2, version="0.26.0", per_host=None, options=None, **extra):
    hw = hardware_profile(profile) if isinstance(profile, str) else profile
    d = dep(model, version, hosts="big", **extra)
    view = {"group": "big", "members": members(d, hw, count, **(per_host or {}))}
    return plan_host(host, hw, [d], {"groups": {"d": view}, **(options or {})})


def only(plan):
    assert plan["errors"] == [], plan["errors"]
    (inst,) = plan["deployments"][0]["instances"]
    return inst


def reason(inst, prefix):
    return next(r["why"] for r in inst["reasons"] if r["decision"].startswith(prefix))


def arg(inst, flag):
    return inst["args"][inst["args"].index(flag) + 1]


@pytest.mark.parametrize("model,profile,single_fits", [
    (DEEPSEEK_V3, "h100_sxm_8x", False),      # 671B FP8: 78 GiB a GPU at TP=8 on one H100 host, no KV left
    (KIMI_K2, "h100_sxm_8x", False),          # 1T FP8 on DeepseekV3ForCausalLM: 120 GiB a GPU on one H100 host
    (DEEPSEEK_V3, "h200_sxm_8x", True),       # one H200 host holds it: the group is planned, with a warning
    (QWEN3_235B_FP8, "h100_sxm_8x", True),
    ("Qwen/Qwen3-235B-A22B", "h100_sxm_8x", True),
    ("Qwen/Qwen3-235B-A22B", "h200_sxm_8x", True),
])
def test_two_hosts_of_eight_gpus_run_tp8_inside_and_pp2_across_with_the_memory_of_one_stage(model, profile, single_fits):
    head, worker = only(group_plan(model, profile)), only(group_plan(model, profile, host="g2"))
    for inst in (head, worker):
        assert (inst["tensor_parallel_size"], inst["pipeline_parallel_size"]) == (8, 2)
        assert inst["gpus"] == list(range(8))
        assert arg(inst, "--tensor-parallel-size") == "8" and arg(inst, "--pipeline-parallel-size") == "2"
        assert arg(inst, "--nnodes") == "2" and arg(inst, "--master-addr") == "10.0.0.1" and arg(inst, "--master-port") == "29501"
    assert arg(head, "--node-rank") == "0" and "--headless" not in head["args"] and head["port"] == 8002
    assert arg(worker, "--node-rank") == "1" and "--headless" in worker["args"]
    # the headless rank serves no API: no port, no edge, no --host/--port
    assert worker["port"] is None and worker["edge"] is None and "--port" not in worker["args"] and "--host" not in worker["args"]
    # both ranks plan the same engine: the same memory and limits on every GPU
    for key in ("max_model_len", "max_num_seqs", "kv_cache_dtype", "memory"):
        assert head[key] == worker[key], key
    # memory per GPU is the memory model's for one stage of TP=8 (half the layers, one vocabulary matrix)
    m = profile_from_config(model["config"], model["id"]) if isinstance(model, dict) else None
    if m is not None:
        hw = hardware_profile(profile)
        req = Request("d", parse_version("0.26.0"), {}, {}, "throughput", 8, "auto")
        p = Placement(list(range(8)), hw["accelerators"], "nvidia", "sm90", 90)
        sizer = Sizer(m, "nvidia", req, gpu_budget(req, p, False, Ctx([])), "bfloat16", False, None, 90)
        mem = sizer.evaluate(8, head["kv_cache_dtype"], 2)[0]
        assert head["memory"]["weights_gib_per_gpu"] == pytest.approx(mem.weights / 2 ** 30, abs=0.01)
        assert stage_view(m, 2).num_layers == -(-m.num_layers // 2)
        assert head["memory"]["weights_gib_per_gpu"] < 0.55 * m.weight_bytes / 8 / 2 ** 30
    fits_one = [w for w in group_plan(model, profile)["warnings"] if "fits on one host of group big" in w]
    assert bool(fits_one) == single_fits
    single = plan_host("x", hardware_profile(profile), [dep(model)])
    assert bool(single["errors"]) != single_fits


def test_each_rank_meets_the_others_on_its_private_address_and_interface():
    head, worker = only(group_plan(DEEPSEEK_V3, "h100_sxm_8x")), only(group_plan(DEEPSEEK_V3, "h100_sxm_8x", host="g2"))
    assert {k: head["env"][k] for k in ("VLLM_HOST_IP", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")} == \
        {"VLLM_HOST_IP": "10.0.0.1", "GLOO_SOCKET_IFNAME": "ens1", "NCCL_SOCKET_IFNAME": "=ens1"}
    assert worker["env"]["VLLM_HOST_IP"] == "10.0.0.2"
    assert head["group"] == {"name": "big", "nnodes": 2, "rank": 0, "head": "g1", "hosts": ["g1", "g2"],
                             "addresses": {"g1": "10.0.0.1", "g2": "10.0.0.2"}, "master_addr": "10.0.0.1", "master_port": 29501,
                             "interface": "ens1"}
    assert worker["group"]["rank"] == 1 and worker["headless"] is True and head["headless"] is False
    # the API stays on loopback behind the edge; the unauthenticated rank ports get a warning naming the fix
    assert arg(head, "--host") == "127.0.0.1"
    plan = group_plan(DEEPSEEK_V3, "h100_sxm_8x")
    assert any("29501/tcp on g1" in w and "host firewall" in w for w in plan["warnings"])


def test_the_headless_rank_takes_no_port_and_the_plan_table_shows_its_rank():
    plan = group_plan(DEEPSEEK_V3, "h100_sxm_8x", host="g2")
    assert plan["ports"] == {}
    row = next(line for line in summary_table(plan) if line.startswith("d-0"))
    assert " r1 " in row
    head = group_plan(DEEPSEEK_V3, "h100_sxm_8x")
    assert head["ports"] == {"d-0": 8002}


def test_a_group_that_cannot_hold_the_model_is_refused_with_the_group_that_would():
    # 671B of FP8 on 2 x 8 RTX 4090 (24 GiB): 43 GiB of weights a GPU
    plan = group_plan(DEEPSEEK_V3, "rtx4090_8x_pcie")
    assert plan["errors"] and "does not fit on the 2 hosts of group big (2 x 8 x 24 GiB GPUs)" in plan["errors"][0]
    need = plan["deployments"][0]["refusal"]
    assert need["reason"] == "needs_more_hosts" and need["hosts"] == 5
    assert f"a group of {need['hosts']} hosts of these" in plan["errors"][0]
    # and that group holds it
    assert not group_plan(DEEPSEEK_V3, "rtx4090_8x_pcie", count=need["hosts"])["errors"]
    # where no group up to the hint's limit does, the refusal says so
    none = group_plan("Qwen/Qwen3-235B-A22B", "t4x4")
    assert "no group of up to 8 such hosts" in none["errors"][0] and "refusal" not in none["deployments"][0]


def test_a_model_too_big_for_one_host_of_another_type_on_a_pipeline_class_gets_the_hosts_hint():
    plan = plan_host("x", hardware_profile("h100_sxm_8x"), [dep(KIMI_K2)])
    assert "2 hosts of these (2 x 8 GPUs: TP=8 inside each host x PP=2" in plan["errors"][0]


@pytest.mark.parametrize("change,words", [
    ({"per_host": {"g2": {"hardware": hardware_profile("h200_sxm_8x")}}}, ["the hosts of group big differ", "g2 has 8 x"]),
    ({"per_host": {"g2": {"interface": None}}}, ["g2: llmfleet_private_interface=None"]),
    ({"per_host": {"g2": {"interface": "eth0; rm"}}}, ["g2: llmfleet_private_interface="]),
    ({"per_host": {"g2": {"address": "203.0.113.9"}}}, ["g2: llmfleet_private_address='203.0.113.9' is not a private"]),
    ({"per_host": {"g2": {"address": "10.0.0.1"}}}, ["give the same llmfleet_private_address"]),
    ({"per_host": {"g2": {"hardware": None}}}, ["g2 (group big) was not planned in this run"]),
    ({"count": 1}, ["a group of 1 host"]),
    ({"version": "0.11.0"}, ["--nnodes and --node-rank arrived in 0.11.1"]),
    ({"gpus": [0, 1, 2, 3]}, ["every rank of a multi-host deployment holds all GPUs"]),
    ({"host": "g9"}, ["g9 carries this deployment (hosts=big) but is not in group big", "group_vars/big only"]),
    ({"per_host": {"g2": {"deployment": None}}}, ["g2 is in group big but has no deployment d"]),
    ({"per_host": {"g2": {"hardware": {"accelerators": [], "cpu_count": 8, "memory_mib": 65536}}}},
     ["g1 has 8 x NVIDIA H100 80GB HBM3 (81559 MiB), g2 has no GPU"]),
    ({"overrides": {"instances": 2}}, ["overrides.instances with hosts=big"]),
    ({"extra_args": ["--distributed-executor-backend", "ray"]}, ["--distributed-executor-backend with hosts=big", "which Ray does not take"]),
    ({"extra_args": ["--api-server-count=2"]}, ["extra_args --api-server-count with hosts=big", "runs --headless", "remove it"]),
    ({"overrides": {"tensor_parallel_size": 3}}, ["overrides.tensor_parallel_size=3 cannot be used on group big"]),
    ({"extra_env": {"GLOO_SOCKET_IFNAME": "eth9"}}, ["extra_env sets GLOO_SOCKET_IFNAME"]),
])
def test_a_group_that_cannot_run_as_one_engine_is_refused_naming_the_host_and_value(change, words):
    change = dict(change)
    plan = group_plan(DEEPSEEK_V3, "h100_sxm_8x", **change)
    assert plan["errors"], plan
    for word in words:
        assert word in plan["errors"][0], plan["errors"][0]
    assert plan["deployments"][0]["instances"] == []


def test_a_member_that_defines_the_deployment_differently_is_named_with_the_key():
    hw = hardware_profile("h100_sxm_8x")
    d = dep(DEEPSEEK_V3, hosts="big")
    other = copy.deepcopy(d)
    other["engine"]["version"] = "0.25.0"
    view = {"group": "big", "members": members(d, hw, 2, g2={"deployment": other})}
    plan = plan_host("g1", hw, [d], {"groups": {"d": view}})
    assert "g2 defines this deployment differently from g1 (at engine.version)" in plan["errors"][0]


def test_a_deployment_naming_a_group_the_run_did_not_hand_over_is_refused():
    hw = hardware_profile("h100_sxm_8x")
    plan = plan_host("g1", hw, [dep(DEEPSEEK_V3, hosts="big")])
    assert "this run gave the planner no members of it" in plan["errors"][0]


@pytest.mark.parametrize("bad", ["", "a b", 7, "x/y"])
def test_hosts_must_name_an_inventory_group(bad):
    with pytest.raises(PlanError, match=r"\.hosts="):
        plan_host("g1", hardware_profile("h100_sxm_8x"), [dep(DEEPSEEK_V3, hosts=bad)])


@pytest.mark.parametrize("flag", ["--nnodes", "--node-rank", "--master-addr", "--master-port", "--headless"])
def test_extra_args_may_not_set_the_ranks(flag):
    with pytest.raises(PlanError, match=f"{flag}.*set the deployment's `hosts` key to an inventory group instead"):
        group_plan(DEEPSEEK_V3, "h100_sxm_8x", extra_args=[flag, "1"] if flag != "--headless" else [flag])


def test_malformed_groups_option_is_refused():
    with pytest.raises(PlanError, match="groups"):
        plan_host("g1", hardware_profile("h100_sxm_8x"), [dep(DEEPSEEK_V3)], {"groups": {"d": {"members": "g1,g2"}}})


CPU_HOST = {"accelerators": [], "numa_cpus": {0: "0-1"}, "cpu_count": 2, "memory_mib": 24576}


def test_two_cpu_hosts_run_one_pipeline_stage_each_compiled_with_a_compiler():
    head = only(group_plan("Qwen/Qwen3-0.6B", CPU_HOST, version="0.32.0"))
    worker = only(group_plan("Qwen/Qwen3-0.6B", CPU_HOST, host="g2", version="0.32.0"))
    for inst in (head, worker):
        assert inst["tensor_parallel_size"] == 1 and inst["pipeline_parallel_size"] == 2
        assert arg(inst, "--pipeline-parallel-size") == "2" and arg(inst, "--nnodes") == "2"
        # eager with PP > 1 fails the first request on the CPU build: compiled, with g++ to compile
        assert "--enforce-eager" not in inst["args"] and inst["enforce_eager"] is False
        assert "g++" in inst["os_packages"]
        assert "NCCL_SOCKET_IFNAME" not in inst["env"]
    assert head["env"]["VLLM_HOST_IP"] == "10.0.0.1" and worker["env"]["GLOO_SOCKET_IFNAME"] == "ens1"
    assert "--headless" in worker["args"] and worker["port"] is None
    # each host holds one stage: about half the weights of the whole model on one host
    single = only(plan_host("x", CPU_HOST, [dep("Qwen/Qwen3-0.6B", "0.32.0")]))
    assert head["memory"]["weights_gib"] < 0.75 * single["memory"]["weights_gib"]
    assert "--enforce-eager" in single["args"]
    plan = group_plan("Qwen/Qwen3-0.6B", CPU_HOST, version="0.32.0", overrides={"enforce_eager": True})
    assert "overrides.enforce_eager with hosts=big" in plan["errors"][0]


def test_a_deployment_of_one_host_plans_as_before():
    """No `hosts`: no group fields, the loopback pins, the same command line (the plan hash of every existing instance is
    unchanged, so nothing restarts on upgrade)."""
    inst = plan_host("x", hardware_profile("h100_sxm_8x"), [dep("Qwen/Qwen3-8B")])["deployments"][0]["instances"][0]
    assert "group" not in inst and "headless" not in inst
    assert "--nnodes" not in inst["args"] and inst["env"]["VLLM_HOST_IP"] == "127.0.0.1"


def _fleet():
    """Both members' plans of the DeepSeek-V3 group, as the consumers read the fleet's plans (the gateway elsewhere)."""
    return {h: group_plan(DEEPSEEK_V3, "h100_sxm_8x", host=h, options={"private_address": f"10.0.0.{h[1:]}"}) for h in ("g1", "g2")}


def test_every_consumer_of_the_api_sees_the_head_rank_only():
    from ansible_collections.llmfleet.serving.plugins.module_utils import _bench, _gateway, _monitoring, _reach, _rollout, _rotation, _verify
    plans = _fleet()
    assert plans["g1"]["errors"] == [] and plans["g2"]["errors"] == []
    model = _gateway.gateway_model(plans, "gw")
    servers = [s for up in model["upstreams"] for s in up["servers"]]
    assert [s["address"] for s in servers] == ["10.0.0.1:8002"], servers
    assert [t["instance"] for t in _verify.instance_targets(plans["g2"])] == []
    assert [t["instance"] for t in _verify.instance_targets(plans["g1"])] == ["d-0"]
    scraped, _warnings = _monitoring.plan_instances(plans)
    assert [(i.host, i.name) for i in scraped] == [("g1", "d-0")]
    assert _rotation.planned(plans) == ["g1/d-0"]
    assert _rollout.peers(plans, "g1", "d-0") == []
    assert _bench.client_hosts(plans) == {"d": "g1"}
    assert _reach.chat_models(plans) == ["d"]
    assert _gateway.edge_model(plans["g2"], ["10.0.0.9"])["servers"] == []


KEY = "k" * 48


def _cpu_fleet(**extra):
    """Both members' plans of a two-host CPU group (the lab's case: pipeline stages over the two, vLLM 0.32.0)."""
    return _fleet_of("Qwen/Qwen3-0.6B", {"g1": CPU_HOST, "g2": CPU_HOST}, "0.32.0", **extra)


def test_the_vllm_role_renders_the_head_with_its_api_and_the_other_ranks_headless_without_a_key():
    from ansible_collections.llmfleet.serving.plugins.filter.serving import vllm_group_ranks, vllm_instances
    plans = _cpu_fleet()
    (head,) = vllm_instances(plans["g1"], KEY, {"runtime": "systemd"})
    (rank1,) = vllm_instances(plans["g2"], KEY, {"runtime": "systemd"})
    assert head["url"].startswith("http://127.0.0.1:") and not head["headless"] and head["group"]["rank"] == 0
    assert f'VLLM_API_KEY="{KEY}"' in head["env_text"] and "--node-rank 0" in head["unit_text"]
    assert rank1["url"] is None and rank1["port"] is None and rank1["headless"]
    assert "VLLM_API_KEY" not in rank1["env_text"] and KEY not in rank1["unit_text"], "a headless rank holds no key"
    assert "--headless" in rank1["unit_text"] and "--port" not in rank1["unit_text"] and "--host " not in rank1["unit_text"]
    assert "rank 1 of 2 (group big, head g1)" in rank1["unit_text"]
    assert rank1["files"] == ["/etc/llmfleet/vllm/d-0.env", "/etc/systemd/system/llmfleet-vllm-d-0.service"]
    # the head starts the other ranks from their own hosts' plans
    (theirs,) = vllm_group_ranks({"g2": plans["g2"]}, head, KEY, {"runtime": "systemd"})
    assert theirs["host"] == "g2" and theirs["unit_text"] == rank1["unit_text"] and theirs["env_text"] == rank1["env_text"]


@pytest.mark.parametrize("edit,words", [
    (lambda inst: inst["group"].update(rank=0), "g2's plan disagrees with the head's on group big: rank 0 where it is host 1"),
    (lambda inst: inst["group"].update(master_addr="10.0.0.9"), "master_addr '10.0.0.9' where the head's plan has '10.0.0.1'"),
    (lambda inst: inst["group"]["addresses"].update(g2="10.0.0.7"), "addresses {'g1': '10.0.0.1', 'g2': '10.0.0.7'} where the head's"),
    (lambda inst: inst.update(headless=False), "a rank that serves the API (only rank 0 does)"),
])
def test_a_rank_whose_plan_disagrees_with_the_heads_is_refused_naming_the_host_and_value(edit, words):
    from ansible.errors import AnsibleFilterError
    from ansible_collections.llmfleet.serving.plugins.filter.serving import vllm_group_ranks, vllm_instances
    plans = _cpu_fleet()
    (head,) = vllm_instances(plans["g1"], KEY, {"runtime": "systemd"})
    other = copy.deepcopy(plans["g2"])
    edit(other["deployments"][0]["instances"][0])
    with pytest.raises(AnsibleFilterError, match=re.escape(words)):
        vllm_group_ranks({"g2": other}, head, KEY, {"runtime": "systemd"})
    other = copy.deepcopy(plans["g2"])
    other["deployments"][0]["engine_version"] = "0.31.0"
    with pytest.raises(AnsibleFilterError, match=r"vLLM 0.31.0 where the head runs 0.32.0 \(one engine, one version\)"):
        vllm_group_ranks({"g2": other}, head, KEY, {"runtime": "systemd"})
    with pytest.raises(AnsibleFilterError, match=r"g2, rank 1 of group big, has no plan in the plan files: run playbooks/plan.yml"):
        vllm_group_ranks({}, head, KEY, {"runtime": "systemd"})


def test_every_rank_exchanges_packets_with_loopback_and_the_groups_members_only():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.llmfleet.serving.plugins.filter.serving import vllm_instances
    from ansible_collections.llmfleet.serving.plugins.module_utils import _serving as serving
    plans = _cpu_fleet()
    allow = "IPAddressAllow=127.0.0.0/8 ::1/128 10.0.0.1 10.0.0.2"
    for host in ("g1", "g2"):
        (inst,) = vllm_instances(plans[host], KEY, {"runtime": "systemd"})
        lines = inst["unit_text"].splitlines()
        assert "IPAddressDeny=any" in lines and allow in lines, inst["unit_text"]
    # an instance of one host keeps its unit as it was: it listens on loopback only, behind the edge
    (single,) = vllm_instances(plan_host("g1", CPU_HOST, [dep("Qwen/Qwen3-0.6B", "0.32.0")]), KEY, {"runtime": "systemd"})
    assert "IPAddress" not in single["unit_text"]
    other = copy.deepcopy(plans["g2"])
    other["deployments"][0]["instances"][0]["group"]["addresses"]["g1"] = "head.example"
    with pytest.raises(AnsibleFilterError, match=r"g1's address 'head.example' in the plan's group big is not an IP address"):
        vllm_instances(other, KEY, {"runtime": "systemd"})
    other["deployments"][0]["instances"][0]["group"]["addresses"].pop("g1")
    with pytest.raises(AnsibleFilterError, match=r"has no address for each of its hosts"):
        vllm_instances(other, KEY, {"runtime": "systemd"})
    assert serving.group_allow({"group": {"hosts": ["a", "b"], "addresses": {"a": "fd00::1", "b": "fd00::1"}}}) == [
        "127.0.0.0/8", "::1/128", "fd00::1"]


def test_ranks_run_as_units_the_docker_runtime_is_refused_for_them():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.llmfleet.serving.plugins.filter.serving import vllm_instances
    plans = _fleet()
    with pytest.raises(AnsibleFilterError, match=r"set vllm_runtime: systemd for the group's hosts"):
        vllm_instances(plans["g1"], KEY, {"runtime": "docker"})


def test_member_states_say_which_ranks_run_and_which_make_the_head_restart_the_group():
    from ansible_collections.llmfleet.serving.plugins.filter.serving import vllm_rank_invocations, vllm_rank_states

    def shown(host, active="active", enabled="enabled", restarts="0", invocation=None, ingress="1024"):
        return {"item": {"host": host}, "stdout_lines": [f"ActiveState={active}", f"UnitFileState={enabled}", f"NRestarts={restarts}",
                                                         f"InvocationID={invocation or host + '-id'}", f"IPIngressBytes={ingress}"]}
    results = [shown("g1"), shown("g2", ingress="[no data]"), shown("g3", active="activating", restarts="3", ingress="[no data]"),
               shown("g4", enabled="disabled"),
               # started again alone since the last passed gate (a reboot, a person, systemd): another process
               shown("g5", invocation="g5-new"), shown("g6", restarts="1", ingress="0")]
    recorded = {h: h + "-id" for h in ("g1", "g2", "g3", "g4", "g5", "g6")}
    states = vllm_rank_states(results, recorded)
    # unfiltered: a running rank whose unit counted no packet after the gate - no counters ("[no data]"), or counters made
    # but not attached (0) - so no IPAddressAllow filter either (the same cgroup BPF programs); a stopped rank is said as such
    assert states == {"running": ["g1", "g2", "g4", "g5", "g6"], "stopped": ["g3"], "crashed": ["g3", "g6"],
                      "down": ["g3", "g4", "g5"], "unfiltered": ["g2", "g6"]}
    # no record (a group never gated by the role): every member is restarted once
    assert vllm_rank_states(results)["down"] == ["g1", "g2", "g3", "g4", "g5", "g6"]
    # what the head records once the gate passed: the processes that run
    assert vllm_rank_invocations(results) == {"g1": "g1-id", "g2": "g2-id", "g4": "g4-id", "g5": "g5-new", "g6": "g6-id"}


def test_a_disagreeing_rank_is_said_by_a_check_that_may_show_it():
    from ansible_collections.llmfleet.serving.plugins.filter.serving import vllm_group_ranks, vllm_instances
    plans = _cpu_fleet()
    (head,) = vllm_instances(plans["g1"], KEY, {"runtime": "systemd"})
    assert vllm_group_ranks({"g2": plans["g2"]}, head, KEY, {"runtime": "systemd"}, check=True) == ""
    other = copy.deepcopy(plans["g2"])
    other["deployments"][0]["engine_version"] = "0.31.0"
    said = vllm_group_ranks({"g2": other}, head, KEY, {"runtime": "systemd"}, check=True)
    assert said.startswith("d-0: g2's plan disagrees with the head's on group big: vLLM 0.31.0") and "run playbooks/plan.yml" in said
    # each rank from its own host's settings (its __vllm_settings), not the head's
    theirs = {"g2": {"__vllm_settings": {"runtime": "systemd", "env_dir": "/srv/env", "user": "engine"}}}
    (rank,) = vllm_group_ranks({"g2": plans["g2"]}, head, KEY, {"runtime": "systemd"}, theirs)
    assert rank["env_path"] == "/srv/env/d-0.env" and rank["keys_group"] == "engine" and "User=engine" in rank["unit_text"]


def test_a_group_name_the_inventory_lacks_is_refused_as_such():
    hw = hardware_profile("h100_sxm_8x")
    plan = plan_host("g1", hw, [dep(DEEPSEEK_V3, hosts="big")], {"groups": {"d": {"group": "big", "members": []}}})
    assert "the inventory has no group big" in plan["errors"][0]


def _fleet_of(model, hardware, version="0.26.0", **extra):
    """Each member's own plan of one group, its hardware per host: what playbooks/plan.yml holds before its group check."""
    d = dep(model, version, hosts="big", **extra)
    view = {"group": "big", "members": [{"host": h, "address": f"10.0.0.{k + 1}", "interface": "ens1", "hardware": hw, "deployment": d}
                                        for k, (h, hw) in enumerate(hardware.items())]}
    return {h: plan_host(h, hw, [d], {"groups": {"d": view}}) for h, hw in hardware.items()}


def test_ranks_that_plan_different_layouts_are_stopped_before_any_plan_file_naming_the_words():
    from ansible_collections.llmfleet.serving.plugins.module_utils._fleet_plans import group_problems
    nvswitch = hardware_profile("h100_sxm_8x")
    # the same 8 H100s, linked in pairs only: the planner keeps TP inside a pair there
    pairs = dict(nvswitch, links=[["X" if i == j else ("NV18" if i // 2 == j // 2 else "SYS") for j in range(8)] for i in range(8)])
    plans = _fleet_of("Qwen/Qwen3-32B", {"g1": nvswitch, "g2": pairs})
    assert plans["g1"]["errors"] == [] and plans["g2"]["errors"] == []
    (problem,) = group_problems(plans)
    assert problem.startswith("d (hosts=big): g2 plans `--tensor-parallel-size") and "where g1 plans" in problem
    assert "put only identical hosts in the group" in problem
    # CPU hosts of different memory: different limits on each rank
    small, big = dict(CPU_HOST, memory_mib=16384), dict(CPU_HOST, memory_mib=65536)
    (cpu_problem,) = group_problems(_fleet_of("Qwen/Qwen3-0.6B", {"g1": big, "g2": small}, "0.32.0"))
    assert "g2 plans `--max-model-len" in cpu_problem
    # identical hosts agree
    assert group_problems(_fleet_of("Qwen/Qwen3-32B", {"g1": nvswitch, "g2": nvswitch})) == []


def test_a_member_whose_plan_is_refused_stops_the_whole_group():
    from ansible_collections.llmfleet.serving.plugins.module_utils._fleet_plans import group_problems
    hw = hardware_profile("h100_sxm_8x")
    plans = _fleet_of(DEEPSEEK_V3, {"g1": hw, "g2": hw})
    plans["g2"] = dict(plans["g2"], errors=["d: something on g2"], deployments=[dict(plans["g2"]["deployments"][0], instances=[])])
    (problem,) = group_problems(plans)
    assert "d (hosts=big): g2 planned no rank of it (g2: d: something on g2)" in problem


def test_the_rendezvous_port_is_kept_from_other_listeners_and_a_second_group_on_the_same_head_is_refused():
    hw = CPU_HOST
    a = dep("Qwen/Qwen3-0.6B", "0.32.0", hosts="big")
    b = dict(dep("Qwen/Qwen3-0.6B", "0.32.0", hosts="big"), name="e")
    single = dict(dep("Qwen/Qwen3-0.6B", "0.32.0"), name="s", port=29501)

    def view(d):
        return {"group": "big", "members": members(d, hw)}
    both = plan_host("g1", hw, [a, b], {"groups": {"d": view(a), "e": view(b)}})
    assert any("its ranks would meet at 29501 on g1, where the rendezvous of d (hosts=big) meets already" in e for e in both["errors"])
    clash = plan_host("g1", hw, [a, single], {"groups": {"d": view(a)}})
    assert clash["errors"] and "29501" in " ".join(clash["errors"])
    # the worker rank holds no rendezvous: the same port is free there
    assert not plan_host("g2", hw, [a, single], {"groups": {"d": view(a)}})["errors"]


def test_a_cpu_rank_is_sized_in_its_numa_nodes_memory():
    two_nodes = {"accelerators": [], "numa_cpus": {0: "0-7", 1: "8-15"}, "cpu_count": 16, "memory_mib": 65536}
    inst = only(group_plan("Qwen/Qwen3-0.6B", two_nodes, version="0.32.0"))
    assert inst["cpuset"] == "0-7"
    assert inst["memory"]["weights_gib"] + inst["memory"]["kv_cache_gib"] <= 32


def test_a_compiled_cpu_plan_of_one_host_keeps_its_packages():
    """g++ comes with a group's compiled ranks only: a single-host CPU plan compiled on 0.32 is as it was (no restart)."""
    inst = only(plan_host("x", CPU_HOST, [dep("Qwen/Qwen3-0.6B", "0.32.0", overrides={"enforce_eager": False})]))
    assert "g++" not in inst["os_packages"]


def test_each_stages_tp_group_is_listed_together_inside_one_link_domain_when_the_domains_are_not_contiguous():
    # vLLM forms a stage's TP group from consecutive local ranks (TP fastest): with NVLink pairs {0,2} {1,3} {4,6} {5,7}
    # the visible order must list 0,2 then 1,3 ..., or TP=2 would run over PCIe between 0 and 1
    h100 = hardware_profile("h100_sxm_8x")
    pair = {0: 0, 2: 0, 1: 1, 3: 1, 4: 2, 6: 2, 5: 3, 7: 3}
    odd = dict(h100, links=[["X" if i == j else ("NV18" if pair[i] == pair[j] else "SYS") for j in range(8)] for i in range(8)])
    plans = _fleet_of("Qwen/Qwen3-32B", {"g1": odd, "g2": odd})
    inst = only(plans["g1"])
    assert inst["tensor_parallel_size"] == 2 and inst["pipeline_parallel_size"] == 8
    assert inst["env"]["CUDA_VISIBLE_DEVICES"] == "0,2,1,3,4,6,5,7"
