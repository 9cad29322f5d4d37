"""The source cache: every tarball an image's recipe compiles from, fetched once, checked always.

Sites without access to GitHub release assets (an air-gapped cluster with a package proxy, a
mirror of git rather than of releases) fill a local cache instead: `imagebuild sources fetch`
downloads (or copies from a mirror folder or URL) every tarball the chosen images need into the
cache, each checked against the sha256 matrix.yaml records, and written atomically. Nothing is ever
taken without its checksum, and nothing is taken from elsewhere than the origin the user names.

Two forms of a tarball exist:

- `release`: the upstream release asset (the `url` and `sha256` of the matrix entry);
- `git`: an archive of the git tag with its submodules (`git_archive:` in the matrix, its own file
  name and sha256; no upstream twin, so it only comes from a mirror). UCX and Open MPI record one;
  gdrcopy's and nccl-tests' release URLs already are git tag archives.

The cache file of a release is `<name>-<version>.tar.gz` (or .tar.bz2, after the URL); of a git
archive, the file name the matrix records.
"""

from __future__ import annotations

import errno
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable
from urllib.parse import urljoin

from . import blocks
from ..atomic import atomic_file
from ..digests import sha256_file, sha256_hasher
from ..errors import ImagebuildError, Unavailable, UsageError
from ..knowledge.grammar import MAX_SOURCE_BYTES
from ..knowledge.recipe_inputs import release_file
from ..localfile import open_regular
from .. import httpio
from ..redact import redact
from ..versions import NONE

FORMS = ("release", "git")
CHUNK = 1 << 20
#: the most read of a source tarball whose size the matrix does not record (knowledge.grammar's
#: bound, which also caps a recorded size): past it the answer is refused
MAX_TARBALL_BYTES = MAX_SOURCE_BYTES
#: a `.part` file this long untouched has no writer left (a writer's every block moves its mtime,
#: and a download that stalls this long has timed out): a fetch killed outright left it
STALE_PART_SECONDS = 600


class SourceError(ImagebuildError):
    """A tarball cannot be had, or its bytes are not the ones the matrix records."""


class SourceUnavailable(Unavailable, SourceError):
    """The upstream or the mirror cannot be reached, or answers 5xx/429 (exit code 3)."""


@dataclass(frozen=True)
class Tarball:
    name: str              # ucx, openmpi, gdrcopy, nccl-tests
    version: str
    form: str              # release | git
    file: str              # the cache's file name
    sha256: str
    url: str | None        # the upstream URL (release form); None: no upstream twin
    source: str            # the matrix source id of the checksum
    size: int | None = None  # its exact length in bytes, where the matrix records it

    def to_json(self) -> dict:
        return {"name": self.name, "version": self.version, "form": self.form, "file": self.file,
                "sha256": self.sha256, "size": self.size, "url": self.url, "source": self.source}

    @property
    def limit(self) -> int:
        """The most bytes read for it: its recorded size, else MAX_TARBALL_BYTES."""
        return self.size if self.size else MAX_TARBALL_BYTES


def _release(name: str, entry) -> Tarball | None:
    """The release tarball of a pinned tool (knowledge's Tool) or a UCX / Open MPI release
    (MpiRelease): both have version, url (with {version}), sha256, source and size; None when it
    records no tarball."""
    if entry is None or not entry.url or not entry.sha256:
        return None
    version = str(entry.version)
    url = str(entry.url).replace("{version}", version)
    return Tarball(name, version, "release", release_file(name, version, url), str(entry.sha256), url,
                   str(entry.source or ""), entry.size)


def _git(name: str, entry) -> Tarball | None:
    ga = getattr(entry, "git_archive", None)      # a tool has none
    if ga is None:
        return None
    return Tarball(name, str(entry.version), "git", ga.file, ga.sha256, None, ga.source, ga.size)


