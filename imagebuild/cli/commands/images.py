"""imagebuild images: the images the matrix declares (id, tag, stack), and with --all what was left out."""

from __future__ import annotations

from .. import add_matrix_option
from ..reporter import Reporter


def configure(parser) -> None:
    add_matrix_option(parser)
    parser.add_argument("--all", action="store_true",
                        help="also list the combinations that do not resolve, and why")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--allow-unverified", action="store_true",
                        help="also images that rely on facts marked verified: false")
    parser.add_argument("--shard", metavar="K/N",
                        help="only shard K of N: FROM chains kept together, balanced by what they "
                             "compile, stable when images are added (build/shards.py)")
    parser.add_argument("--shards", metavar="N",
                        help="the whole split for N builders: each shard's images and weight")
    parser.add_argument("--format", choices=("text", "github"), default="text",
                        help="with --shards: `github` prints one line of JSON, a job matrix "
                             '({"include": [{"shard": "K/N", "images": COUNT}, ...]}, empty shards '
                             "left out) for $GITHUB_OUTPUT")


def _builders(text: str) -> int:
    import re
    from ...errors import UsageError

    if not re.fullmatch(r"[1-9][0-9]{0,3}", text):
        raise UsageError(f"expected a number of builders from 1 to 9999, not {text!r}", argument="--shards")
    return int(text)


def _split(args, k, specs) -> int:
    """--shards N: every shard of N, in order, each with its images (bases first) and weight."""
    import json
    from ...builder import shards

    n = args.shards
    by_id = {s.id: s for s in specs}
    parts = [{"shard": f"{part}/{n}", "weight": weight, "images": ids}
             for part, (ids, weight) in shards.split(k, by_id, n).items()]
    if args.format == "github":
        print(json.dumps({"include": [{"shard": p["shard"], "images": len(p["images"])}
                                      for p in parts if p["images"]]}, separators=(",", ":")))
        return 0
    if args.json:
        Reporter.for_args("images", args).result({"shards": parts})
        return 0
    for p in parts:
        print(f"shard {p['shard']}: weight {p['weight']}, {len(p['images'])} images: "
              + (" ".join(p["images"]) or "(none)"))
    return 0


def run(args) -> int:
    from ...render.run import MatrixRun
    from ...render import images as I

    from ...errors import UsageError

    if args.shards is not None:
        args.shards = _builders(args.shards)
    if args.shards and (args.shard or args.all):
        raise UsageError("--shards lists the whole split: not with --shard or --all", argument="--shards")
    if args.format != "text" and not args.shards:
        raise UsageError("--format github is the job matrix of --shards N", argument="--format")
    matrix_run = MatrixRun.open(args.matrix, allow_unverified=args.allow_unverified)   # its one read
    k, specs, skipped = matrix_run.k, list(matrix_run.images.values()), list(matrix_run.skipped)
    if args.shards:
        return _split(args, k, specs)
    shard_doc = None
    if args.shard:
        from ...builder import shards
        part, n = shards.parse_shard(args.shard)
        by_id = {s.id: s for s in specs}
        chosen = set(shards.shard_of(k, by_id, part, n))
        specs = [s for s in specs if s.id in chosen]
        shard_doc = {"shard": part, "of": n, "weight": shards.loads(k, by_id, n)[part]}
    rep = Reporter.for_args("images", args)
    if not args.all:     # said in both renderings: --json carries them in its envelope's warnings
        for line in I.skipped_summary(k, skipped):
            rep.warn(line)
    if not specs and not args.shard:
        rep.warn(f"{args.matrix} declares no image that can be built here"
                 + (f" ({len(skipped)} left out: --all says why)" if skipped else ""))
    if args.json:
        doc = {"images": [{"id": s.id, "family": s.family, "flavor": s.flavor, "tag": s.tag,
                           "tags": list(s.tags), "ref": s.local_ref, "stack": s.stack,
                           "min_driver": s.min_driver, "name": s.base_name,
                           "platform": s.oci_platform or None} for s in specs]}
        if shard_doc is not None:
            doc["shard"] = shard_doc
        if args.all:
            doc["skipped"] = [{"family": x.family, "combination": x.combination,
                               "reason": x.reason(k)} for x in skipped]
        rep.result(doc)
        return 0
    width = max(len(s.id) for s in specs) if specs else 10
    for s in specs:
        # another platform's image of a name: said, since its tag is its twin's
        print(f"{s.id:<{width}}  {s.tag}" + (f"  ({s.oci_platform})" if s.name else ""))
    print(f"{len(specs)} images" + (f" (shard {shard_doc['shard']} of {shard_doc['of']}, weight "
                                     f"{shard_doc['weight']})" if shard_doc else ""))
    if args.all:
        for x in skipped:
            print(f"not built: {x.family}: {x.combination}: {x.reason(k)}")
    return 0
