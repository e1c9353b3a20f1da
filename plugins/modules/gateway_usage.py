#!/usr/bin/python
# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: gateway_usage
short_description: Tokens and requests per key name, served model and day, from the gateway's log or from Prometheus
version_added: 0.1.0
description:
  - With O(source=log), runs on a gateway host and reads its access log (O(log), with the rotated copies beside it,
    C(.1) and C(.N.gz)) - every request of the period, exact.
  - With O(source=prometheus), runs on the monitoring host and asks Prometheus (O(url)) once per day of the period for
    the increase of the gateway's counters over that day (up to now for today), within about one scrape interval's
    traffic at each end of a day. Days that start before now - O(retention) are named in a warning and in
    RV(outside_retention) - Prometheus holds no samples of them (or of their first part).
  - Days are UTC. A row counts the requests answered 2xx and the tokens of every answer that had a usage. Reads only.
author:
  - llmfleet.serving developers (!UNKNOWN)
options:
  source:
    description: Where the numbers come from.
    type: str
    choices: [log, prometheus]
    default: log
  first_day:
    description: The period's first day, YYYY-MM-DD (UTC); empty for the 7 days up to O(last_day).
    type: str
    default: ""
  last_day:
    description: The period's last day, YYYY-MM-DD (UTC); empty for today.
    type: str
    default: ""
  log:
    description: The gateway's access log (O(source=log)).
    type: path
    default: /var/log/nginx/llmfleet-gateway.access.log
  url:
    description: Prometheus's base URL (O(source=prometheus)), e.g. C(http://127.0.0.1:9090).
    type: str
    default: http://127.0.0.1:9090
  url_username:
    description: The user Prometheus asks for (the first of monitoring_prometheus_users); none sends no credential.
    type: str
  url_password:
    description: That user's password.
    type: str
  retention:
    description: How long Prometheus keeps samples (monitoring_retention, a Prometheus duration such as C(15d)); empty
      checks nothing.
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    description: Reads only; the same in check mode.
  diff_mode:
    support: none
    description: No diff.
"""

EXAMPLES = r"""
- name: Last week's usage from this gateway's log
  llmfleet.serving.gateway_usage:
    source: log
    first_day: "2026-11-27"
    last_day: "2026-12-03"
"""

RETURN = r"""
rows:
  description: One per day, key name and served model - day, key_name, model, requests, prompt_tokens, completion_tokens.
  returned: always
  type: list
days:
  description: The period's days.
  returned: always
  type: list
files:
  description: The log files read (O(source=log)).
  returned: always
  type: list
skipped_lines:
  description: Lines of the log that are not the gateway's JSON.
  returned: always
  type: int
outside_retention:
  description: The days (YYYY-MM-DD) that start before now - O(retention) (O(source=prometheus)); their figures are 0 or short.
  returned: always
  type: list
retention_warning:
  description: What to say of those days (empty when none).
  returned: always
  type: str
"""

import datetime
import glob
import gzip
import json
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.six.moves.urllib.error import HTTPError
from ansible.module_utils.six.moves.urllib.parse import urlencode
from ansible.module_utils.urls import open_url

from ansible_collections.llmfleet.serving.plugins.module_utils import _usage as u


def log_files(path):
    """The log and its rotated copies (logrotate's .1, .2.gz ...), oldest first."""
    def age(name):
        match = re.search(r"\.(\d+)(\.gz)?$", name[len(path):])
        return -int(match.group(1)) if match else 0
    found = [f for f in glob.glob(glob.escape(path) + "*") if f == path or re.fullmatch(r"\.\d+(\.gz)?", f[len(path):])]
    return sorted(found, key=age)


def lines_of(files):
    for name in files:
        opener = gzip.open if name.endswith(".gz") else open
        with opener(name, "rt", encoding="utf-8", errors="replace") as handle:
            yield from handle


def main():
    module = AnsibleModule(
        argument_spec={
            "source": {"type": "str", "choices": ["log", "prometheus"], "default": "log"},
            "first_day": {"type": "str", "default": ""},
            "last_day": {"type": "str", "default": ""},
            "log": {"type": "path", "default": "/var/log/nginx/llmfleet-gateway.access.log"},
            "url": {"type": "str", "default": "http://127.0.0.1:9090"},
            "url_username": {"type": "str"},
            "url_password": {"type": "str", "no_log": True},
            "retention": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    now = datetime.datetime.now(u.UTC)
    try:
        days = u.period(p["first_day"], p["last_day"], now.date())
    except u.UsageError as exc:
        module.fail_json(msg=str(exc))
    files, skipped, outside, warning = [], 0, [], ""
    if p["source"] == "log":
        files = log_files(p["log"])
        if not files:
            module.fail_json(msg=f"{p['log']}: no such log on this host; is it a gateway host (llm_gateway)? The gateway "
                                 "role writes it (gateway.conf's access_log)")
        try:
            totals, skipped = u.log_rows(lines_of(files), days)
        except OSError as exc:
            module.fail_json(msg=f"reading {p['log']}: {exc}")
    else:
        if p["retention"]:
            try:
                outside = u.outside_retention(days, p["retention"], now)
            except u.UsageError as exc:
                module.fail_json(msg=str(exc))
            warning = u.retention_warning(outside, p["retention"])
            if warning:
                module.warn(warning)
        auth = {"url_username": p["url_username"], "url_password": p["url_password"] or "", "force_basic_auth": True} \
            if p["url_username"] else {}
        parts = []
        for day in days:
            expr, at = u.day_query(day, now)
            url = p["url"].rstrip("/") + "/api/v1/query?" + urlencode({"query": expr, "time": f"{at:.3f}"})
            try:
                answer = json.loads(open_url(url, timeout=60, **auth).read())
            except HTTPError as exc:
                if exc.code == 401:
                    module.fail_json(msg=f"Prometheus at {p['url']} refused the credential (HTTP 401, user "
                                         f"{p['url_username'] or '(none sent)'}): its users are monitoring_prometheus_users; "
                                         "run playbooks/monitoring.yml after changing them")
                module.fail_json(msg=f"Prometheus at {p['url']} answered HTTP {exc.code}; run playbooks/monitoring.yml, or "
                                     "read the gateway's log instead (usage_source=log)")
            except Exception as exc:   # pylint: disable=broad-except  # the URL error, whatever its class, with the fix
                module.fail_json(msg=f"Prometheus at {p['url']} did not answer ({exc}); run playbooks/monitoring.yml, or "
                                     "read the gateway's log instead (usage_source=log)")
            if answer.get("status") != "success":
                module.fail_json(msg=f"Prometheus refused the query for {day}: {answer.get('error')}")
            try:
                parts.append(u.prometheus_rows(day, answer.get("data") or {}))
            except u.UsageError as exc:
                module.fail_json(msg=str(exc))
        totals = u.merge(parts)
    module.exit_json(changed=False, rows=u.as_list(totals), days=[d.isoformat() for d in days], files=files,
                     skipped_lines=skipped, outside_retention=[d.isoformat() for d in outside], retention_warning=warning)


if __name__ == "__main__":
    main()
