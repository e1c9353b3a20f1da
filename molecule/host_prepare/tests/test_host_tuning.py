"""Verify host_tuning (through playbooks/prepare.yml) in a systemd container whose /proc/sys is read-only (the
host's kernel), and that prepare.yml left Docker off this host: its plan runs the engine from a venv."""

import json

testinfra_hosts = ["ansible://llmfleet-cpu-host"]
SYSCTL_FILE = "/etc/sysctl.d/60-llmfleet.conf"


def test_no_docker_engine_where_the_plan_runs_every_instance_from_a_venv(host):
    assert not host.package("docker.io").is_installed
    assert not host.exists("dockerd")
    assert not host.file("/etc/docker/daemon.json").exists


def test_settings_persisted_for_boot(host):
    conf = host.file(SYSCTL_FILE)
    assert conf.exists and conf.is_file
    assert conf.user == "root" and conf.group == "root"
    assert conf.mode == 0o644
    lines = [line for line in conf.content_string.splitlines() if line and not line.startswith("#")]
    assert lines == ["kernel.numa_balancing = 0", "vm.dirty_expire_centisecs = 2999"]


def test_persisted_file_is_what_systemd_sysctl_reads(host):
    # systemd-sysctl parses every sysctl.d file at boot; --cat-config shows it was picked up.
    out = host.check_output("systemd-analyze cat-config sysctl.d/60-llmfleet.conf")
    assert "kernel.numa_balancing = 0" in out


def test_proc_sys_is_read_only_in_this_lab(host):
    # The scenario's premise: a container cannot change its host's kernel.
    assert "ro" in host.mount_point("/proc/sys").options
    assert host.sysctl("vm.dirty_expire_centisecs") != 2999


def test_module_reports_what_is_not_live_and_nothing_left_to_do(host):
    result = host.ansible(
        "llmfleet.serving.kernel_tunables",
        "sysctl='" + json.dumps({"kernel.numa_balancing": 0, "vm.dirty_expire_centisecs": 2999}) + "' cpu_governor=performance",
        check=True,
        become=True,
    )
    assert result["changed"] is False
    by_key = {r["key"]: r for r in result["sysctl"]}
    live = host.sysctl("kernel.numa_balancing")
    assert by_key["kernel.numa_balancing"]["before"] == str(live)
    dirty = by_key["vm.dirty_expire_centisecs"]
    assert dirty["live_applied"] is False
    assert "read-only" in dirty["reason"]
    assert result["live_applied"] is False
    assert any("NOT live" in line and "vm.dirty_expire_centisecs" in line for line in result["summary"])
    assert result["cpu_governor"]["available"] is False


def test_no_governor_unit_without_cpufreq(host):
    assert not host.file("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor").exists
    assert not host.file("/etc/systemd/system/llmfleet-cpu-governor.service").exists


def test_live_required_turns_the_report_into_a_failure(host):
    result = host.ansible(
        "llmfleet.serving.kernel_tunables",
        "sysctl='{\"vm.dirty_expire_centisecs\": 2999}' live_required=true",
        check=True,
        become=True,
    )
    # testinfra drops the `failed` key of an ad-hoc failure; only fail_json sets `msg` here.
    assert result["msg"].startswith("not applied to the running kernel")
    assert "live_required=true" in result["msg"]
    assert result["live_applied"] is False
    assert "vm.dirty_expire_centisecs" in result["msg"]
