"""Host preparation decisions: OS support, the merged daemon.json, driver vs image CUDA level, apt
sources, DCU pieces - and the reference inventories' plans through the driver check."""

from __future__ import annotations

import json
import pathlib

import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.llmfleet.serving.plugins.filter import host_runtime as filters
from ansible_collections.llmfleet.serving.plugins.module_utils import _host_runtime as hr
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host

from llmfleet_testing import CPU_QWEN3_SMALL, ROOT, accepting, plan_of

CPU_HW = {"accelerators": [], "links": None, "numa_cpus": {0: "0-1"}, "cpu_count": 2, "memory_mib": 24105, "driver_version": None}
MI300X_HW = {"accelerators": [{"index": i, "vendor": "amd", "model": "AMD Instinct MI300X", "arch": "gfx942", "memory_mib": 196592,
                               "numa_node": 0} for i in range(2)],
             "numa_cpus": {0: "0-63"}, "cpu_count": 64, "memory_mib": 1_000_000}


@pytest.mark.parametrize("dist,version", [("Debian", "12"), ("Debian", "12.8"), ("Debian", "11.11"), ("Ubuntu", "22.04"), ("Ubuntu", "24.04")])
def test_supported_os(dist, version):
    assert hr.os_problem(dist, version, "container_runtime") is None


@pytest.mark.parametrize("dist,version", [("CentOS", "7"), ("Ubuntu", "18.04"), ("Debian", "10"), ("Ubuntu", "23.10"), ("", "")])
def test_unsupported_os_says_what_is(dist, version):
    msg = hr.os_problem(dist, version, "nvidia_toolkit")
    assert msg.startswith(f"nvidia_toolkit: {dist or 'an unknown OS'}")
    assert "supported: Debian 11, 12, 13; Ubuntu 20.04, 22.04, 24.04" in msg
    assert "nothing was changed" in msg


def test_daemon_merge_keeps_foreign_keys_and_merges_maps():
    current = {"labels": ["rack=a1"], "log-opts": {"labels": "rack", "max-size": "10m"}, "runtimes": {"custom": {"path": "crun"}}}
    options = {"log-driver": "json-file", "log-opts": {"max-size": "100m", "max-file": "3"}, "registry-mirrors": ["https://m.example"]}
    contrib = {"nvidia_toolkit": hr.nvidia_runtime()}
    doc = hr.daemon_config(current, options, contrib)
    assert doc == {"labels": ["rack=a1"], "log-driver": "json-file",
                   "log-opts": {"labels": "rack", "max-size": "100m", "max-file": "3"},
                   "registry-mirrors": ["https://m.example"],
                   "runtimes": {"custom": {"path": "crun"}, "nvidia": {"path": "nvidia-container-runtime", "args": []}}}
    assert current["log-opts"]["max-size"] == "10m"  # input not mutated


def test_daemon_merge_null_removes_and_lists_replace():
    doc = hr.daemon_config({"registry-mirrors": ["https://old"], "debug": True}, {"registry-mirrors": ["https://new"], "debug": None}, {})
    assert doc == {"registry-mirrors": ["https://new"]}


def test_daemon_merge_refuses_a_conflict_between_inventory_and_vendor():
    with pytest.raises(hr.HostRuntimeError, match="nvidia_toolkit wants default-runtime='nvidia' but the inventory sets default-runtime='runc'"):
        hr.daemon_config({}, {"default-runtime": "runc"}, {"nvidia_toolkit": hr.nvidia_runtime(default=True)})


def test_daemon_merge_is_idempotent_and_order_free():
    contrib = {"b": {"runtimes": {"x": {"path": "x"}}}, "a": {"runtimes": {"y": {"path": "y"}}}}
    once = hr.daemon_config({}, {"log-driver": "json-file"}, contrib)
    assert hr.daemon_config(once, {"log-driver": "json-file"}, dict(reversed(list(contrib.items())))) == once


SCALARS = st.one_of(st.integers(), st.text(max_size=5))
NESTED = st.one_of(SCALARS, st.dictionaries(st.text(min_size=1, max_size=3), st.integers(), max_size=3))


@given(st.dictionaries(st.text(min_size=1, max_size=5), NESTED, max_size=5),
       st.dictionaries(st.text(min_size=1, max_size=5), SCALARS, max_size=5))
