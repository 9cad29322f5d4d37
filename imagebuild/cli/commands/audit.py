"""`imagebuild audit IMAGE [--lock FILE] [--json] [--fail-on SEVERITY] [--allow-partial]`

Known vulnerabilities of the wheels an image's lock pins, from the package index's vulnerability
data (imagebuild/deliver/audit.py says which, and why not pip-audit's own verdict). IMAGE is a matrix
image id; `--lock FILE` audits a lock file instead (then IMAGE is left out). No engine is needed:
the lock is what the image installs (`imagebuild sbom` checks that it did).

Exit 0: every wheel audited, nothing at or above --fail-on; 1: vulnerabilities at or above it
(records without a severity always count); 3: the data cannot be had (index unreachable or
failing, or no data for some wheels without --allow-partial); 2: bad input.
"""

from __future__ import annotations

from ..reporter import Reporter


def configure(parser) -> None:
    from ...deliver.audit import SEVERITIES
    from .. import add_matrix_option

    parser.add_argument("image", metavar="IMAGE", nargs="?", help="a matrix image id (or use --lock)")
    parser.add_argument("--lock", metavar="FILE", help="audit this wheel lock file instead of an image's")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--fail-on", choices=SEVERITIES, default="low",
                        help="the lowest severity that fails (default low; the index's records "
                             "carry no severity, and such a record fails at every level)")
    parser.add_argument("--allow-partial", action="store_true",
                        help="exit 0/1 on what was audited even when the index had no data for "
                             "some wheels (they are listed either way)")
    parser.add_argument("--json-api", metavar="URL",
                        help="the index JSON API to read (default: that of pip's default index)")
    add_matrix_option(parser)


def _lock_of(args):
    from pathlib import Path

    from ...errors import UsageError
    from ...render.wheellock import LockError, parse_lock

    if bool(args.image) == bool(args.lock):
        raise UsageError("give IMAGE or --lock FILE (one of them)", argument="IMAGE")
    if args.lock:
        path = args.lock
    else:
        from ...render.run import MatrixRun
        from ...render.wheellock import lock_root
        matrix_run = MatrixRun.open(args.matrix)
        spec = matrix_run.select([args.image])[0]
        if not spec.wheel_lock:
            raise UsageError(f"image {spec.id} installs no wheels from a lock: nothing to audit",
                             argument="IMAGE")
        path = str(lock_root(matrix_run.k) / spec.wheel_lock)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read the wheel lock: {exc.strerror}", file=path) from None
    try:
        return parse_lock(text, path)
    except LockError as exc:
        raise UsageError(str(exc)) from None


def run(args) -> int:
    from ...deliver.audit import audit_lock
    from ...errors import EXIT_UNAVAILABLE

    rep = Reporter.for_args("audit", args)
    lock = _lock_of(args)
    result = audit_lock(lock, source=args.json_api, fail_on=args.fail_on)
    code = result.exit_code(args.allow_partial)
    rep.result(result.to_json(args.allow_partial), result.table(args.allow_partial))
    if code == EXIT_UNAVAILABLE:
        rep.error(f"the index served no vulnerability data for "
                  f"{len(result.not_audited)} of {len(result.findings)} wheels "
                  f"({', '.join(f.name for f in result.not_audited[:5])}"
                  f"{' ...' if len(result.not_audited) > 5 else ''}); --allow-partial accepts that")
    return code
