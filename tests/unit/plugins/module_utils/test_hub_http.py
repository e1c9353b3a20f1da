"""model_fetch's network side: every failure is one sentence naming the URL and the fix. The request
paths run for real (ansible's open_url) against a local http.server on 127.0.0.1 that answers 404,
5xx, HTML, slowly, half, or not at all; the sentence and resume decisions are tested as functions."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import socket
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.error import URLError

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _hub_http as hh
from ansible_collections.llmfleet.serving.plugins.module_utils._model_store import RemoteFile, StoreError


# --- a local server whose answers each test sets -------------------------------------------------

class QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass   # a client that gave up (the timeout tests) leaves a broken pipe behind


class Server:
    """routes: path (without the query) -> handler(request) that writes the answer; requests: what came."""

    def __init__(self, tls_context=None):
        self.routes = {}
        self.requests = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):  # noqa: N802 - http.server naming
                path = self.path.split("?", 1)[0]
                owner.requests.append({"path": self.path, "range": self.headers.get("Range"),
                                       "authorization": self.headers.get("Authorization")})
                route = owner.routes.get(path)
                if route is None:
                    return answer(self, 404, b"no such route", {"Content-Type": "text/plain"})
                return route(self)

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if tls_context:
            self.httpd.socket = tls_context.wrap_socket(self.httpd.socket, server_side=True)
        self.scheme = "https" if tls_context else "http"
        self.url = f"{self.scheme}://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def answer(handler, status, body, headers=None):
    handler.send_response(status)
    for key, value in {"Content-Length": str(len(body)), **(headers or {})}.items():
        handler.send_header(key, value)
    handler.end_headers()
    handler.wfile.write(body)


def json_route(body, status=200, headers=None):
    return lambda h: answer(h, status, json.dumps(body).encode(), {"Content-Type": "application/json", **(headers or {})})


def html_route(status=200):
    return lambda h: answer(h, status, b"<html><body>Please log in to the proxy</body></html>", {"Content-Type": "text/html"})


def slow_route(seconds):
    def route(h):
        time.sleep(seconds)
        answer(h, 200, b"{}")
    return route


def cut_route(data, send):
    """Announce all of data, send only `send` bytes, close."""
    def route(h):
        h.send_response(200)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data[:send])
        h.wfile.flush()
        h.close_connection = True
        h.connection.shutdown(socket.SHUT_RDWR)
    return route


def hang_up(h):
    h.close_connection = True   # no status line at all


def file_route(data, ignore_range=False, wrong_start=None, cut_first=0):
    """Bytes with Range support; ignore_range answers 200 with everything, wrong_start answers a 206 for that
    offset whatever was asked; cut_first sends only half of the first answer."""
    state = {"answers": 0}

    def route(h):
        state["answers"] += 1
        asked = re.fullmatch(r"bytes=(\d+)-", h.headers.get("Range") or "")
        start = int(asked.group(1)) if asked and not ignore_range else 0
        if asked and not ignore_range and start >= len(data):
            return answer(h, 416, b"", {"Content-Range": f"bytes */{len(data)}"})
        if wrong_start is not None and asked:
            start = wrong_start
        body = data[start:]
        status = 206 if asked and not ignore_range else 200
        h.send_response(status)
        h.send_header("Content-Length", str(len(body)))
        if status == 206:
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        h.end_headers()
        if state["answers"] == 1 and cut_first:
            h.wfile.write(body[:len(body) // 2])
            h.wfile.flush()
            h.close_connection = True
            h.connection.shutdown(socket.SHUT_RDWR)
            return None
        h.wfile.write(body)
        return None
    return route


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


@pytest.fixture
def refused_url():
    """An address where nothing listens."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"


