"""MPI all-reduce on doubles through ctypes on libmpi (no compiler, no mpi4py needed).

Open MPI's predefined handles are addresses of exported symbols: MPI_COMM_WORLD is
&ompi_mpi_comm_world, MPI_DOUBLE &ompi_mpi_double, MPI_SUM &ompi_mpi_op_sum.
Usage (under mpirun): python3 -m imagebuild.smoke.workers.mpi_allreduce --lib PATH --out DIR
"""

from __future__ import annotations

import argparse
import ctypes
import os
import time

from . import write_result

SIZES = (1, 7, 1000, 65539, 262147)  # elements (doubles): odd sizes catch chunking bugs


def value(rank: int, i: int) -> float:
    # small integers: every partial sum is exact in a double, whatever the reduction order
    return float((rank + 1) * ((i % 1024) + 1))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="libmpi.so.40")
    ap.add_argument("--out", required=True)
    ap.add_argument("--iters", type=int, default=5)
    args = ap.parse_args()

    lib = ctypes.CDLL(args.lib, mode=ctypes.RTLD_GLOBAL)  # global: Open MPI's plugins need it
    handle = lambda sym: ctypes.c_void_p(ctypes.addressof(ctypes.c_char.in_dll(lib, sym)))  # noqa: E731
    comm, dbl, op_sum = handle("ompi_mpi_comm_world"), handle("ompi_mpi_double"), handle("ompi_mpi_op_sum")
    lib.MPI_Allreduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                  ctypes.c_void_p, ctypes.c_void_p]
    if lib.MPI_Init(None, None) != 0:
        raise SystemExit("MPI_Init failed")
    rank, size = ctypes.c_int(), ctypes.c_int()
    lib.MPI_Comm_rank(comm, ctypes.byref(rank))
    lib.MPI_Comm_size(comm, ctypes.byref(size))
    r, n = rank.value, size.value
    weight = n * (n + 1) // 2
    errors, checked, timings = [], 0, {}
    for count in SIZES:
        send = (ctypes.c_double * count)(*[value(r, i) for i in range(count)])
        recv = (ctypes.c_double * count)()
        rc = lib.MPI_Allreduce(send, recv, count, dbl, op_sum, comm)
        if rc != 0:
            errors.append(f"MPI_Allreduce({count} doubles) returned {rc}")
            continue
        for i in range(count):
            want = float(weight * ((i % 1024) + 1))
            if recv[i] != want:
                errors.append(f"{count} doubles: element {i} is {recv[i]!r}, expected {want!r}")
                break
        checked += count
        lib.MPI_Barrier(comm)
        start = time.perf_counter()
        for _ in range(args.iters):
            lib.MPI_Allreduce(send, recv, count, dbl, op_sum, comm)
        timings[str(count * 8)] = (time.perf_counter() - start) / args.iters
    lib.MPI_Finalize()
    write_result(args.out, r, {"rank": r, "size": n, "errors": errors, "checked": checked,
                               "timings": timings, "host": os.uname().nodename})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
