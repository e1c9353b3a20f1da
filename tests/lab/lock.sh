# shellcheck shell=bash
# One maker at a time for a piece of the lab (a venv, a wheel folder, the images, Debian packages):
#   . tests/lab/lock.sh; lab_lock PATH LABEL
# takes an exclusive lock on PATH.lock for the rest of the calling script (file descriptor 9, which the script
# must close, `9>&-`, for any process it leaves running). A second caller - `make test`'s background prefetch
# and a stage that needs the same piece - says what it waits for, waits, then finds the piece made.
lab_lock() {
  local path=$1 label=$2
  mkdir -p "$(dirname "$path")"
  exec 9>"$path.lock"
  if ! flock -n 9; then
    echo "$label waiting: another run holds $path.lock while it makes the same (make test's background prefetch logs to .cache/prefetch.log)"
    flock 9
  fi
}
