"""The one way imagebuild reads an HTTP answer from a registry, a package index or a mirror
(docs/hardening.md, "Unbounded"): streamed, never ``.content`` of a body nobody bounded.

- ``declared_length(response)``: the Content-Length a server declares, or None; a value that is
  not a plain decimal number (``12abc``, ``-1``, 40 digits) is refused, never a ValueError.
- ``read_capped(response, cap, what, deadline)``: the body, at most ``cap`` bytes: a declared
  length above it is refused before reading, a body that runs past it at that point (a 206 that
  sends more than the range asked, an endless page). ``deadline`` (time.monotonic()) bounds the
  whole answer, so a server that drips a byte a second (each read within its timeout) is given
  up at that instant.
- ``chunks(...)``: the same bounds for a body too large to hold (a source tarball), streamed.
- ``retry_after(response)``: the seconds a 429 or 503 asks the client to wait (delta-seconds or
  an HTTP date), bounded; None when it says nothing usable.
- ``deadline_alarm(seconds, exc)``: a timer that interrupts a read blocked inside the socket
  layer (a server trickling its headers never trips a read timeout).

The caller names its own exception classes (``refuse``: the answer is wrong, exit 2; ``late``:
the service ran past its deadline, exit 3), so each command's messages stay its own. Standard
library only, and requests' Response interface.
"""

from __future__ import annotations

import contextlib
import email.utils
import os
import signal
import threading
import time
from typing import Iterator

CHUNK = 64 * 1024
#: seconds one exchange may take in all, where the caller sets no deadline of its own; the
#: environment variable IMAGEBUILD_HTTP_DEADLINE (seconds) overrides it for every caller
DEFAULT_EXCHANGE_S = 300.0
#: the longest wait a Retry-After is honoured for
MAX_RETRY_AFTER_S = 120.0


def exchange_seconds(default: float = DEFAULT_EXCHANGE_S) -> float:
    """The per-exchange deadline: IMAGEBUILD_HTTP_DEADLINE when set to a positive number."""
    text = os.environ.get("IMAGEBUILD_HTTP_DEADLINE", "")
    try:
        value = float(text)
    except ValueError:
        return default
    return value if 0 < value <= 86400 else default


def deadline_in(seconds: float | None = None) -> float:
    """time.monotonic() of the end of an exchange that starts now."""
    return time.monotonic() + (exchange_seconds() if seconds is None else seconds)


def declared_length(response, what: str, refuse: type[Exception]) -> int | None:
    """The body length the server declares; None without the header; ``refuse`` when malformed."""
    text = (response.headers.get("Content-Length") or "").strip()
    if not text:
        return None
    if not text.isdigit() or len(text) > 19:
        response.close()
        raise refuse(f"{what}: the answer's Content-Length {text[:24]!r} is not a byte count")
    return int(text)


def chunks(response, cap: int, what: str, deadline: float | None, *, refuse: type[Exception],
           late: type[Exception], hint: str = "") -> Iterator[bytes]:
    """The body of a streamed response in chunks, at most ``cap`` bytes in all, ended by
    ``deadline``; the response is closed however the reading ends."""
    try:
        declared = declared_length(response, what, refuse)
        if declared is not None and declared > cap:
            raise refuse(f"{what}: the answer declares {declared} bytes, more than the {cap} "
                         "imagebuild reads")
        size = 0
        parts = response.iter_content(CHUNK)
        while True:
            # a read fills its chunk before it returns: a server that drips a byte a second keeps
            # one read alive for ever, so the deadline is a timer around each read
            left = None if deadline is None else deadline - time.monotonic()
            too_late = f"{what}: still sending after its deadline{hint}; given up"
            if left is not None and left <= 0:
                raise late(too_late)
            with deadline_alarm(left, late(too_late)):
                chunk = next(parts, None)
            if chunk is None:
                return
            size += len(chunk)
            if size > cap:
                raise refuse(f"{what}: the answer is larger than the {cap} bytes imagebuild reads")
            yield chunk
    finally:
        response.close()


def read_capped(response, cap: int, what: str, deadline: float | None, *,
                refuse: type[Exception], late: type[Exception], hint: str = "") -> bytes:
    """The whole body of a streamed response under ``cap`` and ``deadline`` (see ``chunks``);
    it is also put back into the response, so ``.content``, ``.text`` and ``.json()`` read it."""
    body = b"".join(chunks(response, cap, what, deadline, refuse=refuse, late=late, hint=hint))
    response._content = body
    return body


def get(session, url: str, deadline: float | None, late: Exception, **kw):
    """``session.get(url, stream=True, **kw)``, its headers within ``deadline`` (a server that
    trickles its status line never trips a read timeout): ``late`` is raised when it passes."""
    left = None if deadline is None else max(deadline - time.monotonic(), 0.001)
    with deadline_alarm(left, late):
        return session.get(url, stream=True, **kw)


def retry_after(response) -> float | None:
    """Seconds the server asks to wait before the next try (Retry-After: seconds or an HTTP date),
    at most MAX_RETRY_AFTER_S; None when absent or unreadable."""
    headers = getattr(response, "headers", None) or {}
    text = str(headers.get("Retry-After") or "").strip()
    if not text:
        return None
    if text.isdigit() and len(text) < 10:
        return min(float(text), MAX_RETRY_AFTER_S)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return min(max(0.0, when.timestamp() - time.time()), MAX_RETRY_AFTER_S)


@contextlib.contextmanager
def deadline_alarm(seconds: float | None, error: Exception):
    """Raise ``error`` in the main thread when ``seconds`` pass inside the block, wherever it
    blocks. Off in other threads (signals reach only the main one) and when ``seconds`` is None."""
    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(_signum, _frame):
        raise error

    # nested in another alarm (a registry conversation's around one answer's read): the outer
    # timer is put back, less the time spent here, when this block ends
    previous = signal.signal(signal.SIGALRM, expire)
    outer, _ = signal.setitimer(signal.ITIMER_REAL, 0)
    signal.setitimer(signal.ITIMER_REAL, max(min(seconds, outer) if outer > 0 else seconds, 0.001))
    start = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer > 0:
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - start), 0.001))
