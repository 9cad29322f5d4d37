"""What the knowledge does not know: per GPU, the cells an answer about it rests on (compute
capability, platform, first CUDA, driver floor by branch and within it, the NCCL releases built for
it), and per CUDA, cuDNN and NCCL release the facts that judge it. A missing cell is never read as
"yes": `knowledge evidence --gaps` lists every one, and an answer that depends on one says so in a
warning (`resolve --strict` refuses it)."""

from __future__ import annotations

from dataclasses import dataclass

from ..versions import NONE, VersionSyntaxError, parse_spec, parse_version
from .model import Gpu, Knowledge

GPU_CELLS = ("cc", "platform", "first_cuda", "driver_branch", "driver_release", "nccl")

_WHAT = {
    "first_cuda": "the first CUDA release that supports it",
    "driver_branch": "the first driver branch that drives it",
    "driver_release": "the first driver release within its first branch",
    "nccl": "the NCCL releases built for it",
}


@dataclass(frozen=True)
class Cell:
    subject: str        # a GPU name, or "cuda 13.5.0", "cudnn 9.14.0.64", "nccl 2.18.5"
    cell: str
    value: str | None   # None: not known
    source: str | None

    @property
    def known(self) -> bool:
        return self.value is not None


def gpu_cells(k: Knowledge, gpu: Gpu) -> list[Cell]:
    """The six cells of one GPU (a product, or an sm_XY stand-in for its architecture)."""
    arch = k.architectures.get(gpu.cc)
    n = gpu.name
    out = [Cell(n, "cc", gpu.cc, gpu.source),
           Cell(n, "platform", ", ".join(gpu.platforms) or "any", gpu.source)]
    first_cuda = arch.first_cuda if arch else None
    out.append(Cell(n, "first_cuda", first_cuda, arch.source if first_cuda else None))
    branch, bsrc = gpu.first_branch, gpu.driver_source or gpu.source
    if branch is None and arch is not None and arch.first_branch is not None:
        branch, bsrc = arch.first_branch, arch.driver_source or arch.source
    out.append(Cell(n, "driver_branch", f"R{branch}" if branch else None, bsrc if branch else None))
    release, rsrc = gpu.first_driver, gpu.driver_source or gpu.source
    if release is None and arch is not None and arch.first_driver is not None \
            and (gpu.first_branch is None or gpu.first_branch == arch.first_branch):
        release, rsrc = arch.first_driver, arch.driver_source or arch.source
    out.append(Cell(n, "driver_release", release, rsrc if release else None))
    out.append(_nccl_cell(k, gpu, arch))
    return out


def _nccl_cell(k: Knowledge, gpu: Gpu, arch) -> Cell:
    parts, srcs = [], []
    if arch is not None and arch.nccl:
        parts.append(arch.nccl)
        srcs.append(arch.nccl_source)
    own = [f for f in k.nccl_features if f.gpu == gpu.name]
    if own:
        newest = max(own, key=lambda f: parse_version(f.since))
        parts.append(f">={newest.since}")
        srcs.append(newest.source)
    if not parts:
        return Cell(gpu.name, "nccl", None, None)
    return Cell(gpu.name, "nccl", ",".join(parts), ", ".join(dict.fromkeys(srcs)))


def release_cells(k: Knowledge) -> list[Cell]:
    """Per release: CUDA (Table 3's driver), cuDNN (a support-matrix row: CUDA, driver, GPUs),
    NCCL (the CUDA majors it is built for)."""
    out = []
    for r in k.releases.values():
        out.append(Cell(f"cuda {r.version}", "driver", r.driver, r.source if r.driver else None))
    lines = _cudnn_lines(k)
    for v in k.cudnn_releases:
        rows = [ln for ln in lines if _contains(ln.get("versions"), v)]
        out.append(Cell(f"cudnn {v}", "support_row", "yes" if rows else None,
                        ", ".join(dict.fromkeys(str(ln.get("source")) for ln in rows)) or None))
        if rows:
            with_driver = [ln for ln in rows if ln.get("driver")]
            with_cc = [ln for ln in rows if ln.get("cc")]
            out.append(Cell(f"cudnn {v}", "driver", "yes" if with_driver else None,
                            str(with_driver[0].get("source")) if with_driver else None))
            out.append(Cell(f"cudnn {v}", "gpus", "yes" if with_cc else None,
                            str(with_cc[0].get("source")) if with_cc else None))
    for v in k.nccl_releases:
        rel = k.library_releases.get("nccl", {}).get(v)
        majors = rel.cuda_majors if rel is not None else None
        out.append(Cell(f"nccl {v}", "cuda_majors",
                        ", ".join(str(m) for m in majors) if majors else None,
                        ", ".join(rel.sources) if majors and rel else None))
    return out


def _cudnn_lines(k: Knowledge) -> list:
    return list(((k.document or {}).get("cudnn") or {}).get("lines") or [])


def _contains(spec, version: str) -> bool:
    try:
        return parse_spec(str(spec)).contains(version)
    except (VersionSyntaxError, ValueError):
        return False


def gpu_gaps(k: Knowledge) -> list[Cell]:
    return [c for g in k.gpus.values() for c in gpu_cells(k, g) if not c.known]


def host_unknowns(k: Knowledge, gpu_name: str | None, driver: str | None,
                  stack: dict[str, str]) -> list[str]:
    """The cells an answer for this host rests on that the knowledge does not have, each as one
    sentence; empty when nothing is missing (or no GPU is named)."""
    if not gpu_name or gpu_name == NONE:
        return []
    gpu = k.gpu_by_name(gpu_name)
    if gpu is None:
        return []
    cells = {c.cell: c for c in gpu_cells(k, gpu)}
    wanted = []
    if stack.get("cuda", NONE) != NONE:
        wanted.append("first_cuda")
    if driver is not None:
        wanted.append("driver_branch")
        branch = cells["driver_branch"].value
        try:
            from ..versions import parse_driver
            on_first = branch is not None and parse_driver(driver).branch == int(branch[1:])
        except (VersionSyntaxError, ValueError):
            on_first = False
        if on_first:     # only a host on the GPU's first branch depends on the release floor
            wanted.append("driver_release")
    if stack.get("nccl", NONE) != NONE:
        wanted.append("nccl")
    return [f"{gpu.name}: {_WHAT[c]} is not known (matrix.yaml has no sourced fact); the answer "
            "does not check it, so NVIDIA may not support this" for c in wanted
            if not cells[c].known]
