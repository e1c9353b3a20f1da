#!/usr/bin/env bash
# Builds the test lab's container images and makes sure a Docker engine is running.
#
#   tests/images/build.sh [IMAGE ...]     (default: every folder under tests/images/)
#
# An image folder holds either `debootstrap.env` (a root file system made with debootstrap and
# imported with `docker import`: no registry can be reached here) or a `Dockerfile` whose FROM names
# another lab image. Each image is tagged llmfleet-lab/<name>:<content-hash> plus the alias
# llmfleet-lab/<name>:lab; the hash covers this script, the image folder and the parent's hash,
# so an unchanged image is reused, never rebuilt.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
mirror=${LLMFLEET_DEBIAN_MIRROR:-http://deb.debian.org/debian}
work=${LLMFLEET_IMAGE_WORKDIR:-/var/tmp/llmfleet-images}
dockerd_log=${LLMFLEET_DOCKERD_LOG:-/var/log/llmfleet-dockerd.log}
dockerd_pidfile=${LLMFLEET_DOCKERD_PIDFILE:-/var/run/llmfleet-dockerd.pid}   # make clean-lab stops what we started
alias_tag=lab
wheelhouse=${LLMFLEET_WHEELHOUSE:-$here/../../.cache/wheelhouse}
wheel_server=""

say() { printf '[images] %s\n' "$*"; }
die() { printf '[images] ERROR: %s\n' "$*" >&2; exit 1; }

ensure_apt_packages() { "$here/../host-packages.sh" "$@"; }

ensure_docker() {
  if ! command -v dockerd >/dev/null 2>&1; then
    ensure_apt_packages docker.io
  fi
  if docker info >/dev/null 2>&1; then
    return 0
  fi
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    say "starting the Docker engine with systemd"
    systemctl start docker
  else
    # No init system on this host (CI sandboxes): run the daemon in the background.
    say "starting dockerd in the background (log: $dockerd_log)"
    # its own session: stopping whatever started this script (make test's background prefetch) leaves it running
    setsid nohup dockerd >"$dockerd_log" 2>&1 9>&- &
    echo $! >"$dockerd_pidfile"
  fi
  local i
  for i in $(seq 1 60); do
    docker info >/dev/null 2>&1 && { say "Docker engine ready after ${i}s"; return 0; }
    sleep 1
  done
  tail -n 20 "$dockerd_log" >&2 || true
  die "the Docker engine did not answer within 60 s; its log is above ($dockerd_log)"
}

# content hash of an image: this script + the image folder + the parent's hash
image_hash() {
  local dir=$1 parent_hash=${2:-}
  {
    sha256sum "$here/build.sh" | cut -d' ' -f1
    (cd "$dir" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
    echo "$parent_hash"
  } | sha256sum | cut -c1-12
}

has_image() { docker image inspect "$1" >/dev/null 2>&1; }

build_debootstrap() {
  local name=$1 dir=$2 tag=$3
  # shellcheck disable=SC1091
  ( set -a; . "$dir/debootstrap.env"; set +a
    ensure_apt_packages debootstrap
    local root="$work/$name.rootfs"
    rm -rf "$root"; mkdir -p "$work"
    say "$name: debootstrap $SUITE ($VARIANT) from $mirror — about 3 minutes, progress below"
    local log="$work/$name.debootstrap.log"
    if ! debootstrap --variant="$VARIANT" --include="$INCLUDE" "$SUITE" "$root" "$mirror" 2>&1 \
      | tee "$log" \
      | awk '/^I: (Retrieving|Validating|Unpacking|Configuring|Installing|Base system)/ { if (++n % 25 == 1 || /Base system/) print "[images]   " $0; fflush() }'
    then
      tail -n 20 "$log" >&2
      die "$name: debootstrap failed (last lines above, full log $log); check that $mirror is reachable or set LLMFLEET_DEBIAN_MIRROR"
    fi
    [ -x "$root/lib/systemd/systemd" ] || die "$name: debootstrap did not produce /lib/systemd/systemd (see $root/debootstrap/debootstrap.log)"
    for unit in $MASK_UNITS; do ln -sf /dev/null "$root/etc/systemd/system/$unit"; done
    : >"$root/etc/machine-id"
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    say "$name: importing the root file system as $tag"
    tar -C "$root" -c . | docker import \
      --change 'ENV container=docker' \
      --change 'CMD ["/lib/systemd/systemd"]' \
      - "$tag" >/dev/null \
      || die "$name: docker import failed (message above)"
    rm -rf "$root"
  )
}

# A Dockerfile with `ARG WHEELHOUSE` installs Python packages from the lab's wheel folder, which is
# served to the build over the Docker bridge only (never on another interface) while it runs.
serve_wheelhouse() {
  "$here/../lab/wheelhouse.sh" "$wheelhouse"
  local ip port
  ip=$(ip -4 -o addr show docker0 | awk '{ sub(/\/.*/, "", $4); print $4; exit }')
  [ -n "$ip" ] || die "no docker0 address to serve the wheel folder on"
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
  python3 -m http.server --bind "$ip" --directory "$wheelhouse" "$port" >/dev/null 2>&1 9>&- &
  wheel_server=$!
  wheel_url="http://$ip:$port/"
  for _ in $(seq 1 50); do curl -fsS -o /dev/null "$wheel_url" && return 0; sleep 0.1; done
  die "the wheel folder server on $wheel_url did not answer"
}

build_dockerfile() {
  local name=$1 dir=$2 tag=$3 args=()
  if grep -q '^ARG WHEELHOUSE' "$dir/Dockerfile"; then
    serve_wheelhouse
    args=(--build-arg "WHEELHOUSE=$wheel_url")
    say "$name: installing from the wheel folder $wheelhouse (served at $wheel_url for this build)"
  fi
  say "$name: docker build (output below)"
  if ! DOCKER_BUILDKIT=0 docker build "${args[@]}" -t "$tag" "$dir" 2>&1 | sed -u 's/^/[images]   /'; then
    [ -n "$wheel_server" ] && kill "$wheel_server" 2>/dev/null
    die "$name: docker build failed (output above)"
  fi
  if [ -n "$wheel_server" ]; then kill "$wheel_server" 2>/dev/null; wheel_server=""; fi
}

parent_of() {
  sed -n 's#^FROM llmfleet-lab/\([a-z0-9._-]*\):.*#\1#p' "$1/Dockerfile" | head -n 1
}

declare -A built_hash=()

build() {
  local name=$1 dir="$here/$1" parent="" parent_hash=""
  [ -n "${built_hash[$name]:-}" ] && return 0
  [ -d "$dir" ] || die "no image folder tests/images/$name"
  if [ -f "$dir/Dockerfile" ]; then
    parent=$(parent_of "$dir")
    if [ -n "$parent" ]; then build "$parent"; parent_hash=${built_hash[$parent]}; fi
  elif [ ! -f "$dir/debootstrap.env" ]; then
    die "tests/images/$name has neither debootstrap.env nor Dockerfile"
  fi
  local hash tag
  hash=$(image_hash "$dir" "$parent_hash")
  tag="llmfleet-lab/$name:$hash"
  if has_image "$tag"; then
    say "$name: up to date ($tag), nothing to build"
  else
    local t0=$SECONDS
    if [ -f "$dir/Dockerfile" ]; then build_dockerfile "$name" "$dir" "$tag"
    else build_debootstrap "$name" "$dir" "$tag"; fi
    say "$name: built $tag in $((SECONDS - t0))s"
  fi
  docker tag "$tag" "llmfleet-lab/$name:$alias_tag"
  built_hash[$name]=$hash
}

# shellcheck source=tests/lab/lock.sh
. "$here/../lab/lock.sh"
lab_lock "$work" "[images]"
ensure_docker
if [ "$#" -eq 0 ]; then
  for d in "$here"/*/; do
    d=${d%/}
    if [ -f "$d/debootstrap.env" ] || [ -f "$d/Dockerfile" ]; then set -- "$@" "${d##*/}"; fi
  done
fi
for image in "$@"; do build "$image"; done
