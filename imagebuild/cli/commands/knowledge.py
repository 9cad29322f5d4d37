"""`imagebuild knowledge which | validate | show SECTION | schema | evidence | sync pytorch | copy DIR`

- which: the matrix the commands use here, where that choice came from (--matrix,
  $IMAGEBUILD_MATRIX, ./matrix.yaml, or the one packaged with imagebuild), its as_of and sha256.
- copy DIR: a copy of that matrix and its wheel locks to edit (the packaged one is read-only).

- validate: load matrix.yaml strictly and print what it holds (sources, facts, rules, unverified).
- show SECTION: a readable table of one section (gpus, cuda, drivers, architectures, pytorch,
  cudnn, nccl, ucx, openmpi, os, constraints, sources), each row with its source.
- schema: matrix.yaml's JSON Schema, from the declarations the loader checks the file with
  (knowledge/shapes.py); the repository keeps it as matrix.schema.json, which matrix.yaml's first
  line names for editors.
- sync pytorch: compare each PyTorch release's default variant with the real wheel metadata on the
  package index, and each release's `wheels:` records (x86_64 and aarch64: file, sha256, size, the
  CUDA of torch/version.py, commit) with the wheels pip gets now; exit 0 when all agree, 1 when
  they differ; --write updates matrix.yaml in place (whole or not at all, and only if it loads).
- evidence: the offline audit of every PyTorch release x variant x platform: the wheel that shows
  it, or the source its variant cites; exit 1 when a verified build rests on third-party copies.
"""

from __future__ import annotations

from ...errors import UsageError
from ..reporter import Reporter

from ...knowledge.catalogue import SECTIONS, facts as _facts, section_tables as _section_tables


def configure(parser) -> None:
    from .. import add_matrix_option

    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    p = sub.add_parser("which", help="which matrix the commands use here, and its as_of")
    add_matrix_option(p)
    p = sub.add_parser("copy", help="copy the matrix and its wheel locks into DIR, to edit")
    p.add_argument("dir", metavar="DIR", help="the folder to write matrix.yaml and locks/ into")
    add_matrix_option(p)
    p = sub.add_parser("validate", help="load matrix.yaml strictly and print counts")
    add_matrix_option(p)
    p = sub.add_parser("show", help="print one section as a table with sources")
    p.add_argument("section", metavar="SECTION", help="one of: " + ", ".join(SECTIONS))
    add_matrix_option(p)
    p = sub.add_parser("schema", help="print matrix.yaml's JSON Schema (for editors and validators)")
    p.add_argument("--output", default=None, metavar="FILE",
                   help="write it to FILE (whole or not at all) instead of printing it")
    p = sub.add_parser("evidence", help="audit, offline, what shows each PyTorch build on each "
                       "platform: a wheel on the index (file, sha256, commit) or a cited source")
    p.add_argument("--gaps", action="store_true",
                   help="list instead what is not known: per GPU (first CUDA, driver floor, NCCL) "
                        "and per CUDA, cuDNN and NCCL release")
    add_matrix_option(p)
    p = sub.add_parser("sync", help="compare PyTorch pins and wheels with the package index")
    p.add_argument("what", metavar="WHAT", choices=["pytorch", "nvidia"],
                   help="what to sync: pytorch (torch's pins and wheels), nvidia (the CUDA, cuDNN "
                        "and NCCL releases of NVIDIA's cuda-toolkit, nvidia-cudnn-cuXX and "
                        "nvidia-nccl-cuXX wheels)")
    p.add_argument("--write", action="store_true",
                   help="update matrix.yaml in place (only the differing values)")
    p.add_argument("--versions", default=None, metavar="V1,V2",
                   help="only these PyTorch releases (default: every release in the matrix)")
    p.add_argument("--index-url", default=None, metavar="URL",
                   help="the package index (default: pip's configured index-url, else pip's default)")
    p.add_argument("--no-wheels", action="store_true",
                   help="compare the default variants' pins only; leave the wheel records unread")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    add_matrix_option(p)
    for p in sub.choices.values():
        p.add_argument("--json", action="store_true", help="print the result as JSON")
    # subparsers inherit argparse's own error(); route theirs through the one-line error too
    for action in parser._subparsers._group_actions:  # noqa: SLF001 - argparse has no public API
        for name, subparser in action.choices.items():
            subparser.error = _one_line_error(subparser, name)


