"""`imagebuild sbom IMAGE --output FILE [--strict] [--lock FILE] [--verify-files]`

A CycloneDX 1.6 JSON SBOM of a built image, read from the image itself and cross-checked against
its wheel lock (imagebuild/deliver/sbom.py says what it holds). IMAGE is a matrix image id (smoke-cpu) or
a local reference (NAME:TAG) of an image imagebuild built. Lock problems are warning lines on
stderr and properties of the SBOM; with --strict nothing is written and the exit code is 1.
"""

from __future__ import annotations

import os

from ..reporter import Reporter


def configure(parser) -> None:
    from .. import add_matrix_option, add_timeout_option

    add_timeout_option(parser)
    parser.add_argument("image", metavar="IMAGE", nargs="?", help="a matrix image id, or a local NAME:TAG")
    parser.add_argument("--output", required=True, metavar="FILE", help="where to write the SBOM (JSON)")
    parser.add_argument("--from-registry", metavar="REF", default=None,
                        help="instead of IMAGE: read the SBOM `imagebuild publish --sbom` attached to "
                             "HOST[:PORT]/NS/NAME:TAG or ...@sha256:... (its OCI referrer), byte for byte")
    parser.add_argument("--referrer", metavar="DIGEST", default=None,
                        help="with --from-registry: which SBOM referrer, when the image has several")
    parser.add_argument("--auth-host", action="append", default=[], metavar="HOST",
                        help="with --from-registry: a token service host other than the registry's "
                             "that may receive the credentials")
    parser.add_argument("--strict", action="store_true",
                        help="fail (exit 1, write nothing) when the image disagrees with its lock")
    parser.add_argument("--lock", metavar="FILE",
                        help="check against this wheel lock instead of the matrix's (locks/wheels/)")
    parser.add_argument("--verify-files", action="store_true",
                        help="also hash every file the installed wheels' RECORD lists and report "
                             "those that differ (seconds per GB of wheels)")
    parser.add_argument("--json", action="store_true",
                        help="print what was written as JSON (counts, lock problems, image id)")
    add_matrix_option(parser)


def run(args) -> int:
    from ...deliver import sbom
    from ...engines import get_engine
    from ...errors import UsageError

    out = args.output
    parent = os.path.dirname(os.path.abspath(out))
    if os.path.isdir(out) or not os.path.isdir(parent):
        raise UsageError(f"cannot write {out}: {'a folder' if os.path.isdir(out) else 'no such folder ' + parent}",
                         argument="--output")
    if args.from_registry or args.referrer:
        return from_registry(args)
    if not args.image:
        raise UsageError("give IMAGE (a built image) or --from-registry REF", argument="IMAGE")
    if args.lock and not os.path.isfile(args.lock):
        raise UsageError(f"no such file {args.lock}", argument="--lock")
    from ...render.run import MatrixRun
    result = sbom.generate(get_engine(), run=MatrixRun.open(args.matrix), image=args.image,
                           lock_path=args.lock, verify_files=args.verify_files)
    rep = Reporter.for_args("sbom", args)
    for p in result.problems:
        rep.warn(p)
    doc = {"output": out, "image": args.image, "image_id": result.image_id, "counts": result.counts,
           "problems": result.problems, "written": False}
    if result.problems and args.strict:
        rep.error(f"{len(result.problems)} lock problem(s) with --strict: {out} not written")
        rep.result(doc)
        return 1
    write_atomically(out, result.text.encode("utf-8"))
    c = result.counts
    rep.result(dict(doc, written=True),
               f"{out}: {c['components']} components ({c['os_packages']} OS packages, "
               f"{c['wheels_locked']} locked wheels, {c['wheels_venv_seed']} venv seed wheels, "
               f"{c['wheels_vendored']} vendored inside wheels, {c['wheels_flagged']} flagged, "
               f"{c['source_tarballs']} source tarballs, "
               f"{c['base_images']} base image) for image {result.image_id[:19]}")
    return 0


def write_atomically(out: str, data: bytes) -> None:
    from ...atomic import write_atomic
    from ...errors import UsageError

    try:
        write_atomic(out, data)
    except OSError as exc:
        raise UsageError(f"cannot write the SBOM: {exc.strerror}", file=out) from None


def from_registry(args) -> int:
    """`imagebuild sbom --from-registry REF --output FILE`: the SBOM referrer of the manifest REF names,
    checked against its layer digest, written as it was pushed."""
    from ...deliver import publish, referrers
    from ...digests import sha256_bytes
    from ...errors import UsageError

    if not args.from_registry:
        raise UsageError("--referrer needs --from-registry", argument="--referrer")
    if args.image or args.strict or args.lock or args.verify_files:
        raise UsageError("--from-registry reads a published SBOM: IMAGE, --strict, --lock and "
                         "--verify-files describe a built image", argument="--from-registry")
    if args.referrer and not publish.DIGEST_RE.match(args.referrer):
        raise UsageError(f"{args.referrer!r} is not sha256:<64 hex>", argument="--referrer")
    ref = referrers.parse_reference(args.from_registry, argument="--from-registry")
    api = publish.RegistryAPI(ref.host, publish.find_credentials(ref.host), auth_hosts=args.auth_host, deadline=args.timeout)
    manifest = referrers.resolve(api, ref)
    digest, data = referrers.fetch_sbom(api, ref.repository, manifest.digest, referrer=args.referrer)
    write_atomically(args.output, data)
    sha = f"sha256:{sha256_bytes(data)}"
    Reporter.for_args("sbom", args).result(
        {"output": args.output, "from_registry": args.from_registry, "repository": ref.name,
         "referrer": digest, "subject": manifest.digest, "sha256": sha, "size_bytes": len(data),
         "written": True},
        f"{args.output}: the SBOM {ref.name}@{digest} attaches to {manifest.digest} ({sha}, {len(data)} bytes)")
    return 0
