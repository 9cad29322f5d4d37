#!/usr/bin/env bash
# Start a private Docker engine if none answers. Idempotent; prints the DOCKER_HOST to use.
# Usage: eval "$(bash .ci/start-docker.sh)"
set -euo pipefail
root=${IMAGEBUILD_DOCKER_ROOT:-/var/lib/imagebuild-docker}
sock=${IMAGEBUILD_DOCKER_SOCK:-/run/imagebuild-docker.sock}
if [ -S "$sock" ] && DOCKER_HOST=unix://$sock /usr/bin/docker info >/dev/null 2>&1; then
  echo "export DOCKER_HOST=unix://$sock"; exit 0
fi
if ! command -v dockerd >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq docker.io >&2
fi
mkdir -p "$root"
# a dockerd that died leaves its pid file behind, and a new one refuses to start while it exists
pidfile=/run/imagebuild-docker.pid
if [ -f "$pidfile" ] && ! kill -0 "$(cat "$pidfile" 2>/dev/null)" 2>/dev/null; then
  rm -f "$pidfile" "$sock"
fi
nohup dockerd --data-root "$root" --host "unix://$sock" --pidfile "$pidfile" \
  --exec-root /run/imagebuild-docker-exec >/var/log/imagebuild-dockerd.log 2>&1 &
for _ in $(seq 1 60); do
  if DOCKER_HOST=unix://$sock /usr/bin/docker info >/dev/null 2>&1; then
    echo "export DOCKER_HOST=unix://$sock"; exit 0
  fi
  sleep 1
done
echo "dockerd did not answer within 60 s; see /var/log/imagebuild-dockerd.log" >&2
tail -n 20 /var/log/imagebuild-dockerd.log >&2 || true
exit 1
