#!/usr/bin/python
# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: usage_report
short_description: Write usage.yml's report - JSON, Markdown and a PNG chart of tokens per key, model and day
version_added: 0.1.0
description:
  - Runs on the controller. From the rows of M(llmfleet.serving.gateway_usage) (every gateway host's, or Prometheus's),
    writes C(DIR/usage-FROM-TO.json), C(DIR/usage-FROM-TO.md) and C(DIR/usage-FROM-TO.png) (tokens per day, a bar
    per day stacked by key name and model; matplotlib).
  - Totals per key name, per key name x model, per day, and every row.
  - Needs matplotlib in the controller's Python; the JSON and Markdown are written before the chart.
author:
  - llmfleet.serving developers (!UNKNOWN)
options:
  rows:
    description: The rows of every host's gateway_usage (summed where they meet).
    type: list
    elements: dict
    required: true
  days:
    description: The period's days, YYYY-MM-DD, oldest first (gateway_usage returns them).
    type: list
    elements: str
    required: true
  source:
    description: Where the rows come from.
    type: str
    choices: [log, prometheus]
    required: true
  hosts:
    description: The hosts the rows were read on.
    type: list
    elements: str
    default: []
  dir:
    description: The folder on the controller the report is written to.
    type: path
    required: true
  outside_retention:
    description: The days Prometheus held no samples of (M(llmfleet.serving.gateway_usage) returns them); the report
      warns of them and lists them in its JSON (C(outside_retention)).
    type: list
    elements: str
    default: []
  retention:
    description: Prometheus's retention (monitoring_retention), named in that warning.
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    description: In check mode nothing is written.
  diff_mode:
    support: none
    description: No diff.
requirements:
  - matplotlib (the chart)
"""

EXAMPLES = r"""
- name: Report
  llmfleet.serving.usage_report:
    rows: "{{ rows }}"
    days: "{{ days }}"
    source: log
    dir: "{{ lookup('env', 'PWD') }}/usage"
"""

RETURN = r"""
files:
  description: The files written.
  returned: always
  type: list
report:
  description: The Markdown report.
  returned: always
  type: str
total:
  description: requests, prompt_tokens and completion_tokens over the period.
  returned: always
  type: dict
warning:
  description: The warning about days outside Prometheus's retention (empty when none).
  returned: always
  type: str
"""

import datetime
import json
import os
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.llmfleet.serving.plugins.module_utils import _usage as u
from ansible_collections.llmfleet.serving.plugins.module_utils._config_tree import write_beside

try:
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot
    HAS_MATPLOTLIB, MATPLOTLIB_ERROR = True, None
except ImportError:
    HAS_MATPLOTLIB, MATPLOTLIB_ERROR = False, traceback.format_exc()


def chart(rep, path):
    """Tokens (prompt + completion) per day, one bar per day stacked by key name / model."""
    days, series = u.chart_series(rep)
    fig, ax = pyplot.subplots(figsize=(max(8.0, 0.5 * len(days) + 5), 4.8))
    bottom = [0] * len(days)
    for label, values in series.items():
        ax.bar(range(len(days)), values, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_xticks(range(len(days)))
    ax.set_xticklabels([d[5:] for d in days], rotation=45 if len(days) > 10 else 0)
    ax.set_xlabel("day (UTC)")
    ax.set_ylabel("tokens (prompt + completion)")
    ax.set_title(f"Tokens per key and model, {rep['from']} to {rep['to']}\n(from {rep['source']})", fontsize="medium")
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_ylim(0, max(bottom + [1]) * 1.08)
    if series:   # beside the bars, never over them
        ax.legend(title="key / model", fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    pyplot.close(fig)


def main():
    module = AnsibleModule(
        argument_spec={
            "rows": {"type": "list", "elements": "dict", "required": True},
            "days": {"type": "list", "elements": "str", "required": True},
            "source": {"type": "str", "choices": ["log", "prometheus"], "required": True},
            "hosts": {"type": "list", "elements": "str", "default": []},
            "dir": {"type": "path", "required": True},
            "outside_retention": {"type": "list", "elements": "str", "default": []},
            "retention": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        days = [datetime.date.fromisoformat(d) for d in p["days"]]
        if not days:
            raise u.UsageError("days is empty: give the period's days (gateway_usage returns them)")
        rep = u.report(p["rows"], days, p["source"], p["hosts"], p["outside_retention"], p["retention"])
    except (u.UsageError, ValueError) as exc:
        module.fail_json(msg=f"usage report: {exc}")
    stem = os.path.join(p["dir"], f"usage-{rep['from']}-{rep['to']}")
    files = [stem + ".json", stem + ".md", stem + ".png"]
    text = u.markdown(rep, os.path.basename(files[2]) if HAS_MATPLOTLIB else None)
    if module.check_mode:
        module.exit_json(changed=False, files=[], report=text, total=rep["total"], warning=rep["warning"])
    os.makedirs(p["dir"], exist_ok=True)
    uid, gid = os.getuid(), os.getgid()
    write_beside(files[0], (json.dumps(rep, indent=2, sort_keys=True) + "\n").encode(), 0o644, uid, gid)
    write_beside(files[1], text.encode(), 0o644, uid, gid)
    if not HAS_MATPLOTLIB:
        module.fail_json(msg=missing_required_lib("matplotlib", reason="to draw usage.yml's chart (the JSON and Markdown are written)")
                         + " - install it into the Python that runs ansible-playbook", exception=MATPLOTLIB_ERROR,
                         files=files[:2], report=text, total=rep["total"], warning=rep["warning"])
    chart(rep, files[2])
    module.exit_json(changed=True, files=files, report=text, total=rep["total"], warning=rep["warning"])


if __name__ == "__main__":
    main()
