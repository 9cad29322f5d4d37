"""Whether a PyTorch check can run, and on which backend: one answer for torch.allreduce,
ddp.equivalence and ddp.elastic, so that their skips and failures are worded alike."""

from __future__ import annotations

from .context import Context
from .report import FAIL, SKIP, CheckResult


def torch_plan(ctx: Context, name: str) -> tuple[str | None, CheckResult | None]:
    """(backend, None) to run, or (None, result) when the check cannot run."""
    t = ctx.torch()
    if not t.get("present"):
        if ctx.expects_present("pytorch"):
            return None, CheckResult(name, FAIL, f"torch cannot be imported: {t.get('error', '')}")
        how = "absent by design (pytorch none)" if ctx.expects_absent("pytorch") else "not installed (no expectation)"
        return None, CheckResult(name, SKIP, f"torch {how}")
    if ctx.tier == "gpu":
        gpus = ctx.cuda_ranks()
        if gpus == 0:
            return None, CheckResult(name, SKIP, "tier gpu: no CUDA device visible "
                                     f"(torch {t.get('version')}, torch.version.cuda {t.get('cuda')})")
        if gpus >= ctx.ranks and t.get("nccl_backend"):
            return "nccl", None
        if not t.get("gloo"):
            return None, CheckResult(name, FAIL, f"{ctx.ranks} ranks but {gpus} GPU(s) and no gloo backend")
        return "gloo", None
    if not t.get("gloo"):
        return None, CheckResult(name, FAIL, "torch.distributed has no gloo backend")
    return "gloo", None
