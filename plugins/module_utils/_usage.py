# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""PRIVATE module_utils of llmfleet.serving: playbooks/usage.yml's report, tokens and requests per key name x served
model x day (UTC), from the gateway's access log or from Prometheus's counters of it.

Not a public API; may change without notice. Pure and typed: the log lines and Prometheus's answers are read by the
gateway_usage module, the files written by usage_report.

- The log (roles/gateway/templates/gateway.conf.j2, log_format llmfleet_gateway): one JSON object per request, its
  `time` ($time_iso8601, the host's local time with its offset), `status`, `key_name`, `model` (the served model the
  request was routed to, "" when it was not), and `prompt_tokens`/`completion_tokens` from the answer's own usage ("" for
  an answer without one). Exact: every request is a line.
- Prometheus: the counters roles/monitoring/files/llmfleet_gateway.mtail makes of that log, one instant query per day
  at the day's end (now for today) over the day: increase() extrapolates from the samples in the window to its edges
  (prometheus.io/docs/prometheus/2.42/querying/functions/#increase), so a day's figure is within about one scrape
  interval's traffic at each end, and what mtail counted before a restart of mtail and after the last scrape is lost.
  Prometheus keeps samples for monitoring_retention (--storage.tsdb.retention.time) only: a day that starts before
  now - retention counts nothing, or only its part after that instant (outside_retention, retention_warning).
A row counts the requests answered 2xx and the tokens of every answer that had a usage, per key and served model.
"""

from __future__ import annotations

import datetime
import json
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ._monitoring import MonitoringError, duration_seconds as duration_seconds_of

MAX_DAYS = 366
COUNTERS = ("requests", "prompt_tokens", "completion_tokens")
# what each counter of a row is, in Prometheus's terms (the gateway's counters, by key name and model)
PROMQL = {
    "prompt_tokens": 'llmfleet_gateway_prompt_tokens_total{job="gateway"}',
    "completion_tokens": 'llmfleet_gateway_completion_tokens_total{job="gateway"}',
    "requests": 'llmfleet_gateway_requests_total{job="gateway",model!="",status=~"2.."}',
}
UTC = datetime.timezone.utc


class UsageError(ValueError):
    """Bad input to the usage report; the message names the value and the fix."""


Key = Tuple[str, str, str]   # (day, key_name, model)


DEFAULT_DAYS = 7


def period(start: Any, end: Any, today: datetime.date) -> List[datetime.date]:
    """The days from `start` to `end` (YYYY-MM-DD, both included; `end` empty: today; `start` empty: the DEFAULT_DAYS days
    up to `end`), oldest first."""
    def day(name: str, value: Any) -> datetime.date:
        try:
            return datetime.date.fromisoformat(str(value).strip())
        except ValueError as exc:
            raise UsageError(f"{name}={value!r} is not a date: write it as YYYY-MM-DD (UTC), e.g. {today.isoformat()}") from exc
    last = day("usage_to", end) if str(end or "").strip() else today
    first = day("usage_from", start) if str(start or "").strip() else last - datetime.timedelta(days=DEFAULT_DAYS - 1)
    if last < first:
        raise UsageError(f"usage_to={last} is before usage_from={first}: give the period oldest day first")
    if last > today:
        raise UsageError(f"usage_to={last} is after today ({today}, UTC): nothing is counted yet for it")
    count = (last - first).days + 1
    if count > MAX_DAYS:
        raise UsageError(f"usage_from={first} to usage_to={last} is {count} days: at most {MAX_DAYS}; split the period")
    return [first + datetime.timedelta(days=n) for n in range(count)]


def duration_seconds(name: str, text: Any) -> float:
    """A Prometheus duration (15d, 2w, 720h, 1y, 1d12h) in seconds, read by the monitoring role's own parser
    (_monitoring.duration_seconds); UsageError naming `name` otherwise."""
    value = str(text or "").strip()
    try:
        seconds = 0.0 if isinstance(text, bool) or not value else duration_seconds_of(value)
    except MonitoringError:
        seconds = -1.0
    if seconds < 0 or not value or isinstance(text, bool):
        raise UsageError(f"{name}={text!r} is not a Prometheus duration: write it as 15d, 2w, 720h or 1y")
    if seconds <= 0:
        raise UsageError(f"{name}={text!r} is no time at all: give the retention Prometheus runs with, e.g. 15d")
    return seconds


def retention_start(retention: Any, now: datetime.datetime) -> datetime.datetime:
    """The oldest instant Prometheus still holds samples of: now - monitoring_retention (UTC)."""
    return now.astimezone(UTC) - datetime.timedelta(seconds=duration_seconds("monitoring_retention", retention))


def outside_retention(days: Sequence[datetime.date], retention: Any, now: datetime.datetime) -> List[datetime.date]:
    """The days of the period that start before retention_start: Prometheus has no samples of them (or of their part
    before that instant), so their figures are 0 or short."""
    start = retention_start(retention, now)
    return [d for d in days if datetime.datetime.combine(d, datetime.time(), UTC) < start]


def _days_text(days: Sequence[str]) -> str:
    if len(days) == 1:
        return days[0]
    return f"{days[0]} to {days[-1]} ({len(days)} days)"


def retention_warning(outside: Sequence[Any], retention: Any) -> str:
    """What the report says of the days outside Prometheus's retention; empty when there is none."""
    days = sorted(str(d) for d in outside)
    if not days:
        return ""
    return (f"{_days_text(days)}: older than Prometheus keeps samples (monitoring_retention {retention}), so counted as 0 "
            "or only in part; read them from the gateways' access logs instead: -e usage_source=log")


def _number(text: Any) -> Optional[int]:
    text = str(text or "").strip()
    return int(text) if text.isdigit() else None


def log_rows(lines: Iterable[str], days: Sequence[datetime.date]) -> Tuple[Dict[Key, Dict[str, int]], int]:
    """Totals per (day, key_name, model) of the gateway's log lines whose time falls on one of `days` (UTC), and the
    number of lines that are not the gateway's JSON (skipped)."""
    wanted = {d.isoformat() for d in days}
    out: Dict[Key, Dict[str, int]] = {}
    bad = 0
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            item = json.loads(line)
            when = datetime.datetime.fromisoformat(str(item["time"]))
        except (ValueError, KeyError, TypeError):
            bad += 1
            continue
        if when.tzinfo is None:
            bad += 1
            continue
        day = when.astimezone(UTC).date().isoformat()
        if day not in wanted:
            continue
        model = str(item.get("model") or "")
        prompt, completion = _number(item.get("prompt_tokens")), _number(item.get("completion_tokens"))
        ok = str(item.get("status", "")).startswith("2") and model != ""
        if not ok and prompt is None and completion is None:
            continue
        row = out.setdefault((day, str(item.get("key_name") or ""), model), dict.fromkeys(COUNTERS, 0))
        row["requests"] += 1 if ok else 0
        row["prompt_tokens"] += prompt or 0
        row["completion_tokens"] += completion or 0
    return out, bad


def day_query(day: datetime.date, now: datetime.datetime) -> Tuple[str, float]:
    """(PromQL, evaluation time) for one day: each counter's increase over the day (up to `now` for today), summed by key
    name and model, told apart by a `counter` label."""
    start = datetime.datetime.combine(day, datetime.time(), UTC)
    end = min(start + datetime.timedelta(days=1), now.astimezone(UTC))
    window = int((end - start).total_seconds())
    if window <= 0:
        raise UsageError(f"{day}: the day has not started yet (now {now.isoformat()})")
    parts = [f'label_replace(sum by (key_name, model) (increase({selector}[{window}s])), "counter", "{name}", "", "")'
             for name, selector in PROMQL.items()]
    return " or ".join(parts), end.timestamp()


def prometheus_rows(day: datetime.date, answer: Mapping[str, Any]) -> Dict[Key, Dict[str, int]]:
    """Totals per (day, key_name, model) from Prometheus's answer to day_query (its `data`, a vector), rounded to whole
    requests and tokens (increase() extrapolates)."""
    if answer.get("resultType") != "vector":
        raise UsageError(f"{day}: Prometheus answered a {answer.get('resultType')!r}, not a vector")
    out: Dict[Key, Dict[str, int]] = {}
    for series in answer.get("result") or []:
        metric, value = series.get("metric") or {}, series.get("value") or [0, "0"]
        name = metric.get("counter")
        if name not in COUNTERS:
            continue
        row = out.setdefault((day.isoformat(), str(metric.get("key_name") or ""), str(metric.get("model") or "")),
                             dict.fromkeys(COUNTERS, 0))
        row[name] += int(round(float(value[1])))
    return {key: row for key, row in out.items() if any(row.values())}


def merge(parts: Iterable[Mapping[Key, Mapping[str, int]]]) -> Dict[Key, Dict[str, int]]:
    """The sum of several hosts' totals (each gateway host logs its own requests)."""
    out: Dict[Key, Dict[str, int]] = {}
    for part in parts:
        for key, row in part.items():
            into = out.setdefault(tuple(key), dict.fromkeys(COUNTERS, 0))   # type: ignore[arg-type]
            for name in COUNTERS:
                into[name] += int(row.get(name, 0))
    return out


def as_list(totals: Mapping[Key, Mapping[str, int]]) -> List[Dict[str, Any]]:
    """The totals as rows, sorted by day, key name and model: what a module returns and the report reads."""
    return [dict({"day": day, "key_name": key, "model": model}, **{n: int(row[n]) for n in COUNTERS})
            for (day, key, model), row in sorted(totals.items())]


def from_list(rows: Iterable[Mapping[str, Any]]) -> Dict[Key, Dict[str, int]]:
    out: Dict[Key, Dict[str, int]] = {}
    for i, row in enumerate(rows):
        try:
            key = (str(row["day"]), str(row["key_name"]), str(row["model"]))
            out[key] = {n: int(row[n]) for n in COUNTERS}
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"rows[{i}]={row!r}: expected day, key_name, model and {', '.join(COUNTERS)}") from exc
    return out


