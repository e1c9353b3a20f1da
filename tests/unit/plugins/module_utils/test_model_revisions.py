"""Model revisions as versioned folders (issue 35): the revision a deployment pins names its folder and enters the plan
(model_dir, plan_hash), so a revision change is fetched beside the folder engines serve from and rolled like an engine
version; the store never rewrites a folder whose recorded bytes the hub now lists otherwise, links what another revision
already holds, and a prune of old revisions never names a folder in use and keeps N per model."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from ansible_collections.llmfleet.serving.plugins.filter.model_store import (
    model_fetch_jobs, model_fetch_summary, model_store_in_use, model_store_models, model_store_prune)
from ansible_collections.llmfleet.serving.plugins.module_utils import _model_store as store
from ansible_collections.llmfleet.serving.plugins.module_utils._host_needs import NeedsError, model_folder, prune_folders
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import PlanError, plan_host
from ansible_collections.llmfleet.serving.plugins.module_utils._rollout import changes

BIG_CPU = {"accelerators": [], "numa_cpus": {0: "0-31"}, "cpu_count": 32, "memory_mib": 262144}


def dep(model, name="a"):
    return {"name": name, "model": model, "engine": {"version": "0.32.0"}, "workload": {"max_model_len": 4096, "concurrency": 2}}


def instance(plan):
    return plan["deployments"][0]["instances"][0]


def at(revision):
    return plan_host("h", BIG_CPU, [dep({"id": "Qwen/Qwen3-8B", "revision": revision} if revision else "Qwen/Qwen3-8B")])


# --- the folder and the plan -------------------------------------------------------------------------------------------

def test_the_folder_name_carries_the_pinned_revision():
    plan = at("v1.0")
    inst = instance(plan)
    assert inst["model_dir"] == "/models/Qwen3-8B@v1.0" == inst["args"][0] == plan["deployments"][0]["model_source"]["dir"]
    assert model_store_models(plan, [], "/models", "master") == [{"id": "Qwen/Qwen3-8B", "revision": "v1.0", "dir": "Qwen3-8B@v1.0"}]
    assert any(r["decision"] == "model_dir=/models/Qwen3-8B@v1.0" and "another revision gets its own folder" in r["why"]
               for r in inst["reasons"])


def test_the_plan_hash_changes_with_the_revision_and_only_then():
    one, again, two = instance(at("v1.0")), instance(at("v1.0")), instance(at("v2.0"))
    assert one["plan_hash"] == again["plan_hash"]
    assert one["plan_hash"] != two["plan_hash"] and one["model_dir"] != two["model_dir"] == "/models/Qwen3-8B@v2.0"
    # nothing else of the instance changed: the roll is the model's alone
    assert [a for a in one["args"] if a != one["model_dir"]] == [a for a in two["args"] if a != two["model_dir"]]


def test_plan_yml_says_the_revision_change_per_instance():
    """What plan.yml prints against the plan in force: the folder the instance serves from changes, nothing else."""
    assert changes(at("v1.0"), at("v2.0")) == ["a-0: (model) /models/Qwen3-8B@v1.0 -> /models/Qwen3-8B@v2.0"]
    assert changes(at("v1.0"), at("v1.0")) == ["no instance changes"]


def test_a_model_that_pins_no_revision_keeps_its_folder_of_earlier_releases():
    """No revision pinned: <root>/<name>, the folder earlier releases filled - an upgrade of the collection neither
    re-downloads nor restarts it."""
    inst = instance(at(None))
    assert inst["model_dir"] == "/models/Qwen3-8B" and model_folder("Qwen/Qwen3-8B") == "Qwen3-8B"
    assert instance(at(None))["plan_hash"] != instance(at("master"))["plan_hash"]


@pytest.mark.parametrize("bad", ["feature/x", "v1 0", "%i", "../up", "-rf", "x" * 129])
def test_a_revision_that_cannot_name_a_folder_is_refused_at_plan_time(bad):
    if " " in bad:   # a blank is refused earlier, as nginx/systemd syntax in any inventory string (_syntax), naming the value
        with pytest.raises(PlanError, match=r"model.revision='v1 0'"):
            at(bad)
        return
    plan = at(bad)
    assert plan["errors"] and f"revision {bad!r} of Qwen/Qwen3-8B cannot name a folder" in plan["errors"][0]
    assert "pin a tag or a commit" in plan["errors"][0]


def test_a_local_path_ignores_the_revision():
    plan = plan_host("h", BIG_CPU, [dep({"id": "Qwen/Qwen3-8B", "path": "/data/q8", "revision": "v2"})])
    assert instance(plan)["model_dir"] == "/data/q8"


def test_two_revisions_of_one_model_on_one_host_each_have_their_folder():
    plan = plan_host("h", BIG_CPU, [dep({"id": "Qwen/Qwen3-8B", "revision": "v1"}), dep({"id": "qwen3-8b", "revision": "v2"}, "b")])
    assert not plan["errors"], plan["errors"]
    assert [d["instances"][0]["model_dir"] for d in plan["deployments"]] == ["/models/Qwen3-8B@v1", "/models/Qwen3-8B@v2"]
    assert [m["dir"] for m in model_store_models(plan, [], "/models", "master")] == ["Qwen3-8B@v1", "Qwen3-8B@v2"]


# --- what a prune may remove ---------------------------------------------------------------------------------------------

def manifests(*folders, root="/models"):
    """find's answer for <root>/<folder>/.llmfleet-manifest.json, folder -> mtime."""
    return [{"path": f"{root}/{name}/.llmfleet-manifest.json", "mtime": mtime} for name, mtime in folders]


