"""`ucx:` and `openmpi:` (one schema for both): the releases, each installed from source (a
tarball or a git archive, with its checksum) or from the OS's packages, the OSes that package it
and whether it is built CUDA-aware. Optional: without the section, no releases."""

from __future__ import annotations

from ..context import _Ctx
from ..matchers import category_matcher, version_matcher
from ..model import GitArchive, MpiRelease

# what an OS package of UCX may be recorded to carry (`ucx_info -b`'s uct modules, by the name the
# images' features use): the RDMA transports a recipe built from source always has
UCX_TRANSPORTS = ("cma", "rdmacm", "verbs")


def load(c: _Ctx, doc, sources, comp: str) -> dict[str, MpiRelease]:
    """The releases of `comp` ("ucx" or "openmpi") by version."""
    table = {}
    if comp not in doc:
        return table
    node = c.shape(doc[comp], comp)
    for r in c.seq(node["releases"], f"{comp}.releases", node, "releases"):
        w = f"{comp}.releases[]"
        c.shape(r, "releases[] (ucx, openmpi)", w)
        ver = c.version(r, "version", w)
        c.version(r, "line", w, True)
        if ver in table:
            c.fail(f"{comp}.releases: {ver} is listed twice", r, "version")
        install = c.text(r, "install", w, True)
        install = "source" if install is None else install      # left out: source; '' is refused
        if install not in ("source", "os"):
            c.fail(f"{w}: install must be source or os", r, "install")
        src = c.source(r, sources, w)
        archive = None
        if "git_archive" in r:
            ga = c.shape(r["git_archive"], "git_archive", f"{w}.git_archive")
            archive = GitArchive(str(ga["file"]), str(ga["sha256"]), str(ga["commit"]),
                                 c.source(ga, sources, f"{w}.git_archive"), ga.get("size"))
        req = []
        oses = None
        if "os" in r:
            oses = tuple(str(o) for o in c.seq(r["os"], f"{w}.os", r, "os"))
            req.append(("os", category_matcher(oses)))
        text = {key: None if r.get(key) is None else str(r[key]) for key in ("url", "sha256", "pml", "date")}
        # `cuda: false`: a build without CUDA support. It still runs beside a CUDA stack
        # (torch does not go through MPI for its GPUs); it is just not CUDA-aware, which
        # the answer says, and source builds rank first anyway (they are newer).
        table[ver] = MpiRelease(
            version=ver, source=src, install=install, line=None if r.get("line") is None else str(r["line"]),
            cuda_aware=r.get("cuda") is not False, size=r.get("size"), git_archive=archive, os=oses,
            transports=_transports(c, r, sources, comp, w) if "transports" in r else None, **text)
        if req:
            c.add_rule(f"{comp}-{ver}-build", [(comp, version_matcher("==" + ver))], req,
                       f"{comp} {ver} ({install} package) needs "
                       + " and ".join(f"{k} {m.text}" for k, m in req), src, r.line)
    return table


def _transports(c: _Ctx, r, sources, comp: str, w: str) -> tuple[str, ...]:
    """An OS package's transports (UCX only), each a known name, with the source that shows them
    (`transports_source`: what was read, where)."""
    if comp != "ucx" or r.get("install") != "os":
        c.fail(f"{w}: transports are recorded for UCX's OS packages only (a release built from "
               "source has what its configure line asks for)", r, "transports")
    tls = [str(t) for t in c.seq(r["transports"], f"{w}.transports", r, "transports")]
    for t in tls:
        if t not in UCX_TRANSPORTS:
            c.fail(f"{w}.transports: unknown transport {t!r} (known: {', '.join(UCX_TRANSPORTS)})",
                   r, "transports")
    if len(set(tls)) != len(tls):
        c.fail(f"{w}.transports: a transport is listed twice", r, "transports")
    c.source(r, sources, w, "transports_source")
    return tuple(sorted(tls))
