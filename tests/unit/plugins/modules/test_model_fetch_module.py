"""llmfleet.serving.model_fetch through Ansible (the module, not only its module_utils): a mirror
served by `python -m http.server`'s handler, failing hubs on 127.0.0.1, and the real modelscope and
huggingface_hub SDKs of the project venv against the stand-in hub (tests/lab/modelscope_hub.py)
serving a few small files. A failure is one `msg` sentence with the URL and the fix, never a traceback."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pathlib
import socket
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

from llmfleet_testing import ROOT, run_ansible

sys.path.insert(0, os.path.join(ROOT, "tests", "lab"))
from modelscope_hub import serve  # noqa: E402  pylint: disable=wrong-import-position

FILES = {"config.json": b'{"model_type": "qwen3"}\n', "README.md": b"# tiny\n", "sub/weights.bin": os.urandom(300_000)}


def play(tmp_path, tasks, *extra):
    """Run tasks (model_fetch arguments, with an optional `check` key) in one play; their results in order."""
    playbook = tmp_path / "play.yml"
    playbook.write_text(json.dumps([{
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "tasks": [{"name": f"t{i}", "llmfleet.serving.model_fetch": {k: v for k, v in t.items() if k != "check"},
                   "check_mode": bool(t.get("check")), "ignore_errors": True} for i, t in enumerate(tasks)]}]))
    env = {"MODELSCOPE_HOME": str(tmp_path / ".ms-home"), "MODELSCOPE_CACHE": str(tmp_path / ".ms-cache"),
           "MODELSCOPE_DOWNLOAD_MAX_RETRIES": "0", "HF_HOME": str(tmp_path / ".hf-home")}
    result = run_ansible("ansible-playbook", str(playbook), *extra, env=env)
    return [task["hosts"]["localhost"] for task in result["plays"][0]["tasks"]]


def one_sentence(result, *parts):
    assert result.get("failed") is True, result
    # fail_json leaves `invocation`; an exception that escapes the module leaves "Task failed: Module failed: <exception>"
    assert "invocation" in result and "module_stderr" not in result and not result["msg"].startswith("Task failed"), result
    assert "Traceback" not in result.get("exception", ""), result
    assert "\n" not in result["msg"] and all(part in result["msg"] for part in parts), result["msg"]


def start(server):
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def mirror(tmp_path):
    """A peer's model folder, with its manifest, served as plain files."""
    folder = tmp_path / "www" / "tiny"
    for path, data in FILES.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(data)
    (folder / ".llmfleet-manifest.json").write_text(json.dumps({"model": "o/tiny", "revision": "v1.0", "files": [
        {"path": p, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for p, d in sorted(FILES.items())]}))

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(tmp_path / "www")))
    url = start(server)
    yield {"url": f"{url}/tiny", "folder": folder}
    server.shutdown()
    server.server_close()


def test_mirror_check_apply_idempotent(tmp_path, mirror):
    dest = str(tmp_path / "models" / "tiny")
    args = {"model_id": "o/tiny", "revision": "v1.0", "dest": dest, "source": "http", "url": mirror["url"], "reserve_bytes": 0}
    # not beside models/tiny: there it would be linked from that folder of the same model (reuse), not copied
    local = {**args, "source": "path", "source_path": str(mirror["folder"]), "dest": str(tmp_path / "elsewhere" / "local")}
    (tmp_path / "a-file").write_text("x")
    unwritable = {**args, "dest": str(tmp_path / "a-file" / "tiny")}
    check, apply, recheck, again, copied, copied_again, not_a_folder = play(
        tmp_path, [{**args, "check": True}, args, {**args, "check": True}, args, local, local, unwritable])
    total = sum(len(d) for d in FILES.values())
    assert check["changed"] is True and check["bytes_fetched"] == total and sorted(check["fetched"]) == sorted(FILES), check
    assert apply["changed"] is True and apply["bytes_fetched"] == total and apply["files"] == 3
    assert recheck["changed"] is False and again["changed"] is False and again["fetched"] == [] and again["bytes_fetched"] == 0
    assert {p: (tmp_path / "models" / "tiny" / p).read_bytes() for p in FILES} == FILES
    assert copied["changed"] is True and sorted(copied["fetched"]) == sorted(FILES) and copied_again["changed"] is False
    assert {p: (tmp_path / "elsewhere" / "local" / p).read_bytes() for p in FILES} == FILES
    one_sentence(not_a_folder, f"{tmp_path}/a-file/tiny: Not a directory; check that {tmp_path}/a-file/tiny is writable")


