#!/usr/bin/env bash
# Make this x86_64 machine run linux/arm64 programs (issue 29): QEMU's user-mode emulators from
# Debian, binfmt_misc mounted, and qemu-aarch64 registered with the F flag (the entry Debian ships
# in /usr/lib/binfmt.d; systemd-binfmt registers it at boot, which a container without systemd
# never does). Idempotent; needs root. `imagebuild base --platform linux/arm64` checks the result.
set -euo pipefail
if [ "$(uname -m)" = aarch64 ]; then
  exit 0                                   # native: nothing to emulate
fi
if ! dpkg -s qemu-user-static >/dev/null 2>&1; then
  echo "start-emulation: installing qemu-user-static" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends qemu-user-static >/dev/null
fi
binfmt=/proc/sys/fs/binfmt_misc
if [ ! -e "$binfmt/status" ]; then
  mount -t binfmt_misc binfmt_misc "$binfmt"
fi
if [ ! -e "$binfmt/qemu-aarch64" ]; then
  cat /usr/lib/binfmt.d/qemu-aarch64.conf > "$binfmt/register"
fi
echo "start-emulation: $(sed -n 's/^interpreter //p' "$binfmt/qemu-aarch64"), $(grep '^flags' "$binfmt/qemu-aarch64")" >&2
