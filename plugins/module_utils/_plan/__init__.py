# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The planner in stages: hardware + deployments + engine version -> launch plans for vLLM instances.

One module per concern, each stage a function from typed inputs (stages.py) to a typed result; compose.py runs them
in order. The contract (plan_host, PlanError and the names tests import) is _planner.py. Private to llmfleet.serving.
"""

from __future__ import annotations
