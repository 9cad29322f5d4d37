"""`imagebuild sbom IMAGE --output FILE [--strict] [--lock FILE] [--verify-files]`

A CycloneDX 1.6 JSON SBOM of a built image, read from the image itself and cross-checked against
its wheel lock (imagebuild/sbom.py says what it holds). IMAGE is a matrix image id (smoke-cpu) or
a local reference (NAME:TAG) of an image imagebuild built. Lock problems are warning lines on
stderr and properties of the SBOM; with --strict nothing is written and the exit code is 1.
"""

from __future__ import annotations

import os
import sys


def configure(parser) -> None:
    from ..cli import add_matrix_option

    parser.add_argument("image", metavar="IMAGE", help="a matrix image id, or a local NAME:TAG")
    parser.add_argument("--output", required=True, metavar="FILE", help="where to write the SBOM (JSON)")
    parser.add_argument("--strict", action="store_true",
                        help="fail (exit 1, write nothing) when the image disagrees with its lock")
    parser.add_argument("--lock", metavar="FILE",
                        help="check against this wheel lock instead of the matrix's (locks/wheels/)")
    parser.add_argument("--verify-files", action="store_true",
                        help="also hash every file the installed wheels' RECORD lists and report "
                             "those that differ (seconds per GB of wheels)")
    add_matrix_option(parser)


def run(args) -> int:
    from .. import sbom
    from ..engines import get_engine
    from ..errors import UsageError

    out = args.output
    parent = os.path.dirname(os.path.abspath(out))
    if os.path.isdir(out) or not os.path.isdir(parent):
        raise UsageError(f"cannot write {out}: {'a folder' if os.path.isdir(out) else 'no such folder ' + parent}",
                         argument="--output")
    if args.lock and not os.path.isfile(args.lock):
        raise UsageError(f"no such file {args.lock}", argument="--lock")
    result = sbom.generate(get_engine(), matrix=args.matrix, image=args.image, lock_path=args.lock,
                           verify_files=args.verify_files)
    for p in result.problems:
        print(f"imagebuild sbom: warning: {p}", file=sys.stderr)
    if result.problems and args.strict:
        print(f"imagebuild sbom: {len(result.problems)} lock problem(s) with --strict: {out} not written",
              file=sys.stderr)
        return 1
    tmp = f"{out}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(result.text)
        os.replace(tmp, out)
    except OSError as exc:
        raise UsageError(f"cannot write the SBOM: {exc.strerror}", file=out) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    c = result.counts
    print(f"{out}: {c['components']} components ({c['os_packages']} OS packages, "
          f"{c['wheels_locked']} locked wheels, {c['wheels_venv_seed']} venv seed wheels, "
          f"{c['wheels_vendored']} vendored inside wheels, {c['wheels_flagged']} flagged, {c['source_tarballs']} source tarballs, "
          f"{c['base_images']} base image) for image {result.image_id[:19]}")
    return 0
