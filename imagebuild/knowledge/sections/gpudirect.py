"""`gpudirect:`: the GPUDirect RDMA paths (nvidia-peermem, DMA-BUF, ...), what each requires of
the host (driver, OFED, open kernel modules, CUDA, GPU, kernel) and the NCCL that uses it."""

from __future__ import annotations

from ..context import _Ctx
from ..matchers import matcher_for
from ..model import GpudirectPath
from ..yamlfile import _List


def load(c: _Ctx, doc, sources) -> tuple[GpudirectPath, ...]:
    gdr = []
    for g in c.seq(doc.get("gpudirect", _List()), "gpudirect", doc, "gpudirect"):
        w = "gpudirect[]"
        c.shape(g, "gpudirect[]", w)
        reqs = c.shape(g["requires"], "gpudirect[].requires", f"{w}.requires")
        compiled = []
        for k, val in reqs.items():
            compiled.append((k, matcher_for(c, k, val, reqs, f"{w}.requires")))
        gdr.append(GpudirectPath(id=c.text(g, "id", w), requires=tuple(compiled),
                                 preferred=g.get("preferred", 99), nccl=c.spec(g, "nccl", w, True),
                                 note=c.text(g, "note", w, True), source=c.source(g, sources, w)))
    return tuple(gdr)
