"""The live path of host_tuning on a kernel this process owns (this machine, local connection).

The molecule scenario proves the read-only /proc/sys path in a container; this test proves the
other half: the value is really written to the running kernel, check mode predicts it, and a
second run changes nothing. The original kernel value is restored afterwards.
"""

from __future__ import annotations

import json
import os

import pytest
from llmfleet_testing import ROOT, run_ansible as ansible, task_result as task

KNOB = "/proc/sys/kernel/numa_balancing"
PLAYBOOK = os.path.join(ROOT, "tests", "integration", "playbooks", "host_tuning_local.yml")


def kernel_value() -> str:
    with open(KNOB, encoding="ascii") as handle:
        return handle.read().strip()


def set_kernel_value(value: str) -> None:
    with open(KNOB, "w", encoding="ascii") as handle:
        handle.write(value)


@pytest.fixture
def writable_kernel(tmp_path):
    assert os.path.exists(KNOB), f"{KNOB} is missing: this kernel has no NUMA balancing, the live path cannot be shown here"
    assert os.access(KNOB, os.W_OK), f"{KNOB} is not writable: run the integration tests as root on a host (not in a container)"
    original = kernel_value()
    set_kernel_value("1")
    conf = f"/run/sysctl.d/60-llmfleet-test-{os.getpid()}.conf"
    made_dir = not os.path.isdir(os.path.dirname(conf))
    yield conf
    set_kernel_value(original)
    if os.path.exists(conf):
        os.remove(conf)
    if made_dir and os.path.isdir(os.path.dirname(conf)) and not os.listdir(os.path.dirname(conf)):
        os.rmdir(os.path.dirname(conf))


def test_live_value_check_apply_idempotent(writable_kernel):
    conf = writable_kernel
    extra = {"host_tuning_sysctl_file": conf, "host_tuning_live_required": True}

    checked = ansible("ansible-playbook", "--check", "--diff", PLAYBOOK, extra_vars=extra)
    live = task(checked, "Apply kernel settings to the running kernel")
    assert live["changed"] is True, live
    assert kernel_value() == "1", "check mode wrote to the kernel"
    assert not os.path.exists(conf), "check mode wrote the sysctl file"
    assert checked["stats"]["localhost"]["failures"] == 0

    applied = ansible("ansible-playbook", PLAYBOOK, extra_vars=extra)
    assert applied["stats"]["localhost"]["failures"] == 0, applied["stats"]
    live = task(applied, "Apply kernel settings to the running kernel")
    assert live["changed"] is True and live["live_applied"] is True
    [numa] = live["sysctl"]
    assert (numa["before"], numa["after"]) == ("1", "0")
    assert kernel_value() == "0"
    with open(conf, encoding="ascii") as handle:
        assert "kernel.numa_balancing = 0\n" in handle.read()
    report = task(applied, "Report what holds now and what waits for a reboot")["msg"]
    assert "sysctl kernel.numa_balancing = 0 live (was 1)" in report

    again = ansible("ansible-playbook", PLAYBOOK, extra_vars=extra)
    assert again["stats"]["localhost"]["changed"] == 0, again["stats"]
    rechecked = ansible("ansible-playbook", "--check", PLAYBOOK, extra_vars=extra)
    assert rechecked["stats"]["localhost"]["changed"] == 0, rechecked["stats"]


def test_unknown_key_fails_before_any_change(writable_kernel):
    conf = writable_kernel
    result = ansible(
        "ansible-playbook", PLAYBOOK,
        extra_vars={"host_tuning_sysctl_file": conf, "host_tuning_sysctl_host_items": {"vm.no_such_knob": 1}},
    )
    assert result["stats"]["localhost"]["failures"] == 1
    failed = task(result, "Apply kernel settings to the running kernel")
    assert "vm.no_such_knob does not exist on this kernel" in failed["msg"]
    assert kernel_value() == "1", "a failing run changed the kernel"
    assert not os.path.exists(conf)
    assert result["stats"]["localhost"]["changed"] == 0


def test_bad_file_location_is_rejected_by_name(writable_kernel):
    result = ansible("ansible-playbook", PLAYBOOK, extra_vars={"host_tuning_sysctl_file": "/tmp/x.conf"})
    assert result["stats"]["localhost"]["failures"] == 1
    assert result["stats"]["localhost"]["changed"] == 0
    assert kernel_value() == "1"


def test_module_through_its_fqcn(writable_kernel):
    result = ansible("ansible", "localhost", "-c", "local", "-m", "llmfleet.serving.kernel_tunables",
                     "-a", json.dumps({"sysctl": {"kernel.numa_balancing": 0}, "cpu_governor": "performance"}))
    host = result["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert host["changed"] is True and host["live_applied"] is True
    assert host["cpu_governor"]["available"] is os.path.exists("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    assert kernel_value() == "0"
