"""`imagebuild base NAME`: make a local base image with debootstrap (no registry needed)."""

from __future__ import annotations

from pathlib import Path

from ..reporter import Reporter


def configure(parser) -> None:
    from ...builder.baseimage import BASES
    from ...platforms import LOCAL_BASE
    parser.add_argument("name", metavar="NAME", help=f"the base to create (one of: {', '.join(sorted(BASES))})")
    parser.add_argument("--ref", help=f"the image reference to create (default: {LOCAL_BASE.format(name='NAME')}, "
                                      "with -arm64 appended for linux/arm64)")
    parser.add_argument("--platform", metavar="OS/ARCH",
                        help="the platform to make it for: linux/amd64 or linux/arm64 (arm64, aarch64; "
                             "default: this host's); another architecture runs under emulation "
                             "(binfmt_misc and qemu-user-static, checked first)")
    parser.add_argument("--mirror", help="the Debian mirror URL debootstrap uses (default: its own)")
    parser.add_argument("--force", action="store_true", help="recreate the image even if the ref exists")
    parser.add_argument("--workdir", type=Path, help="where the temporary root file system goes "
                                                      "(default: $TMPDIR or /var/tmp)")
    parser.add_argument("--log", type=Path, help="keep debootstrap's output in this file")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    parser.add_argument("--json", action="store_true",
                        help="print the result as JSON (ref, image id, whether it was created, size)")


def run(args) -> int:
    from ...builder.baseimage import base_spec, check_mirror, create_base
    from ...builder.emulation import host_platform, platform_of
    from ...engines import check_ref, get_engine
    base_spec(args.name)                 # unknown names and bad input fail before the engine is asked
    target = platform_of(args.platform) if args.platform else host_platform()
    if args.ref:
        check_ref(args.ref)
    if args.mirror:
        check_mirror(args.mirror)
    engine = get_engine("docker")
    rep = Reporter.for_args("base", args)
    res = create_base(args.name, engine=engine, ref=args.ref, mirror=args.mirror, force=args.force,
                      workdir=args.workdir, log=args.log, target=target,
                      progress=None if args.quiet else lambda line: rep.progress(f"base {args.name}: {line}"))
    doc = {"name": args.name, "ref": res.ref, "image_id": res.image_id, "created": res.created,
           "platform": target.oci if target else None,
           "layer": res.layer or None, "size_bytes": res.size_bytes, "seconds": round(res.seconds, 3)}
    if not res.created:
        rep.result(doc, f"{res.ref} already exists ({res.image_id}); nothing done (use --force to recreate it)")
        return 0
    rep.result(doc, f"created {res.ref} {res.image_id} (layer {res.layer}, {res.size_bytes / 1e6:.1f} MB) "
                    f"in {res.seconds:.1f} s")
    return 0

