"""Write tests/gpu/runs-model-types.json and the model folders it needs (.gpucarry/model-types/): the planner's plans, on
a declared h200x1 host for vLLM 0.26.0, of three model types the planner learned in issue 34, each to be started on the
lent H200 with exactly the plan's arguments and dummy weights (device_run.py --no-bench; each run's `probe` sends one
request of the model's own API):

- a model type vLLM refuses in float16 (gemma3_text: vllm/config/model.py _FLOAT16_NOT_SUPPORTED_MODELS): the text
  model of google/gemma-3-27b-it's published config.json (tests/fixtures/corpus/gemma-3-27b-it.json), served by
  vLLM's Gemma3ForCausalLM as Google's text-only Gemma 3 checkpoints are;
- an embedding model: Qwen/Qwen3-Embedding-0.6B's published config.json (tests/fixtures/corpus), a Qwen3ForCausalLM the
  deployment declares `pooling: embed`;
- a multimodal model with its vision encoder: Qwen/Qwen2.5-VL-7B-Instruct's published config.json (tests/fixtures/corpus),
  with the image processor values of its published preprocessor_config.json.

    .venv/bin/python tests/gpu/make_model_type_runs.py    (after tests/gpu/prepare_carry.py made .cache/gpu-tokenizer)
"""

from __future__ import annotations

import json
import pathlib
import shutil
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / ".cache" / "collections"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "gpu"))

from ansible_collections.llmfleet.serving.plugins.module_utils._hardware_profiles import hardware_profile  # noqa: E402
from ansible_collections.llmfleet.serving.plugins.module_utils._planner import plan_host  # noqa: E402
from llmfleet_testing import outside_container  # noqa: E402  pylint: disable=wrong-import-position

ENGINE = "0.26.0"
CORPUS = ROOT / "tests" / "fixtures" / "corpus"
OUT = ROOT / ".gpucarry" / "model-types"
# Qwen2.5-VL-7B-Instruct's published preprocessor_config.json (Qwen2VLImageProcessor, 14-pixel patches)
QWEN25_VL_PROCESSOR = {"image_processor_type": "Qwen2VLImageProcessor", "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
                       "min_pixels": 3136, "max_pixels": 12845056, "image_mean": [0.48145466, 0.4578275, 0.40821073],
                       "image_std": [0.26862954, 0.26130258, 0.27577711]}


def corpus(name: str) -> dict:
    return json.loads((CORPUS / name).read_text())["config"]


def gemma3_text() -> dict:
    outer = corpus("gemma-3-27b-it.json")
    return {**outer["text_config"], "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
            "torch_dtype": outer.get("torch_dtype", "bfloat16")}


MODELS = [  # (label, model id, folder, config, deployment extras, side files, probe)
    ("f16refused", "google/gemma-3-27b-it", "gemma-3-27b-text", gemma3_text(), {}, {},
     {"path": "/v1/completions", "body": {"prompt": "Hello", "max_tokens": 8}}),
    ("embed", "Qwen/Qwen3-Embedding-0.6B", "Qwen3-Embedding-0.6B", corpus("qwen3-embedding-0.6b.json"), {"pooling": "embed"}, {},
     {"path": "/v1/embeddings", "body": {"input": "ping"}}),
    ("vl", "Qwen/Qwen2.5-VL-7B-Instruct", "Qwen2.5-VL-7B-Instruct", corpus("qwen2.5-vl-7b-instruct.json"), {},
     {"preprocessor_config.json": QWEN25_VL_PROCESSOR}, {"path": "/v1/completions", "body": {"prompt": "Hello", "max_tokens": 8}}),
]


def main() -> int:
    tok = ROOT / ".cache" / "gpu-tokenizer"
    if not (tok / "tokenizer.json").exists():
        print(f"{tok} is missing: run tests/gpu/prepare_carry.py first (it makes the lab tokenizer)", file=sys.stderr)
        return 1
    if OUT.exists():
        shutil.rmtree(OUT)
    runs = []
    for label, model_id, folder, config, extras, side, probe in MODELS:
        served = folder.lower()
        dep = {"name": served, "model": {"id": model_id, "config": config},
               "workload": {"max_model_len": 8192, "concurrency": 32, "goal": "throughput", "thinking": False, "tools": False},
               "engine": {"version": ENGINE}, **extras}
        plan = plan_host("h200x1", hardware_profile("h200x1"), [dep])
        assert not plan["errors"], plan["errors"]
        [inst] = plan["deployments"][0]["instances"]
        args = outside_container(inst["args"])[1:]
        where = OUT / folder
        where.mkdir(parents=True)
        (where / "config.json").write_text(json.dumps(config, indent=1))
        for name, content in side.items():
            (where / name).write_text(json.dumps(content, indent=1))
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(tok / name, where / name)
        runs.append({"label": f"{label}-plan", "model": model_id, "model_dir": folder, "served": served, "port": inst["port"],
                     "config": "planner (memory and one request)", "args": args, "env": {}, "planned": inst["memory"],
                     "deployment": {**dep, "model": {"id": model_id}}, "startup_budget": 480, "memory_only": True, "probe": probe,
                     "bench": {}, "reasons": [f"{r['decision']}: {r['why']}" for r in plan["deployments"][0]["reasons"]]})
        print(f"{label}: {' '.join(args)}")
        print(f"   planned KV tokens {inst['memory']['kv_cache_tokens']}, max_model_len {inst.get('max_model_len')}")
    out = ROOT / "tests" / "gpu" / "runs-model-types.json"
    out.write_text(json.dumps({"engine": ENGINE, "gpu": "h200x1", "runs": runs}, indent=1) + "\n")
    print(f"wrote {out} and {OUT} ({sum(f.stat().st_size for f in OUT.rglob('*') if f.is_file()) / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
