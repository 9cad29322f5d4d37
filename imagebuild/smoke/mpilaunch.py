"""MPI and UCX as the suite reads and runs them: UCX's transports and built modules (ucx_info's
output) judged against what the image promises, how the suite starts MPI ranks (mpirun's
arguments and environment, the UCX transports for one host) and what the ranks left (each rank's
errors, the bandwidth of each size). Standard library only (it runs inside every image)."""

from __future__ import annotations

import os
import re

from . import bandwidth, proc
from .context import Context
from .report import FAIL, PASS


def ucx_tls_for_one_host() -> str:
    """self,sm when /dev/shm is usable (shared memory between the ranks), else self,tcp."""
    if os.environ.get("UCX_TLS"):
        return os.environ["UCX_TLS"]
    shm = "/dev/shm"
    return "self,sm" if os.path.isdir(shm) and os.access(shm, os.W_OK) else "self,tcp"


def bandwidth_metrics(timings: dict[str, float], ranks: int) -> dict[str, float]:
    metrics: dict[str, float] = {}
    for size_s, seconds in timings.items():
        size = int(size_s)
        if seconds <= 0:
            continue
        tag = bandwidth.human(size)
        metrics[f"time_us.{tag}"] = round(seconds * 1e6, 3)
        metrics[f"algbw_GBps.{tag}"] = round(bandwidth.algbw(size, seconds) / 1e9, 6)
        metrics[f"busbw_GBps.{tag}"] = round(bandwidth.busbw(size, seconds, ranks) / 1e9, 6)
    return metrics


def _rank_errors(results: dict[int, dict], outcomes, ranks: int, timeout: float) -> list[str]:
    errs: list[str] = []
    if any(o.timed_out for o in outcomes):
        errs.append(f"timed out after {timeout:.0f}s")
    for o in outcomes:
        if o.returncode not in (0, None):
            errs.append(f"{os.path.basename(o.argv[0])} exited {o.returncode}: {o.tail(4)}")
            break
    missing = [r for r in range(ranks) if r not in results]
    if missing and not errs:
        errs.append(f"rank(s) {missing} wrote no result: {outcomes[0].tail(4)}")
    for r in sorted(results):
        errs += [f"rank {r}: {e}" for e in results[r].get("errors", [])[:3]]
    return errs


def _mpirun_env(ctx: Context) -> dict:
    env = ctx.env(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    if not proc.which("ssh") and not proc.which("rsh"):
        # Open MPI 4 refuses to start even a local job without a remote shell agent on PATH;
        # an empty agent lets it launch the ranks on this host only (images need no ssh)
        env.setdefault("OMPI_MCA_plm_rsh_agent", "")
    return env


def mpirun_argv(mpirun: str, ranks: int, tls: str | None, python: str, lib: str, out_dir: str,
                hosts: list[str] | None = None) -> list[str]:
    """mpirun running the all-reduce worker on `ranks` ranks: over UCX with UCX_TLS=`tls` (None:
    Open MPI's default pml), on this host or one rank on each of `hosts` (started over ssh)."""
    argv = [mpirun, "--allow-run-as-root", "-np", str(ranks)]
    if hosts:
        # one rank on each host, never two on one; the remote daemon (prted/orted) is found under
        # the prefix of this mpirun, and the ranks there get this side's search paths (an ssh
        # session has the system's default PATH)
        prefix = os.path.dirname(os.path.dirname(os.path.realpath(mpirun)))
        argv += ["--host", ",".join(f"{h}:1" for h in hosts), "--map-by", "node", "--prefix", prefix]
        argv += [a for v in ("PATH", "LD_LIBRARY_PATH") if os.environ.get(v) for a in ("-x", v)]
    else:
        argv.append("--oversubscribe")
    if tls:
        # Open MPI 4.1 only picks UCX on InfiniBand devices unless told otherwise
        argv += ["--mca", "pml", "ucx", "--mca", "pml_ucx_tls", "any", "--mca", "pml_ucx_devices",
                 "any", "-x", f"UCX_TLS={tls}"]
    # the UCX settings of this side reach every rank (UCX_TLS is the check's own, above)
    argv += [a for v in sorted(os.environ) if v.startswith("UCX_") and v != "UCX_TLS" for a in ("-x", v)]
    return argv + ["-x", "PYTHONPATH", "-x", "OMP_NUM_THREADS",
                   python, "-m", "imagebuild.smoke.workers.mpi_allreduce", "--lib", lib, "--out", out_dir]


def parse_transports(ucx_info_d: str) -> list[str]:
    return sorted(set(re.findall(r"^#\s*Transport:\s*(\S+)", ucx_info_d, re.M)))


# image.json feature -> the UCX transport module it needs (`ucx_info -b`: uct_MODULES, and the
# CUDA transport's own sub-modules in uct_cuda_MODULES)
UCX_FEATURE_MODULES = {"verbs": "ib", "rdmacm": "rdmacm", "ucx_cuda": "cuda", "gdrcopy": "cuda/gdrcopy"}


def parse_ucx_modules(build_config: str) -> set[str]:
    """The transport modules `ucx_info -b` says UCX was built with: "ib", "rdmacm", "cma",
    "cuda", and a sub-module as "cuda/gdrcopy" (from `#define uct_cuda_MODULES ":gdrcopy"`)."""
    found: set[str] = set()
    for m in re.finditer(r'^#define\s+uct(?:_(\w+))?_MODULES\s+"([^"]*)"', build_config, re.M):
        parent = m.group(1)
        for name in filter(None, m.group(2).split(":")):
            found.add(f"{parent}/{name}" if parent else name)
    return found


def judge_ucx_modules(modules: set[str], wanted: dict[str, bool], have_ib: bool) -> list[tuple[str, str]]:
    """Parts for mpi.config: every module the image's features ask for is built in."""
    parts: list[tuple[str, str]] = []
    if not modules:
        return [(FAIL, "ucx_info -b names no transport module (no uct_MODULES line)")]
    parts.append((PASS, "UCX modules built in: " + ", ".join(sorted(modules))))
    missing = [f"{mod} (for {feat})" for feat, mod in UCX_FEATURE_MODULES.items() if wanted.get(feat) and mod not in modules]
    if wanted.get("verbs") and not have_ib:
        missing.append("HAVE_IB (for verbs)")
    if missing:
        parts.append((FAIL, "UCX was built without " + ", ".join(missing) + ", but the image should have them"))
    elif any(wanted.values()):
        parts.append((PASS, "UCX has what the image promises: "
                      + ", ".join(f"{feat} ({mod})" for feat, mod in UCX_FEATURE_MODULES.items() if wanted.get(feat))))
    return parts
