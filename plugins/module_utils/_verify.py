# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""PRIVATE module_utils of llmfleet.serving: what verify.yml checks on every instance and through the
gateway, read from the plans, and how the answers are judged and tabled. Pure and typed; the HTTP calls
are in the openai_check module.

Facts (vLLM entrypoints/openai protocol.py by release, PRs #27752 and #33402; docs/sources.md#reasoning-field):
vLLM returns the reasoning text as `reasoning_content` up to 0.11.0,
as both `reasoning` and `reasoning_content` from 0.11.1 to 0.15.x, and as `reasoning` only from 0.16.0.
`--enable-auto-tool-choice` is what makes `tool_choice: auto` acceptable (400 without it).
A pooling model (its plan says runner pooling) answers no chat: it is checked with its own endpoint, the plan's
health_probe (/v1/embeddings, /score or /classify), and the answer's shape (an embedding of the plan's length).
"""

from __future__ import annotations

import json
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ._engine import EngineError, parse_version
from ._fleet_plans import api_instances
from ._pooling import answer_shape

CHECKS = ("listed", "chat", "stream", "tools", "reasoning", "pooling")
# what a pooling target carries from its plan (the pooling plan contract); a generative target has none of them
POOLING_FIELDS = ("runner", "pooling_task", "score", "health_probe", "embedding_dimensions", "num_labels")
QUESTION = "What time is it in Paris? Answer briefly."
ANSWER_TOKENS = 48   # the chat check's answer is shown (verify_answers): long enough to read, short on a CPU
TOOL = {
    "type": "function",
    "function": {"name": "get_time", "description": "The current time in a city.",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
}


class VerifyError(ValueError):
    """Malformed input."""


def _version(text: str) -> Tuple[int, ...]:
    """The engine version of a target; an unknown one (a row without it) reads as the oldest."""
    try:
        return parse_version(text)
    except EngineError:
        return (0, 0, 0)


def reasoning_fields(engine_version: str) -> List[str]:
    """The message fields this vLLM release fills with the reasoning text."""
    version = _version(engine_version)
    if version <= (0, 11, 0):
        return ["reasoning_content"]
    if version < (0, 16, 0):
        return ["reasoning", "reasoning_content"]
    return ["reasoning"]


def _arg(args: Sequence[str], flag: str) -> Optional[str]:
    args = list(args)
    if flag in args:
        i = args.index(flag)
        return args[i + 1] if i + 1 < len(args) and not str(args[i + 1]).startswith("--") else ""
    return None


def instance_targets(plan: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """One target per planned instance of a host: its loopback URL and what it was launched to do."""
    if not isinstance(plan, Mapping):
        raise VerifyError(f"a host's plan must be a mapping (llmfleet_plan), got {type(plan).__name__}: run playbooks/plan.yml")
    out = []
    for dep in plan.get("deployments") or []:
        for inst in api_instances(dep):
            args = [str(a) for a in inst.get("args") or []]
            out.append({
                "deployment": str(dep["name"]), "instance": str(inst["name"]), "host": str(plan.get("host", "")),
                "via": "instance", "url": f"http://127.0.0.1:{int(inst['port'])}/v1",
                "model": str(inst.get("served_model_name") or dep["name"]),
                "tools": _arg(args, "--enable-auto-tool-choice") is not None,
                "reasoning_parser": _arg(args, "--reasoning-parser"),
                "engine_version": str(dep.get("engine_version", "")),
                **({k: inst.get(k) for k in POOLING_FIELDS} if inst.get("runner") == "pooling" else {}),
            })
    return out


def gateway_targets(plans: Mapping[str, Mapping[str, Any]], gateway_url: str, gateway_host: str) -> List[Dict[str, Any]]:
    """One target per served model of the fleet, through the gateway: tools and reasoning only when every
    instance behind the model has them (a request may land on any of them)."""
    by_model: Dict[str, List[Dict[str, Any]]] = {}
    for host in sorted(plans):
        for target in instance_targets(plans[host]):
            by_model.setdefault(target["model"], []).append(target)
    out = []
    for model in sorted(by_model):
        group = by_model[model]
        parsers = {t["reasoning_parser"] for t in group}
        versions = sorted({t["engine_version"] for t in group})
        out.append({
            "deployment": group[0]["deployment"], "instance": "gateway", "host": gateway_host, "via": "gateway",
            "url": gateway_url.rstrip("/"), "model": model, "tools": all(t["tools"] for t in group),
            "reasoning_parser": parsers.pop() if len(parsers) == 1 else None,
            "engine_version": versions[0] if len(versions) == 1 else "",
            **({k: group[0].get(k) for k in POOLING_FIELDS} if group[0].get("runner") == "pooling" else {}),
        })
    return out


def pooling_request(target: Mapping[str, Any]) -> Tuple[str, Dict[str, Any]]:
    """(url, body) of a pooling target's check: the plan's health_probe, on the server's root (the target's url is its /v1
    base; /score and /classify are outside /v1), sent to the target's model."""
    probe = target.get("health_probe") or {}
    if not probe.get("path"):
        raise VerifyError(f"{target.get('model')}: a pooling target without a health_probe: rerun playbooks/plan.yml with this collection")
    base = str(target["url"]).rstrip("/")
    root = base[:-3] if base.endswith("/v1") else base
    return root + str(probe["path"]), dict(probe.get("body") or {}, model=target["model"])


