#!/usr/bin/python
# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: model_fetch
short_description: Fetch a model snapshot once, verify it against the hub's listing, repair and resume
version_added: 0.1.0
description:
  - Keeps a model folder equal to one revision of a model on ModelScope (the real C(modelscope) SDK
    does the downloading), on the Hugging Face Hub (the real C(huggingface_hub) client), on a web
    mirror or peer, or in a local folder (air-gapped fleets).
  - Writes a manifest (C(.llmfleet-manifest.json), path, size, sha256, revision) from the hub's own
    file listing (on Hugging Face, files outside LFS are listed by their git blob id, which is checked
    instead). Every run verifies the folder against it, by size and recorded mtime (fast) or by
    re-hashing every file (O(verify=full)), and fetches only files that are missing or corrupt. Partial
    files are resumed by the SDK with HTTP ranges.
  - Checks the free disk space before downloading. Check mode reports what would be fetched and its size.
author:
  - llmfleet.serving developers (!UNKNOWN)
options:
  model_id:
    description: Model id on the hub, C(owner/name).
    type: str
    required: true
  revision:
    description:
      - Branch, tag or commit. A branch draws a warning; production fleets pin a tag or commit.
      - By default C(master) on ModelScope and C(main) on Hugging Face.
    type: str
  dest:
    description: The model folder.
    type: path
    required: true
  source:
    description:
      - Where the files come from. V(modelscope) is the hub (or a mirror of its API) through the real SDK.
      - V(huggingface) is the Hugging Face Hub (or a mirror of its API such as hf-mirror.com) through C(huggingface_hub).
      - V(http) is a web server (or a peer host) serving a folder that model_fetch already filled, with its
        manifest; files resume with HTTP ranges and are checked against the manifest's sha256.
      - V(path) is a folder on the host (air-gapped fleets).
    type: str
    choices: [modelscope, huggingface, http, path]
    default: modelscope
  endpoint:
    description:
      - Hub address (a mirror, or a stand-in in tests); passed to the SDK as its endpoint.
      - By default C(https://modelscope.cn) for V(modelscope) and C(https://huggingface.co) for V(huggingface).
    type: str
  token:
    description: Access token for gated or private models on the Hugging Face Hub (passed to the client as C(HF_TOKEN)).
    type: str
  source_path:
    description: With O(source=path), the folder to copy from.
    type: path
  url:
    description: With O(source=http), the URL of the model folder (the one holding C(.llmfleet-manifest.json)).
    type: str
  allow_patterns:
    description: Only files matching one of these shell patterns.
    type: list
    elements: str
  ignore_patterns:
    description: Leave out files matching one of these shell patterns.
    type: list
    elements: str
  config_only:
    description: Fetch only C(config.json), the safetensors index and C(generation_config.json), so a plan can be made first.
    type: bool
    default: false
  verify:
    description: C(fast) trusts files whose size and mtime match what the manifest recorded when they were hashed; C(full) re-hashes all.
    type: str
    choices: [fast, full]
    default: fast
  workers:
    description: Files downloaded in parallel by the SDK.
    type: int
    default: 4
  reserve_bytes:
    description: Free space that must remain after the download.
    type: int
    default: 1073741824
  log_file:
    description: Where the SDK's progress output goes; by default a file next to O(dest).
    type: path
  sdk_python:
    description:
      - Interpreter that has the hub's SDK (modelscope or huggingface_hub; a venv's python); the download
        runs in it as a child process. By default the interpreter running the module.
    type: path
attributes:
  check_mode:
    description: Reports the files it would fetch and their size, fetches nothing.
    support: full
  diff_mode:
    description: Not supported.
    support: none
  idempotent:
    description: A folder that matches the listing is left alone.
    support: full
requirements:
  - the C(modelscope) Python package for O(source=modelscope), importable by O(sdk_python)
  - the C(huggingface_hub) Python package for O(source=huggingface), importable by O(sdk_python)
"""

EXAMPLES = r"""
- name: Fetch a pinned revision
  llmfleet.serving.model_fetch:
    model_id: Qwen/Qwen3-0.6B
    revision: v1.0
    dest: /models/Qwen3-0.6B

- name: From the Hugging Face Hub through a mirror, pinned to a commit
  llmfleet.serving.model_fetch:
    model_id: Qwen/Qwen3-0.6B
    source: huggingface
    endpoint: https://hf-mirror.com
    revision: c1899de289a04d12100db370d81485cdf75e47ca
    dest: /models/Qwen3-0.6B

