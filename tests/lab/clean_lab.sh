#!/usr/bin/env bash
# Puts this machine back to the state a fresh clone meets, as far as this project made it:
#   tests/lab/clean_lab.sh            (make clean-lab)
# Removes the lab's containers, networks and images (llmfleet-lab/*), stops the Docker engine when
# this project started it (tests/images/build.sh records its pid), and deletes the project's caches:
# .cache/ (venvs, wheel folder, and - through XDG_CACHE_HOME - pip's, Hugging Face's, vLLM's and
# ansible-compat's caches of `make` runs), .venv/, build/, plans/, ansible-lint's project cache
# (.ansible/), hypothesis' and pytest's caches, torch.compile's /tmp cache, the image work folder, the
# lab's model folder, the lab's lock files (tests/lab/lock.sh), ansible-test's offline get-pip and the collection copy ansible-lint installs.
# Debian packages stay installed (apt-get purge docker.io debootstrap shellcheck for those).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
pidfile=${LLMFLEET_DOCKERD_PIDFILE:-/var/run/llmfleet-dockerd.pid}
say() { printf '[clean-lab] %s\n' "$*"; }

if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  mapfile -t containers < <(docker ps -a --format '{{.ID}} {{.Image}}' | awk '$2 ~ /^llmfleet-lab\// { print $1 }')
  if [ "${#containers[@]}" -gt 0 ]; then
    say "removing ${#containers[@]} lab container(s)"
    docker rm -f "${containers[@]}" >/dev/null
  fi
  mapfile -t networks < <(docker network ls --format '{{.Name}}' | awk '/^llmfleet-/')
  for net in "${networks[@]}"; do say "removing network $net"; docker network rm "$net" >/dev/null; done
  mapfile -t images < <(docker images --format '{{.Repository}}:{{.Tag}}' | awk '/^llmfleet-lab\//')
  if [ "${#images[@]}" -gt 0 ]; then
    say "removing ${#images[@]} lab image tag(s)"
    docker rmi -f "${images[@]}" >/dev/null
  fi
fi

if [ -f "$pidfile" ]; then
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    say "stopping the Docker engine this project started (pid $pid)"
    kill "$pid"
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -0 "$pid" 2>/dev/null && { say "ERROR: dockerd (pid $pid) did not stop within 30 s; stop it by hand"; exit 1; }
  fi
  rm -f "$pidfile"
fi

for path in "$root/.cache" "$root/.venv" "$root/build" "$root/plans" "$root/tests/output" "$root/.ansible" \
            "$root/.hypothesis" "$root/.pytest_cache" "${TMPDIR:-/tmp}/torchinductor_$(id -un)" \
            "${LLMFLEET_IMAGE_WORKDIR:-/var/tmp/llmfleet-images}" "${LLMFLEET_IMAGE_WORKDIR:-/var/tmp/llmfleet-images}.lock" \
            /var/tmp/llmfleet-apt.lock /var/tmp/llmfleet-lab /var/tmp/llmfleet-demo "$root/inventories/local/.secrets" "${TMPDIR:-/tmp}/llmfleet-sanity" \
            "$HOME/.ansible/collections/ansible_collections/llmfleet"; do
  if [ -e "$path" ]; then say "removing $path"; rm -rf "$path"; fi
done
rm -f "$HOME"/.ansible/test/cache/get_pip_*.py
say "done: the next make test / make demo starts from scratch"