def test_daemon_merge_properties(current, options):
    doc = hr.daemon_config(current, options, {})
    for key, value in options.items():
        assert doc[key] == value           # the inventory wins
    for key in set(current) - set(options):
        assert doc[key] == current[key]    # what nobody here manages is kept
    assert hr.daemon_config(doc, options, {}) == doc


def test_daemon_filter_reads_text_and_rejects_broken_json():
    assert filters.docker_daemon_config('{"labels": ["a"]}', {"debug": False}) == {"labels": ["a"], "debug": False}
    assert filters.docker_daemon_config("", {"debug": False}) == {"debug": False}
    with pytest.raises(AnsibleFilterError, match="is not valid JSON"):
        filters.docker_daemon_config('{"labels": ["a"],}', {})
    with pytest.raises(AnsibleFilterError, match="not a JSON object"):
        filters.docker_daemon_config("[1, 2]", {})


@pytest.mark.parametrize("driver,level", [("580.159.04", "13.0"), ("580.65.06", "13.0"), ("575.57.08", "12.9"), ("570.124.06", "12.8"),
                                          ("570.86.15", "12.8"), ("550.163.01", "12.4"), ("535.247.01", "12.2"), ("470.256.02", None)])
def test_driver_cuda_levels(driver, level):
    assert hr.driver_cuda(driver) == level


def need(image, cuda):
    return {"image": image, "cuda": cuda}


@pytest.mark.parametrize("version,cc,image,level", [
    # the official images' CUDA levels (vLLM's release notes / Dockerfile CUDA_VERSION per release)
    ("0.26.0", 90, "vllm/vllm-openai:v0.26.0", "13.0"), ("0.20.0", 80, "vllm/vllm-openai:v0.20.0", "13.0"),
    ("0.19.1", 70, "vllm/vllm-openai:v0.19.1", "12.9"), ("0.17.0", 70, "vllm/vllm-openai:v0.17.0", "12.9"),
    ("0.10.1", 80, "vllm/vllm-openai:v0.10.1", "12.8"), ("0.8.5", 80, "vllm/vllm-openai:v0.8.5", "12.4"),
])
def test_the_plan_carries_its_images_cuda_level(version, cc, image, level):
    hw = {"accelerators": [{"index": 0, "vendor": "nvidia", "model": "GPU", "arch": f"sm{cc}", "compute_capability": f"{cc // 10}.{cc % 10}",
                            "memory_mib": 81559, "numa_node": 0}], "numa_cpus": {0: "0-15"}, "cpu_count": 16, "memory_mib": 262144}
    plan = plan_host("h", hw, [{"name": "a", "model": "Qwen/Qwen3-0.6B", "engine": accepting(version)}])
    inst = plan["deployments"][0]["instances"][0]
    assert (inst["image"], inst["image_cuda"], inst["vendor"]) == (image, level, "nvidia")
    assert hr.plan_cuda_needs(plan) == [need(image, level)]
    # an image named by the inventory has the level the inventory gives, or none (never read from its tag)
    own = plan_host("h", hw, [{"name": "a", "model": "Qwen/Qwen3-0.6B", "engine": accepting(version, image="my/vllm:cu128-b3")}])
    assert own["deployments"][0]["instances"][0]["image_cuda"] is None
    given = plan_host("h", hw, [{"name": "a", "model": "Qwen/Qwen3-0.6B",
                                 "engine": accepting(version, image="my/vllm:b3", cuda="12.8")}])
    assert hr.plan_cuda_needs(given) == [need("my/vllm:b3", "12.8")]


def test_min_driver_per_level():
    assert hr.min_driver("13.0") == "580.65.6"
    assert hr.min_driver("12.9") == "575.51.3"
    assert hr.min_driver("12.8") == "570.26"
    with pytest.raises(hr.HostRuntimeError, match="newer than every driver branch"):
        hr.min_driver("14.0")


def test_verdict_too_old_names_both_ways_out():
    v = hr.driver_verdict("535.247.01", [need("vllm/vllm-openai:v0.26.0", "13.0")])
    assert not v["ok"] and v["required"] == "580.65.6" and v["driver_cuda"] == "12.2"
    assert "NVIDIA driver 535.247.01 (CUDA 12.2) is too old" in v["message"]
    assert "CUDA 13.0 needs driver >= 580.65.6 (any CUDA 13.x driver" in v["message"]
    assert "-cu129" in v["message"]


