"""Reproducible images on Debian's Docker 20.10: a normalising step after the build.

Neither builder this engine has can clamp timestamps (its BuildKit predates SOURCE_DATE_EPOCH, the
classic builder has nothing of the kind), so two cold builds of the same recipe differ in file
mtimes, in the order files sit in each layer, in logs and caches the package managers leave, in the
`created` times of the config and its history, and in the classic builder's random container
hostname. :func:`normalize_image` rewrites the built image through the engine's own save/load:

- the base image's layers (the last stage's FROM), when they are the image's lowest, stay as
  they are: the base is an input with its own digest;
- every other layer tar is rewritten in a fixed order (path components sorted, a hard link after the file
  it names), mtimes clamped to the source date (``min(mtime, source date)``: files a package
  brought keep their older times), atime/ctime and every PAX record but extended attributes
  dropped, owners and modes kept;
- volatile files are left out (:data:`VOLATILE`: apt's and dpkg's logs, apt's caches and lists,
  ldconfig's aux cache, ``/root/.cache``, ``/tmp``): what changes from one build to the next and
  that nothing in the image reads;
- a ``.pyc`` whose header records a source mtime later than the source date gets the source date
  (its ``.py`` was clamped to the same second, so Python still takes the cache as valid);
- ``/etc/shadow``'s last-change day of an account added in the build (useradd writes the day it
  ran) is clamped to the source date's day, as ``imagebuild base`` does for the base;
- what differs between builders and not between file systems goes (:class:`Lower` tracks what
  the layers below hold): owner and group *names* (a builder writes those of its own host's user
  database, or none; the numeric ids stay), a whiteout's own mode and times, an opaque-directory
  marker for a directory the layers below do not have (BuildKit writes one for each directory a
  step creates), a directory entry the layers below hold with the same mode and owner when the
  layer has nothing under it (a step that only touched it: BuildKit's and buildah's mount points),
  and the empty ``/etc/hosts``, ``/etc/hostname`` and ``/etc/resolv.conf`` a builder leaves as
  mount points where the layers below have none;
- the config's ``created`` and every history entry's ``created`` become the source date; a
  COPY/ADD step's source hash in the history (the classic builder's, which covers mtimes) becomes
  the diff id of the layer the step made; the
  classic builder's ``container``/``container_config`` (a random hostname), ``docker_version`` and
  ``config.Image`` (the id of the previous, unnormalised step) are dropped; ``rootfs.diff_ids`` are those of the rewritten layers.

The image ID is the sha256 of that config, so the same inputs (recipe, base image, packages) give the
same ID. The source date is the matrix's ``as_of`` day at 00:00:00 UTC: a fact of the matrix, the
same date the ``org.opencontainers.image.created`` label states (SOURCE_DATE_EPOCH is not read:
it would make an image depend on the caller's environment rather than on the matrix).

Normalising reads and writes the whole image three times (a minute for a 1.4 GB image, three for
5.5 GB on these machines), so it is done once per builder's image: when the builder's cache serves
a whole build again it hands back the same image (same config, same ID), and :class:`NormalizeMemo`
remembers which normalised image that one became (a file per reference in the user's cache
folder). The next build of the same, unchanged recipe only moves its tag, once the engine is seen
to still hold that normalised image with the builder's labels and layer count. The builder's own
image is then kept, untagged (the classic builder caches a step by its result image: removing
the last one made every rebuild redo the last step and hand back a new ID); the one an earlier
build of the same reference left is removed when the new one differs. ``--no-cache`` builds
neither read nor keep anything.

The alternative was buildah (``bud --timestamp``), which MACHINE.md saw give identical IDs: it
would add a second image store (vfs, copied into the engine afterwards), a package to every
machine, and it does not remove logs and caches or fix ``.pyc`` headers, which differ between two
cold builds of an image that installs Python packages.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import re
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Callable

from .. import labels as L
from ..errors import EngineRefused, ImagebuildError
from ..digests import sha256_digest, sha256_file, sha256_hasher
from ..dockerfile import BASE_DIGEST_LABEL, BASE_NAME_LABEL, final_base
from ..sourcedate import rfc3339
from .buildcache import NormalizeMemo, SharedCache, _reuse  # noqa: F401 - SharedCache: re-exported
from .builders import Lower, as_buildkit, builder_noise, built_by_buildah, clean_name, is_whiteout
from ..patterns import SHA256_HEX

#: regular files (and symlinks) under these paths are left out of every normalised layer
VOLATILE = re.compile(
    r"^(?:var/log/(?:apt/.*|dpkg\.log|alternatives\.log|bootstrap\.log|journal/.*|.*\.log)"
    r"|var/cache/apt/.*|var/lib/apt/lists/.*|var/cache/ldconfig/aux-cache"
    r"|var/cache/debconf/.*-old|var/lib/dpkg/.*-old"
    r"|root/\.cache/.*|tmp/.*|var/tmp/.*)\Z")


def _sort_key(name: str) -> tuple[str, ...]:
    return tuple(name.strip("/").split("/"))


def _pyc(data: bytes, clamp: int) -> bytes:
    """A timestamp-based .pyc (flags 0) recording a source mtime after ``clamp`` gets ``clamp``."""
    if len(data) >= 16 and data[4:8] == b"\0\0\0\0":
        mtime = int.from_bytes(data[8:12], "little")
        if mtime > clamp:
            return data[:8] + (clamp & 0xFFFFFFFF).to_bytes(4, "little") + data[12:]
    return data


#: files whose third field is a day number (the last password change): useradd writes the day it
#: ran, so a package that adds a system user (openssh-server's sshd) dates the layer
SHADOW = frozenset({"etc/shadow", "etc/shadow-"})


def _shadow(data: bytes, clamp: int) -> bytes:
    """/etc/shadow with each last-change day after ``clamp``'s day set to that day."""
    day = clamp // 86400
    lines = []
    for line in data.split(b"\n"):
        fields = line.split(b":")
        if len(fields) >= 3 and fields[2].isdigit() and int(fields[2]) > day:
            fields[2] = str(day).encode()
        lines.append(b":".join(fields))
    return b"\n".join(lines)


