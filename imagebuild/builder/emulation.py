"""Target platforms, and the emulation a build for another CPU architecture needs on this host.

A Grace (GH200, GB200, GB300) node is aarch64; an x86_64 builder makes its images under
emulation: the kernel's `binfmt_misc` hands each aarch64 program to QEMU's user-mode emulator
(Debian: qemu-user-static). For containers the emulator must be registered with the F
(fix-binary) flag: the kernel then opens it once, when it is registered, so a container's root
file system need not hold a copy. Nothing else is needed: debootstrap's second stage and every
RUN step of a build run through it.

`platform_of()` reads what users type (linux/arm64, arm64, aarch64, amd64, x86_64);
`check_emulation()` says in one line what is missing, with the fix, before any work starts.
The names are the tools' own (OCI, Debian, the kernel, QEMU), not compatibility facts.
"""

from __future__ import annotations

import platform as _platform
from pathlib import Path

from ..errors import ImagebuildError
from ..platforms import PLATFORMS, Platform, platform_of

__all__ = ["PLATFORMS", "Platform", "platform_of", "host_platform", "is_native", "check_emulation",
           "emulation_for", "qemu_version", "too_old_for_pytorch"]


BINFMT = Path("/proc/sys/fs/binfmt_misc")
BINFMT_D = Path("/usr/lib/binfmt.d")      # where Debian's qemu-user-static puts its entries


def host_platform() -> Platform | None:
    """This machine's platform, or None for an architecture imagebuild does not build for."""
    return next((p for p in PLATFORMS.values() if p.machine == _platform.machine()), None)


def is_native(target: Platform) -> bool:
    host = host_platform()
    return host is not None and host.machine == target.machine


def check_emulation(target: Platform, binfmt: Path = BINFMT) -> str:
    """'' when programs for ``target`` run here natively; else how they run ("qemu-aarch64 via
    binfmt_misc, flags F"), or one line naming what is missing and the fix (ImagebuildError)."""
    if is_native(target):
        return ""
    host = _platform.machine()
    if not (binfmt / "status").is_file():
        raise ImagebuildError(
            f"building for {target.oci} on this {host} host needs the kernel's binfmt_misc, and "
            f"{binfmt} is not mounted: as root, `mount -t binfmt_misc binfmt_misc {binfmt}`, then "
            "install QEMU's user-mode emulators (Debian, Ubuntu: apt-get install qemu-user-static)")
    if (binfmt / "status").read_text(errors="replace").strip() != "enabled":
        raise ImagebuildError(f"building for {target.oci} on this {host} host needs binfmt_misc, "
                              f"which is disabled: as root, `echo 1 > {binfmt / 'status'}`")
    entry = binfmt / f"qemu-{target.qemu}"
    if not entry.is_file():
        conf = BINFMT_D / f"qemu-{target.qemu}.conf"
        fix = (f"qemu-user-static is installed but its entry was not registered (systemd-binfmt "
               f"does that at boot): as root, `cat {conf} > {binfmt / 'register'}`"
               if conf.is_file() else
               "install QEMU's user-mode emulators (Debian, Ubuntu: apt-get install "
               f"qemu-user-static, whose entry for {target.machine} carries the F flag)")
        raise ImagebuildError(f"no emulator for {target.machine} is registered with binfmt_misc, "
                              f"so {target.oci} programs cannot run on this {host} host: {fix}")
    lines = entry.read_text(errors="replace").splitlines()
    fields = dict(line.split(" ", 1) for line in lines[1:] if " " in line)
    if not lines or lines[0].strip() != "enabled":
        raise ImagebuildError(f"the {target.machine} emulator is registered but disabled: as root, "
                              f"`echo 1 > {entry}`")
    flags = fields.get("flags:", "").strip()
    if "F" not in flags:
        raise ImagebuildError(
            f"the {target.machine} emulator ({fields.get('interpreter', '?').strip()}) is registered "
            f"without the F (fix-binary) flag, so it cannot be found inside a container or a "
            f"chroot: register it again with F (Debian: apt-get install --reinstall "
            "qemu-user-static, whose binfmt entries carry it)")
    interpreter = fields.get("interpreter", "qemu").strip()
    version = qemu_version(interpreter)
    return (f"{Path(interpreter).name}" + (f" (QEMU {version})" if version else "")
            + f" via binfmt_misc, flags {flags}")


def emulation_for(what: str, target: Platform, hint: str = "") -> str:
    """check_emulation for an image (``what``: its id or reference) of ``target``: its failure
    names the image first, then ``hint``."""
    try:
        return check_emulation(target)
    except ImagebuildError as exc:
        raise ImagebuildError(f"{what} is for {target.oci}: {exc}{hint}") from None


#: What a container of an image run under QEMU is given. QEMU 10.0's user-mode emulation refuses
#: setsockopt(IPPROTO_TCP, TCP_KEEPINTVL) with EINVAL, so UCX's TCP transport cannot connect
#: ("failed to set 5 option for 6 level"); UCX sets TCP keepalive only while UCX_TCP_KEEPIDLE is
#: finite. Measured: ucx_perftest over self,tcp fails without it and runs with it.
EMULATED_ENV = {"UCX_TCP_KEEPIDLE": "inf"}

#: the oldest QEMU whose aarch64 user-mode emulation runs PyTorch: under Debian 12's QEMU 7.2,
#: torch 2.13.0's aarch64 wheel dies of SIGSEGV at `import torch`; QEMU 10.0 runs it
#: (docs/benchmarks.md, "arm64 under emulation"). 8 is the first major after the one seen failing.
QEMU_FOR_PYTORCH = (8, 0)


def qemu_version(interpreter: str) -> str | None:
    """The version of the QEMU a binfmt_misc entry runs ("10.0.2"), read from the emulator itself
    (`--version`, run by its real name: the -binfmt-P alias refuses to run by hand); None when it
    cannot be read."""
    import re
    import subprocess
    try:
        real = Path(interpreter).resolve(strict=True)
        out = subprocess.run([str(real), "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    m = re.search(r"version ([0-9]+\.[0-9]+(?:\.[0-9]+)?)", out)
    return m.group(1) if m else None


def too_old_for_pytorch(how: str) -> str | None:
    """A warning when check_emulation's description names a QEMU older than QEMU_FOR_PYTORCH."""
    import re
    m = re.search(r"\(QEMU ([0-9]+)\.([0-9]+)", how)
    if not m or (int(m.group(1)), int(m.group(2))) >= QEMU_FOR_PYTORCH:
        return None
    return (f"QEMU {m.group(1)}.{m.group(2)} emulates this platform: PyTorch's aarch64 wheels die of "
            "SIGSEGV at import under QEMU 7.2; install QEMU 8 or later (Debian 12: apt-get install "
            "-t bookworm-backports qemu-user-static, then register it again: bash "
            ".ci/start-emulation.sh does both)")
