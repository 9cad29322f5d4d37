"""What the two ways of building share: the registry of running builds (so Ctrl-C or SIGTERM can
stop every one), the build log, the check of a build context and the error naming a failed step.
Imports no other engine module but base, so docker_sdk and buildkit_cli can both import it."""

from __future__ import annotations

import contextlib
import itertools
import threading
from pathlib import Path
from typing import Callable, Iterator

from ..errors import BuildError
from .base import check_value


# Builds running now, each with the function that stops it (Ctrl-C, SIGTERM): cancel_builds()
# calls them all. Shared by every engine object and by the BuildKit CLI's builds.
_RUNNING_LOCK = threading.Lock()
_RUNNING: dict[int, Callable[[], None]] = {}
_RUNNING_KEYS = itertools.count()


@contextlib.contextmanager
def cancellable(stop: Callable[[], None]) -> Iterator[None]:
    """Register ``stop`` (stops one running build) while the block runs."""
    key = next(_RUNNING_KEYS)
    with _RUNNING_LOCK:
        _RUNNING[key] = stop
    try:
        yield
    finally:
        with _RUNNING_LOCK:
            _RUNNING.pop(key, None)


def cancel_builds() -> int:
    """Stop every build running now (in any thread); returns how many were asked to stop."""
    with _RUNNING_LOCK:
        stops = list(_RUNNING.values())
    for stop in stops:
        with contextlib.suppress(Exception):
            stop()
    return len(stops)


def _one_line(text: object, limit: int = 300) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _open_log(log: Path):
    log = Path(log)
    log.parent.mkdir(parents=True, exist_ok=True)
    return open(log, "w", encoding="utf-8", errors="replace", buffering=1)


def check_context(context: Path, dockerfile: str) -> tuple[Path, Path]:
    context = Path(context)
    if not context.is_dir():
        raise BuildError(f"build context {context} is not a directory")
    check_value(str(dockerfile), "Dockerfile name")
    df = context / dockerfile
    if not df.is_file():
        raise BuildError(f"no Dockerfile {dockerfile} in build context {context}")
    return context.resolve(), df


def step_failure(ref: str, step: str, error: str, tail: list[str], log: Path) -> BuildError:
    """A BuildError naming the image, the step, the last lines of its output and the log."""
    last = " | ".join(_one_line(t, 160) for t in tail[-3:] if t.strip())
    where = f" at step {step}" if step else ""
    msg = f"building {ref} failed{where}: {error}"
    if last:
        msg += f"; last lines: {last}"
    msg += f"; full log: {log}"
    exc = BuildError(msg)
    exc.ref = ref  # type: ignore[attr-defined]
    exc.step = step  # type: ignore[attr-defined]
    exc.tail = tail  # type: ignore[attr-defined]
    exc.log_path = Path(log)  # type: ignore[attr-defined]
    return exc
