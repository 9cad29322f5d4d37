"""Export a built image for Slurm: an enroot squashfs, an OCI runtime bundle, or a SIF.

``sqsh``
    The image's root filesystem, flattened by the engine (``export`` of a created, never started
    container: whiteouts already applied; ``/dev/*`` and ``/.dockerenv`` left out), plus the files
    enroot writes when it imports an image, derived from the image config:

    - ``/etc/environment``: one ``KEY=VALUE`` line per ``Env`` entry, verbatim, in image order
      (enroot reads it line by line; a value with a newline is refused);
    - ``/etc/rc``: the labels as ``# key value`` comments, then ``cd WORKDIR`` and ``exec`` of the
      entrypoint followed by the arguments given (or by the image's CMD; ``/bin/sh`` when the
      image has neither), every word shell-quoted;
    - ``/etc/rc.local``: empty but for a comment (sourced by ``/etc/rc``);
    - ``/etc/fstab``: one rootfs bind entry per declared ``VOLUME``; empty when the image declares
      none (our images declare none: Slurm and enroot read ENV, not volumes).

    Written with ``mksquashfs -noappend -all-root -mkfs-time 0 -all-time 0``, gzip at level 1
    unless asked otherwise (squashfs-tools 4.5 is reproducible by default and sorts directory
    entries), so the same image at the same level gives the same bytes.

``oci-bundle``
    A ``config.json`` and a ``rootfs/`` that runc runs and that Slurm's ``srun --container=BUNDLE``
    accepts. By default the rootfs is the engine's flattened export (as for sqsh) and config.json
    is ``runc spec``'s default filled in from the image config; ``method="umoci"`` uses
    ``skopeo copy docker-daemon:`` + ``umoci unpack`` instead (several times slower on large
    images: it re-compresses every layer). Either way the config keeps the host's network and
    hostname, has no terminal and a writable root, as a multi-node batch job needs
    (hpc_runtime_config).

``sif``
    Apptainer/Singularity (through spython) when one of them is on PATH; otherwise one line that
    names what is missing.

Every output is made beside its final path under a temporary name and renamed at the end: a failed
export never leaves a half-written file or bundle.

Untrusted images (exports run as root):

- **No link leads out.** Paths inside the image (the files enroot's layout adds, ``/etc/passwd``
  and ``/etc/group`` for the user lookup) are resolved as a chroot would (``resolve_in_root``):
  an absolute link target or ``..`` never leaves the root file system, and the last component
  is opened with ``O_NOFOLLOW``. An account file is read only when it is a regular file of at
  most ``ACCOUNT_FILE_MAX`` bytes (a larger one is refused with one line), and parsed field by
  field (ids are 1 to 10 ASCII digits below 2**32).
- **No special files.** Character and block devices, FIFOs and sockets are removed from the
  exported tree (the engine's export would otherwise recreate them on the host when unpacked, and
  a container gets its /dev from the runtime, never from the image); each one is listed in a
  warning line.
- **No setuid/setgid bits by default.** Regular files with the setuid or setgid bit are listed in
  a warning line and the bits are removed; ``keep_setuid=True`` (``--keep-setuid``) keeps them
  (still listed). Both lists are in ``ExportResult`` (``special_files``, ``setuid_files``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .. import labels as L
from .. import reference
from ..atomic import output_target
from ..errors import ExportError, ImagebuildError
from .ociconfig import (ACCOUNT_FILE_MAX, hpc_runtime_config, read_account_file,  # noqa: F401 - re-exported
                        resolve_in_root, resolve_user, runtime_config)

FORMATS = ("sqsh", "oci-bundle", "sif")

_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
_TAG = "imagebuild"

MKSQUASHFS_FLAGS = ("-noappend", "-all-root", "-mkfs-time", "0", "-all-time", "0", "-no-progress",
                    "-quiet")
#: gzip, which every squashfs reader (kernels, squashfuse, enroot) takes, at level 1 by default:
#: on smoke-cpu's 1.5 GB root, 11.6 s against 91.4 s for mksquashfs's default level 9, for a file
#: 12 % larger (docs/benchmarks.md, "Exporting for Slurm"); `export --squash-level 9` for the
#: smallest file
SQUASH_LEVEL = 1


def squash_flags(level: int = SQUASH_LEVEL) -> tuple[str, ...]:
    if not 1 <= int(level) <= 9:
        raise ImagebuildError(f"the gzip level must be 1 to 9, not {level}", argument="--squash-level")
    return (*MKSQUASHFS_FLAGS, "-comp", "gzip", "-Xcompression-level", str(int(level)))

DEBIAN_PACKAGE = {"mksquashfs": "squashfs-tools", "skopeo": "skopeo", "umoci": "umoci", "runc": "runc"}

Progress = Callable[[str], None]


#: symbolic links followed while resolving one path inside an image (Linux's own limit)


@dataclass(frozen=True)
class ExportResult:
    format: str
    path: Path
    image_id: str  # the engine's id of the exported image
    #: image paths of the device nodes, FIFOs and sockets left out of the export
    special_files: tuple[str, ...] = ()
    #: image paths of the regular files that had the setuid or setgid bit
    setuid_files: tuple[str, ...] = ()
    #: whether those bits were kept (keep_setuid) or removed (the default)
    setuid_kept: bool = False


@dataclass
class _Sanitized:
    special_files: list[str]
    setuid_files: list[str]


def check_ref(ref: str) -> str:
    if not reference.is_reference_or_id(ref):   # checked before it reaches any command line
        raise ImagebuildError(f"{ref!r} is not a valid local image reference")
    return ref


def require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        package = DEBIAN_PACKAGE.get(name, name)
        raise ExportError(f"{name} not found on PATH (install the Debian package {package})")
    return path


def require_tools(fmt: str, method: str = "flatten") -> None:
    """The programs an export of ``fmt`` needs, checked before the engine is asked anything."""
    if fmt == "sqsh":
        names = ("mksquashfs", "tar")
    elif fmt == "oci-bundle":
        names = ("skopeo", "umoci") if method == "umoci" else ("runc", "tar")
    else:
        names = ()
    for name in names:
        require_tool(name)


# --------------------------------------------------------------------------- enroot files


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def enroot_files(config: dict) -> dict[str, str]:
    """What enroot writes into an imported image, from the image's config (``Config`` of
    ``docker inspect``): paths inside the rootfs -> text."""
    env = config.get("Env") or []
    for entry in env:
        key, sep, value = str(entry).partition("=")
        if not sep or not _ENV_KEY.match(key) or "\n" in value or "\r" in value or "\0" in value:
            raise ExportError(f"image ENV entry {str(entry)[:60]!r} cannot be written to /etc/environment")
    environment = "".join(f"{entry}\n" for entry in env)

    volumes = sorted((config.get("Volumes") or {}).keys())
    fstab_lines = []
    for volume in volumes:
        if not re.match(r"^/[A-Za-z0-9._/-]*\Z", volume) or ".." in volume.split("/"):
            raise ExportError(f"image VOLUME {volume!r} cannot be written to /etc/fstab")
        fstab_lines.append(f"${{ENROOT_ROOTFS}}{volume} {volume} none x-create=dir,bind,rw,nosuid,nodev\n")
    fstab = "".join(fstab_lines)

    labels = config.get("Labels") or {}
    comments = "".join(f"# {_one_line(k)} {_one_line(v)}\n" for k, v in sorted(labels.items()))
    workdir = config.get("WorkingDir") or "/"
    entrypoint = list(config.get("Entrypoint") or [])
    cmd = list(config.get("Cmd") or [])
    if not entrypoint and not cmd:
        cmd = ["/bin/sh"]
    for word in [workdir, *entrypoint, *cmd]:
        if "\0" in str(word):
            raise ExportError("image WORKDIR, ENTRYPOINT or CMD holds a NUL byte")
    quoted_ep = " ".join(shlex.quote(str(w)) for w in entrypoint)
    quoted_cmd = " ".join(shlex.quote(str(w)) for w in cmd)
    wd = shlex.quote(workdir)
    rc = (
        (comments + "\n" if comments else "")
        + f"mkdir -p {wd} 2> /dev/null\n"
        + f"cd {wd} && unset OLDPWD || exit 1\n"
        + "\n"
        + "if [ -s /etc/rc.local ]; then\n"
        + "    . /etc/rc.local\n"
        + "fi\n"
        + "\n"
        + "if [ $# -gt 0 ]; then\n"
        + f"    exec {quoted_ep + ' ' if quoted_ep else ''}\"$@\"\n"
        + "else\n"
        + f"    exec {' '.join(p for p in (quoted_ep, quoted_cmd) if p)}\n"
        + "fi\n"
    )
    rc_local = ("# Sourced by /etc/rc when the container starts; may change the entrypoint or the\n"
                "# command of the container.\n")
    return {"etc/environment": environment, "etc/fstab": fstab, "etc/rc": rc, "etc/rc.local": rc_local}


# --------------------------------------------------------------------------- helpers


def _image(engine, ref: str):
    """The engine's ImageInfo of ``ref``, or ExportError."""
    check_ref(ref)
    image = engine.lookup(ref)
    if image is None:
        raise ExportError(f"image {ref} is not in the engine; build it first")
    return image


