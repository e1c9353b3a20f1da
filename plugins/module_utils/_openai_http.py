# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""PRIVATE module_utils of llmfleet.serving: one request to an OpenAI-compatible endpoint (vLLM, the gateway)
with a bearer key and a JSON body, as vllm_ready's health gate and openai_check's verify calls make it."""

from __future__ import annotations

import json
from typing import Any, Iterator, Optional, Tuple, Union

from ansible.module_utils.six.moves.urllib.error import HTTPError, URLError
from ansible.module_utils.urls import open_url

Payload = Union[None, str, dict, list, Iterator[str]]


def _parse(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


def call(url: str, body: Optional[Any] = None, api_key: Optional[str] = None, timeout: float = 30,
         stream: bool = False) -> Tuple[Optional[int], Payload]:
    """(status, payload): POST with a JSON body, else GET. The payload is the parsed JSON answer (or its text);
    with `stream`, on a 2xx answer, an iterator of its decoded lines (server-sent events). An HTTP error gives
    its status and body; status None when nothing answered, the payload then saying why."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    try:
        resp = open_url(url, data=json.dumps(body) if body is not None else None, headers=headers,
                        method="POST" if body is not None else "GET", timeout=timeout)
        if stream:
            return resp.getcode(), (line.decode("utf-8", "replace") for line in resp)
        return resp.getcode(), _parse(resp.read())
    except HTTPError as exc:
        return exc.code, _parse(exc.read())
    except (URLError, OSError, ValueError) as exc:
        return None, str(getattr(exc, "reason", exc))


def error_text(payload: Payload, limit: int = 300) -> str:
    """The engine's own sentence from an OpenAI-shaped error body ({"error": {"message": ...}}), else the body."""
    if isinstance(payload, dict):
        detail = payload.get("error", payload)
        if isinstance(detail, dict):
            return str(detail.get("message", detail))[:limit]
        return str(detail)[:limit]
    return str(payload)[:limit]
