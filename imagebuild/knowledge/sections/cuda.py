"""`cuda:`: the compatibility modes (how a CUDA release runs on a driver), each major's
minor-version-compatibility driver floor, the releases with their drivers (Table 3), and the
forward-compatibility table (the driver branches each release's cuda-compat supports), and
where each release is published (`availability`: NVIDIA's repository of an OS, nvidia/cuda
images). Which repository carries which release becomes rules in the os section."""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import replace

from ...versions import major_minor, parse_version
from ..context import _Ctx
from ..model import Availability, Compat, CudaRelease, Mode
from ..yamlfile import _List


def load(c: _Ctx, doc, sources):
    """(modes, majors, releases, compat)."""
    cuda = c.shape(doc["cuda"], "cuda")
    modes = _modes(c, cuda, sources)
    majors = _majors(c, cuda, sources)
    releases = _releases(c, cuda, sources, majors)
    compat = _compat(c, cuda, sources, releases)
    return modes, majors, releases, compat


#: the compatibility modes the resolver ranks and explains (resolve/solver.py MODE_RANK): the
#: matrix says when each holds, not which modes exist
MODE_IDS = ("native", "minor-version", "forward-compat")


def _modes(c: _Ctx, cuda, sources) -> list[Mode]:
    modes = []
    for m in c.seq(cuda["modes"], "cuda.modes", cuda, "modes"):
        w = "cuda.modes[]"
        c.shape(m, "cuda.modes[]", w)
        floor = c.text(m, "driver_floor", w)
        if floor not in ("release", "major", "none"):
            c.fail(f"{w}: driver_floor must be release, major or none", m, "driver_floor")
        gpu_req = m.get("gpu") or {}
        if gpu_req:
            c.shape(gpu_req, "cuda.modes[].gpu", f"{w}.gpu")
        branch = m.get("branch") or {}
        if branch:
            c.shape(branch, "cuda.modes[].branch", f"{w}.branch")
            for key in branch:
                c.flag(branch, key, f"{w}.branch", False)
        package = c.text(m, "package", w, True)
        if package is not None:
            # a package name template: {major} and {minor} are the only fields it may name
            try:
                package.format(major=0, minor=0)
            except (KeyError, IndexError, ValueError):
                c.fail(f"{w}: package {package!r} may name only {{major}} and {{minor}}", m, "package")
        mode_id = c.text(m, "id", w)
        if mode_id not in MODE_IDS:
            c.fail(f"{w}: id {mode_id!r} is not a compatibility mode the resolver knows "
                   f"({', '.join(MODE_IDS)})", m, "id")
        if any(x.id == mode_id for x in modes):
            c.fail(f"{w}: mode {mode_id} is listed twice", m, "id")
        modes.append(Mode(mode_id, floor, tuple(sorted(gpu_req.items())),
                          bool(branch.get("supported", False)), package,
                          c.text(m, "caveat", w, True), c.source(m, sources, w),
                          bool(branch.get("listed", False))))
    return modes


def _majors(c: _Ctx, cuda, sources) -> dict[int, tuple[str, str]]:
    majors: dict[int, tuple[str, str]] = {}
    for m in c.seq(cuda["majors"], "cuda.majors", cuda, "majors"):
        c.shape(m, "cuda.majors[]")
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
    nodes = {}
    for r in c.seq(cuda["releases"], "cuda.releases", cuda, "releases"):
        w = "cuda.releases[]"
        c.shape(r, "cuda.releases[]", w)
        ver = c.version(r, "version", w)
        verified = c.flag(r, "verified", w, True)
        wheels_only = c.flag(r, "wheels_only", w, False)
        drv = c.driver(r, "driver", w, optional=True)
        if ver in releases:
            c.fail(f"cuda.releases: CUDA {ver} is listed twice (contradicting facts?)", r, "version")
        if parse_version(ver).major not in majors:
            c.fail(f"{w}: CUDA {ver} has no entry under cuda.majors", r, "version")
        releases[ver] = CudaRelease(ver, drv, c.source(r, sources, w), verified, r.line,
                                    wheels_only)
        nodes[ver] = r
    if "availability" in cuda:
        _availability(c, cuda, sources, releases, nodes)
    for ver, rel in releases.items():
        # a release is known from a source with its driver (Table 3), or from NVIDIA's wheels
        # only, or from where it is published (cuda.availability: the mode is then judged by the
        # per-major floor and cuda.compat alone)
        if rel.verified and rel.driver is None and not rel.wheels_only and not rel.availability:
            c.fail(f"cuda.releases[]: CUDA {ver} needs a driver (or verified: false, or "
                   "wheels_only: true for a release known from NVIDIA's wheels only, or a "
                   "cuda.availability fact that says where it is published)", nodes[ver])
    # the rules that keep releases no OS repository carries out of repository stacks are made by
    # the os section, which knows the repositories: they take this place among the rules
    c.cuda_repo_rules_at = len(c.rules)
    return releases


