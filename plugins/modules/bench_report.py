#!/usr/bin/python
# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: bench_report
short_description: Write bench.yml's run - JSON, Markdown, charts - and hold it against the baseline
version_added: 0.1.0
description:
  - Runs on the controller. From the sweep's rows and the plans that were measured, writes
    C(DIR/RUN/bench.json), C(DIR/RUN/bench.md) and one C(DIR/RUN/DEPLOYMENT.png) per deployment (throughput and
    latency against concurrency, one line per target; matplotlib).
  - The baseline of a deployment is the last accepted run (C(DIR/baselines/DEPLOYMENT.json)); each step's ratio to it
    is reported. With O(gate), a step worse than O(tolerance) on output throughput or median end-to-end latency is a
    regression, and the run is not accepted for that deployment. A run with failed requests is never accepted.
  - With O(compare), the other run's numbers and plan are put beside this run's in the report and the charts.
  - Needs matplotlib in the controller's Python; the JSON and Markdown are written before the charts.
author:
  - llmfleet.serving developers (!UNKNOWN)
options:
  rows:
    description: The rows of every bench_serve step.
    type: list
    elements: dict
    required: true
  plans:
    description: The measured hosts' plans, by host name (the gateway_plans filter).
    type: dict
    required: true
  settings:
    description: The sweep's settings (concurrency, lengths, warm-ups), recorded with the run.
    type: dict
    default: {}
  run_id:
    description: This run's name (a folder under O(dir)).
    type: str
    required: true
  started:
    description: When the run started, recorded with it.
    type: str
    default: ""
  dir:
    description: The folder of runs and baselines on the controller.
    type: path
    required: true
  compare:
    description: Another run's name under O(dir) to put side by side with this one.
    type: str
  gate:
    description: Fail the deployments (regressions returned) whose steps are worse than O(tolerance) against their baseline.
    type: bool
    default: false
  tolerance:
    description: How much worse a step may be, as a fraction (0.2 - 20 % less throughput or 20 % more latency).
    type: float
    default: 0.2
  accept:
    description: Make this run the baseline of each deployment it measured without failures or regressions.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    description: In check mode nothing is written.
  diff_mode:
    support: none
    description: No diff.
requirements:
  - matplotlib (charts)
"""

EXAMPLES = r"""
- name: Report
  llmfleet.serving.bench_report:
    rows: "{{ rows }}"
    plans: "{{ plans }}"
    run_id: "20261201-170000"
    dir: "{{ playbook_dir }}/../bench"
    gate: true
    tolerance: 0.2
"""

RETURN = r"""
files:
  description: The files written.
  returned: always
  type: list
ratios:
  description: Per deployment, target and step - this run's output throughput, TTFT p50 and e2e p50 over the baseline's.
  returned: always
  type: list
ratio_lines:
  description: The ratios, a sentence per step.
  returned: always
  type: list
regressions:
  description: A sentence per step worse than the tolerance (with O(gate)).
  returned: always
  type: list
failures:
  description: A sentence per step that lost requests.
  returned: always
  type: list
accepted:
  description: The deployments this run is now the baseline of.
  returned: always
  type: list
report:
  description: The Markdown report.
  returned: always
  type: str
