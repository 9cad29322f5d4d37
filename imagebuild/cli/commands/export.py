"""`imagebuild export IMAGE --format sqsh|oci-bundle|sif --output PATH [--force]`

IMAGE is an image id from the matrix (exported from its local reference) or a local image
reference (NAME:TAG, or sha256:ID). See imagebuild/deliver/export.py for what each format holds.
Device nodes, FIFOs and sockets are left out of sqsh and oci-bundle exports, and setuid/setgid bits
are removed unless --keep-setuid is given; both are listed in warning lines on stderr.
"""

from __future__ import annotations

import os

from ..reporter import Reporter

FORMATS = ("sqsh", "oci-bundle", "sif")


def configure(parser) -> None:
    from .. import add_matrix_option

    parser.add_argument("image", metavar="IMAGE", help="an image id from the matrix, or a local NAME:TAG")
    parser.add_argument("--format", required=True, choices=FORMATS, help="what to write")
    parser.add_argument("--output", required=True, metavar="PATH",
                        help="the file (sqsh, sif) or folder (oci-bundle) to write")
    parser.add_argument("--force", action="store_true", help="replace PATH when it exists")
    parser.add_argument("--platform", metavar="OS/ARCH",
                        help="export the matrix image's twin for this platform (linux/arm64, arm64, "
                             "aarch64: for Grace nodes), built with `imagebuild build IMAGE --platform`")
    parser.add_argument("--squash-level", type=int, default=1, metavar="N",
                        help="sqsh: gzip level 1 (fastest, the default) to 9 (smallest)")
    parser.add_argument("--keep-setuid", action="store_true",
                        help="keep the setuid/setgid bits of the image's files (default: removed; "
                             "either way they are listed in a warning line)")
    parser.add_argument("--oci-method", choices=("flatten", "umoci"), default="flatten",
                        help="oci-bundle: the engine's flattened export + runc spec (default, fast), "
                             "or skopeo + umoci")
    parser.add_argument("--json", action="store_true",
                        help="print the result as JSON: path, format, image id, size, files left out")
    add_matrix_option(parser)


def resolve_ref(image: str, matrix: str, platform: str | None = None) -> str:
    """A local reference for IMAGE: taken as is when it looks like NAME:TAG or sha256:ID, else
    looked up in the matrix (with ``platform``: the image's twin for that platform)."""
    from ...deliver.export import check_ref
    from ...errors import UsageError

    if ":" in image:
        if platform:
            raise UsageError(f"--platform picks a matrix image's twin; {image!r} is an image "
                             "reference already", argument="--platform")
        return check_ref(image)
    from ...render.run import MatrixRun

    matrix_run = MatrixRun.open(matrix)
    spec = matrix_run.lookup([image])[image]
    if platform:
        from ...builder.emulation import platform_of
        from ...render.images import for_platform
        spec = for_platform(dict(matrix_run.images), [spec], platform_of(platform).oci)[0]
    return check_ref(spec.local_ref)


def run(args) -> int:
    from ...deliver import export
    from ...engines import get_engine

    export.squash_flags(args.squash_level)      # a bad level is one line before anything runs
    ref = resolve_ref(args.image, args.matrix, args.platform)
    if args.format == "sif" and export.find_apptainer() is None:
        export.export_sif(None, ref, args.output)  # raises the one line naming what is missing
    export.require_tools(args.format, args.oci_method)  # a missing tool is named before any engine
    rep = Reporter.for_args("export", args)
    if args.format == "oci-bundle":
        result = export.export_oci_bundle(get_engine(), ref, args.output, force=args.force,
                                          method=args.oci_method, keep_setuid=args.keep_setuid,
                                          progress=rep.progress)
    else:
        result = export.export_image(get_engine(), ref, args.format, args.output, force=args.force,
                                     keep_setuid=args.keep_setuid, progress=rep.progress,
                                     level=args.squash_level)
    # a file's size (sqsh, sif; an oci-bundle is a folder); no digest: hashing gigabytes is not
    # what export does. Apptainer builds a SIF itself: its files are not examined here (null).
    size = os.path.getsize(result.path) if os.path.isfile(result.path) else None
    examined = result.format != "sif"
    rep.result({"image": args.image, "ref": ref, "format": result.format, "path": str(result.path),
                "image_id": result.image_id, "size_bytes": size,
                "special_files_left_out": list(result.special_files) if examined else None,
                "setuid_files": list(result.setuid_files) if examined else None,
                "setuid_kept": result.setuid_kept if examined else None},
               f"{result.path} ({result.format}, image {result.image_id[:19]})")
    return 0
