"""A local STAND-IN for the ModelScope hub (modelscope.cn cannot be reached from the lab).

It serves the part of the hub's HTTP API that the real `modelscope` SDK calls to download a
snapshot (shared/MODELSCOPE.md, seen working with modelscope 1.40.2 / modelscope-hub 0.5.1):

    GET /api/v1/models/{owner}/{name}/repo/files?Revision=R&Recursive=True   file listing (Path, Type, Size, Sha256)
    GET /api/v1/models/{owner}/{name}/repo?Revision=R&FilePath=P             file bytes, with Range (206) support
    GET /api/v1/repos/internalAccelerationInfo                              404
    GET /api/v1/models/{owner}/{name}/revisions                              branches and tags (older SDKs)

and, standing in for a peer host's or a mirror's web server, plain files under ROOT with Range:

    GET /files/<path under ROOT>

Models live in a folder: ROOT/{owner}/{name}/{revision}/<files>; revisions that are tags are
listed in ROOT/{owner}/{name}/tags.txt. For tests it also counts the bytes it served, per client
address and per file (GET /_stats, POST /_reset), and takes fault flags (POST /_faults with JSON):
  {"truncate": {"path": N}}   the next N answers for that path send half the body, then close
  {"huge": "path"}            the listing advertises that path as 64 TiB (disk-space checks)

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
        self.faults: dict = {"truncate": {}, "huge": None}
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

    def listing(self, repo: str) -> list:
        entries = []
        for dirpath, dirnames, filenames in os.walk(repo):
            dirnames.sort()
            rel_dir = os.path.relpath(dirpath, repo)
            for d in dirnames:
                entries.append({"Path": os.path.normpath(os.path.join(rel_dir, d)), "Name": d, "Type": "tree", "Size": 0})
            for f in sorted(filenames):
                full = os.path.join(dirpath, f)
                rel = os.path.normpath(os.path.join(rel_dir, f))
                size = HUGE if self.faults.get("huge") == rel else os.path.getsize(full)
                entries.append({"Path": rel, "Name": f, "Type": "blob", "Size": size, "Sha256": self.sha256(full), "IsLFS": size > 1 << 20})
        return entries


def envelope(data, code: int = 200, message: str = "success") -> bytes:
    return json.dumps({"Code": code, "Message": message, "RequestId": uuid.uuid4().hex, "Success": code == 200, "Data": data}).encode()


def make_handler(hub: Hub):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # quiet; tests read /_stats
            return

        def send_json(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
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
                    hub.faults = {"truncate": {}, "huge": None}
                return self.send_json(200, b"{}")
            if self.path == "/_faults":
                with hub.lock:
                    hub.faults["truncate"].update(body.get("truncate", {}))
                    if "huge" in body:
                        hub.faults["huge"] = body["huge"]
                return self.send_json(200, b"{}")
            return self.error(404, "no such route")

        def do_GET(self):  # noqa: N802
            url = urlparse(self.path)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
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

        def send_file(self, repo: str, rel: str) -> None:
            full = os.path.normpath(os.path.join(repo, rel))
            if not full.startswith(repo + os.sep) or not os.path.isfile(full):
                return self.error(404, f"file {rel} does not exist")
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
                    return None
            length = end - start + 1
            with hub.lock:
                truncate = hub.faults["truncate"].get(rel, 0) > 0
                if truncate:
                    hub.faults["truncate"][rel] -= 1
            self.send_response(206 if ranged else 200)
            self.send_header("Content-Length", str(length))
            self.send_header("Accept-Ranges", "bytes")
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
            return None

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
