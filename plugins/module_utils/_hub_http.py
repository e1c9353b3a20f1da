# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The network side of model_fetch: the hubs' listing requests (ModelScope's `repo/files`, the Hugging
Face Hub's paged `tree`), a mirror's manifest and its file transfers with resume, the hub SDK run as a
child process, and the one sentence every failure becomes (what failed, the URL, what to do).
Private to llmfleet.serving; the request helpers take their timeout as an argument, the sentence and
resume decisions are pure functions.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import ssl
import subprocess
import sys
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple
from urllib.error import HTTPError, URLError
from urllib.parse import quote, urlsplit

from ansible.module_utils.urls import ConnectionError as UrlsConnectionError
from ansible.module_utils.urls import open_url

from ansible_collections.llmfleet.serving.plugins.module_utils._model_store import (
    HUBS, MANIFEST, RemoteFile, StoreError, files_from_manifest, local_listing, next_page, parse_hf_tree, parse_listing, sha256_of,
)

TIMEOUT = 60.0

# The same call in both SDKs. huggingface_hub resumes a file from DEST/.cache/huggingface/download/<path>.incomplete,
# modelscope from DEST/<path>.incomplete (or its cache), each with a Range request.
SDK_CALL = (
    "import json, sys\n"
    "from {package} import snapshot_download\n"
    "a = json.loads(sys.argv[1])\n"
    "snapshot_download(a['model_id'], revision=a['revision'], local_dir=a['dest'], allow_patterns=a['files'],\n"
    "                  max_workers=a['workers'], endpoint=a['endpoint'])\n"
)

# the last line of a Python traceback: `modelscope_hub.errors.ServerError: [E1002] ...`
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit)(:|$)")

# (code, headers, body text) of an HTTP error answer -> a hub's own sentence, or None for the generic one
StatusHook = Callable[[int, Mapping[str, str], str], Optional[str]]


# --- the sentences ---------------------------------------------------------------------------------

def require_http_url(url: Optional[str], option: str) -> str:
    """An endpoint or mirror address must be absolute http(s); urllib would say `unknown url type`."""
    parts = urlsplit(url or "")
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise StoreError(f"{option} {url!r} is not an http:// or https:// address: write it in full, "
                         "for example https://modelscope.cn or http://10.0.0.5:8000/models/Qwen3-8B")
    return url.rstrip("/")


def status_sentence(url: str, code: int, reason: str, what: str) -> str:
    """An HTTP error answer no hub-specific rule explains."""
    said = f"{code} {reason}".strip()
    if code in (401, 403):
        return (f"{url} refused {what} ({said}): the server wants credentials or forbids this host; "
                "check the token, or the mirror's access rules")
    if code == 404:
        return f"{url} answered 404 for {what}: check the address (endpoint or url) and that the server really serves it"
    if code == 429:
        return f"{url} answered 429 (too many requests) for {what}: re-run later, or set the endpoint to a mirror"
    if code >= 500:
        return f"{url} answered {said} for {what}: the server is failing; re-run later, or set the endpoint to another mirror"
    return f"{url} answered {said} for {what}: check the address (endpoint or url)"


def _cause(exc: BaseException) -> BaseException:
    """urllib wraps the socket's own error in URLError.reason."""
    reason = getattr(exc, "reason", None)
    return reason if isinstance(exc, URLError) and isinstance(reason, BaseException) else exc


def _said(exc: BaseException) -> str:
    text = getattr(exc, "strerror", None) if not isinstance(exc, ssl.SSLError) else None
    text = text or str(exc) or type(exc).__name__
    return re.sub(r"\s*\(_ssl\.c:\d+\)", "", text)