def self_signed_context(tmp_path):
    from cryptography import x509  # pylint: disable=import-outside-toplevel
    from cryptography.hazmat.primitives import hashes, serialization  # pylint: disable=import-outside-toplevel
    from cryptography.hazmat.primitives.asymmetric import ec  # pylint: disable=import-outside-toplevel
    from cryptography.x509.oid import NameOID  # pylint: disable=import-outside-toplevel

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    (tmp_path / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    return context


def failure(call, *args, **kwargs) -> str:
    with pytest.raises(StoreError) as caught:
        call(*args, **kwargs)
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message, message
    return message


MS_FILES = "/api/v1/models/o/m/repo/files"
HF_TREE = "/api/models/o/m/tree/v1"


# --- the ModelScope listing ------------------------------------------------------------------------

def test_modelscope_listing_reads_the_envelope(server):
    server.routes[MS_FILES] = json_route({"Code": 200, "Data": {"Files": [
        {"Path": "sub", "Type": "tree", "Size": 0}, {"Path": "sub/a.bin", "Type": "blob", "Size": 3, "Sha256": "AB" * 32}]}})
    assert hh.modelscope_listing(server.url + "/", "o/m", "v1") == [RemoteFile("sub/a.bin", 3, "ab" * 32)]
    assert server.requests[0]["path"] == f"{MS_FILES}?Revision=v1&Recursive=True"


def test_modelscope_404_names_model_revision_url_and_fix(server):
    server.routes[MS_FILES] = json_route({"Code": 10010205001, "Message": "revision v9 of o/m does not exist", "Success": False}, 404)
    message = failure(hh.modelscope_listing, server.url, "o/m", "v9")
    assert f"{server.url} has no o/m at revision 'v9' (revision v9 of o/m does not exist)" in message
    assert f"{server.url}{MS_FILES}?Revision=v9&Recursive=True answered 404" in message
    assert message.endswith("check the model id and the revision")


@pytest.mark.parametrize("status", [500, 502, 503])
def test_modelscope_5xx_is_one_sentence(server, status):
    server.routes[MS_FILES] = json_route({"Code": status, "Message": "upstream down", "Success": False}, status)
    message = failure(hh.modelscope_listing, server.url, "o/m", "v1")
    assert f"answered {status} for the file listing of o/m@v1 (upstream down) at {server.url}{MS_FILES}?" in message
    assert "re-run later, or set the endpoint to a mirror" in message


def test_modelscope_403_and_other_codes(server):
    server.routes[MS_FILES] = json_route({"Message": "private"}, 403)
    message = failure(hh.modelscope_listing, server.url, "o/m", "v1")
    assert f"{server.url}{MS_FILES}?Revision=v1&Recursive=True answered 403" in message and "use a mirror that serves it" in message
    server.routes[MS_FILES] = html_route(418)
    message = failure(hh.modelscope_listing, server.url, "o/m", "v1")
    assert message.startswith(f"{server.url}{MS_FILES}?Revision=v1&Recursive=True answered 418") and "check the address" in message


def test_modelscope_non_json_body(server):
    server.routes[MS_FILES] = html_route()
    message = failure(hh.modelscope_listing, server.url, "o/m", "v1")
    assert message.startswith(f"{server.url}{MS_FILES}?Revision=v1&Recursive=True sent the file listing of o/m@v1 that is not JSON")
    assert "it begins '<html><body>Please log in" in message and "not a web page or a proxy's login page" in message


def test_modelscope_listing_that_is_not_a_list(server):
    server.routes[MS_FILES] = json_route({"Code": 200, "Data": {"Files": {"a": 1}}})
    message = failure(hh.modelscope_listing, server.url, "o/m", "v1")
    assert f"for o/m from {server.url}{MS_FILES}?Revision=v1&Recursive=True is not a list of files" in message
    assert "check that the endpoint is a ModelScope API" in message


def test_connection_refused(refused_url):
    message = failure(hh.modelscope_listing, refused_url, "o/m", "v1")
    assert message.startswith(f"cannot reach {refused_url}{MS_FILES}?Revision=v1&Recursive=True (Connection refused)")
    assert "check the endpoint, a mirror, or the host's network" in message


def test_timeout(server):
    server.routes[MS_FILES] = slow_route(3)
    started = time.monotonic()
    message = failure(hh.modelscope_listing, server.url, "o/m", "v1", timeout=0.3)
    assert time.monotonic() - started < 2.5
    assert message.startswith(f"{server.url}{MS_FILES}?Revision=v1&Recursive=True did not answer the file listing of o/m@v1 within 0.3 s")
    assert "check the endpoint, a mirror, or the host's network, then re-run" in message


def test_answer_cut_short_and_no_answer(server):
    server.routes[MS_FILES] = cut_route(b'{"Data": {"Files": []}}' * 10, 20)
    message = failure(hh.modelscope_listing, server.url, "o/m", "v1")
    assert message.startswith(f"{server.url}{MS_FILES}?Revision=v1&Recursive=True broke off its answer to the file listing")
    assert "re-run" in message
    server.routes[MS_FILES] = hang_up
    message = failure(hh.modelscope_listing, server.url, "o/m", "v1")
    assert f"{server.url}{MS_FILES}?Revision=v1&Recursive=True broke off its answer" in message


def test_tls_to_a_plain_http_server(server):
    https = server.url.replace("http://", "https://")
    message = failure(hh.modelscope_listing, https, "o/m", "v1")
    assert message.startswith(f"the TLS handshake with {https}{MS_FILES}?Revision=v1&Recursive=True failed (")
    assert "_ssl.c" not in message
    assert "check that the address's scheme matches the server (http:// or https://)" in message


def test_tls_certificate_not_trusted(tmp_path):
    tls = Server(self_signed_context(tmp_path))
    try:
        tls.routes[MS_FILES] = json_route([])
        message = failure(hh.modelscope_listing, tls.url, "o/m", "v1")
    finally:
        tls.close()
    assert message.startswith(f"the TLS handshake with {tls.url}{MS_FILES}?Revision=v1&Recursive=True failed (")
    assert "certificate" in message.lower() and "this host trusts its certificate" in message


@pytest.mark.parametrize("endpoint", ["modelscope.cn", "ftp://mirror", "", None])
def test_an_endpoint_without_scheme_is_said_before_any_request(endpoint):
    message = failure(hh.modelscope_listing, endpoint, "o/m", "v1")
    assert message.startswith(f"endpoint {endpoint!r} is not an http:// or https:// address: write it in full")


# --- the Hugging Face listing ----------------------------------------------------------------------

def hf_entry(path, size=3):
    return {"type": "file", "oid": hashlib.sha1(path.encode()).hexdigest(), "size": size, "path": path}  # noqa: S324


def test_hf_listing_follows_pages_and_sends_the_token(server):
    pages = {1: [hf_entry("a.json"), hf_entry("b.json")], 2: [{"type": "directory", "path": "sub", "size": 0}, hf_entry("sub/c.json")],
             3: [hf_entry("d.json")]}

    def route(h):
        cursor = re.search(r"cursor=(\d)", h.path)
        number = int(cursor.group(1)) if cursor else 1
        link = {"Link": f'<{server.url}{HF_TREE}?recursive=True&cursor={number + 1}>; rel="next"'} if number < 3 else {}
        json_route(pages[number], headers=link)(h)

    server.routes[HF_TREE] = route
    files = hh.hf_listing(server.url, "o/m", "v1", "hf_secret")
    assert [f.path for f in files] == ["a.json", "b.json", "d.json", "sub/c.json"]
    assert len(server.requests) == 3 and all(r["authorization"] == "Bearer hf_secret" for r in server.requests)


def test_hf_page_that_is_not_a_list_names_its_url(server):
    def route(h):
        if "cursor=" in h.path:
            return json_route({"error": "cursor expired"})(h)
        return json_route([hf_entry("a.json")], headers={"Link": f'<{server.url}{HF_TREE}?cursor=2>; rel="next"'})(h)

    server.routes[HF_TREE] = route
    message = failure(hh.hf_listing, server.url, "o/m", "v1", None)
    assert f"for o/m from {server.url}{HF_TREE}?cursor=2 is not a list of files" in message
    assert "check that the endpoint is a Hugging Face Hub API" in message


def test_hf_paging_back_to_itself_stops(server):
    server.routes[HF_TREE] = json_route([hf_entry("a.json")], headers={"Link": f'<{server.url}{HF_TREE}?recursive=True>; rel="next"'})
    message = failure(hh.hf_listing, server.url, "o/m", "v1", None)
    assert message.startswith(f"{server.url}{HF_TREE}?recursive=True pages back to itself") and "another mirror" in message


@pytest.mark.parametrize(("status", "code", "expected", "fix"), [
    (404, "RevisionNotFound", "has o/m but no revision 'v1'", "check the branch, tag or commit"),
    (404, "RepoNotFound", "has no model o/m (or it is private and no token was given)", "set model_store_hf_token"),
    (401, "RepoNotFound", "has no model o/m", "check the model id, or set model_store_hf_token"),
    (401, "", "refused the listing of o/m (401)", "accept its licence on the hub and set model_store_hf_token"),
    (403, "GatedRepo", "refused the listing of o/m (403)", "accept its licence"),
    (503, "", "answered 503", "re-run later, or set the endpoint to another mirror"),
])
def test_hf_errors(server, status, code, expected, fix):
    server.routes[HF_TREE] = json_route({"error": "x"}, status, {"X-Error-Code": code} if code else {})
    message = failure(hh.hf_listing, server.url, "o/m", "v1", None)
    assert expected in message and fix in message and f"{server.url}{HF_TREE}?recursive=True" in message


def test_hf_non_json_and_refused(server, refused_url):
    server.routes[HF_TREE] = html_route()
    assert "that is not JSON" in failure(hh.hf_listing, server.url, "o/m", "v1", None)
    assert failure(hh.hf_listing, refused_url, "o/m", "v1", None).startswith(f"cannot reach {refused_url}{HF_TREE}")


# --- a mirror: its manifest, its files ---------------------------------------------------------------

DATA = {"config.json": b'{"model_type": "x"}', "sub/weights.bin": bytes(range(256)) * 400}
MANIFEST = {"model": "o/m", "revision": "v1", "files": [
    {"path": p, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for p, d in sorted(DATA.items())]}
REMOTE = [RemoteFile(p, len(d), hashlib.sha256(d).hexdigest()) for p, d in sorted(DATA.items())]


@pytest.fixture
def mirror(server):
    server.routes["/m/.llmfleet-manifest.json"] = json_route(MANIFEST)
    for path, data in DATA.items():
        server.routes[f"/m/{path}"] = file_route(data)
    server.mirror = server.url + "/m"
    return server


def test_mirror_listing_and_fetch(mirror, tmp_path):
    assert hh.mirror_listing(mirror.mirror + "/") == REMOTE
    assert hh.mirror_fetch(mirror.mirror, str(tmp_path), REMOTE, sorted(DATA)) == sum(len(d) for d in DATA.values())
    assert {p: (tmp_path / p).read_bytes() for p in DATA} == DATA and not list(tmp_path.rglob("*.incomplete"))


@pytest.mark.parametrize(("route", "expected", "fix"), [
    (json_route({"detail": "gone"}, 404), "/m/.llmfleet-manifest.json answered 404 for the mirror's manifest",
     "is the mirror serving a folder that model_fetch filled? check url"),
    (html_route(), "/m/.llmfleet-manifest.json sent the mirror's manifest that is not JSON", "not a web page"),
    (json_route({"files": []}), "/m/.llmfleet-manifest.json is not a model_fetch manifest with files",
     "point url at a folder that model_fetch filled"),
    (json_route({"files": [{"path": "../x", "size": 1}]}), "/m/.llmfleet-manifest.json lists an unusable file entry",
     "re-run model_fetch into the mirror's folder"),
    (json_route({}, 500), "/m/.llmfleet-manifest.json answered 500", "re-run later"),
])
def test_mirror_manifest_failures(server, route, expected, fix):
    server.routes["/m/.llmfleet-manifest.json"] = route
    message = failure(hh.mirror_listing, server.url + "/m")
    assert f"{server.url}{expected}" in message and fix in message


def test_mirror_refused_and_bad_url(refused_url):
    message = failure(hh.mirror_listing, refused_url + "/m")
    assert message.startswith(f"cannot reach {refused_url}/m/.llmfleet-manifest.json (Connection refused)")
    assert failure(hh.mirror_listing, "10.0.0.5/models").startswith("url '10.0.0.5/models' is not an http:// or https:// address")


@pytest.mark.parametrize(("status", "expected", "fix"), [
    (404, "answered 404 for sub/weights.bin, which the mirror's manifest lists", "re-run model_fetch into it"),
    (500, "answered 500 Internal Server Error for sub/weights.bin (listed in the mirror's manifest)", "re-run later"),
    (403, "refused sub/weights.bin (listed in the mirror's manifest) (403 Forbidden)", "the mirror's access rules"),
])
def test_mirror_file_http_errors(mirror, tmp_path, status, expected, fix):
    mirror.routes["/m/sub/weights.bin"] = json_route({"detail": "x"}, status)
    message = failure(hh.mirror_fetch, mirror.mirror, str(tmp_path), REMOTE, ["sub/weights.bin"])
    assert message.startswith(f"{mirror.mirror}/sub/weights.bin {expected}") and fix in message


def test_mirror_file_refused_and_timeout(mirror, tmp_path, refused_url):
    message = failure(hh.mirror_fetch, refused_url + "/m", str(tmp_path), REMOTE, ["config.json"])
    assert message.startswith(f"cannot reach {refused_url}/m/config.json (Connection refused)")
    mirror.routes["/m/config.json"] = slow_route(3)
    message = failure(hh.mirror_fetch, mirror.mirror, str(tmp_path), REMOTE, ["config.json"], timeout=0.3)
    assert message.startswith(f"{mirror.mirror}/config.json did not answer config.json (listed in the mirror's manifest) within 0.3 s")


def test_mirror_transfer_cut_is_resumed_with_a_range(mirror, tmp_path):
    data = DATA["sub/weights.bin"]
    mirror.routes["/m/sub/weights.bin"] = file_route(data, cut_first=True)
    message = failure(hh.mirror_fetch, mirror.mirror, str(tmp_path), REMOTE, ["sub/weights.bin"])
    assert message.startswith(f"the transfer of sub/weights.bin from {mirror.mirror}/sub/weights.bin broke off after ")
    assert message.endswith("re-run to resume it")
    partial = tmp_path / "sub" / "weights.bin.incomplete"
    have = partial.stat().st_size
    assert 0 < have < len(data)
    assert hh.mirror_fetch(mirror.mirror, str(tmp_path), REMOTE, ["sub/weights.bin"]) == len(data) - have
    assert mirror.requests[-1]["range"] == f"bytes={have}-"
    assert (tmp_path / "sub" / "weights.bin").read_bytes() == data and not partial.exists()


def test_mirror_that_ignores_range_restarts_the_file(mirror, tmp_path):
    data = DATA["sub/weights.bin"]
    mirror.routes["/m/sub/weights.bin"] = file_route(data, ignore_range=True)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "weights.bin.incomplete").write_bytes(data[:1000])
    assert hh.mirror_fetch(mirror.mirror, str(tmp_path), REMOTE, ["sub/weights.bin"]) == len(data)
    assert mirror.requests[-1]["range"] == "bytes=1000-" and (tmp_path / "sub" / "weights.bin").read_bytes() == data


def test_mirror_206_for_another_offset_drops_the_partial_and_refetches(mirror, tmp_path):
    data = DATA["sub/weights.bin"]
    mirror.routes["/m/sub/weights.bin"] = file_route(data, wrong_start=10)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "weights.bin.incomplete").write_bytes(b"\0" * 1000)
    assert hh.mirror_fetch(mirror.mirror, str(tmp_path), REMOTE, ["sub/weights.bin"]) == len(data)
    assert [r["range"] for r in mirror.requests] == ["bytes=1000-", None]
    assert (tmp_path / "sub" / "weights.bin").read_bytes() == data


