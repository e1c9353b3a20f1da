"""Parsers and schema of accelerator facts, on real tool outputs (tests/fixtures/hardware/)."""

from __future__ import annotations

import json
import pathlib

import pytest

from ansible_collections.llmfleet.serving.plugins.module_utils import _hardware as hw
from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import PROFILE_NAMES, hardware_profile

FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "fixtures" / "hardware"


def fixture(name: str) -> str:
    """A fixture's tool output, without the `# source:` provenance line the files start with."""
    text = (FIXTURES / name).read_text()
    lines = text.split("\n")
    while lines and lines[0].startswith("# source"):
        lines.pop(0)
    return "\n".join(lines)


# The built-in DGX-1 profile's matrix was transcribed from this very fixture: the parser must agree.
DGX1 = hardware_profile("dgx1_v100_32gb")["links"]


def full(n: int, word: str) -> list:
    return [["X" if i == j else word for j in range(n)] for i in range(n)]


# --- nvidia-smi topo -m ----------------------------------------------------------------------

TOPO_CASES = {
    # file: (links, cpu affinity of GPU0 and last GPU, NUMA affinity per GPU)
    "nvidia-smi-topo-dgx1-v100-hybrid-cube-mesh.txt": (DGX1, ("0-11,24-35", "12-23,36-47"), [None] * 8),
    "nvidia-smi-topo-8x-h100-sxm-nvswitch.txt": (full(8, "NV18"), ("0-47,96-143", "48-95,144-191"), [0] * 4 + [1] * 4),
    "nvidia-smi-topo-8x-a100-sxm.txt": (full(8, "NV12"), ("0-103", "0-103"), [0] * 8),
    "nvidia-smi-topo-8x-rtx4090-pcie.txt": (full(8, "SYS"), ("0-55,112-167", "56-111,168-223"), [0] * 4 + [1] * 4),
    "nvidia-smi-topo-2x-rtx3090-2numa-sys-tabs.txt": (full(2, "SYS"), ("0-7,16-23", "8-15,24-31"), [None, 1]),
    "nvidia-smi-topo-2x-rtx3090-consumer-phb.txt": (full(2, "PHB"), ("0-15", "0-15"), [0, 0]),
    "nvidia-smi-topo-2x-gtx1080ti-consumer-phb.txt": (full(2, "PHB"), ("0-11", "0-11"), [None, None]),
    "h200x1/nvidia-smi-topo-m.txt": ([["X"]], ("0-15", "0-15"), [0]),
}


@pytest.mark.parametrize("name", sorted(TOPO_CASES))
def test_topo_fixtures(name):
    links, (first_cpus, last_cpus), numa = TOPO_CASES[name]
    topo = hw.parse_nvidia_topo(fixture(name))
    assert topo["links"] == links
    assert topo["cpu_affinity"][0] == first_cpus and topo["cpu_affinity"][-1] == last_cpus
    assert topo["numa_affinity"] == numa


def test_topo_header_with_ansi_escapes_as_the_h200_driver_prints_it():
    text = fixture("h200x1/nvidia-smi-topo-m.txt")
    assert "\x1b[4m" in text
    assert hw.parse_nvidia_topo(text)["links"] == [["X"]]


@pytest.mark.parametrize("name", ["nvidia-smi-topo-8x-h100-sxm-nvswitch.txt", "nvidia-smi-topo-dgx1-v100-hybrid-cube-mesh.txt",
                                  "nvidia-smi-topo-8x-rtx4090-pcie.txt"])
def test_truncated_topo_fails_with_command(name):
    lines = fixture(name).splitlines()
    header = next(i for i, line in enumerate(lines) if line.split() and line.split()[0] == "GPU0")
    truncated = "\n".join(lines[: header + 4])
    with pytest.raises(hw.HardwareError, match=r"^nvidia-smi topo -m: found 3 GPU rows for 8 GPU columns"):
        hw.parse_nvidia_topo(truncated)


