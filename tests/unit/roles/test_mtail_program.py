"""The monitoring role's check of the gateway counters' program (roles/monitoring/tasks/gateway_metrics.yml, the copy
task's `validate:`), run as Ansible runs it: on a hidden file named as the copy module names its upload (.source.mtail),
with Debian's mtail (`make units` installs it). mtail 3.0.0-rc50 skips hidden files and exits 0, so a check that gave
it the upload itself would pass a broken program."""

from __future__ import annotations

import pathlib
import shlex
import shutil
import subprocess

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[3]
TASKS = ROOT / "roles" / "monitoring" / "tasks" / "gateway_metrics.yml"
PROGRAM = ROOT / "roles" / "monitoring" / "files" / "llmfleet_gateway.mtail"


def validate_command():
    task = next(t for t in yaml.safe_load(TASKS.read_text()) if "validate" in (t.get("ansible.builtin.copy") or {}))
    return task["ansible.builtin.copy"]["validate"]


def check(tmp_path, text):
    assert shutil.which("mtail"), "mtail is not installed: run `make units` (tests/host-packages.sh mtail)"
    upload = tmp_path / ".source.mtail"
    upload.write_text(text)
    # the copy module: `validate % path`, split as a command line, no shell
    return subprocess.run(shlex.split(validate_command() % str(upload)), capture_output=True, text=True, check=False, timeout=60)


def test_the_roles_program_passes_the_roles_check(tmp_path):
    proc = check(tmp_path, PROGRAM.read_text())
    assert proc.returncode == 0, proc.stderr


def test_a_broken_program_fails_the_check_and_says_where(tmp_path):
    counted = "llmfleet_gateway_requests_total[$key_name][$model][$status]++"
    proc = check(tmp_path, PROGRAM.read_text().replace(counted, counted + " }"))
    assert proc.returncode != 0
    assert "check.mtail" in proc.stderr and "syntax error" in proc.stderr, proc.stderr
    # what the unfixed check did: mtail skips the hidden upload and passes it
    hidden = subprocess.run(["mtail", "--compile_only", "--progs", str(tmp_path / ".source.mtail")], capture_output=True,
                            text=True, check=False, timeout=60)
    assert hidden.returncode == 0