def _one_line_error(subparser, name: str):
    from .. import parser_error

    def error(message: str):
        parser_error(subparser, f"{name}: {message}")
    return error


def run(args) -> int:
    if args.action == "which":
        return _which(args)
    if args.action == "copy":
        return _copy(args)
    if args.action == "validate":
        return _validate(args)
    if args.action == "show":
        return _show(args)
    if args.action == "schema":
        return _schema(args)
    if args.action == "evidence":
        return _evidence(args)
    return _sync(args)


def schema_text() -> str:
    """matrix.yaml's JSON Schema as the repository keeps it (matrix.schema.json): knowledge.shapes'
    declarations, two-space indented, one trailing newline: the same declarations, the same bytes."""
    import json

    from ...knowledge.shapes import json_schema
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"


def _schema(args) -> int:
    """The JSON Schema of matrix.yaml, printed (the schema itself; with --json inside the answer's
    envelope) or written to --output. An editor with a YAML language server reads it from
    matrix.yaml's first line; `jsonschema` validates against it."""
    import json
    from pathlib import Path

    from ...atomic import write_atomic
    from ...digests import sha256_bytes

    text = schema_text()
    rep = Reporter.for_args("knowledge", args)
    if args.output is None:
        rep.result({"schema": json.loads(text)}, text, end="")
        return 0
    out = Path(args.output)
    if out.is_dir():
        raise UsageError(f"{out} is a folder", argument="--output")
    try:
        write_atomic(out, text.encode())
    except OSError as exc:
        raise UsageError(f"{out}: cannot write: {exc.strerror or exc}", argument="--output") from None
    digest = sha256_bytes(text)
    rep.result({"output": str(out), "bytes": len(text.encode()), "sha256": digest},
               f"{out}: matrix.yaml's JSON Schema ({len(text.encode())} bytes, sha256 {digest[:12]})")
    return 0


def _which(args) -> int:
    from ... import knowledge
    from . import knowledge_line, knowledge_used

    info = knowledge_used(args, knowledge.load(args.matrix))
    Reporter.for_args("knowledge", args).result(info, knowledge_line(info) + f"\n  sha256 {info['sha256']}")
    return 0


def _copy(args) -> int:
    """The matrix (checked first: a broken one is not copied) and every wheel lock beside it, to
    DIR/matrix.yaml and DIR/locks/wheels/; an existing DIR/matrix.yaml is never overwritten."""
    import shutil
    from pathlib import Path

    from ... import knowledge
    from ...atomic import write_atomic
    from ...render.wheellock import LOCK_DIR, lock_root

    k = knowledge.load(args.matrix)
    dest = Path(args.dir)
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"{dest} is not a folder", argument="DIR")
    if (dest / "matrix.yaml").exists():
        raise UsageError(f"{dest / 'matrix.yaml'} exists: nothing was copied", argument="DIR")
    src_locks = lock_root(k) / LOCK_DIR
    locks = sorted(src_locks.glob("*.txt")) if src_locks.is_dir() else []
    # a lock already in DIR is the user's (edited, or from another copy): refused before anything
    # is written, never replaced; the same bytes are left as they are
    clash = [lk.name for lk in locks if (dest / LOCK_DIR / lk.name).is_symlink()
             or ((dest / LOCK_DIR / lk.name).exists()
                 and (dest / LOCK_DIR / lk.name).read_bytes() != lk.read_bytes())]
    if clash:
        raise UsageError(f"{dest / LOCK_DIR / clash[0]} exists and differs from the packaged lock"
                         f"{f' (and {len(clash) - 1} more)' if len(clash) > 1 else ''}: nothing was "
                         "copied (copy into an empty folder)", argument="DIR")
    (dest / LOCK_DIR).mkdir(parents=True, exist_ok=True)
    for lock in locks:
        if not (dest / LOCK_DIR / lock.name).exists():
            with open(lock, "rb") as src, open(dest / LOCK_DIR / lock.name, "xb") as dst:
                shutil.copyfileobj(src, dst)
    write_atomic(dest / "matrix.yaml", Path(k.path).read_bytes())   # last: a copy is whole or absent
    Reporter.for_args("knowledge", args).result(
        {"matrix": str(dest / "matrix.yaml"), "as_of": k.as_of, "locks": len(locks)},
        f"{dest / 'matrix.yaml'}: copied (as of {k.as_of}) with {len(locks)} wheel lock(s); "
        f"use it with --matrix {dest / 'matrix.yaml'} or from {dest}")
    return 0


