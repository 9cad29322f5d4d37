"""Reading files of a node below a root folder without leaving it (`doctor --root DIR`, the GPUDirect
probe): every path is resolved inside the root as a chroot would resolve it (an absolute link
target starts again at the root, `..` stops at it), only regular files are read (never a device
such as /dev/zero, a FIFO or a socket: opened without blocking, checked before a byte is read),
and at most ``MAX_BYTES`` of each. The running node (root "/") is read as it is.

Standard library only: the smoke suite imports it inside images."""

from __future__ import annotations

import os
import stat

#: the most read of one file: /proc/modules of a large node is tens of kilobytes
MAX_BYTES = 1024 * 1024
#: links followed on one path before it is given up (the kernel's own limit)
MAX_LINKS = 40


class TooManyLinks(OSError):
    """More than MAX_LINKS symbolic links on one path."""


def chroot_path(top: str, rel: str, *, keep_missing: bool) -> str | None:
    """``rel`` inside the real folder ``top`` as a process chrooted there would see it: every link
    on the way followed with ``top`` as "/" (an absolute target starts again at ``top``, ``..``
    stops at it), so the result is always ``top`` or below it. A missing component is kept as it
    is with ``keep_missing`` (nothing beyond it can be a link), else the answer is None. Raises
    TooManyLinks past MAX_LINKS links."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    inside: list[str] = []          # the components resolved so far, below top
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if inside:
                inside.pop()
            continue
        path = os.path.join(top, *inside, part)
        try:
            st = os.lstat(path)
        except OSError:             # missing, or a component is not a folder
            if not keep_missing:
                return None
            inside.append(part)
            continue
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > MAX_LINKS:
                raise TooManyLinks(f"more than {MAX_LINKS} symbolic links on the way to /{rel.lstrip('/')}")
            target = os.readlink(path)
            if target.startswith("/"):
                inside = []
            parts = [p for p in target.split("/") if p not in ("", ".")] + parts
            continue
        inside.append(part)
    return os.path.join(top, *inside)


def resolve(root: str, rel: str) -> str | None:
    """The host path of ``rel`` inside ``root`` (the running node, root "/", as it is), or None
    when a component is missing or the links go round more than MAX_LINKS times."""
    if os.path.realpath(root) == "/":
        return os.path.join("/", rel)
    try:
        return chroot_path(os.path.realpath(root), rel, keep_missing=False)
    except OSError:
        return None


def read_text(root: str, rel: str, *, limit: int = MAX_BYTES) -> str | None:
    """The text of the regular file ``rel`` below ``root``, or None when it is missing, not a
    regular file, larger than ``limit`` bytes, or cannot be read."""
    path = resolve(root, rel)
    if path is None:
        return None
    # below a captured root every link is resolved already: one left at the name is a race
    nofollow = os.O_NOFOLLOW if os.path.realpath(root) != "/" else 0
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | nofollow)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(65536, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            return None             # no node file doctor reads is that large: not read at all
        return b"".join(chunks).decode("utf-8", errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def listdir(root: str, rel: str) -> list[str]:
    """The names in the folder ``rel`` below ``root``, sorted ([] when there is none)."""
    path = resolve(root, rel)
    if path is None:
        return []
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def is_dir(root: str, rel: str) -> bool:
    path = resolve(root, rel)
    return path is not None and os.path.isdir(path)


def is_file(root: str, rel: str) -> bool:
    path = resolve(root, rel)
    return path is not None and os.path.isfile(path)
