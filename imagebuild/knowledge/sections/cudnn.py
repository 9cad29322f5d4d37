"""`cudnn:`: cuDNN's support matrix (lines: the CUDA, GPU and driver each version needs), its
published releases (wheels, and `redist`: NVIDIA's redistributables no wheel has) and the versions
built for each CUDA major. Optional: without it, no cuDNN rules."""

from __future__ import annotations

from ..context import _Ctx
from ..matchers import driver_min, version_matcher
from ..yamlfile import _List
from ...versions import version_key
from ..model import LibraryRelease
from .common import major_build_rule, redist_list, release_list


def load(c: _Ctx, doc, sources) -> tuple[tuple[str, ...], dict[str, LibraryRelease]]:
    """(every cuDNN release the section names, newest first; what names each); empty without
    the section."""
    if "cudnn" not in doc:
        return (), {}
    cd = c.shape(doc["cudnn"], "cudnn")
    # A support matrix: the rows of one cuDNN line (same `versions`) are alternatives. A stack
    # with that cuDNN needs one row whose CUDA range, GPU range and driver floor all hold.
    groups: dict[str, list] = {}
    for ln in c.seq(cd["lines"], "cudnn.lines", cd, "lines"):
        w = "cudnn.lines[]"
        c.shape(ln, "cudnn.lines[]", w)
        vs, cs = c.spec(ln, "versions", w), c.spec(ln, "cuda", w)
        ln_verified = c.flag(ln, "verified", w, True)
        alt = [("cuda", version_matcher(cs))]
        if "cc" in ln:
            alt.append(("gpu.cc", version_matcher(c.spec(ln, "cc", w))))
        if "driver" in ln:
            alt.append(("driver", driver_min(c.driver(ln, "driver", w))))
        groups.setdefault((vs, ln_verified), []).append((alt, c.source(ln, sources, w), ln.line))
    for (vs, rows_verified), rows in groups.items():
        srcs = sorted({s for _, s, _ in rows})
        text = (f"cuDNN {vs} runs with " + "; or ".join(
            ", ".join(f"{'sm' if k == 'gpu.cc' else k} {m.text}" for k, m in alt)
            for alt, _, _ in rows))
        c.add_rule(f"cudnn-{vs}-support" + ("" if rows_verified else "-unverified"),
                   [("cudnn", version_matcher(vs))], [], text, ",".join(srcs), rows[0][2],
                   verified=rows_verified, any_of=[alt for alt, _, _ in rows])
    index: dict = {}
    release_list(c, cd, "cudnn", sources, index)
    for b in c.seq(cd.get("builds", _List()), "cudnn.builds", cd, "builds"):
        major_build_rule(c, b, "cudnn", sources)
    known = redist_list(c, cd, "cudnn", sources, str(doc.get("as_of", "")), index)
    return tuple(sorted(known, key=version_key, reverse=True)), known
