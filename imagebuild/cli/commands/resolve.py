"""imagebuild resolve: the best consistent stack for a host, why, and what rules everything else out."""

from __future__ import annotations

from .. import add_matrix_option
from ..reporter import Reporter
from . import knowledge_line, knowledge_used

from ..resolution import print_resolution
from ..options import (WISH_FLAGS, add_host_options, add_system_options, host_from,  # noqa: F401
                       parse_wish, system_from, wishes_from)


def configure(parser) -> None:
    add_matrix_option(parser)
    add_host_options(parser)
    g = parser.add_argument_group("wishes (a version or specifier: '>=2.4', '12.4', 'none')")
    for flag in WISH_FLAGS:
        g.add_argument(f"--{flag}", dest=f"wish_{flag}", metavar="SPEC")
    add_system_options(parser.add_argument_group("libraries the host provides (NGC-style)"))
    parser.add_argument("--strict", action="store_true",
                        help="refuse an answer that rests on a fact matrix.yaml does not have "
                             "(a GPU's first CUDA, driver floor or NCCL: `knowledge evidence --gaps`)")
    parser.add_argument("--all", action="store_true", help="list every consistent stack")
    parser.add_argument("--json", action="store_true", help="print a JSON document")
    parser.add_argument("--why-not", metavar="WISH",
                        help="explain one wish, e.g. torch==2.9.1 or cuda>=13")


def run(args) -> int:
    from ... import knowledge
    from ...resolve import solver as R

    rep = Reporter.for_args("resolve", args)
    k = knowledge.load(args.matrix)
    # the declared image's cached expansion is keyed by the sha256 of the bytes just parsed
    matrix_sha256 = None if (args.why_not or args.all) else k.sha256
    host = host_from(args)
    wishes = wishes_from(args)
    system = system_from(args)
    if args.why_not:
        comp, spec = parse_wish(args.why_not)
        wishes[comp] = spec
    if args.all:
        groups = R.enumerate_stacks(k, host, wishes, args.allow_unverified, system=system)
        if args.json:
            rep.result({"ok": bool(groups), "count": sum(len(g.tails) for g in groups),
                        "stacks": [g.to_json() for g in groups]})
        else:
            _print_table(groups)
        return 0 if groups else 1
    res = R.resolve(k, host, wishes, args.allow_unverified, system=system)
    refused = bool(getattr(args, "strict", False) and res.ok and res.unknown)
    if refused:         # no stack, and so no declared image: the answer rests on an unknown
        res.ok = False
        res.explanation = [f"--strict: {u}" for u in res.unknown]
    used = knowledge_used(args, k)
    declared = None if (args.why_not or refused) else declared_image(k, host, wishes, res, args.allow_unverified,
                                                        matrix_sha256=matrix_sha256)
    if args.json:
        rep.result({**res.to_json(), **({"image": declared} if declared is not None else {})})
    elif args.why_not:
        if res.ok:
            print(f"{args.why_not} fits: " + ", ".join(f"{c} {v}" for c, v in res.stack.items()))
        else:
            print(f"{args.why_not} cannot be had on this host, because:")
            for line in res.explanation:
                print(f"  - {line}")
    else:
        print_resolution(res)
        print_declared(declared)
    if not args.json:
        print(knowledge_line(used))
    return 0 if res.ok else 1


def declared_image(k, host, wishes: dict, res, allow_unverified: bool,
                   matrix_sha256: str | None = None) -> dict:
    """The best image the matrix declares for this host and these wishes (what `doctor` and
    `find` would name), and whether it is the stack resolved above: the resolver answers from
    every fact, the matrix builds only the images its `images:` section declares. Only the
    combinations that can hold the best image are expanded (hostfit.best_expanding), and with
    `matrix_sha256` (Knowledge.sha256) what they give is remembered across processes
    (render.expandcache)."""
    from ...deliver import hostfit
    from ...knowledge.matchers import version_matcher
    from ...render.expandcache import Declared

    declared = Declared(k, matrix_sha256, allow_unverified=allow_unverified)
    matches = {comp: (frozenset(n.strip() for n in text.split(",")).__contains__
                      if comp in ("os", "platform") else version_matcher(text))
               for comp, text in wishes.items()}
    best = hostfit.best_expanding(   # fits()'s first of the images these wishes keep
        k, declared.known(), declared.expand, host, allow_unverified=allow_unverified,
        keep=lambda spec: all(spec.stack.get(comp) is None or m(spec.stack[comp])
                              for comp, m in matches.items()),
        possible=lambda i: declared.could_fit(i, host))
    declared.save()
    if best is None:        # every combination was expanded
        return {"id": None, "matches_stack": False,
                "note": f"none of the {len(declared.all())} declared images runs on this host"
                        + (" with these wishes" if wishes else "")
                        + "; declare one under `images:` in matrix.yaml to build it"}
    same = res.ok and all(res.stack.get(c) == v for c, v in best.spec.stack.items()
                          if c in res.stack and c not in ("driver", "gpu"))
    doc = {"id": best.spec.id, "mode": best.mode, "matches_stack": same,
           "stack": dict(sorted(best.spec.stack.items()))}
    if not same:
        differ = [f"{c} {best.spec.stack[c]}" for c in ("os", "python", "cuda", "cudnn", "nccl",
                                                         "pytorch", "ucx", "openmpi")
                  if c in best.spec.stack and res.ok and res.stack.get(c) != best.spec.stack[c]]
        doc["note"] = ("the stack above is not declared as an image; the best declared one differs "
                       "in " + ", ".join(differ) + " (declare the stack under `images:` in "
                       "matrix.yaml to build it)") if res.ok else "the best declared image here"
    return doc


def print_declared(declared: dict | None) -> None:
    if declared is None:
        return
    if declared["id"] is None:
        print(f"Declared image: none: {declared['note']}")
        return
    print(f"Declared image: {declared['id']} ({declared['mode']})"
          + ("" if declared["matches_stack"] else f": {declared['note']}"))


def _print_table(groups) -> None:
    cols = ("pytorch", "cuda", "cudnn", "nccl", "python", "os", "platform", "mode", "min_driver",
            "openmpi", "ucx")
    rows = []
    for g in groups:
        j = g.to_json()
        ucx = j["ucx"]
        rows.append([j["pytorch"], j["cuda"], j["cudnn"], j["nccl"], j["python"], j["os"],
                     j["platform"],
                     j["mode"] or "", j["min_driver"] or "-", ",".join(j["openmpi"]),
                     ucx[0] if len(ucx) == 1 else f"{ucx[-1]}..{ucx[0]} ({len(ucx)})"])
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)))
    print(f"{len(rows)} groups, {sum(len(g.tails) for g in groups)} consistent stacks")
