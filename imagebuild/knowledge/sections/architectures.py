"""`architectures:`: the GPU architectures by compute capability, the CUDA releases that support
each and the driver branches that drive it."""

from __future__ import annotations

from ..context import _Ctx
from ..matchers import Matcher, category_matcher, mm_range, or_none, version_matcher
from ..model import Architecture
from .common import branch_rules


def _or_none(m: Matcher) -> Matcher:
    return or_none(m)


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
        dsrc = c.source(a, sources, w, "driver_source", True)
        nsrc = c.source(a, sources, w, "nccl_source", True)
        nccl = c.spec(a, "nccl", w, True)
        if nccl is not None and nsrc is None:
            c.fail(f"{w}: {cc}: nccl needs its nccl_source (NCCL's release notes or history)",
                   a, "nccl")
        cc_is = category_matcher([cc])
        who = f"{a['name']} GPUs (sm_{cc.replace('.', '')})"
        first_driver = branch_rules(c, a, w, [("gpu.cc", cc_is)], who, f"arch-{cc}", dsrc or src)
        architectures[cc] = Architecture(cc, c.text(a, "name", w), first, last,
                                         a.get("last_branch"), src, a.get("first_branch"),
                                         first_driver, dsrc, nccl, nsrc)
        if nccl is not None:
            c.add_rule(f"arch-{cc}-nccl", [("gpu.cc", cc_is)],
                       [("nccl", _or_none(version_matcher(nccl)))],
                       f"{who} run NCCL {nccl}", nsrc, a.line)
        if first or last:
            c.add_rule(f"arch-{cc}-cuda", [("gpu.cc", cc_is)],
                       [("cuda", mm_range(first, last, allow_none=True))],
                       f"{a['name']} (sm_{cc.replace('.', '')}) is supported by CUDA "
                       + (f"{first} to {last}.x" if first and last else
                          f"{first} and newer" if first else f"up to {last}.x"),
                       src, a.line)
    return architectures