"""

import json
import os
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.llmfleet.serving.plugins.module_utils import _bench as b

try:
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot
    HAS_MATPLOTLIB, MATPLOTLIB_ERROR = True, None
except ImportError:
    HAS_MATPLOTLIB, MATPLOTLIB_ERROR = False, traceback.format_exc()

PANELS = (("output_throughput", "output tokens/s"), ("median_ttft_ms", "TTFT p50 (ms)"), ("median_e2el_ms", "end-to-end p50 (ms)"))


def load(path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def write(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


def chart(run, other, name, path):
    """Throughput, TTFT and e2e latency against concurrency for one deployment; the other run dashed."""
    fig, axes = pyplot.subplots(1, len(PANELS), figsize=(5 * len(PANELS), 4.2))
    # one colour per target, the same in both runs; this run solid, the other dashed
    targets = sorted({t for source in (run, other) if source for t in b.series(source, name, "output_throughput")})
    palette = pyplot.rcParams["axes.prop_cycle"].by_key()["color"]
    colour = {t: palette[i % len(palette)] for i, t in enumerate(targets)}
    for ax, (metric, title) in zip(axes, PANELS):
        for source, style in ((run, "-"), (other, "--")):
            if not source:
                continue
            prefix = "" if source is run else f"{source['run']}: "
            for target, points in sorted(b.series(source, name, metric).items()):
                xs, ys = zip(*points)
                ax.plot(xs, ys, style, marker="o", color=colour[target], label=prefix + target)
        ax.set_xscale("log", base=2)
        steps = sorted({r["concurrency"] for r in run["deployments"][name]["rows"]})
        ax.set_xticks(steps)
        ax.set_xticklabels([str(s) for s in steps])
        ax.set_xlabel("concurrency")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
    axes[0].legend(fontsize="small")
    fig.suptitle(f"{name} - run {run['run']}" + (f" (dashed: run {other['run']})" if other else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    pyplot.close(fig)


def main():
    module = AnsibleModule(
        argument_spec={
            "rows": {"type": "list", "elements": "dict", "required": True},
            "plans": {"type": "dict", "required": True},
            "settings": {"type": "dict", "default": {}},
            "run_id": {"type": "str", "required": True},
            "started": {"type": "str", "default": ""},
            "dir": {"type": "path", "required": True},
            "compare": {"type": "str"},
            "gate": {"type": "bool", "default": False},
            "tolerance": {"type": "float", "default": 0.2},
            "accept": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        run = b.record(p["run_id"], p["rows"], p["plans"], p["settings"], p["started"])
        other = None
        if p["compare"]:
            b.check_run_id(p["compare"], "compare")
            path = os.path.join(p["dir"], p["compare"], "bench.json")
            if not os.path.exists(path):
                runs = sorted(d for d in os.listdir(p["dir"]) if os.path.exists(os.path.join(p["dir"], d, "bench.json"))) \
                    if os.path.isdir(p["dir"]) else []
                module.fail_json(msg=f"compare={p['compare']}: no run of that name in {p['dir']}; runs there: {', '.join(runs) or 'none'}")
            other = load(path)
        baselines, ratio_rows, regressions = {}, [], []
        for name in sorted(run["deployments"]):
            path = os.path.join(p["dir"], "baselines", f"{name}.json")
            if os.path.exists(path):
                baselines[name] = load(path)
                found = b.ratios(run, baselines[name], name)
                ratio_rows += found
                if p["gate"]:
                    regressions += b.regressions(found, p["tolerance"], baselines[name]["run"])
        failures = b.failures(run)
        bad = {f.split(" · ", 1)[0] for f in failures + regressions}
        accepted = sorted(n for n in run["deployments"] if p["accept"] and n not in bad)
        run["baselines"] = {n: base["run"] for n, base in baselines.items()}
        run["ratios"], run["regressions"], run["failures"], run["accepted"] = ratio_rows, regressions, failures, accepted
        charts = {name: f"{name}.png" for name in run["deployments"]}
        report = b.markdown(run, baselines, other, charts if HAS_MATPLOTLIB else None)
    except (b.BenchError, KeyError, TypeError, ValueError) as exc:
        module.fail_json(msg=f"bench report: {exc}")
    out_dir = os.path.join(p["dir"], run["run"])
    files = [os.path.join(out_dir, "bench.json"), os.path.join(out_dir, "bench.md")]
    result = {"ratios": ratio_rows, "ratio_lines": [b.ratio_line(r) for r in ratio_rows], "regressions": regressions,
              "failures": failures, "accepted": accepted, "report": report}
    if module.check_mode:
        module.exit_json(changed=False, files=[], **result)
    os.makedirs(os.path.join(p["dir"], "baselines"), exist_ok=True)
    os.makedirs(out_dir, exist_ok=True)
    write(files[0], json.dumps(run, indent=2, sort_keys=True) + "\n")
    write(files[1], report)
    for name in accepted:
        write(os.path.join(p["dir"], "baselines", f"{name}.json"),
              json.dumps({"run": run["run"], "started": run["started"], "settings": run["settings"],
                          "deployments": {name: run["deployments"][name]}}, indent=2, sort_keys=True) + "\n")
    if not HAS_MATPLOTLIB:
        module.fail_json(msg=missing_required_lib("matplotlib", reason="to draw bench.yml's charts (the JSON and Markdown are written)")
                         + " - install it into the Python that runs ansible-playbook", exception=MATPLOTLIB_ERROR, files=files, **result)
    for name, file_name in charts.items():
        chart(run, other if other and name in (other.get("deployments") or {}) else None, name, os.path.join(out_dir, file_name))
        files.append(os.path.join(out_dir, file_name))
    module.exit_json(changed=True, files=files, **result)


if __name__ == "__main__":
    main()
