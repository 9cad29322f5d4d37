"""Pieces that several sections share: driver-branch bounds (architectures, GPUs) and the
release lists (wheels and redistributables) and per-CUDA-major builds of cuDNN and NCCL."""

from __future__ import annotations

import datetime as _dt

from ...versions import VersionSyntaxError, parse_driver, parse_version, version_key
from ..context import _Ctx
from ..matchers import (Matcher, any_of, driver_max_branch, driver_min_branch,
                        equal_to, or_none, version_matcher)
from ..model import LibraryRelease
from ..yamlfile import _List


def branch_rules(c: _Ctx, node, where: str, when, what: str, rid: str, src: str
                 ) -> str | None:
    """first_branch / last_branch / first_driver of an architecture or a GPU: the driver branches
    (and, where NVIDIA publishes one, the release within the first branch) that drive it. The
    rules cite `driver_source` where the row gives one (the floor read elsewhere than the row's
    other facts), else the row's source. Returns first_driver, checked."""
    for key, matcher, word in (("first_branch", driver_min_branch, "from"),
                               ("last_branch", driver_max_branch, "up to")):
        if node.get(key) is None:
            continue
        b = node[key]
        if not isinstance(b, int) or isinstance(b, bool):
            c.fail(f"{where}: {key} must be an integer such as 535", node, key)
        c.add_rule(f"{rid}-{key.split('_')[0]}-branch", when, [("driver", matcher(b))],
                   f"{what} are driven by branches {word} R{b}", src, node.line)
    first = c.driver(node, "first_driver", where, True)
    if first is not None:
        if node.get("first_branch") is not None and parse_driver(first).branch != node["first_branch"]:
            c.fail(f"{where}: first_driver {first} is not of first_branch R{node['first_branch']}",
                   node, "first_driver")
        # worded as a branch floor, not ">= X": a stack's minimum driver (which reads ">= " floors
        # of rules that may hold) is the stack's own, not that of the GPUs it may meet
        floor = Matcher(f"R{parse_driver(first).branch} from {first} or a later branch",
                        "driver_min", first)
        c.add_rule(f"{rid}-first-driver", when, [("driver", floor)],
                   f"{what} need driver {first} or newer (R{parse_driver(first).branch} from "
                   f"{first}, or a later branch)", src, node.line)
    return first


def release_list(c: _Ctx, node, comp: str, sources,
                 index: dict | None = None) -> tuple[str, ...]:
    """`releases:` of cudnn/nccl: [{versions: [..], source: .., cuda_major: ..}]: every version
    published as a wheel. `index` (version -> {"sources", "majors"}) collects what names each."""
    out: list[str] = []
    for r in c.seq(node.get("releases", _List()), f"{comp}.releases", node, "releases"):
        w = f"{comp}.releases[]"
        c.shape(r, "releases[]", w)
        src = c.source(r, sources, w)
        major = r.get("cuda_major")
        for v in c.seq(r["versions"], f"{w}.versions", r, "versions"):
            try:
                parse_version(str(v))
            except VersionSyntaxError as exc:
                c.fail(f"{w}.versions: {exc}", r, "versions")
            if str(v) not in out:
                out.append(str(v))
            if index is not None:
                ent = index.setdefault(str(v), {"sources": [], "majors": set()})
                if src not in ent["sources"]:
                    ent["sources"].append(src)
                if isinstance(major, int) and not isinstance(major, bool):
                    ent["majors"].add(major)
    return tuple(sorted(out, key=version_key, reverse=True))


def redist_list(c: _Ctx, node, comp: str, sources, as_of: str,
                index: dict) -> dict[str, LibraryRelease]:
    """`redist:` of cudnn/nccl: releases NVIDIA publishes as redistributables (archives, packages)
    but as no wheel, or for a CUDA major no wheel has: [{version, source, cuda_majors?, platforms?,
    released?, note?}]. What a host's system copy can be, never a stack's own. With cuda_majors,
    a rule: that release (as a system copy) sits beside those CUDA majors only (with the ones its
    wheels have). Returns every release the section names, wheels included (`index`)."""
    redist: dict[str, tuple] = {}
    for r in c.seq(node.get("redist", _List()), f"{comp}.redist", node, "redist"):
        w = f"{comp}.redist[]"
        c.shape(r, "redist[]", w)
        v = c.version(r, "version", w)
        if v in redist:
            c.fail(f"{w}: {comp} {v} is listed twice", r, "version")
        src = c.source(r, sources, w)
        majors = None
        if "cuda_majors" in r:
            vals = r["cuda_majors"]
            if not isinstance(vals, _List) or not vals or any(
                    not isinstance(m, int) or isinstance(m, bool) for m in vals):
                c.fail(f"{w}: cuda_majors must be a list of integers such as [12, 13]", r, "cuda_majors")
            majors = tuple(sorted(set(vals)))
        platforms = c.platform_list(r, "platforms", w)
        if "released" in r:
            day = c.text(r, "released", w)
            try:
                _dt.date.fromisoformat(day)
            except ValueError:
                c.fail(f"{w}: released: malformed date {day!r} (expected YYYY-MM-DD)", r, "released")
            if day > as_of:
                c.fail(f"{w}: released {day}, after the matrix's as_of ({as_of}): not yet known on "
                       "the day the matrix describes", r, "released")
        redist[v] = (src, majors, platforms, r)
    out: dict[str, LibraryRelease] = {}
    for v, ent in index.items():
        wheel_majors = tuple(sorted(ent["majors"])) or None
        out[v] = LibraryRelease(tuple(ent["sources"]), wheel_majors, None, False)
    for v, (src, majors, platforms, r) in redist.items():
        wheel = out.get(v)
        srcs = tuple(dict.fromkeys((*(wheel.sources if wheel else ()), src)))
        known = None if majors is None else tuple(sorted(set(majors) | set(
            (wheel.cuda_majors or ()) if wheel else ())))
        out[v] = LibraryRelease(srcs, known, platforms, wheel is None)
        if known is None:
            continue
        c.add_rule(f"{comp}-{v}-cuda-builds", [(comp, equal_to(v))],
                   [("cuda", any_of([version_matcher(f"=={m}.*") for m in known]))],
                   f"{comp} {v} is built for CUDA {', '.join(map(str, known))}", src, r.line)
    return out


def major_build_rule(c: _Ctx, b, comp: str, sources):
    """One `builds:` entry of cudnn/nccl: the versions published for a CUDA major."""
    w = f"{comp}.builds[]"
    c.shape(b, "builds[]", w)
    major = b["cuda_major"]
    if not isinstance(major, int):
        c.fail(f"{w}: cuda_major must be an integer", b, "cuda_major")
    vs = c.spec(b, "versions", w)
    c.add_rule(f"{comp}-builds-cuda{major}", [("cuda", version_matcher(f"=={major}.*"))],
               [(comp, or_none(version_matcher(vs)))],
               f"{comp} is published for CUDA {major} in versions {vs}",
               c.source(b, sources, w), b.line)
