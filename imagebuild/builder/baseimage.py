"""Local base images without a registry: debootstrap a root file system and load it as an image.

No base image can be pulled on our machines, so `imagebuild base debian-bookworm` makes one:

1. `debootstrap --force-check-gpg --keyring=K --variant=minbase <suite> DIR [MIRROR]` into a
   temporary directory (root needed): the Release file's signature must check against the
   archive keyring K (Debian package debian-archive-keyring), or debootstrap stops; it never falls
   back to an unchecked download;
2. `normalize_rootfs`: drop what differs between two runs or leaks the host (logs, ldconfig's
   aux-cache, apt's package lists, the host's hostname and resolv.conf, device nodes) and pin the
   password-change day in /etc/shadow to the base's epoch;
3. `pack_rootfs`: one layer tar with sorted names, numeric owners and mtimes clamped to the epoch;
4. an image config with fixed `created` (the epoch) and the layer's diff id, written in
   `docker save` layout and loaded with `docker load`. Unlike `docker import`, which stamps the
   current time into the config, this makes the image id a pure function of the root file system.

Whether two runs give the same image id then depends only on the mirror serving the same package
versions (see docs/benchmarks.md for what was measured). Supported bases are data (BASES).
"""

from __future__ import annotations

import io
import json
import os
import platform
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from .. import labels as L
from ..digests import sha256_bytes, sha256_file
from ..engines import check_ref
from ..errors import ImagebuildError, UsageError
from ..platforms import local_base_ref
from .emulation import Platform, check_emulation, host_platform


@dataclass(frozen=True)
class BaseSpec:
    name: str
    tool: str          # the program that makes the root file system
    suite: str
    variant: str
    epoch: int         # SOURCE_DATE_EPOCH of the image: mtimes are clamped to it, `created` is it
    description: str
    keyring: str       # the archive keyring the Release files' signatures are checked against


BASES: dict[str, BaseSpec] = {
    # epoch: the suite's first release day (bookworm: Debian 12.0, 2023-06-10).
    "debian-bookworm": BaseSpec("debian-bookworm", "debootstrap", "bookworm", "minbase", 1686355200,
                                "Debian 12 (bookworm), debootstrap minbase",
                                "/usr/share/keyrings/debian-archive-keyring.gpg"),
}

PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_MIRROR_RE = re.compile(r"^(?:https?://[A-Za-z0-9.-]+(?::[0-9]{1,5})?(?:/[A-Za-z0-9._~%+/-]*)?"
                        r"|file:///[A-Za-z0-9._~%+/-]*)\Z")
_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64le", "s390x": "s390x"}


@dataclass(frozen=True)
class BaseResult:
    ref: str
    image_id: str
    created: bool         # False: the ref existed and nothing was done
    layer: str            # diff id of the single layer ("" when not created)
    size_bytes: int
    seconds: float


def base_spec(name: str) -> BaseSpec:
    try:
        return BASES[name]
    except KeyError:
        raise UsageError(f"unknown base {name!r} (known: {', '.join(sorted(BASES))})",
                         argument="NAME") from None


def check_mirror(mirror: str) -> str:
    if not _MIRROR_RE.match(mirror or ""):
        raise UsageError(f"invalid mirror {mirror!r}: expected an http(s):// or file:/// URL of "
                         "letters, digits and '._~%+/-'", argument="--mirror")
    return mirror


def check_tools(spec: BaseSpec) -> str:
    tool = shutil.which(spec.tool)
    if not tool:
        raise ImagebuildError(f"{spec.tool} is not installed; it makes the {spec.name} root file "
                              f"system (Debian: apt-get install {spec.tool})")
    if os.geteuid() != 0:
        raise ImagebuildError(f"{spec.tool} needs root (it chroots and creates device files); "
                              f"run `imagebuild base {spec.name}` as root")
    if not shutil.which("tar"):
        raise ImagebuildError("GNU tar is not installed; it packs the root file system")
    if not os.path.isfile(spec.keyring):
        raise ImagebuildError(f"the archive keyring {spec.keyring} is missing; {spec.tool} checks the "
                              "mirror's signatures with it (Debian: apt-get install debian-archive-keyring)")
    return tool


default_ref = local_base_ref