def test_verdict_takes_the_highest_level_and_reports_unknown_images():
    v = hr.driver_verdict("560.35.03", [need("vllm/vllm-openai:v0.26.0-cu129", "12.9"), need("vllm/vllm-openai:v0.10.1", "12.8"),
                                        need("my/vllm:custom1", None)])
    assert v["ok"] and v["required"] == "525.60.13"
    assert any("minor version compatibility (kernels shipped as PTX only" in r for r in v["reasons"])
    assert not hr.driver_verdict("520.61.05", [need("vllm/vllm-openai:v0.10.1", "12.8")])["ok"]
    assert any("my/vllm:custom1: the plan does not know its CUDA level (set engine.cuda)" in r for r in v["reasons"])


def test_verdict_without_driver_and_with_inventory_floor():
    v = hr.driver_verdict(None, [need("vllm/vllm-openai:v0.26.0", "13.0")])
    assert not v["ok"] and "no NVIDIA driver found" in v["message"] and ">= 580.65.6" in v["message"]
    v = hr.driver_verdict("570.86.15", [need("vllm/vllm-openai:v0.26.0", "13.0")], "560.0")
    assert v["ok"] and v["required"] == "560.0"
    assert hr.driver_verdict("570.86.15", [])["ok"]


def test_reference_plans_through_the_driver_check():
    """Seed 001's V100 pair ran vLLM 0.15 (a CUDA 12.9 build) on driver 570 / CUDA 12.8: accepted, with
    the minor-version note; the same driver cannot run a CUDA 13 image. The H200's 580 runs them all."""
    v100 = plan_of("v100_pair")
    assert hr.plan_cuda_needs(v100) == [need("vllm/vllm-openai:v0.15.0", "12.9")]
    verdict = filters.nvidia_driver_verdict("570.86.15", v100)
    assert verdict["ok"] and verdict["driver_cuda"] == "12.8" and "minor version compatibility" in verdict["reasons"][-1]
    assert not filters.nvidia_driver_verdict("570.86.15", [need("vllm/vllm-openai:v0.26.0", "13.0")])["ok"]
    # the driver the lent H200 reported (its captured facts) runs the h100 fleet's CUDA 13 images
    captured = json.loads((pathlib.Path(ROOT) / "tests/fixtures/hardware/h200x1-accelerator-facts/llmfleet_hardware.json").read_text())
    h100 = plan_of("h100")
    assert {n["cuda"] for n in hr.plan_cuda_needs(h100)} == {"13.0"}
    assert filters.nvidia_driver_verdict(captured["driver_version"], h100)["ok"]
    assert not filters.nvidia_driver_verdict("575.57.08", h100)["ok"]


def test_apt_sources():
    assert (hr.apt_source("https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)", "/etc/apt/keyrings/n.asc", "/")
            == "deb [signed-by=/etc/apt/keyrings/n.asc] https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /")
    assert (hr.apt_source("https://download.docker.com/linux/debian", "/etc/apt/keyrings/docker.asc", "bookworm", ["stable"], "amd64")
            == "deb [arch=amd64 signed-by=/etc/apt/keyrings/docker.asc] https://download.docker.com/linux/debian bookworm stable")
    with pytest.raises(hr.HostRuntimeError, match="must start with http"):
        hr.apt_source("download.docker.com/linux/debian", "/k", "bookworm", ["stable"])
    with pytest.raises(hr.HostRuntimeError, match="flat repository"):
        hr.apt_source("http://x", "/k", "/", ["main"])


@pytest.mark.parametrize("machine,deb,cuda", [("x86_64", "amd64", "x86_64"), ("aarch64", "arm64", "sbsa"),
                                              ("amd64", "amd64", "x86_64"), ("arm64", "arm64", "sbsa")])
def test_arch_names_per_layout(machine, deb, cuda):
    # a GH200 (aarch64) host gets Debian's arm64 and NVIDIA's server Arm (sbsa) repository trees
    assert hr.arch_name(machine) == hr.arch_name(machine, "deb") == deb
    assert hr.arch_name(machine, "cuda") == cuda
    assert filters.host_arch(machine, "cuda") == cuda


