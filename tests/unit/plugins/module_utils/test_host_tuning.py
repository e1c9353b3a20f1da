"""Unit tests of the live kernel tunables core, on temporary /proc/sys and cpufreq trees."""

from __future__ import annotations

import os

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _host_tuning as ht


def make_proc(tmp_path, values):
    root = tmp_path / "proc_sys"
    for key, value in values.items():
        path = root / key.replace(".", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{value}\n")
    return str(root)


def make_cpus(tmp_path, governors, available="performance powersave"):
    root = tmp_path / "cpu"
    for i, gov in enumerate(governors):
        d = root / f"cpu{i}" / "cpufreq"
        d.mkdir(parents=True)
        (d / "scaling_governor").write_text(gov + "\n")
        (d / "scaling_available_governors").write_text(available + " \n")
    (root / "cpuidle").mkdir(parents=True)
    return str(root)


def read(root, key):
    with open(os.path.join(root, key.replace(".", "/")), encoding="ascii") as handle:
        return handle.read().strip()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(0, "0"), (True, "1"), (False, "0"), (" 4096\t87380   6291456 \n", "4096 87380 6291456"), ("performance", "performance")],
)
def test_normalize_value(raw, expected):
    assert ht.normalize_value(raw) == expected


@pytest.mark.parametrize(
    ("key", "rel"),
    [
        ("kernel.numa_balancing", "kernel/numa_balancing"),
        ("net.ipv4.conf.all.rp_filter", "net/ipv4/conf/all/rp_filter"),
        ("net/ipv4/conf/eth0.100/rp_filter", "net/ipv4/conf/eth0.100/rp_filter"),
    ],
)
def test_sysctl_path(key, rel):
    assert ht.sysctl_path(key, "/p") == "/p/" + rel


@pytest.mark.parametrize("key", ["numa_balancing", "kernel..x", "../etc/passwd", "net/../../etc", "kernel.numa balancing", ""])
def test_sysctl_path_rejects_bad_names(key):
    with pytest.raises(ht.TunableError, match="not a valid name"):
        ht.sysctl_path(key, "/p")


def test_apply_sets_value_and_reports_before_after(tmp_path):
    root = make_proc(tmp_path, {"kernel.numa_balancing": 1})
    [result] = ht.apply_sysctl({"kernel.numa_balancing": 0}, proc_sys=root)
    assert (result.before, result.after, result.changed, result.live_applied) == ("1", "0", True, True)
    assert read(root, "kernel.numa_balancing") == "0"


def test_apply_twice_changes_nothing(tmp_path):
    root = make_proc(tmp_path, {"kernel.numa_balancing": 1})
    ht.apply_sysctl({"kernel.numa_balancing": 0}, proc_sys=root)
    [again] = ht.apply_sysctl({"kernel.numa_balancing": 0}, proc_sys=root)
    assert not again.changed and again.live_applied


def test_check_mode_predicts_without_writing(tmp_path):
    root = make_proc(tmp_path, {"kernel.numa_balancing": 1})
    [result] = ht.apply_sysctl({"kernel.numa_balancing": 0}, check_mode=True, proc_sys=root)
    assert result.changed and result.after == "0"
    assert read(root, "kernel.numa_balancing") == "1"


def test_unknown_key_fails_before_any_write(tmp_path):
    root = make_proc(tmp_path, {"kernel.numa_balancing": 1})
    with pytest.raises(ht.TunableError) as err:
        ht.apply_sysctl({"kernel.numa_balancing": 0, "vm.no_such_knob": 1}, proc_sys=root)
    assert "vm.no_such_knob does not exist on this kernel" in str(err.value)
    assert read(root, "kernel.numa_balancing") == "1"


def test_every_problem_is_listed(tmp_path):
    root = make_proc(tmp_path, {"kernel.numa_balancing": 1})
    with pytest.raises(ht.TunableError) as err:
        ht.validate_sysctl({"bad": 1, "kernel.numa_balancing": "", "vm.x": 1}, proc_sys=root)
    text = str(err.value)
    assert "'bad'" in text and "kernel.numa_balancing: value ''" in text and "vm.x does not exist" in text


def test_refused_write_is_reported(tmp_path, monkeypatch):
    root = make_proc(tmp_path, {"vm.swappiness": 60})
    monkeypatch.setattr(ht, "_writable", lambda path: None)

    def refuse(path, value):
        return f"{path} refused the write (Read-only file system)"

    monkeypatch.setattr(ht, "_write", refuse)
    [result] = ht.apply_sysctl({"vm.swappiness": 10}, proc_sys=root)
    assert (result.changed, result.live_applied, result.after) == (False, False, "60")
    assert "Read-only file system" in result.reason
    assert "NOT live" in ht.summarize([result], None)[0]


def test_kernel_rejecting_value_is_an_error(tmp_path, monkeypatch):
    root = make_proc(tmp_path, {"vm.swappiness": 60})
    real_write = ht._write

    def write_something_else(path, value):
        return real_write(path, "61")

    monkeypatch.setattr(ht, "_write", write_something_else)
    with pytest.raises(ht.TunableError, match="kernel reports '61'"):
        ht.apply_sysctl({"vm.swappiness": 10}, proc_sys=root)


def test_governor_absent_is_skipped(tmp_path):
    result = ht.apply_cpu_governor("performance", cpu_sysfs=str(tmp_path))
    assert not result.available and not result.changed
    assert "no cpufreq" in result.reason
    assert "skipped" in ht.summarize([], result)[0]


def test_governor_set_on_every_cpu(tmp_path):
    root = make_cpus(tmp_path, ["powersave", "powersave", "performance"])
    result = ht.apply_cpu_governor("performance", cpu_sysfs=root)
    assert result.available and result.changed and result.live_applied
    assert result.cpus == 3
    assert result.before == {"performance": 1, "powersave": 2}
    assert result.after == {"performance": 3}
    assert ht.apply_cpu_governor("performance", cpu_sysfs=root).changed is False


def test_governor_check_mode(tmp_path):
    root = make_cpus(tmp_path, ["powersave"])
    result = ht.apply_cpu_governor("performance", check_mode=True, cpu_sysfs=root)
    assert result.changed and result.after == {"performance": 1}
    assert (tmp_path / "cpu" / "cpu0" / "cpufreq" / "scaling_governor").read_text().strip() == "powersave"


def test_governor_not_offered_fails_with_what_is(tmp_path):
    root = make_cpus(tmp_path, ["schedutil"], available="schedutil")
    with pytest.raises(ht.TunableError, match="cpu0 offers 'schedutil'"):
        ht.apply_cpu_governor("performance", cpu_sysfs=root)