def test_the_prune_never_names_a_folder_in_use():
    plan = plan_host("h", BIG_CPU, [dep({"id": "Qwen/Qwen3-8B", "revision": "v2"}), dep({"id": "Qwen/Qwen3-8B", "path": "/models/mine"}, "b")])
    assert not plan["errors"], plan["errors"]
    models = model_store_models(plan, [{"id": "llmfleet/tiny-qwen3", "revision": "v1.0", "dir": "tiny"}], "/models", "master")
    in_use = model_store_in_use(plan, models + [{"id": "x/y", "dir": "kept-by-list"}], "/models")
    assert {"/models/Qwen3-8B@v2", "/models/mine", "/models/tiny", "/models/kept-by-list"} <= set(in_use)
    found = manifests(("Qwen3-8B@v2", 1), ("Qwen3-8B@v1", 5), ("Qwen3-8B", 9), ("mine", 0), ("tiny", 0), ("kept-by-list", 0))
    for keep in (0, 1, 5):
        removed = model_store_prune(found, in_use, keep, "/models")
        assert not set(removed) & set(in_use), removed
    assert model_store_prune(found, in_use, 0, "/models") == ["/models/Qwen3-8B", "/models/Qwen3-8B@v1"]


def test_keep_n_keeps_the_most_recent_idle_folders_of_each_model():
    found = manifests(("Qwen3-8B@v4", 40), ("Qwen3-8B@v3", 30), ("Qwen3-8B@v2", 20), ("Qwen3-8B", 10),
                      ("gemma@a", 5), ("gemma@b", 6))
    in_use = ["/models/Qwen3-8B@v4/"]
    assert prune_folders(found, in_use, -1, "/models") == []
    assert prune_folders(found, in_use, 0, "/models") == sorted(
        ["/models/Qwen3-8B@v3", "/models/Qwen3-8B@v2", "/models/Qwen3-8B", "/models/gemma@a", "/models/gemma@b"])
    # one previous revision of each model stays for a rollback; the unversioned folder is the oldest revision of its model
    assert prune_folders(found, in_use, 1, "/models") == ["/models/Qwen3-8B", "/models/Qwen3-8B@v2", "/models/gemma@a"]
    assert prune_folders(found, in_use, 2, "/models") == ["/models/Qwen3-8B"]
    assert prune_folders(found, in_use, 3, "/models") == []


def test_the_prune_names_only_folders_the_store_filled_directly_under_the_root():
    found = [{"path": "/models/Qwen3-8B@v1/.llmfleet-manifest.json", "mtime": 1},
             {"path": "/models/Qwen3-8B@v1/sub/.llmfleet-manifest.json", "mtime": 1},    # deeper: not a model folder
             {"path": "/srv/models/other@v1/.llmfleet-manifest.json", "mtime": 1},       # another root
             {"path": "/models/x/config.json", "mtime": 1}]                              # not a manifest
    assert prune_folders(found, [], 0, "/models/") == ["/models/Qwen3-8B@v1"]
    with pytest.raises(NeedsError, match="expected find's files"):
        prune_folders(["/models/a"], [], 0, "/models")


# --- the store: a folder an engine may read is never rewritten; another revision's files are linked --------------------

def write_folder(folder, files, model="o/tiny", revision="v1.0"):
    """A folder model_fetch filled: the files and a manifest recording them as hashed now."""
    folder.mkdir(parents=True, exist_ok=True)
    listing = []
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
        listing.append(store.RemoteFile(rel, len(data), hashlib.sha256(data).hexdigest()))
    store.write_manifest(str(folder), store.manifest_document(model, revision, "modelscope", listing, str(folder)))
    return sorted(listing, key=lambda f: f.path)


def remote(files):
    return sorted((store.RemoteFile(rel, len(data), hashlib.sha256(data).hexdigest()) for rel, data in files.items()),
                  key=lambda f: f.path)


V1 = {"config.json": b'{"a": 1}', "model.safetensors": b"W" * 4096}
V2 = {"config.json": b'{"a": 2}', "model.safetensors": b"W" * 4096}


