"""`cuda:`: the compatibility modes (how a CUDA release runs on a driver), each major's
minor-version-compatibility driver floor, the releases with their drivers (Table 3), and the
forward-compatibility table (the driver branches each release's cuda-compat supports). Releases
known from NVIDIA's wheels only get the rules that keep them out of repository recipes."""

from __future__ import annotations

from ...versions import NONE, major_minor, parse_version, version_key
from ..context import _Ctx
from ..matchers import Matcher
from ..model import Compat, CudaRelease, Mode
from ..yamlfile import _List


def load(c: _Ctx, doc, sources):
    """(modes, majors, releases, compat)."""
    cuda = c.mapping(doc["cuda"], "cuda", required=("modes", "majors", "releases"),
                     optional=("compat",))
    modes = _modes(c, cuda, sources)
    majors = _majors(c, cuda, sources)
    releases = _releases(c, cuda, sources, majors)
    compat = _compat(c, cuda, sources, releases)
    return modes, majors, releases, compat


def _modes(c: _Ctx, cuda, sources) -> list[Mode]:
    modes = []
    for m in c.seq(cuda["modes"], "cuda.modes", cuda, "modes"):
        w = "cuda.modes[]"
        c.mapping(m, w, required=("id", "driver_floor", "source"),
                  optional=("gpu", "branch", "package", "caveat"))
        floor = c.text(m, "driver_floor", w)
        if floor not in ("release", "major", "none"):
            c.fail(f"{w}: driver_floor must be release, major or none", m, "driver_floor")
        gpu_req = m.get("gpu") or {}
        if gpu_req:
            c.mapping(gpu_req, f"{w}.gpu", required=(), optional=("datacenter",))
        branch = m.get("branch") or {}
        if branch:
            c.mapping(branch, f"{w}.branch", required=(), optional=("supported", "listed"))
            for key in branch:
                c.flag(branch, key, f"{w}.branch", False)
        package = c.text(m, "package", w, True)
        if package is not None:
            # a package name template: {major} and {minor} are the only fields it may name
            try:
                package.format(major=0, minor=0)
            except (KeyError, IndexError, ValueError):
                c.fail(f"{w}: package {package!r} may name only {{major}} and {{minor}}", m, "package")
        modes.append(Mode(c.text(m, "id", w), floor, tuple(sorted(gpu_req.items())),
                          bool(branch.get("supported", False)), package,
                          c.text(m, "caveat", w, True), c.source(m, sources, w),
                          bool(branch.get("listed", False))))
    return modes


def _majors(c: _Ctx, cuda, sources) -> dict[int, tuple[str, str]]:
    majors: dict[int, tuple[str, str]] = {}
    for m in c.seq(cuda["majors"], "cuda.majors", cuda, "majors"):
        c.mapping(m, "cuda.majors[]", required=("major", "minor_compat_driver", "source"))
        major = m["major"]
        if not isinstance(major, int):
            c.fail("cuda.majors[]: major must be an integer", m, "major")
        if major in majors:
            c.fail(f"cuda.majors: major {major} is listed twice", m, "major")
        majors[major] = (c.driver(m, "minor_compat_driver", "cuda.majors[]"),
                         c.source(m, sources, "cuda.majors[]"))
    return majors


def _releases(c: _Ctx, cuda, sources, majors) -> dict[str, CudaRelease]:
    releases: dict[str, CudaRelease] = {}
    for r in c.seq(cuda["releases"], "cuda.releases", cuda, "releases"):
        w = "cuda.releases[]"
        c.mapping(r, w, required=("version", "source"),
                  optional=("driver", "verified", "wheels_only", "note"))
        ver = c.version(r, "version", w)
        verified = c.flag(r, "verified", w, True)
        wheels_only = c.flag(r, "wheels_only", w, False)
        drv = c.driver(r, "driver", w, optional=True)
        if verified and drv is None and not wheels_only:
            c.fail(f"{w}: CUDA {ver} needs a driver (or verified: false, or wheels_only: true "
                   "for a release known from NVIDIA's wheels only)", r)
        if ver in releases:
            c.fail(f"cuda.releases: CUDA {ver} is listed twice (contradicting facts?)", r, "version")
        if parse_version(ver).major not in majors:
            c.fail(f"{w}: CUDA {ver} has no entry under cuda.majors", r, "version")
        releases[ver] = CudaRelease(ver, drv, c.source(r, sources, w), verified, r.line,
                                    wheels_only)
    wheel_cuda = sorted((r.version for r in releases.values() if r.wheels_only), key=version_key)
    if wheel_cuda:
        not_wheel = Matcher("not " + ", ".join(wheel_cuda),
                            (lambda ws: lambda x: x not in ws)(frozenset(wheel_cuda)))
        text = (f"CUDA {', '.join(wheel_cuda)} are known from NVIDIA's wheels (cuda-toolkit) only; "
                "no package repository is confirmed to carry them")
        src = releases[wheel_cuda[0]].source
        c.add_rule("cuda-wheels-only", [("pytorch", Matcher("none", lambda x: x == NONE))],
                   [("cuda", not_wheel)], text + " (without PyTorch, CUDA comes from a repository)",
                   src, cuda.line, tag="toolkit-repo")
        c.add_rule("cuda-wheels-only-repo", [], [("cuda", not_wheel)], text, src, cuda.line,
                   tag="repo-cuda")
    return releases


def _compat(c: _Ctx, cuda, sources, releases) -> dict[str, Compat]:
    compat: dict[str, Compat] = {}
    for e in c.seq(cuda.get("compat", _List()), "cuda.compat", cuda, "compat"):
        w = "cuda.compat[]"
        c.mapping(e, w, required=("cuda", "branches", "source"), optional=("note",))
        mm = c.version(e, "cuda", w)
        if mm.count(".") != 1:
            c.fail(f"{w}: cuda is a major.minor such as 12.8", e, "cuda")
        if mm in compat:
            c.fail(f"cuda.compat: CUDA {mm} is listed twice", e, "cuda")
        if not any(major_minor(r) == mm for r in releases):
            c.fail(f"{w}: CUDA {mm} has no release under cuda.releases", e, "cuda")
        brs = c.seq(e["branches"], f"{w}.branches", e, "branches")
        if not brs or not all(isinstance(b, int) and not isinstance(b, bool) for b in brs):
            c.fail(f"{w}: branches is a non-empty list of driver branches such as 535", e,
                   "branches")
        compat[mm] = Compat(mm, tuple(sorted(brs, reverse=True)), c.source(e, sources, w), e.line)
    return compat
