"""`imagebuild test IMAGE... [--tier cpu|gpu] [--report FILE] [--ranks N] [--timeout S] [--only NAME...]`

Runs the smoke suite inside each image (one container), compares the image's labels with
/opt/imagebuild/image.json, and runs ddp.two-node and mpi.two-container across two containers.
`--tier gpu` gives the suite's container every GPU of the engine's host (`--gpus all`), runs one
rank per GPU unless --ranks says otherwise, and adds the GPU-only checks (nccl-tests). Each image's report goes
to --report FILE (one image) or .imagebuild/reports/<image-id>.json beside the matrix (where `lock`
and `publish` look for it), with JUnit XML beside it.
Exit 0 when every required check passed, 1 when one failed, 2 when the tests could not run.
"""

from __future__ import annotations

import argparse
import signal

from ...errors import UsageError
from ..reporter import Reporter
from ...workspace import Workspace



def _count(text: str) -> int:
    from ...smoke.__main__ import bounded
    return bounded(int, 1, 64)(text)


def _seconds(text: str) -> float:
    from ...smoke.__main__ import bounded
    return bounded(float, 10, 7200)(text)


#: a check run under QEMU's user-mode emulation (an image for another CPU) takes several times
#: its native time (docs/benchmarks.md, "arm64 under emulation"): the default timeout is scaled
EMULATED_TIMEOUT_FACTOR = 5
DEFAULT_TIMEOUT = 180.0


def _refs_for(names: list[str], matrix: str, platform: str | None = None) -> list[str]:
    """Matrix image ids (smoke-cpu) become their local references, from one load of the matrix
    (and none when every name is a ref); anything with ':' or '/' is a ref already. With
    ``platform`` (OCI), each id names its twin for that platform."""
    matrix_run = None
    refs = []
    for name in names:
        if ":" in name or "/" in name:
            if platform:
                raise UsageError(f"--platform picks a matrix image's twin; {name!r} is an image "
                                 "reference already", argument="--platform")
            refs.append(name)
            continue
        from ...render.images import for_platform
        from ...render.run import MatrixRun
        if matrix_run is None:
            matrix_run = MatrixRun.open(matrix)        # one read, and none when every name is a ref
        chosen = matrix_run.select([name])
        if platform:
            chosen = for_platform(dict(matrix_run.images), chosen, platform)
        refs.append(chosen[0].local_ref)
    return refs


def _emulated(images, rep, timeout: float | None) -> dict[str, tuple[float, dict]]:
    """Each image's timeout per check and its containers' extra environment: the timeout asked
    for, else the default, scaled for an image whose architecture is not this host's, whose
    containers also get emulation.EMULATED_ENV; such an image's emulation is checked first (one
    line with the fix when binfmt_misc or QEMU is missing)."""
    from ...builder.emulation import EMULATED_ENV, PLATFORMS, emulation_for, is_native, too_old_for_pytorch
    out = {}
    for image in images:
        arch = image.info.architecture
        target = next((p for p in PLATFORMS.values() if p.architecture == arch), None)
        if target is None or is_native(target):
            out[image.ref] = (timeout or DEFAULT_TIMEOUT, {})
            continue
        how = emulation_for(image.ref, target)
        out[image.ref] = (timeout or DEFAULT_TIMEOUT * EMULATED_TIMEOUT_FACTOR, dict(EMULATED_ENV))
        old = too_old_for_pytorch(how)
        if old:
            rep.warn(f"{image.ref}: {old}")
        rep.progress(f"{image.ref} is for {target.oci}: its checks run under emulation ({how}), "
                     f"{out[image.ref][0]:.0f} s each" + ("" if timeout else " (--timeout sets it)")
                     + ", with " + " ".join(f"{k}={v}" for k, v in sorted(EMULATED_ENV.items())))
    return out


def _terminate(signum, frame):  # noqa: ARG001 - signal API
    raise KeyboardInterrupt


