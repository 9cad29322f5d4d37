"""`platforms:`: the CPU architectures, best first, with NVIDIA's repository name and the OCI
platform of each; a matrix without the section is x86_64 only. Later sections name platforms
through `c.platform_list`, which this section's ids bound."""

from __future__ import annotations

from ..context import _Ctx
from ..model import MatrixPlatform
from ..schema import DEFAULT_PLATFORM
from ..yamlfile import _List


def load(c: _Ctx, doc, sources) -> dict[str, MatrixPlatform]:
    platforms: dict[str, MatrixPlatform] = {}
    for pl in c.seq(doc.get("platforms", _List()), "platforms", doc, "platforms"):
        w = "platforms[]"
        c.shape(pl, "platforms[]", w)
        pid = c.text(pl, "id", w)
        if pid in platforms:
            c.fail(f"platforms: {pid} is listed twice", pl, "id")
        platforms[pid] = MatrixPlatform(
            pid, c.text(pl, "cuda_repo", w), c.text(pl, "oci", w), c.source(pl, sources, w),
            tuple(str(a) for a in c.seq(pl.get("aliases", _List()), f"{w}.aliases", pl, "aliases")))
    c.known_platforms = list(platforms) or [DEFAULT_PLATFORM]
    return platforms
