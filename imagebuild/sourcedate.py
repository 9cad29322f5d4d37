"""The source date of a matrix: its ``as_of`` day at 00:00:00 UTC.

One fact read in three places: the ``org.opencontainers.image.created`` label (images), the date
Open MPI's configure records (render: SOURCE_DATE_EPOCH), and the clamp the normalising step puts
on mtimes and ``created`` times (reproducible). SOURCE_DATE_EPOCH from the caller's environment is
never read: an image depends on its matrix, not on who built it."""

from __future__ import annotations

import datetime as _dt

from .errors import ImagebuildError


def source_epoch(as_of: str) -> int:
    """The source date: the matrix's ``as_of`` (YYYY-MM-DD) at 00:00:00 UTC, as a Unix time."""
    try:
        day = _dt.date.fromisoformat(str(as_of))
    except ValueError:
        raise ImagebuildError(f"as_of {as_of!r} is not a YYYY-MM-DD date") from None
    return int(_dt.datetime(day.year, day.month, day.day, tzinfo=_dt.timezone.utc).timestamp())


def rfc3339(epoch: int) -> str:
    """``2026-11-21T00:00:00Z``: the RFC 3339 date-time of a Unix time, in UTC."""
    return _dt.datetime.fromtimestamp(int(epoch), _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
