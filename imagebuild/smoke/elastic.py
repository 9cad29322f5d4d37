"""ddp.elastic: torchrun with --max-restarts survives a worker killed mid-run.

Two CPU workers (gloo) under ``python -m torch.distributed.run --standalone --max-restarts 1``;
rank 1 kills itself (SIGKILL) once at step KILL_AT, after creating a marker file, so the restarted
group runs through. The workers checkpoint every step into the check's scratch folder and resume
from it. Passes when torchrun exits 0, the marker exists (the kill happened), the surviving
results come from restart 1 resuming at KILL_AT, and the final parameters equal an uninterrupted
run (workers/elastic.py computes it) within 1e-6 relative and are identical on both ranks.
"""

from __future__ import annotations

import os

from . import proc
from .context import CheckTimeout, Context
from .report import FAIL, PASS, CheckResult
from .torchplan import torch_plan
from .workers import read_results

NAME = "ddp.elastic"
STEPS = 6
KILL_AT = 3
WORKERS = 2


def check_ddp_elastic(ctx: Context) -> CheckResult:
    backend, early = torch_plan(ctx, NAME)   # torch present? gloo? (worded as the others)
    if early:
        return early
    scratch = ctx.scratch("ddp-elastic")
    out_dir = os.path.join(scratch, "results")
    marker = os.path.join(scratch, "killed")
    ckpt = os.path.join(scratch, "checkpoint.pt")
    argv = [ctx.python, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
            "--nproc-per-node", str(WORKERS), "--max-restarts", "1", "--monitor-interval", "0.2",
            "-m", "imagebuild.smoke.workers.elastic", "--out", out_dir, "--ckpt", ckpt,
            "--steps", str(STEPS), "--kill-at", str(KILL_AT), "--kill-rank", "1",
            "--timeout", str(int(min(ctx.timeout, 120)))]
    env = ctx.env(IMAGEBUILD_ELASTIC_MARKER=marker, CUDA_VISIBLE_DEVICES="")
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)  # torchrun sets its own
    out = proc.run(argv, timeout=ctx.left(), env=env)
    if out.timed_out:
        raise CheckTimeout()
    results = read_results(out_dir, WORKERS)
    first = results.get(0, {})
    metrics: dict[str, float] = {"workers": WORKERS, "steps": STEPS, "kill_at": KILL_AT,
                                 "torchrun_s": round(out.seconds, 3)}
    for key in ("restart_count", "resumed_at", "max_rank_diff", "max_rel_diff", "tolerance"):
        if key in first:
            metrics[key] = first[key]
    errs = []
    if out.returncode != 0:
        errs.append(f"torchrun exited {out.returncode}: {out.tail(3)}")
    if not os.path.exists(marker):
        errs.append("no worker was killed (the marker file was never written)")
    if sorted(results) != list(range(WORKERS)) and not errs:
        errs.append(f"expected results of ranks 0..{WORKERS - 1}, got {sorted(results)}")
    for rank, data in sorted(results.items()):
        errs += [f"rank {rank}: {e}" for e in data.get("errors", [])[:3]]
        if data.get("restart_count") != 1:
            errs.append(f"rank {rank} finished in restart {data.get('restart_count')}, not 1")
        if data.get("resumed_at") != KILL_AT:
            errs.append(f"rank {rank} resumed at step {data.get('resumed_at')}, not {KILL_AT} "
                        "(the checkpoint of the step before the kill)")
    if errs:
        return CheckResult(NAME, FAIL, "; ".join(errs)[:800], metrics)
    return CheckResult(NAME, PASS,
                       f"torchrun --max-restarts 1, {WORKERS} CPU workers (gloo): rank 1 killed itself "
                       f"(SIGKILL) at step {KILL_AT} of {STEPS}, the group restarted once and resumed from "
                       f"the step-{KILL_AT - 1} checkpoint; final parameters identical on both ranks and "
                       f"within {first.get('tolerance'):g} relative of an uninterrupted run (worst "
                       f"{first.get('max_rel_diff', 0):.3g}) in {out.seconds:.1f} s", metrics)