def transport_sentence(url: str, exc: BaseException, what: str, timeout: float) -> str:
    """No usable answer: refused, unresolvable, TLS, a timeout, a connection cut mid-answer."""
    cause = _cause(exc)
    if isinstance(cause, ssl.SSLError) or "SSL" in type(cause).__name__ or "CERTIFICATE" in str(cause):
        return (f"the TLS handshake with {url} failed ({_said(cause)}): check that the address's scheme matches the server "
                "(http:// or https://) and that this host trusts its certificate (a private CA goes into the system trust store)")
    if isinstance(cause, TimeoutError):
        return (f"{url} did not answer {what} within {timeout:g} s: check the endpoint, a mirror, "
                "or the host's network, then re-run")
    if isinstance(cause, http.client.HTTPException) or isinstance(cause, (ConnectionResetError, BrokenPipeError)):
        return (f"{url} broke off its answer to {what} ({_said(cause)}): re-run; if it repeats, "
                "check a proxy between this host and the server, or set the endpoint to another mirror")
    return (f"cannot reach {url} ({_said(cause)}): check the endpoint, a mirror, "
            "or the host's network (DNS, proxy, firewall)")


def not_json_sentence(url: str, what: str, data: bytes) -> str:
    start = data[:60].decode("utf-8", "replace").strip()
    return (f"{url} sent {what} that is not JSON (it begins {start!r}): check that the address is the hub's API "
            "(or a mirror of it), not a web page or a proxy's login page")


def error_message(text: str) -> str:
    """The `Message` of a ModelScope error envelope (`{"Code": ..., "Message": ...}`), or ''."""
    try:
        body = json.loads(text)
    except ValueError:
        return ""
    return str(body.get("Message") or "") if isinstance(body, Mapping) else ""


def modelscope_error(endpoint: str, url: str, model_id: str, revision: str, code: int, text: str) -> Optional[str]:
    message = error_message(text)
    said = f" ({message})" if message else ""
    if code == 404:
        return f"{endpoint} has no {model_id} at revision {revision!r}{said}, {url} answered 404: check the model id and the revision"
    if code in (401, 403):
        return (f"{endpoint} refused the file listing of {model_id}@{revision}{said}, {url} answered {code}: "
                "the model is private or the mirror restricts it; check the model id, or use a mirror that serves it")
    if code >= 500:
        return (f"{endpoint} answered {code} for the file listing of {model_id}@{revision}{said} at {url}: "
                "the hub is failing; re-run later, or set the endpoint to a mirror")
    if message:   # the hub said why: keep its words
        return (f"{endpoint} answered {code} for the file listing of {model_id}@{revision} ({message}) at {url}: "
                "check the endpoint, the model id and the revision")
    return None


def hf_error(endpoint: str, url: str, model_id: str, revision: str, code: int, error_code: str) -> Optional[str]:
    """The Hugging Face Hub says what is missing in its `X-Error-Code` header."""
    if error_code == "RevisionNotFound":
        return f"{endpoint} has {model_id} but no revision {revision!r} ({url} answered {code}): check the branch, tag or commit"
    if error_code == "RepoNotFound" or code == 404:
        return (f"{endpoint} has no model {model_id} (or it is private and no token was given), {url} answered {code}: "
                "check the model id, or set model_store_hf_token")
    if code in (401, 403):
        return (f"{endpoint} refused the listing of {model_id} ({code}) at {url}: the model is gated or private; "
                "accept its licence on the hub and set model_store_hf_token")
    return None


# --- requests ---------------------------------------------------------------------------------------

def request(url: str, what: str, headers: Optional[Dict[str, str]] = None, on_status: Optional[StatusHook] = None,
            timeout: float = TIMEOUT) -> Any:
    """open_url, every failure one StoreError sentence; an HTTP error answer goes to on_status first."""
    try:
        return open_url(url, timeout=timeout, headers=headers or {})
    except HTTPError as exc:
        try:
            text = exc.read().decode("utf-8", "replace")
        except (OSError, http.client.HTTPException):
            text = ""
        sentence = on_status(exc.code, exc.headers or {}, text) if on_status else None
        raise StoreError(sentence or status_sentence(url, exc.code, str(exc.reason or ""), what)) from None
    except (URLError, OSError, http.client.HTTPException, UrlsConnectionError) as exc:
        raise StoreError(transport_sentence(url, exc, what, timeout)) from None
    except ValueError as exc:   # http.client.InvalidURL, a bad port
        raise StoreError(f"{url} is not a usable address ({exc}): check the endpoint or url") from None


