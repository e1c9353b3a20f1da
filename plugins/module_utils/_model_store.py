# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Model store: the manifest a model folder keeps (path, size, sha256, revision, from the hub's own
listing), its verification, and what a run has to fetch. Private to llmfleet.serving; pure except
for the small file helpers that take their folder as an argument.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional

MANIFEST = ".llmfleet-manifest.json"
# what a plan is made from before any weight moves: the architecture, the weights' size (index), the generation defaults,
# the tokenizer's chat template, and the quantization side files older checkpoints keep beside config.json (GPTQ's
# quantize_config.json, AWQ's quant_config.json, ModelOpt's hf_quant_config.json), and sentence-transformers' side files
CONFIG_ONLY = ("config.json", "model.safetensors.index.json", "generation_config.json", "tokenizer_config.json", "chat_template.jinja",
               "quantize_config.json", "quant_config.json", "hf_quant_config.json",
               # sentence-transformers: a Pooling module makes vLLM serve the checkpoint as an embedding model, max_seq_length is its length
               "modules.json", "sentence_bert_config.json", "2_Dense/config.json")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
COMMIT_RE = re.compile(r"^[0-9a-f]{7,64}$")
HF_CACHE = os.path.join(".cache", "huggingface")   # huggingface_hub's partial files and metadata inside a local_dir


class StoreError(Exception):
    """One clear sentence: what is wrong and what to do."""


# The hubs model_fetch downloads from with their own SDK: where they are, the branch a revision
# defaults to, the Python package that downloads. The module and the role (filter model_hub) read it here.
HUBS: Dict[str, Dict[str, str]] = {
    "modelscope": {"endpoint": "https://modelscope.cn", "revision": "master", "package": "modelscope"},
    "huggingface": {"endpoint": "https://huggingface.co", "revision": "main", "package": "huggingface_hub"},
}


def hub(source: str) -> Dict[str, str]:
    if source not in HUBS:
        raise StoreError(f"model source {source!r} is not a hub: use one of {', '.join(sorted(HUBS))}")
    return dict(HUBS[source])


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int
    sha256: Optional[str]
    git_sha1: Optional[str] = None   # Hugging Face names small (non-LFS) files by their git blob id only


def git_blob_sha1(path: str) -> str:
    """git's object id of a file: sha1 of "blob <size>\\0" + the bytes (what the Hugging Face Hub lists as `oid`)."""
    digest = hashlib.sha1(f"blob {os.path.getsize(path)}\0".encode())  # noqa: S324 - git's id, not a security check
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class Check:
    ok: List[str] = field(default_factory=list)
    missing: List[str] = field(default_factory=list)
    corrupt: List[str] = field(default_factory=list)
    partial_bytes: Dict[str, int] = field(default_factory=dict)

    @property
    def to_fetch(self) -> List[str]:
        return sorted(self.missing + self.corrupt)


def _from(model_id: str, where: Optional[str]) -> str:
    return f"{model_id} from {where}" if where else model_id


def _usable(path: Any) -> bool:
    return isinstance(path, str) and bool(path) and not path.startswith("/") and ".." not in path.split("/")


def _size(value: Any) -> Optional[int]:
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def parse_listing(body: Any, model_id: str, where: Optional[str] = None) -> List[RemoteFile]:
    """The hub's `repo/files` answer: `{"Data": {"Files": [...]}}` or a bare list. `where` (the URL) goes into the sentences."""
    data = body.get("Data", body) if isinstance(body, Mapping) else body
    files = data.get("Files") if isinstance(data, Mapping) else data
    if not isinstance(files, list):
        raise StoreError(f"the hub's file listing for {_from(model_id, where)} is not a list of files: "
                         "check that the endpoint is a ModelScope API (or a mirror of it)")
    out = []
    for entry in files:
        if not isinstance(entry, Mapping) or entry.get("Type") == "tree":
            continue
        path = entry.get("Path") or entry.get("path") or entry.get("Name")
        if not _usable(path):
            raise StoreError(f"the hub's listing for {_from(model_id, where)} has an unusable path {path!r}: "
                             "it points outside the model folder; set the endpoint to a hub you trust")
        size = _size(entry.get("Size"))
        if size is None:
            raise StoreError(f"the hub's listing for {_from(model_id, where)} gives no size for {path}: "
                             "check that the endpoint is a ModelScope API (or a complete mirror of it)")
        out.append(RemoteFile(path, size, str(entry.get("Sha256") or "").lower() or None))
    return sorted(out, key=lambda f: f.path)


