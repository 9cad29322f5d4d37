"""Collective bandwidth as nccl-tests reports it (see its doc/PERFORMANCE.md).

algbw = bytes / time. busbw corrects algbw by the traffic the algorithm must move per rank, so
it can be compared with the hardware's peak whatever the rank count; for all-reduce the factor
is 2*(n-1)/n (a reduce-scatter then an all-gather, each moving (n-1)/n of the data).
"""

from __future__ import annotations


def algbw(nbytes: int, seconds: float) -> float:
    """Algorithm bandwidth in bytes per second."""
    if seconds <= 0:
        raise ValueError(f"time must be positive, not {seconds}")
    if nbytes < 0:
        raise ValueError(f"size must not be negative, not {nbytes}")
    return nbytes / seconds


def allreduce_bus_factor(ranks: int) -> float:
    if ranks < 1:
        raise ValueError(f"ranks must be at least 1, not {ranks}")
    return 2.0 * (ranks - 1) / ranks


def busbw(nbytes: int, seconds: float, ranks: int) -> float:
    """Bus bandwidth of an all-reduce in bytes per second."""
    return algbw(nbytes, seconds) * allreduce_bus_factor(ranks)


def sizes(lo: int, hi: int, factor: int = 2) -> list[int]:
    """Message sizes lo, lo*factor, ... up to hi inclusive (nccl-tests' -b/-e/-f)."""
    if lo < 1 or hi < lo or factor < 2:
        raise ValueError(f"bad size range {lo}..{hi} by {factor}")
    out, size = [], lo
    while size <= hi:
        out.append(size)
        size *= factor
    return out


def human(nbytes: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return f"{nbytes}B"
