"""torch.distributed set-up shared by the torch workers (env:// as torchrun sets it)."""

from __future__ import annotations

import datetime
import os


def init(backend: str, timeout_s: float):
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if backend == "nccl":
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=max(int(timeout_s), 10)))
    return dist, device, rank, world


def sync(device) -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)
