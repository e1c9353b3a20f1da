"""The fleet's run lock (the gateway role owns it): who may take it (free, its own run, another run's only when the
operator breaks it or that run provably ended on this controller), what a refused run is told (the holder, its age, how
to clear a stale lock), and the playbooks read off an ansible-playbook command line."""

from __future__ import annotations

import calendar
import time

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _run_lock as rl

ME = {"run": "ctl-1/4242/9001", "controller": "ctl-1", "user": "alice", "pid": 4242, "pid_start": "9001", "boot_id": "b-1",
      "pid_ns": "pid:[4026531836]", "playbook": "site.yml"}
OTHER = dict(ME, run="ctl-2/77/123", controller="ctl-2", user="bob", pid=77, pid_start="123", playbook="playbooks/upgrade.yml")
NOW = calendar.timegm((2026, 12, 3, 12, 0, 0, 0, 0, 0))


def held(owner, minutes_ago):
    return rl.stamp(owner, NOW - 60 * minutes_ago)


def test_a_free_lock_is_taken_and_a_run_keeps_its_own():
    assert rl.decide(None, ME) == rl.TAKE
    assert rl.decide(held(ME, 5), ME) == rl.KEEP          # site.yml's serve.yml and gateway.yml: the same run


def test_another_runs_lock_is_refused_unless_broken_or_that_run_ended():
    other = held(OTHER, 5)
    assert rl.decide(other, ME) == rl.REFUSE
    assert rl.decide(other, ME, break_lock=True) == rl.BREAK
    assert rl.decide(other, ME, take_over=OTHER["run"]) == rl.TAKE_OVER
    # a take-over names the run it saw: another run that took the lock meanwhile is not taken over
    assert rl.decide(held(dict(OTHER, run="ctl-2/78/124"), 1), ME, take_over=OTHER["run"]) == rl.REFUSE


def test_only_the_holder_releases():
    assert rl.releases(held(ME, 1), ME)
    assert not rl.releases(held(OTHER, 1), ME)
    assert not rl.releases(None, ME)


def test_the_refusal_names_the_first_run_its_age_and_how_to_clear_a_stale_lock():
    message = rl.refusal(held(OTHER, 62), NOW, "/var/lib/llmfleet/gateway/run-lock.json", "gw1")
    for part in ("ansible-playbook playbooks/upgrade.yml", "by bob on ctl-2", "pid 77", "run ctl-2/77/123",
                 "since 2026-12-03T10:58:00Z", "(1 h 02 min ago)", "stopped before any change",
                 "-e llmfleet_break_lock=true", "remove /var/lib/llmfleet/gateway/run-lock.json", "gw1"):
        assert part in message, (part, message)


@pytest.mark.parametrize("seconds, text", [(None, "an unknown time"), (45, "45 s"), (720, "12 min"), (3 * 3600 + 300, "3 h 05 min"),
                                           (2 * 86400 + 4 * 3600, "2 d 4 h")])
def test_ages_read_as_people_read_them(seconds, text):
    assert rl.human(seconds) == text


def test_the_age_is_read_on_the_clock_that_wrote_since():
    record = held(ME, 10)
    assert record["since"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(NOW - 600))
    assert rl.age_s(record, NOW) == 600
    assert rl.age_s(dict(record, since="yesterday"), NOW) is None


def test_a_run_provably_ended_only_on_the_same_controller_boot_and_process_namespace():
    other_here = held(dict(ME, run="ctl-1/555/777", pid=555, pid_start="777"), 30)
    assert rl.provably_ended(other_here, ME, None)                 # no process 555 here any more
    assert rl.provably_ended(other_here, ME, "778")                # 555 is another process now
    assert not rl.provably_ended(other_here, ME, "777")            # it still runs
    # another controller, another boot, another process namespace (a container): no proof, the lock stays
    assert not rl.provably_ended(held(OTHER, 30), ME, None)
    assert not rl.provably_ended(dict(other_here, boot_id="b-0"), ME, None)
    assert not rl.provably_ended(dict(other_here, pid_ns="pid:[4026532000]"), ME, None)
    assert not rl.provably_ended(dict(other_here, pid_start=None), ME, None)
    assert not rl.provably_ended(dict(other_here, boot_id=None), dict(ME, boot_id=None), None)


def test_the_lock_file_is_canonical_and_a_foreign_one_says_what_to_do():
    record = held(ME, 0)
    assert rl.parse(rl.render(record)) == record
    assert rl.parse(None) is None and rl.parse("  \n") is None
    with pytest.raises(rl.LockError, match="remove it and run again"):
        rl.parse("{not json", "/x/run-lock.json")
    with pytest.raises(rl.LockError, match="not a run lock"):
        rl.parse('{"out": []}')
    with pytest.raises(rl.LockError, match="pid"):
        rl.check_owner(dict(ME, pid="4242"))
    with pytest.raises(rl.LockError, match="user"):
        rl.check_owner(dict(ME, user=""))


def test_the_playbooks_are_read_off_the_command_line():
    argv = ["/venv/bin/python3", "/venv/bin/ansible-playbook", "-i", "inventories/v100/hosts.yml", "-e", "@vars.yml",
            "--extra-vars", "x.yml", "site.yml", "--limit", "gpu1", "playbooks/upgrade.yml", "-e", "upgrade_version=0.32.0"]
    assert rl.playbooks_of(argv) == "site.yml playbooks/upgrade.yml"
    assert rl.playbooks_of([]) == ""
    assert rl.short(held(OTHER, 0)) == "playbooks/upgrade.yml by bob on ctl-2, pid 77"