def report(rows: Sequence[Mapping[str, Any]], days: Sequence[datetime.date], source: str, hosts: Sequence[str],
           outside: Sequence[Any] = (), retention: Any = "") -> Dict[str, Any]:
    """The report: the period, its source, every row, and the totals per key name, per key name x model and per day;
    `outside_retention`, the days Prometheus held no samples of (outside_retention), and its warning."""
    wanted = {d.isoformat() for d in days}
    stray = sorted(str(d) for d in outside if str(d) not in wanted)
    if stray:
        raise UsageError(f"outside_retention names {', '.join(stray)}, not in the period {days[0]} to {days[-1]}: "
                         "give the days gateway_usage returned for this period")
    totals = merge([from_list(rows)])
    by_key: Dict[str, Dict[str, int]] = {}
    by_pair: Dict[str, Dict[str, int]] = {}
    by_day: Dict[str, Dict[str, int]] = {d.isoformat(): dict.fromkeys(COUNTERS, 0) for d in days}
    for (day, key, model), row in totals.items():
        for into in (by_key.setdefault(key, dict.fromkeys(COUNTERS, 0)),
                     by_pair.setdefault(f"{key} / {model or '(none)'}", dict.fromkeys(COUNTERS, 0)),
                     by_day.setdefault(day, dict.fromkeys(COUNTERS, 0))):
            for name in COUNTERS:
                into[name] += row[name]
    return {"from": days[0].isoformat(), "to": days[-1].isoformat(), "source": source, "hosts": sorted(hosts),
            "rows": as_list(totals), "by_key": dict(sorted(by_key.items())), "by_key_model": dict(sorted(by_pair.items())),
            "by_day": dict(sorted(by_day.items())),
            "total": {n: sum(r[n] for r in totals.values()) for n in COUNTERS},
            "outside_retention": sorted(str(d) for d in outside), "warning": retention_warning(outside, retention)}


