"""`nccl:`: the NCCL versions built for each CUDA major, its published releases and the features
by the version that brought them. Optional."""

from __future__ import annotations

from ..context import _Ctx
from ..yamlfile import _List
from .common import major_build_rule, release_list


def load(c: _Ctx, doc, sources) -> tuple[tuple[dict, ...], tuple[str, ...]]:
    """(features, releases); both empty without the section."""
    if "nccl" not in doc:
        return (), ()
    nd = c.mapping(doc["nccl"], "nccl", required=("builds",), optional=("features", "releases"))
    nccl_releases = release_list(c, nd, "nccl", sources)
    for b in c.seq(nd["builds"], "nccl.builds", nd, "builds"):
        major_build_rule(c, b, "nccl", sources)
    feats = []
    for f in c.seq(nd.get("features", _List()), "nccl.features", nd, "features"):
        c.mapping(f, "nccl.features[]", required=("since", "feature", "source"), optional=("note",))
        feats.append({"since": c.version(f, "since", "nccl.features[]"),
                      "feature": c.text(f, "feature", "nccl.features[]"),
                      "source": c.source(f, sources, "nccl.features[]")})
    return tuple(feats), nccl_releases