def _staging(output: Path, suffix: str = "") -> Path:
    output.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{output.name}.", suffix=".tmp" + suffix, dir=output.parent))


def _rmtree(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path, ignore_errors=True)


def _run(argv: list[str], what: str, stdin=None) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ExportError(f"{what} failed (exit {proc.returncode}): {err[-1] if err else 'no message'}")
    return proc


def _refuse_existing(output: Path, force: bool) -> None:
    """An existing output is replaced only with --force, and never when it is a device, FIFO,
    socket or link (atomic.output_target): --force replaces an export, not /dev/null."""
    if output.is_symlink() or (output.exists() and not (output.is_file() or output.is_dir())):
        output_target(output)                      # raises its one line for special files
        raise ExportError(f"{output} is a symbolic link; refused: exports replace plain files and "
                          "folders only (name the link's target)")
    if output_target(output, folder=True).exists() and not force:
        raise ExportError(f"{output} already exists (use --force to replace it)")


def _install(staged: Path, output: Path) -> None:
    """Rename ``staged`` onto ``output``; an older output is moved aside first and removed after."""
    old = None
    if output.exists() or output.is_symlink():
        old = output.with_name(f".{output.name}.old-{os.getpid()}")
        os.replace(output, old)
    os.replace(staged, output)
    if old is not None:
        _rmtree(old)