def test_arch_names_refuse_what_no_repository_has():
    with pytest.raises(hr.HostRuntimeError, match="architecture 'ppc64le' is not supported"):
        hr.arch_name("ppc64le")
    with pytest.raises(hr.HostRuntimeError, match="unknown package layout 'rpm'"):
        hr.arch_name("x86_64", "rpm")
    with pytest.raises(AnsibleFilterError, match="host_arch: architecture '' is not supported"):
        filters.host_arch(None)


def test_packages_and_repo_paths():
    assert hr.pinned(["nvidia-container-toolkit", "libnvidia-container1"], "1.18.1-1") == [
        "nvidia-container-toolkit=1.18.1-1", "libnvidia-container1=1.18.1-1"]
    assert hr.pinned(["docker.io"], "") == ["docker.io"]
    assert hr.driver_packages("Ubuntu", "580") == ["nvidia-headless-580-server", "nvidia-utils-580-server"]
    assert hr.driver_packages("Debian", "580") == ["cuda-drivers-580"]
    with pytest.raises(hr.HostRuntimeError, match="three digits"):
        hr.driver_packages("Debian", "latest")
    assert hr.cuda_repo_path("Ubuntu", "24.04") == "ubuntu2404"
    assert hr.cuda_repo_path("Debian", "12.8") == "debian12"
    assert hr.codename("Debian", "12.8") == "bookworm" and hr.codename("Ubuntu", "22.04", "jammy") == "jammy"


def test_dcu_missing_lists_every_piece_in_order_with_where_from():
    checks = hr.dcu_checks(hr.plan_host_needs(None))
    assert [c["path"] for c in checks] == ["/opt/hyhal/bin/hy-smi", "/opt/dtk/env.sh", "/dev/kfd", "/dev/dri/renderD*", "/dev/mkfd"]
    everything = {"/opt/hyhal/bin/hy-smi": {"exists": True}, "/opt/dtk/env.sh": {"exists": True},
                  "/dev/kfd": {"exists": True, "ischr": True}, "/dev/mkfd": {"exists": True, "ischr": True}}
    assert hr.dcu_missing(checks, everything, render_nodes=True) == []
    # a regular file where the device node should be is not the node; an archive to install counts as present
    found = dict(everything, **{"/opt/dtk/env.sh": {"exists": False}, "/dev/mkfd": {"exists": True, "ischr": False},
                                "/opt/hyhal/bin/hy-smi": {"exists": False}})
    missing = hr.dcu_missing(checks, found, render_nodes=False, provided=["hyhal"])
    assert [m.split(" is missing")[0] for m in missing] == ["/opt/dtk/env.sh", "/dev/dri/renderD*", "/dev/mkfd"]
    assert "dcu_runtime_dtk_archive_url" in missing[0] and "field report 003" in missing[2]
    # through the filter, with a looped stat task's results as the role registers them
    results = [{"item": c, "stat": found.get(c["path"], {})} for c in checks if c["kind"] != "render"]
    assert filters.dcu_missing(checks, results, True, ["hyhal", "dtk"]) == [missing[2]]


def test_the_dcu_checks_follow_the_plans_hyhal_folder_and_devices():
    """The planner mounts llmfleet_hyhal_dir into the engines: dcu_runtime looks for hy-smi there, and for exactly
    the device nodes the plan gives the containers."""
    needs = hr.plan_host_needs(plan_of("dcu_k100", hyhal_dir="/usr/local/hyhal-2.4"))
    assert needs["hyhal_dir"] == "/usr/local/hyhal-2.4" and needs["mounts"] == ["/usr/local/hyhal-2.4"]
    assert needs["devices"] == ["/dev/kfd", "/dev/dri", "/dev/mkfd"] and needs["docker"] is True
    checks = hr.dcu_checks(needs)
    assert checks[0]["path"] == "/usr/local/hyhal-2.4/bin/hy-smi" and "/usr/local/hyhal-2.4/bin/hy-smi" in checks[0]["how"]
    assert [(c["name"], c["kind"]) for c in checks[2:]] == [("/dev/kfd", "chr"), ("/dev/dri", "render"), ("/dev/mkfd", "chr")]
    # no plan yet: the planner's own default folder, Hygon's device nodes
    assert hr.plan_host_needs(None, hyhal_dir="/srv/hyhal")["hyhal_dir"] == "/srv/hyhal"
    assert hr.plan_host_needs({})["hyhal_dir"] == "/opt/hyhal"
    # a device the plan gives that has no sentence of its own is still looked for
    extra = hr.dcu_checks({"devices": ["/dev/kfd", "/dev/dri", "/dev/mkfd", "/dev/hydcu0"]})
    assert extra[-1] == {"name": "/dev/hydcu0", "path": "/dev/hydcu0", "kind": "chr", "how": hr.DCU_DEVICE_HOW}


