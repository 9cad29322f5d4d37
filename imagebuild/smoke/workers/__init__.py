"""Programs the checks start as ranks (under mpirun, torchrun, or as plain processes).

Each rank writes its own result as JSON into the folder given with ``--out`` (rank-<N>.json);
the check that started them reads every file back and decides. Standard library + torch/libmpi.
"""

from __future__ import annotations

import json
import os
import sys


def write_result(out_dir: str, rank: int, data: dict) -> None:
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"rank-{rank}.json")
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, sort_keys=True)
    os.replace(tmp, path)


def read_results(out_dir: str, ranks: int) -> dict[int, dict]:
    found = {}
    for rank in range(ranks):
        try:
            with open(os.path.join(out_dir, f"rank-{rank}.json"), encoding="utf-8") as fh:
                found[rank] = json.load(fh)
        except (OSError, ValueError):
            continue
    return found


def exit_now(code: int) -> None:
    """End a rank that has written its result, without the interpreter's teardown: gloo's threads
    may still be unwinding after destroy_process_group(), and on a loaded machine the C++ runtime
    then sometimes aborts the process at exit ("terminate called without an active exception"),
    turning a rank that passed into a failed one."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
