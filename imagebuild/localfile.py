"""Reading a file the user named (a lock, a key, a report, an SBOM, doctor's JSON, the matrix):
a regular file, at most a known number of bytes.

`open()` on a FIFO waits for a writer forever, and `read()` of a link to /dev/zero fills memory
until the process dies. So: opened without blocking, checked to be a regular file (links are
followed: the file they name must be regular), its size checked before reading, and read with a
cap. Failures are OSError with a readable `strerror`, so each caller's existing one-line message
("cannot read X (...)") stays the same and names the cause.

Imports nothing from imagebuild: every stage may use it.
"""

from __future__ import annotations

import errno
import os
import stat

#: JSON documents imagebuild writes and reads back (a lock, a smoke report, doctor's output, an SBOM)
MAX_DOCUMENT_BYTES = 64 * 1024 * 1024
#: a PEM key
MAX_KEY_BYTES = 64 * 1024


def open_regular(path: str | os.PathLike, limit: int) -> int:
    """A descriptor of the regular file at ``path``, opened without blocking, whose size is at
    most ``limit``: FileNotFoundError when there is none, OSError (EINVAL) when it is not a
    regular file, OSError (EFBIG) when it is larger. The caller closes it."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a folder, FIFO, socket or device)", str(path))
        if info.st_size > limit:
            raise OSError(errno.EFBIG, f"larger than {limit} bytes", str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(path: str | os.PathLike, limit: int) -> bytes:
    """The bytes of the regular file at ``path`` (open_regular's refusals), read under ``limit``."""
    fd = open_regular(path, limit)
    try:
        return read_fd(fd, limit, path)
    finally:
        os.close(fd)


def read_fd(fd: int, limit: int, path: str | os.PathLike = "") -> bytes:
    """Everything left to read from ``fd``, at most ``limit`` bytes: OSError (EFBIG) when there is
    more (a file that grew while being read). The caller closes ``fd``."""
    chunks, size = [], 0
    while True:
        chunk = os.read(fd, min(1 << 20, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise OSError(errno.EFBIG, f"larger than {limit} bytes", str(path))
    return b"".join(chunks)


def read_text(path: str | os.PathLike, limit: int) -> str:
    """read_bytes decoded as UTF-8 (UnicodeDecodeError as from bytes.decode)."""
    return read_bytes(path, limit).decode("utf-8")
