#!/usr/bin/env bash
# Make this x86_64 machine run linux/arm64 programs (issue 29): QEMU's user-mode emulators, binfmt_misc
# mounted, and qemu-aarch64 registered with the F flag (the entry Debian ships in /usr/lib/binfmt.d;
# systemd-binfmt registers it at boot, which a container without systemd never does). Idempotent;
# needs root. `imagebuild base --platform linux/arm64` checks the result.
#
# QEMU 8 or later: under Debian 12's own QEMU (7.2) PyTorch 2.13's aarch64 wheel dies of SIGSEGV at
# `import torch` (measured, docs/benchmarks.md); QEMU 10 from bookworm-backports runs it. On Debian
# 12 the backports suite is added (Debian's own archive, the same mirror as the main suites).
set -euo pipefail
if [ "$(uname -m)" = aarch64 ]; then
  exit 0                                   # native: nothing to emulate
fi
export DEBIAN_FRONTEND=noninteractive
qemu_major() { dpkg-query -W -f '${Version}' qemu-user-static 2>/dev/null | sed -n 's/^\([0-9]*:\)\{0,1\}\([0-9]*\)\..*/\2/p'; }
installed=""
if [ "$(qemu_major)" = "" ] || [ "$(qemu_major)" -lt 8 ]; then
  installed=1
  suite=""
  if [ "$(. /etc/os-release && echo "${VERSION_CODENAME:-}")" = bookworm ]; then
    suite=bookworm-backports
    if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
      uri="$(sed -n 's/^URIs: *\([^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)"
      printf 'Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        "${uri:?no Debian archive URI in /etc/apt/sources.list.d/debian.sources}" > /etc/apt/sources.list.d/imagebuild-backports.sources
    fi
  fi
  echo "start-emulation: installing qemu-user-static${suite:+ from $suite}" >&2
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends ${suite:+-t "$suite"} qemu-user-static >/dev/null
fi
binfmt=/proc/sys/fs/binfmt_misc
if [ ! -e "$binfmt/status" ]; then
  mount -t binfmt_misc binfmt_misc "$binfmt"
fi
# an entry registered with F holds the emulator opened when it was registered: after an install
# or upgrade it is registered again, so that the new one runs
if [ -n "$installed" ] && [ -e "$binfmt/qemu-aarch64" ]; then
  echo -1 > "$binfmt/qemu-aarch64"
fi
if [ ! -e "$binfmt/qemu-aarch64" ]; then
  cat /usr/lib/binfmt.d/qemu-aarch64.conf > "$binfmt/register"
fi
echo "start-emulation: QEMU $(dpkg-query -W -f '${Version}' qemu-user-static), $(sed -n 's/^interpreter //p' "$binfmt/qemu-aarch64"), $(grep '^flags' "$binfmt/qemu-aarch64")" >&2
