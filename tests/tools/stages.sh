#!/usr/bin/env bash
# Run `make <stage>` for each stage in order; say how long each took and stop at the first that fails,
# naming it. Usage: stages.sh LABEL stage...
set -uo pipefail
label=$1; shift
declare -a rows=()
total_start=$(date +%s)
for stage in "$@"; do
  echo "[$label] ---- $stage ($(date -u +%H:%M:%S) UTC)"
  start=$(date +%s)
  if [[ $label == molecule ]]; then
    molecule test -s "$stage"; rc=$?
  else
    make --no-print-directory "$stage"; rc=$?
  fi
  took=$(( $(date +%s) - start ))
  rows+=("$(printf '%-20s %5d s' "$stage" "$took")")
  if (( rc != 0 )); then
    for row in "${rows[@]}"; do printf '[%s] %s\n' "$label" "$row"; done
    hint="make $stage"; [[ $label == molecule ]] && hint="make molecule SCENARIO=$stage"
    echo "[$label] FAILED: $stage (exit $rc after $took s); re-run it alone with: $hint"
    exit "$rc"
  fi
done
for row in "${rows[@]}"; do printf '[%s] %s\n' "$label" "$row"; done
echo "[$label] all passed in $(( $(date +%s) - total_start )) s"