def test_a_hyhal_archive_becomes_the_planned_folder():
    assert hr.hyhal_unpack("/opt/hyhal") == {"dest": "/opt", "extra_opts": []}
    assert hr.hyhal_unpack("/usr/local/hyhal-2.4/") == {"dest": "/usr/local/hyhal-2.4", "extra_opts": ["--strip-components=1"]}
    assert filters.hyhal_unpack("") == {"dest": "/opt", "extra_opts": []}
    with pytest.raises(AnsibleFilterError, match="must be an absolute folder path"):
        filters.hyhal_unpack("hyhal")


def test_docker_is_needed_where_the_plan_runs_containers_and_not_for_venvs():
    gpu = hr.plan_host_needs(plan_of("h100"))
    assert gpu["docker"] is True and gpu["containers"] and not gpu["venvs"] and gpu["devices"] == []
    assert "in containers" in gpu["why"]
    cpu = hr.plan_host_needs(plan_host("localhost", CPU_HW, CPU_QWEN3_SMALL))
    assert cpu["docker"] is False and cpu["venvs"] and not cpu["containers"]
    assert "from a venv" in cpu["why"] and "no container needs it" in cpu["why"]
    # nothing planned yet: as before plans existed, an accelerator host gets the engine
    assert hr.plan_host_needs(None)["docker"] is True and "no plan for this host yet" in hr.plan_host_needs(None)["why"]
    # vllm_runtime forced to systemd on a GPU plan that names only an image: said before anything changes
    with pytest.raises(hr.HostRuntimeError, match="has none"):
        hr.plan_host_needs(plan_of("h100"), "systemd")
    # through the filter, as prepare.yml calls it
    assert filters.host_prepare_needs(plan_of("h100"))["docker"] is True
    with pytest.raises(AnsibleFilterError, match="host_prepare_needs: .*vllm_runtime"):
        filters.host_prepare_needs(plan_of("h100"), "podman")


def test_an_amd_plans_containers_get_rocm_nodes_and_no_hyhal():
    plan = plan_host("mi300x-01", MI300X_HW, [{"name": "qwen8b", "model": "Qwen/Qwen3-8B",
                                               "engine": accepting("0.10.1", image="rocm/vllm:rocm6.4.1_vllm_0.10.1_20250909")}])
    assert not plan["errors"], plan["errors"]
    needs = hr.plan_host_needs(plan)
    assert needs["devices"] == ["/dev/kfd", "/dev/dri"] and needs["mounts"] == [] and needs["docker"] is True


def test_vendors_of_profiles():
    assert hr.vendors_of(hardware_profile("h200x1")) == ["nvidia"]
    assert hr.vendors_of(hardware_profile("k100ai_8x_pcie")) == ["hygon"]
    assert hr.vendors_of({"accelerators": []}) == []
    assert json.dumps(filters.nvidia_runtime_config(default=True)) == \
        '{"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}}, "default-runtime": "nvidia"}'


def test_daemon_options_from_the_roles_variables():
    assert hr.daemon_options([], "100m", 3) == {"log-driver": "json-file", "log-opts": {"max-size": "100m", "max-file": "3"}}
    opts = hr.daemon_options(["https://m.example"], "50m", 5, "/srv/docker", {"log-opts": {"compress": "true"}, "debug": None})
    assert opts == {"log-driver": "json-file", "log-opts": {"max-size": "50m", "max-file": "5", "compress": "true"},
                    "registry-mirrors": ["https://m.example"], "data-root": "/srv/docker", "debug": None}
    # a None in the options removes the key from what the file had
    assert hr.daemon_config({"debug": True, "labels": ["a"]}, opts, {}).get("debug", "gone") == "gone"
