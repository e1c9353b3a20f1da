"""A local STAND-IN for the ModelScope hub and the Hugging Face Hub (neither can be reached from the lab).

It serves the part of the hub's HTTP API that the real `modelscope` SDK calls to download a
snapshot (modelscope_hub/_download.py and _legacy_api.py; docs/sources.md#hubs;
seen working with modelscope 1.40.2 / modelscope-hub 0.5.1):

    GET /api/v1/models/{owner}/{name}/repo/files?Revision=R&Recursive=True   file listing (Path, Type, Size, Sha256)
    GET /api/v1/models/{owner}/{name}/repo?Revision=R&FilePath=P             file bytes, with Range (206) support
    GET /api/v1/repos/internalAccelerationInfo                              404
    GET /api/v1/models/{owner}/{name}/revisions                              branches and tags (older SDKs)

and the part of the Hugging Face Hub's API that the real `huggingface_hub` client (2.4) calls in
`snapshot_download(local_dir=...)`, the same models under the same folders:

    GET  /api/models/{owner}/{name}/revision/{R}             repo info: `sha` (the commit R resolves to), siblings
    GET  /api/models/{owner}/{name}/tree/{R}?recursive=True  files: path, size, oid (git blob sha1), lfs {oid: sha256, size}
    HEAD /{owner}/{name}/resolve/{R}/{path}                  X-Repo-Commit, ETag (sha256 for LFS files, else the blob sha1), size
    GET  /{owner}/{name}/resolve/{R}/{path}                  file bytes, with Range (206) support

Errors carry the hub's `X-Error-Code` (RepoNotFound, RevisionNotFound, EntryNotFound), which the client
maps to its exceptions. A revision's commit is sha1("owner/name/revision"); either name works.
No Xet headers are sent, so the client takes its plain HTTP path.

and, standing in for a peer host's or a mirror's web server, plain files under ROOT with Range:

    GET /files/<path under ROOT>

Models live in a folder: ROOT/{owner}/{name}/{revision}/<files>; revisions that are tags are
listed in ROOT/{owner}/{name}/tags.txt. For tests it also counts the bytes it served, per client
address and per file (GET /_stats, POST /_reset), and takes fault flags (POST /_faults with JSON):
  {"truncate": {"path": N}}   the next N answers for that path send half the body, then close
  {"huge": "path"}            the listing advertises that path as 64 TiB (disk-space checks)
  {"page": N}                 the Hugging Face tree answers N entries a page, with a `Link: ...; rel="next"`

    python tests/lab/modelscope_hub.py ROOT [--port 0] [--bind 127.0.0.1]   (prints "PORT <n>")
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, Optional, Tuple
from urllib.parse import parse_qs, unquote, urlparse

HUGE = 64 * 2 ** 40


class Hub:
    def __init__(self, root: str) -> None:
        self.root = root
        self.lock = threading.Lock()
        self.served: Dict[str, int] = {}
        self.by_path: Dict[str, int] = {}
        self.requests: list = []
        self.faults: dict = {"truncate": {}, "huge": None, "page": 0}
        self.rate = 0
        self._sha: Dict[Tuple[str, float, int], str] = {}

    def repo_dir(self, owner: str, name: str, revision: str) -> Optional[str]:
        path = os.path.join(self.root, owner, name, revision)
        return path if re.fullmatch(r"[\w.-]+", revision) and os.path.isdir(path) else None

    def sha256(self, path: str) -> str:
        stat = os.stat(path)
        key = (path, stat.st_mtime, stat.st_size)
        if key not in self._sha:
            digest = hashlib.sha256()
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            self._sha[key] = digest.hexdigest()
        return self._sha[key]

    def commit(self, owner: str, name: str, revision: str) -> str:
        return hashlib.sha1(f"{owner}/{name}/{revision}".encode()).hexdigest()  # noqa: S324 - an id, not security

    def hf_revision(self, owner: str, name: str, revision: str) -> Optional[Tuple[str, str]]:
        """(folder, commit) for a revision name or a commit id."""
        model_root = os.path.join(self.root, owner, name)
        for rev in sorted(os.listdir(model_root)):
            if os.path.isdir(os.path.join(model_root, rev)) and revision in (rev, self.commit(owner, name, rev)):
                return os.path.join(model_root, rev), self.commit(owner, name, rev)
        return None

    def blob_sha1(self, path: str) -> str:
        digest = hashlib.sha1(f"blob {os.path.getsize(path)}\0".encode())  # noqa: S324 - git's object id
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()

    def walk(self, repo: str):
        """(relative path, full path or None for a folder, size), folders first in each folder, sorted."""
        for dirpath, dirnames, filenames in os.walk(repo):
            dirnames.sort()
            rel_dir = os.path.relpath(dirpath, repo)
            for d in dirnames:
                yield os.path.normpath(os.path.join(rel_dir, d)), None, 0
            for f in sorted(filenames):
                full = os.path.join(dirpath, f)
                rel = os.path.normpath(os.path.join(rel_dir, f))
                yield rel, full, HUGE if self.faults.get("huge") == rel else os.path.getsize(full)

    def hf_tree(self, repo: str) -> list:
        entries = []
        for rel, full, size in self.walk(repo):
            if full is None:
                entries.append({"type": "directory", "oid": "0" * 40, "size": 0, "path": rel})
                continue
            entry = {"type": "file", "oid": self.blob_sha1(full), "size": size, "path": rel}
            if size > 1 << 20:  # large files live in LFS: the listing names their sha256
                entry["lfs"] = {"oid": self.sha256(full), "size": size, "pointerSize": 134}
            entries.append(entry)
        return entries

    def listing(self, repo: str) -> list:
        entries = []
        for rel, full, size in self.walk(repo):
            if full is None:
                entries.append({"Path": rel, "Name": os.path.basename(rel), "Type": "tree", "Size": 0})
            else:
                entries.append({"Path": rel, "Name": os.path.basename(rel), "Type": "blob", "Size": size, "Sha256": self.sha256(full),
                                "IsLFS": size > 1 << 20})
        return entries


def envelope(data, code: int = 200, message: str = "success") -> bytes:
    return json.dumps({"Code": code, "Message": message, "RequestId": uuid.uuid4().hex, "Success": code == 200, "Data": data}).encode()


def make_handler(hub: Hub):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # quiet; tests read /_stats
            return

        def send_json(self, status: int, body: bytes, extra: Optional[Dict[str, str]] = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            for key, value in (extra or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def error(self, status: int, message: str) -> None:
            self.send_json(status, json.dumps({"Code": status, "Message": message, "RequestId": uuid.uuid4().hex, "Success": False}).encode())

        def do_POST(self):  # noqa: N802 - http.server naming
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path == "/_reset":
                with hub.lock:
                    hub.served.clear()
                    hub.by_path.clear()
                    hub.requests.clear()
                    hub.faults = {"truncate": {}, "huge": None, "page": 0}
                return self.send_json(200, b"{}")
            if self.path == "/_faults":
                with hub.lock:
                    hub.faults["truncate"].update(body.get("truncate", {}))
                    if "huge" in body:
                        hub.faults["huge"] = body["huge"]
                    if "page" in body:
                        hub.faults["page"] = int(body["page"])
                return self.send_json(200, b"{}")
            return self.error(404, "no such route")

        def hf_error(self, status: int, code: str, message: str) -> None:
            body = json.dumps({"error": message}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", message)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def huggingface(self, url) -> bool:
            """The Hugging Face routes; False when the path is not one of them."""
            api = re.fullmatch(r"/api/models/([\w.-]+)/([\w.-]+)/(revision|tree)/([^/]+)(/.*)?", url.path)
            resolve = re.fullmatch(r"/([\w.-]+)/([\w.-]+)/resolve/([^/]+)/(.+)", url.path)
            if not api and not resolve:
                return False
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            owner, name, revision = (api.group(1), api.group(2), unquote(api.group(4))) if api else \
                (resolve.group(1), resolve.group(2), unquote(resolve.group(3)))
            record = {"client": self.client_address[0], "path": url.path, "method": self.command, "range": self.headers.get("Range")}
            with hub.lock:
                hub.requests.append(record)
            if not os.path.isdir(os.path.join(hub.root, owner, name)):
                self.hf_error(404, "RepoNotFound", f"Repository Not Found for url: {url.path}")
                return True
            found = hub.hf_revision(owner, name, revision)
            if found is None:
                self.hf_error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
                return True
            repo, commit = found
            if api and api.group(3) == "revision":
                files = [e["path"] for e in hub.hf_tree(repo) if e["type"] == "file"]
                self.send_json(200, json.dumps({"_id": commit[:24], "id": f"{owner}/{name}", "modelId": f"{owner}/{name}", "sha": commit,
                                                "private": False, "disabled": False, "gated": False, "downloads": 0, "likes": 0,
                                                "tags": [], "lastModified": "2026-11-01T00:00:00.000Z",
                                                "siblings": [{"rfilename": f} for f in files]}).encode())
                return True
            if api:
                prefix = (api.group(5) or "").strip("/")
                tree = [e for e in hub.hf_tree(repo) if not prefix or e["path"].startswith(prefix + "/")]
                page, start = hub.faults.get("page") or len(tree) or 1, int(query.get("cursor", "0"))
                link = None
                if start + page < len(tree):  # the hub pages long listings: Link: <...&cursor=N>; rel="next"
                    link = f'<http://{self.headers.get("Host")}{url.path}?recursive=True&cursor={start + page}>; rel="next"'
                self.send_json(200, json.dumps(tree[start:start + page]).encode(), {"Link": link} if link else None)
                return True
            rel = unquote(resolve.group(4))
            full = os.path.normpath(os.path.join(repo, rel))
            if not full.startswith(repo + os.sep) or not os.path.isfile(full):
                self.hf_error(404, "EntryNotFound", f"{rel} does not exist at revision {revision}")
                return True
            size = os.path.getsize(full)
            etag = hub.sha256(full) if size > 1 << 20 else hub.blob_sha1(full)
            extra = {"X-Repo-Commit": commit, "ETag": f'"{etag}"'}
            if self.command == "HEAD":
                self.send_response(200)
                for key, value in extra.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(size))
                self.send_header("Accept-Ranges", "bytes")
                self.end_headers()
                return True
            record["sent"] = self.send_file(repo, rel, extra)
            return True

        def do_HEAD(self):  # noqa: N802
            if not self.huggingface(urlparse(self.path)):
                self.hf_error(404, "EntryNotFound", "no such route")

        def do_GET(self):  # noqa: N802
            url = urlparse(self.path)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            if self.huggingface(url):
                return None
            if url.path == "/_stats":
                with hub.lock:
                    stats = {"served": dict(hub.served), "by_path": dict(hub.by_path), "requests": list(hub.requests)}
                return self.send_json(200, json.dumps(stats).encode())
            if url.path.startswith("/files/"):
                return self.send_file(hub.root, unquote(url.path[len("/files/"):]))
            if url.path == "/api/v1/repos/internalAccelerationInfo":
                return self.error(404, "not an intra-cloud hub")
            match = re.fullmatch(r"/api/v1/models/([\w.-]+)/([\w.-]+)(/repo/files|/repo|/revisions)?", url.path)
            if not match:
                return self.error(404, "no such route")
            owner, name, kind = match.group(1), match.group(2), match.group(3) or ""
            model_root = os.path.join(hub.root, owner, name)
            if not os.path.isdir(model_root):
                return self.error(404, f"model {owner}/{name} does not exist")
            with hub.lock:
                hub.requests.append({"client": self.client_address[0], "path": url.path, "query": query,
                                     "range": self.headers.get("Range")})
            if kind == "/revisions":
                tags_file = os.path.join(model_root, "tags.txt")
                tags = open(tags_file, encoding="utf-8").read().split() if os.path.exists(tags_file) else []
                revs = sorted(d for d in os.listdir(model_root) if os.path.isdir(os.path.join(model_root, d)))
                return self.send_json(200, envelope({"RevisionMap": {
                    "Branches": [{"Revision": r, "CreatedAt": 0} for r in revs if r not in tags],
                    "Tags": [{"Revision": r, "CreatedAt": 0} for r in revs if r in tags]}}))
            revision = query.get("Revision", "master")
            repo = hub.repo_dir(owner, name, revision)
            if repo is None:
                return self.error(404, f"revision {revision} of {owner}/{name} does not exist")
            if kind == "/repo/files":
                return self.send_json(200, envelope({"Files": hub.listing(repo)}))
            if kind == "/repo":
                return self.send_file(repo, unquote(query.get("FilePath", "")))
            return self.send_json(200, envelope({"Id": f"{owner}/{name}", "Name": name}))

        def send_file(self, repo: str, rel: str, extra: Optional[Dict[str, str]] = None) -> int:
            """Send a file (or the asked range); returns the bytes sent."""
            full = os.path.normpath(os.path.join(repo, rel))
            if not full.startswith(repo + os.sep) or not os.path.isfile(full):
                self.error(404, f"file {rel} does not exist")
                return 0
            size = os.path.getsize(full)
            start = 0
            ranged = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", "") or "")
            end = size - 1
            if ranged:
                start = int(ranged.group(1))
                end = int(ranged.group(2)) if ranged.group(2) else size - 1
                if start >= size:
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{size}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return 0
            length = end - start + 1
            with hub.lock:
                truncate = hub.faults["truncate"].get(rel, 0) > 0
                if truncate:
                    hub.faults["truncate"][rel] -= 1
            self.send_response(206 if ranged else 200)
            self.send_header("Content-Length", str(length))
            self.send_header("Accept-Ranges", "bytes")
            for key, value in (extra or {}).items():
                self.send_header(key, value)
            if ranged:
                self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
            self.end_headers()
            to_send = length // 2 if truncate else length
            with open(full, "rb") as handle:
                handle.seek(start)
                sent = 0
                while sent < to_send:
                    block = handle.read(min(1 << 16, to_send - sent))
                    if not block:
                        break
                    self.wfile.write(block)
                    sent += len(block)
                    if hub.rate:  # --rate: a slow link, so that progress can be watched
                        time.sleep(len(block) / hub.rate)
            with hub.lock:
                client = self.client_address[0]
                hub.served[client] = hub.served.get(client, 0) + sent
                hub.by_path[rel] = hub.by_path.get(rel, 0) + sent
            if truncate:
                self.close_connection = True
            return sent

    return Handler


def serve(root: str, bind: str = "127.0.0.1", port: int = 0, rate: int = 0) -> ThreadingHTTPServer:
    hub = Hub(root)
    hub.rate = rate
    server = ThreadingHTTPServer((bind, port), make_handler(hub))
    server.daemon_threads = True
    return server


def main() -> int:
    parser = argparse.ArgumentParser(description="stand-in for the ModelScope hub")
    parser.add_argument("root")
    parser.add_argument("--bind", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--rate", type=int, default=0, help="bytes per second per download (0: as fast as it goes)")
    args = parser.parse_args()
    server = serve(args.root, args.bind, args.port, args.rate)
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
