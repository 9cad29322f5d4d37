"""`imagebuild wheels lock|check [IMAGE...]`

lock:  write locks/wheels/<set>.txt for every wheel set the named images (default: all) install and
       that has no lock yet (--refresh: all of them again). Sets that cannot be locked (an index out
       of reach) are reported one line each; the others are still written. Exit 2 if any failed,
       3 when every failure was an index that did not answer (an outage: retry later).
check: every committed lock parses and agrees with the matrix; no lock belongs to no image.
       Missing locks are listed (their images are not generated); --strict makes them fail too.
"""

from __future__ import annotations

from pathlib import Path

from ...errors import UsageError
from ..reporter import Reporter


def configure(parser) -> None:
    from .. import add_matrix_option

    parser.add_argument("action", choices=("lock", "check"))
    parser.add_argument("images", nargs="*", metavar="IMAGE", help="image ids or families (default: all)")
    parser.add_argument("--refresh", action="store_true", help="lock again even when a lock exists")
    parser.add_argument("--index-url", default=None, metavar="URL",
                        help="the package index (default: pip's configured index-url, else pip's default)")
    parser.add_argument("--strict", action="store_true", help="check: a missing lock fails too")
    parser.add_argument("--json", action="store_true",
                        help="print each wheel set's lock, images and status as JSON")
    add_matrix_option(parser)


def _wheel_sets(args):
    from ...render.run import MatrixRun
    from ...render.wheellock import wheel_set

    matrix_run = MatrixRun.open(args.matrix, require_locks=False)   # the run's one read of the matrix
    k = matrix_run.k
    chosen = matrix_run.select(list(dict.fromkeys(args.images)))
    sets: dict[str, tuple] = {}
    for spec in chosen:
        ws = wheel_set(k, spec.stack, spec.os, spec.wheels, spec.toolkit_wheels)
        if ws is not None:
            sets.setdefault(ws.key, (ws, []))[1].append(spec.id)
    return k, sets


def run(args) -> int:
    from ...render.wheellock import lock_root
    from ...workspace import is_packaged

    if args.action != "check" and is_packaged(args.matrix):
        raise UsageError("the packaged matrix and its wheel locks are read-only: copy them with "
                         "`imagebuild knowledge copy DIR` and lock there", argument="--matrix")

    k, sets = _wheel_sets(args)
    rep = Reporter.for_args("wheels", args)
    root = lock_root(k)
    if args.action == "check":
        return _check(k, sets, root, args.strict, bool(args.images), rep)
    return _lock(args, k, sets, root, rep)


def _lock(args, k, sets, root: Path, rep: Reporter) -> int:
    from ...errors import EXIT_UNAVAILABLE
    from ...redact import redact
    from ...atomic import write_atomic
    from ...knowledge.sync import default_index, validate_index_url
    from ...render.wheellock import LockError, compile_lock, parse_lock, pip_sources, read_lock

    src = pip_sources()
    index = validate_index_url(args.index_url) if args.index_url else \
        (src.get("index-url") or [default_index()])[0]
    failed = unavailable = 0
    done = []
    for _key, (ws, ids) in sorted(sets.items()):
        row = {"lock": str(ws.path), "images": ids}
        done.append(row)
        try:
            if not args.refresh and read_lock(k, ws) is not None:
                row["status"] = "up-to-date"
                rep.line(f"{ws.path}: up to date ({len(ids)} image(s))", lock=row["lock"])
                continue
        except LockError as exc:
            rep.line(f"{ws.path}: {exc}; locking again", lock=row["lock"])
        try:
            text = compile_lock(ws, index_url=index, find_links=src.get("find-links", []))
        except LockError as exc:
            failed += 1
            unavailable += exc.exit_code == EXIT_UNAVAILABLE
            row.update(status="failed", error=str(exc))
            rep.error(str(exc), lock=row["lock"])
            continue
        write_atomic(root / ws.path, text, perm=0o644, parents=True)
        n = len(parse_lock(text, str(ws.path)).entries)
        row.update(status="written", packages=n)
        rep.line(f"{ws.path}: {n} packages, {len(ids)} image(s)", lock=row["lock"])
    rep.result({"action": "lock", "index": redact(index), "sets": done, "failed": failed})
    if failed:
        rep.error(f"{failed} of {len(sets)} wheel set(s) could not be locked")
        # 3 when every failure was an index that did not answer: running again later may succeed
        return EXIT_UNAVAILABLE if unavailable == failed else 2
    return 0


def _check(k, sets, root: Path, strict: bool, named: bool, rep: Reporter) -> int:
    from ...render.wheellock import LOCK_DIR, LockError, read_lock

    bad = missing = 0
    done = []
    for _key, (ws, ids) in sorted(sets.items()):
        row = {"lock": str(ws.path), "images": ids, "status": "current"}
        done.append(row)
        try:
            lock = read_lock(k, ws)
        except LockError as exc:
            bad += 1
            row.update(status="stale", error=str(exc))
            rep.line(f"stale: {exc}", lock=row["lock"])
            continue
        if lock is None:
            missing += 1
            row["status"] = "missing"
            rep.line(f"missing: {ws.path} ({', '.join(ids)} not generated)", lock=row["lock"])
    orphans = []
    if not named:
        wanted = {str(ws.path) for ws, _ in sets.values()}
        folder = root / LOCK_DIR
        for f in sorted(folder.glob("*.txt")) if folder.is_dir() else []:
            rel = str(f.relative_to(root))
            if rel not in wanted:
                bad += 1
                orphans.append(rel)
                rep.line(f"orphan: {rel} (no image of the matrix installs it)", lock=rel)
    ok = len(sets) - bad - missing
    rep.result({"action": "check", "sets": done, "orphans": orphans, "current": ok, "missing": missing,
                "bad": bad, "strict": strict},
               f"{ok} of {len(sets)} wheel set(s) locked and current, {missing} missing, {bad} bad")
    return 1 if bad or (strict and missing) else 0