def _validate(args) -> int:
    from ... import knowledge

    k = knowledge.load(args.matrix)
    facts = _facts(k)
    unverified = sum(1 for f in facts if not f[1])
    unverified_rules = sum(1 for r in k.rules if not r.verified)
    Reporter.for_args("knowledge", args).result(
        {"matrix": args.matrix, "valid": True, "sources": len(k.sources), "facts": len(facts),
         "rules": len(k.rules), "unverified_facts": unverified, "unverified_rules": unverified_rules},
        f"{args.matrix}: valid\n"
        f"  sources:    {len(k.sources)}\n"
        f"  facts:      {len(facts)}\n"
        f"  rules:      {len(k.rules)}\n"
        f"  unverified: {unverified} facts, {unverified_rules} rules")
    return 0


def _table(header: list[str], rows: list[list]) -> list[str]:
    cells = [[str("" if c is None else c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(header)]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    return out


def _show(args) -> int:
    from ... import knowledge

    section = args.section
    if section not in SECTIONS:
        raise UsageError(f"unknown section {section!r} (one of: {', '.join(SECTIONS)})",
                         argument="SECTION")
    tables = _section_tables(knowledge.load(args.matrix), section)
    lines: list[str] = []
    for n, (title, header, rows) in enumerate(tables):
        shown = [[f"[{c}]" if h == "source" else c for c, h in zip(row, header)] for row in rows]
        lines += ([""] if n else []) + ([f"{title}:"] if title else []) + _table(header, shown)
    # JSON: the same tables as data, each cell as the text shows it but a source without brackets
    Reporter.for_args("knowledge", args).result(
        {"matrix": args.matrix, "section": section,
         "tables": [{"title": title, "columns": header, "rows": [["" if c is None else str(c) for c in row]
                                                                 for row in rows]}
                    for title, header, rows in tables]},
        "\n".join(lines))
    return 0


def _sync(args) -> int:
    from ...knowledge import sync
    from ...workspace import is_packaged

    if args.write and is_packaged(args.matrix):
        raise UsageError("the packaged matrix is read-only: copy it with `imagebuild knowledge "
                         "copy DIR` and sync that copy", argument="--write")

    versions = None
    if args.versions is not None:
        versions = [v.strip() for v in args.versions.split(",") if v.strip()]
        if not versions:
            raise UsageError("no version given", argument="--versions")
    index_url = sync.validate_index_url(args.index_url) if args.index_url else None

    rep = Reporter.for_args("knowledge", args)
    if args.what == "nvidia":
        if versions is not None:
            raise UsageError("--versions names PyTorch releases: not for `sync nvidia`",
                             argument="--versions")
        return _sync_nvidia(args, index_url, rep)
    result = sync.sync_pytorch(args.matrix, versions, index_url, write=args.write,
                               progress=rep.progress, wheels=not args.no_wheels)
    text = "\n".join(result.lines)
    n = sum(len(r.differences) for r in result.reports) + len(result.wheels)
    if result.agree:
        text += f"\nall {len(result.reports)} releases agree with the index"
    elif args.write:
        text += (f"\n{args.matrix}: " + ("updated" if result.written else "nothing writable changed")
                 + f" ({n} difference(s); values marked 'fix by hand' were not written)")
    rep.result({"matrix": args.matrix, "agree": result.agree, "write": args.write,
                "written": result.written, "differences": n,
                "releases": [_release_json(r) for r in result.reports],
                "wheels": [_wheel_change_json(c) for c in result.wheels]}, text)
    return 0 if result.agree else 1


def _sync_nvidia(args, index_url, rep) -> int:
    from dataclasses import asdict

    from ...knowledge import syncnvidia

    result = syncnvidia.sync_nvidia(args.matrix, index_url, write=args.write, progress=rep.progress)
    lines = [f"{args.matrix} against the package index: "
             + ", ".join(f"{p} {n}" for p, n in result.read.items()) + " release(s) read"]
    lines += [f"  {n.describe()}" for n in result.new]
    if result.agree:
        lines.append("every CUDA, cuDNN and NCCL release on the index is in the matrix")
    elif args.write:
        lines.append(f"{args.matrix}: " + ("updated" if result.written else "unchanged")
                     + f" ({len(result.new)} release(s) added)")
    rep.result({"matrix": args.matrix, "agree": result.agree, "write": args.write,
                "written": result.written, "read": result.read,
                "new": [asdict(n) for n in result.new]}, "\n".join(lines))
    return 0 if result.agree else 1


def _wheel_change_json(change) -> dict:
    from dataclasses import asdict

    return {"release": change.release, "platform": change.platform, "what": change.what,
            "matrix": asdict(change.matrix) if change.matrix else None,
            "index": asdict(change.index) if change.index else None}


def _evidence(args) -> int:
    """The offline audit: every release x variant x platform and what shows it; exit 1 when a
    verified build rests on third-party copies alone."""
    from dataclasses import asdict

    from ... import knowledge
    from ...knowledge import wheelevidence

    k = knowledge.load(args.matrix)
    if getattr(args, "gaps", False):
        return _gaps(args, k)
    rows = wheelevidence.audit(k)
    bad = wheelevidence.failures(rows)
    header = ("release", "build", "platform", "verified", "evidence", "source", "detail")
    table = [(r.release, r.build, r.platform, "yes" if r.verified else "no", r.kind, r.source,
              r.detail if r.kind == "wheel" else r.detail[:90]) for r in rows]
    widths = [max(len(str(row[i])) for row in [header] + table) for i in range(len(header) - 1)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)) + "  " + row[-1]
             for row in [header] + table]
    wheels = sum(1 for r in rows if r.kind == "wheel")
    lines.append(f"{len(rows)} builds x platforms: {wheels} shown by a wheel on the index, "
                 f"{len(rows) - wheels} by the source their variant cites")
    lines += [f"refused: {b}" for b in bad]
    rep = Reporter.for_args("knowledge", args)
    rep.result({"matrix": args.matrix, "rows": [asdict(r) for r in rows], "refused": bad},
               "\n".join(lines))
    return 1 if bad else 0


