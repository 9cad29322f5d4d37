"""`imagebuild lock [--check] [--lock FILE] [IMAGE...]`

Writes images.lock (resolved stack, Dockerfile sha256, base image id, built image id and a smoke
report summary per image) or, with --check, prints what drifted and exits 1 when anything did.

An image is locked with the matrix images it is built FROM (a devel image's runtime), as `build`
builds them with it (images.with_bases): its entry records that image's engine id as its base, so
the lock also says what that image is, and `build --locked IMAGE` finds every image it builds in
the lock. A dependency not named is said on stderr; --check compares the same images.
"""

from __future__ import annotations

import os

from ...errors import UsageError
from ..reporter import Reporter
from ...workspace import Workspace


def configure(parser) -> None:
    from .. import add_matrix_option

    parser.add_argument("images", nargs="*", metavar="IMAGE",
                        help="image ids (default: all); an image is locked (or checked) with the "
                             "images it is built FROM, as `build` builds them: a devel image with "
                             "its runtime")
    parser.add_argument("--check", action="store_true",
                        help="compare with the lock instead of writing it; exit 1 on any drift")
    parser.add_argument("--lock", default=None, metavar="FILE",
                        help="the lock file (default: images.lock beside the matrix)")
    parser.add_argument("--reports-dir", default=None, metavar="DIR",
                        help="smoke reports (default: .imagebuild/reports beside the matrix)")
    parser.add_argument("--sbom-dir", default=None, metavar="DIR",
                        help="SBOMs written by `imagebuild sbom IMAGE --output DIR/IMAGE.cdx.json` "
                             "(default: .imagebuild/sbom beside the matrix)")
    parser.add_argument("--merge", nargs="+", metavar="LOCK",
                        help="merge these locks (the shard locks of several builders) into --lock "
                             "(or images.lock), keeping what it already records; the same image "
                             "with another image ID in two of them is refused")
    parser.add_argument("--no-engine", action="store_true",
                        help="record no base/built image ids (for a machine without an engine); "
                             "with --check, compare what needs no engine (stack, recipe, wheel "
                             "lock, smoke report) and not the image ids")
    parser.add_argument("--json", action="store_true",
                        help="print what was locked, or with --check what drifted, as JSON")
    add_matrix_option(parser)


def _all_images(matrix_run, names: list[str]) -> dict:
    """The images to lock, by id: all of them (sorted), or the named ones with the matrix images
    they are built FROM, each after those (dependency order). ``matrix_run``: the command's MatrixRun."""
    if not names:
        return dict(sorted(matrix_run.images.items()))
    from ...render.images import with_bases
    named = matrix_run.lookup(names)
    return {spec.id: spec for spec in with_bases(list(named.values()), dict(matrix_run.images))}


def _brought(specs: dict, names: list[str]) -> dict[str, str]:
    """For each image of ``specs`` not among ``names``: the first image built FROM it."""
    if not names:       # every image is named
        return {}
    users = {dep: spec.id for spec in reversed(specs.values()) for dep in spec.depends_on}
    return {image_id: users[image_id] for image_id in specs if image_id not in names}


def _previous_lock(lock_path: str, *, strict: bool, rep: Reporter) -> dict:
    """The entries of the lock being rewritten ({} when there is none). A malformed lock is an
    error when some of its entries are kept (``strict``); a full rewrite replaces it, saying that
    its publish records (if any) cannot be carried over."""
    from ...deliver import lockfile

    if not os.path.exists(lock_path):
        return {}
    try:
        return lockfile.read_lock(lock_path)
    except lockfile.LockError as exc:
        if strict:
            raise
        rep.warn(f"{exc}; rewriting it whole, no publish record carried over")
        return {}


def _merge(args, lock_path: str) -> int:
    from ...deliver import lockfile

    if args.images or args.check:
        raise UsageError("--merge takes lock files only: no IMAGE names, no --check", argument="--merge")
    from ...render.run import MatrixRun
    declared = set(dict(MatrixRun.open(args.matrix).images))
    shards = [(path, lockfile.read_lock(path)) for path in dict.fromkeys(args.merge)
              if os.path.abspath(path) != os.path.abspath(lock_path)]
    for path, entries in shards:      # a shard brings images of this matrix only
        unknown = sorted(set(entries) - declared)
        if unknown:
            raise lockfile.LockError(f"records {unknown[0]!r}, which {args.matrix} does not declare"
                            f"{f' (and {len(unknown) - 1} more)' if len(unknown) > 1 else ''}; "
                            "nothing was merged (a lock of another matrix?)", file=path)
    with lockfile.one_writer(lock_path):
        inputs = [(lock_path, lockfile.read_lock(lock_path))] if os.path.exists(lock_path) else []
        inputs += shards
        merged = lockfile.merge(inputs)
        lockfile.write_lock(lock_path, merged)
    Reporter.for_args("lock", args).result(
        {"lock": lock_path, "merged": [p for p, _ in inputs], "images": sorted(merged)},
        f"{lock_path}: {len(merged)} image(s) from {len(inputs)} lock(s)")
    return 0