def test_cut_row_names_the_line():
    full_row = "GPU3    NV18    NV18    NV18     X      NV18    NV18    NV18    NV18"
    text = fixture("nvidia-smi-topo-8x-h100-sxm-nvswitch.txt").replace(full_row, "GPU3    NV18    NV18")
    with pytest.raises(hw.HardwareError) as err:
        hw.parse_nvidia_topo(text)
    assert "row has 2 link cells for 8 columns" in str(err.value) and "'GPU3    NV18    NV18" in str(err.value)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("GPU2    NV18    NV18     X ", "GPU2    NV18    QPI      X ", "unknown link word 'QPI' between GPU2 and GPU1"),
        ("GPU1    NV18     X ", "GPU1    NV18    NV18", "GPU1 must link to itself with X"),
        ("GPU0     X      NV18", "GPU0     X      NV12", "not symmetric"),
        ("0-47,96-143     0", "0-47,96-143     zero", "NUMA affinity 'zero' is not a node number"),
    ],
)
def test_corrupted_topo_names_the_problem(old, new, message):
    text = fixture("nvidia-smi-topo-8x-h100-sxm-nvswitch.txt").replace(old, new, 1)
    assert text != fixture("nvidia-smi-topo-8x-h100-sxm-nvswitch.txt")
    with pytest.raises(hw.HardwareError, match=message):
        hw.parse_nvidia_topo(text)


def test_garbage_is_not_a_topology():
    with pytest.raises(hw.HardwareError, match="no header row starting with GPU0"):
        hw.parse_nvidia_topo("Segmentation fault\n")


# --- nvidia-smi --query-gpu and -q -x ---------------------------------------------------------

def test_query_with_header_in_any_field_order():
    rows = hw.parse_nvidia_query(fixture("nvidia-smi-query-gpu-computecap-2x-titanv-rtx5880.txt"))
    assert [(r["index"], r["name"], r["compute_cap"]) for r in rows] == [
        ("0", "NVIDIA TITAN V", "7.0"), ("1", "NVIDIA RTX 5880 Ada Generation", "8.9")]


def test_query_a100_with_units():
    rows = hw.parse_nvidia_query(fixture("nvidia-smi-query-gpu-computecap-4x-a100-sxm4-40gb.txt"))
    accs = hw.nvidia_accelerators(rows, None, None, {})[0]
    assert [a["memory_mib"] for a in accs] == [40960] * 4
    assert {a["arch"] for a in accs} == {"sm80"}


def test_query_noheader_nounits():
    text = "0, Tesla V100-SXM2-32GB, GPU-1, 00000000:1A:00.0, 32768, 7.0, 570.86.15\n"
    [row] = hw.parse_nvidia_query(text)
    assert row["memory.total"] == "32768" and row["pci.bus_id"] == "00000000:1A:00.0"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0, NVIDIA H200, GPU-x\n", "expected 7 comma-separated values"),
        ("zero, a, b, c, d, e, f\n", "GPU index 'zero' is not a number"),
        ("", "printed no GPU rows"),
    ],
)
def test_query_garbage(text, message):
    with pytest.raises(hw.HardwareError, match=message):
        hw.parse_nvidia_query(text)


def test_old_driver_without_compute_cap_uses_the_name():
    rows = hw.parse_nvidia_query("0, Tesla V100-SXM2-32GB, GPU-1, 00000000:1A:00.0, 32768, 470.82.01\n", hw.NVIDIA_QUERY_FIELDS_OLD)
    [acc] = hw.nvidia_accelerators(rows, None, None, {})[0]
    assert (acc["arch"], acc["compute_capability"]) == ("sm70", "7.0")


def test_unknown_gpu_without_compute_cap_asks_for_declaration():
    rows = hw.parse_nvidia_query("0, Mystery GPU, GPU-1, 00000000:1A:00.0, 1024, 470.82.01\n", hw.NVIDIA_QUERY_FIELDS_OLD)
    with pytest.raises(hw.HardwareError, match="declare llmfleet_hardware"):
        hw.nvidia_accelerators(rows, None, None, {})


@pytest.mark.parametrize(("name", "cc"), [("NVIDIA H200", "9.0"), ("NVIDIA GeForce RTX 4090", "8.9"), ("Tesla T4", "7.5"),
                                          ("NVIDIA A100-SXM4-80GB", "8.0"), ("NVIDIA A10", "8.6"), ("NVIDIA B200", "10.0"),
                                          ("NVIDIA GeForce RTX 5090", "12.0"), ("NVIDIA L40S", "8.9"), ("NVIDIA H20", "9.0")])
def test_cc_from_name(name, cc):
    assert hw.nvidia_cc_from_name(name) == cc


