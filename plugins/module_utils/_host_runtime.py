"""Host preparation decisions, pure: which OS the roles support, the merged Docker daemon.json, the
NVIDIA driver level the planned images need, the packages and apt sources to install, and what is
missing on a Hygon DCU host (with what to install and from where).

No I/O here: the roles read files and facts, these functions decide and explain.
"""

from __future__ import annotations

import copy
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from ._host_needs import HYGON_DEVICES, HYHAL_DIR
# the driver check lives below the planner, which warns with it at plan time; re-exported for the roles' filters
from ._nvidia_driver import (  # noqa: F401  # pylint: disable=unused-import
    DRIVER_CUDA, HostRuntimeError, cuda_tuple, driver_cuda, driver_verdict, min_driver, version_tuple,
)
from ._serving import ServingError, choose_runtime

# Distributions the roles install on (apt-based; the package names and repository layouts below
# exist for these). Everything else fails before any change, saying so.
SUPPORTED_OS: Dict[str, Tuple[str, ...]] = {
    "Debian": ("11", "12", "13"),
    "Ubuntu": ("20.04", "22.04", "24.04"),
}
CODENAMES = {("Debian", "11"): "bullseye", ("Debian", "12"): "bookworm", ("Debian", "13"): "trixie",
             ("Ubuntu", "20.04"): "focal", ("Ubuntu", "22.04"): "jammy", ("Ubuntu", "24.04"): "noble"}


def os_problem(distribution: str, version: str, role: str) -> Optional[str]:
    """None when (distribution, major version) is supported, else the sentence to fail with."""
    supported = SUPPORTED_OS.get(distribution)
    major = str(version).strip()
    if supported and distribution == "Debian":
        major = major.split(".", maxsplit=1)[0]
    if supported and major in supported:
        return None
    known = "; ".join(f"{name} {', '.join(vers)}" for name, vers in SUPPORTED_OS.items())
    return (f"{role}: {distribution or 'an unknown OS'} {version or ''}".rstrip() +
            f" is not supported (supported: {known}). Install the pieces this role manages by hand, "
            "or run it on a supported release; nothing was changed.")