# NVIDIA's repository folders: a distribution's short name and version (ubuntu2404, rhel9, debian13)
_REPO = re.compile(r"[a-z]+[0-9]+")


def _availability(c: _Ctx, cuda, sources, releases, nodes) -> None:
    """`cuda.availability`: where each release is published besides the wheels. Checked here
    against the releases (a known version, no verified fact for a release marked wheels_only);
    the os section checks the names against the OSes (a repository folder some os[].nvidia_repo
    names, an os id, platforms that OS is built for). The release is given its facts."""
    facts: dict[str, list[Availability]] = {}
    for e in c.seq(cuda["availability"], "cuda.availability", cuda, "availability"):
        w = "cuda.availability[]"
        c.shape(e, "cuda.availability[]", w)
        ver = c.version(e, "cuda", w)
        if ver not in releases:
            c.fail(f"{w}: CUDA {ver} is not a release under cuda.releases (give its full version, "
                   "such as 13.4.1)", e, "cuda")
        kinds = [k for k in ("repos", "images") if k in e]
        if len(kinds) != 1:
            c.fail(f"{w}: give either repos (NVIDIA's package repositories, os[].nvidia_repo "
                   "folders such as ubuntu2404) or images (the OS ids nvidia/cuda images are "
                   "published for)", e)
        kind = kinds[0]
        names = c.seq(e[kind], f"{w}.{kind}", e, kind)
        if not names:
            c.fail(f"{w}: {kind} is an empty list", e, kind)
        for n in names:
            if isinstance(n, bool) or not isinstance(n, str) or (
                    kind == "repos" and not _REPO.fullmatch(n)) or not n.strip():
                c.fail(f"{w}: {kind}: {n!r} is not " + (
                    "a repository folder such as ubuntu2404 or rhel9" if kind == "repos"
                    else "an OS id such as ubuntu24.04"), names)
        plats = c.platform_list(e, "platforms", w) or ()
        if "platforms" in e and not plats:
            c.fail(f"{w}: platforms is an empty list (leave it out: every platform of the OS)", e,
                   "platforms")
        seen = c.text(e, "seen", w, True)
        if seen is not None:
            try:
                _dt.date.fromisoformat(seen)
            except ValueError:
                c.fail(f"{w}: seen must be a day, YYYY-MM-DD", e, "seen")
        verified = c.flag(e, "verified", w, True)
        rel = releases[ver]
        if verified and rel.wheels_only:
            c.fail(f"{w}: CUDA {ver} is marked wheels_only: true (line {rel.line}), which says no "
                   f"repository or image is confirmed, but this verified fact says {kind} "
                   f"{', '.join(names)} carry it: drop wheels_only, or mark this fact verified: "
                   "false", e, kind)
        c.availability_nodes.append((e, kind, names, tuple(plats)))
        facts.setdefault(ver, []).append(Availability(
            kind, tuple(str(n) for n in names), tuple(plats), verified, c.source(e, sources, w),
            e.line, seen))
    for ver, found in facts.items():
        releases[ver] = replace(releases[ver], availability=tuple(found))


def _compat(c: _Ctx, cuda, sources, releases) -> dict[str, Compat]:
    compat: dict[str, Compat] = {}
    for e in c.seq(cuda.get("compat", _List()), "cuda.compat", cuda, "compat"):
        w = "cuda.compat[]"
        c.shape(e, "cuda.compat[]", w)
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