def test_a_revision_folder_links_the_other_folder_and_a_live_folder_is_never_rewritten(tmp_path, mirror):
    """Issue 35: the folder of an earlier release (<root>/tiny, no revision in its name) gives its files to the revision's
    own folder (<root>/tiny@v1.0) by hard links - no byte fetched, the old folder untouched; a source that now lists other
    bytes for a folder's recorded files (a moved branch) is refused, in check mode too, and the folder left as it was."""
    root = tmp_path / "models"
    moved = tmp_path / "moved"
    for path, data in FILES.items():
        (moved / path).parent.mkdir(parents=True, exist_ok=True)
        (moved / path).write_bytes(b'{"model_type": "qwen3", "v": 2}\n' if path == "config.json" else data)
    base = {"model_id": "o/tiny", "revision": "v1.0", "source": "path", "source_path": str(mirror["folder"]), "reserve_bytes": 0}
    legacy, versioned = {**base, "dest": str(root / "tiny")}, {**base, "dest": str(root / "tiny@v1.0")}
    newer = {**versioned, "source_path": str(moved)}
    _legacy, check, linked, again, refused_check, refused = play(
        tmp_path, [legacy, {**versioned, "check": True}, versioned, versioned, {**newer, "check": True}, newer])
    total = sum(len(d) for d in FILES.values())
    assert check["changed"] is True and check["fetched"] == [] and check["reused"] == sorted(FILES) and check["bytes_reused"] == total
    assert linked["changed"] is True and linked["fetched"] == [] and linked["reused"] == sorted(FILES) and linked["bytes_fetched"] == 0
    for path in FILES:
        assert (root / "tiny@v1.0" / path).stat().st_ino == (root / "tiny" / path).stat().st_ino, path
    assert json.loads((root / "tiny@v1.0" / ".llmfleet-manifest.json").read_text())["revision"] == "v1.0"
    assert again["changed"] is False and again["reused"] == []
    for result in (refused_check, refused):
        one_sentence(result, f"{root}/tiny@v1.0 holds o/tiny@v1.0, but {moved} now lists other bytes for config.json: v1.0 "
                     "moved since it was fetched. It is not rewritten", "pin the revision")
    assert (root / "tiny@v1.0" / "config.json").read_bytes() == FILES["config.json"]
    v2, replaced = play(tmp_path, [{**newer, "dest": str(root / "tiny@v2.0")}, {**newer, "replace_changed": True}])
    assert v2["changed"] is True and v2["fetched"] == ["config.json"] and v2["reused"] == ["README.md", "sub/weights.bin"]
    assert replaced["changed"] is True and replaced["fetched"] == ["config.json"]
    assert (root / "tiny@v1.0" / "config.json").read_bytes() == (moved / "config.json").read_bytes()
    assert (root / "tiny" / "config.json").read_bytes() == FILES["config.json"], "the linked folder was written through"


def test_mirror_failures_are_one_sentence(tmp_path, mirror):
    (mirror["folder"] / "sub" / "weights.bin").unlink()   # listed in the manifest, not served
    base = {"model_id": "o/tiny", "revision": "v1.0", "source": "http", "reserve_bytes": 0}
    missing_file, missing_manifest, no_scheme = play(tmp_path, [
        {**base, "dest": str(tmp_path / "a"), "url": mirror["url"]},
        {**base, "dest": str(tmp_path / "b"), "url": mirror["url"] + "/nowhere"},
        {**base, "dest": str(tmp_path / "c"), "url": mirror["url"].replace("http://", "")},
    ])
    one_sentence(missing_file, f"{mirror['url']}/sub/weights.bin answered 404 for sub/weights.bin", "re-run model_fetch into it")
    one_sentence(missing_manifest, f"{mirror['url']}/nowhere/.llmfleet-manifest.json answered 404", "check url")
    one_sentence(no_scheme, "is not an http:// or https:// address: write it in full")


def test_hub_failures_are_one_sentence(tmp_path):
    class Failing(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):  # noqa: N802 - http.server naming
            body = b"<html>maintenance</html>" if "/html/" in self.path else b'{"Code": 503, "Message": "busy", "Success": false}'
            self.send_response(200 if "/html/" in self.path else 503)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Failing)
    url = start(server)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    refused = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()
    base = {"revision": "v1.0", "dest": str(tmp_path / "m"), "reserve_bytes": 0}
    try:
        busy, html, nobody, hf_busy = play(tmp_path, [
            {**base, "model_id": "o/m", "endpoint": url, "check": True},
            {**base, "model_id": "html/m", "endpoint": url},
            {**base, "model_id": "o/m", "endpoint": refused},
            {**base, "model_id": "o/m", "endpoint": url, "source": "huggingface"},
        ])
    finally:
        server.shutdown()
        server.server_close()
    one_sentence(busy, f"{url} answered 503 for the file listing of o/m@v1.0 (busy) at {url}/api/v1/models/o/m/repo/files?Revision=v1.0",
                 "re-run later, or set the endpoint to a mirror")
    one_sentence(html, f"{url}/api/v1/models/html/m/repo/files?Revision=v1.0&Recursive=True sent the file listing", "not JSON",
                 "not a web page or a proxy's login page")
    one_sentence(nobody, f"cannot reach {refused}/api/v1/models/o/m/repo/files", "check the endpoint, a mirror, or the host's network")
    one_sentence(hf_busy, f"{url}/api/models/o/m/tree/v1.0?recursive=True answered 503", "re-run later")
    assert not (tmp_path / "m").exists()


