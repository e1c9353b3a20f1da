#!/usr/bin/env bash
# torchvision for the vLLM validation crosscheck (tests/crosscheck/vllm_config_worker.py), in a folder of its own:
#   tests/lab/torchvision_overlay.sh DIR BASE
#     DIR   the folder to fill (pip --target), e.g. .cache/torchvision-overlay
#     BASE  the first vLLM CPU venv (tests/lab/vllm_cpu_venv.sh): its torch decides torchvision's release
# The lab's venvs leave torchvision out (the PyPI wheel is a CUDA build whose compiled ops do not load against the CPU
# torch, docs/sources.md#vllm-cpu), but vLLM imports multimodal model classes, through transformers' image processors,
# only with torchvision present. The worker puts DIR at the end of sys.path and skips the compiled ops' registration:
# the venvs themselves stay as they are. Re-running with DIR made for the same torch does nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:?the folder to fill}
base=${2:?the first vLLM CPU venv}
say() { echo "[torchvision-overlay] $*"; }
fail() { echo "[torchvision-overlay] FAILED: $*" >&2; exit 1; }
t0=$SECONDS
# shellcheck source=tests/lab/lock.sh
. "$here/lock.sh"
lab_lock "$dir" "[torchvision-overlay]"
[ -x "$base/bin/python" ] || fail "the vLLM CPU venv $base is missing; make it with tests/lab/vllm_cpu_venv.sh"
torch=$("$base/bin/python" -c "import importlib.metadata as m; print(m.version('torch'))") || fail "$base has no torch"
# torchvision 0.N+15 goes with torch 2.N (pytorch/vision's README compatibility table)
minor=$(echo "$torch" | cut -d. -f2)
want="0.$((minor + 15)).0"
marker="$dir/.llmfleet-torchvision.json"
stamp="{\"torch\": \"$torch\", \"torchvision\": \"$want\"}"
if [ -f "$marker" ] && [ "$(cat "$marker")" = "$stamp" ] && [ -d "$dir/torchvision" ]; then
  say "unchanged: $dir holds torchvision $want for torch $torch; ready in $((SECONDS - t0)) s"
  exit 0
fi
rm -rf "$dir"
say "installing torchvision==$want (for torch $torch) into $dir"
"$base/bin/python" -m pip install --disable-pip-version-check --progress-bar off -q --no-deps --target "$dir" \
  "torchvision==$want" || fail "pip could not install torchvision==$want into $dir (is PyPI reachable?)"
echo "$stamp" > "$marker"
say "ready: $dir ($(du -sh "$dir" | cut -f1)); $((SECONDS - t0)) s"
