"""The knowledge's facts as lists: how many of each kind (`imagebuild knowledge validate`) and
each section as tables of rows with their sources (`imagebuild knowledge show SECTION`). The
sections that the resolver reads only as rules (cuDNN's lines and builds, NCCL's builds, both
libraries' redistributables, the constraints) are listed from the checked document here, inside
knowledge/, so that nothing outside it reads matrix.yaml's entries as plain mappings."""

from __future__ import annotations

from ..versions import NONE
from .model import Knowledge

SECTIONS = ("sources", "cuda", "drivers", "architectures", "gpus", "cudnn", "nccl", "pytorch", "ucx",
            "openmpi", "os", "constraints", "rules")


def facts(k: Knowledge) -> list[tuple[str, bool]]:
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
    out += [("rdma", r.verified) for r in k.rdma.values()]
    raw = k.document
    for sect in ("cudnn",):
        if sect in raw:
            out += [("cudnn-line", True) for _ in raw[sect].get("lines", [])]
            out += [("cudnn-build", True) for _ in raw[sect].get("builds", [])]
    if "nccl" in raw:
        out += [("nccl-build", True) for _ in raw["nccl"].get("builds", [])]
    for sect in ("cudnn", "nccl"):      # NVIDIA's redistributables no wheel has (system copies)
        out += [(f"{sect}-redist", True) for _ in (raw.get(sect) or {}).get("redist", [])]
    out += [("constraint", c.get("verified", True) is not False) for c in raw.get("constraints", [])]
    return out


def _mark(verified: bool) -> str:
    return "" if verified else "unverified"


def _variant_nccl(v) -> str:
    """A variant's NCCL as the table shows it: not known, or read only in third-party copies, is
    said so (never "none", which is the CPU build's)."""
    if v.cuda == NONE:
        return v.nccl
    if v.nccl == NONE:
        return "not known"
    if v.nccl_verified:
        return v.nccl
    return f"{v.nccl} (unconfirmed: {v.nccl_cited})"


def section_tables(k: Knowledge, section: str) -> list[tuple[str | None, list[str], list[list]]]:
    """One section of the knowledge as tables: (title or None, header, rows) each."""
    raw = k.document
    if section == "sources":
        return [(None, ["id", "title", "url"], [[s.id, s.title, s.url] for s in k.sources.values()])]
    if section == "cuda":
        return [("modes", ["mode", "driver floor", "package", "source"],
                 [[m.id, m.driver_floor, m.package or "", m.source] for m in k.modes]),
                ("majors", ["major", "minor-compat driver", "source"],
                 [[f"{maj}.x", drv, src] for maj, (drv, src) in sorted(k.majors.items())]),
                ("releases", ["cuda", "min driver", "source", ""],
                 [[r.version, r.driver or "?", r.source, _mark(r.verified)]
                  for r in k.releases.values()])]
    if section == "drivers":
        rows = [[f"R{b.branch}", b.type or "", "end of life" if b.eol is True else (b.eol or "?"),
                 b.newest_cuda or "", b.source, b.lifecycle_source or ""] for b in k.branches.values()]
        return [(None, ["branch", "type", "eol", "newest cuda", "source", "type and eol from"], rows)]
    if section == "architectures":
        rows = [[a.cc, a.name, a.first_cuda or "", a.last_cuda or "",
                 f"R{a.last_branch}" if a.last_branch else "", a.source]
                for a in k.architectures.values()]
        return [(None, ["cc", "name", "first cuda", "last cuda", "last branch", "source"], rows)]
    if section == "gpus":
        rows = [[g.name, g.cc, k.architectures[g.cc].name, "yes" if g.datacenter else "no",
                 g.source] for g in k.gpus.values()]
        return [(None, ["gpu", "cc", "architecture", "data center", "source"], rows)]
    if section == "pytorch":
        rows = []
        for ver, rel in k.pytorch.items():
            for (pv, _), v in k.variants.items():
                if pv != ver:
                    continue
                rows.append([ver, rel.python, v.tag, v.cudnn, _variant_nccl(v), v.cuda_runtime or "",
                             "yes" if v.default else "", ",".join(v.arch) if v.arch else "?",
                             ",".join(v.platforms), v.source, _mark(v.verified)])
        return [(None, ["torch", "python", "variant", "cudnn", "nccl", "cuda runtime", "default",
                        "arch", "platforms", "source", ""], rows)]
    if section in ("cudnn", "nccl"):
        node = raw.get(section) or {}
        tables: list = []
        if section == "cudnn":
            tables.append(("lines", ["cudnn", "cuda", "driver", "cc", "source"],
                           [[ln["versions"], ln["cuda"], ln.get("driver", ""), ln.get("cc", ""),
                             ln["source"]] for ln in node.get("lines", [])]))
        tables.append(("builds", ["cuda major", "versions", "source"],
                       [[f"cu{b['cuda_major']}", b["versions"], b["source"]]
                        for b in node.get("builds", [])]))
        tables.append(("redist (system copies only)", ["cuda majors", "version", "platforms", "source"],
                       [[",".join(f"cu{m}" for m in r["cuda_majors"]) if "cuda_majors" in r else "?",
                         r["version"], ",".join(r.get("platforms", [])) or "?", r["source"]]
                        for r in node.get("redist", [])]))
        if section == "nccl":
            tables.append(("features", ["since", "feature", "source"],
                           [[f.since, f.feature, f.source] for f in k.nccl_features]))
        return tables
    if section in ("ucx", "openmpi"):
        rows = [[v, e["install"], ",".join(e.get("os", [])) if e.get("os") else "",
                 "no" if e.get("cuda") is False else "", e["source"]]
                for v, e in getattr(k, section).items()]
        return [(None, [section, "install", "os", "cuda", "source"], rows)]
    if section == "os":
        rows = [[o.id, o.name, ",".join(o.python), o.cuda or "none", o.kernel or "",
                 o.source] for o in k.os.values()]
        return [(None, ["os", "name", "python", "cuda", "kernel", "source"], rows)]
    if section == "constraints":
        rows = [[r.id, r.text, r.source, _mark(r.verified)] for r in k.rules
                if any(r.id == c.get("id") for c in raw.get("constraints", []))]
        return [(None, ["id", "fact", "source", ""], rows)]
    rows = [[r.id, r.line, r.text, r.source, _mark(r.verified)] for r in k.rules]   # rules
    return [(None, ["rule", "line", "fact", "source", ""], rows)]
