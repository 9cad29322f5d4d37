"""imagebuild plan: what a driver upgrade means for each image and each GPU pool, and what to do.

Drivers are releases (570.172.08), never bare branches. `--gpu` is required: which images run on
a driver depends on the GPU (a branch drops old architectures, new GPUs need new branches); a
comma-separated list names the cluster's GPU pools. `--gpu any` asks for a plan over no GPU in
particular and says so. What was built and published is read from images.lock (`--lock`, default
beside the matrix): a driver is an input to no recipe, so an image the lock records with the
recipe the matrix renders now is never rebuilt. `--fail-on STATUS[,STATUS]` exits 1 when any image
gets one of those verdicts (CI: `--fail-on broken`)."""

from __future__ import annotations

import json

from .. import add_matrix_option
from ...errors import UsageError
from ..options import driver_pair, gpu_pools, read_lock_or_none, runner_labels
from ..reporter import Reporter

EXAMPLES = """examples:
  imagebuild plan --driver-from 570.172.08 --driver-to 580.95.05 --gpu H100
  imagebuild plan --driver-from 570.172.08 --driver-to 580.95.05 --gpu H100,A100 --lock images.lock
  imagebuild plan --driver-from 570.172.08 --driver-to 580.95.05 --gpu H100 --format github
"""
from . import knowledge_line, knowledge_used


def configure(parser) -> None:
    add_matrix_option(parser)
    parser.add_argument("--driver-from", required=True, metavar="VERSION",
                        help="the driver the cluster runs now, a release such as 570.172.08")
    parser.add_argument("--driver-to", required=True, metavar="VERSION",
                        help="the driver it moves to, a release")
    parser.add_argument("--gpu", required=True,
                        help="the cluster's GPU (name or sm_XY), its GPU pools as a comma-separated "
                             "list (H100,A100), or `any` for no GPU in particular")
    parser.add_argument("--lock", dest="lock_in", default=None, metavar="FILE",
                        help="images.lock: what was built and published (default: beside the "
                             "matrix; without one, nothing counts as built)")
    parser.add_argument("--fail-on", default="", metavar="STATUS[,STATUS]",
                        help="exit 1 when an image gets one of these verdicts (the STATUS column's "
                             "words; CI: --fail-on broken)")
    parser.add_argument("--date", help="judge end of life on this day (default: the matrix's as_of)")
    parser.add_argument("--format", choices=("table", "json", "github", "gitlab"), default="table",
                        help="github: the job matrix (one JSON line); gitlab: a child pipeline "
                             "(YAML) with one job per image to build")
    parser.add_argument("--runner", action="append", default=[], metavar="PLATFORM=LABEL",
                        help="with --format github or gitlab: the runner label (GitLab: tag) for "
                             "images of an OCI platform, e.g. linux/arm64=ubuntu-24.04-arm; with "
                             "any given, an image whose platform has none is left out (said on "
                             "stderr), never built under emulation")
    parser.add_argument("--json", dest="format", action="store_const", const="json",
                        help="print the verdicts as JSON (the same as --format json)")
    parser.epilog = EXAMPLES


def run(args) -> int:
    from ...render.run import MatrixRun
    from ...deliver.plan import (STATUSES, current_recipes, day, github_matrix, gitlab_pipeline,
                                 left_out)
    driver_pair(args)
    fail_on = [s.strip() for s in args.fail_on.split(",") if s.strip()]
    for status in fail_on:
        if status not in STATUSES:
            raise UsageError(f"unknown verdict {status!r} (one of: {', '.join(STATUSES)})",
                             argument="--fail-on")
    gpus = gpu_pools(args.gpu)
    matrix_run = MatrixRun.open(args.matrix)    # the run's one read of the matrix
    k, specs = matrix_run.k, list(matrix_run.images.values())
    locked = read_lock_or_none(args, args.matrix)
    result = day(k, specs, args.driver_from, args.driver_to, gpus, args.date, locked,
                 current_recipes(k, specs, locked))
    verdicts = result.verdicts
    failing = [v for v in verdicts if v.status in fail_on]
    gpu_shown = ",".join(g for g in gpus if g) or "any"
    runners = runner_labels(args.runner) if args.runner or args.format == "gitlab" else None
    platforms = {s.id: s.oci_platform for s in specs if s.oci_platform}
    if runners is not None and args.format in ("github", "gitlab"):
        for image in left_out(verdicts, platforms, runners):
            Reporter("plan").warn(f"{image}: no runner for {platforms.get(image) or 'its platform'} "
                                  "(--runner PLATFORM=LABEL): left out")
    if args.format == "github":
        print(json.dumps(github_matrix(verdicts, platforms, runners), sort_keys=True,
                         separators=(",", ":")))
    elif args.format == "gitlab":
        print(gitlab_pipeline(verdicts, platforms, runners), end="")
    elif args.format == "json":
        Reporter("plan", json_mode=True).result(
            {"driver_from": args.driver_from, "driver_to": args.driver_to, "gpu": gpu_shown,
             "lock_read": result.lock_read, "images": [v.to_json() for v in verdicts],
             "pools": [p.to_json() for p in result.pools], "fail_on": fail_on,
             "failed": [v.image for v in failing]})
    else:
        _print(args, k, result, gpus)
    if failing:
        Reporter("plan", json_mode=args.format == "json").error(
            f"{len(failing)} image(s) {'/'.join(fail_on)} on the new driver (--fail-on): "
            + ", ".join(v.image for v in failing[:10]) + (" ..." if len(failing) > 10 else ""))
        return 1
    return 0


def _print(args, k, result, gpus) -> None:
    verdicts = result.verdicts
    width = max((len(v.image) for v in verdicts), default=5)
    print(f"{'IMAGE':<{width}}  {'ACTION':<7}  {'STATUS':<12}  {'BEFORE':<14}  {'AFTER':<14}  WHY")
    for v in verdicts:
        print(f"{v.image:<{width}}  {v.action:<7}  {v.status:<12}  {v.before:<14}  {v.after:<14}  {v.why}")
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v.action] = counts.get(v.action, 0) + 1
    print(", ".join(f"{n} {a}" for a, n in sorted(counts.items())))
    if not result.lock_read:
        print("images.lock: none read, so nothing counts as built or published (--lock names one)")
    print("GPU pools:")
    for p in result.pools:
        print(f"  {p.gpu}: {p.action}: {p.why}")
    if gpus == [None]:
        print("GPU: any (not checked): an image counts as usable when the driver runs it on "
              "some GPU; name the cluster's GPU with --gpu for its own plan")
    print(knowledge_line(knowledge_used(args, k)))
