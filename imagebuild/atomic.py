"""Replacing files and folders so that an interrupt never leaves one missing or half-written, and
signals that stop a command cleanly.

- ``atomic_file(path, mode)``: a file object on a new temporary file beside ``path``; when the
  block ends it is renamed over ``path`` (one ``os.replace``), on any exception it is removed and
  ``path`` is left as it was. ``write_atomic(path, data)`` writes text or bytes through it. This is
  the host side's one file writer (the smoke suite, copied into images, keeps its own).
- ``exchange(a, b)``: swap two paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``); where
  the file system cannot, ``swap_dir`` falls back to two renames (the old folder moved to a unique
  name first, moved back if the second rename fails).
- ``work_dir(parent, prefix)``: a unique temporary folder beside the target (same file system,
  so renames are atomic), locked with ``flock`` for as long as its owner lives. A folder left by a
  killed run (SIGKILL cannot be caught) is unlocked, and the next run removes it; a folder another
  live run holds is never touched, so concurrent runs do not collide.
- ``deferred_signals()``: SIGINT and SIGTERM received inside the block are held until its end,
  then raised as KeyboardInterrupt (a swap of several folders is not cut in the middle).
- ``terminate_as_interrupt()``: SIGTERM raises KeyboardInterrupt like Ctrl-C, so the same cleanup
  runs for both.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import secrets
import shutil
import signal
import tempfile
import threading
from pathlib import Path
from typing import IO, Iterator

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_renameat2 = None


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "wb", *, perm: int | None = None,
                suffix: str = ".tmp", parents: bool = False) -> Iterator[IO]:
    """A file opened with ``mode`` ("w"/"wb"; text is UTF-8 with "\\n" line ends) on a new file
    ``.<name>.<random><suffix>`` in ``path``'s folder (made first with ``parents``, else it must
    exist): same file system, so the rename is atomic. When the block ends without an exception
    the file is closed, given ``perm`` (default: what ``open`` gives under the umask) and renamed
    onto ``path``; on any exception (an interrupt too) it is removed and ``path`` is untouched.
    Nothing is fsync'd. ``.name`` is the temporary path, for a caller that checks the written file
    before it takes ``path``'s place."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_file writes a new file: mode 'w' or 'wb', not {mode!r}")
    target = Path(path)
    if parents:
        target.parent.mkdir(parents=True, exist_ok=True)
    text = {} if "b" in mode else {"encoding": "utf-8", "newline": "\n"}
    create = 0o666 if perm is None else 0o600   # a file meant to be private is private from the start
    for _ in range(100):
        tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}{suffix}")
        try:
            fh = open(tmp, mode.replace("w", "x"), **text,
                      opener=lambda name, flags: os.open(name, flags | os.O_CLOEXEC, create))
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"no free temporary name beside {target}")
    try:
        with fh:
            yield fh
        if perm is not None:
            os.chmod(tmp, perm)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_atomic(path: str | os.PathLike, data: str | bytes, *, perm: int | None = None,
                 suffix: str = ".tmp", parents: bool = False) -> None:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` through ``atomic_file``: ``path`` is
    the old file or the new one, complete, at every instant."""
    with atomic_file(path, "w" if isinstance(data, str) else "wb", perm=perm, suffix=suffix,
                     parents=parents) as fh:
        fh.write(data)


def exchange(a: Path, b: Path) -> bool:
    """Swap ``a`` and ``b`` atomically; False where the system or file system cannot."""
    global _renameat2
    if _renameat2 is None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            _renameat2 = getattr(libc, "renameat2", False)
        except OSError:
            _renameat2 = False
    if not _renameat2:
        return False
    rc = _renameat2(_AT_FDCWD, os.fsencode(str(a)), _AT_FDCWD, os.fsencode(str(b)), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def swap_dir(new: Path, cur: Path, scratch: Path) -> None:
    """Put folder ``new`` at ``cur``; the old ``cur`` (if any) ends under ``scratch`` (a folder on
    the same file system, removed by the caller). At every instant ``cur`` is the old or the new
    folder, complete (with RENAME_EXCHANGE; the fallback has a window between two renames)."""
    if not cur.exists():
        os.replace(new, cur)
        return
    if exchange(new, cur):
        return  # ``new`` now holds the old folder, inside scratch
    backup = Path(tempfile.mkdtemp(prefix=f"{cur.name}.old-", dir=scratch))
    os.rmdir(backup)
    os.replace(cur, backup)
    try:
        os.replace(new, cur)
    except BaseException:
        os.replace(backup, cur)
        raise


@contextlib.contextmanager
def work_dir(parent: Path, prefix: str) -> Iterator[Path]:
    """A unique folder ``parent/<prefix>XXXX`` locked for this process, removed at the end (also
    on an exception or interrupt); stale ones of killed runs are removed first."""
    parent = Path(parent)
    remove_stale(parent, prefix)
    # made under a name remove_stale does not look at, locked, then renamed: no other run can
    # see it unlocked
    path = Path(tempfile.mkdtemp(prefix=prefix.rstrip("-") + "~", dir=parent))
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        final = parent / (prefix + path.name[len(prefix.rstrip("-")) + 1:])
        os.rename(path, final)
        path = final
        yield path
    finally:
        with deferred_signals():  # an interrupt now would leave half of it behind
            shutil.rmtree(path, ignore_errors=True)
            os.close(fd)


def remove_stale(parent: Path, prefix: str) -> list[Path]:
    """Remove ``parent/<prefix>*`` folders that no live process holds (their owner was killed)."""
    removed = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    for name in sorted(names):
        if not name.startswith(prefix):
            continue
        path = Path(parent) / name
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # a live run holds it
        try:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        finally:
            os.close(fd)
    return removed


@contextlib.contextmanager
def deferred_signals() -> Iterator[None]:
    """Hold SIGINT and SIGTERM until the block ends, then raise KeyboardInterrupt if one came.
    Outside the main thread (where handlers cannot be set) the block runs as is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, lambda signum, _frame: got.append(signum))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if got:
        raise KeyboardInterrupt


def _raise_interrupt(_signum, _frame):
    raise KeyboardInterrupt


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt in the main thread while the block runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