def test_mirror_416_removes_the_partial(mirror, tmp_path):
    short = DATA["sub/weights.bin"][:500]            # the mirror's file is shorter than its manifest says
    mirror.routes["/m/sub/weights.bin"] = file_route(short)
    (tmp_path / "sub").mkdir()
    partial = tmp_path / "sub" / "weights.bin.incomplete"
    partial.write_bytes(b"x" * 600)
    message = failure(hh.mirror_fetch, mirror.mirror, str(tmp_path), REMOTE, ["sub/weights.bin"])
    assert message.startswith(f"{mirror.mirror}/sub/weights.bin answered 416 to a resume of sub/weights.bin from byte 600")
    assert "the partial file was removed, re-run" in message and not partial.exists()


def test_mirror_wrong_bytes_are_removed(mirror, tmp_path):
    mirror.routes["/m/config.json"] = file_route(b'{"model_type": "y"}')
    message = failure(hh.mirror_fetch, mirror.mirror, str(tmp_path), REMOTE, ["config.json"])
    assert message == (f"config.json from {mirror.mirror}/config.json does not match its sha256 in the mirror's manifest; "
                       "it was removed, re-run to fetch it again")
    assert not list(tmp_path.iterdir())


def test_mirror_partial_that_is_already_whole_needs_no_request(mirror, tmp_path):
    (tmp_path / "config.json.incomplete").write_bytes(DATA["config.json"])
    assert hh.mirror_fetch(mirror.mirror, str(tmp_path), REMOTE, ["config.json"]) == 0
    assert mirror.requests == [] and (tmp_path / "config.json").read_bytes() == DATA["config.json"]


