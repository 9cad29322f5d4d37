"""imagebuild's own NCCL bandwidth benchmark (bench/nccl_bw.c, `imagebuild-nccl-bw`): where an image
has it, how it is found on a bare host, and what its `--version` line says.

The benchmark prints nccl-tests' table (nccltests.parse_nccl_tests reads both), so the GPU tier
judges it as it judges all_reduce_perf. Standard library only (it runs inside every image)."""

from __future__ import annotations

import os
import re

from . import proc

#: where an image built from the registries has it (render: the nccl-bench stage's binary)
NCCL_BENCH = "/usr/local/bin/imagebuild-nccl-bw"
#: its source, relative to the smoke package (the build context copies the package)
NCCL_BENCH_SOURCE = "bench/nccl_bw.c"
#: a bare host's own build of it (benchmarks/gpu_proof.sh), or a folder holding one
NCCL_BENCH_ENV = "IMAGEBUILD_NCCL_BENCH"

_VERSION = re.compile(r"^imagebuild-nccl-bw (\S+) nccl-headers=(\d+) nccl-library=(\d+) "
                      r"cudart-headers=(\d+) cudart-library=(\d+) driver=(\d+) mpi=(yes|no)\Z")


def find_bench() -> tuple[str | None, str]:
    """(path, where it was found) or (None, why not). An explicit $IMAGEBUILD_NCCL_BENCH that holds
    no executable is reported as such (the caller fails on it rather than skipping)."""
    given = os.environ.get(NCCL_BENCH_ENV, "")
    if given:
        path = os.path.join(given, os.path.basename(NCCL_BENCH)) if os.path.isdir(given) else given
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path, f"${NCCL_BENCH_ENV}"
        return None, f"${NCCL_BENCH_ENV}={given}: no executable imagebuild-nccl-bw there"
    if os.path.isfile(NCCL_BENCH) and os.access(NCCL_BENCH, os.X_OK):
        return NCCL_BENCH, os.path.dirname(NCCL_BENCH)
    exe = proc.which(os.path.basename(NCCL_BENCH))
    if exe:
        return exe, "PATH"
    return None, f"{os.path.basename(NCCL_BENCH)} is not at {NCCL_BENCH} nor on PATH, and ${NCCL_BENCH_ENV} is not set"


def parse_version(text: str) -> dict | None:
    """The `--version` line as numbers (NCCL's and CUDA's version codes; driver 0: none), or None
    when no line of `text` is one."""
    for line in text.splitlines():
        m = _VERSION.match(line.strip())
        if m:
            return {"bench": m.group(1), "nccl_headers": int(m.group(2)),
                    "nccl_library": int(m.group(3)), "cudart_headers": int(m.group(4)),
                    "cudart_library": int(m.group(5)), "driver": int(m.group(6)),
                    "mpi": m.group(7) == "yes"}
    return None


def nccl_version_code(version: str) -> int | None:
    """NCCL's version code for a release ("2.30.7" -> 23007; before 2.9: major*1000+minor*100+patch)."""
    m = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", version or "")
    if not m:
        return None
    major, minor, patch = (int(g) for g in m.groups())
    if major <= 2 and minor <= 8:
        return major * 1000 + minor * 100 + patch
    return major * 10000 + minor * 100 + patch