def run(args) -> int:
    from ...deliver import lockfile

    ws = Workspace.of(args.matrix)
    root = str(ws.root)
    lock_path = args.lock or str(ws.lock)
    if args.merge:
        return _merge(args, lock_path)
    from ...render.run import MatrixRun
    matrix_run = MatrixRun.open(args.matrix)       # the run's one read of the matrix
    specs = _all_images(matrix_run, list(dict.fromkeys(args.images)))
    rep = Reporter.for_args("lock", args)
    for image_id, user in _brought(specs, args.images).items():
        rep.progress(f"{image_id}: {'checked' if args.check else 'locked'} too ({user} is built FROM it)",
                     image=image_id, built_from_by=user)
    engine = None
    if not args.no_engine:
        from ...engines import get_engine
        engine = get_engine()
    # the Dockerfile each image is built from: the generated one beside the matrix (a checkout,
    # where `generate --check` proves it is the renderer's), else rendered from the matrix as
    # `build` renders it (a pip-installed imagebuild locks from an empty folder)
    from ...render.renderer import Renderer
    renderer = Renderer()

    def recipe(spec) -> str | None:
        if lockfile.dockerfile_path(root, spec.id).is_file():
            return None
        return renderer.dockerfile(spec, matrix_run.k)

    current = {
        image_id: lockfile.entry_for_image(engine, image_id=image_id, stack=dict(spec.stack),
                                           local_ref=spec.local_ref, root=root,
                                           reports_dir=args.reports_dir, dockerfile_text=recipe(spec))
        for image_id, spec in specs.items()
    }
    # provenance: the recipe's, the wheel lock's, the SBOM's and the test report's sha256, and the
    # base the built image records; SBOM and report only when they describe that exact image id
    from ...deliver.publish import default_report_path
    reports_dir = args.reports_dir or ws.reports
    sbom_dir = args.sbom_dir or ws.sbom
    for image_id, spec in specs.items():
        current[image_id]["provenance"] = lockfile.provenance_for(
            engine, spec, matrix_run.k, root=root, built_id=current[image_id]["image_id"],
            report_path=default_report_path(image_id, reports_dir),
            sbom_path=os.path.join(sbom_dir, f"{image_id}.cdx.json"))
    if args.check:
        return _check(args, lock_path, current, rep)
    with lockfile.one_writer(lock_path):   # a publish recording beside us is kept, not overwritten
        dropped, locked_now, current = _merge_and_write(args, lock_path, current, rep)
    rep.result({"lock": lock_path, "check": False, "locked": locked_now, "images": sorted(current),
                "publish_records_dropped": dropped},
               f"wrote {lock_path} ({len(current)} image(s))")
    return 0


def _merge_and_write(args, lock_path: str, current: dict, rep: Reporter) -> tuple[list[str], list[str], dict]:
    """The lock as it is now, merged with ``current`` and written: the publish records dropped,
    the images locked by this run, and every entry written."""
    from ...deliver import lockfile

    previous = _previous_lock(lock_path, strict=bool(args.images), rep=rep)
    # what `publish` pushed stays recorded while the image is the same one (lockfile docstring)
    dropped = lockfile.carry_published(previous, current)
    for image_id in dropped:
        rep.warn(f"{image_id}: the image changed since it was published; its publish record is dropped",
                 image=image_id)
    locked_now = sorted(current)
    if args.images and previous:
        # lock only the named images; keep the others as they were
        merged = dict(previous)
        merged.update(current)
        current = merged
    lockfile.write_lock(lock_path, current)
    return dropped, locked_now, current


def _check(args, lock_path: str, current: dict, rep: Reporter) -> int:
    """--check: what drifted between the lock and the images as they are now; 1 when anything did."""
    from ...deliver import lockfile

    locked = lockfile.read_lock(lock_path)
    if args.images:
        locked = {k: v for k, v in locked.items() if k in current}
    # --no-engine: the recipe, stack, wheel lock and smoke report are compared; the image ids are not
    drifted = lockfile.drift_all(locked, current, engine=not args.no_engine)
    for image_id, lines in drifted.items():
        for line in lines:
            rep.line(f"{image_id}: {line}", image=image_id)
    doc = {"lock": lock_path, "check": True, "images": sorted(current), "drifted": drifted,
           "match": not drifted}
    if drifted:
        rep.error(f"{len(drifted)} image(s) drifted from {lock_path}")
        rep.result(doc)
        return 1
    rep.result(doc, f"{lock_path}: {len(current)} image(s) match")
    return 0
