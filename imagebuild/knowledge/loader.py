"""load(): read matrix.yaml and build its Knowledge. build() calls the sections in a fixed order
(later sections refer to earlier ones; the rules keep the order the sections add them in, which is
the order of the resolver's explanations)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..digests import sha256_bytes
from ..localfile import read_bytes
from . import cache
from .model import Knowledge
from .schema import MATRIX_MAX_BYTES


#: the knowledge bases this process loaded: real path -> (sha256 of the bytes parsed, as_of, the
#: file's size and modification time then), so that what a command reports about its matrix (its
#: --json envelope) names the bytes it read, without reading the file again
LOADED: dict[str, tuple[str, str, int, int]] = {}


def loaded(path: str | Path) -> tuple[str, str] | None:
    """(sha256, as_of) of the matrix at `path` as this process last loaded it, while the file is
    still what was loaded (same size and modification time); else None."""
    seen = LOADED.get(os.path.realpath(path))
    if seen is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return seen[:2] if (st.st_size, st.st_mtime_ns) == seen[2:] else None


def load(path: str | Path) -> Knowledge:
    """Load, validate and compile matrix.yaml, opened once: `Knowledge.sha256` is the sha256 of the
    bytes read. The compiled knowledge of those bytes is kept across processes (knowledge/cache.py):
    a later load of the same bytes by the same imagebuild reads it back instead."""
    path = str(path)
    try:
        st = os.stat(path)
        data = read_bytes(path, MATRIX_MAX_BYTES)
    except OSError:
        st = data = None        # load_yaml reads it again, to name what is wrong in its own words
    k = None
    if data is not None:
        k = cache.lookup(sha256_bytes(data))
        if k is not None:       # just unpickled, no one else holds it: it is given its own name
            object.__setattr__(k, "path", path)
    if k is None:
        from .yamlfile import load_yaml

        doc = load_yaml(Path(path), data)
        k = build(doc, path)
        if data is not None:
            cache.store(k)
    if k.sha256 and st is not None:
        LOADED[os.path.realpath(path)] = (k.sha256, k.as_of, st.st_size, st.st_mtime_ns)
    return k


def build(doc: Any, path: str) -> Knowledge:
    """The Knowledge of a parsed document (`doc` from load_yaml; `path` names it in errors)."""
    from .context import _Ctx
    from .families import families_of
    from .model import Project, Tool
    from .sections import (architectures, constraints, cuda, cudnn, document, drivers, gpudirect,
                           gpus, nccl, oses, platforms, preference, pytorch, rdma, recipes,
                           sources, ucx_openmpi)

    c = _Ctx(path)
    as_of = document.load(c, doc)
    srcs = sources.load(c, doc)
    plats = platforms.load(c, doc, srcs)
    prefs = preference.load(c, doc)
    modes, majors, releases, compat = cuda.load(c, doc, srcs)
    branches = drivers.load(c, doc, srcs)
    archs = architectures.load(c, doc, srcs)
    gpu_table = gpus.load(c, doc, srcs, archs)
    cudnn_releases, cudnn_known = cudnn.load(c, doc, srcs)
    nccl_features, nccl_releases, nccl_known = nccl.load(c, doc, srcs, archs, gpu_table)
    variants, torch = pytorch.load(c, doc, srcs, releases)
    ucx = ucx_openmpi.load(c, doc, srcs, "ucx")
    openmpi = ucx_openmpi.load(c, doc, srcs, "openmpi")
    os_table = oses.load(c, doc, srcs, releases)
    gdr = gpudirect.load(c, doc, srcs)
    rdma_table = rdma.load(c, doc, srcs, os_table)
    constraints.load(c, doc, srcs)
    constraints.unique_ids(c, doc)
    recipes.load(c, doc)
    return Knowledge(
        path=path, as_of=as_of, sources=srcs, preference=prefs, modes=tuple(modes),
        majors=majors, releases=releases, branches=branches, gpus=gpu_table,
        architectures=archs, variants=variants, pytorch=torch, ucx=ucx,
        openmpi=openmpi, os=os_table, gpudirect=gdr, nccl_features=nccl_features,
        rules=tuple(c.rules), document=doc, rdma=rdma_table, compat=compat, platforms=plats,
        nccl_releases=nccl_releases, cudnn_releases=cudnn_releases,
        library_releases={"cudnn": cudnn_known, "nccl": nccl_known},
        tools={name: Tool.of(name, entry) for name, entry in (doc.get("tools") or {}).items()},
        project=Project.of(doc.get("project")), families=families_of(doc),
        sha256=getattr(doc, "sha256", None))
