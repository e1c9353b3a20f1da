"""accelerator_facts through Ansible itself, with stand-in vendor tools on PATH.

No GPU exists on the machines these tests run on, so `nvidia-smi` and `hy-smi` here are small
shell scripts that STAND IN for the vendor tools: they print real captured outputs from
tests/fixtures/hardware/ (the H200 ones from the lent H200, the others from public reports)
for the exact command lines the module runs. Everything else (Ansible, the module, sysfs of
this machine) is real.
"""

from __future__ import annotations

import json
import os
import pathlib

import pytest
from llmfleet_testing import ROOT, run_ansible, stand_in_script

from ansible_collections.llmfleet.serving.plugins.module_utils._hardware import (
    expand_cpulist, parse_cpu_flags, physical_cores, read_numa_cpus, read_thread_siblings)

FIXTURES = pathlib.Path(ROOT) / "tests" / "fixtures" / "hardware"
H200_RAW = json.loads((FIXTURES / "h200x1-accelerator-facts" / "raw.json").read_text())
MODULE = "llmfleet.serving.accelerator_facts"


def fixture(name: str) -> str:
    return "\n".join(line for line in (FIXTURES / name).read_text().split("\n") if not line.startswith("# source"))


def stand_in(bin_dir: pathlib.Path, tool: str, outputs: dict, failures: dict | None = None) -> None:
    """Write `tool` that prints outputs[args] for the exact argument string, or fails like the
    real tool would for failures[args] = (exit code, message)."""
    data = bin_dir / f"{tool}.d"
    data.mkdir(exist_ok=True)
    paths = {}
    for i, (args, text) in enumerate(outputs.items()):
        (data / str(i)).write_text(text)
        paths[args] = str(data / str(i))
    script = bin_dir / tool
    script.write_text(stand_in_script(tool, paths, failures))
    script.chmod(0o755)


def args_of(command: str) -> str:
    return command.split(" ", 1)[1]


def gather(bin_dir: pathlib.Path, *extra: str) -> dict:
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    result = run_ansible("ansible", "localhost", "-c", "local", "-m", MODULE, *extra, env=env)
    return result["plays"][0]["tasks"][0]["hosts"]["localhost"]


@pytest.fixture
def bin_dir(tmp_path):
    path = tmp_path / "bin"
    path.mkdir()
    return path


def test_real_h200_outputs(bin_dir):
    stand_in(bin_dir, "nvidia-smi", {args_of(cmd): out for cmd, out in H200_RAW["commands"].items()})
    host = gather(bin_dir)
    facts = host["ansible_facts"]["llmfleet_hardware"]
    assert host["changed"] is False
    assert facts["accelerators"] == [{"index": 0, "vendor": "nvidia", "model": "NVIDIA H200", "arch": "sm90",
                                      "compute_capability": "9.0", "memory_mib": 143771, "numa_node": 0}]
    assert facts["links"] == [["X"]] and facts["driver_version"] == "580.159.04" and facts["cuda_version"] == "13.0"
    assert facts["details"]["0"]["architecture"] == "Hopper"
    # this machine's own CPUs and memory, read from sysfs and /proc
    with open("/sys/devices/system/cpu/online", encoding="ascii") as handle:
        online = handle.read().strip()
    assert facts["cpu_count"] == len(expand_cpulist(online))
    with open("/sys/devices/system/node/node0/cpulist", encoding="ascii") as handle:
        assert facts["numa_cpus"]["0"] == handle.read().strip()
    # and its CPU features and physical cores, from /proc/cpuinfo and sysfs
    with open("/proc/cpuinfo", encoding="utf-8") as handle:
        assert facts.get("cpu_flags") == parse_cpu_flags(handle.read())
    cores = physical_cores(read_numa_cpus(), read_thread_siblings())
    assert facts.get("numa_cores") == ({str(n): c for n, c in cores.items()} or None)
    assert any(line.startswith("CPU: features ") for line in host["summary"])
    checked = gather(bin_dir, "--check")
    assert checked["ansible_facts"] == host["ansible_facts"] and checked["changed"] is False


DGX1_QUERY = "".join(f"{i}, Tesla V100-SXM2-32GB, GPU-{i:08x}, 00000000:{0x1a + i:02X}:00.0, 32768, 7.0, 570.86.15\n" for i in range(8))


