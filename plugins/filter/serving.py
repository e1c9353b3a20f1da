# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Filters vllm_instances (a host's plan in the terms of its runtime), vllm_engines (the vllm role's public,
secret-free view of them), vllm_stale and image_pinned (docs in each filter's .yml)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llmfleet.serving.plugins.module_utils._engine import image_pinned as engine_image_pinned
from ansible_collections.llmfleet.serving.plugins.module_utils._engine_keys import EngineKeyError, config_text
from ansible_collections.llmfleet.serving.plugins.module_utils._fleet_vars import ENGINE_DEFAULTS
from ansible_collections.llmfleet.serving.plugins.module_utils._serving import (
    NAME_PREFIX, ServingError, bind_of, choose_runtime, docker_spec, engine_keys, env_file, group_ranks, headless, instance_env,
    invocations, keys_path, plan_instances, rank_states, stale_files, stale_names, systemd_unit, unit_name, unit_path)
from ansible_collections.llmfleet.serving.plugins.module_utils._serving import env_path as instance_env_path

# The role's settings: the engine defaults of the collection (_fleet_vars.ENGINE_DEFAULTS), the extra environment and
# the name of the plan's variable (for the messages).
DEFAULTS = dict(ENGINE_DEFAULTS, entrypoint=list(ENGINE_DEFAULTS["entrypoint"]), extra_env={}, plan_source="llmfleet_plan")


def _settings(settings):
    opts = dict(DEFAULTS)
    unknown = sorted(set(settings or {}) - set(DEFAULTS))
    if unknown:
        raise AnsibleFilterError(f"vllm_instances: unknown settings {unknown}; known: {sorted(DEFAULTS)}")
    opts.update(settings or {})
    return opts


def _item(inst, api_key, opts):
    """One plan_instances entry in the terms of its runtime: its container, or its unit and environment file."""
    runtime = choose_runtime(inst, opts["runtime"])
    name = unit_name(inst)
    host, port = bind_of(inst)
    cache_dir = f"{opts['state_dir']}/{inst['name']}"
    # a headless rank of a group serves no API: it holds no key (its head, rank 0, checks them)
    keys = [] if headless(inst) else engine_keys(inst, api_key)
    keys_file = keys_path(opts["state_dir"], inst["name"])
    item = {"name": inst["name"], "unit": name, "runtime": runtime, "deployment": inst["deployment"],
            "engine_version": inst["engine_version"], "served_model_name": inst.get("served_model_name"),
            # a headless rank's gate is its head's (the vllm role's group path)
            "url": None if port is None else f"http://{host}:{port}", "port": port,
            "group": dict(inst["group"]) if inst.get("group") else None, "headless": headless(inst),
            "startup_budget_s": int(inst.get("startup_budget_s") or 600), "cache_dir": cache_dir,
            "model_dir": inst["model_dir"], "os_packages": list(inst["os_packages"]),
            "patches": list(inst.get("patches") or []),
            "stop_timeout_s": int(inst["stop_timeout_s"]), "drain_timeout_s": int(inst["drain_timeout_s"]),
            # a plan of an older planner has no shutdown grace: its engine aborts on SIGTERM
            "shutdown_timeout_s": int(inst.get("shutdown_timeout_s") or 0),
            "plan_hash": inst.get("plan_hash"), "plan": inst,
            # the --config file of a rotation's two keys (0640; the engine's group reads it), empty with one key
            "keys_path": keys_file, "keys_text": config_text(keys) if len(keys) > 1 else "",
            "keys_group": "root" if runtime == "docker" else str(opts["user"])}
    if item["group"] and runtime != "systemd":
        raise ServingError(f"{inst['name']}: a rank of group {inst['group'].get('name')} runs as a systemd unit (the {runtime} "
                           "runtime does not start groups in this release): set vllm_runtime: systemd for the group's hosts")
    if runtime == "docker":
        item["docker"] = docker_spec(inst, cache_dir=cache_dir, patches_dir=opts["patches_dir"], api_key=keys, keys_file=keys_file,
                                     shm_size=opts["shm_size"], ipc_host=opts["ipc_host"],
                                     restart_policy=opts["restart_policy"], entrypoint=opts["entrypoint"],
                                     extra_env=opts["extra_env"])
    else:
        venv = f"{opts['venv_root']}/{inst['engine_version']}"
        env_path = instance_env_path(opts["env_dir"], inst["name"])
        env = instance_env(inst, cache_dir=cache_dir, patches_dir=opts["patches_dir"], extra=opts["extra_env"])
        if len(keys) == 1:
            env["VLLM_API_KEY"] = keys[0]
        item.update({"venv": venv, "package": inst["package"], "env_path": env_path, "env_text": env_file(env),
                     # what a change keeps (.previous) and a restore puts back
                     "files": [env_path, unit_path(name)],
                     "unit_text": systemd_unit(inst, python=f"{venv}/bin/python", env_path=env_path, cache_dir=cache_dir,
                                               user=opts["user"], keys_file=keys_file if len(keys) > 1 else None)})
    return item


def _filter_errors(name, opts, call):
    try:
        return call()
    except (ServingError, EngineKeyError) as exc:
        raise AnsibleFilterError(f"{name}: {exc}") from exc
    except KeyError as exc:
        raise AnsibleFilterError(f"{name}: {opts['plan_source']} lacks the field {exc}: the plan was written by an older "
                                 "planner or edited by hand; run playbooks/plan.yml again") from exc
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"{name}: {opts['plan_source']} holds a value of the wrong kind ({exc}); "
                                 "run playbooks/plan.yml again") from exc