def normalize_layer(src: str | os.PathLike, dst: str | os.PathLike, clamp: int,
                    lower: Lower | None = None) -> str:
    """Rewrite the layer tar ``src`` into ``dst`` (see the module's docstring); returns the
    ``sha256:<hex>`` of the new tar (its diff id). ``lower``: what the layers below hold (a
    layer is then rewritten as any builder's would be, and ``lower`` gets this layer's entries);
    None: the layer on its own (nothing is dropped for what lies below)."""
    with tarfile.open(src, "r:") as tin:
        members = tin.getmembers()
        by_name = {clean_name(m.name): m for m in members}
        noise = builder_noise(members, lower) if lower is not None else set()
        # directories and whiteouts (.wh.*) always stay: only files the build left are dropped
        kept = [m for m in members if clean_name(m.name) not in noise and (
                m.isdir() or is_whiteout(clean_name(m.name)) or not VOLATILE.match(clean_name(m.name)))]
        # hard links: the group's first name in the new order holds the data, the others link to it
        groups: dict[str, list[str]] = {}
        for m in kept:
            if m.islnk():
                groups.setdefault(clean_name(m.linkname), []).append(clean_name(m.name))
        kept_names = {clean_name(m.name) for m in kept}
        canonical: dict[str, str] = {}
        for target, links in groups.items():
            names = sorted(([target] if target in kept_names else []) + links, key=_sort_key)
            for n in names:
                canonical[n] = names[0]
        out = tarfile.open(dst, "w:", format=tarfile.PAX_FORMAT)
        try:
            for m in sorted(kept, key=lambda m: _sort_key(clean_name(m.name))):
                name = clean_name(m.name)
                if not name:
                    continue
                info = tarfile.TarInfo(name)
                info.mode, info.uid, info.gid = m.mode, m.uid, m.gid
                info.mtime = min(int(m.mtime), clamp)
                if is_whiteout(name):                  # only its name means anything
                    info.mode = info.mtime = 0
                info.pax_headers = {k: v for k, v in sorted(m.pax_headers.items())
                                    if k.startswith("SCHILY.xattr.")}
                data = None
                head = canonical.get(name)
                if head is not None and head != name:
                    info.type, info.linkname = tarfile.LNKTYPE, head
                elif m.isreg() or m.islnk():
                    source = by_name.get(clean_name(m.linkname)) if m.islnk() else m
                    if source is None or not source.isreg():
                        raise ImagebuildError(f"layer entry {name}: hard link to a missing file")
                    info.type = tarfile.REGTYPE
                    data = tin.extractfile(source).read() if name.endswith(".pyc") or name in SHADOW else None
                    if data is not None:
                        data = _shadow(data, clamp) if name in SHADOW else _pyc(data, clamp)
                        info.size = len(data)
                    else:
                        info.size = source.size
                else:
                    info.type, info.linkname = m.type, m.linkname
                    info.devmajor, info.devminor = m.devmajor, m.devminor
                if info.type == tarfile.REGTYPE:
                    fh = io.BytesIO(data) if data is not None else tin.extractfile(source)
                    out.addfile(info, fh)
                else:
                    out.addfile(info)
        finally:
            out.close()
        if lower is not None:
            lower.add(kept)
    digest = sha256_hasher()
    with open(dst, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


#: where BuildKit keeps an image's inline cache records in its config
INLINE_CACHE_KEY = "moby.buildkit.cache.v0"

_COPY_SOURCE = re.compile(rf"\b(dir|file|multi):{SHA256_HEX}\b")


def normalize_config(config: dict, diff_ids: list[str], epoch: int,
                     labels: dict[str, str] | None = None) -> dict:
    """The image config with fixed times, the rewritten layers' diff ids, and no build-host noise;
    ``labels`` are set as a builder's ``--label`` sets them (over the Dockerfile's, no history)."""
    created = rfc3339(epoch)
    # the classic builder's step container and client version, and BuildKit's inline cache
    # records (`build --cache-to`): facts of one build, not of the image
    out = {k: v for k, v in config.items()
           if k not in ("container", "container_config", "docker_version", INLINE_CACHE_KEY)}
    if isinstance(out.get("config"), dict) and out["config"].get("Image"):
        out["config"] = dict(out["config"], Image="")   # the classic builder's parent image id
    if labels:
        inner = dict(out.get("config") or {})
        inner["Labels"] = {**(inner.get("Labels") or {}), **labels}
        out["config"] = inner
    out["created"] = created
    history, layer = [], 0
    for h in config.get("history") or []:
        entry = dict(h, created=created)
        if not h.get("empty_layer"):
            # the classic builder names a COPY/ADD source by a hash of its files, mtimes included:
            # name it by the content of the layer it made instead
            if layer < len(diff_ids) and isinstance(entry.get("created_by"), str):
                entry["created_by"] = _COPY_SOURCE.sub(
                    lambda m: f"{m.group(1)}:{diff_ids[layer].split(':', 1)[-1]}", entry["created_by"])
            layer += 1
        history.append(entry)
    out["history"] = history
    out["rootfs"] = {"type": "layers", "diff_ids": list(diff_ids)}
    return out


def config_bytes(config: dict) -> bytes:
    return json.dumps(config, sort_keys=True, separators=(",", ":")).encode()


def _base_layers(engine, base: str | None, diff_ids: list[str]) -> list[str]:
    """The diff ids of ``base`` when they are the lowest of ``diff_ids``; [] otherwise."""
    if not base:
        return []
    image = engine.lookup(base)
    if image is None:
        return []
    layers = list(image.layers)
    return layers if layers and diff_ids[:len(layers)] == layers else []


class _Chunks(io.RawIOBase):
    """A readable file over an iterator of byte chunks (the engine's save stream)."""

    def __init__(self, chunks):
        self._chunks = iter(chunks)
        self._buf = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while not self._buf:
            try:
                self._buf = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(b), len(self._buf))
        b[:n], self._buf = self._buf[:n], self._buf[n:]
        return n