@pytest.fixture
def hub(tmp_path):
    """The stand-in hub (both APIs) serving o/tiny at v1.0."""
    root = tmp_path / "hub"
    for path, data in FILES.items():
        (root / "o" / "tiny" / "v1.0" / path).parent.mkdir(parents=True, exist_ok=True)
        (root / "o" / "tiny" / "v1.0" / path).write_bytes(data)
    (root / "o" / "tiny" / "tags.txt").write_text("v1.0\n")
    server = serve(str(root))
    url = start(server)
    yield url
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("source", ["modelscope", "huggingface"])
def test_real_sdk_fetches_then_leaves_alone(tmp_path, hub, source):
    """The project venv has both SDKs (requirements.txt); sdk_python is this interpreter."""
    dest = tmp_path / "models" / "tiny"
    args = {"model_id": "o/tiny", "revision": "v1.0", "dest": str(dest), "endpoint": hub, "source": source, "reserve_bytes": 0,
            "sdk_python": sys.executable}
    first, second, wrong = play(tmp_path, [args, args, {**args, "revision": "v9.9", "dest": str(tmp_path / "other")}])
    assert first.get("failed") is not True, first.get("msg")
    assert first["changed"] is True and sorted(first["fetched"]) == sorted(FILES)
    assert {p: (dest / p).read_bytes() for p in FILES} == FILES
    assert second["changed"] is False and second["bytes_fetched"] == 0
    fix = "check the model id and the revision" if source == "modelscope" else "check the branch, tag or commit"
    one_sentence(wrong, "revision 'v9.9'", hub, fix)


def served(hub_url):
    with urllib.request.urlopen(hub_url + "/_stats", timeout=10) as answer:
        return sum(json.loads(answer.read())["served"].values())


@pytest.mark.parametrize("source", ["modelscope", "huggingface"])
def test_real_sdk_fetches_a_new_revision_beside_the_old_one(tmp_path, hub, source):
    """Issue 35 with the real SDKs: the unversioned folder of an earlier release gives every file to the same revision's
    own folder by hard link (the hub sends nothing); v2.0, with config.json changed, takes that file alone from the hub and
    links the rest; when v2.0 then moves on the hub, its folder is not rewritten."""
    v2 = tmp_path / "hub" / "o" / "tiny" / "v2.0"
    for path, data in FILES.items():
        (v2 / path).parent.mkdir(parents=True, exist_ok=True)
        (v2 / path).write_bytes(b'{"model_type": "qwen3", "revision": "v2.0"}\n' if path == "config.json" else data)
    (tmp_path / "hub" / "o" / "tiny" / "tags.txt").write_text("v1.0\nv2.0\n")
    models = tmp_path / "models"
    base = {"model_id": "o/tiny", "revision": "v1.0", "endpoint": hub, "source": source, "reserve_bytes": 0, "sdk_python": sys.executable}
    legacy, same, newer = play(tmp_path, [{**base, "dest": str(models / "tiny")}, {**base, "dest": str(models / "tiny@v1.0")},
                                          {**base, "revision": "v2.0", "dest": str(models / "tiny@v2.0")}])
    assert legacy.get("failed") is not True and newer.get("failed") is not True, (legacy.get("msg"), newer.get("msg"))
    assert same["changed"] is True and same["fetched"] == [] and same["reused"] == sorted(FILES) and same["bytes_fetched"] == 0
    assert newer["fetched"] == ["config.json"] and newer["reused"] == ["README.md", "sub/weights.bin"]
    assert served(hub) == sum(len(d) for d in FILES.values()) + (v2 / "config.json").stat().st_size
    assert len({(models / f / "sub" / "weights.bin").stat().st_ino for f in ("tiny", "tiny@v1.0", "tiny@v2.0")}) == 1
    assert (models / "tiny@v1.0" / "config.json").read_bytes() == FILES["config.json"]
    (v2 / "config.json").write_bytes(b'{"model_type": "qwen3", "revision": "v2.0", "moved": true}\n')
    moved, = play(tmp_path, [{**base, "revision": "v2.0", "dest": str(models / "tiny@v2.0")}])
    one_sentence(moved, f"{models}/tiny@v2.0 holds o/tiny@v2.0, but {hub} now lists other bytes for config.json: v2.0 moved since "
                 "it was fetched. It is not rewritten")
    assert b"moved" not in (models / "tiny@v2.0" / "config.json").read_bytes()


def test_sdk_interpreter_missing_is_one_sentence(tmp_path, hub):
    result, = play(tmp_path, [{"model_id": "o/tiny", "revision": "v1.0", "dest": str(tmp_path / "m"), "endpoint": hub, "reserve_bytes": 0,
                               "sdk_python": str(tmp_path / "no-venv" / "bin" / "python")}])
    one_sentence(result, f"cannot run {tmp_path}/no-venv/bin/python (No such file or directory), so nothing was fetched from {hub}",
                 "set sdk_python to an interpreter that has modelscope")
    assert pathlib.Path(tmp_path / "m").is_dir()
