"""`architectures:`: the GPU architectures by compute capability, the CUDA releases that support
each and the driver branches that drive it."""

from __future__ import annotations

from ..context import _Ctx
from ..matchers import category_matcher, mm_range
from ..model import Architecture
from .common import branch_rules


def load(c: _Ctx, doc, sources) -> dict[str, Architecture]:
    architectures: dict[str, Architecture] = {}
    for a in c.seq(doc["architectures"], "architectures", doc, "architectures"):
        w = "architectures[]"
        c.shape(a, "architectures[]", w)
        cc = c.version(a, "cc", w)
        if cc in architectures:
            c.fail(f"architectures: compute capability {cc} is listed twice", a, "cc")
        first, last = c.version(a, "first_cuda", w, True), c.version(a, "last_cuda", w, True)
        src = c.source(a, sources, w)
        architectures[cc] = Architecture(cc, c.text(a, "name", w), first, last,
                                         a.get("last_branch"), src, a.get("first_branch"))
        cc_is = category_matcher([cc])
        if first or last:
            c.add_rule(f"arch-{cc}-cuda", [("gpu.cc", cc_is)],
                       [("cuda", mm_range(first, last, allow_none=True))],
                       f"{a['name']} (sm_{cc.replace('.', '')}) is supported by CUDA "
                       + (f"{first} to {last}.x" if first and last else
                          f"{first} and newer" if first else f"up to {last}.x"),
                       src, a.line)
        branch_rules(c, a, w, [("gpu.cc", cc_is)],
                     f"{a['name']} GPUs (sm_{cc.replace('.', '')})", f"arch-{cc}", src)
    return architectures