def configure(parser: argparse.ArgumentParser) -> None:
    from .. import add_matrix_option
    add_matrix_option(parser)
    parser.add_argument("images", nargs="+", metavar="IMAGE",
                        help="matrix image ids (smoke-cpu) or local image references (name:tag)")
    parser.add_argument("--report", metavar="FILE",
                        help="write the JSON report here, JUnit XML beside it (one IMAGE only; "
                             "default .imagebuild/reports/<image-id>.json beside the matrix)")
    parser.add_argument("--tier", choices=("cpu", "gpu"), default="cpu",
                        help="gpu: the suite's container gets every GPU of the engine's host (the NVIDIA "
                             "Container Toolkit must be installed there) and nccl-tests runs too")
    parser.add_argument("--ranks", type=_count, default=None,
                        help="ranks for the distributed checks (default 2; tier gpu: one per GPU)")
    parser.add_argument("--timeout", type=_seconds, default=None,
                        help=f"seconds per check (default {DEFAULT_TIMEOUT:.0f}; "
                             f"{DEFAULT_TIMEOUT * EMULATED_TIMEOUT_FACTOR:.0f} for an image for another "
                             "CPU, which runs under emulation)")
    parser.add_argument("--platform", metavar="OS/ARCH",
                        help="test each named matrix image's twin for this platform (linux/arm64, "
                             "arm64, aarch64): an image for another CPU runs under emulation "
                             "(binfmt_misc and qemu-user-static, checked first)")
    parser.add_argument("--quiet", "-q", action="store_true",
                        help="do not stream the suite's output; print only each check's result")
    parser.add_argument("--only", nargs="+", metavar="NAME", action="extend", default=[],
                        help="run only these checks (versions, libraries, mpi.config, mpi.allreduce, "
                             "torch.allreduce, ddp.equivalence, ddp.elastic, gpudirect, nccl-tests, "
                             "ddp.two-node, mpi.two-container)")
    parser.add_argument("--json", action="store_true",
                        help="print each image's verdict, counts and report paths as JSON on stdout; "
                             "the checks as they run go to stderr as JSON lines")


def run(args) -> int:
    from ...testrun import runner as testrun
    from ...engines import get_engine
    from ...atomic import write_atomic
    from ...smoke.report import junit_path

    if args.report and len(args.images) != 1:
        raise UsageError("--report names the report of one image; give one IMAGE "
                         "(without it each report goes to .imagebuild/reports/<image-id>.json beside the matrix)", argument="--report")
    platform = None
    if args.platform:
        from ...builder.emulation import platform_of
        platform = platform_of(args.platform).oci
    args.images = _refs_for(args.images, args.matrix, platform)
    for ref in args.images:
        testrun.validate_ref(ref)
    ranks = args.ranks if args.ranks is not None or args.tier == "gpu" else 2
    only = testrun.check_only(args.only)
    engine = get_engine()
    # a CI runner stops jobs with SIGTERM: leave through the same clean-up path as Ctrl-C
    signal.signal(signal.SIGTERM, _terminate)
    # every image known and labelled, and runnable here, before anything runs
    under_test = [testrun.inspect_image(engine, ref) for ref in args.images]
    rep = Reporter(command="test", json_mode=args.json)   # --quiet here: no log stream, results stay
    timeouts = _emulated(under_test, rep, args.timeout)
    failed = 0
    done = []
    for ref in args.images:
        rep.line(f"== {ref}", message=f"testing {ref}", image=ref)

        def show(result, ref=ref) -> None:
            rep.line(f"{result.status.upper():<4} {result.name:<16} {result.metrics.get('seconds', 0):7.1f}s  "
                     f"{result.detail}", message=f"{result.name}: {result.status} {result.detail}".rstrip(),
                     image=ref, check=result.name, status=result.status)

        def inside(line: str, ref=ref) -> None:
            if line.strip():
                rep.line(f"   | {line}", message=line, image=ref, stream="suite")

        opts = testrun.TestOptions(ranks=ranks, timeout=timeouts[ref][0], only=only, tier=args.tier,
                                   env=timeouts[ref][1])
        report = testrun.test_image(engine, ref, opts, progress=show, log=None if args.quiet else inside)
        path = args.report or Workspace.of(args.matrix).reports / f"{report.extra['imagebuild_id']}.json"
        try:
            write_atomic(path, report.to_json(), perm=0o600, parents=True)
            write_atomic(junit_path(path), report.to_junit(), perm=0o600, parents=True)
        except OSError as exc:
            raise UsageError(f"cannot write the report: {exc.strerror}", file=path) from None
        summ = report.summary()
        skipped = f" (skipped: {', '.join(report.skipped())})" if summ["skip"] else ""
        rep.line(f"{'PASSED' if report.passed else 'FAILED'} {ref}: {summ['pass']} passed, {summ['fail']} failed, "
                 f"{summ['skip']} skipped{skipped}; report {path}", image=ref)
        failed += not report.passed
        done.append({"ref": ref, "image": report.extra.get("imagebuild_id"), "passed": report.passed,
                     "tier": report.tier, "summary": summ, "skipped": report.skipped(),
                     "failed_checks": [c.name for c in report.checks if c.status == "fail"],
                     "report": path, "junit": junit_path(path)})
    rep.result({"passed": not failed, "images": done})
    return 1 if failed else 0