# --------------------------------------------------------------------------- sqsh


def _inside(rootfs: Path, rel: str) -> Path:
    """Where ``/rel`` is written in ``rootfs``: its folder resolved inside the root (links
    followed as in a chroot, folders made when missing), and no link or special file left at
    the name itself (never write through a link)."""
    parent = resolve_in_root(rootfs, os.path.dirname(rel))
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExportError(f"cannot make /{os.path.dirname(rel)} in the image's root file system: "
                          f"{exc.strerror}") from None
    target = parent / os.path.basename(rel)
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return target
    if stat.S_ISDIR(mode):
        raise ExportError(f"/{rel} of the image is a folder; the export writes a file there")
    if not stat.S_ISREG(mode):
        target.unlink()  # a link, or a special file: replaced by our regular file
    return target


def _write_inside(rootfs: Path, rel: str, text: str) -> None:
    target = _inside(rootfs, rel)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(target, 0o644)


def sanitize_rootfs(rootfs: Path, *, keep_setuid: bool = False) -> _Sanitized:
    """Remove device nodes, FIFOs and sockets from ``rootfs`` and find the setuid/setgid regular
    files (their bits removed unless ``keep_setuid``). Links are never followed."""
    special: list[str] = []
    setuid: list[str] = []
    for top, dirs, files in os.walk(rootfs, topdown=True, followlinks=False):
        dirs.sort()
        for name in sorted(dirs + files):
            path = os.path.join(top, name)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            rel = "/" + os.path.relpath(path, rootfs)
            mode = st.st_mode
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
                os.unlink(path)
                special.append(rel)
            elif stat.S_ISREG(mode) and mode & (stat.S_ISUID | stat.S_ISGID):
                setuid.append(rel)
                if not keep_setuid:
                    os.chmod(path, stat.S_IMODE(mode) & ~(stat.S_ISUID | stat.S_ISGID))
    return _Sanitized(sorted(special), sorted(setuid))


def _listing(paths: list[str], limit: int = 20) -> str:
    more = f" and {len(paths) - limit} more" if len(paths) > limit else ""
    return ", ".join(paths[:limit]) + more


def report_sanitized(found: _Sanitized, keep_setuid: bool, say: Progress) -> None:
    """One warning line for the special files left out, one for the setuid/setgid files."""
    if found.special_files:
        say(f"warning: left out {len(found.special_files)} device node(s), FIFO(s) or socket(s): "
            f"{_listing(found.special_files)}")
    if found.setuid_files:
        what = "kept (--keep-setuid)" if keep_setuid else "bits removed (--keep-setuid keeps them)"
        say(f"warning: {len(found.setuid_files)} setuid/setgid file(s), {what}: "
            f"{_listing(found.setuid_files)}")


