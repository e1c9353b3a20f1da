"""One chat request with the official openai client, streamed and not, plus the raw SSE lines (for the
[DONE] end): prints JSON. Runs on the controller (against the gateway) and inside an engine host
(against the instance on 127.0.0.1), with a Python that has `openai` (the vLLM venvs have it).
    python chat_probe.py BASE_URL KEY MODEL"""

import json
import sys

import httpx
import openai

base, key, model = sys.argv[1:4]
request = {"model": model, "messages": [{"role": "user", "content": "Say hello to the fleet."}],
           "temperature": 0, "seed": 7, "max_tokens": 24}
# the tiny model has random weights: it may end at once or pick special tokens (empty deltas are not
# streamed), so vLLM's extensions ignore_eos and skip_special_tokens=false make 24 visible tokens
EXTRA = {"ignore_eos": True, "skip_special_tokens": False}
client = openai.OpenAI(base_url=base, api_key=key, timeout=60, max_retries=0)
chunks = list(client.chat.completions.create(stream=True, extra_body=EXTRA, **request))
whole = client.chat.completions.create(extra_body=EXTRA, **request)
with httpx.stream("POST", base + "/chat/completions", json=dict(request, stream=True, **EXTRA), timeout=60,
                  headers={"Authorization": f"Bearer {key}"}) as resp:
    raw = [line for line in resp.iter_lines() if line.startswith("data:")]
print(json.dumps({
    "chunks": len(chunks), "stream_text": "".join((c.choices[0].delta.content or "") for c in chunks if c.choices),
    "text": whole.choices[0].message.content, "completion_tokens": whole.usage.completion_tokens,
    "finish_reason": whole.choices[0].finish_reason, "model": whole.model,
    "raw_events": len(raw), "raw_last": raw[-1] if raw else None}))
