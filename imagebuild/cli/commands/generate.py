"""imagebuild generate: write Dockerfiles/<id>/Dockerfile and singularity/<id>.def for every image."""

from __future__ import annotations

from pathlib import Path

from .. import add_matrix_option
from ..reporter import Reporter


def configure(parser) -> None:
    add_matrix_option(parser)
    parser.add_argument("images", nargs="*", metavar="IMAGE",
                        help="only these images (ids or family names); default: all")
    parser.add_argument("--output", metavar="DIR",
                        help="write under DIR instead of beside matrix.yaml (the current folder for the packaged matrix)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when the committed files are stale")
    parser.add_argument("--recipes", metavar="DIR",
                        help="templates folder (default: the templates installed with imagebuild, "
                             "package data read with importlib.resources)")
    parser.add_argument("--allow-unverified", action="store_true",
                        help="also images that rely on facts marked verified: false (needs --output)")
    parser.add_argument("--json", action="store_true",
                        help="print the images, the files and which were changed (or are stale) as JSON")


def run(args) -> int:
    from ...render.run import MatrixRun
    from ...render import images as I
    from ...render import output, renderer as render
    from ...workspace import Workspace

    from ...errors import UsageError

    if args.allow_unverified and not args.output:
        raise UsageError("--allow-unverified needs --output DIR: the committed recipes hold images "
                         "built on verified facts only", argument="--allow-unverified")
    matrix_run = MatrixRun.open(args.matrix, allow_unverified=args.allow_unverified)   # its one read
    k, specs, skipped = matrix_run.k, list(matrix_run.images.values()), list(matrix_run.skipped)
    summary = I.skipped_summary(k, skipped)
    if not specs:
        # a check (or a generation) over no image at all proves nothing: a mistake, said as one
        raise UsageError("declares no image that resolves" + (": " + "; ".join(summary)
                                                               if summary else ""), file=args.matrix)
    empty = I.families_matching_nothing(skipped)   # a mistake to see here; a missing lock is
    if empty:                                      # `images`'s to say
        Reporter.for_args("generate", args).warn(empty)
    chosen = I.select({s.id: s for s in specs}, args.images)
    renderer = render.Renderer(Path(args.recipes)) if args.recipes else render.Renderer()
    files = output.generate_all(k, chosen, renderer)
    out = Path(args.output) if args.output else Workspace.of(args.matrix).root
    if args.check:
        if args.images:
            bad = [p for p in output.stale(files, out) if not p.endswith(")")]
        else:
            bad = output.stale(files, out)
        rep = Reporter.for_args("generate", args)
        doc = {"check": True, "output": str(out), "images": [s.id for s in chosen],
               "files": sorted(files), "stale": bad, "up_to_date": not bad}
        if bad:
            rep.result(doc, "\n".join([f"{len(bad)} generated file(s) are stale; run `imagebuild generate`:"]
                                      + [f"  {p}" for p in bad[:20]]))
            return 1
        rep.result(doc, f"{len(files)} generated files are up to date ({len(chosen)} images)")
        return 0
    from ...atomic import terminate_as_interrupt
    with terminate_as_interrupt():
        return _write(args, files, chosen, out)


def _write(args, files, chosen, out) -> int:
    from ...render import output
    from ...atomic import write_atomic

    if args.images:
        # a partial run rewrites only its own files, never removes the others (each one replaced
        # in one rename from a unique temporary file beside it)
        changed = []
        for rel, text in files.items():
            dest = out / rel
            if not dest.exists() or dest.read_text(encoding="utf-8") != text:
                write_atomic(dest, text, perm=0o644, parents=True)
                changed.append(rel)
    else:
        changed = output.write_tree(files, out)
    return _written(args, files, chosen, out, changed)


def _written(args, files, chosen, out, changed) -> int:
    Reporter.for_args("generate", args).result(
        {"check": False, "output": str(out), "images": [s.id for s in chosen], "files": sorted(files),
         "changed": changed},
        "\n".join([f"{len(chosen)} images, {len(files)} files, {len(changed)} changed under {out}"]
                  + [f"  {p}" for p in changed[:40]]))
    return 0