# --- pure decisions and sentences --------------------------------------------------------------------

@pytest.mark.parametrize(("have", "size", "start"), [(0, 10, 0), (4, 10, 4), (10, 10, None), (11, 10, 0), (0, 0, 0)])
def test_resume_start(have, size, start):
    assert hh.resume_start(have, size) == start


@pytest.mark.parametrize(("start", "status", "content_range", "action"), [
    (0, 200, None, "write"), (100, 200, None, "write"), (100, 206, "bytes 100-199/200", "append"),
    (100, 206, "bytes 0-199/200", "mismatch"), (100, 206, None, "mismatch"), (0, 206, "bytes 0-199/200", "write"),
])
def test_range_answer(start, status, content_range, action):
    assert hh.range_answer(start, status, content_range) == action


@pytest.mark.parametrize(("code", "fix"), [
    (401, "check the token"), (404, "check the address"), (429, "re-run later"), (502, "the server is failing"), (410, "check the address"),
])
def test_status_sentence(code, fix):
    message = hh.status_sentence("https://h/x", code, "Reason", "the thing")
    assert message.startswith("https://h/x ") and str(code) in message and fix in message


@pytest.mark.parametrize(("exc", "start"), [
    (URLError(ConnectionRefusedError(111, "Connection refused")), "cannot reach https://h/x (Connection refused)"),
    (URLError(socket.gaierror(-2, "Name or service not known")), "cannot reach https://h/x (Name or service not known)"),
    (URLError(TimeoutError("timed out")), "https://h/x did not answer the thing within 60 s"),
    (TimeoutError("timed out"), "https://h/x did not answer the thing within 60 s"),
    (URLError(ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed (_ssl.c:1006)")),
     "the TLS handshake with https://h/x failed ([SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed)"),
    (ConnectionResetError(104, "Connection reset by peer"), "https://h/x broke off its answer to the thing (Connection reset by peer)"),
])
def test_transport_sentence(exc, start):
    assert hh.transport_sentence("https://h/x", exc, "the thing", 60).startswith(start)


def test_sdk_failure_sentences():
    tail = ["Traceback (most recent call last):", "  File x", "modelscope_hub.errors.FileDownloadError: [E1003] 1 of 3 file(s) failed",
            "  - sub/weights.bin: ConnectionError"]
    message = hh.sdk_failure("modelscope", "/v/bin/python", "o/m", "v1", "http://hub", tail, "/m.download.log")
    assert message == ("the modelscope SDK failed to fetch o/m@v1 from http://hub: modelscope_hub.errors.FileDownloadError: [E1003] 1 of 3 "
                       "file(s) failed | - sub/weights.bin: ConnectionError (full log: /m.download.log); re-run to resume, and if it "
                       "repeats check the endpoint and the log")
    missing = hh.sdk_failure("huggingface_hub", "/usr/bin/python3", "o/m", "main", "https://hf-mirror.com",
                             ["ModuleNotFoundError: No module named 'huggingface_hub'"], "/l")
    assert missing.startswith("the huggingface_hub SDK is not importable by /usr/bin/python3, so nothing was fetched from https://hf-mirror.com")
    assert "no output" in hh.sdk_failure("modelscope", "p", "o/m", "v1", "e", [], "/l")


def test_sdk_env_and_command():
    env = hh.sdk_env("huggingface", "https://hf-mirror.com/", "tok", {"PATH": "/bin"})
    assert env == {"PATH": "/bin", "HF_ENDPOINT": "https://hf-mirror.com", "HF_HUB_DISABLE_TELEMETRY": "1", "HF_TOKEN": "tok"}
    env = hh.sdk_env("modelscope", "http://hub/", "tok", {})
    assert env == {"MODELSCOPE_ENDPOINT": "http://hub", "MODELSCOPE_DOWNLOAD_INTRA_CLOUD": "false"}
    cmd = hh.sdk_command("/p", "modelscope", "o/m", "v1", "/d", ["a"], 4, "http://hub")
    assert cmd[:2] == ["/p", "-c"] and "from modelscope import snapshot_download" in cmd[2]
    assert json.loads(cmd[3]) == {"model_id": "o/m", "revision": "v1", "dest": "/d", "files": ["a"], "workers": 4, "endpoint": "http://hub"}


# --- the SDK child process, for real ---------------------------------------------------------------

def sdk(tmp_path, endpoint, **kwargs):
    args = {"source": "modelscope", "model_id": "o/m", "revision": "v1", "dest": str(tmp_path / "d"), "paths": ["a"], "workers": 1,
            "endpoint": endpoint, "token": None, "sdk_python": sys.executable, "log_file": str(tmp_path / "d.download.log"), **kwargs}
    return failure(hh.run_sdk, **args)


def test_sdk_interpreter_missing_or_log_not_writable(tmp_path):
    message = sdk(tmp_path, "http://hub", sdk_python=str(tmp_path / "no-venv" / "bin" / "python"))
    assert message == (f"cannot run {tmp_path}/no-venv/bin/python (No such file or directory), so nothing was fetched from http://hub: "
                       "set sdk_python to an interpreter that has modelscope (the model_store role makes a venv)")
    message = sdk(tmp_path, "http://hub", log_file=str(tmp_path / "no-such-dir" / "x.log"))
    assert message.startswith(f"cannot write the modelscope SDK's log {tmp_path}/no-such-dir/x.log (No such file or directory)")
    assert message.endswith("set log_file to a writable path")


def test_sdk_that_cannot_import_its_package(tmp_path):
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'modelscope'\" >&2\nexit 1\n")
    python.chmod(0o755)
    message = sdk(tmp_path, "http://hub", sdk_python=str(python))
    assert message == (f"the modelscope SDK is not importable by {python}, so nothing was fetched from http://hub: "
                       "the model_store role installs it in a venv (sdk_python)")


