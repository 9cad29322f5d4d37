"""`os:`: the operating systems images are built on, in the order of preference: family, Python
versions, kernel, glibc, the CUDA NVIDIA's repository carries for each, base image and platforms.
(Named oses.py, not os.py, so as not to read as the standard library's module.)

Which CUDA release NVIDIA's repository of an OS carries, per platform, comes from the release's
own facts (`cuda.availability`) where it has any, else from the OS's `cuda` range (a release known
from the wheels only is in none): it becomes the OS's repository rules, and the releases no
repository carries become one rule of their own (the reason a chain cites first)."""

from __future__ import annotations

from ...versions import NONE, VersionSyntaxError, parse_version, version_key
from ..context import _Ctx
from ..matchers import Matcher, category_matcher, none_matcher, version_matcher
from ..model import CudaRelease, OsEntry
from ..schema import DEFAULT_PLATFORM


def load(c: _Ctx, doc, sources, releases: dict[str, CudaRelease] | None = None) -> dict[str, dict]:
    # oldest first: the order the explanations list releases in
    releases = dict(sorted((releases or {}).items(), key=lambda kv: version_key(kv[0])))
    oses: dict[str, dict] = {}
    carried: dict[str, dict[bool, dict[str, frozenset[str]]]] = {}   # os -> unverified -> platform
    for o in c.seq(doc["os"], "os", doc, "os"):
        w = "os[]"
        c.shape(o, "os[]", w)
        oid = c.text(o, "id", w)
        if oid in oses:
            c.fail(f"os: {oid} is listed twice", o, "id")
        pys = c.seq(o["python"], f"{w}.python", o, "python")
        for p in pys:
            try:
                parse_version(str(p))
            except VersionSyntaxError as exc:
                c.fail(f"{w}.python: {exc}", o, "python")
        src = c.source(o, sources, w)
        cuda_range = c.spec(o, "cuda", w, True)
        oses[oid] = OsEntry(id=oid, name=c.text(o, "name", w), family=c.text(o, "family", w),
                            python=tuple(str(p) for p in pys), kernel=c.version(o, "kernel", w, True),
                            glibc=c.version(o, "glibc", w, True), cuda=cuda_range,
                            nvidia_repo=c.text(o, "nvidia_repo", w, True),
                            base=c.text(o, "base", w, True),
                            platforms=tuple(c.platform_list(o, "platforms", w) or (DEFAULT_PLATFORM,)),
                            source=src, line=o.line)
        is_os = category_matcher([oid])
        c.add_rule(f"os-{oid}", [("os", is_os)],
                   [("python", category_matcher(str(p) for p in pys)),
                    ("platform", category_matcher(oses[oid].platforms))],
                   f"{o['name']} offers Python {', '.join(str(p) for p in pys)} on "
                   f"{', '.join(oses[oid].platforms)}", src, o.line)
        carried[oid] = _repo_rules(c, oses[oid], o["name"], releases, src, o.line)
    _check_availability(c, oses)
    _no_repo_rules(c, carried, releases)
    return oses


def _check_availability(c: _Ctx, oses) -> None:
    """cuda.availability's names against the OSes: a repository folder some os[].nvidia_repo
    names, an os id, and only platforms those OSes are built for."""
    repos: dict[str, set[str]] = {}
    for o in oses.values():
        if o.nvidia_repo:
            repos.setdefault(o.nvidia_repo, set()).update(o.platforms)
    ids = {oid: set(o.platforms) for oid, o in oses.items()}
    w = "cuda.availability[]"
    for e, kind, names, plats in c.availability_nodes:
        known = repos if kind == "repos" else ids
        for n in names:
            if n not in known:
                c.fail(f"{w}: {kind}: {n!r} is " + (
                    "no os[].nvidia_repo of this matrix (known: " if kind == "repos"
                    else "no OS of this matrix (known: ") + ", ".join(sorted(known)) + ")", names)
            extra = [p for p in plats if p not in known[n]]
            if extra:
                c.fail(f"{w}: {n} is not built for {', '.join(extra)} (its platforms: "
                       f"{', '.join(sorted(known[n]))})", e, "platforms")


def _carried(releases, entry, in_range, unverified: bool) -> dict[str, frozenset[str]]:
    """platform -> the releases NVIDIA's repository of `entry` carries there."""
    # the releases without availability facts: the range alone, on every platform of the OS
    ranged = frozenset(v for v in in_range if not releases[v].wheels_only
                       and not releases[v].availability)
    facts = [(v, r) for v, r in releases.items() if r.availability]
    return {p: ranged | {v for v, r in facts if r.carried_by(entry, p, unverified)}
            for p in entry.platforms}


def _cuda_in(versions) -> Matcher:
    allowed = frozenset(versions) | {NONE}
    return Matcher(f"none or one of {len(allowed) - 1} releases", "in", tuple(sorted(allowed)))


