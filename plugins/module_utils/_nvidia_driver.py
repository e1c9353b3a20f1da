# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The NVIDIA driver against the CUDA level of the planned images: which driver a level needs and whether a host's
driver runs them. Pure; below both the planner (it warns at plan time) and _host_runtime (prepare.yml stops on it).
Private to llmfleet.serving.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple


# CUDA level each driver branch supports (NVIDIA CUDA Toolkit release notes, table 3, "Toolkit
# Driver Version" for Linux x86_64; the GA release of each minor version).
DRIVER_CUDA: Tuple[Tuple[Tuple[int, ...], str], ...] = (
    ((580, 65, 6), "13.0"),
    ((575, 51, 3), "12.9"),
    ((570, 26), "12.8"),
    ((560, 28, 3), "12.6"),
    ((555, 42, 2), "12.5"),
    ((550, 54, 14), "12.4"),
    ((545, 23, 6), "12.3"),
    ((535, 54, 3), "12.2"),
    ((530, 30, 2), "12.1"),
    ((525, 60, 13), "12.0"),
    ((520, 61, 5), "11.8"),
)


class HostRuntimeError(ValueError):
    """A value the roles cannot act on; the message names it and says what would work."""


def version_tuple(text: str) -> Tuple[int, ...]:
    parts = re.findall(r"\d+", str(text))
    if not parts:
        raise HostRuntimeError(f"{text!r} is not a version number")
    return tuple(int(p) for p in parts)


def cuda_tuple(level: str) -> Tuple[int, ...]:
    return version_tuple(level)[:2]


def driver_cuda(driver_version: str) -> Optional[str]:
    """The newest CUDA level a driver supports, or None when it is older than every known branch."""
    have = version_tuple(driver_version)
    for floor, level in DRIVER_CUDA:
        if have >= floor:
            return level
    return None


def min_driver(level: str) -> str:
    """The oldest driver that supports a CUDA level."""
    want = cuda_tuple(level)
    candidates = [floor for floor, lvl in DRIVER_CUDA if cuda_tuple(lvl) >= want]
    if not candidates:
        raise HostRuntimeError(f"CUDA {level} is newer than every driver branch known here; "
                               "set nvidia_toolkit_driver_min_version")
    return ".".join(str(p) for p in min(candidates))


def driver_verdict(driver_version: Optional[str], needs: Iterable[Mapping[str, Any]], min_version: str = "") -> Dict[str, Any]:
    """Whether the host's NVIDIA driver can run the planned images, each given with its CUDA level
    ({image, cuda}, see plan_cuda_needs). `min_version` (inventory) replaces the level derived from
    them. Returns ok, required (driver version or None), reasons, message."""
    needs = list(needs)
    reasons: List[str] = []
    required: Optional[str] = None
    levels: List[str] = []
    if min_version:
        required = str(min_version)
        reasons.append(f"nvidia_toolkit_driver_min_version={required} (inventory)")
    else:
        for need in needs:
            if need.get("cuda"):
                levels.append(str(need["cuda"]))
                reasons.append(f"{need['image']} is built with CUDA {need['cuda']} (the plan's image_cuda)")
            else:
                reasons.append(f"{need['image']}: the plan does not know its CUDA level (set engine.cuda), not checked")
        if levels:
            level = max(levels, key=cuda_tuple)
            # CUDA minor version compatibility: a 12.x build runs on any 12.x driver (>= 525.60.13), a
            # 13.x build on any 13.x driver (>= 580.65.06); only PTX JIT of newer kernels is missing.
            major = f"{cuda_tuple(level)[0]}.0"
            required = min_driver(major)
            reasons.append(f"CUDA {level} needs driver >= {required} (any CUDA {major.split('.', maxsplit=1)[0]}.x driver, through "
                           "minor version compatibility)")
    if not driver_version:
        return {"ok": False, "required": required, "reasons": reasons, "driver_cuda": None,
                "message": "no NVIDIA driver found: nvidia-smi is missing or cannot talk to the driver. Install the "
                           f"driver{' >= ' + required if required else ''} (set nvidia_toolkit_driver_install: true to "
                           "install the pinned branch from the CUDA repository), reboot, and check that `nvidia-smi` "
                           "lists the GPUs."}
    have_cuda = driver_cuda(driver_version)
    if required and version_tuple(driver_version) < version_tuple(required):
        return {"ok": False, "required": required, "reasons": reasons, "driver_cuda": have_cuda,
                "message": f"NVIDIA driver {driver_version} (CUDA {have_cuda or 'unknown'}) is too old: "
                           f"{'; '.join(reasons)}. Upgrade the driver to >= {required} (nvidia_toolkit_driver_branch, "
                           "nvidia_toolkit_driver_install: true), or pin an image built for an older CUDA "
                           "(engine.image with its engine.cuda, e.g. a -cu129 tag and \"12.9\")."}
    newer = [lvl for lvl in levels if have_cuda and cuda_tuple(lvl) > cuda_tuple(have_cuda)]
    if newer:
        reasons.append(f"the driver's own level is CUDA {have_cuda}: images built with CUDA {max(newer, key=cuda_tuple)} run through "
                       "minor version compatibility (kernels shipped as PTX only cannot be JIT-compiled); a driver of the "
                       "image's level avoids that")
    return {"ok": True, "required": required, "reasons": reasons, "driver_cuda": have_cuda,
            "message": f"NVIDIA driver {driver_version} (CUDA {have_cuda or 'unknown'})"
                       + (f" satisfies >= {required}" if required else "; no planned image to check against")}