def test_real_modelscope_sdk_against_a_failing_hub(tmp_path, server, monkeypatch):
    monkeypatch.setenv("MODELSCOPE_API_MAX_RETRIES", "0")
    monkeypatch.setenv("MODELSCOPE_DOWNLOAD_MAX_RETRIES", "0")
    monkeypatch.setenv("MODELSCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MODELSCOPE_HOME", str(tmp_path / "home"))
    server.routes[MS_FILES] = json_route({"Code": 404, "Message": "o/m has no revision v1", "Success": False}, 404)
    os.makedirs(tmp_path / "d")
    (tmp_path / "d.download.log").write_text("modelscope_hub.errors.ServerError: an earlier run's failure\n")
    message = sdk(tmp_path, server.url)
    assert message.startswith(f"the modelscope SDK failed to fetch o/m@v1 from {server.url}: ")
    assert "o/m has no revision v1" in message and "an earlier run" not in message, message
    assert message.endswith(f"(full log: {tmp_path}/d.download.log); re-run to resume, and if it repeats check the endpoint and the log")


@pytest.mark.parametrize(("code", "text", "expected"), [
    (404, '{"Code": 404, "Message": "no such repo"}',
     "https://hub has no o/m at revision 'v1' (no such repo), https://hub/x answered 404: check the model id and the revision"),
    (404, "<html>", "https://hub has no o/m at revision 'v1', https://hub/x answered 404: check the model id and the revision"),
    (400, '{"Message": "bad revision name"}',
     "https://hub answered 400 for the file listing of o/m@v1 (bad revision name) at https://hub/x: check the endpoint, the model id and the revision"),
    (400, "", None),
])
def test_modelscope_error(code, text, expected):
    assert hh.modelscope_error("https://hub", "https://hub/x", "o/m", "v1", code, text) == expected
