"""Verify container_runtime (through playbooks/prepare.yml) on a CPU-only systemd host: the real
Docker engine from Debian runs with the merged daemon.json."""

import json

testinfra_hosts = ["ansible://llmfleet-docker-host"]


def daemon_json(host):
    return json.loads(host.file("/etc/docker/daemon.json").content_string)


def docker_info(host):
    return json.loads(host.check_output("docker info --format '{{json .}}'"))


def test_engine_installed_running_enabled(host):
    assert host.package("docker.io").is_installed
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


def test_no_docker_apt_repository_for_the_distribution_source(host):
    assert not host.file("/etc/apt/sources.list.d/docker.list").exists
