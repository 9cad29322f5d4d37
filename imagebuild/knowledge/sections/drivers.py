"""`drivers:`: NVIDIA's driver branches: type (NFB, PB, LTSB), end of life and the newest CUDA each
carries."""

from __future__ import annotations

import datetime as _dt

from ..context import _Ctx
from ..model import Branch


def load(c: _Ctx, doc, sources) -> dict[int, Branch]:
    drivers = c.shape(doc["drivers"], "drivers")
    branches: dict[int, Branch] = {}
    for b in c.seq(drivers["branches"], "drivers.branches", drivers, "branches"):
        w = "drivers.branches[]"
        c.shape(b, "drivers.branches[]", w)
        if not isinstance(b["branch"], int):
            c.fail(f"{w}: branch must be an integer such as 535", b, "branch")
        if b["branch"] in branches:
            c.fail(f"drivers.branches: R{b['branch']} is listed twice", b, "branch")
        typ = c.text(b, "type", w, True)
        if typ is not None and typ not in ("NFB", "PB", "LTSB"):
            c.fail(f"{w}: type must be NFB, PB or LTSB", b, "type")
        eol = b.get("eol")
        if eol is not None and eol is not True:
            eol = str(eol)
            try:
                _dt.date.fromisoformat(eol if len(eol) == 10 else eol + "-01")
            except ValueError:
                c.fail(f"{w}: eol must be YYYY-MM, YYYY-MM-DD or true", b, "eol")
        # type and eol may come from another page than the rest (lifecycle_source): that one is cited
        lifecycle = c.source(b, sources, w, key="lifecycle_source", optional=True)
        if lifecycle is not None and typ is None and eol is None:
            c.fail(f"{w}: lifecycle_source names the source of type and eol, and neither is given",
                   b, "lifecycle_source")
        branches[b["branch"]] = Branch(b["branch"], typ, eol, c.version(b, "newest_cuda", w, True),
                                       c.source(b, sources, w), lifecycle)
    return branches
