#!/usr/bin/env bash
# Run `make <stage>` (or, with the label molecule, `molecule test -s <stage>`) for each stage in order; say how long
# each took and stop at the first that fails, naming it. A stage written a+b+c runs a, b and c side by side (each line
# of their output prefixed with its name), timed each, and fails when any of them fails once all have ended.
# Usage: stages.sh LABEL stage...
set -uo pipefail
label=$1; shift
declare -a rows=()
total_start=$(date +%s)
times=$(mktemp -d)
trap 'rm -rf "$times"' EXIT

run_one() {
  if [[ $label == molecule ]]; then
    molecule test -s "$1"
  else
    make --no-print-directory "$1"
  fi
}

hint_for() {
  if [[ $label == molecule ]]; then echo "make molecule SCENARIO=$1"; else echo "make $1"; fi
}

summary() {
  for row in "${rows[@]}"; do printf '[%s] %s\n' "$label" "$row"; done
}

for stage in "$@"; do
  echo "[$label] ---- ${stage//+/ + } ($(date -u +%H:%M:%S) UTC)"
  start=$(date +%s)
  if [[ $stage == *+* ]]; then
    IFS=+ read -ra parts <<< "$stage"
    declare -A pids=()
    for part in "${parts[@]}"; do
      (
        part_start=$(date +%s)
        run_one "$part" 2>&1 | sed -u "s/^/[$part] /"
        rc=${PIPESTATUS[0]}
        echo "$rc $(( $(date +%s) - part_start ))" > "$times/$part"
        exit "$rc"
      ) &
      pids[$part]=$!
    done
    failed=()
    for part in "${parts[@]}"; do
      # the part's own exit status is in its times file (written by its subshell); one that died before writing it
      # counts as failed
      wait "${pids[$part]}" || true
      read -r rc took < "$times/$part" || { rc=1; took=0; }
      rows+=("$(printf '%-20s %5d s (side by side)' "$part" "$took")")
      (( rc != 0 )) && failed+=("$part (exit $rc after $took s; re-run it alone with: $(hint_for "$part"))")
    done
    unset pids
    if (( ${#failed[@]} )); then
      summary
      for f in "${failed[@]}"; do echo "[$label] FAILED: $f"; done
      exit 1
    fi
    continue
  fi
  run_one "$stage"; rc=$?
  took=$(( $(date +%s) - start ))
  rows+=("$(printf '%-20s %5d s' "$stage" "$took")")
  if (( rc != 0 )); then
    summary
    echo "[$label] FAILED: $stage (exit $rc after $took s); re-run it alone with: $(hint_for "$stage")"
    exit "$rc"
  fi
done
summary
echo "[$label] all passed in $(( $(date +%s) - total_start )) s"