def _table(head: Sequence[str], body: Iterable[Sequence[Any]]) -> List[str]:
    """A Markdown table: the counters' columns (the last three) right-aligned, with thousands separators."""
    counted = len(head) - len(COUNTERS)
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" if i < counted else "---:" for i in range(len(head))) + "|"]
    lines += ["| " + " | ".join(f"{v:,}" if isinstance(v, int) else str(v) for v in row) + " |" for row in body]
    return lines


def markdown(rep: Mapping[str, Any], chart: Optional[str] = None) -> str:
    """The report as Markdown: totals per key, per key x model, per day, then every row."""
    how = {"log": "the gateway's access log (every request; exact)",
           "prometheus": "Prometheus's counters of the gateway's log (increase() per day: within a scrape interval's "
                         "traffic at each end of a day)"}[rep["source"]]
    out = [f"# Usage per key and model, {rep['from']} to {rep['to']} (UTC)", "",
           f"Source: {how}; hosts: {', '.join(rep['hosts']) or 'none'}. Requests: answered 2xx; tokens: from each "
           "answer's usage.", ""]
    if rep.get("warning"):
        out += [f"> **Warning**: {rep['warning']}.", ""]
    if chart:
        out += [f"![tokens per day by key and model]({chart})", ""]
    total = rep["total"]
    out += [f"**Total**: {total['requests']:,} requests, {total['prompt_tokens']:,} prompt tokens, "
            f"{total['completion_tokens']:,} completion tokens.", "", "## Per key", ""]
    out += _table(("key", "requests", "prompt tokens", "completion tokens"),
                  ((k or "(no key)", r["requests"], r["prompt_tokens"], r["completion_tokens"]) for k, r in rep["by_key"].items()))
    out += ["", "## Per key and model", ""]
    out += _table(("key / model", "requests", "prompt tokens", "completion tokens"),
                  ((k, r["requests"], r["prompt_tokens"], r["completion_tokens"]) for k, r in rep["by_key_model"].items()))
    out += ["", "## Per day", ""]
    out += _table(("day", "requests", "prompt tokens", "completion tokens"),
                  ((d, r["requests"], r["prompt_tokens"], r["completion_tokens"]) for d, r in rep["by_day"].items()))
    out += ["", "## Every key, model and day", ""]
    out += _table(("day", "key", "model", "requests", "prompt tokens", "completion tokens"),
                  ((r["day"], r["key_name"] or "(no key)", r["model"] or "(none)", r["requests"], r["prompt_tokens"],
                    r["completion_tokens"]) for r in rep["rows"]))
    return "\n".join(out) + "\n"


def chart_series(rep: Mapping[str, Any]) -> Tuple[List[str], Dict[str, List[int]]]:
    """(days, {key / model: tokens (prompt + completion) per day}): the chart's stacked bars."""
    days = list(rep["by_day"])
    series: Dict[str, List[int]] = {}
    for row in rep["rows"]:
        label = f"{row['key_name'] or '(no key)'} / {row['model'] or '(none)'}"
        values = series.setdefault(label, [0] * len(days))
        values[days.index(row["day"])] += row["prompt_tokens"] + row["completion_tokens"]
    return days, dict(sorted(series.items()))
