"""DistributedDataParallel equivalence: N ranks train the same small model for K steps.

After every step (1) the parameters are bit-identical on all ranks (all_gather, max abs
difference must be 0) and (2) they match a single-process model trained on the whole global batch
within a relative tolerance (max|ddp - single| / max|single|). On CUDA it also times a DDP step
against a plain single-GPU loop on the same per-rank batch.

Run with torchrun's environment: python3 -m imagebuild.smoke.workers.ddp --backend gloo --out DIR
"""

from __future__ import annotations

import argparse
import copy
import os
import time

from . import exit_now, write_result
from ._dist import init, sync

TOLERANCE = {"cpu": 1e-5, "cuda": 1e-4}  # relative, float32 (TF32 off on CUDA)


def make_model(torch, width: int, depth: int):
    layers = []
    size_in = 16
    for _ in range(depth):
        layers += [torch.nn.Linear(size_in, width), torch.nn.Tanh()]
        size_in = width
    layers.append(torch.nn.Linear(size_in, 4))
    return torch.nn.Sequential(*layers)


def flat(model):
    import torch

    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def time_steps(torch, model, opt, x, y, steps, device) -> float:
    loss_fn = torch.nn.MSELoss()
    for _ in range(3):  # warm-up
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()
    sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()
    sync(device)
    return (time.perf_counter() - start) / steps


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="gloo")
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=8, help="samples per rank")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--time-steps", type=int, default=0, help="also time this many steps (0: CUDA only, 20)")
    args = ap.parse_args()

    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist, device, rank, world = init(args.backend, args.timeout)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    tol = TOLERANCE[device.type]
    torch.manual_seed(1234)
    single = make_model(torch, 32, 2).to(device)
    model = copy.deepcopy(single)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    single_opt = torch.optim.SGD(single.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.MSELoss()
    data = torch.Generator().manual_seed(99)
    errors: list[str] = []
    worst_rank_diff, worst_rel = 0.0, 0.0
    b = args.batch
    for step in range(args.steps):
        x = torch.randn(world * b, 16, generator=data).to(device)
        y = torch.randn(world * b, 4, generator=data).to(device)
        opt.zero_grad(set_to_none=True)
        loss_fn(ddp(x[rank * b:(rank + 1) * b]), y[rank * b:(rank + 1) * b]).backward()
        opt.step()
        single_opt.zero_grad(set_to_none=True)
        loss_fn(single(x), y).backward()
        single_opt.step()
        mine = flat(model)
        gathered = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(gathered, mine)
        rank_diff = max(float((g - gathered[0]).abs().max().item()) for g in gathered)
        ref = flat(single)
        rel = float((mine - ref).abs().max().item() / max(ref.abs().max().item(), 1e-30))
        worst_rank_diff = max(worst_rank_diff, rank_diff)
        worst_rel = max(worst_rel, rel)
        if rank_diff != 0.0:
            errors.append(f"step {step + 1}: parameters differ between ranks (max abs diff {rank_diff:.3g})")
        if rel > tol:
            errors.append(f"step {step + 1}: DDP differs from the single-process run by {rel:.3g} "
                          f"relative (tolerance {tol:g})")
        if errors:
            break
    result = {"rank": rank, "world": world, "backend": args.backend, "device": str(device),
              "errors": errors, "steps": args.steps, "tolerance": tol, "max_rank_diff": worst_rank_diff,
              "max_rel_diff": worst_rel, "host": os.uname().nodename}
    timed = args.time_steps or (20 if device.type == "cuda" else 0)
    if timed and not errors:
        torch.manual_seed(7)
        width, depth, batch = (1024, 4, 256) if device.type == "cuda" else (256, 2, 64)
        big = make_model(torch, width, depth).to(device)
        x = torch.randn(batch, 16, device=device)
        y = torch.randn(batch, 4, device=device)
        plain = copy.deepcopy(big)
        big_ddp = DDP(big, device_ids=[device.index] if device.type == "cuda" else None)
        ddp_s = time_steps(torch, big_ddp, torch.optim.SGD(big_ddp.parameters(), lr=0.01), x, y, timed, device)
        dist.barrier()
        plain_s = time_steps(torch, plain, torch.optim.SGD(plain.parameters(), lr=0.01), x, y, timed, device)
        result.update({"ddp_step_s": ddp_s, "single_step_s": plain_s})
    write_result(args.out, rank, result)
    # every rank is past its last collective before any tears its sockets down: without this, a
    # loaded machine sometimes lets gloo abort a peer still finishing ("terminate called ...")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    exit_now(main())