def parse_hf_tree(entries: Any, model_id: str, where: Optional[str] = None) -> List[RemoteFile]:
    """The Hugging Face Hub's `tree?recursive=True` answer: LFS files carry their sha256 (`lfs.oid`),
    the others only their git blob id (`oid`)."""
    if not isinstance(entries, list):
        raise StoreError(f"the hub's file listing for {_from(model_id, where)} is not a list of files: "
                         "check that the endpoint is a Hugging Face Hub API (or a mirror of it)")
    out = []
    for entry in entries:
        if not isinstance(entry, Mapping) or entry.get("type") != "file":
            continue
        path = entry.get("path")
        if not _usable(path):
            raise StoreError(f"the hub's listing for {_from(model_id, where)} has an unusable path {path!r}: "
                             "it points outside the model folder; set the endpoint to a hub you trust")
        lfs = entry.get("lfs") if isinstance(entry.get("lfs"), Mapping) else {}
        size = _size(lfs.get("size", entry.get("size")))
        if size is None:
            raise StoreError(f"the hub's listing for {_from(model_id, where)} gives no size for {path}: "
                             "check that the endpoint is a Hugging Face Hub API (or a complete mirror of it)")
        sha256 = str(lfs.get("oid") or lfs.get("sha256") or "").lower() or None
        out.append(RemoteFile(path, size, sha256, None if sha256 else (str(entry.get("oid") or "") or None)))
    return sorted(out, key=lambda f: f.path)


def next_page(link_header: Optional[str]) -> Optional[str]:
    """The `rel="next"` URL of an RFC 8288 Link header (how the Hugging Face Hub pages long listings)."""
    for part in (link_header or "").split(","):
        target, _sep, params = part.partition(";")
        if any(p.strip().replace(" ", "") in ('rel="next"', "rel=next") for p in params.split(";")):
            return target.strip().strip("<>") or None
    return None


def files_from_manifest(document: Any, where: str) -> List[RemoteFile]:
    """The file list of a mirror: another host's (or a web server's) copy of our manifest."""
    entries = document.get("files") if isinstance(document, Mapping) else None
    if not isinstance(entries, list) or not entries:
        raise StoreError(f"{where} is not a model_fetch manifest with files: point url at a folder that model_fetch filled")
    out = []
    for entry in entries:
        path = entry.get("path") if isinstance(entry, Mapping) else None
        if not _usable(path) or not isinstance(entry.get("size"), int):
            raise StoreError(f"{where} lists an unusable file entry {entry!r}: re-run model_fetch into the mirror's folder")
        out.append(RemoteFile(path, entry["size"], entry.get("sha256"), entry.get("git_sha1")))
    return sorted(out, key=lambda f: f.path)


def select(files: Iterable[RemoteFile], allow: Optional[List[str]], ignore: Optional[List[str]], config_only: bool) -> List[RemoteFile]:
    chosen = []
    for f in files:
        if config_only:
            if f.path in CONFIG_ONLY:
                chosen.append(f)
            continue
        if allow and not any(fnmatch.fnmatch(f.path, p) for p in allow):
            continue
        if ignore and any(fnmatch.fnmatch(f.path, p) for p in ignore):
            continue
        chosen.append(f)
    return chosen


def listed_weight_bytes(files: Iterable[RemoteFile]) -> int:
    """Bytes of the weight files a listing names: the safetensors files when there are any (a repository that also
    keeps .bin copies serves those to nobody), the PyTorch files otherwise; 0 when it lists none (a GGUF-only repo)."""
    files = list(files)
    for suffixes in ((".safetensors",), WEIGHT_SUFFIXES[1:]):
        chosen = [f for f in files if f.path.endswith(suffixes) and "/" not in f.path and not f.path.startswith("training_args")]
        # a repository in both formats (Mistral's consolidated*.safetensors beside the Hugging Face shards): the plan of a hub
        # model loads the Hugging Face shards (vLLM's default loader keeps the files model.safetensors.index.json names),
        # so the other copy is not counted twice
        hf_shards = [f for f in chosen if not f.path.startswith("consolidated")]
        if hf_shards and len(hf_shards) < len(chosen):
            chosen = hf_shards
        if chosen:
            return sum(f.size for f in chosen)
    return 0


