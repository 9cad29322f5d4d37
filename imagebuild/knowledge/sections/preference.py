"""`preference:`: the order in which the resolver prefers newer components."""

from __future__ import annotations

from ..context import _Ctx
from ..schema import STACK


def load(c: _Ctx, doc) -> tuple[str, ...]:
    preference = tuple(doc.get("preference") or ("pytorch", "mode", "cuda", "python", "os",
                                                  "openmpi", "ucx"))
    for p in preference:
        if p not in STACK and p != "mode":
            c.fail(f"preference: unknown component {p!r}", doc, "preference")
    return preference
