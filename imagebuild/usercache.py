"""imagebuild's own cache folder, shared by the caches that keep work across processes (the
validated knowledge, knowledge/cache.py; the declared images' expansion, render/expandcache.py):
where it is, what every entry is keyed by, and how an entry is read without trusting it.

- The folder: $XDG_CACHE_HOME/imagebuild (a relative XDG_CACHE_HOME is ignored, as the XDG
  specification says), else ~/.cache/imagebuild. IMAGEBUILD_NO_CACHE=1 turns every cache off: each
  command then computes what it needs, as on a first run.
- The key: imagebuild's version, a fingerprint of its source (an edit, a checkout, a reinstall
  changes it), Python's version and the versions of the libraries that parse (PyYAML, packaging).
- Reading: an entry is a regular file of a bounded size, owned by this user and writable by no
  one else; anything else (a link, a FIFO, another user's file, a larger one) is not read, and the
  caller computes the answer again. A cache never makes a command fail.

Imports nothing from imagebuild but digests and localfile: every stage may use it.
"""

from __future__ import annotations

import functools
import os
import stat
import sys
from pathlib import Path

from . import __version__
from .digests import sha256_hasher
from .localfile import read_fd

#: the setting that turns the caches off
OFF = "IMAGEBUILD_NO_CACHE"


def folder() -> Path | None:
    """The cache folder, or None when caching is off (IMAGEBUILD_NO_CACHE set to anything but ""
    or "0") or there is no home folder to put it in."""
    if os.environ.get(OFF, "") not in ("", "0"):
        return None
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):
        return Path(xdg) / "imagebuild"
    try:
        return Path.home() / ".cache" / "imagebuild"
    except RuntimeError:                    # no home folder (HOME unset, no passwd entry)
        return None


@functools.lru_cache(maxsize=1)
def source_fingerprint() -> str:
    """sha256 over the name, size, modification and change times of every module of imagebuild's
    own source, so that any change to its code (an edit, a checkout, a reinstall: each rewrites the
    files) gives another cache key. The times, not the bytes: reading and hashing the ~1.1 MB of
    source costs 5 to 25 ms a process where stat() costs 1 to 2 ms; and the change time (ctime)
    cannot be set back by a copy that keeps the modification time."""
    root = Path(__file__).resolve().parent
    h = sha256_hasher()
    for here, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(here, name)
            st = os.stat(path)
            rel = os.path.relpath(path, root)
            h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\n".encode())
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def _libraries() -> dict:
    """Where the libraries that parse (PyYAML, packaging) are, with the size and times of the file
    that declares their version: found without importing them (a cache hit never needs PyYAML),
    and changed by any install, upgrade or downgrade."""
    from importlib.util import find_spec
    out = {}
    for name in ("yaml", "packaging"):
        try:
            spec = find_spec(name)
            st = os.stat(spec.origin) if spec is not None and spec.origin else None
        except (ImportError, OSError, ValueError):
            st = spec = None
        out[name] = None if st is None else f"{spec.origin}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}"
    return out


def runtime_key() -> dict:
    """What every cache entry depends on besides its own inputs."""
    return {"imagebuild": __version__, "source": source_fingerprint(),
            "python": f"{sys.version_info[0]}.{sys.version_info[1]}", **_libraries()}


def read_own(path: Path, limit: int) -> bytes | None:
    """The bytes of the cache entry at `path` when it is a regular file (not a link) of at most
    `limit` bytes, owned by this user and writable by no other; None otherwise, and on any error."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or st.st_size > limit
                or (hasattr(os, "geteuid") and st.st_uid != os.geteuid())
                or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)):
            return None
        return read_fd(fd, limit, path)
    except OSError:
        return None
    finally:
        os.close(fd)


def prune(here: Path, pattern: str, keep: int) -> None:
    """Remove all but the `keep` most recently written entries named like `pattern` (best effort)."""
    try:
        entries = sorted(here.glob(pattern), key=lambda p: p.stat().st_mtime)
        for old in entries[:-keep]:
            old.unlink(missing_ok=True)
    except OSError:
        pass
