"""Pieces that several sections share: driver-branch bounds (architectures, GPUs) and the
release lists and per-CUDA-major builds of cuDNN and NCCL."""

from __future__ import annotations

from ...versions import NONE, VersionSyntaxError, parse_version, version_key
from ..context import _Ctx
from ..matchers import Matcher, driver_max_branch, driver_min_branch, version_matcher
from ..yamlfile import _List


def branch_rules(c: _Ctx, node, where: str, when, what: str, rid: str, src: str):
    """first_branch / last_branch of an architecture or a GPU: the driver branches that drive it."""
    for key, matcher, word in (("first_branch", driver_min_branch, "from"),
                               ("last_branch", driver_max_branch, "up to")):
        if node.get(key) is None:
            continue
        b = node[key]
        if not isinstance(b, int) or isinstance(b, bool):
            c.fail(f"{where}: {key} must be an integer such as 535", node, key)
        c.add_rule(f"{rid}-{key.split('_')[0]}-branch", when, [("driver", matcher(b))],
                   f"{what} are driven by branches {word} R{b}", src, node.line)


def release_list(c: _Ctx, node, comp: str, sources) -> tuple[str, ...]:
    """`releases:` of cudnn/nccl: [{versions: [..], source: ..}]: every published version."""
    out: list[str] = []
    for r in c.seq(node.get("releases", _List()), f"{comp}.releases", node, "releases"):
        w = f"{comp}.releases[]"
        c.mapping(r, w, required=("versions", "source"), optional=("note", "cuda_major"))
        c.source(r, sources, w)
        for v in c.seq(r["versions"], f"{w}.versions", r, "versions"):
            try:
                parse_version(str(v))
            except VersionSyntaxError as exc:
                c.fail(f"{w}.versions: {exc}", r, "versions")
            if str(v) not in out:
                out.append(str(v))
    return tuple(sorted(out, key=version_key, reverse=True))


def major_build_rule(c: _Ctx, b, comp: str, sources):
    """One `builds:` entry of cudnn/nccl: the versions published for a CUDA major."""
    w = f"{comp}.builds[]"
    c.mapping(b, w, required=("cuda_major", "versions", "source"), optional=("note",))
    major = b["cuda_major"]
    if not isinstance(major, int):
        c.fail(f"{w}: cuda_major must be an integer", b, "cuda_major")
    vs = c.spec(b, "versions", w)
    allowed = version_matcher(vs)
    c.add_rule(f"{comp}-builds-cuda{major}", [("cuda", version_matcher(f"=={major}.*"))],
               [(comp, Matcher(f"{vs} (or none)", lambda x: x == NONE or allowed(x)))],
               f"{comp} is published for CUDA {major} in versions {vs}",
               c.source(b, sources, w), b.line)
