#!/usr/bin/env bash
# The lab's wheel folders, downloaded once from PyPI, so lab hosts and images install the way an
# air-gapped fleet would (pip --no-index --find-links):
#   tests/lab/wheelhouse.sh [DIR]          every wheel the CPU build of vLLM needs (default .cache/wheelhouse)
#   tests/lab/wheelhouse.sh DIR webui      Open WebUI (the webui role's pinned release) and its slim list
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$here/../../.cache/wheelhouse}
what=${2:-vllm}
case $what in
  vllm)
    req=$here/../images/vllm-cpu/requirements.txt
    # and the release before it, for the fleet lab's day-2 roll (0.31.0 -> 0.32.0): its own wheels only
    previous=$here/vllm_previous.txt
    inputs=("$req" "$previous" "$0")
    label="$(grep -hv '^#' "$req" "$previous" | xargs) (~1 GB)" ;;
  webui)
    version=$(sed -n 's/^webui_version: *"\?\([0-9.]*\)"\?.*/\1/p' "$here/../../roles/webui/defaults/main.yml")
    [ -n "$version" ] || { echo "[wheelhouse] ERROR: no webui_version in roles/webui/defaults/main.yml" >&2; exit 1; }
    # the pinned release only: another change to the role's defaults needs no new download
    inputs=("$0")
    pinned="open-webui==$version"
    label="open-webui==$version and its requirements-slim.txt (~0.25 GB)" ;;
  *) echo "[wheelhouse] ERROR: unknown set '$what' (vllm or webui)" >&2; exit 2 ;;
esac
# the inputs' contents only: the same set however the script is called (build.sh and the Makefile use other paths)
stamp=$dir/.llmfleet-$({ cat "${inputs[@]}"; [ -z "${pinned:-}" ] || echo "$pinned"; } | sha256sum | cut -c1-12)
[ -f "$stamp" ] && exit 0
# shellcheck source=tests/lab/lock.sh
. "$here/lock.sh"
lab_lock "$dir" "[wheelhouse]"
[ -f "$stamp" ] && exit 0   # made by the run we waited for
t0=$SECONDS
mkdir -p "$dir"
echo "[wheelhouse] downloading the wheels of $label into $dir"
# the lab hosts' interpreter: Debian 12's python3
lab_python=3.11.2
download() {
  # for the lab's Python (Requires-Python: soupsieve 2.8 needs >= 3.11.5); x86_64 wheels as on this machine
  python3 -m pip download --disable-pip-version-check --progress-bar off --only-binary=:all: --python-version "$lab_python" \
    -d "$dir" "$@" 2>&1 \
    | sed -un "s/^\(Collecting [^ ]*\).*/[wheelhouse]   \1/p"
}
if [ "$what" = vllm ]; then
  download -r "$req"
  download -r "$previous"
else
  download --no-deps "open-webui==$version"
  slim=$(mktemp)
  trap 'rm -f "$slim"' EXIT
  python3 - "$dir/open_webui-$version-py3-none-any.whl" "$slim" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, open(sys.argv[2], "wb") as out:
    out.write(wheel.read("requirements-slim.txt"))
PY
  download -r "$slim"
  # pip evaluates markers for THIS Python (3.11.7 here) even with --python-version; the lab's 3.11.2 needs
  # more (redis: async-timeout; python_full_version < "3.11.3"). Add what only the lab's Python asks for.
  for _round in 1 2 3; do
    extra=$(python3 - "$dir" "$lab_python" <<'PY'
import email, glob, sys, zipfile
from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.markers import default_environment
here = default_environment()
lab = dict(here, python_full_version=sys.argv[2], python_version=".".join(sys.argv[2].split(".")[:2]))
have = {p.split("/")[-1].split("-")[0].lower().replace("_", "-") for p in glob.glob(sys.argv[1] + "/*.whl")}
need = set()
for path in glob.glob(sys.argv[1] + "/*.whl"):
    with zipfile.ZipFile(path) as wheel:
        meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        msg = email.message_from_bytes(wheel.read(meta))
    extras = [""] + (msg.get_all("Provides-Extra") or [])
    for text in msg.get_all("Requires-Dist") or []:
        req = Requirement(text)
        if not req.marker:
            continue
        on_lab = any(req.marker.evaluate(dict(lab, extra=e)) for e in extras)
        here_too = any(req.marker.evaluate(dict(here, extra=e)) for e in extras)
        name = req.name.lower().replace("_", "-")
        if on_lab and not here_too and name not in have:
            need.add(f"{req.name}{req.specifier}")
print(" ".join(sorted(need)))
PY
)
    [ -n "$extra" ] || break
    echo "[wheelhouse]   for the lab's Python $lab_python also: $extra"
    read -ra wanted <<<"$extra"
    download "${wanted[@]}"
  done
fi
touch "$stamp"
wheels=("$dir"/*.whl)
echo "[wheelhouse] ready in $((SECONDS - t0)) s: ${#wheels[@]} wheels, $(du -sh "$dir" | cut -f1)"
