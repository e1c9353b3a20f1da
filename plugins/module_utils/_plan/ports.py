# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Stage 11, over the whole host: each instance's port.

In this order: the deployment's own `port` (instance k listens on port + k); else the port the instance has in the plan
in force (the plan file the last run wrote, matched by instance name), so that adding, removing or reordering deployments
moves no running instance; else the lowest port from llmfleet_vllm_base_port that no instance of the new plan or of the
plan in force and no other listener of the host holds. Without a plan in force (the first run) that is the ordered
assignment, in plan order. Two users of one port are refused, naming both and what to change. Pure: the plan in force
and the host's other listeners come in as plan options (playbooks/plan.yml reads them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .base import PlanError

LOWEST_PORT = 1024      # below it a listener needs root or CAP_NET_BIND_SERVICE (inputs.check_deployments holds the same)
HIGHEST_PORT = 65535

# The host's other listeners (plan option host_ports), by the variable that sets each: what listens there.
HOST_PORT_USERS: Dict[str, str] = {
    "gateway_listen": "the gateway's nginx",
    "gateway_tls_listen": "the gateway's TLS listener",
    "gateway_webui_listen": "the web UI's nginx front",
    "webui_port": "Open WebUI",
    "model_store_share_port": "the model share of model_store_distribution via_peer",
}