def for_image(k, spec, form: str = "release") -> list[Tarball]:
    """The tarballs an image's recipe compiles (blocks.for_image): those the `tools:` section pins
    (gdrcopy, nccl-tests) in CUDA images, then those the family pins (UCX, Open MPI) when built
    from source. `form` git takes the git archive where the matrix records one."""
    if form not in FORMS:
        raise UsageError(f"unknown form {form!r} (one of {', '.join(FORMS)})", argument="--form")
    out: list[Tarball] = []
    wanted = []
    if not spec.compiles:
        # nothing compiled from upstream sources: a CPU image, or one whose MPI and UCX are the
        # OS's packages and whose CUDA and NCCL come from NVIDIA's wheels (built from the registries)
        return out
    chosen = blocks.for_image(spec)
    if spec.stack.get("cuda", NONE) != NONE:
        wanted += [(b.name, k.tools.get(b.name)) for b in chosen if b.pinned_by == "tools"]
    for b in chosen:
        if b.pinned_by == "family" and getattr(spec, b.name).install == "source":
            wanted.append((b.name, getattr(spec, b.name)))
    for name, entry in wanted:
        tb = (_git(name, entry) if form == "git" else None) or _release(name, entry)
        if tb is None:
            raise SourceError(f"{spec.id}: {name} {entry.version if entry is not None else None} has no url and sha256 "
                              "in matrix.yaml: nothing is fetched unverified")
        out.append(tb)
    return out


def catalog(k, specs: Iterable, form: str | None = None) -> list[Tarball]:
    """Every tarball the images need, once each, in a stable order: in the form each image's
    recipe compiles (its family's `sources:`), or in `form` for all."""
    seen: dict[str, Tarball] = {}
    for spec in specs:
        for tb in for_image(k, spec, form or spec.sources):
            seen.setdefault(tb.file, tb)
    return [seen[f] for f in sorted(seen)]


def is_url(origin: str) -> bool:
    return origin.startswith(("https://", "http://"))


@dataclass
class Fetched:
    tarball: Tarball
    how: str          # cached | copied | downloaded
    origin: str
    size: int


def fetch(tarballs: list[Tarball], cache: Path, origin: str | None = None,
          session=None, progress: Callable[[str], None] | None = None,
          argument: str = "--from") -> list[Fetched]:
    """Fill `cache` with `tarballs`. `origin`: None for the upstream URLs, a folder, or a mirror's
    base URL. A file already in the cache with the right sha256 is kept; every new file is
    checked before it replaces anything. The first failure stops with one SourceError."""
    cache = Path(cache)
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SourceError(f"cannot create the source cache: {exc.strerror}", file=str(cache)) from None
    if origin is not None and not is_url(origin) and not Path(origin).is_dir():
        raise UsageError(f"no folder {origin!r} (a mirror is a folder or an http(s) URL)",
                         argument=argument)
    _remove_stale_parts(cache, progress)
    out = []
    for tb in tarballs:
        dest = cache / tb.file
        if dest.is_file() and sha256_file(dest) == tb.sha256:
            out.append(Fetched(tb, "cached", str(dest), dest.stat().st_size))
            continue
        if origin is None:
            if tb.url is None:
                raise SourceError(f"{tb.file}: a git archive has no upstream twin; fill the cache "
                                  f"from a mirror ({argument} DIR|URL)")
            where, how = tb.url, "downloaded"
        elif is_url(origin):
            where, how = urljoin(origin.rstrip("/") + "/", tb.file), "downloaded"
        else:
            where, how = str(Path(origin) / tb.file), "copied"
        if progress:
            progress(f"{tb.file}: {how} from {redact(where)}")
        size = _put(tb, where, dest, session)
        out.append(Fetched(tb, how, redact(where), size))   # shown and reported: no credentials
    return out


#: seconds one tarball's download may take in all (IMAGEBUILD_HTTP_DEADLINE overrides it)
FETCH_DEADLINE_S = 3600.0


def _remove_stale_parts(cache: Path, progress) -> None:
    """The `.part` files a killed fetch left in the cache (none of a live one: see
    STALE_PART_SECONDS)."""
    now = time.time()
    for part in cache.glob(".*.part"):
        try:
            if part.is_file() and not part.is_symlink() and now - part.stat().st_mtime > STALE_PART_SECONDS:
                part.unlink()
                if progress:
                    progress(f"removed {part.name}, left by an interrupted fetch")
        except OSError:
            pass        # gone already, or not ours to remove: the fetch goes on


