"""The model store's pure core: listings, selection, verification, manifests."""

from __future__ import annotations

import hashlib
import os

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _model_store as ms


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


FILES = {"config.json": b'{"a": 1}', "model.safetensors": b"x" * 1000, "sub/tokenizer.json": b"{}"}
REMOTE = [ms.RemoteFile(p, len(d), sha(d)) for p, d in sorted(FILES.items())]


def populate(tmp_path, files=None):
    for path, data in (files or FILES).items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(data)


def test_parse_listing_skips_trees_and_needs_sizes():
    body = {"Code": 200, "Data": {"Files": [{"Path": "sub", "Type": "tree", "Size": 0},
                                            {"Path": "sub/a.bin", "Type": "blob", "Size": 3, "Sha256": "AB" * 32}]}}
    assert ms.parse_listing(body, "m") == [ms.RemoteFile("sub/a.bin", 3, "ab" * 32)]
    assert ms.parse_listing([{"Path": "x", "Size": 1}], "m") == [ms.RemoteFile("x", 1, None)]
    with pytest.raises(ms.StoreError, match="gives no size for x"):
        ms.parse_listing([{"Path": "x"}], "m")
    with pytest.raises(ms.StoreError, match="unusable path '../etc/passwd'"):
        ms.parse_listing([{"Path": "../etc/passwd", "Size": 1}], "m")


def test_select():
    assert [f.path for f in ms.select(REMOTE, None, ["*.safetensors"], False)] == ["config.json", "sub/tokenizer.json"]
    assert [f.path for f in ms.select(REMOTE, ["sub/*"], None, False)] == ["sub/tokenizer.json"]
    assert [f.path for f in ms.select(REMOTE, None, None, True)] == ["config.json"]


def test_check_missing_corrupt_partial(tmp_path):
    populate(tmp_path, {"config.json": FILES["config.json"], "model.safetensors": b"y" * 1000})
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "tokenizer.json.incomplete").write_bytes(b"{")
    result = ms.check(str(tmp_path), REMOTE, full=False)
    assert result.ok == ["config.json"] and result.corrupt == ["model.safetensors"] and result.missing == ["sub/tokenizer.json"]
    assert result.partial_bytes == {"sub/tokenizer.json": 1}
    assert ms.bytes_to_fetch(REMOTE, result) == 1000 + 2 - 1


def test_fast_check_trusts_the_manifest_until_mtime_changes(tmp_path):
    populate(tmp_path)
    ms.write_manifest(str(tmp_path), ms.manifest_document("m", "v1", "modelscope", REMOTE, str(tmp_path)))
    assert ms.check(str(tmp_path), REMOTE, full=False).to_fetch == []
    target = tmp_path / "model.safetensors"
    stat = target.stat()
    target.write_bytes(b"z" * 1000)                     # same size, other bytes
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert ms.check(str(tmp_path), REMOTE, full=False).to_fetch == []   # fast: size and mtime look right
    assert ms.check(str(tmp_path), REMOTE, full=True).corrupt == ["model.safetensors"]
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    assert ms.check(str(tmp_path), REMOTE, full=False).corrupt == ["model.safetensors"]   # touched: re-hashed


def test_manifest_round_trip_and_idempotent_write(tmp_path):
    populate(tmp_path)
    document = ms.manifest_document("m", "v1", "modelscope", REMOTE, str(tmp_path))
    assert ms.write_manifest(str(tmp_path), document) is True
    assert ms.write_manifest(str(tmp_path), document) is False
    assert ms.files_from_manifest(ms.read_manifest(str(tmp_path)), "here") == REMOTE
    with pytest.raises(ms.StoreError, match="not a model_fetch manifest"):
        ms.files_from_manifest({"files": []}, "here")


def test_space_and_revision_messages():
    with pytest.raises(ms.StoreError, match=r"needs 2.00 GiB \(\+1.00 GiB kept free\) but 1.50 GiB is free"):
        ms.check_space("/models", 2 << 30, 3 << 29, 1 << 30)
    ms.check_space("/models", 1 << 30, 3 << 30, 1 << 30)
    assert ms.revision_warning("master") and "is a branch" in ms.revision_warning("master")
    assert ms.revision_warning("v1.0") is None and ms.revision_warning("4ba787ec9") is None


def test_progress_line_and_units():
    from ansible_collections.llmfleet.serving.plugins.module_utils._model_store import human_bytes, human_seconds, progress_line
    assert human_bytes(512) == "512 B" and human_bytes(1536) == "1.5 KiB" and human_bytes(3 * 2**30) == "3.0 GiB"
    assert human_seconds(5) == "5 s" and human_seconds(125) == "2 min 05 s" and human_seconds(7260) == "2 h 01 min"
    line = progress_line("Qwen3-8B", 4 * 2**30, 16 * 2**30, 64.0)
    assert line == "Qwen3-8B: 25 % (4.0 GiB of 16.0 GiB) at 64.0 MiB/s, 1 min 04 s so far, about 3 min 12 s left"
    # bytes on disk can run ahead of (parts) or behind (a repair rewrites a file) what this run needs
    assert progress_line("m", 20, 10, 2.0).startswith("m: 100 % (10 B of 10 B)")
    assert progress_line("m", -5, 10, 2.0).startswith("m: 0 % (0 B of 10 B) at 0 B/s")


