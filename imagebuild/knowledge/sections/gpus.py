"""`gpus:`: GPU products by name: compute capability (an entry of architectures), data-center or
not, the driver branches that drive them and the platforms their nodes are."""

from __future__ import annotations

from ..context import _Ctx
from ..matchers import category_matcher
from ..model import Gpu
from .common import branch_rules


def load(c: _Ctx, doc, sources, architectures) -> dict[str, Gpu]:
    gpus: dict[str, Gpu] = {}
    for g in c.seq(doc["gpus"], "gpus", doc, "gpus"):
        w = "gpus[]"
        c.shape(g, "gpus[]", w)
        name, cc = c.text(g, "name", w), c.version(g, "cc", w)
        if cc not in architectures:
            c.fail(f"{w}: {name}: compute capability {cc} is not under architectures", g, "cc")
        if name in gpus:
            c.fail(f"gpus: {name} is listed twice", g, "name")
        src = c.source(g, sources, w)
        plats = c.platform_list(g, "platforms", f"{w} {name}") or ()
        dsrc = c.source(g, sources, w, "driver_source", True)
        is_gpu = category_matcher([name])
        first_driver = branch_rules(c, g, w, [("gpu", is_gpu)], f"{name} GPUs", f"gpu-{name}",
                                    dsrc or src)
        gpus[name] = Gpu(name, cc, c.flag(g, "datacenter", w, False), src, plats,
                         g.get("first_branch"), first_driver, dsrc)
        if plats:
            c.add_rule(f"gpu-{name}-platform", [("gpu", is_gpu)],
                       [("platform", category_matcher(plats))],
                       f"{name} nodes are {' or '.join(plats)} machines", src, g.line)
    return gpus