def test_xml_of_the_real_h200():
    xml = hw.parse_nvidia_xml(fixture("h200x1/nvidia-smi-q.xml"))
    assert xml["driver_version"] == "580.159.04" and xml["cuda_version"] == "13.0"
    assert xml["gpus"] == {"00000000:00:06.0": {"architecture": "Hopper", "mig": False, "memory_total": "143771 MiB"}}


def test_truncated_xml_names_the_line():
    text = "\n".join(fixture("h200x1/nvidia-smi-q.xml").splitlines()[:40])
    with pytest.raises(hw.HardwareError, match=r"^nvidia-smi -q -x: is not well-formed XML"):
        hw.parse_nvidia_xml(text)


def test_vm_pci_numa_minus_one_falls_back_to_topo():
    rows = hw.parse_nvidia_query(fixture("h200x1/nvidia-smi-query-gpu.csv"))
    topo = hw.parse_nvidia_topo(fixture("h200x1/nvidia-smi-topo-m.txt"))
    [acc], details = hw.nvidia_accelerators(rows, topo, None, pci_numa={})
    assert acc["numa_node"] == 0
    [acc] = hw.nvidia_accelerators(rows, topo, None, pci_numa={"0000:00:06.0": 1})[0]
    assert acc["numa_node"] == 1
    assert details["0"]["pci_bus_id"] == "00000000:00:06.0"


# --- the real H200 capture: raw outputs -> exactly the facts the module returned there ----------

def test_real_h200_capture_rebuilds_exactly():
    base = FIXTURES / "h200x1-accelerator-facts"
    raw = json.loads((base / "raw.json").read_text())
    expected = json.loads((base / "llmfleet_hardware.json").read_text())
    rebuilt = json.loads(json.dumps(hw.assemble(raw), sort_keys=True))
    assert rebuilt == expected
    assert hw.summary_lines(hw.assemble(raw)) == json.loads((base / "summary.json").read_text())
    assert expected["accelerators"] == [{"index": 0, "vendor": "nvidia", "model": "NVIDIA H200", "arch": "sm90",
                                         "compute_capability": "9.0", "memory_mib": 143771, "numa_node": 0}]


# --- Hygon DCU and AMD -------------------------------------------------------------------------