def vllm_instances(plan, api_key, settings=None):
    opts = _settings(settings)
    return _filter_errors("vllm_instances", opts,
                          lambda: [_item(inst, api_key, opts) for inst in plan_instances(plan, str(opts["plan_source"]))])


def vllm_group_ranks(plans, head, api_key, settings=None, hostvars=None, check=False):
    """The other ranks of the group that `head` (a vllm_instances entry, rank 0) leads, each a vllm_instances entry of its
    own host's plan (`plans`: {host: plan}, gateway_plans) and of that host's own settings (its __vllm_settings in
    `hostvars`, else `settings`), with `host` added, in rank order. With check=True: '' or what is wrong, as a sentence
    (for a task that may show it)."""
    if not isinstance(head, dict) or not isinstance(head.get("plan"), dict):
        raise AnsibleFilterError(f"vllm_group_ranks: {head!r:.120} is not an entry of the vllm_instances filter; fix the caller "
                                 "to pass the head's entry of that filter")

    def own(host):
        theirs = (hostvars or {}).get(host) or {}
        return _settings(theirs.get("__vllm_settings") or settings)

    def ranks():
        return [dict(_item(inst, api_key, own(host)), host=host) for host, inst in group_ranks(head["plan"], dict(plans or {}), "the plan files")]
    if check:
        try:
            ranks()
        except (ServingError, EngineKeyError) as exc:
            return str(exc)
        except (KeyError, TypeError, ValueError) as exc:
            return (f"{head.get('name')}: a plan of the group's hosts holds no or a wrong value at {exc}: it was written by an "
                    "older planner or edited by hand; run playbooks/plan.yml for every host of the group")
        return ""
    return _filter_errors("vllm_group_ranks", _settings(settings), ranks)


def vllm_rank_states(results, recorded=None):
    """{running, stopped, crashed, down, unfiltered: [host]} of a group's members, from a loop of `systemctl show` over them and the
    {host: InvocationID} the head recorded when the group's gate last passed (_serving.rank_states)."""
    try:
        return rank_states(list(results or []), recorded if isinstance(recorded, dict) else None)
    except (AttributeError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"vllm_rank_states: expects the results of a loop over the group's members ({exc}); fix the "
                                 "caller to pass that loop's registered results") from exc


def vllm_rank_invocations(results):
    """{host: InvocationID} of the members that run (_serving.invocations): what the head records once the gate passed."""
    try:
        return invocations(list(results or []))
    except (AttributeError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"vllm_rank_invocations: expects the results of a loop over the group's members ({exc}); fix the "
                                 "caller to pass that loop's registered results") from exc


def vllm_stale(present, instances, env_dir=None, state_dir=None):
    """This role's containers/units (by name) that the plan's instances no longer include, each with its instance name;
    with the role's folders, each also with the files the role keeps for it (_serving.stale_files)."""
    names = [str(n).lstrip("/").rsplit(".service", 1)[0] for n in present or []]
    out = [{"unit": n, "instance": n[len(NAME_PREFIX):]} for n in stale_names(names, instances)]
    if state_dir is not None:
        for entry in out:
            entry["keys_file"] = keys_path(str(state_dir), entry["instance"])
            if env_dir is not None:
                entry["files"] = stale_files(entry["unit"], entry["instance"], str(env_dir), str(state_dir))
    return out


# What other roles and playbooks may read of an instance (the vllm role's documented output vllm_engines): where it
# answers and the engine install that serves it, never the API key its environment or container holds.
ENGINE_FIELDS = ("name", "unit", "deployment", "runtime", "engine_version", "served_model_name", "url", "port", "model_dir")


def vllm_engines(instances):
    """The public view of vllm_instances entries: ENGINE_FIELDS, plus the venv (systemd) or the container name (docker)."""
    out = []
    for inst in instances or []:
        try:
            item = {k: inst[k] for k in ENGINE_FIELDS}
            if inst["runtime"] == "docker":
                item["container"] = inst["docker"]["name"]
            else:
                item["venv"] = inst["venv"]
        except (KeyError, TypeError) as exc:
            raise AnsibleFilterError(f"vllm_engines: {inst!r:.120} is not an entry of the vllm_instances filter (missing {exc}); "
                                     "fix the caller to pass that filter's answer") from exc
        out.append(item)
    return out


def image_pinned(image):
    """The collection's one "never latest" rule (_engine.image_pinned): a digest or a tag other than latest."""
    return engine_image_pinned(image)


class FilterModule:
    def filters(self):
        return {"vllm_instances": vllm_instances, "vllm_engines": vllm_engines, "vllm_stale": vllm_stale,
                "vllm_group_ranks": vllm_group_ranks, "vllm_rank_states": vllm_rank_states,
                "vllm_rank_invocations": vllm_rank_invocations, "image_pinned": image_pinned}