def _is_port(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and LOWEST_PORT <= value <= HIGHEST_PORT


def listen_ports(value: Any, where: str) -> List[int]:
    """The TCP ports of a listener setting: a port, or nginx `listen` values (`8080`, `10.0.0.5:8080`, `[::]:443 ssl`,
    an address alone is port 80, `unix:` sockets have none), one or a list. Malformed raises PlanError naming `where`."""
    values = value if isinstance(value, (list, tuple)) else [value]
    ports: List[int] = []
    for item in values:
        if isinstance(item, bool) or item is None:
            raise PlanError(f"{where}={item!r}: a port or an nginx listen value such as 8080 or 10.0.0.5:8080")
        if isinstance(item, int):
            ports.append(item)
            continue
        words = str(item).split()
        if not words or words[0].startswith("unix:"):
            continue
        first = words[0]
        if first.isdigit():
            text = first
        elif first.startswith("["):                       # [::]:443, or [::1] alone (port 80)
            text = first.split("]:", 1)[1] if "]:" in first else "80"
        elif ":" in first:                                # 10.0.0.5:8080, *:8080, localhost:8080
            text = first.rsplit(":", 1)[1]
        else:                                             # an address alone: nginx listens on 80
            text = "80"
        if not text.isdigit() or not 0 < int(text) <= HIGHEST_PORT:
            raise PlanError(f"{where}={item!r}: not an nginx listen value; give address:port or a port, such as 8080")
        ports.append(int(text))
    return ports


def host_ports(option: Any, host: str) -> Dict[int, Tuple[str, str]]:
    """Plan option host_ports ({variable: its value}, only what runs on this host): port -> (what listens, variable)."""
    if option is None:
        return {}
    if not isinstance(option, Mapping):
        raise PlanError(f"{host}: plan option host_ports={option!r}: a mapping of each listener's variable to its ports")
    taken: Dict[int, Tuple[str, str]] = {}
    for variable in sorted(option, key=str):
        what = HOST_PORT_USERS.get(str(variable), f"what {variable} sets")
        for port in listen_ports(option[variable], f"{host}: {variable}"):
            taken.setdefault(port, (what, str(variable)))
    return taken


def check_in_force(option: Any, host: str) -> Dict[str, int]:
    """Plan option ports_in_force ({instance name: port}, see ports_in_force), checked."""
    if option is None:
        return {}
    if not isinstance(option, Mapping) or not all(isinstance(k, str) and _is_port(v) for k, v in option.items()):
        raise PlanError(f"{host}: plan option ports_in_force={option!r}: a mapping of instance names to ports "
                        f"({LOWEST_PORT}-{HIGHEST_PORT}), as ports_in_force() reads them from the plan in force")
    return dict(option)


def ports_in_force(plan: Any) -> Dict[str, int]:
    """The ports of the plan in force, by instance name: its `ports` (a plan with errors carries the ones it was given,
    so a failed plan.yml run does not lose them), else its instances' (a plan file written before plans carried `ports`).
    No plan (the first run), or an entry that is not a port, gives nothing."""
    if not isinstance(plan, Mapping):
        return {}
    recorded = plan.get("ports")
    pairs: Iterable[Tuple[Any, Any]]
    if isinstance(recorded, Mapping):
        pairs = recorded.items()
    else:
        pairs = [(inst.get("name"), inst.get("port")) for dep in plan.get("deployments") or [] if isinstance(dep, Mapping)
                 for inst in dep.get("instances") or [] if isinstance(inst, Mapping)]
    return {name: port for name, port in pairs if isinstance(name, str) and _is_port(port)}


@dataclass(frozen=True)
class PortAsk:
    """One deployment's instances as planned, in order, and the deployment's own `port` (None: it gives none)."""
    deployment: str
    instances: Tuple[str, ...]
    port: Optional[int] = None


@dataclass(frozen=True)
class Ports:
    """assign_ports' result: each instance's port, why (by deployment, as a plan reason), the refusals and the warnings."""
    ports: Dict[str, int]
    why: Dict[str, Tuple[str, str]]      # deployment -> (decision, why)
    errors: List[str]
    warnings: List[str]


def _asked(ask: PortAsk, k: int) -> str:
    return f"{ask.instances[k]} ({ask.deployment}: port {ask.port}" + (f" + {k}" if k else "") + ")"


def _explicit(asks: Sequence[PortAsk], in_force: Mapping[str, int], taken: Mapping[int, Tuple[str, str]],
              edge: Optional[str]) -> Tuple[Dict[int, str], List[str]]:
    """The ports deployments ask for (port + k), each checked against the others, the host's listeners and the plan in
    force: port -> instance, and the refusals."""
    holders = {port: name for name, port in sorted(in_force.items())}
    claimed: Dict[int, str] = {}
    by: Dict[int, str] = {}
    errors: List[str] = []
    for ask in asks:
        if ask.port is None or not ask.instances:
            continue
        last = ask.port + len(ask.instances) - 1
        if last > HIGHEST_PORT:
            errors.append(f"{ask.deployment}: port {ask.port} with {len(ask.instances)} instances (instance k listens on port + k) "
                          f"runs to {last}, past {HIGHEST_PORT}: give it a port of at most {HIGHEST_PORT - len(ask.instances) + 1}")
            continue
        for k, name in enumerate(ask.instances):
            port, who = ask.port + k, _asked(ask, k)
            holder = holders.get(port)
            if port in claimed:
                errors.append(f"port {port}: {by[port]} and {who} both ask for it on this host; give one of the two deployments "
                              "another port (instance k of a deployment listens on its port + k)")
            elif port in taken:
                what, variable = taken[port]
                also = f" (the instance listens on 127.0.0.1 and its edge on {edge})" if edge else ""
                errors.append(f"port {port}: {who} asks for the port {what} ({variable}) listens on, on this host{also}; "
                              f"give {ask.deployment} another port, or set {variable} to another")
            elif holder is not None and holder != name:
                errors.append(f"port {port}: {who} asks for it, but {holder} holds it in the plan in force and still runs while "
                              f"{name} starts; give {ask.deployment} another port, or first move {holder} (give its deployment "
                              f"another port, or remove it) and run serve.yml, then give {ask.deployment} this port")
            else:
                claimed[port], by[port] = name, who
    return claimed, errors


# Why a deployment's instances listen where they do: words that depend on the inventory alone, so that planning again
# from the plan just written gives the same file (plan.yml reports no change)
EXPLICIT_WHY = "the deployment's port: instance k listens on port + k"
KEPT_WHY = "the port the instance has in the plan in force; a new instance the lowest free one from llmfleet_vllm_base_port ({base})"


def assign_ports(asks: Sequence[PortAsk], base: int, in_force: Mapping[str, int],
                 taken: Mapping[int, Tuple[str, str]], edge: Optional[str] = None) -> Ports:
    """Every instance's port (the module's docstring says the order). `asks` in plan order; `in_force` the plan in force's
    ports by instance name; `taken` the host's other listeners (host_ports); `edge` the address the instances' edge nginx
    listens on, for the messages."""
    claimed, errors = _explicit(asks, in_force, taken, edge)
    warnings: List[str] = []
    given: Dict[str, int] = {}
    for ask in asks:
        if ask.port is not None:
            given.update({name: ask.port + k for k, name in enumerate(ask.instances)})
    held = set(claimed)
    for ask in asks:
        for name in ask.instances:
            old = in_force.get(name)
            if ask.port is None and old is not None and old not in held and old not in taken:
                given[name] = old
                held.add(old)
    # a new instance takes no port that an instance of the plan in force holds: it still runs while the new one starts
    busy = held | set(in_force.values()) | set(taken)
    for ask in asks:
        for name in ask.instances:
            if name in given:
                continue
            port = base
            while port in busy:
                port += 1
            if port > HIGHEST_PORT:
                errors.append(f"{name}: no free port from llmfleet_vllm_base_port {base} up to {HIGHEST_PORT}: "
                              "set a lower llmfleet_vllm_base_port, or give the deployment a port")
                continue
            busy.add(port)
            given[name] = port
            old = in_force.get(name)
            if old is not None and old in taken:
                what, variable = taken[old]
                warnings.append(f"{name}: its port {old} in the plan in force is now {what}'s ({variable}): it moves to {port}")
    why = {ask.deployment: ("port=" + ",".join(str(given[n]) for n in ask.instances),
                            EXPLICIT_WHY if ask.port is not None else KEPT_WHY.format(base=base))
           for ask in asks if ask.instances and all(n in given for n in ask.instances)}
    return Ports(given, why, errors, warnings)