def get_json(url: str, what: str, headers: Optional[Dict[str, str]] = None, on_status: Optional[StatusHook] = None,
             timeout: float = TIMEOUT) -> Tuple[Any, Mapping[str, str]]:
    """GET a JSON answer: (body, response headers)."""
    answer = request(url, what, headers, on_status, timeout)
    try:
        data = answer.read()
    except (OSError, http.client.HTTPException) as exc:
        raise StoreError(transport_sentence(url, exc, what, timeout)) from None
    try:
        return json.loads(data), answer.headers
    except ValueError:
        raise StoreError(not_json_sentence(url, what, data)) from None


def modelscope_listing_url(endpoint: str, model_id: str, revision: str) -> str:
    return f"{endpoint.rstrip('/')}/api/v1/models/{model_id}/repo/files?Revision={quote(revision)}&Recursive=True"


def hf_tree_url(endpoint: str, model_id: str, revision: str) -> str:
    return f"{endpoint.rstrip('/')}/api/models/{model_id}/tree/{quote(revision, safe='')}?recursive=True"


def modelscope_listing(endpoint: str, model_id: str, revision: str, timeout: float = TIMEOUT) -> List[RemoteFile]:
    endpoint = require_http_url(endpoint, "endpoint")
    url = modelscope_listing_url(endpoint, model_id, revision)
    body, _headers = get_json(url, f"the file listing of {model_id}@{revision}", {"Accept": "application/json"},
                              lambda code, _h, text: modelscope_error(endpoint, url, model_id, revision, code, text), timeout)
    return parse_listing(body, model_id, url)


