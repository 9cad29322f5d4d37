"""imagebuild resolve: the best consistent stack for a host, why, and what rules everything else out."""

from __future__ import annotations

from .. import add_matrix_option
from ...errors import UsageError
from ..reporter import Reporter
from . import knowledge_line, knowledge_used

# command-line flag -> stack component
WISH_FLAGS = {"torch": "pytorch", "pytorch": "pytorch", "cuda": "cuda", "cudnn": "cudnn",
              "nccl": "nccl", "python": "python", "os": "os", "platform": "platform", "ucx": "ucx",
              "openmpi": "openmpi"}


def add_host_options(parser) -> None:
    g = parser.add_argument_group("host facts")
    g.add_argument("--driver", help="the nodes' NVIDIA driver, e.g. 535.104.05")
    g.add_argument("--gpu", help="GPU model (H100, A100, RTX 4090), sm_XY, or none")
    g.add_argument("--kernel", help="the nodes' Linux kernel, e.g. 5.15")
    g.add_argument("--ofed", action=_Tristate, help="MLNX_OFED/DOCA-OFED installed (yes/no)")
    g.add_argument("--open-kernel-modules", action=_Tristate, dest="open_kernel_modules",
                   help="the driver uses NVIDIA's open kernel modules (yes/no)")
    g.add_argument("--date", help="judge end of life on this day (default: the matrix's as_of)")
    parser.add_argument("--allow-unverified", action="store_true",
                        help="also use facts marked verified: false")


class _Tristate:
    """--flag (yes), --flag yes|no|true|false."""

    def __new__(cls, option_strings, dest, **kw):
        import argparse

        class Action(argparse.Action):
            def __call__(self, parser, ns, value, option_string=None):
                if value is None:
                    setattr(ns, self.dest, True)
                    return
                low = value.lower()
                if low in ("yes", "true", "1"):
                    setattr(ns, self.dest, True)
                elif low in ("no", "false", "0"):
                    setattr(ns, self.dest, False)
                else:
                    raise UsageError(f"expected yes or no, got {value!r}", argument=option_string)

        return Action(option_strings, dest, nargs="?", default=None, **kw)


def add_system_options(group) -> None:
    """--system-cudnn / --system-nccl: libraries the host provides (NGC-style machines)."""
    group.add_argument("--system-cudnn", metavar="VERSION",
                       help="a system cuDNN the host provides beside the one torch's wheels bring "
                            "(NGC-style), e.g. 9.14.0")
    group.add_argument("--system-nccl", metavar="VERSION",
                       help="a system NCCL the host provides beside the one torch's wheels bring")


def system_from(args) -> dict[str, str]:
    return {comp: getattr(args, f"system_{comp}") for comp in ("cudnn", "nccl")
            if getattr(args, f"system_{comp}", None)}


def host_from(args):
    from ...resolve.solver import Host
    return Host(driver=args.driver, gpu=args.gpu, kernel=args.kernel, ofed=args.ofed,
                open_kernel_modules=args.open_kernel_modules, date=args.date)


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


def wishes_from(args) -> dict[str, str]:
    wishes: dict[str, str] = {}
    for flag, comp in WISH_FLAGS.items():
        value = getattr(args, f"wish_{flag}", None)
        if value is not None:
            if comp in wishes:
                raise UsageError("--torch and --pytorch name the same component", argument=f"--{flag}")
            if comp not in ("os", "platform"):      # those two are names, checked against the matrix
                from ...knowledge.matchers import version_matcher
                from ...versions import VersionSyntaxError
                try:
                    version_matcher(value)
                except VersionSyntaxError as exc:   # named by the flag as typed (--torch, not --pytorch)
                    raise UsageError(str(exc), argument=f"--{flag}") from None
            wishes[comp] = value
    return wishes


def parse_wish(text: str) -> tuple[str, str]:
    """'torch==2.9.1' -> ('pytorch', '==2.9.1'); 'cuda>=13' -> ('cuda', '>=13')."""
    import re
    m = re.match(r"^\s*([a-z]+)\s*((?:==|>=|<=|!=|~=|>|<).*|\s+\S.*)\Z", text)
    if not m or m.group(1) not in WISH_FLAGS:
        raise UsageError(f"expected COMPONENT SPEC such as torch==2.9.1, got {text!r}",
                         argument="--why-not")
    return WISH_FLAGS[m.group(1)], m.group(2).strip()


def run(args) -> int:
    from ... import knowledge
    from ...resolve import solver as R

    rep = Reporter.for_args("resolve", args)
    # the matrix's digest for the declared image's cached expansion, taken before it is loaded
    # (images.matrix_sha256 says why); only the answers that name a declared image need it
    matrix_sha256 = None
    if not (args.why_not or args.all):
        from ...render.images import matrix_sha256 as digest
        matrix_sha256 = digest(args.matrix)
    k = knowledge.load(args.matrix)
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
    if getattr(args, "strict", False) and res.ok and res.unknown:
        res.ok = False
        res.explanation = [f"--strict: {u}" for u in res.unknown]
    used = knowledge_used(args, k)
    declared = None if args.why_not else declared_image(k, host, wishes, res, args.allow_unverified,
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
    every fact, the matrix builds only the images its `images:` section declares. The matrix's
    images do not depend on the host: with `matrix_sha256` (images.matrix_sha256, taken before
    `k` was loaded) their expansion is remembered across processes (render.expandcache)."""
    from ...deliver import hostfit
    from ...knowledge.matchers import version_matcher
    from ...render.expandcache import expand_cached

    specs, _ = expand_cached(k, matrix_sha256, allow_unverified=allow_unverified)
    matches = {comp: (frozenset(n.strip() for n in text.split(",")).__contains__
                      if comp in ("os", "platform") else version_matcher(text))
               for comp, text in wishes.items()}
    wanted = [spec for spec in specs
              if all(spec.stack.get(comp) is None or m(spec.stack[comp]) for comp, m in matches.items())]
    best = hostfit.best(k, wanted, host, allow_unverified=allow_unverified)   # fits()'s first
    if best is None:
        return {"id": None, "matches_stack": False,
                "note": f"none of the {len(specs)} declared images runs on this host"
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


def print_resolution(res) -> None:
    if not res.ok:
        print("No consistent stack. The facts that rule it out:")
        for line in res.explanation:
            print(f"  - {line}")
        for w in res.warnings:
            print(f"warning: {w}")
        return
    mode = res.mode.mode if res.mode else "n/a"
    print("Best stack:")
    for comp in ("driver", "gpu", "platform", "os", "python", "cuda", "cudnn", "nccl",
                 "system_cudnn", "system_nccl", "ucx", "openmpi", "pytorch"):
        if comp not in res.stack:
            continue
        extra = ""
        if comp == "cuda" and res.stack["cuda"] != "none":
            extra = f"  ({mode}" + (f", needs {res.mode.package}" if res.mode.package else "") + ")"
        print(f"  {comp:<12} {res.stack[comp]}{extra}")
    if res.min_driver:
        print(f"  minimum driver for this stack: {res.min_driver}")
    if res.gpudirect:
        print("GPUDirect RDMA paths:")
        for g in res.gpudirect:
            print(f"  {g['path']:<15} {g['allowed']:<8} {g['detail']} [{g['source']}]")
    print("Why:")
    for line in res.explanation:
        print(f"  - {line}")
    if res.repository_chain:
        print("Why not with CUDA from an OS repository:")
        for line in res.repository_chain:
            print(f"  - {line}")
    for w in res.warnings:
        print(f"warning: {w}")


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