def test_dgx1_cube_mesh(bin_dir):
    stand_in(bin_dir, "nvidia-smi", {
        "--query-gpu=index,name,uuid,pci.bus_id,memory.total,compute_cap,driver_version --format=csv,noheader,nounits": DGX1_QUERY,
        "topo -m": fixture("nvidia-smi-topo-dgx1-v100-hybrid-cube-mesh.txt"),
    }, failures={"-q -x": (6, "Unable to determine the device handle")})
    host = gather(bin_dir)
    facts = host["ansible_facts"]["llmfleet_hardware"]
    assert [a["arch"] for a in facts["accelerators"]] == ["sm70"] * 8
    assert facts["links"][0] == ["X", "NV1", "NV1", "NV2", "NV2", "SYS", "SYS", "SYS"]
    assert facts["groups"]["nvlink_cliques"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert any("nvidia-smi -q -x failed (exit code 6)" in w for w in host.get("warnings", []))


def test_old_driver_without_compute_cap(bin_dir):
    query_old = "".join(f"{i}, Tesla V100-SXM2-32GB, GPU-{i}, 00000000:{0x1a + i:02X}:00.0, 32768, 460.32.03\n" for i in range(2))
    stand_in(bin_dir, "nvidia-smi", {
        "--query-gpu=index,name,uuid,pci.bus_id,memory.total,driver_version --format=csv,noheader,nounits": query_old,
        "topo -m": fixture("nvidia-smi-topo-2x-gtx1080ti-consumer-phb.txt"),
    }, failures={
        "--query-gpu=index,name,uuid,pci.bus_id,memory.total,compute_cap,driver_version --format=csv,noheader,nounits":
            (2, 'Field "compute_cap" is not a valid field to query.'),
        "-q -x": (2, "Invalid combination of input arguments."),
    })
    facts = gather(bin_dir)["ansible_facts"]["llmfleet_hardware"]
    assert [(a["compute_capability"], a["arch"]) for a in facts["accelerators"]] == [("7.0", "sm70")] * 2
    assert facts["links"] == [["X", "PHB"], ["PHB", "X"]]


def test_driver_not_loaded_fails_with_what_to_do(bin_dir):
    message = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    stand_in(bin_dir, "nvidia-smi", {}, failures={
        "--query-gpu=index,name,uuid,pci.bus_id,memory.total,compute_cap,driver_version --format=csv,noheader,nounits": (9, message)})
    host = gather(bin_dir)
    assert host["failed"] is True
    assert host["msg"].startswith("nvidia-smi --query-gpu=") and message in host["msg"] and "Is the driver loaded?" in host["msg"]


def test_garbage_output_names_command_and_line(bin_dir):
    outputs = {args_of(cmd): out for cmd, out in H200_RAW["commands"].items()}
    outputs["topo -m"] = "\tGPU0\tCPU Affinity\nGPU0\t X \tgarbage!\n"
    stand_in(bin_dir, "nvidia-smi", outputs)
    host = gather(bin_dir)
    assert host["failed"] is True
    assert host["msg"] == "nvidia-smi topo -m: CPU affinity 'garbage!' is not a CPU list (line 2: 'GPU0\\t X \\tgarbage!')"
    assert "Traceback" not in host.get("exception", "")  # a clear message, never a traceback


def test_hygon_k100ai(bin_dir):
    stand_in(bin_dir, "hy-smi", {
        "--showproductname": fixture("hy-smi-a-cardseries-excerpt-k100ai-8x.txt"),
        "--showmeminfo vram": fixture("hy-smi-showmemavailable-k100ai-8x.txt"),
        "--showtopo": fixture("hy-smi-showtopo-8x-hcu-pcie.txt"),
    })
    host = gather(bin_dir, "-a", '{"vendors": ["nvidia", "hygon"]}')
    facts = host["ansible_facts"]["llmfleet_hardware"]
    assert [(a["model"], a["arch"], a["memory_mib"], a["numa_node"]) for a in facts["accelerators"]] == [("K100_AI", "gfx928", 65438, 0)] * 8
    assert facts["links"][0] == ["X"] + ["NODE"] * 7
    assert facts["groups"]["numa_domains"] == {"0": list(range(8))}
    assert facts["source"] == "hy-smi"


def test_hy_smi_found_in_the_planned_hyhal_folder_off_path(tmp_path):
    """dcu_runtime passes the folder the plan mounts (llmfleet_hyhal_dir/bin) as search_paths: hy-smi is found there
    although it is not on PATH; without it, the same host reads as CPU-only."""
    hyhal_bin = tmp_path / "usr-local-hyhal" / "bin"
    hyhal_bin.mkdir(parents=True)
    stand_in(hyhal_bin, "hy-smi", {
        "--showproductname": fixture("hy-smi-a-cardseries-excerpt-k100ai-8x.txt"),
        "--showmeminfo vram": fixture("hy-smi-showmemavailable-k100ai-8x.txt"),
        "--showtopo": fixture("hy-smi-showtopo-8x-hcu-pcie.txt"),
    })
    empty = tmp_path / "empty"
    empty.mkdir()
    found = gather(empty, "-a", json.dumps({"vendors": ["hygon"], "search_paths": [str(hyhal_bin)]}))
    assert found["ansible_facts"]["llmfleet_hardware"]["source"] == "hy-smi"
    assert len(found["ansible_facts"]["llmfleet_hardware"]["accelerators"]) == 8
    assert gather(empty, "-a", json.dumps({"vendors": ["hygon"]}))["ansible_facts"]["llmfleet_hardware"]["accelerators"] == []


def test_tool_and_sysfs_disagree_on_numa(bin_dir):
    """hy-smi places cards 4-7 on NUMA node 1, which this (single-node) machine does not have."""
    stand_in(bin_dir, "hy-smi", {
        "--showproductname": fixture("hy-smi-a-cardseries-excerpt-k100ai-8x.txt"),
        "--showmeminfo vram": fixture("hy-smi-showmemavailable-k100ai-8x.txt"),
        "--showtopo": fixture("hy-smi-showtopo-numa-only-8x-hcu.txt"),
    })
    if len(os.listdir("/sys/devices/system/node")) and os.path.exists("/sys/devices/system/node/node1"):
        pytest.fail("this test needs a single-NUMA-node machine (the CI machines are)")
    host = gather(bin_dir, "-a", '{"vendors": ["hygon"]}')
    assert host["failed"] is True
    assert "accelerator 4 is on NUMA node 1, which numa_cpus does not list" in host["msg"]