def test_a_moved_branch_or_another_revision_in_the_folder_is_not_rewritten(tmp_path):
    live = tmp_path / "models" / "tiny"
    write_folder(live, V1, revision="master")
    assert store.changed_upstream(str(live), remote(V1)) == []
    assert store.changed_upstream(str(live), remote(V2)) == ["config.json"]
    said = store.moved_message(str(live), "o/tiny", "master", "https://hub", ["config.json"])
    assert said.startswith(f"{live} holds o/tiny@master, but https://hub now lists other bytes for config.json: master moved since "
                           "it was fetched. It is not rewritten") and "<name>@<revision>" in said and len(said) < 400
    other = store.moved_message(str(live), "o/tiny", "v2.0", "https://hub", ["a", "b", "c", "d"])
    assert "other bytes for a, b, c and 1 more: o/tiny@v2.0 is asked for there" in other
    # corruption is not a move: the record equals the listing, the file does not (check() repairs it)
    (live / "model.safetensors").write_bytes(b"X" * 4096)
    assert store.changed_upstream(str(live), remote(V1)) == []
    assert store.check(str(live), remote(V1), full=True).corrupt == ["model.safetensors"]


def test_same_bytes_needs_a_hash_both_name():
    f = store.RemoteFile("a", 3, None, "gitid")
    assert store.same_bytes({"size": 3, "sha256": "s"}, f) is None          # one hub's sha256, the other's git id
    assert store.same_bytes({"size": 4, "sha256": "s"}, f) is False
    assert store.same_bytes({"size": 3, "git_sha1": "gitid"}, f) is True
    assert store.same_bytes({"size": 3, "git_sha1": "other"}, f) is False


def test_a_new_revision_links_what_the_other_folder_holds_and_fetches_the_rest(tmp_path):
    root = tmp_path / "models"
    write_folder(root / "tiny", V1)                      # the unversioned folder of an earlier release
    write_folder(root / "unrelated", V2, model="o/other")
    dest = root / "tiny@v2.0"
    siblings = store.sibling_records(str(dest), "O/Tiny")
    assert {os.path.dirname(r["path"]) for r in siblings} == {str(root / "tiny")}
    plan = store.fetch_plan(str(dest), remote(V2), full=False, siblings=siblings)
    assert plan.to_fetch == ["config.json"] and plan.needed == len(V2["config.json"])
    assert plan.reused == {"model.safetensors": str(root / "tiny" / "model.safetensors")}
    store.link_reused(str(dest), plan.reused)
    assert (dest / "model.safetensors").stat().st_ino == (root / "tiny" / "model.safetensors").stat().st_ino
    # the same revision in its new folder: everything linked, nothing fetched (an upgrade of the collection)
    same = store.fetch_plan(str(root / "tiny@v1.0"), remote(V1), full=False, siblings=store.sibling_records(str(root / "tiny@v1.0"), "o/tiny"))
    assert same.to_fetch == [] and sorted(same.reused) == ["config.json", "model.safetensors"]


def test_a_file_changed_since_its_folder_recorded_it_is_not_linked(tmp_path):
    root = tmp_path / "models"
    write_folder(root / "tiny", V1)
    target = root / "tiny" / "model.safetensors"
    os.utime(target, ns=(target.stat().st_atime_ns, target.stat().st_mtime_ns + 10**9))
    plan = store.fetch_plan(str(root / "tiny@v1.0"), remote(V1), full=False, siblings=store.sibling_records(str(root / "tiny@v1.0"), "o/tiny"))
    assert plan.reused == {"config.json": str(root / "tiny" / "config.json")} and plan.to_fetch == ["model.safetensors"]


def test_progress_and_summary_count_the_linked_files():
    planned = {"item": {"id": "o/tiny"}, "invocation": {"module_args": {"dest": "/models/tiny@v2"}}, "bytes_fetched": 10,
               "bytes_on_disk": 0, "bytes_reused": 4096, "changed": True, "fetched": ["config.json"], "files": 2,
               "total_bytes": 4106, "reused": ["model.safetensors"]}
    [job] = model_fetch_jobs([{"ansible_job_id": "j1", "item": planned}])
    assert job["start_bytes"] == 4096 and job["needed"] == 10
    [line] = model_fetch_summary([planned])
    assert "1 linked from another revision's folder (4.0 KiB, no download)" in line


def test_the_manifest_of_a_linked_folder_records_its_own_revision(tmp_path):
    root = tmp_path / "models"
    write_folder(root / "tiny", V1)
    dest = root / "tiny@v1.0"
    plan = store.fetch_plan(str(dest), remote(V1), full=False, siblings=store.sibling_records(str(dest), "o/tiny"))
    store.link_reused(str(dest), plan.reused)
    store.write_manifest(str(dest), store.manifest_document("o/tiny", "v1.0", "modelscope", remote(V1), str(dest)))
    assert json.loads((dest / store.MANIFEST).read_text())["revision"] == "v1.0"
    assert store.check(str(dest), remote(V1), full=False).to_fetch == []
    assert json.loads((root / "tiny" / store.MANIFEST).read_text())["revision"] == "v1.0"   # the old folder: as it was