def _load(engine, folder: Path, ref: str) -> None:
    """`docker load` of the image layout in ``folder``, streamed as a tar through a pipe (no
    second copy of the image on disk); each file is removed from ``folder`` once it is sent."""
    import threading

    read_fd, write_fd = os.pipe()
    failed: list[BaseException] = []

    def feed() -> None:
        try:
            with os.fdopen(write_fd, "wb") as fh, \
                    tarfile.open(fileobj=fh, mode="w|", format=tarfile.PAX_FORMAT) as tf:
                for path in sorted(folder.rglob("*")):
                    tf.add(path, arcname=str(path.relative_to(folder)), recursive=False)
                    if path.is_file():
                        # sent: the engine holds its own copy now, so ours goes at once (the
                        # peak on disk is one copy of the image in flight, not two)
                        path.unlink()
        except BaseException as exc:  # noqa: BLE001 - reported after the load
            failed.append(exc)

    thread = threading.Thread(target=feed, name="imagebuild-normalize-load", daemon=True)
    thread.start()
    try:
        with os.fdopen(read_fd, "rb") as fh:
            def chunks():
                while True:
                    chunk = fh.read(1 << 20)
                    if not chunk:
                        return
                    yield chunk
            engine.load_stream(chunks())
    except EngineRefused as exc:
        raise ImagebuildError(f"image {ref}: the engine refused the normalised image "
                              f"({exc.detail})") from None
    finally:
        thread.join()
    if failed:
        raise ImagebuildError(f"image {ref}: writing the normalised image failed ({failed[0]})")


