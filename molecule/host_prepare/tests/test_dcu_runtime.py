"""Verify dcu_runtime (through playbooks/plan.yml and prepare.yml) on a host declared as field report 003's
K100_AI server, its hyhal folder moved to /usr/local/hyhal-2.4 (llmfleet_hyhal_dir). hyhal and DTK come from STAND-IN
tarballs, the device nodes are stand-ins made with mknod (see molecule.yml); unpacking, links, users, groups and
Docker are real."""

import json
import os
import pathlib

testinfra_hosts = ["ansible://llmfleet-dcu-host"]
HYHAL = "/usr/local/hyhal-2.4"


def test_hyhal_unpacked_where_the_plan_mounts_it_and_hy_smi_lists_the_dcus(host):
    plan = json.loads((pathlib.Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "plans" / "llmfleet-dcu-host.json").read_text())
    instances = [i for d in plan["deployments"] for i in d["instances"]]
    assert instances and all(i["access"]["mounts"] == [{"source": HYHAL, "target": HYHAL, "type": "bind", "read_only": True}]
                             for i in instances)
    assert host.file(f"{HYHAL}/bin/hy-smi").mode & 0o111
    assert not host.file("/opt/hyhal").exists, "hyhal goes where the plan mounts it, nowhere else"
    out = host.check_output(f"{HYHAL}/bin/hy-smi --showproductname")
    assert "K100_AI" in out


def test_dtk_linked(host):
    link = host.file("/opt/dtk")
    assert link.is_symlink and link.linked_to == "/opt/dtk-26.04"
    assert host.file("/opt/dtk/env.sh").exists
    assert host.run("bash -c '. /opt/dtk/env.sh && echo $ROCM_PATH'").stdout.strip() == "/opt/dtk-26.04"


def test_service_user_in_device_groups(host):
    user = host.user("llmfleet-vllm")
    assert user.exists
    assert {"video", "render"} <= set(user.groups)
    assert user.shell == "/usr/sbin/nologin"


def test_docker_without_vendor_runtime(host):
    assert host.service("docker").is_running
    doc = json.loads(host.file("/etc/docker/daemon.json").content_string)
    assert "runtimes" not in doc


def test_device_nodes_left_as_found(host):
    for path in ("/dev/kfd", "/dev/mkfd", "/dev/dri/renderD128"):
        assert host.run(f"test -c {path}").rc == 0, path
