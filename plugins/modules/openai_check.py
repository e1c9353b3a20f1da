#!/usr/bin/python
# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: openai_check
short_description: Ask one OpenAI-compatible endpoint what verify.yml checks, and judge the answers
version_added: 0.1.0
description:
  - For one target (an instance on this host's loopback, or a model through the gateway) asks C(GET /models), a chat
    completion, a streamed one (which must end with C([DONE])), and, when the target was launched with tools on, a
    request with C(tools) and C(tool_choice=auto); records which reasoning field (C(reasoning), C(reasoning_content))
    the answers carry.
  - A pooling model (the target's C(runner) is C(pooling)) is asked C(GET /models) and its own endpoint (the plan's
    C(health_probe)); the answer must have the plan's shape (an embedding of C(embedding_dimensions) numbers, a score,
    or C(num_labels) probabilities).
  - Never fails on a bad answer - it returns the row (each check ok, FAIL or n/a, and the first failure's sentence
    with the engine's own error) for verify.yml's table; fails only on malformed input.
author:
  - llmfleet.serving developers (!UNKNOWN)
options:
  target:
    description:
      - One entry of the verify_targets filter - deployment, instance, host, via, url (the C(/v1) base), model, tools,
        reasoning_parser, engine_version; a pooling model's also runner, pooling_task, score, health_probe,
        embedding_dimensions, num_labels (it is asked its own endpoint instead of a chat).
    type: dict
    required: true
  api_key:
    description: The key the endpoint wants (an instance - the engines' key; the gateway - a client key).
    type: str
    required: true
  timeout:
    description: Seconds per request.
    type: int
    default: 120
attributes:
  check_mode:
    support: full
    description: Only reads; runs in check mode too.
  diff_mode:
    support: none
    description: No diff.
"""

EXAMPLES = r"""
- name: Check an instance on this host
  llmfleet.serving.openai_check:
    target: {deployment: tiny, instance: tiny-0, host: e1, via: instance, url: "http://127.0.0.1:8002/v1", model: tiny,
             tools: true, reasoning_parser: null, engine_version: "0.32.0"}
    api_key: "{{ engine_key }}"
"""

RETURN = r"""
row:
  description: >-
    {deployment, instance, host, via, model, checks: {listed, chat, stream, tools, reasoning, pooling}, answer (the chat check's text,
    one line), failed, problem}.
  returned: always
  type: dict
"""

from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmfleet.serving.plugins.module_utils._openai_http import call, error_text
from ansible_collections.llmfleet.serving.plugins.module_utils._verify import (
    ANSWER_TOKENS, VerifyError, chat_body, judge, pooling_request, read_stream,
)


def ask(url, key, timeout, body=None, stream=False):
    """{status, json | done/chunks/text/fields, error} of one request; status -1 when nothing answered."""
    status, payload = call(url, body, key, timeout, stream=stream)
    if status is None:
        return {"status": -1, "error": str(payload)[:300]}
    if status >= 400:
        return {"status": status, "error": error_text(payload)}
    if stream:
        return dict(read_stream(payload), status=status)
    message = ((payload.get("choices") or [{}])[0].get("message") or {}) if isinstance(payload, dict) else {}
    return {"status": status, "json": payload,
            "reasoning_fields": sorted(k for k in ("reasoning", "reasoning_content") if isinstance(message, dict) and message.get(k))}


def main():
    module = AnsibleModule(
        argument_spec={"target": {"type": "dict", "required": True}, "api_key": {"type": "str", "required": True, "no_log": True},
                       "timeout": {"type": "int", "default": 120}},
        supports_check_mode=True,
    )
    t = module.params["target"]
    missing = [k for k in ("deployment", "instance", "host", "via", "url", "model") if k not in t]
    if missing:
        module.fail_json(msg=f"target lacks {', '.join(missing)}: pass one entry of the verify_targets filter")
    key, timeout, base = module.params["api_key"], module.params["timeout"], str(t["url"]).rstrip("/")
    if t.get("runner") == "pooling":
        # a pooling model answers no chat: its own endpoint (the plan's health_probe) and the answer's shape
        try:
            url, body = pooling_request(t)
        except VerifyError as exc:
            module.fail_json(msg=str(exc))
        requests = {"models": (base + "/models", None, False), "pooling": (url, body, False)}
    else:
        requests = {
            "models": (base + "/models", None, False),
            "chat": (base + "/chat/completions", chat_body(t["model"], max_tokens=ANSWER_TOKENS), False),
            "stream": (base + "/chat/completions", chat_body(t["model"], stream=True), True),
        }
    if t.get("tools") and t.get("runner") != "pooling":
        requests["tools"] = (base + "/chat/completions", chat_body(t["model"], tools=True), False)
    # side by side: the engine batches them, so the checks take about as long as the longest answer
    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        futures = {name: pool.submit(ask, url, key, timeout, body, stream) for name, (url, body, stream) in requests.items()}
        answers = {name: future.result() for name, future in futures.items()}
    module.exit_json(changed=False, row=judge(dict({"tools": False, "reasoning_parser": None, "engine_version": ""}, **t), answers))


if __name__ == "__main__":
    main()