def _flatten(engine, image, ref: str, rootfs: Path, say: Progress) -> None:
    """The image's file system into ``rootfs``: ``export`` of a created, never started
    container (whiteouts applied by the engine), without /dev/* and /.dockerenv."""
    tar = require_tool("tar")
    rootfs.mkdir()
    os.chmod(rootfs, 0o755)
    with engine.export_filesystem(image.id, labels={L.EXPORT: "1"}) as chunks:
        say(f"flattening {ref} into {rootfs}")
        untar = subprocess.Popen(
            [tar, "-C", str(rootfs), "--numeric-owner", "-p", "-x", "--anchored",
             "--exclude=dev/*", "--exclude=./dev/*", "--exclude=.dockerenv", "--exclude=./.dockerenv",
             "-f", "-"],
            stdin=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            for chunk in chunks:
                untar.stdin.write(chunk)
            untar.stdin.close()
        except BrokenPipeError:
            pass
        err = untar.stderr.read().decode("utf-8", "replace").strip().splitlines()
        if untar.wait() != 0:
            raise ExportError(f"unpacking {ref} failed: {err[-1] if err else 'tar failed'}")
    dev = rootfs / "dev"
    if dev.is_symlink() or (dev.exists() and not dev.is_dir()):
        dev.unlink()
    dev.mkdir(exist_ok=True)


def export_sqsh(engine, ref: str, output: str | os.PathLike, *, force: bool = False,
                processors: int | None = None, keep_setuid: bool = False,
                progress: Progress | None = None, level: int = SQUASH_LEVEL) -> ExportResult:
    """An enroot-compatible squashfs of ``ref`` at ``output`` (same image and level, same bytes)."""
    flags = squash_flags(level)
    say = progress or (lambda _m: None)
    output = Path(output)
    mksquashfs = require_tool("mksquashfs")
    require_tool("tar")
    image = _image(engine, ref)
    _refuse_existing(output, force)
    files = enroot_files(dict(image.config))
    stage = _staging(output)
    try:
        rootfs = stage / "rootfs"
        _flatten(engine, image, ref, rootfs, say)
        found = sanitize_rootfs(rootfs, keep_setuid=keep_setuid)
        report_sanitized(found, keep_setuid, say)
        for rel, text in files.items():
            _write_inside(rootfs, rel, text)
        say(f"writing squashfs {output}")
        staged_file = stage / "image.sqsh"
        argv = [mksquashfs, str(rootfs), str(staged_file), *flags]
        if processors:
            argv += ["-processors", str(int(processors))]
        _run(argv, "mksquashfs")
        _install(staged_file, output)
    finally:
        _rmtree(stage)
    return ExportResult("sqsh", output, image.id, tuple(found.special_files), tuple(found.setuid_files),
                        keep_setuid)


# --------------------------------------------------------------------------- OCI bundle


OCI_METHODS = ("flatten", "umoci")


def export_oci_bundle(engine, ref: str, output: str | os.PathLike, *, force: bool = False,
                      method: str = "flatten", docker_host: str | None = None,
                      keep_setuid: bool = False, progress: Progress | None = None) -> ExportResult:
    """An OCI runtime bundle (config.json + rootfs/) of ``ref`` at directory ``output``.

    ``method`` "flatten" (default): the engine's export of the image as rootfs/ and a config.json
    from ``runc spec`` filled in from the image config (fast: no layer re-compression).
    "umoci": ``skopeo copy docker-daemon:`` into an OCI layout, then ``umoci unpack`` (slower,
    and its config comes from umoci). Both end with hpc_runtime_config.
    """
    if method not in OCI_METHODS:
        raise ImagebuildError(f"unknown OCI bundle method {method!r} (one of: {', '.join(OCI_METHODS)})")
    say = progress or (lambda _m: None)
    output = Path(output)
    if method == "umoci":
        skopeo, umoci = require_tool("skopeo"), require_tool("umoci")
    else:
        runc = require_tool("runc")
        require_tool("tar")
    image = _image(engine, ref)
    _refuse_existing(output, force)
    stage = _staging(output)
    try:
        bundle = stage / "bundle"
        if method == "umoci":
            host = docker_host or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
            if not re.match(r"^(unix://)?/[A-Za-z0-9._/-]+\Z|^tcp://[A-Za-z0-9.-]+:[0-9]{1,5}\Z", host):
                raise ExportError(f"DOCKER_HOST {host!r} is not a unix socket path or tcp://HOST:PORT")
            layout = stage / "layout"
            say(f"copying {ref} into an OCI layout")
            # by id: the engine resolves exactly the image we inspected
            _run([skopeo, "copy", "--quiet", "--src-daemon-host", host, f"docker-daemon:{image.id}",
                  f"oci:{layout}:{_TAG}"], "skopeo copy")
            say(f"unpacking the bundle into {output}")
            argv = [umoci, "unpack", "--image", f"{layout}:{_TAG}", str(bundle)]
            if os.geteuid() != 0:
                argv.insert(2, "--rootless")
            _run(argv, "umoci unpack")
            found = sanitize_rootfs(bundle / "rootfs", keep_setuid=keep_setuid)
            config = json.loads((bundle / "config.json").read_text(encoding="utf-8"))
            if not (bundle / "rootfs").is_dir() or "process" not in config:
                raise ExportError("umoci produced no usable bundle (config.json or rootfs/ missing)")
            config = hpc_runtime_config(config)
        else:
            bundle.mkdir()
            specdir = stage / "spec"
            specdir.mkdir()
            argv = [runc, "spec", "--bundle", str(specdir)]
            if os.geteuid() != 0:
                argv.insert(2, "--rootless")
            _run(argv, "runc spec")
            defaults = json.loads((specdir / "config.json").read_text(encoding="utf-8"))
            _flatten(engine, image, ref, bundle / "rootfs", say)
            found = sanitize_rootfs(bundle / "rootfs", keep_setuid=keep_setuid)
            config = runtime_config(dict(image.config), defaults, bundle / "rootfs")
        report_sanitized(found, keep_setuid, say)
        (bundle / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n",
                                            encoding="utf-8")
        _install(bundle, output)
    finally:
        _rmtree(stage)
    return ExportResult("oci-bundle", output, image.id, tuple(found.special_files),
                        tuple(found.setuid_files), keep_setuid)


# --------------------------------------------------------------------------- SIF


def find_apptainer() -> str | None:
    for name in ("apptainer", "singularity"):
        path = shutil.which(name)
        if path:
            return path
    return None


def export_sif(engine, ref: str, output: str | os.PathLike, *, force: bool = False,
               progress: Progress | None = None) -> ExportResult:
    """A SIF of ``ref`` built by Apptainer/Singularity from the engine (``docker-daemon://``)."""
    say = progress or (lambda _m: None)
    output = Path(output)
    binary = find_apptainer()
    if binary is None:
        raise ExportError("SIF export needs apptainer or singularity on PATH; neither is installed "
                          "(not packaged in Debian bookworm: install Apptainer from its release packages)")
    image = _image(engine, ref)
    _refuse_existing(output, force)
    stage = _staging(output)
    try:
        staged_file = stage / "image.sif"
        say(f"building {staged_file.name} with {os.path.basename(binary)}")
        try:
            from spython.main import Client as SpythonClient
        except ImportError:
            _run([binary, "build", str(staged_file), f"docker-daemon:{ref}"], "apptainer build")
        else:
            SpythonClient.build(recipe=f"docker-daemon:{ref}", image=str(staged_file),
                                build_folder=str(stage), sudo=False, quiet=True, force=True)
            if not staged_file.is_file():
                raise ExportError(f"{os.path.basename(binary)} build produced no SIF for {ref}")
        _install(staged_file, output)
    finally:
        _rmtree(stage)
    return ExportResult("sif", output, image.id)


def export_image(engine, ref: str, fmt: str, output: str | os.PathLike, *, force: bool = False,
                 keep_setuid: bool = False, progress: Progress | None = None,
                 level: int = SQUASH_LEVEL) -> ExportResult:
    """Dispatch on ``fmt`` (one of FORMATS); ``level``: sqsh's gzip level."""
    if fmt == "sqsh":
        return export_sqsh(engine, ref, output, force=force, keep_setuid=keep_setuid, progress=progress,
                           level=level)
    if fmt == "oci-bundle":
        return export_oci_bundle(engine, ref, output, force=force, keep_setuid=keep_setuid,
                                 progress=progress)
    if fmt == "sif":
        return export_sif(engine, ref, output, force=force, progress=progress)
    raise ImagebuildError(f"unknown export format {fmt!r} (one of: {', '.join(FORMATS)})")
