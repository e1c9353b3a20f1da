"""The usage report's core (module_utils/_usage.py) on recorded data: the gateway's log lines (as its log_format writes
them) and Prometheus's answers; the period, the per-day query, the totals and the Markdown."""

from __future__ import annotations

import datetime
import json

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _usage as u

TODAY = datetime.date(2026, 12, 4)
DAYS = [datetime.date(2026, 12, 2), datetime.date(2026, 12, 3)]


def line(time, key, model, status="200", prompt="", completion=""):
    """One line of the gateway's access log (log_format llmfleet_gateway, the fields this report reads among the rest)."""
    return json.dumps({"time": time, "remote_addr": "10.0.0.5", "request_id": "r", "method": "POST",
                       "uri": "/v1/chat/completions", "status": status, "key_name": key, "model": model,
                       "upstream": "u" if model else "", "request_time": "0.120", "prompt_tokens": prompt,
                       "completion_tokens": completion}, separators=(",", ":"))


LOG = [
    line("2026-12-01T23:59:59+00:00", "alice", "qwen", prompt="100", completion="10"),   # the day before: left out
    line("2026-12-02T00:00:00+00:00", "alice", "qwen", prompt="10", completion="5"),
    line("2026-12-02T09:30:00+08:00", "alice", "qwen", prompt="7", completion="3"),      # 01:30 UTC on the 2nd
    line("2026-12-03T07:59:59+08:00", "alice", "qwen", prompt="20", completion="4"),     # 23:59:59 UTC on the 2nd
    line("2026-12-03T08:00:00+08:00", "alice", "qwen", prompt="1", completion="1"),      # 00:00 UTC on the 3rd
    line("2026-12-03T10:00:00+00:00", "bob", "tiny", prompt="50", completion="25"),
    line("2026-12-03T10:00:01+00:00", "bob", "tiny", status="499", prompt="", completion=""),   # went away: nothing
    line("2026-12-03T10:00:02+00:00", "bob", "tiny", status="502"),                      # engine failed: not counted
    line("2026-12-03T10:00:03+00:00", "", "", status="401"),                             # no key: not counted
    line("2026-12-03T10:00:04+00:00", "bob", "", status="404"),                          # unknown model: not counted
    line("2026-12-03T10:00:05+00:00", "bob", "tiny", status="200", prompt="9", completion=""),   # a usage without completion
    "not json",
    json.dumps({"time": "2026-12-03T10:00:00", "status": "200", "key_name": "x", "model": "y"}),   # no offset: skipped
    "",
]


def test_the_log_gives_every_request_on_its_utc_day():
    totals, bad = u.log_rows(LOG, DAYS)
    assert bad == 2
    assert u.as_list(totals) == [
        {"day": "2026-12-02", "key_name": "alice", "model": "qwen", "requests": 3, "prompt_tokens": 37, "completion_tokens": 12},
        {"day": "2026-12-03", "key_name": "alice", "model": "qwen", "requests": 1, "prompt_tokens": 1, "completion_tokens": 1},
        {"day": "2026-12-03", "key_name": "bob", "model": "tiny", "requests": 2, "prompt_tokens": 59, "completion_tokens": 25}]


def test_the_period_defaults_to_the_last_seven_days_and_bad_dates_are_named():
    assert u.period("", "", TODAY) == [TODAY - datetime.timedelta(days=n) for n in range(6, -1, -1)]
    assert u.period("2026-12-02", "2026-12-03", TODAY) == DAYS
    assert u.period("2026-12-04", "", TODAY) == [TODAY]
    with pytest.raises(u.UsageError, match=r"usage_from='12/01/2026' is not a date: write it as YYYY-MM-DD"):
        u.period("12/01/2026", "", TODAY)
    with pytest.raises(u.UsageError, match="usage_to=2026-12-01 is before usage_from=2026-12-03"):
        u.period("2026-12-03", "2026-12-01", TODAY)
    with pytest.raises(u.UsageError, match="after today"):
        u.period("2026-12-03", "2026-12-05", TODAY)
    with pytest.raises(u.UsageError, match="367 days: at most 366"):
        u.period("2025-12-02", "2026-12-03", TODAY)


def test_each_day_is_one_query_over_the_day_and_today_up_to_now():
    now = datetime.datetime(2026, 12, 4, 6, 30, tzinfo=u.UTC)
    expr, at = u.day_query(DAYS[0], now)
    assert at == datetime.datetime(2026, 12, 3, tzinfo=u.UTC).timestamp()
    assert expr.count("[86400s]") == 3 and expr.count(" or ") == 2
    assert 'increase(llmfleet_gateway_requests_total{job="gateway",model!="",status=~"2.."}[86400s])' in expr
    assert '"counter", "completion_tokens"' in expr
    expr, at = u.day_query(TODAY, now)
    assert at == now.timestamp() and "[23400s]" in expr
    with pytest.raises(u.UsageError, match="has not started yet"):
        u.day_query(datetime.date(2026, 12, 5), now)