def _judge_pooling(target: Mapping[str, Any], answer: Any) -> Tuple[str, str, Optional[str]]:
    """(check, answer text, problem) of a pooling target's request."""
    probe = target.get("health_probe") or {}
    if not (isinstance(answer, Mapping) and answer.get("status") == 200):
        return "FAIL", "", f"{probe.get('path')}: {_said(answer)}"
    body = answer.get("json")
    if probe.get("expect") == "data":       # /pooling of the --task era: any data[0].data
        data = (body or {}).get("data") if isinstance(body, Mapping) else None
        ok = isinstance(data, list) and data and isinstance(data[0], Mapping) and data[0].get("data") is not None
        return ("ok", "a /pooling answer", None) if ok else ("FAIL", "", f"{probe.get('path')}: the answer has no data[0].data")
    problem = answer_shape(str(target.get("pooling_task")), body, target.get("embedding_dimensions"), target.get("num_labels"),
                           bool(target.get("score")) and probe.get("expect") == "score")
    if problem:
        return "FAIL", "", f"{probe.get('path')}: {problem}"
    first = body["data"][0]
    if probe.get("expect") == "embedding":
        text = f"{probe.get('path')} gave an embedding of {len(first['embedding'])} numbers"
    elif probe.get("expect") == "score":
        text = f"{probe.get('path')} gave the score {first['score']:.4g}"
    else:
        text = f"{probe.get('path')} gave {len(first['probs'])} label probabilities"
    return "ok", text, None


def chat_body(model: str, *, stream: bool = False, tools: bool = False, max_tokens: int = 16) -> Dict[str, Any]:
    body: Dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": QUESTION}],
                            "max_tokens": max_tokens, "temperature": 0}
    if stream:
        body["stream"] = True
    if tools:
        body["tools"] = [TOOL]
        body["tool_choice"] = "auto"
    return body


def read_stream(lines: Iterable[str]) -> Dict[str, Any]:
    """Server-sent events of a streamed chat: chunks, whether it ended with [DONE], the text, the fields seen."""
    chunks, done, text, fields, error = 0, False, "", set(), None
    for raw in lines:
        line = raw.strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            done = True
            continue
        try:
            event = json.loads(data)
        except ValueError:
            error = f"a stream event is not JSON: {data[:80]!r}"
            continue
        if "error" in event:
            error = str(event["error"].get("message") if isinstance(event["error"], Mapping) else event["error"])
        chunks += 1
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            text += str(delta.get("content") or "")
            fields.update(k for k in ("reasoning", "reasoning_content") if delta.get(k))
    return {"chunks": chunks, "done": done, "text": text, "fields": sorted(fields), "error": error}


def judge(target: Mapping[str, Any], answers: Mapping[str, Any]) -> Dict[str, Any]:
    """The row of one target: each check ok / FAIL / n/a (with why), and the first failure's sentence."""
    row: Dict[str, Any] = {k: target[k] for k in ("deployment", "instance", "host", "via", "model")}
    checks: Dict[str, str] = {}
    problems: List[str] = []

    def fail(check: str, why: str) -> None:
        checks[check] = "FAIL"
        problems.append(f"{check}: {why}")

    if target.get("runner") == "pooling":
        return _judge_pooling_row(target, answers, row)
    models = answers.get("models")
    if isinstance(models, dict) and models.get("status") == 200:
        ids = [m.get("id") for m in models.get("json", {}).get("data") or []]
        checks["listed"] = "ok" if target["model"] in ids else "FAIL"
        if checks["listed"] == "FAIL":
            problems.append(f"listed: /models has {ids}, not {target['model']}")
    else:
        fail("listed", _said(models))
    chat = answers.get("chat")
    if isinstance(chat, dict) and chat.get("status") == 200 and (chat.get("json") or {}).get("choices"):
        checks["chat"] = "ok"
    else:
        fail("chat", _said(chat))
    stream = answers.get("stream")
    if isinstance(stream, dict) and stream.get("status") == 200 and stream.get("done") and stream.get("chunks", 0) > 0 \
            and not stream.get("error"):
        checks["stream"] = "ok"
    else:
        fail("stream", _said(stream) if not (isinstance(stream, dict) and stream.get("status") == 200)
             else f"{stream.get('chunks', 0)} chunks, [DONE] {'seen' if stream.get('done') else 'missing'}"
                  f"{', error ' + str(stream.get('error')) if stream.get('error') else ''}")
    if target.get("tools"):
        tools = answers.get("tools")
        if isinstance(tools, dict) and tools.get("status") == 200:
            checks["tools"] = "ok"
        else:
            fail("tools", _said(tools))
    else:
        checks["tools"] = "n/a"
    fields = sorted(set((answers.get("chat") or {}).get("reasoning_fields") or []) | set((stream or {}).get("fields") or []))
    if target.get("reasoning_parser"):
        checks["reasoning"] = "+".join(fields) if fields else "none returned"
    else:
        checks["reasoning"] = "n/a"
    row["checks"] = checks
    row["answer"] = _content(chat)
    row["expected_reasoning"] = reasoning_fields(target["engine_version"]) if target.get("reasoning_parser") and \
        target.get("engine_version") else []
    row["failed"] = bool(problems)
    row["problem"] = "; ".join(problems)
    return row


