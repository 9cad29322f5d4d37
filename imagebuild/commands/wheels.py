"""`imagebuild wheels lock|check [IMAGE...]`

lock:  write locks/wheels/<set>.txt for every wheel set the named images (default: all) install and
       that has no lock yet (--refresh: all of them again). Sets that cannot be locked (an index out
       of reach) are reported one line each; the others are still written. Exit 2 if any failed,
       3 when every failure was an index that did not answer (an outage: retry later).
check: every committed lock parses and agrees with the matrix; no lock belongs to no image.
       Missing locks are listed (their images are not generated); --strict makes them fail too.
"""

from __future__ import annotations

import sys
from pathlib import Path


def configure(parser) -> None:
    from ..cli import add_matrix_option

    parser.add_argument("action", choices=("lock", "check"))
    parser.add_argument("images", nargs="*", metavar="IMAGE", help="image ids or families (default: all)")
    parser.add_argument("--refresh", action="store_true", help="lock again even when a lock exists")
    parser.add_argument("--index-url", default=None, metavar="URL",
                        help="the package index (default: pip's configured index-url, else pip's default)")
    parser.add_argument("--strict", action="store_true", help="check: a missing lock fails too")
    add_matrix_option(parser)


def _wheel_sets(args):
    from .. import images as I
    from ..knowledge import load
    from ..wheellock import wheel_set

    k = load(args.matrix)
    specs, _ = I.expand(k, require_locks=False)
    chosen = I.select({s.id: s for s in specs}, list(dict.fromkeys(args.images)))
    sets: dict[str, tuple] = {}
    for spec in chosen:
        ws = wheel_set(k, spec.stack, spec.os, spec.wheels, spec.toolkit_wheels)
        if ws is not None:
            sets.setdefault(ws.key, (ws, []))[1].append(spec.id)
    return k, sets


def run(args) -> int:
    from ..errors import EXIT_UNAVAILABLE
    from ..atomic import write_atomic
    from ..sync import default_index, validate_index_url
    from ..wheellock import LockError, compile_lock, lock_root, parse_lock, pip_sources, read_lock

    k, sets = _wheel_sets(args)
    root = lock_root(k)
    if args.action == "check":
        return _check(k, sets, root, args.strict, bool(args.images))

    src = pip_sources()
    index = validate_index_url(args.index_url) if args.index_url else \
        (src.get("index-url") or [default_index()])[0]
    failed = unavailable = 0
    for _key, (ws, ids) in sorted(sets.items()):
        try:
            if not args.refresh and read_lock(k, ws) is not None:
                print(f"{ws.path}: up to date ({len(ids)} image(s))")
                continue
        except LockError as exc:
            print(f"{ws.path}: {exc}; locking again")
        try:
            text = compile_lock(ws, index_url=index, find_links=src.get("find-links", []))
        except LockError as exc:
            failed += 1
            unavailable += exc.exit_code == EXIT_UNAVAILABLE
            print(f"imagebuild wheels: {exc}", file=sys.stderr)
            continue
        write_atomic(root / ws.path, text, perm=0o644, parents=True)
        n = len(parse_lock(text, str(ws.path)).entries)
        print(f"{ws.path}: {n} packages, {len(ids)} image(s)")
    if failed:
        print(f"imagebuild wheels: {failed} of {len(sets)} wheel set(s) could not be locked",
              file=sys.stderr)
        # 3 when every failure was an index that did not answer: running again later may succeed
        return EXIT_UNAVAILABLE if unavailable == failed else 2
    return 0


def _check(k, sets, root: Path, strict: bool, named: bool) -> int:
    from ..wheellock import LOCK_DIR, LockError, read_lock

    bad = missing = 0
    for _key, (ws, ids) in sorted(sets.items()):
        try:
            lock = read_lock(k, ws)
        except LockError as exc:
            bad += 1
            print(f"stale: {exc}")
            continue
        if lock is None:
            missing += 1
            print(f"missing: {ws.path} ({', '.join(ids)} not generated)")
    if not named:
        wanted = {str(ws.path) for ws, _ in sets.values()}
        folder = root / LOCK_DIR
        for f in sorted(folder.glob("*.txt")) if folder.is_dir() else []:
            rel = str(f.relative_to(root))
            if rel not in wanted:
                bad += 1
                print(f"orphan: {rel} (no image of the matrix installs it)")
    ok = len(sets) - bad - missing
    print(f"{ok} of {len(sets)} wheel set(s) locked and current, {missing} missing, {bad} bad")
    return 1 if bad or (strict and missing) else 0
