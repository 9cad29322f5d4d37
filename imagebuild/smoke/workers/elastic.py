"""Elastic training: a worker of a `torchrun --max-restarts 1` job that kills itself once.

Every rank trains the same small model with DDP (gloo, CPU) for --steps SGD steps (momentum, so
the optimizer's state matters); after each step rank 0 writes a checkpoint (model, optimizer,
step) to --ckpt atomically, and all ranks meet at a barrier. At step --kill-at the rank
--kill-rank looks for the marker file (IMAGEBUILD_ELASTIC_MARKER): when it does not exist yet, the
worker creates it and sends itself SIGKILL. torchrun's agent then stops the other worker and
starts the group again (TORCHELASTIC_RESTART_COUNT 1); the new workers resume from the
checkpoint. At the end rank 0 trains the same model in this one process, uninterrupted, on the
same global batches (the mean of the two ranks' gradients, as DDP computes it) and writes the
largest difference of the final parameters, with the restart count and the step it resumed at.

Run under torchrun: python3 -m torch.distributed.run --standalone --nproc-per-node 2
--max-restarts 1 -m imagebuild.smoke.workers.elastic --out DIR --ckpt FILE --steps N --kill-at K
"""

from __future__ import annotations

import argparse
import os
import signal

from . import ddp as ddp_worker, exit_now, write_result

TOLERANCE = 1e-6  # relative, float32 on CPU: the same operations in the same order
MARKER_ENV = "IMAGEBUILD_ELASTIC_MARKER"


def make_model(torch):
    torch.manual_seed(4321)
    return ddp_worker.make_model(torch, 32, 1)  # Linear(16, 32), Tanh, Linear(32, 4)


def batch(torch, step: int, rank: int, size: int):
    """The batch of one rank at one step: the same on the first run and after a restart."""
    gen = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(size, 16, generator=gen), torch.randn(size, 4, generator=gen)


def save(torch, path: str, step: int, model, opt) -> None:
    tmp = path + ".tmp"
    torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, tmp)
    os.replace(tmp, path)


def reference(torch, steps: int, world: int, size: int):
    """The same training in one process, never interrupted."""
    model = make_model(torch)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.MSELoss()
    for step in range(steps):
        grads = None
        for rank in range(world):
            x, y = batch(torch, step, rank, size)
            model.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            mine = [p.grad.detach().clone() for p in model.parameters()]
            grads = mine if grads is None else [g + m for g, m in zip(grads, mine)]
        for p, g in zip(model.parameters(), grads):
            p.grad = g / world
        opt.step()
    return ddp_worker.flat(model)


def init_group(torch, timeout_s: float, restarts: int):
    """The process group of this attempt, on a store prefix of its own. torchrun (with its agent's
    store, TORCHELASTIC_USE_AGENT_STORE) keeps one store across restarts, and env:// would read the
    previous attempt's gloo addresses from it: the restarted workers then fail to connect
    ("Connection refused", pytorch/pytorch#167288)."""
    import datetime

    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    timeout = datetime.timedelta(seconds=max(int(timeout_s), 10))
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                          is_master=not agent and rank == 0, timeout=timeout)
    store = dist.PrefixStore(f"imagebuild-elastic/attempt-{restarts}", store)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)
    return dist, rank, world


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--kill-at", type=int, default=3)
    ap.add_argument("--kill-rank", type=int, default=1)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=120)
    args = ap.parse_args()

    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    dist, rank, world = init_group(torch, args.timeout, restarts)
    model = make_model(torch)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start = 0
    if os.path.exists(args.ckpt):
        state = torch.load(args.ckpt, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = int(state["step"]) + 1
    ddp = DDP(model)
    loss_fn = torch.nn.MSELoss()
    marker = os.environ.get(MARKER_ENV, "")
    for step in range(start, args.steps):
        if step == args.kill_at and rank == args.kill_rank and marker and not os.path.exists(marker):
            with open(marker, "w", encoding="utf-8") as fh:
                fh.write(f"rank {rank} killed itself at step {step}\n")
            os.kill(os.getpid(), signal.SIGKILL)
        x, y = batch(torch, step, rank, args.batch)
        opt.zero_grad(set_to_none=True)
        loss_fn(ddp(x), y).backward()
        opt.step()
        if rank == 0:
            save(torch, args.ckpt, step, model, opt)
        dist.barrier()  # the checkpoint of this step exists before any rank goes on

    final = ddp_worker.flat(model)
    gathered = [torch.empty_like(final) for _ in range(world)]
    dist.all_gather(gathered, final)
    result = {"rank": rank, "world": world, "steps": args.steps, "restart_count": restarts,
              "resumed_at": start, "kill_at": args.kill_at, "tolerance": TOLERANCE, "errors": [],
              "max_rank_diff": max(float((g - gathered[0]).abs().max().item()) for g in gathered)}
    if rank == 0:
        ref = reference(torch, args.steps, world, args.batch)
        result["max_rel_diff"] = float((final - ref).abs().max().item()
                                       / max(ref.abs().max().item(), 1e-30))
        if result["max_rel_diff"] > TOLERANCE:
            result["errors"].append(f"final parameters differ from an uninterrupted run by "
                                    f"{result['max_rel_diff']:.3g} relative (tolerance {TOLERANCE:g})")
    if result["max_rank_diff"] != 0.0:
        result["errors"].append(f"final parameters differ between ranks (max abs diff "
                                f"{result['max_rank_diff']:.3g})")
    write_result(args.out, rank, result)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    exit_now(main())
