"""Verify model_store (via_peer) on each serving host, and the hub's byte count for the fleet. The hosts
name Qwen3-8B in three spellings, each at revision v1.0; each plan and each store use the one folder
/models/Qwen3-8B@v1.0 (a revision's own folder, issue 35)."""

import json
import os

# the serving hosts only; the hub container keeps its copy under /srv/hub
testinfra_hosts = ["ansible://store"]

HUB = "http://llmfleet-hub:8080"
MODEL_ID = "Qwen/Qwen3-8B"
MODEL_DIR = "/models/Qwen3-8B@v1.0"


def listing(host):
    out = host.check_output(f"curl -sf '{HUB}/api/v1/models/{MODEL_ID}/repo/files?Revision=v1.0&Recursive=True'")
    return {f["Path"]: f for f in json.loads(out)["Data"]["Files"] if f["Type"] == "blob"}


def test_every_file_matches_the_hub(host):
    for path, entry in listing(host).items():
        local = host.file(f"{MODEL_DIR}/{path}")
        assert local.exists and local.size == entry["Size"]
        assert local.sha256sum == entry["Sha256"]
        assert local.mode & 0o004, "the engine must be able to read it"


def test_manifest_records_the_revision(host):
    manifest = json.loads(host.file(f"{MODEL_DIR}/.llmfleet-manifest.json").content_string)
    assert manifest["model"] == MODEL_ID and manifest["revision"] == "v1.0"
    assert {f["path"] for f in manifest["files"]} == set(listing(host))


def test_one_folder_whatever_the_spelling(host):
    """The plan on the controller names the folder the engine serves from; the store filled exactly it."""
    plan_file = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "plans", f"{host.backend.get_hostname()}.json")
    with open(plan_file, encoding="utf-8") as handle:
        plan = json.load(handle)
    [inst] = plan["deployments"][0]["instances"]
    assert plan["deployments"][0]["model_source"]["id"] == MODEL_ID
    assert inst["model_dir"] == MODEL_DIR == inst["args"][0]
    # one model folder for the three spellings (the SDK's <folder>.download.log lies beside it on the seeder)
    folders = host.check_output("find /models -mindepth 1 -maxdepth 1 -type d -printf '%f\\n'").split()
    assert [f for f in folders if f.lower().startswith("qwen")] == ["Qwen3-8B@v1.0"], folders


def test_the_share_is_stopped(host):
    assert not host.socket("tcp://0.0.0.0:8765").is_listening
    assert host.run("systemctl is-active llmfleet-model-share").stdout.strip() != "active"


def test_hub_sent_one_copy_for_three_hosts(host):
    stats = json.loads(host.check_output(f"curl -sf {HUB}/_stats"))
    model_bytes = sum(f["Size"] for f in listing(host).values())
    served = stats["served"]
    print(f"hub bytes for 3 hosts: {sum(served.values()):,} (model {model_bytes:,}), clients {sorted(served)}")
    assert sum(served.values()) == model_bytes
    assert len(served) == 1