def create_base(name: str, *, engine, ref: str | None = None, mirror: str | None = None,
                force: bool = False, workdir: Path | None = None, log: Path | None = None,
                progress: Callable[[str], None] | None = None,
                target: Platform | None = None) -> BaseResult:
    """Make the base NAME for ``target`` (default: this host's platform): under emulation for
    another architecture (emulation.check_emulation says first what is missing)."""
    spec = base_spec(name)
    target = target or host_platform()
    if target is None:
        raise ImagebuildError(f"this host's architecture ({platform.machine()}) is not one "
                              "imagebuild builds for: give --platform")
    ref = check_ref(ref or default_ref(name, target))
    if mirror is not None:
        check_mirror(mirror)
    say = progress or (lambda _l: None)
    if not force and engine.exists(ref):
        info = engine.inspect(ref)
        arch = info.architecture
        if arch and arch != target.architecture:
            raise UsageError(f"{ref} exists for {arch}, not {target.architecture}: give another "
                             "--ref, or --force to recreate it", argument="--ref")
        return BaseResult(ref, info.id, False, "", info.size, 0.0)
    tool = check_tools(spec)
    how = check_emulation(target)
    if how:
        say(f"{target.oci} under emulation ({how})")
    t0 = time.monotonic()
    parent = Path(workdir) if workdir else Path(os.environ.get("TMPDIR", "/var/tmp"))
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"imagebuild-base-{name}-", dir=parent))
    try:
        rootfs = tmp / "rootfs"
        argv = [tool, "--force-check-gpg", f"--keyring={spec.keyring}", f"--variant={spec.variant}",
                f"--arch={target.debian}", spec.suite, str(rootfs)]
        if mirror:
            argv.append(mirror)
        log_path = Path(log) if log else parent / f"imagebuild-base-{name}.log"
        say(f"{spec.tool} --variant={spec.variant} --arch={target.debian} {spec.suite} (log: {log_path})")
        _run_logged(argv, log_path, say)
        say("normalizing the root file system")
        normalize_rootfs(rootfs, spec.epoch)
        say("packing the layer")
        layer = tmp / "layer.tar"
        diff_id = pack_rootfs(rootfs, layer, spec.epoch)
        shutil.rmtree(rootfs)
        say(f"loading {ref} (layer {diff_id[:19]})")
        image_tar = tmp / "image.tar"
        config_id = write_image_tar(layer, diff_id, image_tar, ref=ref, spec=spec, target=target)
        engine.load(image_tar)
        info = engine.inspect(ref)
        if info.id != config_id:
            raise ImagebuildError(f"the engine gave {ref} the id {info.id}, expected {config_id}")
        return BaseResult(ref, info.id, True, diff_id, info.size, time.monotonic() - t0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run_logged(argv: list[str], log_path: Path, say: Callable[[str], None]) -> None:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    last: list[str] = []
    with open(log_path, "w", encoding="utf-8", errors="replace") as out:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, text=True, errors="replace")
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(line)
                line = line.rstrip()
                if line:
                    last = (last + [line])[-3:]
                if line.startswith(("I: Retrieving Packages", "I: Installing core",
                                    "I: Unpacking the base", "I: Configuring the base",
                                    "I: Base system installed")):
                    say(line[3:])
            rc = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    if rc != 0:
        raise ImagebuildError(f"{Path(argv[0]).name} failed (exit {rc}): "
                              f"{' | '.join(last) or 'no output'}; log: {log_path}")


# Files that differ between two runs of debootstrap, or that carry the host into the image.
_VOLATILE = ("var/cache/ldconfig/aux-cache", "var/log/alternatives.log", "var/log/bootstrap.log",
             "var/log/dpkg.log")
_VOLATILE_GLOBS = ("var/log/apt/*", "var/lib/apt/lists/*", "var/cache/apt/*.bin",
                   "var/cache/apt/archives/*.deb", "var/cache/debconf/*-old", "var/lib/dpkg/*-old",
                   "dev/*", "proc/*", "sys/*", "tmp/*", "var/tmp/*")