- name: Only what the planner needs, before the weights move
  llmfleet.serving.model_fetch:
    model_id: Qwen/Qwen3.5-27B-FP8
    dest: /models/Qwen3.5-27B-FP8
    config_only: true
"""

RETURN = r"""
fetched:
  description: Files fetched (or, in check mode, that would be).
  returned: always
  type: list
  elements: str
repaired:
  description: Files that were present but did not match the listing, fetched again.
  returned: always
  type: list
  elements: str
bytes_fetched:
  description: Bytes fetched from the source this run (file sizes less the resumed partial bytes).
  returned: always
  type: int
total_bytes:
  description: Size of the selected files of this revision.
  returned: always
  type: int
files:
  description: Number of files the folder holds for this revision.
  returned: always
  type: int
manifest:
  description: Path of the manifest.
  returned: always
  type: str
bytes_on_disk:
  description: Bytes of the files under O(dest) before this run (partial downloads included); progress is counted from here.
  returned: always
  type: int
"""

import json
import os
from http.client import IncompleteRead
import shutil
import subprocess
import sys
from urllib.error import HTTPError, URLError
from urllib.parse import quote

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url

from ansible_collections.llmfleet.serving.plugins.module_utils._model_store import (
    HUBS, MANIFEST, RemoteFile, StoreError, bytes_to_fetch, bytes_under, check, check_space, files_from_manifest, manifest_document,
    next_page, parse_hf_tree, parse_listing, revision_warning, select, sha256_of, write_manifest,
)

# The same call in both SDKs. huggingface_hub resumes a file from DEST/.cache/huggingface/download/<path>.incomplete,
# modelscope from DEST/<path>.incomplete (or its cache), each with a Range request.
SDK_CALL = (
    "import json, sys\n"
    "from {package} import snapshot_download\n"
    "a = json.loads(sys.argv[1])\n"
    "snapshot_download(a['model_id'], revision=a['revision'], local_dir=a['dest'], allow_patterns=a['files'],\n"
    "                  max_workers=a['workers'], endpoint=a['endpoint'])\n"
)
HF_CACHE = os.path.join(".cache", "huggingface")


def get_json(url, endpoint, model_id, headers, http_error):
    """GET a hub's JSON answer: (body, response headers). An HTTP error goes to http_error(exc), which
    raises the hub-specific sentence; no answer or no JSON are said here, the same for every hub."""
    try:
        answer = open_url(url, timeout=60, headers=headers)
        return json.loads(answer.read()), answer.headers
    except HTTPError as exc:
        http_error(exc)
        raise StoreError(f"{endpoint} answered {exc.code} for the file listing of {model_id}") from None
    except (URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise StoreError(f"cannot reach {endpoint} ({reason}): check the endpoint, a mirror, or the host's network") from None
    except ValueError:
        raise StoreError(f"{endpoint} sent a file listing for {model_id} that is not JSON") from None


def hub_listing(endpoint, model_id, revision):
    def http_error(exc):
        try:
            message = json.loads(exc.read()).get("Message", "")
        except ValueError:
            message = ""
        if exc.code == 404:
            raise StoreError(f"{endpoint} has no {model_id} at revision {revision!r}"
                             + (f" ({message})" if message else "") + ": check the model id and the revision") from None
        raise StoreError(f"{endpoint} answered {exc.code} for the file listing of {model_id}@{revision}: {message or exc.reason}") from None

    url = f"{endpoint.rstrip('/')}/api/v1/models/{model_id}/repo/files?Revision={quote(revision)}&Recursive=True"
    body, _headers = get_json(url, endpoint, model_id, {"Accept": "application/json"}, http_error)
    return parse_listing(body, model_id)


def hf_listing(endpoint, model_id, revision, token):
    """Every file of a revision from the Hugging Face Hub's tree API (paginated through `Link: <...>; rel="next"`)."""
    def http_error(exc):
        code = exc.headers.get("X-Error-Code", "") if exc.headers else ""
        if code == "RevisionNotFound":
            raise StoreError(f"{endpoint} has {model_id} but no revision {revision!r}: check the branch, tag or commit") from None
        if code == "RepoNotFound" or exc.code == 404:
            raise StoreError(f"{endpoint} has no model {model_id} (or it is private and no token was given): "
                             "check the model id, or set model_store_hf_token") from None
        if exc.code in (401, 403):
            raise StoreError(f"{endpoint} refused the listing of {model_id} ({exc.code}): the model is gated or private; "
                             "accept its licence on the hub and set model_store_hf_token") from None

    url = f"{endpoint.rstrip('/')}/api/models/{model_id}/tree/{quote(revision, safe='')}?recursive=True"
    headers = {"Accept": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    files = []
    while url:
        body, answer_headers = get_json(url, endpoint, model_id, headers, http_error)
        files += parse_hf_tree(body, model_id)  # each page must be a list of entries
        url = next_page(answer_headers.get("Link"))
    return sorted(files, key=lambda f: f.path)


def local_listing(source_path):
    if not source_path or not os.path.isdir(source_path):
        raise StoreError(f"source_path {source_path!r} is not a folder on this host")
    files = []
    for dirpath, _dirs, names in os.walk(source_path):
        for name in sorted(names):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, source_path)
            if rel == MANIFEST or name.endswith(".incomplete") or rel.startswith(HF_CACHE + os.sep):
                continue
            files.append(RemoteFile(rel, os.path.getsize(full), sha256_of(full)))
    return sorted(files, key=lambda f: f.path)