def _put(tb: Tarball, where: str, dest: Path, session) -> int:
    """Copy or download `where` into a temporary file beside `dest`, check its sha256, then move
    it into place (never a half-written or unchecked file under the cache's name). A full disk is
    one line, and the partial file is removed."""
    h = sha256_hasher()
    size = 0
    try:
        with atomic_file(dest, "wb", perm=0o600, suffix=".part") as out:
            for block in _read(where, session, tb):
                h.update(block)
                size += len(block)
                if size > tb.limit:
                    raise SourceError(f"{tb.file}: {redact(where)} sends more than {_limit_words(tb)}; refused")
                out.write(block)
            if tb.size and size != tb.size:
                raise SourceError(f"{tb.file}: {redact(where)} sent {size} bytes, not the {tb.size} "
                                  f"matrix.yaml records [{tb.source}]; refused")
            if h.hexdigest() != tb.sha256:
                raise SourceError(f"{tb.file}: sha256 {h.hexdigest()} from {where} is not the "
                                  f"{tb.sha256} matrix.yaml records [{tb.source}]; refused")
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise SourceError(f"{tb.file}: the disk under the source cache is full ({size} bytes "
                              "written, then removed); free space or give --cache a larger disk",
                              file=str(dest.parent)) from None
        raise SourceError(f"{tb.file}: cannot write the source cache ({exc.strerror or type(exc).__name__})",
                          file=str(dest.parent)) from None
    return size


def _limit_words(tb: Tarball) -> str:
    return (f"the {tb.size} bytes matrix.yaml records" if tb.size
            else f"the {MAX_TARBALL_BYTES} bytes a source tarball may have")


def _read(where: str, session, tb: Tarball) -> Iterable[bytes]:
    if not is_url(where):
        try:
            fd = open_regular(where, tb.limit)     # a FIFO or a device is never read
        except FileNotFoundError:
            raise SourceError("not in the mirror folder (--form git takes the git archive where "
                              "the matrix records one)", file=where) from None
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                raise SourceError("not a regular file in the mirror folder (a link to a device, a "
                                  "FIFO or a folder); refused", file=where) from None
            if exc.errno == errno.EFBIG:
                raise SourceError(f"more than {_limit_words(tb)}; refused", file=where) from None
            raise SourceError(f"cannot read: {exc.strerror}", file=where) from None
        with os.fdopen(fd, "rb") as fh:
            try:
                while True:
                    block = fh.read(CHUNK)
                    if not block:
                        return
                    yield block
            except OSError as exc:
                raise SourceError(f"cannot read: {exc.strerror}", file=where) from None
    import requests

    session = session or requests.Session()
    try:
        deadline = httpio.deadline_in(httpio.exchange_seconds(FETCH_DEADLINE_S))
        resp = httpio.get(session, where, deadline, SourceUnavailable(
            f"{tb.file}: {redact(where)}: no answer within its deadline; given up"), timeout=60)
        if resp.status_code >= 400:
            kind = SourceUnavailable if resp.status_code >= 500 or resp.status_code == 429 else SourceError
            raise kind(f"{where}: HTTP {resp.status_code}")
        what = f"{tb.file}: {redact(where)}"
        declared = httpio.declared_length(resp, what, SourceError)
        if declared is not None and (declared > tb.limit or (tb.size and declared != tb.size)):
            resp.close()
            raise SourceError(f"{redact(where)}: declares {declared} bytes, "
                              + (f"not {_limit_words(tb)}" if tb.size else f"more than {_limit_words(tb)}")
                              + "; refused")
        # one deadline for the whole file: a mirror dripping a byte a second is given up
        yield from httpio.chunks(resp, tb.limit, what, deadline, refuse=SourceError,
                                 late=SourceUnavailable)
    except requests.RequestException as exc:
        raise SourceUnavailable(f"cannot download {where}: {type(exc).__name__}") from None


def copy_into(tarballs: list[Tarball], cache: Path, dest: Path) -> list[Path]:
    """Place the images' tarballs, from the cache, in a build context folder (checked again)."""
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for tb in tarballs:
        src = Path(cache) / tb.file
        if not src.is_file():
            raise SourceError(f"{tb.file}: not in the source cache {cache} "
                              "(imagebuild sources fetch fills it)")
        if sha256_file(src) != tb.sha256:
            raise SourceError(f"{tb.file}: the cached file does not match its sha256 "
                              f"[{tb.source}]; fetch it again")
        shutil.copy2(src, dest / tb.file)
        out.append(dest / tb.file)
    return out
