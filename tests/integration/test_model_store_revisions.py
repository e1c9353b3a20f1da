"""model_store's entry points on this machine, through Ansible (issue 35): `prune` removes old revision folders only when
model_store_keep_revisions asks, never one the plan serves from, never a folder model_fetch did not fill, nothing in check
mode; `stage`, which serve.yml runs before a roll, leaves a host whose plan fetches nothing (every model a local path, as in
the fleet lab) alone, does nothing after main kept the same models in the run, and fetches a new revision beside the old
one with the real modelscope SDK (this project's venv) from the stand-in hub (tests/lab/modelscope_hub.py; the hub cannot
be reached from the lab), linking what the old revision's folder holds. The SDK install (apt, pip) is skipped by its tag."""

from __future__ import annotations

import json
import os
import pathlib
import sys
import threading
import urllib.request

from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host
from llmfleet_testing import ROOT, run_ansible

sys.path.insert(0, os.path.join(ROOT, "tests", "lab"))
from modelscope_hub import serve  # noqa: E402  pylint: disable=wrong-import-position

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


def test_stage_fetches_a_new_revision_beside_the_old_one_once_per_run(tmp_path):
    files = {"config.json": b'{"model_type": "qwen3"}\n', "model.safetensors": os.urandom(200_000)}
    hub_root = tmp_path / "hub" / "o" / "tiny"
    for revision in ("v1.0", "v2.0"):
        for path, data in files.items():
            (hub_root / revision / path).parent.mkdir(parents=True, exist_ok=True)
            (hub_root / revision / path).write_bytes(data)
    (hub_root / "v2.0" / "config.json").write_bytes(b'{"model_type": "qwen3", "revision": "v2.0"}\n')
    (hub_root / "tags.txt").write_text("v1.0\nv2.0\n")
    server = serve(str(tmp_path / "hub"))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    hub = f"http://127.0.0.1:{server.server_address[1]}"
    root = tmp_path / "models"
    v1, v2 = [{"id": "o/tiny", "revision": "v1.0"}], [{"id": "o/tiny", "revision": "v2.0"}]
    step = {"ansible.builtin.include_role": {"name": "llmfleet.serving.model_store"}}
    playbook = tmp_path / "play.yml"
    playbook.write_text(json.dumps([{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [
        {**step, "vars": {"model_store_models": v1}},                                                       # models.yml
        {"ansible.builtin.include_role": {"name": "llmfleet.serving.model_store", "tasks_from": "stage"},   # serve.yml, same run
         "vars": {"model_store_models": v1}},
        {"ansible.builtin.include_role": {"name": "llmfleet.serving.model_store", "tasks_from": "stage"},   # a new revision
         "vars": {"model_store_models": v2}}]}]))
    env = {"MODELSCOPE_HOME": str(tmp_path / ".ms-home"), "MODELSCOPE_CACHE": str(tmp_path / ".ms-cache"),
           "MODELSCOPE_DOWNLOAD_MAX_RETRIES": "0"}
    try:
        result = run_ansible("ansible-playbook", str(playbook), "--skip-tags", "model_store_sdk", env=env, extra_vars={
            "model_store_root": str(root), "model_store_endpoint": hub, "model_store_reserve_bytes": 0,
            "model_store_progress_interval": 1, "model_store_venv": os.path.dirname(os.path.dirname(sys.executable))})
        with urllib.request.urlopen(hub + "/_stats", timeout=10) as answer:
            by_path = json.loads(answer.read())["by_path"]
    finally:
        server.shutdown()
        server.server_close()
    assert result["stats"]["localhost"]["failures"] == 0, json.dumps(result)[-3000:]
    compared = [h["localhost"] for h in (t["hosts"] for p in result["plays"] for t in p["tasks"]
                                         if t["task"]["name"].endswith("fetch | Compare each model with the hub's listing"))
                if not h["localhost"].get("skipped")]
    assert len(compared) == 2, "main, then the new revision's stage; the stage after main in the same run compares nothing"
    assert compared[1]["results"][0]["fetched"] == ["config.json"] and compared[1]["results"][0]["reused"] == ["model.safetensors"]
    size = len(files["model.safetensors"])
    assert by_path == {"config.json": len(files["config.json"]) + len(b'{"model_type": "qwen3", "revision": "v2.0"}\n'),
                       "model.safetensors": size}, by_path
    assert (root / "tiny@v1.0" / "model.safetensors").stat().st_ino == (root / "tiny@v2.0" / "model.safetensors").stat().st_ino
    assert (root / "tiny@v1.0" / "config.json").read_bytes() == files["config.json"]
    assert json.loads((root / "tiny@v2.0" / ".llmfleet-manifest.json").read_text())["revision"] == "v2.0"