def normalize_image(engine, ref: str, epoch: int, *, base: str | None = None,
                    workdir: str | os.PathLike | None = None,
                    progress: Callable[[str], None] | None = None,
                    labels: dict[str, str] | None = None, reuse: bool = False,
                    memo: NormalizeMemo | None = None, dockerfile: str | None = None) -> str:
    """Rewrite the engine's image ``ref`` into its normalised form and move ``ref`` to it; returns
    the new image ID (``sha256:<hex>`` of its config). ``engine`` is an imagebuild Engine.
    ``dockerfile``: the text it was built from; with it, an image buildah built gets the config
    BuildKit would have written (imagebuild.builder.builders), so it normalises to BuildKit's ID.

    The layers of ``base`` (the image the last stage starts from), when they are the image's
    lowest, are kept byte for byte: the base is an input, named by its own digest, and an SBOM or
    a registry can still see the image is built on it.

    With ``reuse`` (a build the builder's cache may have served), a builder's image normalised
    before is not normalised again (see :class:`NormalizeMemo`), and the builder's image is kept."""
    built = engine.lookup(ref)
    if built is None:
        raise ImagebuildError(f"image {ref} is not in the engine")
    key = ""
    if reuse:
        memo = memo or NormalizeMemo(ref)
        base_image = engine.lookup(base) if base else None
        key = NormalizeMemo.key(built.id, epoch, base_image.id if base_image else None, labels)
        again = _reuse(engine, ref, built, memo, key, labels)
        if again is not None:
            if progress:
                progress(f"{ref}: the builder's cache served the image normalised before: "
                         f"{again[:19]}, not normalised again")
            return again
    where = Path(workdir) if workdir else Path(tempfile.gettempdir())
    where.mkdir(parents=True, exist_ok=True)
    _check_free(where, ref, int(built.size or 0))
    try:
        new_id = _normalize_in(engine, ref, epoch, base, where, progress, labels, dockerfile)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        raise ImagebuildError(
            f"image {ref}: normalising it filled the disk under {where} (it needs about twice the "
            f"image's {_gb(built.size)} there, and the engine as much again for the load); free "
            f"some space, or give `imagebuild build --output` a folder on a larger disk") from None
    if reuse:
        previous = memo.read().get("built")
        memo.write(built.id, key, new_id)
        if previous and previous != built.id:
            # an earlier build of this reference left its builder's image: it names nothing now
            gone = engine.lookup(previous)
            if gone is not None and not gone.tags:
                with contextlib.suppress(ImagebuildError):
                    engine.remove(previous, prune=False)
        return new_id
    old = engine.lookup(built.id) if built.id != new_id else None
    if old is not None and not old.tags:
        # the unnormalised image is left with no name: its record goes, but not its parents. The
        # classic builder's cache is that chain of step images (each the parent of the next);
        # pruning it with the record made every later build of the image redo every step after
        # the last one another image shares (smoke-cpu: 13 of 20 steps, 51 s instead of 6 s)
        with contextlib.suppress(ImagebuildError):
            engine.remove(built.id, prune=False)
    return new_id


