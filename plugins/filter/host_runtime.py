# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Host preparation filters (container_runtime, nvidia_toolkit, dcu_runtime): thin wrappers over
module_utils/_host_runtime.py; docs in the sidecar .yml files."""

from __future__ import annotations

import json

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.serving.plugins.module_utils import _host_runtime as core


def _wrap(name, func, *args, **kwargs):
    try:
        return func(*args, **kwargs)
    except (core.HostRuntimeError, KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"{name}: {exc}") from exc


def docker_daemon_config(current, options=None, contributions=None):
    """The merged daemon.json document; `current` is the file's text ('' or None when absent) or a map."""
    if isinstance(current, str):
        text = current.strip()
        try:
            current = json.loads(text) if text else None
        except ValueError as exc:
            raise AnsibleFilterError(f"docker_daemon_config: the current /etc/docker/daemon.json is not valid JSON ({exc}); "
                                     "fix or remove it, then re-run") from exc
    return _wrap("docker_daemon_config", core.daemon_config, current, options or {}, contributions or {})


def docker_daemon_options(registry_mirrors, log_max_size="100m", log_max_file=3, data_root="", extra=None):
    """The inventory's daemon.json keys (container_runtime's variables)."""
    return _wrap("docker_daemon_options", core.daemon_options, registry_mirrors or [], log_max_size, int(log_max_file),
                 data_root or "", extra or {})


def nvidia_driver_verdict(driver_version, plan=None, min_version=""):
    """ok / required / reasons / message for a driver version against a host plan's images and their CUDA
    levels (or a list of {image, cuda})."""
    needs = core.plan_cuda_needs(plan) if isinstance(plan, dict) else list(plan or [])
    return _wrap("nvidia_driver_verdict", core.driver_verdict, driver_version or None, needs, str(min_version or ""))


def host_os_problem(distribution, version, role):
    return core.os_problem(str(distribution or ""), str(version or ""), role)


def apt_source_line(url, keyring, suite, components=None, arch=""):
    return _wrap("apt_source_line", core.apt_source, url, keyring, suite, components or [], arch)


def host_arch(machine, layout="deb"):
    return _wrap("host_arch", core.arch_name, str(machine or ""), str(layout))


def pinned_packages(packages, version=""):
    return core.pinned(packages, str(version or ""))


def nvidia_driver_packages(distribution, branch):
    return _wrap("nvidia_driver_packages", core.driver_packages, distribution, str(branch))


def cuda_repo_path(distribution, version):
    return core.cuda_repo_path(distribution, str(version))


def apt_codename(distribution, version, release=""):
    return _wrap("apt_codename", core.codename, distribution, str(version), release or "")


def nvidia_runtime_config(path="nvidia-container-runtime", default=False):
    return core.nvidia_runtime(path, bool(default))


def host_prepare_needs(plan, runtime="auto", hyhal_dir=""):
    """What prepare.yml and the vendor roles provide for a host's plan: Docker or not (and why), device nodes,
    mounts, Hygon's folder."""
    return _wrap("host_prepare_needs", core.plan_host_needs, plan if isinstance(plan, dict) else None,
                 str(runtime or "auto"), str(hyhal_dir or ""))


def hyhal_unpack(hyhal_dir):
    return _wrap("hyhal_unpack", core.hyhal_unpack, hyhal_dir)


def dcu_checks(needs):
    return _wrap("dcu_checks", core.dcu_checks, needs or {})


def dcu_missing(checks, stat_results, render_nodes=False, provided=None):
    """Missing DCU pieces from a looped stat task's results (each item one of `checks`)."""
    found = {r["item"]["path"]: r.get("stat") or {} for r in stat_results or []}
    return _wrap("dcu_missing", core.dcu_missing, checks, found, bool(render_nodes), provided or [])


def accelerator_vendors(hardware):
    return core.vendors_of(hardware)


class FilterModule:
    def filters(self):
        return {
            "docker_daemon_config": docker_daemon_config,
            "docker_daemon_options": docker_daemon_options,
            "nvidia_driver_verdict": nvidia_driver_verdict,
            "host_os_problem": host_os_problem,
            "apt_source_line": apt_source_line,
            "pinned_packages": pinned_packages,
            "host_arch": host_arch,
            "nvidia_driver_packages": nvidia_driver_packages,
            "cuda_repo_path": cuda_repo_path,
            "apt_codename": apt_codename,
            "nvidia_runtime_config": nvidia_runtime_config,
            "host_prepare_needs": host_prepare_needs,
            "dcu_checks": dcu_checks,
            "hyhal_unpack": hyhal_unpack,
            "dcu_missing": dcu_missing,
            "accelerator_vendors": accelerator_vendors,
        }
