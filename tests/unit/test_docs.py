"""The generated documentation matches the code (tests/tools/docs_gen.py), every failure message has a fix,
and every deployment key a description."""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "tools"))

import docs_gen  # noqa: E402

from ansible_collections.llmfleet.serving.plugins.module_utils import _planner as planner  # noqa: E402


def test_generated_docs_are_up_to_date():
    ok, diff = docs_gen.check()
    assert ok, "run tests/tools/docs_gen.py:\n" + diff[:6000]


def test_every_failure_message_has_a_fix():
    assert docs_gen.missing_fixes() == [], "add the fix to docs_gen.FIXES, or say it in the message"


def test_failure_messages_are_found():
    rows = docs_gen.all_failures()
    where = {path for path, _w, _m in rows}
    # one of each kind: a role's fail, an assert's fail_msg, a playbook's fail, a plugin's raise / fail_json / plan error
    assert "roles/dcu_runtime/tasks/main.yml" in where and "playbooks/plan.yml" in where
    assert any(m.startswith("Containers cannot use the GPUs") for _p, _w, m in rows)
    assert any("does not fit on" in m and p.startswith("plugins/module_utils/_plan/") for p, _w, m in rows)   # the planner package
    assert any(p.startswith("plugins/modules/") for p, _w, _m in rows)


def test_every_deployment_key_has_a_description():
    for prefix, keys in (("", planner.DEPLOYMENT_KEYS), ("workload.", planner.WORKLOAD_KEYS), ("engine.", planner.ENGINE_KEYS),
                         ("overrides.", planner.OVERRIDE_KEYS), ("options.", planner.PLAN_OPTIONS)):
        for key in keys:
            assert planner.DEPLOYMENT_DOC.get(prefix + key), f"_planner.DEPLOYMENT_DOC has no description for {prefix}{key}"
    known = {p + k for p, ks in (("", planner.DEPLOYMENT_KEYS), ("workload.", planner.WORKLOAD_KEYS), ("engine.", planner.ENGINE_KEYS),
                                 ("overrides.", planner.OVERRIDE_KEYS), ("options.", planner.PLAN_OPTIONS)) for k in ks}
    assert set(planner.DEPLOYMENT_DOC) == known, "DEPLOYMENT_DOC describes keys the planner does not have"


def test_every_host_variable_is_described():
    assert docs_gen.undocumented() == []


def test_matrix_cells_are_the_planners():
    text = docs_gen.hardware_matrix()
    # the planner's own refusals and decisions, not hand-written cells
    assert "sm70 cannot run AWQ" in text and "the CPU build of vLLM serves" in text
    assert "TRITON_ATTN" in text and "fp8 (weight-only)" in text
