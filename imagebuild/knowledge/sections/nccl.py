"""`nccl:`: the NCCL versions built for each CUDA major, its published releases (wheels: every
one selectable; `redist`: NVIDIA's redistributables no wheel has, a host's system copy only) and the features
by the version that brought them. A feature that is the support of a GPU architecture (`cc:`) or
of a GPU product (`gpu:`) is also a rule: a stack for such a host needs that NCCL or newer (or no
NCCL at all). Optional."""

from __future__ import annotations

from ..context import _Ctx
from ..matchers import Matcher, category_matcher
from ..yamlfile import _List
from ..model import LibraryRelease, NcclFeature
from .common import major_build_rule, redist_list, release_list


def _at_least(since: str) -> Matcher:
    return Matcher(f">= {since} (or none)", "at_least_or_none", since)


def load(c: _Ctx, doc, sources, architectures=None, gpus=None
         ) -> tuple[tuple[NcclFeature, ...], tuple[str, ...], dict[str, LibraryRelease]]:
    """(features, the wheel releases, every release the section names with what names it); all
    empty without the section."""
    if "nccl" not in doc:
        return (), (), {}
    nd = c.shape(doc["nccl"], "nccl")
    index: dict = {}
    nccl_releases = release_list(c, nd, "nccl", sources, index)
    for b in c.seq(nd["builds"], "nccl.builds", nd, "builds"):
        major_build_rule(c, b, "nccl", sources)
    known = redist_list(c, nd, "nccl", sources, str(doc.get("as_of", "")), index)
    feats = []
    for f in c.seq(nd.get("features", _List()), "nccl.features", nd, "features"):
        w = "nccl.features[]"
        c.shape(f, "nccl.features[]", w)
        feat = NcclFeature(c.version(f, "since", w), c.text(f, "feature", w), c.source(f, sources, w),
                           str(f["gpu"]) if "gpu" in f else None,
                           str(f["cc"]) if "cc" in f else None)
        feats.append(feat)
        if "cc" in f and "gpu" in f:
            c.fail(f"{w}: give cc or gpu, not both", f, "gpu")
        if "cc" in f:
            cc = c.version(f, "cc", w)
            if architectures is not None and cc not in architectures:
                c.fail(f"{w}: compute capability {cc} is not under architectures", f, "cc")
            when, who = [("gpu.cc", category_matcher([cc]))], f"sm_{cc.replace('.', '')} GPUs"
        elif "gpu" in f:
            name = c.text(f, "gpu", w)
            if gpus is not None and name not in gpus:
                c.fail(f"{w}: GPU {name!r} is not under gpus", f, "gpu")
            when, who = [("gpu", category_matcher([name]))], f"{name} GPUs"
        else:
            continue
        c.add_rule(f"nccl-{feat.since}-{f.get('cc') or f.get('gpu')}", when,
                   [("nccl", _at_least(feat.since))],
                   f"{who} need NCCL {feat.since} or newer ({feat.feature})", feat.source, f.line)
    return tuple(feats), nccl_releases, known