def _listed(target: Mapping[str, Any], models: Any) -> Tuple[str, Optional[str]]:
    if isinstance(models, dict) and models.get("status") == 200:
        ids = [m.get("id") for m in models.get("json", {}).get("data") or []]
        return ("ok", None) if target["model"] in ids else ("FAIL", f"listed: /models has {ids}, not {target['model']}")
    return "FAIL", f"listed: {_said(models)}"


def _judge_pooling_row(target: Mapping[str, Any], answers: Mapping[str, Any], row: Dict[str, Any]) -> Dict[str, Any]:
    """A pooling target's row: listed, and its pooling request with the answer's shape; the chat checks are n/a."""
    listed, listed_problem = _listed(target, answers.get("models"))
    check, text, problem = _judge_pooling(target, answers.get("pooling"))
    problems = [p for p in (listed_problem, f"pooling: {problem}" if problem else None) if p]
    row["checks"] = {"listed": listed, "chat": "n/a", "stream": "n/a", "tools": "n/a", "reasoning": "n/a", "pooling": check}
    row["answer"] = f"(a pooling model: {text})" if text else ""
    row["expected_reasoning"] = []
    row["failed"] = bool(problems)
    row["problem"] = "; ".join(problems)
    return row


def _content(chat: Any) -> str:
    """The chat check's answer text, one line (empty when there is none)."""
    if not isinstance(chat, Mapping) or chat.get("status") != 200:
        return ""
    choices = (chat.get("json") or {}).get("choices") or [{}]
    message = choices[0].get("message") if isinstance(choices[0], Mapping) else None
    return " ".join(str((message or {}).get("content") or "").split())


def _said(answer: Any) -> str:
    if not isinstance(answer, Mapping):
        return "not asked"
    if answer.get("status") in (None, -1):
        return f"no answer ({answer.get('error') or 'connection failed'})"
    detail = answer.get("error") or answer.get("body") or ""
    return f"HTTP {answer['status']}: {str(detail)[:200]}"


def table(rows: Sequence[Mapping[str, Any]]) -> List[str]:
    """The deployment x instance x check table, one string per line."""
    head = ["deployment", "instance", "host", *CHECKS]
    # a check a row does not have (pooling on a generative model) reads n/a
    body = [[r["deployment"], r["instance"], r["host"], *[r["checks"].get(c, "n/a") for c in CHECKS]] for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)] if body else [len(h) for h in head]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*head), fmt.format(*["-" * w for w in widths])] + [fmt.format(*map(str, b)) for b in body]


def answers(rows: Sequence[Mapping[str, Any]]) -> List[str]:
    """What each model answered through the gateway (or, with no gateway, on each instance) to the chat
    check's question: the proof a person reads that the stack serves."""
    shown = [r for r in rows if r.get("via") == "gateway"] or list(rows)
    lines = [f"Q: {QUESTION}"] if shown else []
    for r in shown:
        where = "through the gateway" if r.get("via") == "gateway" else f"on {r['instance']} ({r['host']})"
        lines.append(f"A ({r['model']}, {where}): {r.get('answer') or '(no answer: ' + (r.get('problem') or 'empty') + ')'}")
    return lines


def failures(rows: Sequence[Mapping[str, Any]]) -> List[str]:
    """One sentence per failing target: where, and what the engine said."""
    return [f"{r['deployment']} / {r['instance']} on {r['host']} ({r['via']}): {r['problem']}" for r in rows if r.get("failed")]
