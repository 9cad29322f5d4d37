"""torch.distributed all-reduce: correctness element by element for several dtypes and sizes,
then time by message size for algorithm and bus bandwidth (as nccl-tests computes them).

Run one process per rank with torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT): python3 -m imagebuild.smoke.workers.torch_allreduce --backend gloo --out DIR
"""

from __future__ import annotations

import argparse
import os
import time

from . import exit_now, write_result
from ._dist import init, sync

CHECK_ELEMENTS = (1, 7, 1000, 65539)


def pattern(torch, n: int, dtype, rank: int, world: int, device):
    """Rank r holds (r+1)*((i % m)+1): integers small enough that every partial sum is exact."""
    m, scaled = _modulus(torch, dtype, world)
    i = torch.arange(n, dtype=torch.int64, device=device)
    base = (i % m) + 1
    vals = base * (rank + 1) if scaled else base
    return vals.to(dtype)


def expected(torch, n: int, dtype, world: int, device):
    m, scaled = _modulus(torch, dtype, world)
    i = torch.arange(n, dtype=torch.int64, device=device)
    base = (i % m) + 1
    factor = world * (world + 1) // 2 if scaled else world
    return (base * factor).to(dtype)


def _modulus(torch, dtype, world: int) -> tuple[int, bool]:
    weight = world * (world + 1) // 2
    if dtype == torch.bfloat16:  # 8 significant bits: keep every sum <= 256
        return (3, True) if 3 * weight <= 256 else (max(1, 256 // world), False)
    if dtype == torch.float16:
        return (3, True) if 3 * weight <= 2048 else (max(1, 2048 // world), False)
    if dtype == torch.float32:
        return 1024, True
    return 1 << 20, True


def check_dtype(torch, dist, dtype, rank, world, device) -> tuple[int, list[str]]:
    checked, errors = 0, []
    for n in CHECK_ELEMENTS:
        t = pattern(torch, n, dtype, rank, world, device)
        dist.all_reduce(t)
        want = expected(torch, n, dtype, world, device)
        bad = (t != want).nonzero()
        if bad.numel():
            j = int(bad[0].item())
            errors.append(f"{str(dtype).replace('torch.', '')} x{n}: {bad.numel()} wrong elements, "
                          f"first [{j}] = {t[j].item()!r}, expected {want[j].item()!r}")
        checked += n
    return checked, errors


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="gloo")
    ap.add_argument("--out", required=True)
    ap.add_argument("--sizes", default="8,64,512,4096,32768,262144,2097152", help="bytes, comma separated")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=120)
    args = ap.parse_args()

    import torch

    dist, device, rank, world = init(args.backend, args.timeout)
    errors: list[str] = []
    unsupported: list[str] = []
    checked = 0
    dtypes = [torch.float32, torch.float64, torch.int64, torch.bfloat16]
    for dtype in dtypes:
        try:
            n, errs = check_dtype(torch, dist, dtype, rank, world, device)
            checked += n
            errors += errs
        except (RuntimeError, TypeError) as exc:
            if dtype == torch.bfloat16:  # the only dtype a backend may lack
                unsupported.append(f"bfloat16: {str(exc).splitlines()[0][:160]}")
            else:
                errors.append(f"{dtype}: all_reduce raised {str(exc).splitlines()[0][:200]}")
    timings = {}
    for nbytes in (int(s) for s in args.sizes.split(",") if s):
        n = max(1, nbytes // 4)
        t = torch.ones(n, dtype=torch.float32, device=device)
        iters = args.iters if nbytes <= (1 << 22) else max(3, args.iters // 2)
        for _ in range(2):
            dist.all_reduce(t)
        sync(device)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        sync(device)
        took = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64, device=device)
        dist.all_reduce(took, op=dist.ReduceOp.MAX)  # the slowest rank sets the pace
        timings[str(n * 4)] = float(took.item())
    write_result(args.out, rank, {
        "rank": rank, "world": world, "backend": args.backend, "device": str(device),
        "errors": errors, "unsupported": unsupported, "checked": checked, "timings": timings,
        "dtypes": [str(d).replace("torch.", "") for d in dtypes], "host": os.uname().nodename})
    # every rank is past its last collective before any tears its sockets down: without this, a
    # loaded machine sometimes lets gloo abort a peer still finishing ("terminate called ...")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    exit_now(main())
