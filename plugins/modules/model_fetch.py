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
  - Never rewrites a file whose bytes the source now lists differently from what the manifest recorded (a branch that
    moved, another revision asked for in the same folder) - an engine may be serving from the folder, so the run stops
    before a byte moves and says to pin the revision (a folder of its own) or to remove the folder (O(replace_changed)).
  - A file that another folder of the same model (another revision of it beside O(dest)) holds with the listed bytes is
    hard-linked from there instead of fetched (O(reuse)); that folder is only read.
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
    description:
      - Fetch only what a plan is made from, so a plan can be made before any weight moves - C(config.json), the safetensors
        index, C(generation_config.json), C(tokenizer_config.json) and the quantization side files (C(quantize_config.json),
        C(quant_config.json), C(hf_quant_config.json)) and the sentence-transformers side files (C(modules.json),
        C(sentence_bert_config.json), C(2_Dense/config.json)) that the revision has.
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
  reuse:
    description:
      - Hard-link a missing file from a sibling folder of O(dest) whose manifest names the same model (another revision,
        or the unversioned folder of releases before revisions had folders) where that manifest records the listed size
        and hash and the file is unchanged since (size and mtime as recorded); a copy where the file system refuses a link.
      - The sibling is never written - model_fetch replaces a file, it never edits one in place.
    type: bool
    default: true
  replace_changed:
    description:
      - Rewrite the files whose bytes the source lists differently from what O(dest)'s manifest recorded (a branch that
        moved since, another revision in the same folder). Off, the module fails instead, before a byte moves, and says to
        pin the revision or remove the folder - an engine may be serving from it.
      - Only for a folder no engine reads (the controller's metadata cache).
    type: bool
    default: false
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
    dest: /models/Qwen3-0.6B@v1.0

- name: From the Hugging Face Hub through a mirror, pinned to a commit
  llmfleet.serving.model_fetch:
    model_id: Qwen/Qwen3-0.6B
    source: huggingface
    endpoint: https://hf-mirror.com
    revision: c1899de289a04d12100db370d81485cdf75e47ca
    dest: /models/Qwen3-0.6B@c1899de289a04d12100db370d81485cdf75e47ca

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
dest:
  description: The model folder.
  returned: always
  type: str
revision:
  description: The revision fetched (the hub's default branch when none was given).
  returned: always
  type: str
weight_bytes:
  description: Size of the revision's weight files as the source lists them (safetensors, else PyTorch files), whatever was selected.
  returned: always
  type: int
bytes_on_disk:
  description: Bytes of the files under O(dest) before this run (partial downloads included); progress is counted from here.
  returned: always
  type: int
reused:
  description: Files hard-linked (or, in check mode, that would be) from another folder of the same model instead of fetched.
  returned: always
  type: list
  elements: str
bytes_reused:
  description: Size of the reused files.
  returned: always
  type: int
"""

import os
import shutil

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.serving.plugins.module_utils._hub_http import listing, mirror_fetch, run_sdk
from ansible_collections.llmfleet.serving.plugins.module_utils._models import gguf_refusal, only_gguf_weights
from ansible_collections.llmfleet.serving.plugins.module_utils._model_store import (
    HUBS, MANIFEST, StoreError, bytes_under, changed_upstream, check, check_space, copy_local, existing_parent, fetch_plan, link_reused,
    listed_weight_bytes, manifest_document, moved_message, revision_warning, select, sibling_records, write_manifest,
)


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
            reuse=dict(type="bool", default=True),
            replace_changed=dict(type="bool", default=False),
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
        remote = listing(p["source"], p["model_id"], p["revision"], endpoint=p["endpoint"], token=p["token"], url=p["url"],
                         source_path=p["source_path"])
        files = select(remote, p["allow_patterns"], p["ignore_patterns"], p["config_only"])
        if p["config_only"] and not any(f.path == "config.json" for f in files):
            where = p["endpoint"] if hub else p["url"] or p["source_path"]
            raise StoreError(f"{p['model_id']}@{p['revision']} at {where} has no config.json (it lists {len(remote)} file(s)): "
                             "nothing to plan from; check the model id (a GGUF-only upload has none), or give the model's "
                             "config.json another way")
        if p["config_only"] and only_gguf_weights(f.path for f in remote):
            raise StoreError(gguf_refusal(f"{p['model_id']}@{p['revision']} holds GGUF weights only"))
        if not files:
            raise StoreError(f"no file of {p['model_id']}@{p['revision']} matches the selection: check allow_patterns and ignore_patterns")
        where = p["endpoint"] if hub else p["url"] or p["source_path"]
        moved = changed_upstream(dest, files)
        if moved and not p["replace_changed"]:   # before any byte moves, in check mode too
            raise StoreError(moved_message(dest, p["model_id"], p["revision"], where, moved))
        siblings = sibling_records(dest, p["model_id"]) if p["reuse"] else []
        plan = fetch_plan(dest, files, full=p["verify"] == "full", siblings=siblings)
        sizes = {f.path: f.size for f in files}
        result = dict(changed=bool(plan.to_fetch or plan.reused), fetched=plan.to_fetch, repaired=plan.repaired, bytes_fetched=plan.needed,
                      reused=sorted(plan.reused), bytes_reused=sum(sizes[r] for r in plan.reused),
                      total_bytes=sum(f.size for f in files), weight_bytes=listed_weight_bytes(remote), files=len(files),
                      dest=dest, revision=p["revision"],
                      manifest=os.path.join(dest, MANIFEST),
                      bytes_on_disk=bytes_under(dest))
        if plan.to_fetch:  # before any byte moves, and in check mode too: a run that cannot fit is predicted as a failure
            check_space(dest, plan.needed, shutil.disk_usage(existing_parent(dest)).free, p["reserve_bytes"])
        if module.check_mode:
            module.exit_json(**result)
        os.makedirs(dest, exist_ok=True)
        for rel in plan.repaired:  # a file that does not match is fetched whole (an SDK may trust a file it finds in place)
            os.remove(os.path.join(dest, rel))
        link_reused(dest, plan.reused)
        to_fetch = list(plan.to_fetch)
        if plan.reused and p["verify"] == "full":  # re-hashed like every other file; one that does not match is fetched
            bad = check(dest, [f for f in files if f.path in plan.reused], full=True).corrupt
            for rel in bad:
                os.remove(os.path.join(dest, rel))
            to_fetch = sorted(to_fetch + bad)
            result["fetched"], result["reused"] = to_fetch, sorted(set(plan.reused) - set(bad))
        if to_fetch:
            if hub:
                run_sdk(p["source"], p["model_id"], p["revision"], dest, to_fetch, p["workers"], p["endpoint"], p["token"],
                        p["sdk_python"], p["log_file"] or dest.rstrip("/") + ".download.log")
            elif p["source"] == "http":
                result["bytes_fetched"] = mirror_fetch(p["url"], dest, files, to_fetch)
            else:
                copy_local(p["source_path"], dest, to_fetch)
            after = check(dest, files, full=True)
            if after.to_fetch:
                raise StoreError(f"after fetching from {where}, {', '.join(after.to_fetch)} still do not match the listing of "
                                 f"{p['model_id']}@{p['revision']}: the source serves other bytes than it lists; re-run, and if it "
                                 "repeats use another endpoint or mirror")
        result["changed"] = bool(to_fetch or plan.reused) | write_manifest(dest, manifest_document(p["model_id"], p["revision"], p["source"],
                                                                                                   files, dest))
    except StoreError as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:  # the folder, not the network (those failures are StoreError sentences)
        module.fail_json(msg=f"{exc.filename or dest}: {exc.strerror or exc}; check that {dest} is writable by the user the module "
                             "runs as (and source_path readable), and that the disk is healthy, then re-run")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