def normalize_rootfs(rootfs: Path, epoch: int) -> None:
    """Remove run-dependent files and host leftovers from a fresh root file system (in place)."""
    rootfs = Path(rootfs)
    if not (rootfs / "etc").is_dir():
        raise ImagebuildError(f"{rootfs} does not look like a root file system (no etc/)")
    for rel in ("proc", "sys", "dev", "dev/pts", "dev/shm", "run"):
        if os.path.ismount(rootfs / rel):
            raise ImagebuildError(f"{rootfs / rel} is still mounted; unmount it first")
    for rel in _VOLATILE:
        p = rootfs / rel
        if p.is_file() or p.is_symlink():
            p.unlink()
    for pattern in _VOLATILE_GLOBS:
        for p in sorted(rootfs.glob(pattern)):
            if p.name == "partial" or p.name == "lock":
                continue
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
    # the engine bind-mounts these at run time; the builder's own must not stay in the image
    (rootfs / "etc/hostname").write_text("localhost\n")
    resolv = rootfs / "etc/resolv.conf"
    if resolv.is_symlink() or resolv.exists():
        resolv.unlink()
    resolv.write_text("")
    os.chmod(resolv, 0o644)
    day = str(epoch // 86400)
    for name in ("etc/shadow", "etc/shadow-"):
        p = rootfs / name
        if p.is_file():
            lines = []
            for line in p.read_text().splitlines():
                fields = line.split(":")
                if len(fields) >= 3 and fields[2]:
                    fields[2] = day
                lines.append(":".join(fields))
            mode = p.stat().st_mode
            p.write_text("\n".join(lines) + "\n")
            os.chmod(p, mode & 0o7777)


def pack_rootfs(rootfs: Path, dest: Path, epoch: int) -> str:
    """One reproducible layer tar of `rootfs`; returns its diff id (sha256 of the tar)."""
    argv = ["tar", "--sort=name", "--format=gnu", "--numeric-owner", f"--mtime=@{epoch}",
            "--clamp-mtime", "-C", str(rootfs), "-cf", str(dest), "."]
    proc = subprocess.run(argv, capture_output=True, text=True, errors="replace")
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ImagebuildError(f"packing {rootfs} failed (tar exit {proc.returncode}): {last}")
    return "sha256:" + sha256_file(dest)


def image_config(diff_id: str, spec: BaseSpec, target: Platform | None = None) -> bytes:
    """The image config: same layer, same base, same platform -> same bytes -> same image id."""
    created = datetime.fromtimestamp(spec.epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    target = target or host_platform()
    config = {
        "architecture": target.architecture if target else _ARCH.get(platform.machine(),
                                                                      platform.machine()),
        **({"variant": target.variant} if target and target.variant else {}),
        "os": "linux",
        "created": created,
        "config": {
            "Env": [PATH_ENV],
            "Cmd": ["bash"],
            "Labels": {
                L.BASE: spec.name,
                L.TITLE: f"imagebuild base {spec.name}",
                L.DESCRIPTION: spec.description,
                L.VERSION: spec.suite,
            },
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": created,
                     "created_by": f"imagebuild base {spec.name}: {spec.tool} "
                                   f"--variant={spec.variant} {spec.suite}"
                                   + (f" --arch={target.debian}" if target and target.suffix else "")}],
    }
    return json.dumps(config, sort_keys=True, separators=(",", ":")).encode()


def write_image_tar(layer: Path, diff_id: str, dest: Path, *, ref: str, spec: BaseSpec,
                    target: Platform | None = None) -> str:
    """A `docker save` layout tar holding one layer; returns the image id (sha256 of the config)."""
    config = image_config(diff_id, spec, target)
    config_hex = sha256_bytes(config)
    layer_dir = diff_id.removeprefix("sha256:")
    manifest = json.dumps([{"Config": f"{config_hex}.json", "RepoTags": [ref],
                            "Layers": [f"{layer_dir}/layer.tar"]}],
                          sort_keys=True, separators=(",", ":")).encode()

    def add_bytes(tf: tarfile.TarFile, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mtime = spec.epoch
        info.mode = 0o644
        tf.addfile(info, io.BytesIO(data))

    with tarfile.open(dest, "w", format=tarfile.GNU_FORMAT) as tf:
        add_bytes(tf, f"{config_hex}.json", config)
        with open(layer, "rb") as f:
            info = tarfile.TarInfo(f"{layer_dir}/layer.tar")
            info.size = os.fstat(f.fileno()).st_size
            info.mtime = spec.epoch
            info.mode = 0o644
            tf.addfile(info, f)
        add_bytes(tf, "manifest.json", manifest)
    return f"sha256:{config_hex}"
