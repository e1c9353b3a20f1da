"""The vllm role's loop over a host's instances, exactly as roles/vllm/tasks/main.yml writes it, run by a real
ansible-playbook over two hosts of one batch (a first deploy, llmfleet_serve_serial above 1): the hosts change their
first instances together, then the second ones, and inside a host one instance at a time. Ansible runs one include per
distinct set of loop variables, so a loop over the instances themselves (a per-host value) ran every host's instances
one after another: a first deploy of 16 hosts waited for 16 health gates in a row instead of one."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml

from llmfleet_testing import ROOT

MAIN = os.path.join(ROOT, "roles", "vllm", "tasks", "main.yml")
LOOP_TASK = "Start or update each instance, one at a time, each through the health gate"


def the_roles_loop_task():
    tasks = yaml.safe_load(open(MAIN, encoding="utf-8"))
    return next(t for t in tasks if t["name"] == LOOP_TASK)


def run(tmp_path, instances):
    """The role's loop task over `instances` ({host: [instance names]}), with an instance.yml that writes `start` and
    `end` lines for each instance, a step apart: the lines in the order they were written."""
    log = tmp_path / "order.log"
    (tmp_path / "instance.yml").write_text(yaml.safe_dump([
        {"name": "start", "ansible.builtin.shell": f"echo start {{{{ inventory_hostname }}}} {{{{ __vllm_instance.name }}}} >> {log}"},
        {"name": "the health gate", "ansible.builtin.command": "true", "changed_when": False},
        {"name": "end", "ansible.builtin.shell": f"echo end {{{{ inventory_hostname }}}} {{{{ __vllm_instance.name }}}} >> {log}"},
    ]))
    task = dict(the_roles_loop_task())
    task.pop("tags", None)
    task["ansible.builtin.include_tasks"] = str(tmp_path / "instance.yml")
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [task]}]))
    hosts = {name: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                    # as the vllm_instances filter gives them: a single-host instance has no group
                    "__vllm_instances": [{"name": n, "secret": f"{name}-{n}", "group": None, "headless": False} for n in names]}
             for name, names in instances.items()}
    (tmp_path / "inventory.json").write_text(json.dumps({"all": {"hosts": hosts}}))
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(tmp_path / "inventory.json"),
                           str(tmp_path / "play.yml"), "--forks", "5"], cwd=ROOT, capture_output=True, text=True, check=False,
                          env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
                                   ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections")))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return log.read_text().split("\n")[:-1], proc.stdout


def test_the_hosts_of_a_batch_change_their_instances_together_position_by_position(tmp_path):
    # instance names differ between hosts (they do in a real fleet: other models), and host b has one more
    lines, out = run(tmp_path, {"a": ["tiny-a-0", "big-0"], "b": ["tiny-a-0", "other-0", "third-0"]})
    order = [tuple(line.split()) for line in lines]
    first = order[:4]
    assert sorted(first[:2]) == [("start", "a", "tiny-a-0"), ("start", "b", "tiny-a-0")], order
    assert sorted(first[2:]) == [("end", "a", "tiny-a-0"), ("end", "b", "tiny-a-0")], order
    second = order[4:8]
    assert sorted(second[:2]) == [("start", "a", "big-0"), ("start", "b", "other-0")], order
    assert sorted(second[2:]) == [("end", "a", "big-0"), ("end", "b", "other-0")], order
    assert order[8:] == [("start", "b", "third-0"), ("end", "b", "third-0")], order
    # what the operator reads: the position, no instance value (they hold the engines' key)
    assert "instance 1" in out and "secret" not in out and "a-tiny-a-0" not in out