def test_fetch_jobs_from_the_roles_loops():
    from ansible_collections.llmfleet.serving.plugins.module_utils._model_store import StoreError, fetch_jobs
    planned = {"item": {"id": "Qwen/Qwen3-8B"}, "invocation": {"module_args": {"dest": "/models/Qwen3-8B"}}, "bytes_fetched": 1000,
               "bytes_on_disk": 4096}
    started = [{"ansible_job_id": "j1.2", "item": planned}, {"skipped": True, "item": {"item": {"id": "other"}}}]
    assert fetch_jobs(started) == [{"jid": "j1.2", "label": "Qwen/Qwen3-8B", "dest": "/models/Qwen3-8B", "needed": 1000,
                                    "start_bytes": 4096}]
    with pytest.raises(StoreError, match="does not carry its check-mode result"):
        fetch_jobs([{"ansible_job_id": "j", "item": {}}])


def test_fetch_summary_and_bytes_under(tmp_path):
    from ansible_collections.llmfleet.serving.plugins.module_utils._model_store import bytes_under, fetch_summary
    results = [{"changed": True, "item": {"id": "Qwen/Qwen3-8B"}, "fetched": ["a", "b"], "files": 5, "repaired": ["b"],
                "bytes_fetched": 3 * 2**30, "total_bytes": 16 * 2**30},
               {"changed": False, "item": {"id": "done/model"}}]
    assert fetch_summary(results) == ["Qwen/Qwen3-8B: 2 of 5 files, 3.0 GiB of 16.0 GiB (1 to repair)"]
    assert bytes_under(str(tmp_path / "missing")) == 0
    (tmp_path / "m" / "sub").mkdir(parents=True)
    (tmp_path / "m" / "a").write_bytes(b"x" * 10)
    (tmp_path / "m" / "sub" / "b.incomplete").write_bytes(b"y" * 7)
    assert bytes_under(str(tmp_path / "m")) == 17


# --- Hugging Face listings -----------------------------------------------------------------------

HF_TREE = [
    {"type": "directory", "oid": "0" * 40, "size": 0, "path": "tokenizer"},
    {"type": "file", "oid": "a" * 40, "size": 826, "path": "config.json"},
    {"type": "file", "oid": "b" * 40, "size": 3282416, "path": "model.safetensors",
     "lfs": {"oid": "C" * 64, "size": 3282416, "pointerSize": 134}},
]


def test_hf_tree_lfs_files_carry_sha256_others_their_git_id():
    files = ms.parse_hf_tree(HF_TREE, "o/m")
    assert files == [ms.RemoteFile("config.json", 826, None, "a" * 40), ms.RemoteFile("model.safetensors", 3282416, "c" * 64, None)]


@pytest.mark.parametrize("entries, message", [
    ({"error": "x"}, "is not a list of files"),
    ([{"type": "file", "path": "../etc/passwd", "size": 1}], "unusable path"),
    ([{"type": "file", "path": "a.json"}], "gives no size for a.json"),
])
def test_hf_tree_refuses_what_it_cannot_use(entries, message):
    with pytest.raises(ms.StoreError, match=message):
        ms.parse_hf_tree(entries, "o/m")


def test_git_blob_sha1_is_gits_object_id(tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(b"hello\n")
    # `printf 'hello\n' | git hash-object --stdin`
    assert ms.git_blob_sha1(str(path)) == "ce013625030ba8dba906f756967f9e9ca394464a"


def test_check_verifies_git_files_by_their_blob_id(tmp_path):
    (tmp_path / "config.json").write_bytes(b"hello\n")
    good = ms.RemoteFile("config.json", 6, None, "ce013625030ba8dba906f756967f9e9ca394464a")
    assert ms.check(str(tmp_path), [good], full=True).ok == ["config.json"]
    bad = ms.RemoteFile("config.json", 6, None, "0" * 40)
    assert ms.check(str(tmp_path), [bad], full=True).corrupt == ["config.json"]
    document = ms.manifest_document("o/m", "main", "huggingface", [good], str(tmp_path))
    assert document["files"][0]["git_sha1"] == good.git_sha1 and document["files"][0]["sha256"] is None
    ms.write_manifest(str(tmp_path), document)
    assert ms.files_from_manifest(document, "peer") == [good]
    assert ms.check(str(tmp_path), [good], full=False).ok == ["config.json"]


@pytest.mark.parametrize("header, url", [
    ('<https://huggingface.co/api/models/o/m/tree/main?recursive=True&cursor=abc>; rel="next"',
     "https://huggingface.co/api/models/o/m/tree/main?recursive=True&cursor=abc"),
    ('<https://h/a?p=1>; rel="prev", <https://h/a?p=3>; rel="next"', "https://h/a?p=3"),
    ('<https://h/a?p=1>; rel="prev"', None),
    (None, None),
    ("", None),
])
def test_next_page_follows_the_link_header(header, url):
    assert ms.next_page(header) == url


def test_hub_defaults_come_from_one_table():
    assert ms.hub("huggingface") == {"endpoint": "https://huggingface.co", "revision": "main", "package": "huggingface_hub"}
    assert ms.hub("modelscope")["revision"] == "master"
    with pytest.raises(ms.StoreError, match="'http' is not a hub: use one of huggingface, modelscope"):
        ms.hub("http")
