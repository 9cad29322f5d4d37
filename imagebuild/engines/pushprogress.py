"""A push's progress: the engine's per-layer push events summed into plain lines."""

from __future__ import annotations

import time

from .base import Progress

#: the least time between two progress lines of one push
PUSH_REPORT_SECONDS = 10.0


class PushProgress:
    """The engine's push events (per layer: Pushing with current/total bytes, Pushed, Layer already
    exists) summed into one plain line now and then: bytes sent of the known total, layers done."""

    def __init__(self, what: str, progress: Progress | None, clock=time.monotonic):
        self.what, self.progress, self.clock = what, progress, clock
        self.layers: dict[str, tuple[int, int]] = {}     # id -> (current, total)
        self.finished: set[str] = set()
        self.last = clock()

    def event(self, event: dict) -> None:
        layer, status = event.get("id"), str(event.get("status") or "")
        if not isinstance(layer, str) or self.progress is None:
            return
        detail = event.get("progressDetail") if isinstance(event.get("progressDetail"), dict) else {}
        cur, tot = detail.get("current"), detail.get("total")
        if isinstance(cur, int) and isinstance(tot, int) and tot > 0:
            self.layers[layer] = (min(cur, tot), tot)
        if status in ("Pushed", "Layer already exists"):
            self.finished.add(layer)
            if layer in self.layers:
                self.layers[layer] = (self.layers[layer][1], self.layers[layer][1])
        elif status == "Preparing" or status == "Waiting":
            self.layers.setdefault(layer, (0, 0))
        now = self.clock()
        if now - self.last >= PUSH_REPORT_SECONDS:
            self.last = now
            self.progress(self.line())

    def line(self) -> str:
        sent = sum(c for c, _ in self.layers.values())
        total = sum(t for _, t in self.layers.values())
        size = f"{_mb(sent)} of {_mb(total)} MB" if total else f"{_mb(sent)} MB"
        return f"pushing {self.what}: {size}, {len(self.finished)} of {len(self.layers)} layers done"

    def done(self) -> None:
        if self.progress is not None and self.layers:
            self.progress(self.line())


def _mb(n: int) -> str:
    return f"{n / 1e6:.0f}"