def codename(distribution: str, version: str, release: str = "") -> str:
    """apt suite name; the gathered ansible_distribution_release wins when present."""
    if release:
        return release
    key = (distribution, str(version).split(".", maxsplit=1)[0] if distribution == "Debian" else str(version))
    if key not in CODENAMES:
        raise HostRuntimeError(f"no apt suite known for {distribution} {version}")
    return CODENAMES[key]


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> Dict[str, Any]:
    """Maps merge key by key; any other value in `over` replaces; a None in `over` removes the key."""
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def daemon_options(registry_mirrors: Iterable[str], log_max_size: str, log_max_file: int, data_root: str = "",
                   extra: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The daemon.json keys the inventory owns: json-file log rotation, registry mirrors and data-root
    when given, then any other option (merged over them; a None still removes a key in daemon_config)."""
    options: Dict[str, Any] = {"log-driver": "json-file", "log-opts": {"max-size": str(log_max_size), "max-file": str(log_max_file)}}
    mirrors = list(registry_mirrors)
    if mirrors:
        options["registry-mirrors"] = mirrors
    if data_root:
        options["data-root"] = data_root
    for key, value in (extra or {}).items():
        if isinstance(value, Mapping) and isinstance(options.get(key), Mapping):
            options[key] = {**options[key], **value}
        else:
            options[key] = value
    return options


def daemon_config(current: Optional[Mapping[str, Any]], options: Mapping[str, Any],
                  contributions: Mapping[str, Mapping[str, Any]]) -> Dict[str, Any]:
    """The daemon.json to write: what is there now (keys nobody here manages are kept), the
    operator's options over it, then each vendor role's contribution (sorted by name, so the order
    roles ran in does not matter). A contribution may not change a key the operator set."""
    if current is not None and not isinstance(current, Mapping):
        raise HostRuntimeError("the current /etc/docker/daemon.json is not a JSON object; fix or remove it")
    doc = deep_merge(current or {}, options)
    for name in sorted(contributions):
        part = contributions[name]
        if not isinstance(part, Mapping):
            raise HostRuntimeError(f"daemon.json contribution {name!r} must be a map, got {type(part).__name__}")
        for key, value in part.items():
            if key in options and not isinstance(value, Mapping) and options[key] != value:
                raise HostRuntimeError(f"daemon.json: {name} wants {key}={value!r} but the inventory sets "
                                       f"{key}={options[key]!r}; remove one of them")
        doc = deep_merge(doc, part)
    return doc


def nvidia_runtime(path: str = "nvidia-container-runtime", default: bool = False) -> Dict[str, Any]:
    """What `nvidia-ctk runtime configure --runtime=docker [--set-as-default]` writes into daemon.json."""
    part: Dict[str, Any] = {"runtimes": {"nvidia": {"path": path, "args": []}}}
    if default:
        part["default-runtime"] = "nvidia"
    return part


def plan_cuda_needs(plan: Optional[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """Distinct (image, CUDA level) pairs of a host plan's NVIDIA instances, in plan order: the planner
    decided each image and the CUDA level it is built with (image_cuda; None when the inventory named
    an image without engine.cuda)."""
    seen: List[Dict[str, Any]] = []
    for deployment in (plan or {}).get("deployments", []):
        for instance in deployment.get("instances", []):
            if instance.get("vendor") != "nvidia" or not instance.get("image"):
                continue
            need = {"image": str(instance["image"]), "cuda": instance.get("image_cuda")}
            if need not in seen:
                seen.append(need)
    return seen


def pinned(packages: Iterable[str], version: str) -> List[str]:
    """apt package specs pinned to one version ("" leaves them unpinned)."""
    return [f"{name}={version}" if version else name for name in packages]


# The host's machine name (Ansible's architecture fact, uname -m) in each package layout the roles
# use: Debian's (dpkg --print-architecture, apt's arch=) and NVIDIA's CUDA repositories
# (.../compute/cuda/repos/<distro>/<arch>/), where Arm servers such as GH200 are "sbsa" (the "arm64"
# tree there is Jetson's). The one mapping: nothing else in the roles names an architecture.
ARCH_NAMES: Dict[str, Dict[str, str]] = {
    "x86_64": {"deb": "amd64", "cuda": "x86_64"},
    "aarch64": {"deb": "arm64", "cuda": "sbsa"},
}
ARCH_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


def arch_name(machine: str, layout: str = "deb") -> str:
    """The architecture name a package layout ("deb" or "cuda") uses for a host's machine name."""
    key = ARCH_ALIASES.get(str(machine).strip(), str(machine).strip())
    if key not in ARCH_NAMES:
        raise HostRuntimeError(f"architecture {machine!r} is not supported (supported: {', '.join(ARCH_NAMES)}); "
                               "the vendor repositories the roles use publish no packages for it")
    names = ARCH_NAMES[key]
    if layout not in names:
        raise HostRuntimeError(f"unknown package layout {layout!r} (one of {', '.join(names)})")
    return names[layout]


def apt_source(url: str, keyring: str, suite: str, components: Iterable[str] = (), arch: str = "") -> str:
    """One-line apt source with signed-by; a flat repository has suite "/" and no components."""
    if not re.match(r"^(https?|file)://", url):
        raise HostRuntimeError(f"repository URL {url!r} must start with http://, https:// or file://")
    options = ([f"arch={arch}"] if arch else []) + [f"signed-by={keyring}"]
    comps = list(components)
    if suite.endswith("/") and comps:
        raise HostRuntimeError(f"a flat repository (suite {suite!r}) has no components, got {comps}")
    return " ".join(["deb", f"[{' '.join(options)}]", url, suite] + comps)


def driver_packages(distribution: str, branch: str) -> List[str]:
    """Driver packages of one branch: Ubuntu's server (headless) packages, or the CUDA repository's
    cuda-drivers-<branch> meta package on Debian."""
    if not re.fullmatch(r"\d{3}", str(branch)):
        raise HostRuntimeError(f"nvidia_toolkit_driver_branch={branch!r}: a driver branch is three digits, e.g. '580'")
    if distribution == "Ubuntu":
        return [f"nvidia-headless-{branch}-server", f"nvidia-utils-{branch}-server"]
    return [f"cuda-drivers-{branch}"]


def cuda_repo_path(distribution: str, version: str) -> str:
    """The CUDA repository's folder for a distribution (debian12, ubuntu2404 ...)."""
    if distribution == "Ubuntu":
        return "ubuntu" + str(version).replace(".", "")
    return "debian" + str(version).split(".", maxsplit=1)[0]


# Hygon DCU pieces, in the order a missing one should be reported, with what provides each. `{path}` is where the
# piece is looked for: hy-smi under the hyhal folder the plan mounts into the engines (llmfleet_hyhal_dir), the
# device nodes the plan gives them.
DCU_PIECES: Tuple[Tuple[str, str, str], ...] = (
    ("hyhal", "{hyhal}/bin/hy-smi",
     "the DCU driver and management layer (hyhal): install the driver package for your card from Hygon's developer "
     "site (or set dcu_runtime_hyhal_archive_url to a local tarball), then check `{path}`"),
    ("dtk", "/opt/dtk/env.sh",
     "the DCU Toolkit (DTK): unpack the DTK tarball to /opt (set dcu_runtime_dtk_archive_url to a local copy) so that "
     "/opt/dtk/env.sh exists"),
    ("/dev/kfd", "/dev/kfd", "the kernel driver's compute node /dev/kfd: load the hycu/hydcu kernel module (modprobe) or "
     "reinstall the driver, and reboot"),
    ("/dev/dri", "/dev/dri/renderD*", "render nodes under /dev/dri: the kernel driver is not loaded; reinstall the driver "
     "and reboot"),
    ("/dev/mkfd", "/dev/mkfd", "/dev/mkfd, which DCU containers need (field report 003): it comes with the DCU driver "
     "package; reinstall the driver for this kernel and reboot"),
)
DCU_DEVICE_HOW = "a device node the plan gives the engine containers: it comes with the DCU driver; reinstall it and reboot"


def plan_host_needs(plan: Optional[Mapping[str, Any]], runtime: str = "auto", hyhal_dir: str = "") -> Dict[str, Any]:
    """What host preparation must provide for a host's plan, read from the fields the planner decided (image,
    package, vendor, access): `containers` and `venvs` (instance names by runtime, as the vllm role will run them
    with vllm_runtime=`runtime`), `docker` (whether the Docker engine is needed: some instance runs in a container,
    or there is no planned instance yet, when containers stay the default of GPU hosts), `devices` and `mounts`
    (the host device nodes and folders the containers are given), `hyhal_dir` (Hygon's folder: the one the plan
    mounts, else `hyhal_dir`, else the planner's default) and `why`, one sentence for the play's output."""
    containers: List[str] = []
    venvs: List[str] = []
    devices: List[str] = []
    mounts: List[str] = []
    hyhal = ""
    for deployment in (plan or {}).get("deployments", []) or []:
        for instance in deployment.get("instances", []) or []:
            try:
                kind = choose_runtime(instance, runtime)
            except (ServingError, KeyError) as exc:
                raise HostRuntimeError(f"the plan's instance {instance.get('name')!r}: {exc}") from exc
            (containers if kind == "docker" else venvs).append(str(instance["name"]))
            if kind != "docker":
                continue
            access = instance.get("access") or {}
            for spec in access.get("devices", []):
                node = str(spec).split(":", 1)[0]
                if node not in devices:
                    devices.append(node)
            for mount in access.get("mounts", []):
                source = str(mount.get("source", "")) if isinstance(mount, Mapping) else str(mount).split(":", 1)[0]
                if source and source not in mounts:
                    mounts.append(source)
                # the only folder the planner mounts into a Hygon engine is hyhal (_host_needs.device_access)
                if instance.get("vendor") == "hygon" and source and not hyhal:
                    hyhal = source
    hyhal = hyhal or str(hyhal_dir or "") or HYHAL_DIR
    if containers:
        why = f"the plan runs {', '.join(containers)} in containers"
    elif venvs:
        why = f"the plan runs every instance from a venv ({', '.join(venvs)}): no container needs it"
    else:
        why = ("no plan for this host yet (plan.yml writes it): the engine is prepared, containers being the default "
               "runtime of GPU hosts; set llmfleet_container_runtime: false for a host that will serve from a venv")
    return {"containers": containers, "venvs": venvs, "docker": bool(containers) or not venvs, "devices": devices,
            "mounts": mounts, "hyhal_dir": hyhal, "why": why}


def dcu_checks(needs: Mapping[str, Any]) -> List[Dict[str, str]]:
    """The DCU pieces to look for on a host, in report order: {name, path, kind (file, chr or render), how}. The
    device nodes are the plan's (`needs` from plan_host_needs), or Hygon's defaults when the plan gives none."""
    hyhal = str(needs.get("hyhal_dir") or HYHAL_DIR).rstrip("/")
    devices = list(needs.get("devices") or HYGON_DEVICES)
    out: List[Dict[str, str]] = []
    for name, path, how in DCU_PIECES:
        if name.startswith("/dev/") and name not in devices:
            continue
        path = path.format(hyhal=hyhal)
        kind = "render" if name == "/dev/dri" else ("chr" if name.startswith("/dev/") else "file")
        out.append({"name": name, "path": path, "kind": kind, "how": how.format(path=path)})
    known = {c["name"] for c in out}
    out += [{"name": d, "path": d, "kind": "chr", "how": DCU_DEVICE_HOW} for d in devices if d not in known]
    return out


def hyhal_unpack(hyhal_dir: str) -> Dict[str, Any]:
    """Where a hyhal archive (one top-level hyhal/ folder) is unpacked so that it becomes `hyhal_dir`: as it is,
    beside a folder named hyhal (also right for a ./hyhal/ archive), or into the folder with its top level stripped
    when the folder has another name. {dest, extra_opts} for ansible.builtin.unarchive."""
    path = str(hyhal_dir or HYHAL_DIR).rstrip("/")
    parent, _sep, name = path.rpartition("/")
    if not path.startswith("/") or not name:
        raise HostRuntimeError(f"llmfleet_hyhal_dir={hyhal_dir!r} must be an absolute folder path, e.g. /opt/hyhal")
    if name == "hyhal":
        return {"dest": parent or "/", "extra_opts": []}
    return {"dest": path, "extra_opts": ["--strip-components=1"]}


def dcu_missing(checks: Iterable[Mapping[str, str]], found: Mapping[str, Mapping[str, Any]], render_nodes: bool = False,
                provided: Iterable[str] = ()) -> List[str]:
    """Sentences for every missing DCU piece, in report order. `checks` from dcu_checks; `found` maps a check's
    path to what stat saw there ({exists, ischr}); `render_nodes` whether /dev/dri has renderD* nodes; `provided`
    names the pieces an archive of the inventory's installs (hyhal, dtk). A file counts when it exists, a device
    node only as a character device."""
    missing = []
    provided = set(provided)
    for check in checks:
        seen = found.get(check["path"]) or {}
        if check["kind"] == "render":
            ok = bool(render_nodes)
        elif check["kind"] == "chr":
            ok = bool(seen.get("ischr"))
        elif check["kind"] == "file":
            ok = bool(seen.get("exists")) or check["name"] in provided
        else:
            raise HostRuntimeError(f"unknown kind of DCU check {check['kind']!r} for {check['path']}")
        if not ok:
            missing.append(f"{check['path']} is missing - {check['how']}")
    return missing


def vendors_of(hardware: Optional[Mapping[str, Any]]) -> List[str]:
    """Accelerator vendors of a host (sorted, distinct); [] on a CPU-only host."""
    return sorted({str(a.get("vendor")) for a in (hardware or {}).get("accelerators", []) if a.get("vendor")})
