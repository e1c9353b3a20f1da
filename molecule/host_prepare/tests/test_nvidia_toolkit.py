"""Verify nvidia_toolkit + container_runtime (site.yml's plan and prepare) on a planned H200 host.

The packages come from STAND-IN repositories (tests/lab/standin_repo.py) that carry NVIDIA's package
names and versions; apt, signed-by keyrings, pins, holds, dockerd and daemon.json are real."""

import json

testinfra_hosts = ["ansible://llmfleet-nvidia-host"]
TOOLKIT = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools", "libnvidia-container1"]


def test_repositories_signed_by_their_own_keyrings(host):
    toolkit = host.file("/etc/apt/sources.list.d/nvidia-container-toolkit.list").content_string.strip()
    assert toolkit == ("deb [signed-by=/etc/apt/keyrings/nvidia-container-toolkit.asc] "
                       "http://llmfleet-standin:8080/libnvidia-container/stable/deb/$(ARCH) /")
    cuda = host.file("/etc/apt/sources.list.d/nvidia-cuda.list").content_string.strip()
    assert cuda == "deb [signed-by=/etc/apt/keyrings/nvidia-cuda.asc] http://llmfleet-standin:8080/compute/cuda/repos/debian12/x86_64 /"
    for keyring in ("/etc/apt/keyrings/nvidia-container-toolkit.asc", "/etc/apt/keyrings/nvidia-cuda.asc"):
        key = host.file(keyring)
        assert key.mode == 0o644 and key.user == "root"
        assert "BEGIN PGP PUBLIC KEY BLOCK" in key.content_string
    # apt trusts these repositories only through signed-by: no key in the global trusted keyring
    assert not host.file("/etc/apt/trusted.gpg").exists


def test_toolkit_pinned_and_held(host):
    # the repository also holds 1.18.1-1: the pin, not "newest", decided
    candidates = host.check_output("apt-cache madison nvidia-container-toolkit")
    assert "1.18.1-1" in candidates and "1.17.8-1" in candidates
    held = host.check_output("apt-mark showhold").split()
    for name in TOOLKIT:
        assert host.package(name).version == "1.17.8-1", name
        assert name in held
    assert "1.17.8" in host.check_output("nvidia-ctk --version")


def test_driver_branch_installed_and_read(host):
    assert host.package("cuda-drivers-580").is_installed
    assert not host.package("cuda-drivers-535").is_installed
    out = host.check_output("nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total,compute_cap,driver_version "
                            "--format=csv,noheader,nounits")
    assert "NVIDIA H200" in out and "580.159.04" in out


def test_daemon_json_has_the_nvidia_runtime(host):
    doc = json.loads(host.file("/etc/docker/daemon.json").content_string)
    assert doc["runtimes"] == {"nvidia": {"path": "nvidia-container-runtime", "args": []}}
    assert "default-runtime" not in doc
    assert doc["log-opts"] == {"max-size": "100m", "max-file": "3"}


def test_docker_runs_with_it(host):
    assert host.service("docker").is_running
    runtimes = json.loads(host.check_output("docker info --format '{{json .Runtimes}}'"))
    assert runtimes["nvidia"]["path"] == "nvidia-container-runtime"
