"""How the day-2 path is wired (issue 35), read from the playbooks and the vllm role's task files: every playbook that
changes the fleet takes the fleet's run lock before its first change and releases it last (site.yml and upgrade.yml keep
it across the playbooks they import); serve.yml names what an earlier run left out of the rotation before any instance
changes; a drain that fails is inside the rescue that puts back what ran before; and that rescue uses kept files only
when this change kept them. The behaviour itself is tested in tests/integration/test_run_lock.py, the module tests and
the fleet lab; this holds the wiring that those tests cannot all reach on one machine."""

from __future__ import annotations

import pathlib
from typing import Any, Dict, Iterator, List

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
IMPORT = "ansible.builtin.import_playbook"


def load(path: str) -> List[Dict[str, Any]]:
    return yaml.safe_load((ROOT / path).read_text(encoding="utf-8"))


def is_lock(entry: Dict[str, Any]) -> bool:
    return str(entry.get(IMPORT, "")).endswith("lock.yml")


def tasks(items) -> Iterator[Dict[str, Any]]:
    for task in items or []:
        if isinstance(task, dict):
            yield task
            for key in ("block", "rescue", "always"):
                yield from tasks(task.get(key))


@pytest.mark.parametrize("playbook", ["site.yml", "playbooks/serve.yml", "playbooks/gateway.yml", "playbooks/upgrade.yml",
                                      "playbooks/rotate_key.yml"])
def test_a_playbook_that_changes_the_fleet_takes_the_lock_first_and_releases_it_last(playbook):
    entries = load(playbook)
    first = entries[0]
    assert is_lock(first) and (first.get("vars") or {}).get("gateway_lock_state", "present") == "present", \
        f"{playbook}: the first play takes the fleet's run lock (import playbooks/lock.yml)"
    releases = [i for i, e in enumerate(entries) if is_lock(e) and (e.get("vars") or {}).get("gateway_lock_state") == "absent"]
    assert len(releases) == 1, f"{playbook}: one release of the lock, at the end"
    # after the release only plays that change nothing (upgrade.yml's "What to pin" on localhost)
    for entry in entries[releases[0] + 1:]:
        assert IMPORT not in entry and entry.get("hosts") == "localhost", (playbook, entry)
        assert all(set(t) & {"ansible.builtin.debug"} for t in entry.get("tasks") or []), (playbook, entry)


@pytest.mark.parametrize("playbook", ["site.yml", "playbooks/upgrade.yml", "playbooks/rotate_key.yml"])
def test_site_and_upgrade_keep_the_lock_across_the_playbooks_they_import(playbook):
    """serve.yml and gateway.yml release the lock at their end when run alone; imported, they leave it to the importer,
    so no other run slips in between them."""
    for entry in load(playbook):
        target = str(entry.get(IMPORT, ""))
        if target.endswith(("serve.yml", "gateway.yml")):
            assert (entry.get("vars") or {}).get("llmfleet_lock_release") is False, (playbook, target)


def test_serve_names_what_an_earlier_run_left_out_before_any_instance_changes():
    plays = [e for e in load("playbooks/serve.yml") if "hosts" in e]
    stage, roll = plays[0], plays[1]
    roles = [(t.get("ansible.builtin.include_role") or {}) for t in stage["tasks"]]
    assert {"name": "llmfleet.serving.vllm", "tasks_from": "reconcile"} in roles, "the staging play reconciles"
    assert roll.get("serial") and "max_fail_percentage" in roll


def test_a_failed_drain_is_inside_the_rescue_that_puts_back_what_ran_before():
    """The drain takes the instance out of the rotation; anything that fails from there (another gateway refusing, the
    copy of the unit, docker stop) must reach the rescue, or the instance stays `down` with nobody to put it back."""
    instance = load("roles/vllm/tasks/instance.yml")
    holder = [t for t in instance if any(s.get("ansible.builtin.include_tasks") == "drain.yml" for s in t.get("block") or [])]
    assert holder, "drain.yml is included inside a block"
    rescue = list(tasks(holder[0].get("rescue")))
    assert any(t.get("ansible.builtin.include_tasks") == "restore.yml" for t in rescue), "its rescue restores"
    assert not any(t.get("ansible.builtin.include_tasks") == "drain.yml" for t in instance), "no drain outside the block"


def test_the_restore_uses_kept_files_only_when_this_change_kept_them():
    """A *.previous left by a roll long ago must never replace what runs: the restore copies the kept unit (or renames the
    kept container) only when this change's drain got that far (__vllm_kept)."""
    restore = load("roles/vllm/tasks/restore.yml")
    for task in restore:
        text = yaml.safe_dump(task)
        if ".previous" in text or "-previous" in text:
            assert "__vllm_kept" in str(task.get("when")), task["name"]
