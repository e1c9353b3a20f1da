# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Live kernel tunables: sysctl values under /proc/sys and the cpufreq governor.

Private to llmfleet.serving: pure functions over file-system roots, so tests point them at a
temporary tree. No Ansible imports; the ``kernel_tunables`` module is a thin wrapper.
"""

from __future__ import annotations

import errno
import glob
import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Union

from ._units import Unit, UnitError, render

PROC_SYS = "/proc/sys"
CPU_SYSFS = "/sys/devices/system/cpu"
GOVERNOR_UNIT = "llmfleet-cpu-governor"
# a cpufreq governor name (performance, powersave, schedutil ...): what the boot unit may write into sysfs
_GOVERNOR_RE = re.compile(r"^[a-z_]+$")

# kernel.numa_balancing, net.ipv4.conf.all.rp_filter, or the slash form for names holding dots:
# net/ipv4/conf/eth0.100/rp_filter (no empty, "." or ".." parts either way).
_KEY_RE = re.compile(r"^(?:[A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]+)+|[A-Za-z0-9_\-]+(?:/(?!\.\.?(?:/|$))[A-Za-z0-9_.\-]+)+)$")
_VALUE_RE = re.compile(r"^[\x21-\x7e]+([ \t]+[\x21-\x7e]+)*$")

# Errors that mean "this kernel interface cannot be written from here" (a container's
# read-only /proc/sys, a non-root user, a value the namespace does not own).
_NOT_WRITABLE = {errno.EROFS, errno.EACCES, errno.EPERM}


class TunableError(Exception):
    """A request that cannot be honoured on this host; the message says what and why."""


@dataclass
class SysctlResult:
    key: str
    desired: str
    before: str
    after: str
    changed: bool
    live_applied: bool
    reason: str = ""


@dataclass
class GovernorResult:
    desired: str
    available: bool
    cpus: int = 0
    before: Dict[str, int] = field(default_factory=dict)
    after: Dict[str, int] = field(default_factory=dict)
    changed: bool = False
    live_applied: bool = False
    reason: str = ""


def normalize_value(value: Union[str, int, bool, float]) -> str:
    """Spell a sysctl value the way the kernel prints it: booleans as 0/1, whitespace collapsed."""
    if isinstance(value, bool):
        return "1" if value else "0"
    text = str(value).strip()
    return " ".join(text.split())


def sysctl_path(key: str, proc_sys: str = PROC_SYS) -> str:
    """Path of a sysctl key. Dotted keys map dots to slashes; keys given with '/' keep their dots
    (``net/ipv4/conf/eth0.100/rp_filter``), as sysctl(8) does."""
    if not _KEY_RE.match(key):
        raise TunableError(f"sysctl key {key!r} is not a valid name (expected e.g. kernel.numa_balancing)")
    rel = key if "/" in key else key.replace(".", "/")
    return os.path.join(proc_sys, rel)


def validate_sysctl(params: Mapping[str, Any], proc_sys: str = PROC_SYS) -> Dict[str, str]:
    """Check every key and value before anything is written; return the normalized request."""
    wanted: Dict[str, str] = {}
    problems: List[str] = []
    for key, raw in params.items():
        try:
            path = sysctl_path(str(key), proc_sys)
        except TunableError as exc:
            problems.append(str(exc))
            continue
        value = normalize_value(raw)
        if not value or not _VALUE_RE.match(value):
            problems.append(f"sysctl {key}: value {raw!r} is empty or not printable text")
            continue
        if not os.path.isfile(path):
            problems.append(
                f"sysctl {key} does not exist on this kernel ({path} is missing); "
                "remove it from the inventory or enable the kernel feature that provides it"
            )
            continue
        wanted[str(key)] = value
    if problems:
        raise TunableError("; ".join(problems))
    return wanted


def _read(path: str) -> str:
    with open(path, encoding="ascii", errors="replace") as handle:
        return normalize_value(handle.read())


def _writable(path: str) -> Optional[str]:
    """None when the file can be written, else the reason it cannot."""
    if os.access(path, os.W_OK):
        return None
    try:
        os.statvfs(path)
        read_only = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only:
        return f"{os.path.dirname(path)} is mounted read-only here (a container shares its host's kernel)"
    return f"{path} is not writable by this user"


def _write(path: str, value: str) -> Optional[str]:
    """Write a value; None on success, else the reason the kernel refused it."""
    try:
        with open(path, "w", encoding="ascii") as handle:
            handle.write(value)
    except OSError as exc:
        if exc.errno in _NOT_WRITABLE:
            return f"{path} refused the write ({os.strerror(exc.errno)})"
        raise TunableError(f"writing {value!r} to {path} failed: {exc.strerror}") from exc
    return None


def apply_sysctl(params: Mapping[str, Any], check_mode: bool = False, proc_sys: str = PROC_SYS) -> List[SysctlResult]:
    """Set each sysctl live. A key that cannot be written here is reported, not raised: the caller
    decides whether a persisted-but-not-live setting is acceptable."""
    wanted = validate_sysctl(params, proc_sys)
    results: List[SysctlResult] = []
    for key, value in wanted.items():
        path = sysctl_path(key, proc_sys)
        before = _read(path)
        if before == value:
            results.append(SysctlResult(key, value, before, before, False, True))
            continue
        reason = _writable(path)
        if reason is None and not check_mode:
            reason = _write(path, value)
        if reason is not None:
            results.append(SysctlResult(key, value, before, before, False, False, reason))
            continue
        after = value if check_mode else _read(path)
        if after != value:
            raise TunableError(f"sysctl {key}: wrote {value!r} but the kernel reports {after!r}; it rejected the value")
        results.append(SysctlResult(key, value, before, after, True, True))
    return results


def _count(values: List[str]) -> Dict[str, int]:
    counts: Dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return dict(sorted(counts.items()))


def apply_cpu_governor(desired: str, check_mode: bool = False, cpu_sysfs: str = CPU_SYSFS) -> GovernorResult:
    """Set the cpufreq scaling governor of every CPU that has one."""
    files = sorted(glob.glob(os.path.join(cpu_sysfs, "cpu[0-9]*", "cpufreq", "scaling_governor")))
    if not files:
        return GovernorResult(
            desired, False,
            reason="no cpufreq interface on this host (typical of VMs and containers); the governor is left to the hypervisor",
        )
    result = GovernorResult(desired, True, cpus=len(files))
    current = [_read(path) for path in files]
    result.before = _count(current)
    unsupported = []
    for path in files:
        available = os.path.join(os.path.dirname(path), "scaling_available_governors")
        if os.path.isfile(available) and desired not in _read(available).split():
            unsupported.append(f"{os.path.basename(os.path.dirname(os.path.dirname(path)))} offers {_read(available)!r}")
    if unsupported:
        raise TunableError(f"cpu governor {desired!r} is not offered by this cpufreq driver: " + "; ".join(unsupported[:4]))
    reasons = []
    after = list(current)
    for i, path in enumerate(files):
        if current[i] == desired:
            continue
        reason = _writable(path)
        if reason is None and not check_mode:
            reason = _write(path, desired)
        if reason is not None:
            reasons.append(reason)
            continue
        after[i] = desired if check_mode else _read(path)
        result.changed = True
    result.after = _count(after)
    result.live_applied = not reasons
    result.reason = reasons[0] if reasons else ""
    return result


def cpu_governor_unit(governor: str, cpu_sysfs: str = CPU_SYSFS) -> str:
    """The oneshot unit that sets every CPU's governor at boot (the host_tuning role installs it where cpufreq exists)."""
    if not _GOVERNOR_RE.match(str(governor)):
        raise TunableError(f"host_tuning_cpu_governor={governor!r} is not a cpufreq governor name: use lower-case letters and '_' "
                           "(performance, powersave, schedutil ...)")
    try:
        return render(Unit(
            comments=("Managed by llmfleet.serving (role host_tuning): edits are overwritten.",),
            description=f"Set the cpufreq scaling governor to {governor} (llmfleet.serving)",
            unit=(("ConditionPathExists", f"{cpu_sysfs}/cpu0/cpufreq/scaling_governor"), ("After", "sysinit.target")),
            service=(("Type", "oneshot"), ("RemainAfterExit", "yes")),
            exec_start=["/bin/sh", "-c", f'for f in {cpu_sysfs}/cpu[0-9]*/cpufreq/scaling_governor; do echo {governor} > "$f"; done']))
    except UnitError as exc:
        raise TunableError(f"the CPU governor unit cannot carry this value: {exc}; fix host_tuning_cpu_governor") from exc


def summarize(sysctl: List[SysctlResult], governor: Optional[GovernorResult]) -> List[str]:
    """One line per setting, for operators: what holds in the running kernel and what does not."""
    lines = []
    for r in sysctl:
        if r.live_applied:
            lines.append(f"sysctl {r.key} = {r.after} live" + (f" (was {r.before})" if r.changed else ""))
        else:
            lines.append(f"sysctl {r.key} = {r.desired} NOT live (running kernel has {r.before}): {r.reason}")
    if governor is not None:
        if not governor.available:
            lines.append(f"cpu governor {governor.desired}: skipped, {governor.reason}")
        elif governor.live_applied:
            lines.append(f"cpu governor {governor.desired} on {governor.cpus} CPUs" + (f" (was {governor.before})" if governor.changed else ""))
        else:
            lines.append(f"cpu governor {governor.desired} NOT live (now {governor.before}): {governor.reason}")
    return lines


def as_dict(result: Union[SysctlResult, GovernorResult]) -> Dict[str, Any]:
    return asdict(result)
