"""imagebuild plan: which images a driver upgrade makes usable, changes, or breaks."""

from __future__ import annotations

import json

from .. import add_matrix_option
from ..reporter import Reporter


def configure(parser) -> None:
    add_matrix_option(parser)
    parser.add_argument("--driver-from", required=True, metavar="VERSION")
    parser.add_argument("--driver-to", required=True, metavar="VERSION")
    parser.add_argument("--gpu", help="the cluster's GPU (name or sm_XY); default: not checked")
    parser.add_argument("--date", help="judge end of life on this day (default: the matrix's as_of)")
    parser.add_argument("--format", choices=("table", "json", "github"), default="table")
    parser.add_argument("--json", dest="format", action="store_const", const="json",
                        help="print the verdicts as JSON (the same as --format json)")


def run(args) -> int:
    from ...render import images as I
    from ... import knowledge
    from ...deliver.plan import github_matrix, plan

    k = knowledge.load(args.matrix)
    specs, _ = I.expand(k)
    verdicts = plan(k, specs, args.driver_from, args.driver_to, args.gpu, args.date)
    if args.format == "github":
        print(json.dumps(github_matrix(verdicts), sort_keys=True, separators=(",", ":")))
    elif args.format == "json":
        Reporter("plan", json_mode=True).result(
            {"driver_from": args.driver_from, "driver_to": args.driver_to, "gpu": args.gpu,
             "images": [v.to_json() for v in verdicts]})
    else:
        width = max((len(v.image) for v in verdicts), default=5)
        print(f"{'IMAGE':<{width}}  {'STATUS':<12}  {'BEFORE':<14}  {'AFTER':<14}  DETAIL")
        for v in verdicts:
            print(f"{v.image:<{width}}  {v.status:<12}  {v.before:<14}  {v.after:<14}  {v.detail}")
        counts = {}
        for v in verdicts:
            counts[v.status] = counts.get(v.status, 0) + 1
        print(", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    return 0
