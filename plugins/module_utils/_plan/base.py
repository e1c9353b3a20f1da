# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""What every stage shares: units, the two errors, and the record of decisions (Ctx)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from .._fleet_vars import FLEET_VARS


GIB = 1024 ** 3
MIB = 1024 ** 2


# Where new instances' ports start when the inventory gives none (field report 003's instances listened on 8002
# and 8003 behind a gateway on 8001) and the models' folder: the collection's defaults of llmfleet_vllm_base_port
# and llmfleet_model_root, which playbooks/plan.yml passes.
DEFAULT_BASE_PORT: int = FLEET_VARS["llmfleet_vllm_base_port"].default
DEFAULT_MODEL_ROOT: str = FLEET_VARS["llmfleet_model_root"].default
# workload.concurrency when the inventory does not give it: a planner default, not a measurement
# (each plan says so in its reasons).
DEFAULT_CONCURRENCY = 8


class PlanError(Exception):
    """Input that is malformed (not merely impossible): fails before any plan is made."""


class Refusal(Exception):
    """An impossible request (not malformed input): its messages become the plan's errors."""

    def __init__(self, *messages: str, data: Optional[Dict[str, Any]] = None) -> None:
        super().__init__("; ".join(messages))
        self.messages = list(messages)
        # the refusal in numbers, for tools (the plan's deployment "refusal"): e.g. the hosts a multi-host layout would need
        self.data = data


@dataclass
class Ctx:
    """What one deployment's stages record: each decision with its reason, and the warnings for the operator."""
    reasons: List[Dict[str, str]]
    warnings: List[str] = field(default_factory=list)

    def why(self, decision: str, why: str) -> None:
        self.reasons.append({"decision": decision, "why": why})

    def warn(self, text: str) -> None:
        self.warnings.append(text)


def cc_of(acc: Mapping[str, Any]) -> int:
    major, minor = str(acc.get("compute_capability") or "0.0").split(".")
    return int(major) * 10 + int(minor)


def gib(value: float) -> float:
    return round(value / GIB, 2)


def slug(name: str) -> bool:
    """At most 63 characters (a DNS label, RFC 1035): the name is part of container and unit names."""
    return bool(re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,62}", name))