def _gb(size: int | None) -> str:
    return f"{(size or 0) / 1e9:.1f} GB"


def _check_free(where: Path, ref: str, size: int) -> None:
    """Refuse before anything is written when ``where`` cannot even hold the unpacked image."""
    free = shutil.disk_usage(where).free
    if size and free < size:
        raise ImagebuildError(
            f"image {ref}: normalising it needs at least its {_gb(size)} free under {where}, which "
            f"has {_gb(free)}; free some space, or give `imagebuild build --output` a folder on a "
            f"larger disk")


def _normalize_in(engine, ref: str, epoch: int, base: str | None, where: Path,
                  progress: Callable[[str], None] | None, labels: dict[str, str] | None = None,
                  dockerfile: str | None = None) -> str:
    tmp = Path(tempfile.mkdtemp(prefix="imagebuild-normalize-", dir=where))
    try:
        # the engine's save stream is unpacked as it comes (no copy of the whole image on disk)
        src = tmp / "src"
        src.mkdir()
        with tarfile.open(fileobj=_Chunks(engine.save_stream(ref)), mode="r|") as tf:
            tf.extractall(src, filter="fully_trusted") if hasattr(tarfile, "data_filter") \
                else tf.extractall(src)
        manifest = json.loads((src / "manifest.json").read_text())
        if len(manifest) != 1:
            raise ImagebuildError(f"image {ref}: the engine saved {len(manifest)} images, expected 1")
        entry = manifest[0]
        config = json.loads((src / entry["Config"]).read_text())
        out = tmp / "out"
        out.mkdir()
        keep = _base_layers(engine, base, (config.get("rootfs") or {}).get("diff_ids") or [])
        if dockerfile is not None and built_by_buildah(config):
            # before any layer is rewritten: an image that is no build of the Dockerfile is refused
            base_image = engine.lookup(base) if base else None
            config = as_buildkit(config, dockerfile, dict(base_image.config or {}) if base_image else {},
                                 base_layers=len(keep), what=f"image {ref}")
            if progress:
                progress(f"{ref}: built by buildah: its config written as BuildKit writes it")
        diff_ids, layer_paths = [], []
        lower = Lower()
        for i, layer in enumerate(entry["Layers"]):
            dst = out / f"{i}.tar"
            if i < len(keep) and "sha256:" + sha256_file(src / layer) == keep[i]:
                os.replace(src / layer, dst)          # the base's own layer, as the base has it
                diff_ids.append(keep[i])
                lower.add_tar(dst)
            else:
                diff_ids.append(normalize_layer(src / layer, dst, epoch, lower))
            (src / layer).unlink(missing_ok=True)
            name = f"{diff_ids[-1].split(':', 1)[1]}/layer.tar"
            (out / name).parent.mkdir(exist_ok=True)
            os.replace(dst, out / name)
            layer_paths.append(name)
        shutil.rmtree(src)
        cfg = config_bytes(normalize_config(config, diff_ids, epoch, labels))
        new_id = sha256_digest(cfg)
        (out / f"{new_id.split(':', 1)[1]}.json").write_bytes(cfg)
        (out / "manifest.json").write_text(json.dumps(
            [{"Config": f"{new_id.split(':', 1)[1]}.json", "RepoTags": [ref], "Layers": layer_paths}]))
        if progress:
            progress(f"{ref}: normalised to {new_id[:19]} ({len(layer_paths)} layer(s))")
        _load(engine, out, ref)
        loaded = engine.inspect(ref).id
        if loaded != new_id:
            raise ImagebuildError(f"image {ref}: the engine loaded {loaded[:19]}, expected {new_id[:19]}")
        return new_id
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


REVISION_LABEL = L.REVISION


def base_labels(engine, dockerfile_text: str) -> dict[str, str]:
    """``base.name`` (the last stage's external FROM) and ``base.digest`` (its registry digest when
    the engine has one for that repository, else the engine's image ID) as the engine holds it now;
    empty when the base is not in the engine or there is none."""
    ref = final_base(dockerfile_text)
    if ref is None:
        return {}
    image = engine.lookup(ref)
    if image is None:
        return {}
    repo = ref.rsplit("@", 1)[0]
    repo = repo.rsplit(":", 1)[0] if ":" in repo.rsplit("/", 1)[-1] else repo
    digest = next((d.split("@", 1)[1] for d in image.repo_digests
                   if d.split("@", 1)[0] == repo), image.id)
    return {BASE_NAME_LABEL: ref, BASE_DIGEST_LABEL: digest}


