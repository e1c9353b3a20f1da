"""model_store's entry points `prune` and `stage` on this machine, through Ansible (issue 35): old revision folders go only
when model_store_keep_revisions asks, never one the plan serves from, never a folder model_fetch did not fill, nothing in
check mode; a host whose plan fetches nothing (every model a local path, as in the fleet lab) is left alone by the stage
that serve.yml runs before a roll, so no SDK is installed there. The folders and the plan are made here; nothing is fetched
(the model_fetch module's own tests and molecule/model_store fetch)."""

from __future__ import annotations

import json
import os
import pathlib

from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host
from llmfleet_testing import run_ansible

BIG_CPU = {"accelerators": [], "numa_cpus": {0: "0-31"}, "cpu_count": 32, "memory_mib": 262144}


def plan(root: pathlib.Path, *models):
    deployments = [{"name": f"d{i}", "model": m, "engine": {"version": "0.32.0"}, "workload": {"max_model_len": 4096}}
                   for i, m in enumerate(models)]
    made = plan_host("h", BIG_CPU, deployments, {"model_root": str(root)})
    assert not made["errors"], made["errors"]
    return made


def folder(root: pathlib.Path, name: str, mtime: int, manifest: bool = True):
    path = root / name
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    if manifest:
        (path / ".llmfleet-manifest.json").write_text(json.dumps({"model": "Qwen/Qwen3-8B", "files": []}))
        os.utime(path / ".llmfleet-manifest.json", (mtime, mtime))
    (root / f"{name}.download.log").write_text("log\n")


def run(tmp_path, entry, variables, *extra):
    playbook = tmp_path / "play.yml"
    playbook.write_text(json.dumps([{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [
        {"ansible.builtin.include_role": {"name": "llmfleet.serving.model_store", "tasks_from": entry}}]}]))
    result = run_ansible("ansible-playbook", str(playbook), *extra, extra_vars=variables)
    assert result["stats"]["localhost"]["failures"] == 0, json.dumps(result)[-3000:]
    return result


def names(root):
    return sorted(p.name for p in root.iterdir())


def test_prune_keeps_what_serves_and_n_of_each_model(tmp_path):
    root = tmp_path / "models"
    folder(root, "Qwen3-8B", 100)             # the unversioned folder of an earlier release
    folder(root, "Qwen3-8B@v1", 200)
    folder(root, "Qwen3-8B@v2", 300)          # the plan serves from it
    folder(root, "Qwen3-8B@v3", 400)          # newest of all, idle (a rollback went back to v2)
    folder(root, "mine", 50, manifest=False)  # the operator's own folder: never a candidate
    served = plan(root, {"id": "Qwen/Qwen3-8B", "revision": "v2"})
    base = {"llmfleet_plan": served, "model_store_root": str(root)}

    run(tmp_path, "prune", base)   # the default, -1: nothing goes
    assert len(names(root)) == 10
    run(tmp_path, "prune", {**base, "model_store_keep_revisions": 0}, "--check")
    assert len(names(root)) == 10, "check mode removes nothing"

    run(tmp_path, "prune", {**base, "model_store_keep_revisions": 1})
    assert names(root) == ["Qwen3-8B@v2", "Qwen3-8B@v2.download.log", "Qwen3-8B@v3", "Qwen3-8B@v3.download.log",
                           "mine", "mine.download.log"]
    run(tmp_path, "prune", {**base, "model_store_keep_revisions": 0})
    assert names(root) == ["Qwen3-8B@v2", "Qwen3-8B@v2.download.log", "mine", "mine.download.log"]
    assert (root / "Qwen3-8B@v2" / "config.json").exists()


def test_stage_leaves_a_host_whose_models_are_local_folders_alone(tmp_path):
    root = tmp_path / "models"
    local = tmp_path / "lab" / "tiny"
    local.mkdir(parents=True)
    result = run(tmp_path, "stage", {"llmfleet_plan": plan(root, {"id": "Qwen/Qwen3-8B", "path": str(local)}),
                                     "model_store_root": str(root), "model_store_venv": str(tmp_path / "no-venv")})
    ran = [t["task"]["name"] for p in result["plays"] for t in p["tasks"]
           if not all(h.get("skipped") for h in t["hosts"].values())]
    assert any(name.endswith("models | Resolve the models this host keeps") for name in ran), ran
    assert not [name for name in ran if " : keep | " in name or " : sdk | " in name or " : fetch | " in name], ran
    assert not root.exists() and not (tmp_path / "no-venv").exists()
