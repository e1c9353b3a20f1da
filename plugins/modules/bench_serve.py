#!/usr/bin/python
# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: bench_serve
short_description: One step of bench.yml's sweep - C(vllm bench serve) from the engine's own install
version_added: 0.1.0
description:
  - Runs C(vllm bench serve) once (one target, one concurrency step) with the vLLM that serves on this host - the
    instance's venv, or C(docker exec) into its container - against an instance's loopback port or the gateway, with
    random prompts of a fixed length, EOS ignored, warm-up requests first; returns vLLM's numbers as one row.
  - The key goes to the client in C(OPENAI_API_KEY), never on its command line. The result file is read back and
    removed.
  - Fails when the client cannot run or writes no result, with the end of its output; requests that fail are not a
    module failure - they are counted in the row, and bench.yml's report names them.
author:
  - llmfleet.serving developers (!UNKNOWN)
options:
  item:
    description:
      - One entry of the bench_items filter - deployment, target, via, host, base_url, model, engine_version, client
        (runtime and python or container, tokenizer), concurrency, num_prompts, input_len, output_len, warmups, seed,
        timeout; an embedding model's C(pooling=embed) (the openai-embeddings backend on C(/v1/embeddings)); C(skip), a
        reason, for a target the sweep does not measure (the step is reported skipped with it).
    type: dict
    required: true
  api_key:
    description: The key the target wants (an instance - the engines' key; the gateway - a client key).
    type: str
    required: true
attributes:
  check_mode:
    support: full
    description: In check mode nothing is sent; it says what would run.
  diff_mode:
    support: none
    description: No diff.
"""

EXAMPLES = r"""
- name: One sweep step
  llmfleet.serving.bench_serve:
    item: "{{ item }}"
    api_key: "{{ engine_key }}"
  loop: "{{ targets | llmfleet.serving.bench_items(vllm_engines, bench_settings) }}"
"""

RETURN = r"""
row:
  description: "{deployment, target, via, host, model, engine_version, concurrency, num_prompts, input_len, output_len,
    metrics: {completed, failed, duration, request_throughput, output_throughput, total_token_throughput,
    mean/median/p50/p95/p99 of ttft, tpot, itl, e2el in ms}}; absent in check mode."
  returned: success
  type: dict
first_error:
  description: The first failed request's error as the client saw it, when any failed.
  returned: success
  type: str
"""

import json
import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.serving.plugins.module_utils._bench import BenchError, command, label, progress, row


def read_result(module, item, path, result_dir):
    """vLLM's result JSON: read straight from the venv client's folder, or with docker exec cat from the container's."""
    if item["client"]["runtime"] == "docker":
        rc, out, err = module.run_command(["docker", "exec", item["client"]["container"], "cat", path])
        module.run_command(["docker", "exec", item["client"]["container"], "rm", "-rf", result_dir])
        if rc != 0:
            return None
        text = out
    else:
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except OSError:
            return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def main():
    module = AnsibleModule(
        argument_spec={"item": {"type": "dict", "required": True}, "api_key": {"type": "str", "required": True, "no_log": True}},
        supports_check_mode=True,
    )
    item = module.params["item"]
    missing = [k for k in ("deployment", "target", "base_url", "model", "client", "concurrency", "num_prompts") if k not in item]
    if missing:
        module.fail_json(msg=f"item lacks {', '.join(missing)}: pass one entry of the bench_items filter")
    if item.get("skip"):
        # a target the sweep cannot measure (a reranker or classifier, an embedding model on an engine without the backend)
        module.exit_json(changed=False, skipped=True, msg=f"{label(item)}: not measured: {item['skip']}")
    if module.check_mode:
        module.exit_json(changed=False, msg=f"check mode: would run vllm bench serve for {label(item)}")
    docker = item["client"]["runtime"] == "docker"
    result_dir = f"/tmp/llmfleet-bench-{os.getpid()}" if docker else tempfile.mkdtemp(prefix="llmfleet-bench-")
    path = f"{result_dir}/result.json"
    try:
        argv = command(item, result_dir, "result.json")
        if docker:
            module.run_command(["docker", "exec", item["client"]["container"], "mkdir", "-p", result_dir], check_rc=True)
        env = {"OPENAI_API_KEY": module.params["api_key"], "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        timeout = int(item.get("timeout") or 1800)
        rc, out, err = module.run_command(["timeout", "--kill-after=30", str(timeout), *argv], environ_update=env)
        raw = read_result(module, item, path, result_dir)
        if rc != 0 or raw is None:
            tail = "\n".join((out + "\n" + err).strip().splitlines()[-15:])
            why = f"it ran past {timeout} s (bench_timeout)" if rc in (124, 137) else f"exit code {rc}"
            module.fail_json(msg=f"{label(item)}: vllm bench serve wrote no result ({why}); its output ends: {tail}", rc=rc)
        result = row(item, raw)
        errors = [e for e in raw.get("errors") or [] if e]
        module.exit_json(changed=False, row=result, msg=progress(result), first_error=str(errors[0])[-500:] if errors else "")
    except BenchError as exc:
        module.fail_json(msg=str(exc))
    finally:
        if not docker:
            shutil.rmtree(result_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
