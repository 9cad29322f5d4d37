"""imagebuild sources list|fetch: the tarballs the images compile from, in a local cache."""

from __future__ import annotations

from pathlib import Path

from .. import add_matrix_option
from ..reporter import Reporter
from ...workspace import SOURCES, Workspace

DEFAULT_CACHE = SOURCES       # relative to the matrix's folder (workspace.py)


def configure(parser) -> None:
    add_matrix_option(parser)
    sub = parser.add_subparsers(dest="action", required=True, metavar="list|fetch")
    for name, helptext in (("list", "the tarballs the images compile, with their sha256"),
                           ("fetch", "fill the source cache, every file checked")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("images", nargs="*", metavar="IMAGE",
                       help="image ids or family names (default: every image)")
        p.add_argument("--form", choices=("release", "git"),
                       help="release assets, or git tag archives where the matrix records one "
                            "(default: what each image's recipe compiles, its family's sources:)")
        p.add_argument("--json", action="store_true", help="print a JSON document")
        if name == "fetch":
            p.add_argument("--cache", metavar="DIR",
                           help=f"the source cache (default: {DEFAULT_CACHE} beside matrix.yaml)")
            p.add_argument("--from", dest="origin", metavar="DIR|URL",
                           help="a mirror folder or base URL to fill the cache from "
                                "(default: the upstream URLs)")


def run(args) -> int:
    from ...render.run import MatrixRun
    from ...render import sources as S

    matrix_run = MatrixRun.open(args.matrix)    # the run's one read of the matrix
    k = matrix_run.k
    chosen = matrix_run.select(args.images)
    tarballs = S.catalog(k, chosen, args.form)
    rep = Reporter.for_args("sources", args)
    if args.action == "list":
        rep.result([t.to_json() for t in tarballs],
                   "\n".join(f"{t.file:<32} {t.form:<8} {t.sha256}  {t.url or '(git archive: from a mirror)'}"
                             for t in tarballs) if tarballs else None)
        return 0
    cache = Path(args.cache) if args.cache else Workspace.of(args.matrix).sources
    done = S.fetch(tarballs, cache, args.origin, progress=rep.progress)
    rep.result({"cache": str(cache), "tarballs": [
                   dict(f.tarball.to_json(), how=f.how, origin=f.origin, size=f.size) for f in done]},
               "\n".join([f"{f.tarball.file:<32} {f.how:<10} {f.size / 1e6:8.1f} MB  sha256 ok" for f in done]
                         + [f"{len(done)} tarballs in {cache}"]))
    return 0