def test_prometheus_answers_become_rows_rounded_to_whole_tokens():
    answer = {"resultType": "vector", "result": [
        {"metric": {"key_name": "alice", "model": "qwen", "counter": "prompt_tokens"}, "value": [1, "1440.0000001"]},
        {"metric": {"key_name": "alice", "model": "qwen", "counter": "completion_tokens"}, "value": [1, "719.6"]},
        {"metric": {"key_name": "alice", "model": "qwen", "counter": "requests"}, "value": [1, "144"]},
        {"metric": {"key_name": "bob", "model": "tiny", "counter": "requests"}, "value": [1, "0"]},   # idle all day
    ]}
    rows = u.prometheus_rows(DAYS[0], answer)
    assert rows == {("2026-12-02", "alice", "qwen"): {"requests": 144, "prompt_tokens": 1440, "completion_tokens": 720}}
    with pytest.raises(u.UsageError, match="a 'matrix', not a vector"):
        u.prometheus_rows(DAYS[0], {"resultType": "matrix", "result": []})


def test_the_report_sums_hosts_and_says_it_all_in_markdown():
    one, _bad = u.log_rows(LOG, DAYS)
    other = {("2026-12-03", "bob", "tiny"): {"requests": 1, "prompt_tokens": 1, "completion_tokens": 2}}
    rows = u.as_list(u.merge([one, other]))
    rep = u.report(rows, DAYS, "log", ["gw2", "gw1"])
    assert rep["total"] == {"requests": 7, "prompt_tokens": 98, "completion_tokens": 40}
    assert rep["by_key"] == {"alice": {"requests": 4, "prompt_tokens": 38, "completion_tokens": 13},
                             "bob": {"requests": 3, "prompt_tokens": 60, "completion_tokens": 27}}
    assert list(rep["by_key_model"]) == ["alice / qwen", "bob / tiny"]
    assert rep["by_day"]["2026-12-02"]["requests"] == 3 and rep["hosts"] == ["gw1", "gw2"]
    text = u.markdown(rep, "usage.png")
    assert text.startswith("# Usage per key and model, 2026-12-02 to 2026-12-03 (UTC)")
    assert "![tokens per day by key and model](usage.png)" in text
    assert "**Total**: 7 requests, 98 prompt tokens, 40 completion tokens." in text
    assert "| 2026-12-03 | bob | tiny | 3 | 60 | 27 |" in text
    days, series = u.chart_series(rep)
    assert days == ["2026-12-02", "2026-12-03"] and series == {"alice / qwen": [49, 2], "bob / tiny": [0, 87]}


def test_a_day_without_traffic_is_in_the_report_with_zeros():
    rep = u.report([], DAYS, "prometheus", ["mon"])
    assert rep["by_day"] == {d.isoformat(): {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0} for d in DAYS}
    assert "**Total**: 0 requests" in u.markdown(rep)
    with pytest.raises(u.UsageError, match=r"rows\[0\]"):
        u.report([{"day": "2026-12-02"}], DAYS, "log", [])


@pytest.mark.parametrize("text, seconds", [("15d", 15 * 86400), ("2w", 14 * 86400), ("720h", 720 * 3600), ("1y", 365 * 86400),
                                           ("1d12h", 36 * 3600), ("90m", 5400), ("1500ms", 1.5)])
def test_prometheus_durations_are_read_as_prometheus_reads_them(text, seconds):
    assert u.duration_seconds("monitoring_retention", text) == seconds


@pytest.mark.parametrize("bad", ["", "15", "15D", "d15", "1h1d", "2 w", "0d", True, None])
def test_a_retention_that_is_no_prometheus_duration_is_named(bad):
    with pytest.raises(u.UsageError, match="monitoring_retention="):
        u.duration_seconds("monitoring_retention", bad)


def test_the_days_older_than_the_retention_are_named_and_the_report_warns_of_them():
    now = datetime.datetime(2026, 12, 4, 10, 0, tzinfo=u.UTC)
    days = u.period("2026-11-10", "2026-12-04", now.date())
    # 15d back from 2026-12-04 10:00 is 2026-11-19 10:00: the 19th starts before it (only its part after 10:00 is held)
    outside = u.outside_retention(days, "15d", now)
    assert [d.isoformat() for d in outside] == [f"2026-11-{n}" for n in range(10, 20)]
    assert u.outside_retention(days, "4w", now) == []
    assert [d.isoformat() for d in u.outside_retention(days, "360h", now)] == [d.isoformat() for d in outside]
    warning = u.retention_warning(outside, "15d")
    assert warning.startswith("2026-11-10 to 2026-11-19 (10 days): older than Prometheus keeps samples (monitoring_retention 15d)")
    assert "-e usage_source=log" in warning
    assert u.retention_warning(outside[:1], "15d").startswith("2026-11-10: older than")
    assert u.retention_warning([], "15d") == ""
    rep = u.report([], days, "prometheus", ["gw"], [d.isoformat() for d in outside], "15d")
    assert rep["outside_retention"] == [f"2026-11-{n}" for n in range(10, 20)] and rep["warning"] == warning
    text = u.markdown(rep)
    assert f"> **Warning**: {warning}." in text and text.index("Warning") < text.index("**Total**")
    # none outside: no warning in the Markdown, an empty list in the JSON
    rep = u.report([], days[-3:], "prometheus", ["gw"])
    assert rep["outside_retention"] == [] and rep["warning"] == "" and "Warning" not in u.markdown(rep)
    with pytest.raises(u.UsageError, match="outside_retention names 2026-01-01, not in the period"):
        u.report([], days, "prometheus", ["gw"], ["2026-01-01"], "15d")