def git_revision(folder: str | os.PathLike) -> str | None:
    """The commit checked out at ``folder`` when the tree holds no change (tracked or untracked,
    as ``git status`` sees it); None otherwise (no git, not a checkout, uncommitted changes: the
    commit would not say what was built)."""
    import subprocess

    try:
        head = subprocess.run(["git", "-C", str(folder), "rev-parse", "--verify", "HEAD^{commit}"],
                              capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        status = subprocess.run(["git", "-C", str(folder), "status", "--porcelain"],
                                capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    rev = head.stdout.strip()
    if status.returncode != 0 or status.stdout.strip() or not re.fullmatch(rf"[0-9a-f]{{40}}|{SHA256_HEX}", rev):
        return None
    return rev


class BuildTimeEngine:
    """An Engine whose ``build`` adds the base image's labels (:func:`base_labels`, read just
    before the build, so an image built earlier in the same run is seen as it is now), builds
    through ``engine`` (``no_cache`` when asked) and then normalises the image
    (:func:`normalize_image`) when its ref is in ``epochs`` (ref -> source date). With ``pins``
    (``build --locked``), an image's bases are those images.lock records (imagebuild.builder.pinning):
    it is built from ``Dockerfile.locked``. Every other attribute is the wrapped engine's
    (``cancel_builds`` included)."""

    def __init__(self, engine, epochs: dict[str, int], *, no_cache: bool = False,
                 pins: dict[str, dict[str, dict]] | None = None,
                 workdir: str | os.PathLike | None = None,
                 cache: "SharedCache | None" = None):
        self._engine = engine
        self._cache = cache
        # where normalising unpacks an image (the build's output folder: a disk the user chose,
        # not a /tmp that may be a small tmpfs)
        self._workdir = workdir
        self._epochs = dict(epochs)
        self._no_cache = no_cache
        # image ref -> {FROM ref -> images.lock's {"id", "digest"}}: build FROM those (--locked)
        self._pins = dict(pins or {})

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def build(self, context, ref, **kwargs):
        import dataclasses
        import time

        kwargs["no_cache"] = bool(kwargs.get("no_cache")) or self._no_cache
        dockerfile = Path(context) / kwargs.get("dockerfile", "Dockerfile")
        try:
            text = dockerfile.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            text = ""
        pinned = None
        if self._pins.get(ref):
            from .pinning import LOCKED_DOCKERFILE, pin_bases
            pinned = pin_bases(self._engine, text, self._pins[ref], what=ref)
            kwargs["dockerfile"], text = LOCKED_DOCKERFILE, pinned.text
        try:
            if pinned is not None:
                (Path(context) / LOCKED_DOCKERFILE).write_text(pinned.text, encoding="utf-8")
            extra = pinned.labels if pinned and pinned.labels else base_labels(self._engine, text)
            if extra:
                kwargs["labels"] = {**extra, **dict(kwargs.get("labels") or {})}
            if self._cache is not None:
                kwargs["cache"] = self._cache.for_build(ref)
            result = self._engine.build(context, ref, **kwargs)
            if self._cache is not None and self._cache.to:
                self._cache.push(self._engine, ref, result.image_id, kwargs.get("progress"))
            epoch = self._epochs.get(ref)
            if epoch is None:
                return result
            start = time.monotonic()
            new_id = normalize_image(self._engine, ref, epoch, base=final_base(text),
                                     workdir=self._workdir, progress=kwargs.get("progress"),
                                     reuse=not kwargs["no_cache"])
        finally:
            if pinned is not None:
                from .pinning import unpin
                unpin(self._engine, pinned.temporary)
        size = int(self._engine.inspect(ref).size or result.size_bytes)
        return dataclasses.replace(result, image_id=new_id, size_bytes=size,
                                   seconds=result.seconds + (time.monotonic() - start))
