"""python -m imagebuild.smoke: run the suite, print one line per check, write the reports.
Exit 0 when no required check failed, 1 when one did, 2 when the suite could not run."""

from __future__ import annotations

import argparse
import os
import re
import sys

from . import CHECK_NAMES, GPU_CHECK_NAMES, run_suite
from . import expect as _expect
from .report import junit_path, write_atomic


def bounded(kind: type, lo: float, hi: float):
    """An argparse type: a whole number (kind=int) or a number of seconds (kind=float) in
    [lo, hi]. Shared with the host-side `imagebuild test` command."""
    noun = "whole number" if kind is int else "number of seconds"
    unit = "" if kind is int else " seconds"

    def convert(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a {noun}: {text!r}") from None
        if not lo <= value <= hi:
            shown = value if kind is int else text
            raise argparse.ArgumentTypeError(f"must be between {lo:g} and {hi:g}{unit}, not {shown}")
        return value

    return convert


_positive_int = bounded(int, 1, 1024)
_timeout = bounded(float, 1, 86400)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="imagebuild-smoke", description="the imagebuild smoke suite")
    ap.add_argument("--tier", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--only", nargs="+", metavar="NAME", choices=CHECK_NAMES + GPU_CHECK_NAMES, action="extend",
                    help="run only these checks: " + ", ".join(CHECK_NAMES + GPU_CHECK_NAMES)
                    + f" (tier gpu runs {', '.join(GPU_CHECK_NAMES)} too)")
    ap.add_argument("--ranks", type=_positive_int, default=None,
                    help="ranks for the distributed checks (default 2; tier gpu: one per GPU)")
    ap.add_argument("--expect", help=f"the expected stack (default {_expect.DEFAULT_EXPECT} when it exists)")
    ap.add_argument("--report", help="write the JSON report here")
    ap.add_argument("--junit", help="write JUnit XML here (default: beside --report, .xml)")
    ap.add_argument("--timeout", type=_timeout, default=180.0, help="seconds per check (default 180)")
    ap.add_argument("--image", default="", help="the image name to record in the report")
    ap.add_argument("--quiet", action="store_true", help="print only the verdict")
    return ap


_ENDPOINT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,252}:[0-9]{1,5}\Z")
_RDZV_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}\Z")


def ddp_node(argv: list[str]) -> int:
    """`imagebuild-smoke ddp-node`: this node's share of a multi-node DDP equivalence run.

    Starts torchrun (one rank on this node, c10d rendezvous) with the same Python as the suite,
    running the ddp.equivalence worker; each rank writes rank-<N>.json into --out. Used by
    `imagebuild test` (ddp.two-node, two containers) and usable from a multi-node Slurm job.
    """
    ap = argparse.ArgumentParser(prog="imagebuild-smoke ddp-node")
    ap.add_argument("--nnodes", type=_positive_int, required=True)
    ap.add_argument("--rdzv-endpoint", required=True, help="HOST:PORT of the rendezvous (node 0)")
    ap.add_argument("--rdzv-id", required=True)
    ap.add_argument("--out", required=True, help="folder for this node's rank result")
    ap.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    ap.add_argument("--steps", type=_positive_int, default=5)
    ap.add_argument("--timeout", type=_timeout, default=180.0)
    args = ap.parse_args(argv)
    if not _ENDPOINT.match(args.rdzv_endpoint):
        ap.error(f"--rdzv-endpoint must be HOST:PORT, not {args.rdzv_endpoint!r}")
    if not _RDZV_ID.match(args.rdzv_id):
        ap.error(f"--rdzv-id must be letters, digits, '-' or '_', not {args.rdzv_id!r}")
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("OMP_NUM_THREADS", "1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(args.nnodes), "--nproc-per-node", "1",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", args.rdzv_endpoint, "--rdzv-id", args.rdzv_id,
           "--max-restarts", "0", "-m", "imagebuild.smoke.workers.ddp", "--backend", args.backend,
           "--out", args.out, "--steps", str(args.steps), "--timeout", str(int(args.timeout))]
    sys.stdout.flush()
    os.execve(sys.executable, cmd, env)
    return 127  # not reached


_HOSTNAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,62}\Z")
_UCX_TLS = re.compile(r"^\^?[a-z0-9_]+(?:,[a-z0-9_]+)*\Z")


def mpi_hosts(argv: list[str]) -> int:
    """`imagebuild-smoke mpi-hosts`: the mpi.allreduce worker under mpirun with one rank on each
    of --hosts, the others started over ssh (the launcher where no Slurm runs). Each rank writes
    rank-<N>.json into --out on its own host; the exit code is mpirun's. Used by `imagebuild test`
    (mpi.two-container: two containers) and usable across real nodes."""
    from . import checks, proc
    from .context import Context

    ap = argparse.ArgumentParser(prog="imagebuild-smoke mpi-hosts")
    ap.add_argument("--hosts", required=True, help="HOST,HOST,...: one rank on each (this host first)")
    ap.add_argument("--out", required=True, help="folder for each rank's result, on its host")
    ap.add_argument("--tls", help="UCX_TLS for pml ucx (default: Open MPI's default pml)")
    args = ap.parse_args(argv)
    hosts = args.hosts.split(",")
    if len(hosts) < 2 or not all(_HOSTNAME.match(h) for h in hosts) or len(set(hosts)) != len(hosts):
        ap.error(f"--hosts must name two or more different hosts, not {args.hosts!r}")
    if args.tls is not None and not _UCX_TLS.match(args.tls):
        ap.error(f"--tls must be a UCX_TLS list such as self,tcp, not {args.tls!r}")
    mpirun = proc.which("mpirun")
    ctx = Context()
    lib = ctx.system_libs().get("mpi")
    if not mpirun or not lib:
        print(f"imagebuild-smoke mpi-hosts: {'mpirun' if not mpirun else 'libmpi.so.40'} not found",
              file=sys.stderr)
        return 2
    cmd = checks.mpirun_argv(mpirun, len(hosts), args.tls, ctx.python, lib, args.out, hosts=hosts)
    print(" ".join(cmd), flush=True)
    os.execve(mpirun, cmd, checks._mpirun_env(ctx))
    return 127  # not reached


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["ddp-node"]:
        return ddp_node(argv[1:])
    if argv[:1] == ["mpi-hosts"]:
        return mpi_hosts(argv[1:])
    args = parser().parse_args(argv)
    expect_path = args.expect or _expect.default_path()
    expectation = None
    if expect_path:
        try:
            expectation = _expect.load(expect_path)
        except _expect.ExpectationError as exc:
            print(f"imagebuild-smoke: {exc}", file=sys.stderr)
            return 2
    image = args.image or (expectation or {}).get("id", "")

    def show(result) -> None:
        if not args.quiet:
            print(f"{result.status.upper():<4} {result.name:<16} {result.metrics.get('seconds', 0):7.1f}s  "
                  f"{result.detail}", flush=True)

    report = run_suite(tier=args.tier, only=args.only, ranks=args.ranks, timeout=args.timeout,
                       expectation=expectation, image=image, progress=show)
    try:
        if args.report:
            write_atomic(args.report, report.to_json())
        junit = args.junit or (junit_path(args.report) if args.report else None)
        if junit:
            write_atomic(junit, report.to_junit())
    except OSError as exc:
        print(f"imagebuild-smoke: cannot write the report: {exc}", file=sys.stderr)
        return 2
    summ = report.summary()
    skipped = f", skipped: {', '.join(report.skipped())}" if summ["skip"] else ""
    print(f"{'PASSED' if report.passed else 'FAILED'}: {summ['pass']} passed, {summ['fail']} failed, "
          f"{summ['skip']} skipped{skipped}", flush=True)
    return 0 if report.passed else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("imagebuild-smoke: interrupted", file=sys.stderr)
        sys.exit(130)
