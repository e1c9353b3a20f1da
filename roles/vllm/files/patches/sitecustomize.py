# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Loads the known-bug patches a plan lists (LLMFLEET_PATCHES=a,b) into every Python process of a
vLLM instance, workers included: Python imports `sitecustomize` from PYTHONPATH at start-up.
Installed read-only by the llmfleet.serving vllm role; vLLM's own files are never edited."""

import os

if os.environ.get("LLMFLEET_PATCHES"):
    from llmfleet_patches import install

    install(os.environ["LLMFLEET_PATCHES"].split(","))
