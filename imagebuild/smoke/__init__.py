"""The smoke suite: checks that run inside every image (and on bare hosts, and from a
Singularity %test). Standard library only; torch and MPI are used in child processes when there.

    python -m imagebuild.smoke [--tier cpu|gpu] [--only NAME ...] [--ranks N] [--expect FILE]
                               [--report FILE] [--junit FILE] [--timeout S]

Checks: versions, libraries, mpi.config, mpi.allreduce, torch.allreduce, ddp.equivalence,
ddp.elastic (torchrun --max-restarts survives a killed worker; elastic.py), gpudirect
(informational: never makes the report fail), and on tier gpu nccl-tests (all_reduce_perf, when
installed). `imagebuild test` adds ddp.two-node and mpi.two-container (MPI over UCX with one rank
in each of two containers, mpirun over ssh) from the host. A skip is never a pass: the report
lists every skipped check with its reason, and
`passed` is true only when no required check failed.
"""

from __future__ import annotations

import signal
import tempfile
import threading
import time
from typing import Callable

from .context import CheckTimeout, Context
from .report import FAIL, CheckResult, Report

from . import checks as _checks  # noqa: F401 - registers every check (registry.py)
from .registry import host_check, names

host_check("ddp.two-node", what="DDP across two containers as two nodes (imagebuild test)")
host_check("mpi.two-container", what="MPI over UCX with one rank in each of two containers, mpirun over ssh")

# the names, in run order, from the one registry
CHECK_NAMES = names(tier="cpu")
# tier gpu only (on tier cpu only when --only names it, and then it skips with its reason)
GPU_CHECK_NAMES = names(tier="gpu")
HOST_CHECK_NAMES = names(host=True)  # run by `imagebuild test` from outside
# the few that a Singularity image's %test runs (seconds, no ranks)
QUICK_CHECK_NAMES = names(quick=True)
# the alarm that catches Python code hanging inside this process fires this long after a check's
# timeout (child processes are killed at the timeout itself and the check reports that)
ALARM_MARGIN_S = 10.0


def run_check(name: str, ctx: Context) -> CheckResult:
    """One check under its timeout. A check that raises is a failure naming the exception."""
    from .checks import CHECKS

    ctx.start_clock()
    started = time.monotonic()
    use_alarm = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")

    def on_alarm(signum, frame):  # noqa: ARG001 - signal API
        raise CheckTimeout()

    old = None
    if use_alarm:
        old = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, ctx.timeout + ALARM_MARGIN_S)
    try:
        result = CHECKS[name](ctx)
    except CheckTimeout:
        result = CheckResult(name, FAIL, f"timed out after {ctx.timeout:.0f}s")
    except Exception as exc:  # noqa: BLE001 - a broken check is a failed check, with its reason
        first = str(exc).splitlines()[0] if str(exc) else ""
        result = CheckResult(name, FAIL, f"check crashed: {type(exc).__name__}: {first}"[:500])
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    result.metrics["seconds"] = round(time.monotonic() - started, 3)
    return result


def run_suite(*, tier: str = "cpu", only: list[str] | None = None, ranks: int | None = None, timeout: float = 180.0,
              expectation: dict | None = None, image: str = "",
              progress: Callable[[CheckResult], None] | None = None) -> Report:
    if only:
        names = [n for n in CHECK_NAMES + GPU_CHECK_NAMES if n in only]
    else:
        names = list(CHECK_NAMES) + (list(GPU_CHECK_NAMES) if tier == "gpu" else [])
    with tempfile.TemporaryDirectory(prefix="imagebuild-smoke-") as workdir:
        ctx = Context(tier=tier, ranks=ranks or 2, timeout=timeout, expectation=expectation, workdir=workdir)
        if not ranks and tier == "gpu":
            # one rank per GPU torch can see (CUDA_VISIBLE_DEVICES respected); 1 without any
            ctx.start_clock()
            try:
                ctx.ranks = max(1, ctx.cuda_ranks())
            except CheckTimeout:
                ctx.ranks = 1
        ranks = ctx.ranks
        results = []
        for name in names:
            result = run_check(name, ctx)
            results.append(result)
            if progress:
                progress(result)
    extra = {"ranks": ranks}
    if expectation is not None:
        extra["expected"] = expectation
    return Report(image=image, checks=results, tier=tier, extra=extra)