def _gaps(args, k) -> int:
    """`knowledge evidence --gaps`: every cell not known, per GPU and per release, with totals.
    Exit 0: a gap is knowledge to gather, not an error (`resolve --strict` refuses answers that
    rest on one)."""
    from dataclasses import asdict

    from ...knowledge import completeness

    gpu = [c for g in k.gpus.values() for c in completeness.gpu_cells(k, g)]
    rel = completeness.release_cells(k)
    lines = ["subject  cell  (not known)"]
    lines += [f"gpu {c.subject}  {c.cell}" for c in gpu if not c.known]
    lines += [f"{c.subject}  {c.cell}" for c in rel if not c.known]
    totals = {}
    for name, cells in (("gpu", gpu), ("release", rel)):
        missing = sum(1 for c in cells if not c.known)
        totals[name] = {"cells": len(cells), "not_known": missing}
        lines.append(f"{name} cells: {len(cells) - missing} of {len(cells)} known, {missing} not known")
    by_cell: dict[str, int] = {}
    for c in gpu + rel:
        if not c.known:
            by_cell[c.cell] = by_cell.get(c.cell, 0) + 1
    lines.append("not known by cell: " + ", ".join(f"{n} {c}" for c, n in sorted(by_cell.items())))
    rep = Reporter.for_args("knowledge", args)
    rep.result({"matrix": args.matrix, "totals": totals, "by_cell": by_cell,
                "gaps": [asdict(c) for c in gpu + rel if not c.known]}, "\n".join(lines))
    return 0


def _release_json(report) -> dict:
    """One release of `knowledge sync`: the matrix's pins, the index's, and where they differ."""
    from dataclasses import asdict

    return {"release": report.release, "line": report.line, "matrix": report.matrix,
            "index": asdict(report.pins), "differences": [asdict(d) for d in report.differences]}
