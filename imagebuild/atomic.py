"""Replacing files and folders so that an interrupt never leaves one missing or half-written, and
signals that stop a command cleanly.

- ``atomic_file(path, mode)``: a file object on a new temporary file beside ``path``; when the
  block ends it is renamed over ``path`` (one ``os.replace``), on any exception it is removed and
  ``path`` is left as it was. ``path`` goes through ``output_target`` first: a device node, FIFO,
  socket or folder is refused, a link to a regular file is written through.
  ``write_atomic(path, data)`` writes text or bytes through it. This is
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
import errno
import fcntl
import os
import shutil
import signal
import stat
import tempfile
import threading
from pathlib import Path
from typing import IO, Iterator

from .errors import UsageError


class OutputRefused(UsageError):
    """An output path names something a command must not replace (a device, a FIFO, a folder)."""


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


_SYSTEM = ("/dev/", "/proc/", "/sys/")   # /dev/stdout, /proc/self/fd/1: a stream, never a file to replace


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def output_target(path: str | os.PathLike, *, folder: bool = False) -> Path:
    """Where a command may put what it writes at ``path`` (docs/hardening.md, "Data destroyed"):
    ``path`` itself when it is missing or a regular file (or, with ``folder``, a folder); through
    a symbolic link, the regular file (or folder) the link names, so the link stays and its target
    gets the new content, as a shell's ``>`` does. Anything else (a FIFO, a device node such as
    /dev/null, a socket, a link to one of those, a dangling link or a link loop) is refused with
    one line: replacing it by a regular file would destroy what the command did not make."""
    target = Path(path)
    if os.path.abspath(target).startswith(_SYSTEM):
        top = "/" + os.path.abspath(target).split("/")[1]
        raise OutputRefused(f"{path}: is under {top}, "
                            "the system's own files and streams; refused: name a plain file (without the "
                            "option the answer goes to stdout where the command prints one)")
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return target
    except OSError as exc:
        raise OutputRefused(f"{target}: cannot be written ({exc.strerror}); refused") from None
    if stat.S_ISLNK(st.st_mode):
        try:
            real = Path(os.path.realpath(target, strict=True))
            st = os.stat(real)
        except (OSError, RuntimeError):
            raise OutputRefused(f"{target}: a symbolic link to nothing that exists (or a loop); refused: "
                                "name a plain file") from None
        target = real
    if stat.S_ISREG(st.st_mode) or (folder and stat.S_ISDIR(st.st_mode)):
        return target
    raise OutputRefused(f"{path}: is {_kind(st.st_mode)}, not a regular file"
                        f"{' or folder' if folder else ''}; refused: nothing is written over it "
                        "(name a plain file; without the option the answer goes to stdout where "
                        "the command prints one)")


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_renameat2 = None


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "wb", *, perm: int | None = None,
                suffix: str = ".tmp", parents: bool = False, own: bool = False) -> Iterator[IO]:
    """A file opened with ``mode`` ("w"/"wb"; text is UTF-8 with "\\n" line ends) on a new file
    ``.<name>.<random><suffix>`` in ``path``'s folder (made first with ``parents``, else it must
    exist): same file system, so the rename is atomic. When the block ends without an exception
    the file is closed, given ``perm`` (default: what ``open`` gives under the umask) and renamed
    onto ``path``; on any exception (an interrupt too) it is removed and ``path`` is untouched.
    Nothing is fsync'd. ``.name`` is the temporary path, for a caller that checks the written file
    before it takes ``path``'s place. ``own``: ``path`` is imagebuild's own (a cache file in its
    cache folder), so whatever damage stands there is replaced; otherwise output_target's rule."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_file writes a new file: mode 'w' or 'wb', not {mode!r}")
    if parents:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    target = Path(path) if own else output_target(path)
    text = {} if "b" in mode else {"encoding": "utf-8", "newline": "\n"}
    create = 0o666 if perm is None else 0o600   # a file meant to be private is private from the start
    for _ in range(100):
        tmp = target.with_name(f".{target.name}.{os.urandom(4).hex()}{suffix}")
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
        if not own and output_target(target) != target:   # changed under us while we wrote
            raise OutputRefused(f"{target}: was replaced by a link while it was written; refused")
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_atomic(path: str | os.PathLike, data: str | bytes, *, perm: int | None = None,
                 suffix: str = ".tmp", parents: bool = False, own: bool = False) -> None:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` through ``atomic_file``: ``path`` is
    the old file or the new one, complete, at every instant."""
    with atomic_file(path, "w" if isinstance(data, str) else "wb", perm=perm, suffix=suffix,
                     parents=parents, own=own) as fh:
        fh.write(data)


def exchange(a: Path, b: Path) -> bool:
    """Swap ``a`` and ``b`` atomically; False where the system or file system cannot."""
    import ctypes       # here: every command imports this module, few swap folders
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