def test_k100ai_from_hy_smi():
    raw = {
        "commands": {
            "hy-smi --showproductname": fixture("hy-smi-a-cardseries-excerpt-k100ai-8x.txt"),
            "hy-smi --showmeminfo vram": fixture("hy-smi-showmemavailable-k100ai-8x.txt"),
            "hy-smi --showtopo": fixture("hy-smi-showtopo-numa-only-8x-hcu.txt"),
        },
        "host": {"numa_cpus": {0: "0-31,64-95", 1: "32-63,96-127"}, "cpu_count": 128, "memory_mib": 1031168},
    }
    facts = hw.assemble(raw)
    assert [(a["model"], a["arch"], a["memory_mib"], a["numa_node"]) for a in facts["accelerators"]] == \
        [("K100_AI", "gfx928", 65438, 0)] * 4 + [("K100_AI", "gfx928", 65438, 1)] * 4
    assert facts["links"][0] == ["X", "NODE", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS"]
    assert facts["groups"]["numa_domains"] == {"0": [0, 1, 2, 3], "1": [4, 5, 6, 7]}
    assert facts["source"] == "hy-smi"


def test_hy_smi_pcie_matrices():
    tables = hw.parse_smi_matrices(fixture("hy-smi-showtopo-8x-hcu-pcie.txt"), "hy-smi --showtopo")
    assert set(tables) == {"access", "weight", "hops", "link type"}
    assert tables["link type"][3] == ["PCIE", "PCIE", "PCIE", "None", "PCIE", "PCIE", "PCIE", "PCIE"]
    values = hw.parse_card_values(fixture("hy-smi-showtopo-8x-hcu-pcie.txt"), "hy-smi --showtopo")
    numa = [int(values[i]["Numa Node"]) for i in range(8)]
    assert numa == [0] * 8
    assert hw.smi_link_words(8, tables, numa)[0] == ["X"] + ["NODE"] * 7


def test_malformed_hy_smi_json_is_repaired():
    cards = hw.parse_card_values(fixture("hy-smi-json-malformed-bw-2card.txt"), "hy-smi --json")
    with pytest.raises(json.JSONDecodeError):
        json.loads(fixture("hy-smi-json-malformed-bw-2card.txt"))
    accs = hw.smi_accelerators("hygon", cards, cards, {}, "hy-smi --json")
    assert [(a["model"], a["arch"], a["memory_mib"]) for a in accs] == [("BW", "gfx936", 65520)] * 2


def test_mi308x_from_rocm_smi_with_xgmi():
    topo_text = fixture("rocm-smi-showtopo-mi308x-8x.txt")
    raw = {
        "commands": {
            "rocm-smi --showmeminfo vram": fixture("rocm-smi-u-showmeminfo-vram-mi308x-8x.txt"),
            "rocm-smi --showtopo": topo_text,
        },
        "host": {"numa_cpus": {0: "0-63", 1: "64-127"}, "cpu_count": 128, "memory_mib": 1031168},
    }
    facts = hw.assemble(raw)
    assert [a["memory_mib"] for a in facts["accelerators"]] == [196592] * 8
    assert [a["numa_node"] for a in facts["accelerators"]] == [0] * 4 + [1] * 4
    assert facts["links"] == full(8, "NV1")
    assert facts["groups"]["all_nvlink"] is True


def test_mi210_numa_and_mi250_names():
    numa = hw.parse_card_values(fixture("rocm-smi-showtoponuma-mi210-8x.txt"), "rocm-smi --showtoponuma")
    assert [int(numa[i]["(Topology) Numa Node"]) for i in range(8)] == [3, 2, 1, 0, 7, 6, 5, 4]
    product = hw.parse_card_values(fixture("rocm-smi-showproductname-mi250-2gcd.txt"), "rocm-smi --showproductname")
    memory = {0: {"VRAM Total Memory (B)": "68702699520"}, 1: {"VRAM Total Memory (B)": "68702699520"}}
    accs = hw.smi_accelerators("amd", product, memory, {}, "rocm-smi")
    assert [(a["arch"], a["memory_mib"]) for a in accs] == [("gfx90a", 65520)] * 2


def test_smi_without_vram_fails_clearly():
    product = hw.parse_card_values(fixture("hy-smi-a-cardseries-excerpt-k100ai-8x.txt"), "hy-smi --showproductname")
    with pytest.raises(hw.HardwareError, match="card 0 reports no VRAM size"):
        hw.smi_accelerators("hygon", product, {}, {}, "hy-smi")


def test_truncated_smi_matrix():
    text = "\n".join(fixture("rocm-smi-showtopo-mi308x-8x.txt").splitlines()[:8])
    with pytest.raises(hw.HardwareError, match="table 'Weight between two GPUs' ends after"):
        hw.parse_smi_matrices(text, "rocm-smi --showtopo")


def test_cpu_only_host():
    facts = hw.assemble({"commands": {}, "host": {"numa_cpus": {0: "0-1"}, "cpu_count": 2, "memory_mib": 24105}})
    assert facts["accelerators"] == [] and facts["links"] is None and facts["source"] == "cpu-only"
    assert hw.summary_lines(facts)[-1] == "no accelerators (CPU-only host)"


# --- sysfs readers --------------------------------------------------------------------------

def test_sysfs_readers(tmp_path):
    for node, cpus in ((0, "0-19,40-59"), (1, "20-39,60-79")):
        (tmp_path / "node" / f"node{node}").mkdir(parents=True)
        (tmp_path / "node" / f"node{node}" / "cpulist").write_text(cpus + "\n")
    (tmp_path / "node" / "node2").mkdir()
    (tmp_path / "node" / "node2" / "cpulist").write_text("\n")  # memory-only node
    assert hw.read_numa_cpus(str(tmp_path / "node")) == {0: "0-19,40-59", 1: "20-39,60-79"}
    for addr, node in (("0000:1a:00.0", "1"), ("0000:00:06.0", "-1")):
        (tmp_path / "pci" / addr).mkdir(parents=True)
        (tmp_path / "pci" / addr / "numa_node").write_text(node + "\n")
    assert hw.read_pci_numa(str(tmp_path / "pci")) == {"0000:1a:00.0": 1}
    assert hw.parse_meminfo_mib("MemTotal:       131979484 kB\nMemFree: 1 kB\n") == 128886
    assert hw.expand_cpulist("0-2,8,10-11") == [0, 1, 2, 8, 10, 11]
    assert hw.sysfs_pci_address("00000000:3B:00.0") == "0000:3b:00.0"


# --- schema, profiles, groupings --------------------------------------------------------------

@pytest.mark.parametrize("name", PROFILE_NAMES)
def test_profiles_are_valid_and_round_trip(name):
    profile = hardware_profile(name)
    assert set(profile) >= {"accelerators", "links", "numa_cpus", "cpu_count", "memory_mib", "driver_version", "groups"}
    for acc in profile["accelerators"]:
        assert tuple(acc) == hw.ACCELERATOR_KEYS
    again = hw.validate_hardware(json.loads(json.dumps(profile)))
    assert again["accelerators"] == profile["accelerators"] and again["groups"] == profile["groups"]


def test_seed_machines():
    dgx = hardware_profile("dgx1_v100_32gb")
    assert dgx["groups"]["nvlink_islands"] == [[0, 1, 2, 3, 4, 5, 6, 7]]
    assert dgx["groups"]["nvlink_cliques"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert dgx["groups"]["all_nvlink"] is False
    k100 = hardware_profile("k100ai_8x_pcie")
    assert k100["groups"]["numa_domains"] == {"3": [0, 1, 2, 3], "7": [4, 5, 6, 7]}
    assert k100["numa_cpus"][3] == "24-31,88-95" and k100["numa_cpus"][7] == "56-63,120-127"
    assert k100["groups"]["nvlink_islands"] == [] and {a["arch"] for a in k100["accelerators"]} == {"gfx928"}
    pair = hardware_profile("v100x2_nvlink")
    assert pair["groups"]["all_nvlink"] and len(pair["accelerators"]) == 2


def test_real_h200_matches_its_profile():
    real = json.loads((FIXTURES / "h200x1-accelerator-facts" / "llmfleet_hardware.json").read_text())
    profile = hardware_profile("h200x1")
    assert real["accelerators"] == profile["accelerators"]
    assert (real["cpu_count"], real["memory_mib"], real["driver_version"]) == (profile["cpu_count"], profile["memory_mib"], profile["driver_version"])


def test_unknown_profile_lists_the_known_ones():
    with pytest.raises(hw.HardwareError, match="'dgx2' is not a built-in profile; known: a100_sxm_8x_80gb, dgx1_v100_32gb"):
        hardware_profile("dgx2")


def declared(**changes):
    base = {
        "accelerators": [{"index": 0, "vendor": "nvidia", "model": "Tesla V100-SXM2-32GB", "arch": "sm70",
                          "compute_capability": "7.0", "memory_mib": 32768, "numa_node": 0},
                         {"index": 1, "vendor": "nvidia", "model": "Tesla V100-SXM2-32GB", "arch": "sm70",
                          "compute_capability": "7.0", "memory_mib": 32768, "numa_node": 0}],
        "links": [["X", "NV2"], ["NV2", "X"]],
        "numa_cpus": {0: "0-7"}, "cpu_count": 8, "memory_mib": 32768, "driver_version": "570.86.15",
    }
    base.update(changes)
    return base


def test_declared_hardware_is_accepted_with_string_keys():
    out = hw.validate_hardware(json.loads(json.dumps(declared())))
    assert out["numa_cpus"] == {0: "0-7"} and out["groups"]["all_nvlink"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"accelerators": "two V100"}, "accelerators must be a list"),
        ({"links": [["X", "NV2"], ["NV1", "X"]]}, r"links\[0\]\[1\]='NV2' but links\[1\]\[0\]='NV1'"),
        ({"links": [["X", "NVLINK"], ["NVLINK", "X"]]}, r"links\[0\]\[1\]='NVLINK'"),
        ({"links": [["X"]]}, "links must be a 2x2 matrix"),
        ({"numa_cpus": {0: "all"}}, r"numa_cpus\[0\]='all'"),
        ({"cpu_count": 0}, "cpu_count=0"),
        ({"numa_cpus": {1: "0-7"}}, "accelerator 0 is on NUMA node 0, which numa_cpus does not list"),
    ],
)
def test_declared_hardware_errors_name_the_value(changes, message):
    with pytest.raises(hw.HardwareError, match=message):
        hw.validate_hardware(declared(**changes))