def hf_listing(endpoint: str, model_id: str, revision: str, token: Optional[str], timeout: float = TIMEOUT) -> List[RemoteFile]:
    """Every file of a revision from the Hugging Face Hub's tree API (paginated through `Link: <...>; rel="next"`)."""
    endpoint = require_http_url(endpoint, "endpoint")
    headers = {"Accept": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    url: Optional[str] = hf_tree_url(endpoint, model_id, revision)
    files: List[RemoteFile] = []
    seen = set()
    while url:
        if url in seen:
            raise StoreError(f"{url} pages back to itself (Link rel=\"next\"): the mirror's paging is broken; "
                             "set the endpoint to another mirror")
        seen.add(url)
        body, answer_headers = get_json(url, f"the file listing of {model_id}@{revision}", headers,
                                        _hf_hook(endpoint, url, model_id, revision), timeout)
        files += parse_hf_tree(body, model_id, url)  # each page must be a list of entries
        url = next_page(answer_headers.get("Link"))
    return sorted(files, key=lambda f: f.path)


def _hf_hook(endpoint: str, url: str, model_id: str, revision: str) -> StatusHook:
    return lambda code, headers, _text: hf_error(endpoint, url, model_id, revision, code, headers.get("X-Error-Code", ""))


def mirror_listing(url: str, timeout: float = TIMEOUT) -> List[RemoteFile]:
    """The files a mirror or peer serves: its copy of our manifest."""
    where = f"{require_http_url(url, 'url')}/{MANIFEST}"
    hint = "is the mirror serving a folder that model_fetch filled? check url"

    def on_status(code: int, _headers: Mapping[str, str], _text: str) -> Optional[str]:
        return f"{where} answered {code} for the mirror's manifest: {hint}" if code == 404 else None

    document, _headers = get_json(where, "the mirror's manifest", on_status=on_status, timeout=timeout)
    return files_from_manifest(document, where)


def listing(source: str, model_id: str, revision: str, endpoint: Optional[str] = None, token: Optional[str] = None,
            url: Optional[str] = None, source_path: Optional[str] = None, timeout: float = TIMEOUT) -> List[RemoteFile]:
    """The files of one revision, from wherever source says."""
    if source == "modelscope":
        return modelscope_listing(endpoint or HUBS[source]["endpoint"], model_id, revision, timeout)
    if source == "huggingface":
        return hf_listing(endpoint or HUBS[source]["endpoint"], model_id, revision, token, timeout)
    if source == "http":
        return mirror_listing(url or "", timeout)
    return local_listing(source_path)


# --- a mirror's files, resumed --------------------------------------------------------------------

def resume_start(have: int, size: int) -> Optional[int]:
    """Where a mirror transfer starts from the partial file's length: None when it already holds the
    whole file (check it, no request), 0 when there is none or it is longer than the file, else its
    length (a `Range: bytes=<n>-` request)."""
    if 0 < have == size:
        return None
    return 0 if have > size else have


def content_range_start(header: Optional[str]) -> Optional[int]:
    match = re.match(r"\s*bytes\s+(\d+)-", header or "")
    return int(match.group(1)) if match else None


def range_answer(start: int, status: int, content_range: Optional[str]) -> str:
    """What to do with a mirror's answer to a request starting at `start`: "append" it to the partial
    file, "write" it from byte 0 (a 200: the server ignored the Range), or "mismatch" (a 206 for
    another offset: the partial file cannot be trusted)."""
    if status != 206:
        return "write"
    first = content_range_start(content_range)
    if first != start:
        return "mismatch"
    return "append" if start else "write"


def mirror_fetch(url: str, dest: str, files: List[RemoteFile], paths: List[str], timeout: float = TIMEOUT) -> int:
    """Download paths from a mirror into dest, resuming .incomplete files with a Range request; returns bytes read."""
    base = require_http_url(url, "url")
    sizes = {f.path: f for f in files}
    fetched = 0
    for rel in paths:
        target = os.path.join(dest, rel)
        partial = target + ".incomplete"
        os.makedirs(os.path.dirname(target), exist_ok=True)
        start = resume_start(os.path.getsize(partial) if os.path.exists(partial) else 0, sizes[rel].size)
        if start is not None:
            fetched += _transfer(f"{base}/{quote(rel)}", rel, partial, sizes[rel].size, start, timeout)
        if sizes[rel].sha256 and sha256_of(partial) != sizes[rel].sha256:
            os.remove(partial)
            raise StoreError(f"{rel} from {base}/{quote(rel)} does not match its sha256 in the mirror's manifest; "
                             "it was removed, re-run to fetch it again")
        os.replace(partial, target)
    return fetched


def _transfer(file_url: str, rel: str, partial: str, size: int, start: int, timeout: float) -> int:
    what = f"{rel} (listed in the mirror's manifest)"

    def on_status(code: int, _headers: Mapping[str, str], _text: str) -> Optional[str]:
        if code == 404:
            return (f"{file_url} answered 404 for {rel}, which the mirror's manifest lists: the mirror's folder is incomplete; "
                    "re-run model_fetch into it (or point url at a complete one)")
        if code == 416 and os.path.exists(partial):
            os.remove(partial)
            return (f"{file_url} answered 416 to a resume of {rel} from byte {start}: the mirror's file is shorter than its manifest "
                    "says; the partial file was removed, re-run (and re-fill the mirror if it repeats)")
        return None

    answer = request(file_url, what, {"Range": f"bytes={start}-"} if start else {}, on_status, timeout)
    action = range_answer(start, getattr(answer, "status", 200), answer.headers.get("Content-Range"))
    if action == "mismatch" and start:   # the partial file is dropped; the file comes again, whole
        answer.close()
        os.remove(partial)
        start = 0
        answer = request(file_url, what, {}, on_status, timeout)
        action = range_answer(start, getattr(answer, "status", 200), answer.headers.get("Content-Range"))
    if action == "mismatch":
        raise StoreError(f"{file_url} answered a request from byte {start} with another range "
                         f"({answer.headers.get('Content-Range')!r}): the mirror is not a plain web server; "
                         "point url at one (nginx, python -m http.server)")
    return _copy_body(answer, file_url, rel, partial, size, "ab" if action == "append" else "wb")


def _copy_body(answer: Any, file_url: str, rel: str, partial: str, size: int, mode: str) -> int:
    """Stream an answer into the partial file; a cut leaves what came for the next run to resume."""
    read = 0
    cause = ""
    with open(partial, mode) as out:
        try:
            for block in iter(lambda: answer.read(1 << 16), b""):
                out.write(block)
                read += len(block)
        except http.client.IncompleteRead as exc:
            out.write(exc.partial)
            read += len(exc.partial)
        except (OSError, http.client.HTTPException) as exc:
            cause = f" ({_said(_cause(exc))})"
        have = out.tell()
    if have < size:
        raise StoreError(f"the transfer of {rel} from {file_url} broke off after {have} of {size} bytes{cause}; re-run to resume it")
    return read


# --- the hub's SDK, as a child process ------------------------------------------------------------

def sdk_env(source: str, endpoint: str, token: Optional[str], base: Mapping[str, str]) -> Dict[str, str]:
    endpoint = endpoint.rstrip("/")
    if source == "modelscope":
        return dict(base, MODELSCOPE_ENDPOINT=endpoint, MODELSCOPE_DOWNLOAD_INTRA_CLOUD="false")
    env = dict(base, HF_ENDPOINT=endpoint, HF_HUB_DISABLE_TELEMETRY="1")
    if token:
        env["HF_TOKEN"] = token
    return env


def sdk_command(python: str, source: str, model_id: str, revision: str, dest: str, paths: List[str], workers: int,
                endpoint: str) -> List[str]:
    args = {"model_id": model_id, "revision": revision, "dest": dest, "files": paths, "workers": workers, "endpoint": endpoint}
    return [python, "-c", SDK_CALL.format(package=HUBS[source]["package"]), json.dumps(args)]


def sdk_failure(package: str, python: str, model_id: str, revision: str, endpoint: str, tail: List[str], log_file: str) -> str:
    """The sentence for an SDK child that exited non-zero, from the last lines of its log."""
    if tail and f"No module named '{package}'" in tail[-1]:
        return (f"the {package} SDK is not importable by {python}, so nothing was fetched from {endpoint}: "
                "the model_store role installs it in a venv (sdk_python)")
    lines = [line.strip() for line in tail if line.strip()]
    errors = [line for line in lines if EXCEPTION_LINE.match(line) or line.startswith("- ")]
    errors = errors or [line for line in lines if "Error" in line]
    said = " | ".join(errors[-3:] or lines[-2:]) or "no output"
    return (f"the {package} SDK failed to fetch {model_id}@{revision} from {endpoint}: {said} (full log: {log_file}); "
            "re-run to resume, and if it repeats check the endpoint and the log")


def run_sdk(source: str, model_id: str, revision: str, dest: str, paths: List[str], workers: int, endpoint: str,
            token: Optional[str], sdk_python: Optional[str], log_file: str) -> None:
    package = HUBS[source]["package"]
    python = sdk_python or sys.executable
    cmd = sdk_command(python, source, model_id, revision, dest, paths, workers, endpoint)
    try:
        with open(log_file, "ab") as log:
            began = log.tell()   # this run's part of the log is what its failure quotes
            proc = subprocess.run(cmd, stdout=log, stderr=log, env=sdk_env(source, endpoint, token, os.environ), check=False)
    except OSError as exc:
        if exc.filename == log_file:
            raise StoreError(f"cannot write the {package} SDK's log {log_file} ({exc.strerror}), so nothing was fetched from "
                             f"{endpoint}: set log_file to a writable path") from None
        raise StoreError(f"cannot run {python} ({exc.strerror}), so nothing was fetched from {endpoint}: "
                         f"set sdk_python to an interpreter that has {package} (the model_store role makes a venv)") from None
    if proc.returncode != 0:
        with open(log_file, "rb") as handle:
            handle.seek(max(began, os.path.getsize(log_file) - 4000))
            tail = handle.read().decode("utf-8", "replace").strip().splitlines()
        raise StoreError(sdk_failure(package, python, model_id, revision, endpoint, tail, log_file))