def local_listing(source_path: Optional[str]) -> List[RemoteFile]:
    """The files of a folder on this host (air-gapped fleets), hashed; our manifest, partial files and
    huggingface_hub's own cache folder are not model files."""
    if not source_path or not os.path.isdir(source_path):
        raise StoreError(f"source_path {source_path!r} is not a folder on this host: set it to the folder that holds the model's files")
    files = []
    for dirpath, _dirs, names in os.walk(source_path):
        for name in sorted(names):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, source_path)
            if rel == MANIFEST or name.endswith(".incomplete") or rel.startswith(HF_CACHE + os.sep):
                continue
            files.append(RemoteFile(rel, os.path.getsize(full), sha256_of(full)))
    return sorted(files, key=lambda f: f.path)


def copy_local(source_path: str, dest: str, paths: Iterable[str]) -> None:
    """Copy files from a folder on this host, each through a partial file renamed into place."""
    for rel in paths:
        target = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(os.path.join(source_path, rel), target + ".incomplete")
        os.replace(target + ".incomplete", target)


def existing_parent(path: str) -> str:
    """The folder itself, or its nearest existing parent (where a new folder's bytes would go)."""
    while not os.path.isdir(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


@dataclass(frozen=True)
class Plan:
    to_fetch: List[str]
    repaired: List[str]
    needed: int
    # files another folder of the same model already holds with the listed bytes: hard-linked, not fetched
    # ({path in dest: the file to link}); the other folder is only read
    reused: Dict[str, str] = field(default_factory=dict)


def same_bytes(record: Mapping[str, Any], f: RemoteFile) -> Optional[bool]:
    """Whether a manifest record and a listing entry name the same bytes: False when the sizes differ or a hash both
    give differs, True when a hash both give is equal, None when they share no hash (one hub lists a sha256, the other
    a git blob id)."""
    if record.get("size") != f.size:
        return False
    pairs = [(record.get("sha256"), f.sha256), (record.get("git_sha1"), f.git_sha1)]
    known = [(a, b) for a, b in pairs if a and b]
    if not known:
        return None
    return all(a == b for a, b in known)


def changed_upstream(dest: str, files: List[RemoteFile]) -> List[str]:
    """The files dest's manifest recorded that the source now lists with other bytes: a branch that moved since the
    folder was filled, or another revision asked for in the same folder. What model_fetch refuses to rewrite in place
    (an engine may be serving from the folder); corruption (the record equals the listing, the file does not) is not
    in this list, check() finds it."""
    recorded = {e["path"]: e for e in read_manifest(dest).get("files", []) if isinstance(e, dict) and "path" in e}
    return sorted(f.path for f in files if f.path in recorded and same_bytes(recorded[f.path], f) is False)


def moved_message(dest: str, model_id: str, revision: str, where: str, changed: List[str]) -> str:
    """The refusal for changed_upstream: what moved and the two ways on."""
    old = read_manifest(dest)
    was = f"{old.get('model', model_id)}@{old.get('revision', '?')}"
    why = (f"{revision} moved since it was fetched" if old.get("revision") == revision else f"{model_id}@{revision} is asked for there")
    shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
    return (f"{dest} holds {was}, but {where} now lists other bytes for {shown}: {why}. It is not rewritten (an engine may "
            "serve from it): pin the revision (its own folder <name>@<revision>, rolled like an engine version) or remove the "
            "folder while nothing serves from it")


def sibling_records(dest: str, model_id: str) -> List[Dict[str, Any]]:
    """The files other folders of the same model (its other revisions, or its unversioned folder of a release before
    revisions had folders) hold as their manifests recorded them: [{path (the file), size, sha256, git_sha1, mtime_ns,
    rel}] from every sibling folder of dest under the same parent whose manifest names `model_id` (any case)."""
    parent = os.path.dirname(os.path.abspath(dest).rstrip("/"))
    own = os.path.basename(os.path.abspath(dest).rstrip("/"))
    out: List[Dict[str, Any]] = []
    try:
        names = sorted(os.listdir(parent))
    except OSError:
        return out
    for name in names:
        folder = os.path.join(parent, name)
        if name == own or not os.path.isfile(os.path.join(folder, MANIFEST)):
            continue
        manifest = read_manifest(folder)
        if str(manifest.get("model", "")).lower() != str(model_id).lower():
            continue
        for entry in manifest.get("files", []):
            if isinstance(entry, dict) and _usable(entry.get("path")):
                out.append(dict(entry, rel=entry["path"], path=os.path.join(folder, entry["path"])))
    return out


def reusable(dest: str, files: List[RemoteFile], missing: Iterable[str], siblings: List[Mapping[str, Any]]) -> Dict[str, str]:
    """Of the `missing` files of dest, those a sibling folder holds with the listed bytes, as its manifest recorded them
    when it hashed them and still unchanged on disk (size and mtime as recorded: the fast check's trust): {path: file}."""
    listed = {f.path: f for f in files}
    out: Dict[str, str] = {}
    for rel in missing:
        f = listed.get(rel)
        for record in siblings:
            if f is None or record.get("rel") != rel or not same_bytes(record, f):
                continue
            try:
                stat = os.stat(str(record["path"]))
            except OSError:
                continue
            if stat.st_size == f.size and stat.st_mtime_ns == record.get("mtime_ns"):
                out[rel] = str(record["path"])
                break
    return out


def link_reused(dest: str, reused: Mapping[str, str]) -> None:
    """Hard-link each reused file into dest (a copy, through a partial file, where the file system refuses a link). The
    other folder is never written: model_fetch replaces a file (a new one renamed into place), it never edits one."""
    for rel, source in sorted(reused.items()):
        target = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        for stale in (target, target + ".incomplete"):   # a partial download of it is not needed any more
            if os.path.lexists(stale):
                os.remove(stale)
        try:
            os.link(source, target)
        except OSError:
            shutil.copy2(source, target + ".incomplete")
            os.replace(target + ".incomplete", target)


def fetch_plan(dest: str, files: List[RemoteFile], full: bool, siblings: Optional[List[Mapping[str, Any]]] = None) -> Plan:
    """What a run fetches into dest: every file when the folder does not exist, else what check() finds
    missing or corrupt (less the bytes partial files already hold); a missing file that another folder of the model
    holds with the listed bytes (`siblings`, sibling_records' answer) is linked from there instead."""
    if not os.path.isdir(dest):
        reused = reusable(dest, files, [f.path for f in files], siblings or [])
        rest = [f for f in files if f.path not in reused]
        return Plan([f.path for f in rest], [], sum(f.size for f in rest), reused)
    state = check(dest, files, full)
    reused = reusable(dest, files, state.missing, siblings or [])
    state.missing = [p for p in state.missing if p not in reused]
    return Plan(state.to_fetch, list(state.corrupt), bytes_to_fetch(files, state), reused)


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(dest: str) -> Dict[str, Any]:
    try:
        with open(os.path.join(dest, MANIFEST), encoding="utf-8") as handle:
            data = json.load(handle)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def check(dest: str, files: List[RemoteFile], full: bool) -> Check:
    """Which files are in place. Fast: size, and the mtime the manifest recorded when the file was
    last verified by hash; full (or no manifest entry): re-hash against the hub's sha256."""
    recorded = {e["path"]: e for e in read_manifest(dest).get("files", []) if isinstance(e, dict) and "path" in e}
    result = Check()
    for f in files:
        local = os.path.join(dest, f.path)
        partial = local + ".incomplete"
        if os.path.exists(partial):
            result.partial_bytes[f.path] = os.path.getsize(partial)
        if not os.path.isfile(local):
            result.missing.append(f.path)
            continue
        stat = os.stat(local)
        if stat.st_size != f.size:
            result.corrupt.append(f.path)
            continue
        seen = recorded.get(f.path)
        trusted = (not full and seen is not None and seen.get("size") == f.size and seen.get("sha256") == f.sha256
                   and seen.get("git_sha1") == f.git_sha1 and seen.get("mtime_ns") == stat.st_mtime_ns)
        if trusted or (f.sha256 is None and f.git_sha1 is None):
            result.ok.append(f.path)
        elif (sha256_of(local) == f.sha256) if f.sha256 else (git_blob_sha1(local) == f.git_sha1):
            result.ok.append(f.path)
        else:
            result.corrupt.append(f.path)
    return result


def bytes_to_fetch(files: List[RemoteFile], result: Check) -> int:
    sizes = {f.path: f.size for f in files}
    return sum(sizes[p] - min(result.partial_bytes.get(p, 0), sizes[p]) for p in result.to_fetch)


def check_space(dest: str, needed: int, free: int, reserve: int) -> None:
    if needed + reserve > free:
        raise StoreError(f"not enough disk space under {dest}: the download needs {needed / 2**30:.2f} GiB "
                         f"(+{reserve / 2**30:.2f} GiB kept free) but {free / 2**30:.2f} GiB is free; free space or choose another model_root")


def manifest_document(model_id: str, revision: str, source: str, files: List[RemoteFile], dest: str) -> Dict[str, Any]:
    entries = []
    for f in files:
        stat = os.stat(os.path.join(dest, f.path))
        entry = {"path": f.path, "size": f.size, "sha256": f.sha256, "mtime_ns": stat.st_mtime_ns}
        if f.git_sha1:
            entry["git_sha1"] = f.git_sha1
        entries.append(entry)
    return {"model": model_id, "revision": revision, "source": source, "files": entries,
            "total_bytes": sum(f.size for f in files)}


def write_manifest(dest: str, document: Mapping[str, Any]) -> bool:
    """Write atomically; True when the content changed."""
    path = os.path.join(dest, MANIFEST)
    text = json.dumps(document, indent=1, sort_keys=True) + "\n"
    try:
        with open(path, encoding="utf-8") as handle:
            if handle.read() == text:
                return False
    except OSError:
        pass
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)
    return True


