"""Verify container_runtime (through playbooks/prepare.yml) on a CPU-only systemd host, installed from
a stand-in of Docker's apt repository (see molecule.yml): repository, pin and hold, and the running
engine (Debian's real docker.io under the stand-in docker-ce) with the merged daemon.json."""

import json

testinfra_hosts = ["ansible://llmfleet-docker-host"]


def daemon_json(host):
    return json.loads(host.file("/etc/docker/daemon.json").content_string)


def docker_info(host):
    return json.loads(host.check_output("docker info --format '{{json .}}'"))


def test_docker_repository_signed_by_its_keyring(host):
    line = host.file("/etc/apt/sources.list.d/docker.list").content_string.strip()
    assert line == ("deb [arch=amd64 signed-by=/etc/apt/keyrings/docker.asc] "
                    "http://llmfleet-standin:8080/linux/debian bookworm stable")
    key = host.file("/etc/apt/keyrings/docker.asc")
    assert key.mode == 0o644 and "BEGIN PGP PUBLIC KEY BLOCK" in key.content_string


def test_engine_pinned_held_running_enabled(host):
    # the repository also holds 5:28.5.2: the pin decided
    assert "5:28.5.2-1~debian.12~bookworm" in host.check_output("apt-cache madison docker-ce")
    held = host.check_output("apt-mark showhold").split()
    for name in ("docker-ce", "docker-ce-cli"):
        assert host.package(name).version == "5:27.5.1-1~debian.12~bookworm"
        assert name in held
    assert host.package("containerd.io").is_installed
    service = host.service("docker")
    assert service.is_running
    assert service.is_enabled


def test_daemon_json_is_merged_not_overwritten(host):
    doc = daemon_json(host)
    # kept from the file the operator had
    assert doc["labels"] == ["rack=a1"]
    assert doc["log-opts"]["labels"] == "rack"
    # the inventory's settings
    assert doc["log-driver"] == "json-file"
    assert doc["log-opts"]["max-size"] == "50m"
    assert doc["log-opts"]["max-file"] == "5"
    assert doc["registry-mirrors"] == ["https://mirror.llmfleet.invalid"]
    assert doc["data-root"] == "/srv/docker"
    assert doc["live-restore"] is True
    # a CPU-only host gets no vendor runtime
    assert "runtimes" not in doc
    f = host.file("/etc/docker/daemon.json")
    assert f.user == "root" and f.mode == 0o644


def test_running_engine_uses_it(host):
    info = docker_info(host)
    assert info["DockerRootDir"] == "/srv/docker"
    assert [m.rstrip("/") for m in info["RegistryConfig"]["Mirrors"]] == ["https://mirror.llmfleet.invalid"]
    assert info["LoggingDriver"] == "json-file"
    assert "rack=a1" in info["Labels"]
    assert info["LiveRestoreEnabled"] is True