def http_listing(url):
    where = f"{url.rstrip('/')}/{MANIFEST}"
    try:
        document = json.loads(open_url(where, timeout=60).read())
    except HTTPError as exc:
        raise StoreError(f"{where} answered {exc.code}: is the mirror serving a folder that model_fetch filled?") from None
    except (URLError, OSError) as exc:
        raise StoreError(f"cannot reach {where} ({getattr(exc, 'reason', exc)}): check the mirror or peer address") from None
    except ValueError:
        raise StoreError(f"{where} is not JSON") from None
    return files_from_manifest(document, where)


def http_fetch(url, dest, files, paths):
    """Download paths from a mirror, resuming .incomplete files with a Range request; returns bytes read."""
    sizes = {f.path: f for f in files}
    fetched = 0
    for rel in paths:
        target = os.path.join(dest, rel)
        partial = target + ".incomplete"
        os.makedirs(os.path.dirname(target), exist_ok=True)
        have = os.path.getsize(partial) if os.path.exists(partial) else 0
        if have > sizes[rel].size:
            os.remove(partial)
            have = 0
        headers = {"Range": f"bytes={have}-"} if have else {}
        answer = open_url(f"{url.rstrip('/')}/{quote(rel)}", timeout=60, headers=headers)
        mode = "ab" if have and answer.status == 206 else "wb"
        with open(partial, mode) as out:
            try:
                while True:
                    block = answer.read(1 << 16)
                    if not block:
                        break
                    out.write(block)
                    fetched += len(block)
            except IncompleteRead as exc:
                out.write(exc.partial)
                raise StoreError(f"the transfer of {rel} from {url} broke off after {out.tell()} of {sizes[rel].size} bytes; "
                                 "re-run to resume it") from None
            except OSError as exc:
                raise StoreError(f"the transfer of {rel} from {url} broke off after {out.tell()} of {sizes[rel].size} bytes "
                                 f"({exc}); re-run to resume it") from None
            if out.tell() < sizes[rel].size:
                raise StoreError(f"the transfer of {rel} from {url} broke off after {out.tell()} of {sizes[rel].size} bytes; "
                                 "re-run to resume it")
        if sizes[rel].sha256 and sha256_of(partial) != sizes[rel].sha256:
            os.remove(partial)
            raise StoreError(f"{rel} from {url} does not match its sha256 in the mirror's manifest; it was removed, re-run to fetch it again")
        os.replace(partial, target)
    return fetched


