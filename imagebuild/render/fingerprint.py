"""The inputs of the declared images' expansion, hashed for the key of its cache (expandcache.py):
the matrix (before it is loaded) and each wheel lock (before it is read), from regular files
only, bounded, never blocking on a FIFO or a device."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..knowledge import Knowledge
from ..digests import sha256_bytes

#: the largest input (the matrix, a wheel lock) hashed for the key; a larger one is not cached
INPUT_MAX_BYTES = 64 << 20

class _NotCached(Exception):
    """An input the cache cannot vouch for: not a regular file, unreadable, too large, or a value
    the cache has no form for. The expansion is computed (and not stored)."""


def _read_regular(path, limit: int) -> bytes | None:
    """The bytes of a regular file of at most `limit` bytes, None when there is no such path;
    _NotCached for anything else (a FIFO, a device, a folder, a larger file: never blocks)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):    # not even opened (a FIFO's writer waits)
            raise _NotCached(str(path))
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError:
        raise _NotCached(str(path)) from None
    with open(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            raise _NotCached(str(path))
        data = f.read(limit + 1)
    if len(data) > limit:
        raise _NotCached(str(path))
    return data


def file_sha256(path) -> str | None:
    """sha256 of a regular file's bytes (at most INPUT_MAX_BYTES), None when it does not exist;
    _NotCached when it is anything else."""
    data = _read_regular(path, INPUT_MAX_BYTES)
    return None if data is None else sha256_bytes(data)


def matrix_sha256(path) -> str | None:
    """The matrix's sha256 for the expansion's cache, taken BEFORE the matrix is loaded: a matrix saved
    in between is then filed under its older bytes, never the other way round. None when it
    cannot be taken (not a regular file: the loader says why), which only means no cache."""
    try:
        return file_sha256(path)
    except (_NotCached, OSError, ValueError):
        return None


def _lock_folder(k: Knowledge) -> Path:
    """Where the matrix's wheel locks are (wheellock.lock_root, without importing it)."""
    return Path(k.path).resolve().parent