@pytest.mark.parametrize(
    ("acc_changes", "message"),
    [
        ({"vendor": "intel"}, "vendor='intel'"),
        ({"arch": "sm80"}, "arch='sm80' disagrees with compute_capability 7.0"),
        ({"memory_mib": "32G"}, "memory_mib='32G'"),
        ({"compute_capability": None}, "needs compute_capability"),
        ({"numa_node": -1}, "numa_node=-1"),
    ],
)
def test_declared_accelerator_errors(acc_changes, message):
    hwd = declared()
    hwd["accelerators"][1].update(acc_changes)
    with pytest.raises(hw.HardwareError, match=r"llmfleet_hardware\.accelerators\[1\].*" + message):
        hw.validate_hardware(hwd)


def test_groupings_pcie_switch_and_mixed():
    links = [["X", "PIX", "SYS", "SYS"], ["PIX", "X", "SYS", "SYS"], ["SYS", "SYS", "X", "PXB"], ["SYS", "SYS", "PXB", "X"]]
    accs = [{"index": i, "numa_node": i // 2} for i in range(4)]
    groups = hw.groupings({"accelerators": accs, "links": links})
    assert groups["pcie_switches"] == [[0, 1], [2, 3]]
    assert groups["nvlink_islands"] == [] and groups["numa_domains"] == {"0": [0, 1], "1": [2, 3]}


def test_cpulist_round_trip():
    assert hw.compress_cpulist([8, 0, 1, 2, 5, 7]) == "0-2,5,7-8"
    assert hw.expand_cpulist(hw.compress_cpulist([3, 4, 10])) == [3, 4, 10]


# --- CPU features and physical cores (tests/fixtures/hardware/cpu/SOURCE.md) --------------------

CPU = FIXTURES / "cpu"


def sysfs_tree(root: pathlib.Path, capture: str) -> pathlib.Path:
    """Write a `grep -H . /sys/...` capture back as files under root (/sys/devices/system -> root)."""
    for line in capture.splitlines():
        path, _sep, value = line.partition(":")
        target = root / path.removeprefix("/sys/devices/system/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(value + "\n")
    return root


def test_cpu_flags_of_the_lab_epyc_avx512_bf16_without_amx():
    assert hw.parse_cpu_flags((CPU / "epyc-2cpu-kvm.cpuinfo.txt").read_text()) == ["avx2", "avx512f", "avx512_bf16"]


def test_cpu_flags_of_the_h200_host_xeon_with_amx():
    flags = hw.parse_cpu_flags((CPU / "xeon-amx-16cpu-kvm.cpuinfo.txt").read_text())
    assert flags == ["avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8"]
    # lscpu's one-line Flags: of the same machine kind (captured three days earlier) reads the same
    assert hw.parse_cpu_flags((FIXTURES / "h200x1" / "host-cpu-numa.txt").read_text()) == flags


def test_cpu_flags_are_those_every_cpu_lists_and_unknown_without_a_flags_line():
    text = (CPU / "xeon-amx-16cpu-kvm.cpuinfo.txt").read_text()
    first, last = text.split("\n\n", 1)
    # a CPU that lacks AMX (say, the kernel hides it on one) makes the host lack it
    assert hw.parse_cpu_flags(first + "\n\n" + last.replace(" amx_bf16", "")) == \
        ["avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8"]
    assert hw.parse_cpu_flags("processor\t: 0\nflags\t\t: fpu sse sse2\n") == []
    assert hw.parse_cpu_flags("processor\t: 0\nFeatures\t: fp asimd evtstrm aes bf16 sve\n") is None   # aarch64
    assert hw.parse_cpu_flags("") is None


def test_physical_cores_of_the_two_socket_smt_layout(tmp_path):
    root = sysfs_tree(tmp_path, (CPU / "xeon-8481c-2s-smt.sysfs.txt").read_text())
    numa = hw.read_numa_cpus(str(root / "node"))
    siblings = hw.read_thread_siblings(str(root / "cpu"))
    assert numa == {0: "0-21,88-109", 1: "22-43,110-131", 2: "44-65,132-153", 3: "66-87,154-175"}
    assert len(siblings) == 176 and siblings[100] == "12,100"
    cores = hw.physical_cores(numa, siblings)
    assert cores == {0: "0-21", 1: "22-43", 2: "44-65", 3: "66-87"}
    assert sum(len(hw.expand_cpulist(c)) for c in cores.values()) == 88        # 2 sockets x 44 cores


@pytest.mark.parametrize("name, cores", [("epyc-2cpu-kvm", {0: "0-1"}), ("xeon-amx-16cpu-kvm", {0: "0-15"})])
def test_physical_cores_without_smt_are_all_cpus(tmp_path, name, cores):
    root = sysfs_tree(tmp_path, (CPU / f"{name}.sysfs.txt").read_text())
    numa = hw.read_numa_cpus(str(root / "node"))
    assert hw.physical_cores(numa, hw.read_thread_siblings(str(root / "cpu"))) == cores == numa


def test_physical_cores_keep_the_lowest_sibling_inside_the_node_and_guess_nothing():
    # siblings 0,4 / 1,5 / 2,6 / 3,7 on one node; node 1 has a CPU whose siblings are not known: left out
    siblings = {c: f"{c % 4},{c % 4 + 4}" for c in range(8)}
    assert hw.physical_cores({0: "0-7", 1: "8-9"}, siblings) == {0: "0-3"}
    # sibling lists reaching outside the node (numbering that does not follow sockets) stay inside it
    assert hw.physical_cores({0: "4-7"}, siblings) == {0: "4-7"}
    assert hw.physical_cores({0: "0-7"}, {}) == {}


def test_assemble_turns_the_capture_into_cpu_flags_and_numa_cores(tmp_path):
    root = sysfs_tree(tmp_path, (CPU / "xeon-8481c-2s-smt.sysfs.txt").read_text())
    host = {"numa_cpus": hw.read_numa_cpus(str(root / "node")), "cpu_count": 176, "memory_mib": 354304,
            "cpu_flags": ["avx2", "avx512f", "avx512_bf16"], "thread_siblings": hw.read_thread_siblings(str(root / "cpu"))}
    facts = json.loads(json.dumps(hw.assemble({"commands": {}, "host": host})))     # as the module returns them
    assert facts["cpu_flags"] == ["avx2", "avx512f", "avx512_bf16"]
    assert facts["numa_cores"] == {"0": "0-21", "1": "22-43", "2": "44-65", "3": "66-87"}
    assert hw.validate_hardware(facts)["numa_cores"] == {0: "0-21", 1: "22-43", 2: "44-65", 3: "66-87"}
    assert hw.summary_lines(facts)[1] == ("CPU: features avx2 avx512f avx512_bf16; physical cores per NUMA node "
                                          "0=0-21 (22), 1=22-43 (22), 2=44-65 (22), 3=66-87 (22)")
    # a capture made before these facts existed (the H200 one) gives neither key: facts unchanged
    old = hw.assemble({"commands": {}, "host": {"numa_cpus": {0: "0-1"}, "cpu_count": 2, "memory_mib": 24105}})
    assert "cpu_flags" not in old and "numa_cores" not in old and len(hw.summary_lines(old)) == 2
    none = hw.assemble({"commands": {}, "host": {"numa_cpus": {0: "0-1"}, "cpu_count": 2, "memory_mib": 24105, "cpu_flags": []}})
    assert none["cpu_flags"] == [] and hw.summary_lines(none)[1].startswith("CPU: features none of avx2 avx512f")


def test_declared_cpu_facts_are_optional_and_checked():
    base = {"accelerators": [], "links": None, "numa_cpus": {0: "0-7,16-23", 1: "8-15,24-31"}, "cpu_count": 32, "memory_mib": 65536,
            "driver_version": None}
    assert "cpu_flags" not in hw.validate_hardware(base) and "numa_cores" not in hw.validate_hardware(base)
    ok = hw.validate_hardware(dict(base, cpu_flags=["amx_bf16", "amx_tile", "amx_bf16"], numa_cores={"0": "0-7", "1": "8-15"}))
    assert ok["cpu_flags"] == ["amx_bf16", "amx_tile"] and ok["numa_cores"] == {0: "0-7", 1: "8-15"}
    with pytest.raises(hw.HardwareError, match=r"cpu_flags='amx_bf16': expected a list of CPU flags"):
        hw.validate_hardware(dict(base, cpu_flags="amx_bf16"))
    with pytest.raises(hw.HardwareError, match=r"numa_cores\['1'\]='8-15,32': must be CPUs of the node \(8-15,24-31\)"):
        hw.validate_hardware(dict(base, numa_cores={"0": "0-7", "1": "8-15,32"}))
    with pytest.raises(hw.HardwareError, match=r"numa_cores\['2'\]: node 2 is not in numa_cpus"):
        hw.validate_hardware(dict(base, numa_cores={"2": "0-7"}))
    with pytest.raises(hw.HardwareError, match=r"numa_cores must map node to a CPU list"):
        hw.validate_hardware(dict(base, numa_cores=["0-7"]))