def _describe(entry, name, releases, in_range, per_platform, unverified: bool) -> str:
    """The repository's CUDA in words: its range, the releases in it no repository or image is
    confirmed to carry, and the releases its own facts add (with platform, source, verification)."""
    rng = entry.cuda
    every = frozenset().union(*per_platform.values())
    added = []
    for v in (v for v in releases if v in every):     # releases: oldest first
        plats = [p for p in entry.platforms if v in per_platform[p]]
        facts = [a for a in releases[v].availability if (a.verified or unverified) and (
            entry.nvidia_repo if a.kind == "repos" else entry.id) in a.names]
        if v in in_range and not facts and len(plats) == len(entry.platforms):
            continue
        what = "; ".join(sorted({("repository" if a.kind == "repos" else "nvidia/cuda images")
                                 + f" [{a.source}]" + ("" if a.verified else ", unverified")
                                 for a in facts}))
        on = f" on {', '.join(plats)}" if len(plats) < len(entry.platforms) else ""
        added.append(f"{v}{on}" + (f" ({what})" if what else ""))
    head = f"NVIDIA's CUDA repository for {name} carries CUDA "
    if not rng:
        return head + (", ".join(added) if added else "none (no repository is confirmed)")
    text = head + rng
    missing = [v for v in releases if v in in_range and v not in every]
    if missing:
        text += f" except {', '.join(missing)} (not confirmed in it)"
    if added:
        text += "; and " + ", ".join(added)
    return text


def _repo_rules(c: _Ctx, entry, name, releases, src, line) -> dict[bool, dict]:
    """CUDA from NVIDIA's repository for this OS: a stack without PyTorch takes CUDA from there.
    A PyTorch stack takes CUDA from the wheels torch pins, so the repository binds it only when the
    caller asks for repository CUDA (the `repo-cuda` tag: image expansion, whose recipes install
    CUDA packages from the repository). Where unverified facts widen what the repository carries,
    the verified rule gives way to an unverified twin under --allow-unverified. Returns what
    it carries: unverified (False, True) -> platform -> releases."""
    oid = entry.id
    is_os = category_matcher([oid])
    rng = version_matcher(entry.cuda) if entry.cuda else None
    in_range = frozenset(v for v in releases if rng is not None and rng(v))
    levels = [(False, _carried(releases, entry, in_range, False))]
    wide = _carried(releases, entry, in_range, True)
    if wide != levels[0][1]:
        levels.append((True, wide))
    for unverified, per_platform in levels:
        sets = set(per_platform.values())
        if len(sets) == 1:
            require, alts = [("cuda", _cuda_in(next(iter(sets))))], ()
        else:
            require, alts = [], [[("platform", category_matcher([p])), ("cuda", _cuda_in(vs))]
                                 for p, vs in per_platform.items()]
        text = _describe(entry, name, releases, in_range, per_platform, unverified)
        kw = {"verified": not unverified,
              "verified_only": len(levels) > 1 and not unverified}
        sfx = "-unverified" if unverified else ""
        c.add_rule(f"os-{oid}-cuda-repo{sfx}",
                   [("os", is_os), ("pytorch", none_matcher())],
                   require, text + "; without PyTorch, CUDA comes from there", src, line,
                   any_of=alts, tag="toolkit-repo", **kw)
        c.add_rule(f"os-{oid}-cuda-repo-torch{sfx}", [("os", is_os)], require, text, src, line,
                   any_of=alts, tag="repo-cuda", **kw)
    return {False: levels[0][1], True: wide}


def _no_repo_rules(c: _Ctx, carried, releases) -> None:
    """The releases no OS repository (or image) carries on any platform: kept out of stacks that
    take CUDA from a repository by one rule, in the place the cuda section left for it."""
    def nowhere(unverified):
        somewhere = frozenset().union(*(vs for per_os in carried.values()
                                        for vs in per_os[unverified].values()))
        return [v for v in releases if v not in somewhere]
    strict, wide = nowhere(False), nowhere(True)
    if not strict:
        return
    at = c.cuda_repo_rules_at
    src = releases[strict[0]].source
    line = min(releases[v].line for v in strict)
    levels = [(False, strict)] + ([(True, wide)] if wide != strict else [])
    for unverified, vs in reversed(levels):   # inserted at one place: the verified one first
        if not vs:
            continue
        wheels = [v for v in vs if releases[v].wheels_only]
        text = f"CUDA {', '.join(vs)} " + ("are" if len(vs) > 1 else "is") + (
            " known from NVIDIA's wheels (cuda-toolkit) only" if len(wheels) == len(vs) else
            " in no OS repository here") + (
            ": no NVIDIA repository or nvidia/cuda image of an OS here is confirmed to carry "
            + ("them" if len(vs) > 1 else "it"))
        reported = [v for v in strict if v not in wide]     # only unverified facts carry them
        if reported:
            text += (f" ({', '.join(reported)}: only unverified reports"
                     + (", used here" if unverified else ", which --allow-unverified uses") + ")")
        not_these = Matcher("not " + ", ".join(vs), "not_in", tuple(vs))
        kw = {"verified": not unverified,
              "verified_only": len(levels) > 1 and not unverified}
        sfx = "-unverified" if unverified else ""
        c.add_rule("cuda-wheels-only-repo" + sfx, [], [("cuda", not_these)], text, src, line,
                   tag="repo-cuda", at=at, **kw)
        c.add_rule("cuda-wheels-only" + sfx, [("pytorch", none_matcher())],
                   [("cuda", not_these)], text + " (without PyTorch, CUDA comes from a repository)",
                   src, line, tag="toolkit-repo", at=at, **kw)