def existing_parent(path):
    """The folder itself, or its nearest existing parent (where a new folder's bytes would go)."""
    while not os.path.isdir(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def run_sdk(params, paths, log_file):
    source = params["source"]
    args = {"model_id": params["model_id"], "revision": params["revision"], "dest": params["dest"], "files": paths,
            "workers": params["workers"], "endpoint": params["endpoint"]}
    env = dict(os.environ, MODELSCOPE_ENDPOINT=params["endpoint"].rstrip("/"), MODELSCOPE_DOWNLOAD_INTRA_CLOUD="false") \
        if source == "modelscope" else dict(os.environ, HF_ENDPOINT=params["endpoint"].rstrip("/"), HF_HUB_DISABLE_TELEMETRY="1")
    if params["token"] and source == "huggingface":
        env["HF_TOKEN"] = params["token"]
    package = HUBS[source]["package"]
    python = params["sdk_python"] or sys.executable
    with open(log_file, "ab") as log:
        proc = subprocess.run([python, "-c", SDK_CALL.format(package=package), json.dumps(args)],
                              stdout=log, stderr=log, env=env, check=False)
    if proc.returncode != 0:
        with open(log_file, "rb") as handle:
            tail = handle.read()[-4000:].decode("utf-8", "replace").strip().splitlines()
        if tail and f"No module named '{package}'" in tail[-1]:
            raise StoreError(f"the {package} SDK is not importable by {python}: "
                             "the model_store role installs it in a venv (sdk_python)")
        errors = [line.strip() for line in tail if "Error" in line or line.strip().startswith("- ")]
        raise StoreError(f"the {package} SDK failed to fetch {params['model_id']}@{params['revision']}: "
                         + " | ".join(errors[-3:] or tail[-2:]) + f" (full log: {log_file}); re-run to resume")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            model_id=dict(type="str", required=True),
            revision=dict(type="str"),
            dest=dict(type="path", required=True),
            source=dict(type="str", choices=["modelscope", "huggingface", "http", "path"], default="modelscope"),
            url=dict(type="str"),
            endpoint=dict(type="str"),
            token=dict(type="str", no_log=True),
            source_path=dict(type="path"),
            allow_patterns=dict(type="list", elements="str"),
            ignore_patterns=dict(type="list", elements="str"),
            config_only=dict(type="bool", default=False),
            verify=dict(type="str", choices=["fast", "full"], default="fast"),
            workers=dict(type="int", default=4),
            reserve_bytes=dict(type="int", default=1 << 30),
            log_file=dict(type="path"),
            sdk_python=dict(type="path"),
        ),
        required_if=[("source", "path", ["source_path"]), ("source", "http", ["url"])],
        supports_check_mode=True,
    )
    p = module.params
    dest = p["dest"]
    hub = p["source"] in HUBS
    p["endpoint"] = p["endpoint"] or (HUBS[p["source"]]["endpoint"] if hub else None)
    p["revision"] = p["revision"] or (HUBS[p["source"]]["revision"] if hub else "master")
    warning = revision_warning(p["revision"]) if hub else None
    if warning:
        module.warn(warning)
    try:
        if p["source"] == "modelscope":
            remote = hub_listing(p["endpoint"], p["model_id"], p["revision"])
        elif p["source"] == "huggingface":
            remote = hf_listing(p["endpoint"], p["model_id"], p["revision"], p["token"])
        elif p["source"] == "http":
            remote = http_listing(p["url"])
        else:
            remote = local_listing(p["source_path"])
        files = select(remote, p["allow_patterns"], p["ignore_patterns"], p["config_only"])
        if not files:
            raise StoreError(f"no file of {p['model_id']}@{p['revision']} matches the selection")
        state = check(dest, files, full=p["verify"] == "full") if os.path.isdir(dest) else None
        to_fetch = state.to_fetch if state else [f.path for f in files]
        repaired = list(state.corrupt) if state else []
        needed = bytes_to_fetch(files, state) if state else sum(f.size for f in files)
        result = dict(changed=bool(to_fetch), fetched=to_fetch, repaired=repaired, bytes_fetched=needed,
                      total_bytes=sum(f.size for f in files), files=len(files), manifest=os.path.join(dest, MANIFEST),
                      bytes_on_disk=bytes_under(dest))
        if to_fetch:  # before any byte moves, and in check mode too: a run that cannot fit is predicted as a failure
            check_space(dest, needed, shutil.disk_usage(existing_parent(dest)).free, p["reserve_bytes"])
        if module.check_mode:
            module.exit_json(**result)
        os.makedirs(dest, exist_ok=True)
        for rel in repaired:  # a file that does not match is fetched whole (an SDK may trust a file it finds in place)
            os.remove(os.path.join(dest, rel))
        if to_fetch:
            if hub:
                log_file = p["log_file"] or dest.rstrip("/") + ".download.log"
                run_sdk(p, to_fetch, log_file)
            elif p["source"] == "http":
                result["bytes_fetched"] = http_fetch(p["url"], dest, files, to_fetch)
            else:
                for rel in to_fetch:
                    target = os.path.join(dest, rel)
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    shutil.copy2(os.path.join(p["source_path"], rel), target + ".incomplete")
                    os.replace(target + ".incomplete", target)
            after = check(dest, files, full=True)
            if after.to_fetch:
                raise StoreError(f"after fetching, {', '.join(after.to_fetch)} still do not match the listing of "
                                 f"{p['model_id']}@{p['revision']}; the source serves different bytes than it lists")
        document = manifest_document(p["model_id"], p["revision"], p["source"], files, dest)
        manifest_changed = write_manifest(dest, document)
        result["changed"] = bool(to_fetch) or manifest_changed
    except StoreError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
