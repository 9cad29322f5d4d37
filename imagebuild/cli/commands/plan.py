"""imagebuild plan: which images a driver upgrade makes usable, changes, or breaks.

Drivers are releases (570.172.08), never bare branches. `--gpu` is required: which images run on
a driver depends on the GPU (a branch drops old architectures, new GPUs need new branches). `--gpu
any` asks for a plan over no GPU in particular and says so: an image then counts as usable when
the driver runs it on some GPU. `--fail-on STATUS[,STATUS]` exits 1 when any image gets one of
those verdicts (CI: `--fail-on broken`)."""

from __future__ import annotations

import json

from .. import add_matrix_option
from ...errors import UsageError
from ..reporter import Reporter
from . import knowledge_line, knowledge_used


def configure(parser) -> None:
    add_matrix_option(parser)
    parser.add_argument("--driver-from", required=True, metavar="VERSION",
                        help="the driver the cluster runs now, a release such as 570.172.08")
    parser.add_argument("--driver-to", required=True, metavar="VERSION",
                        help="the driver it moves to, a release")
    parser.add_argument("--gpu", required=True,
                        help="the cluster's GPU (name or sm_XY), or `any` for no GPU in particular")
    parser.add_argument("--fail-on", default="", metavar="STATUS[,STATUS]",
                        help="exit 1 when an image gets one of these verdicts (the STATUS column's "
                             "words; CI: --fail-on broken)")
    parser.add_argument("--date", help="judge end of life on this day (default: the matrix's as_of)")
    parser.add_argument("--format", choices=("table", "json", "github"), default="table")
    parser.add_argument("--json", dest="format", action="store_const", const="json",
                        help="print the verdicts as JSON (the same as --format json)")


def run(args) -> int:
    from ...render.run import MatrixRun
    from ...deliver.plan import STATUSES, github_matrix, plan
    from ...versions import VersionSyntaxError, parse_host_driver

    for flag, value in (("--driver-from", args.driver_from), ("--driver-to", args.driver_to)):
        try:
            parse_host_driver(value)
        except VersionSyntaxError as exc:
            raise UsageError(str(exc), argument=flag) from None
    fail_on = [s.strip() for s in args.fail_on.split(",") if s.strip()]
    for status in fail_on:
        if status not in STATUSES:
            raise UsageError(f"unknown verdict {status!r} (one of: {', '.join(STATUSES)})",
                             argument="--fail-on")
    gpu = None if args.gpu.lower() == "any" else args.gpu
    matrix_run = MatrixRun.open(args.matrix)    # the run's one read of the matrix
    k, specs = matrix_run.k, list(matrix_run.images.values())
    verdicts = plan(k, specs, args.driver_from, args.driver_to, gpu, args.date)
    failing = [v for v in verdicts if v.status in fail_on]
    if args.format == "github":
        print(json.dumps(github_matrix(verdicts), sort_keys=True, separators=(",", ":")))
    elif args.format == "json":
        Reporter("plan", json_mode=True).result(
            {"driver_from": args.driver_from, "driver_to": args.driver_to, "gpu": gpu or "any",
             "images": [v.to_json() for v in verdicts], "fail_on": fail_on,
             "failed": [v.image for v in failing]})
    else:
        width = max((len(v.image) for v in verdicts), default=5)
        print(f"{'IMAGE':<{width}}  {'STATUS':<12}  {'BEFORE':<14}  {'AFTER':<14}  DETAIL")
        for v in verdicts:
            print(f"{v.image:<{width}}  {v.status:<12}  {v.before:<14}  {v.after:<14}  {v.detail}")
        counts = {}
        for v in verdicts:
            counts[v.status] = counts.get(v.status, 0) + 1
        print(", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
        if gpu is None:
            print("GPU: any (not checked): an image counts as usable when the driver runs it on "
                  "some GPU; name the cluster's GPU with --gpu for its own plan")
        print(knowledge_line(knowledge_used(args, k)))
    if failing:
        Reporter("plan", json_mode=args.format == "json").error(
            f"{len(failing)} image(s) {'/'.join(fail_on)} on the new driver (--fail-on): "
            + ", ".join(v.image for v in failing[:10]) + (" ..." if len(failing) > 10 else ""))
        return 1
    return 0
