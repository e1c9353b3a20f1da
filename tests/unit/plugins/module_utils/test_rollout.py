"""The change path's decisions: when an engine is idle (its own metrics), who else serves a model (never below N-1,
counted on what the gateways route), and what a new plan changes per instance."""

from __future__ import annotations

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _rollout as r
from ansible_collections.llmfleet.serving.plugins.module_utils import _rotation as rot

from test_rotation import CONF   # the gateway's upstream lines, as the rotation tests read them

# vLLM 0.32's /metrics (the lines that matter, as the CPU build prints them)
METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny-a"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny-a"} 1.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="tiny-a",reason="capacity"} 7.0
"""


def test_in_flight_sums_running_and_waiting_and_nothing_else():
    assert r.in_flight(METRICS) == 3
    assert r.in_flight(METRICS.replace("2.0", "0.0").replace("} 1.0", "} 0.0")) == 0
    with pytest.raises(r.RolloutError, match="not a vLLM metrics page"):
        r.in_flight("process_cpu_seconds_total 1.0\n")


def plan(host, *models):
    return {"host": host, "deployments": [{"name": m, "engine_version": "0.32.0", "instances": [
        {"name": f"{m}-0", "served_model_name": m, "plan_hash": "h", "args": ["/m", "--max-num-seqs", "4"], "env": {}}]} for m in models]}


def test_peers_are_the_other_instances_of_the_same_served_model():
    plans = {"e1": plan("e1", "tiny-a"), "e2": plan("e2", "tiny-a", "tiny-b")}
    assert r.peers(plans, "e1", "tiny-a-0") == ["e2/tiny-a-0"]
    assert r.peers(plans, "e2", "tiny-b-0") == []
    with pytest.raises(r.RolloutError, match="not in the plan"):
        r.peers(plans, "e1", "tiny-b-0")


def test_flag_diff_names_changed_added_and_removed_flags():
    old = ["/m", "--max-num-seqs", "4", "--enforce-eager", "--dtype", "float32"]
    new = ["/m", "--max-num-seqs", "8", "--dtype", "float32", "--no-such-flag"]
    assert r.flag_diff(old, new) == ["- --enforce-eager", "--max-num-seqs 4 -> 8", "+ --no-such-flag"]
    assert r.flag_diff(old, old) == []


def test_changes_per_instance_against_the_plan_in_force():
    old, new = plan("e2", "tiny-a", "tiny-b"), plan("e2", "tiny-a", "tiny-c")
    new["deployments"][0]["engine_version"] = "0.33.0"
    new["deployments"][0]["instances"][0].update(plan_hash="h2", args=["/m", "--max-num-seqs", "8"])
    assert r.changes(old, new) == ["tiny-a-0: vLLM 0.32.0 -> 0.33.0; --max-num-seqs 4 -> 8", "tiny-b-0: removed",
                                   "tiny-c-0: new instance (vLLM 0.32.0)"]
    assert r.changes(old, old) == ["no instance changes"]


def test_at_version_sets_one_deployment_or_every_one_and_names_a_bad_input():
    deps = [{"name": "a", "engine": {"version": "0.31.0", "image": "x"}}, {"name": "b", "engine": {"version": "0.31.0"}}]
    assert [d["engine"]["version"] for d in r.at_version(deps, "0.32.0", "a")] == ["0.32.0", "0.31.0"]
    assert r.at_version(deps, "0.32.0", "a")[0]["engine"]["image"] == "x" and deps[0]["engine"]["version"] == "0.31.0"
    assert [d["engine"]["version"] for d in r.at_version(deps, "0.32.0")] == ["0.32.0", "0.32.0"]
    with pytest.raises(r.RolloutError, match="upgrade_deployment 'c' is not a deployment of this host"):
        r.at_version(deps, "0.32.0", "c")
    with pytest.raises(r.RolloutError, match="like 0.32.0"):
        r.at_version(deps, "latest")


def test_prune_keeps_what_runs_and_the_most_recent_others_and_nothing_half_built():
    root = "/opt/llmfleet/vllm/"
    installed = [{"path": root + v, "mtime": t} for v, t in
                 (("0.29.0", 100), ("0.30.0", 200), ("0.31.0", 300), ("0.32.0", 50), ("0.32.0.new-0123456789abcdef", 400))]
    in_use = [root + "0.32.0"]
    assert r.prune(installed, in_use, -1) == []                      # the default: old versions go only when asked
    assert r.prune(installed, in_use, 0) == [root + "0.31.0", root + "0.30.0", root + "0.29.0"]
    assert r.prune(installed, in_use, 1) == [root + "0.30.0", root + "0.29.0"]   # 0.31.0 stays for a rollback
    assert r.prune(installed, in_use, 5) == []
    # the version in use is the oldest folder on disk: still never a candidate
    assert r.prune(installed, [root + "0.32.0", root + "0.29.0"], 0) == [root + "0.31.0", root + "0.30.0"]


def test_image_candidates_are_other_tags_of_the_planned_repositories_that_no_container_uses():
    images = [{"Id": "sha256:a", "RepoTags": ["vllm/vllm-openai:v0.11.0"], "Created": 30},
              {"Id": "sha256:b", "RepoTags": ["vllm/vllm-openai:v0.10.2"], "Created": 20},
              {"Id": "sha256:c", "RepoTags": ["vllm/vllm-openai:v0.9.2"], "Created": 10},
              {"Id": "sha256:d", "RepoTags": ["registry:5000/vllm/vllm-openai:v0.9.0"], "Created": 5},
              {"Id": "sha256:e", "RepoTags": ["nginx:1.27"], "Created": 40},
              {"Id": "sha256:f", "RepoTags": ["<none>:<none>"], "Created": 1}]
    planned = ["vllm/vllm-openai:v0.11.0"]
    found = r.image_candidates(images, planned, ["sha256:c"])      # a stopped container still uses v0.9.2 by id
    assert found == [{"path": "vllm/vllm-openai:v0.11.0", "mtime": 30.0}, {"path": "vllm/vllm-openai:v0.10.2", "mtime": 20.0}]
    assert r.prune(found, planned, 0) == ["vllm/vllm-openai:v0.10.2"]
    # a registry with a port is a repository of its own, not a tag
    assert r.image_candidates(images, ["registry:5000/vllm/vllm-openai:v0.11.0"], []) == [
        {"path": "registry:5000/vllm/vllm-openai:v0.9.0", "mtime": 5.0}]


def test_live_peers_count_what_serves_not_what_is_planned():
    peers = ["llmfleet-fleet-engine2/tiny-a-0", "llmfleet-fleet-engine3/tiny-a-0"]
    routes = rot.routes(CONF)
    # engine3 is planned but no gateway routes it yet: it counts (a first deploy); engine2 is in rotation
    assert r.live_peers(peers, [routes]) == peers
    down = rot.routes(rot.apply(CONF, ["llmfleet-fleet-engine2/tiny-a-0"]))
    assert r.live_peers(peers, [down]) == ["llmfleet-fleet-engine3/tiny-a-0"]
    # down on one gateway of two is not serving for that gateway's clients
    assert r.live_peers(peers[:1], [routes, down]) == []
    assert r.live_peers(peers[:1], []) == peers[:1]


def test_a_peer_a_gateways_state_holds_out_does_not_count_even_when_no_line_says_down():
    """A state may hold an instance that its gateway does not route yet (the gateway was not rendered since): that peer
    does not serve, so it is no N-1 peer."""
    peers = ["llmfleet-fleet-engine2/tiny-a-0", "llmfleet-fleet-engine3/tiny-a-0"]
    assert r.live_peers(peers, [rot.routes(CONF)], ["llmfleet-fleet-engine3/tiny-a-0"]) == peers[:1]
    assert r.live_peers(peers, [rot.routes(CONF)], peers) == []


def test_reconcile_forgets_the_unplanned_readmits_what_this_run_serves_and_reports_the_rest():
    out = {"e1/tiny-a-0": {"since": "2026-12-03T10:00:00Z", "by": "site.yml by alice on ctl-1, pid 4242", "gateways": ["gw"]},
           "e2/tiny-a-0": {"since": "2026-12-03T11:00:00Z", "by": None, "gateways": ["gw", "gw2"]},
           "e3/tiny-a-0": {"since": None, "by": None, "gateways": ["gw"]},
           "e1/gone-0": {"since": "2026-12-01T09:00:00Z", "by": None, "gateways": ["gw"]},
           "e4/tiny-a-0": {"since": "2026-12-03T12:00:00Z", "by": None, "gateways": ["gw"]}}
    planned = ["e1/tiny-a-0", "e2/tiny-a-0", "e3/tiny-a-0", "e4/tiny-a-0"]
    rows = {row["instance"]: row for row in r.reconcile(out, planned, ["e1", "e2", "e4"], ["e4"])}
    assert {n: row["action"] for n, row in rows.items()} == {
        "e1/gone-0": r.FORGET, "e1/tiny-a-0": r.READMIT, "e2/tiny-a-0": r.READMIT, "e3/tiny-a-0": r.REPORT, "e4/tiny-a-0": r.REPORT}
    assert "e3 is not in this run (--limit)" in rows["e3/tiny-a-0"]["why"]
    assert "llmfleet_serve is false on e4" in rows["e4/tiny-a-0"]["why"]
    assert "no plan has it any more" in rows["e1/gone-0"]["why"]
    lines = r.reconcile_lines([rows["e1/tiny-a-0"], rows["e3/tiny-a-0"]])
    assert lines[0] == ("e1/tiny-a-0: out of the rotation of gw since 2026-12-03T10:00:00Z (taken out by site.yml by alice on "
                        "ctl-1, pid 4242): its host is in this run: it goes back in once its health gate passes")
    assert lines[1].startswith("e3/tiny-a-0: out of the rotation of gw since before this collection kept the time: e3 is not")
    assert r.reconcile({}, planned, ["e1"]) == []
