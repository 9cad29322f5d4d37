"""`imagebuild knowledge validate | show SECTION | sync pytorch`

- validate: load matrix.yaml strictly and print what it holds (sources, facts, rules, unverified).
- show SECTION: a readable table of one section (gpus, cuda, drivers, architectures, pytorch,
  cudnn, nccl, ucx, openmpi, os, constraints, sources), each row with its source.
- sync pytorch: compare each PyTorch release's default variant with the real wheel metadata on the
  package index; exit 0 when all agree, 1 when they differ; --write updates matrix.yaml in place.
"""

from __future__ import annotations

import sys

from ..errors import UsageError

SECTIONS = ("sources", "cuda", "drivers", "architectures", "gpus", "cudnn", "nccl", "pytorch", "ucx",
            "openmpi", "os", "constraints", "rules")


def configure(parser) -> None:
    from ..cli import add_matrix_option

    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    p = sub.add_parser("validate", help="load matrix.yaml strictly and print counts")
    add_matrix_option(p)
    p = sub.add_parser("show", help="print one section as a table with sources")
    p.add_argument("section", metavar="SECTION", help="one of: " + ", ".join(SECTIONS))
    add_matrix_option(p)
    p = sub.add_parser("sync", help="compare PyTorch pins with the wheels on the package index")
    p.add_argument("what", metavar="WHAT", choices=["pytorch"], help="what to sync: pytorch")
    p.add_argument("--write", action="store_true",
                   help="update matrix.yaml in place (only the differing values)")
    p.add_argument("--versions", default=None, metavar="V1,V2",
                   help="only these PyTorch releases (default: every release in the matrix)")
    p.add_argument("--index-url", default=None, metavar="URL",
                   help="the package index (default: pip's configured index-url, else pip's default)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    add_matrix_option(p)
    # subparsers inherit argparse's own error(); route theirs through the one-line error too
    for action in parser._subparsers._group_actions:  # noqa: SLF001 - argparse has no public API
        for name, subparser in action.choices.items():
            subparser.error = _one_line_error(f"{parser.prog} {name}")


def _one_line_error(prog: str):
    def error(message: str):
        raise UsageError(message, argument=prog)
    return error


def run(args) -> int:
    if args.action == "validate":
        return _validate(args)
    if args.action == "show":
        return _show(args)
    return _sync(args)


def _validate(args) -> int:
    from .. import knowledge

    k = knowledge.load(args.matrix)
    facts = _facts(k)
    unverified = sum(1 for f in facts if not f[1])
    print(f"{args.matrix}: valid")
    print(f"  sources:    {len(k.sources)}")
    print(f"  facts:      {len(facts)}")
    print(f"  rules:      {len(k.rules)}")
    print(f"  unverified: {unverified} facts, {sum(1 for r in k.rules if not r.verified)} rules")
    return 0


def _facts(k) -> list[tuple[str, bool]]:
    """(kind, verified) for every fact of the knowledge base."""
    out = [("cuda-mode", True) for _ in k.modes]
    out += [("cuda-major", True) for _ in k.majors]
    out += [("cuda-release", r.verified) for r in k.releases.values()]
    out += [("driver-branch", True) for _ in k.branches]
    out += [("architecture", True) for _ in k.architectures]
    out += [("gpu", True) for _ in k.gpus]
    out += [("pytorch-release", True) for _ in k.pytorch]
    out += [("pytorch-variant", v.verified) for v in k.variants.values()]
    out += [("ucx", True) for _ in k.ucx] + [("openmpi", True) for _ in k.openmpi]
    out += [("os", True) for _ in k.os] + [("gpudirect", True) for _ in k.gpudirect]
    out += [("nccl-feature", True) for _ in k.nccl_features]
    out += [("rdma", r["verified"]) for r in k.rdma.values()]
    raw = k.raw
    for sect in ("cudnn",):
        if sect in raw:
            out += [("cudnn-line", True) for _ in raw[sect].get("lines", [])]
            out += [("cudnn-build", True) for _ in raw[sect].get("builds", [])]
    if "nccl" in raw:
        out += [("nccl-build", True) for _ in raw["nccl"].get("builds", [])]
    out += [("constraint", c.get("verified", True) is not False) for c in raw.get("constraints", [])]
    return out


def _table(header: list[str], rows: list[list]) -> list[str]:
    cells = [[str("" if c is None else c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(header)]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    return out


def _mark(verified: bool) -> str:
    return "" if verified else "unverified"


def _show(args) -> int:
    from .. import knowledge

    section = args.section
    if section not in SECTIONS:
        raise UsageError(f"unknown section {section!r} (one of: {', '.join(SECTIONS)})",
                         argument="SECTION")
    k = knowledge.load(args.matrix)
    raw = k.raw
    if section == "sources":
        lines = _table(["id", "title", "url"], [[s.id, s.title, s.url] for s in k.sources.values()])
    elif section == "cuda":
        rows = [[m.id, m.driver_floor, m.package or "", f"[{m.source}]"] for m in k.modes]
        lines = ["modes:"] + _table(["mode", "driver floor", "package", "source"], rows)
        rows = [[f"{maj}.x", drv, f"[{src}]"] for maj, (drv, src) in sorted(k.majors.items())]
        lines += ["", "majors:"] + _table(["major", "minor-compat driver", "source"], rows)
        rows = [[r.version, r.driver or "?", f"[{r.source}]", _mark(r.verified)]
                for r in k.releases.values()]
        lines += ["", "releases:"] + _table(["cuda", "min driver", "source", ""], rows)
    elif section == "drivers":
        rows = [[f"R{b.branch}", b.type or "", "end of life" if b.eol is True else (b.eol or "?"),
                 b.newest_cuda or "", f"[{b.source}]"] for b in k.branches.values()]
        lines = _table(["branch", "type", "eol", "newest cuda", "source"], rows)
    elif section == "architectures":
        rows = [[a["cc"], a["name"], a["first_cuda"] or "", a["last_cuda"] or "",
                 f"R{a['last_branch']}" if a["last_branch"] else "", f"[{a['source']}]"]
                for a in k.architectures.values()]
        lines = _table(["cc", "name", "first cuda", "last cuda", "last branch", "source"], rows)
    elif section == "gpus":
        rows = [[g.name, g.cc, k.architectures[g.cc]["name"], "yes" if g.datacenter else "no",
                 f"[{g.source}]"] for g in k.gpus.values()]
        lines = _table(["gpu", "cc", "architecture", "data center", "source"], rows)
    elif section == "pytorch":
        rows = []
        for ver, rel in k.pytorch.items():
            for (pv, _), v in k.variants.items():
                if pv != ver:
                    continue
                rows.append([ver, rel["python"], v.tag, v.cudnn, v.nccl, v.cuda_runtime or "",
                             "yes" if v.default else "", ",".join(v.arch) if v.arch else "?",
                             f"[{v.source}]", _mark(v.verified)])
        lines = _table(["torch", "python", "variant", "cudnn", "nccl", "cuda runtime", "default",
                        "arch", "source", ""], rows)
    elif section in ("cudnn", "nccl"):
        node = raw.get(section) or {}
        lines = []
        if section == "cudnn":
            rows = [[ln["versions"], ln["cuda"], ln.get("driver", ""), ln.get("cc", ""),
                     f"[{ln['source']}]"] for ln in node.get("lines", [])]
            lines += ["lines:"] + _table(["cudnn", "cuda", "driver", "cc", "source"], rows) + [""]
        rows = [[f"cu{b['cuda_major']}", b["versions"], f"[{b['source']}]"]
                for b in node.get("builds", [])]
        lines += ["builds:"] + _table(["cuda major", "versions", "source"], rows)
        if section == "nccl":
            rows = [[f["since"], f["feature"], f"[{f['source']}]"] for f in k.nccl_features]
            lines += ["", "features:"] + _table(["since", "feature", "source"], rows)
    elif section in ("ucx", "openmpi"):
        rows = [[v, e["install"], ",".join(e.get("os", [])) if e.get("os") else "",
                 "no" if e.get("cuda") is False else "", f"[{e['source']}]"]
                for v, e in getattr(k, section).items()]
        lines = _table([section, "install", "os", "cuda", "source"], rows)
    elif section == "os":
        rows = [[o["id"], o["name"], ",".join(o["python"]), o["cuda"] or "none", o["kernel"] or "",
                 f"[{o['source']}]"] for o in k.os.values()]
        lines = _table(["os", "name", "python", "cuda", "kernel", "source"], rows)
    elif section == "constraints":
        rows = [[r.id, r.text, f"[{r.source}]", _mark(r.verified)] for r in k.rules
                if any(r.id == c.get("id") for c in raw.get("constraints", []))]
        lines = _table(["id", "fact", "source", ""], rows)
    else:  # rules
        rows = [[r.id, r.line, r.text, f"[{r.source}]", _mark(r.verified)] for r in k.rules]
        lines = _table(["rule", "line", "fact", "source", ""], rows)
    print("\n".join(lines))
    return 0


def _sync(args) -> int:
    from .. import sync

    versions = None
    if args.versions is not None:
        versions = [v.strip() for v in args.versions.split(",") if v.strip()]
        if not versions:
            raise UsageError("no version given", argument="--versions")
    index_url = sync.validate_index_url(args.index_url) if args.index_url else None

    def progress(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    result = sync.sync_pytorch(args.matrix, versions, index_url, write=args.write, progress=progress)
    print("\n".join(result.lines))
    if result.agree:
        print(f"all {len(result.reports)} releases agree with the index")
        return 0
    n = sum(len(r.differences) for r in result.reports)
    if args.write:
        print(f"{args.matrix}: " + ("updated" if result.written else "nothing writable changed")
              + f" ({n} difference(s); values marked 'fix by hand' were not written)")
    return 1