def revision_warning(revision: str) -> Optional[str]:
    if COMMIT_RE.match(revision) or re.fullmatch(r"v?\d+(\.\d+)*", revision):
        return None
    return (f"revision {revision!r} is a branch: what it points to can change between hosts and runs; "
            "pin a tag or commit for production")


def bytes_under(path: str) -> int:
    """Bytes of the files under a folder (partial downloads included); 0 when it does not exist. What a
    download's progress is measured in, before (model_fetch) and while it runs (model_fetch_wait)."""
    total = 0
    for dirpath, _dirs, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue  # a part file renamed while we looked
    return total


def human_bytes(count: float) -> str:
    """1536 -> '1.5 KiB'."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def human_seconds(seconds: float) -> str:
    seconds = int(max(0, seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"


def progress_line(label: str, done: int, needed: int, elapsed: float) -> str:
    """One progress line for a running download: percent of the bytes this run needs, rate, time left."""
    done = max(0, min(done, needed)) if needed else max(0, done)
    rate = done / elapsed if elapsed > 0 else 0.0
    percent = 100.0 * done / needed if needed else 100.0
    left = f", about {human_seconds((needed - done) / rate)} left" if rate > 0 and needed > done else ""
    return (f"{label}: {percent:.0f} % ({human_bytes(done)} of {human_bytes(needed)}) at {human_bytes(rate)}/s, "
            f"{human_seconds(elapsed)} so far{left}")


def fetch_jobs(started: List[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """The jobs model_fetch_wait follows, from the role's async (poll 0) model_fetch loop over the
    check-mode results (which carry the bytes already on disk). Skipped items (nothing to fetch) are left out."""
    jobs = []
    for index, job in enumerate(started):
        if "ansible_job_id" not in job:
            continue
        planned = job.get("item") or {}
        dest = (planned.get("invocation") or {}).get("module_args", {}).get("dest")
        model = (planned.get("item") or {}).get("id")
        if not dest or not model:
            raise StoreError(f"model_fetch_jobs: job {index} does not carry its check-mode result (item.invocation.module_args.dest)")
        # the files linked from another revision's folder land at once: counted as there from the start
        jobs.append({"jid": job["ansible_job_id"], "label": model, "dest": dest, "needed": int(planned.get("bytes_fetched") or 0),
                     "start_bytes": int(planned.get("bytes_on_disk") or 0) + int(planned.get("bytes_reused") or 0)})
    return jobs


def fetch_summary(results: List[Mapping[str, Any]]) -> List[str]:
    """One line per model a check-mode pass found work for: files and bytes to fetch, files to repair."""
    lines = []
    for result in results:
        if not result.get("changed"):
            continue
        model = (result.get("item") or {}).get("id", "?")
        repaired = len(result.get("repaired") or [])
        reused = len(result.get("reused") or [])
        lines.append(f"{model}: {len(result.get('fetched') or [])} of {result.get('files', '?')} files, "
                     f"{human_bytes(result.get('bytes_fetched', 0))} of {human_bytes(result.get('total_bytes', 0))}"
                     + (f" ({repaired} to repair)" if repaired else "")
                     + (f"; {reused} linked from another revision's folder ({human_bytes(result.get('bytes_reused', 0))}, no download)"
                        if reused else ""))
    return lines
