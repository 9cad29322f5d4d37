"""nccl-tests' all_reduce_perf for the gpu tier: where the binary is, the arguments it runs with,
its output table parsed, and what makes a run wrong (wrong elements, a bus bandwidth that is not
algbw*2(n-1)/n). The check itself is checks.check_nccl_tests. Standard library only."""

from __future__ import annotations

import os
import re

from . import bandwidth, proc


NCCL_TESTS_ENV = "IMAGEBUILD_NCCL_TESTS"  # a folder holding all_reduce_perf, or the binary itself
NCCL_TESTS_DIRS = ("/opt/nccl-tests/bin",)  # where imagebuild's CUDA images install it
NCCL_TESTS_ARGS = ("-b", "8", "-e", "256M", "-f", "2")
NCCL_TESTS_SIZES = (8, 256 << 20, 2)  # the sizes those arguments ask for


def find_all_reduce_perf() -> tuple[str | None, str]:
    """(path, where it was found) or (None, why not); an explicit $IMAGEBUILD_NCCL_TESTS that
    holds no binary is reported as such (the caller fails on it rather than skipping)."""
    given = os.environ.get(NCCL_TESTS_ENV, "")
    if given:
        path = os.path.join(given, "all_reduce_perf") if os.path.isdir(given) else given
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path, f"${NCCL_TESTS_ENV}"
        return None, f"${NCCL_TESTS_ENV}={given}: no executable all_reduce_perf there"
    exe = proc.which("all_reduce_perf")
    if exe:
        return exe, "PATH"
    for folder in NCCL_TESTS_DIRS:
        path = os.path.join(folder, "all_reduce_perf")
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path, folder
    return None, (f"all_reduce_perf is not on PATH nor in {', '.join(NCCL_TESTS_DIRS)}, "
                  f"and ${NCCL_TESTS_ENV} is not set")


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def parse_nccl_tests(text: str) -> dict:
    """The result table and summary lines of an nccl-tests *_perf run (rank 0's output).

    rows: [{"size", "count", "type", "redop", "oop": {...}, "ip": {...}}], each side with time_us,
    algbw, busbw (GB/s) and wrong (None when the run did not verify: "N/A");
    out_of_bounds: (count, "OK"|"FAILED") or None; avg_busbw; devices (the "#  Rank N" lines);
    nccl_library: the version code nccl-tests read from the library (ncclGetVersion), or None.
    """
    rows: list[dict] = []
    found: dict = {"rows": rows, "out_of_bounds": None, "avg_busbw": None, "devices": 0, "nccl_library": None}
    for line in text.splitlines():
        m = re.match(r"#\s*Out of bounds values\s*:\s*(\d+)\s+(OK|FAILED)", line)
        if m:
            found["out_of_bounds"] = (int(m.group(1)), m.group(2))
            continue
        m = re.match(r"#\s*Avg bus bandwidth\s*:\s*(\S+)", line)
        if m:
            found["avg_busbw"] = _float(m.group(1))
            continue
        if re.match(r"#\s+Rank\s+\d+\s+Group\s+\d+", line):
            found["devices"] += 1
            continue
        m = re.search(r"nccl-library=(\d+)", line)
        if m and line.startswith("#"):
            found["nccl_library"] = int(m.group(1))
            continue
        tok = line.split()
        if line.lstrip().startswith("#") or len(tok) < 13 or not tok[0].isdigit() or not tok[1].isdigit():
            continue
        sides = []
        for part in (tok[5:9], tok[9:13]):
            time_us, algbw, busbw = (_float(x) for x in part[:3])
            wrong = None if part[3] == "N/A" else _float(part[3])
            if time_us is None or algbw is None or busbw is None or (wrong is None and part[3] != "N/A"):
                break
            sides.append({"time_us": time_us, "algbw": algbw, "busbw": busbw, "wrong": wrong})
        if len(sides) == 2:
            rows.append({"size": int(tok[0]), "count": int(tok[1]), "type": tok[2], "redop": tok[3],
                         "oop": sides[0], "ip": sides[1]})
    return found


def judge_nccl_tests(found: dict, ranks: int, sizes: list[int]) -> list[str]:
    """What is wrong with a parsed all_reduce_perf run of `ranks` ranks over `sizes` (empty: all good)."""
    errs: list[str] = []
    rows = found["rows"]
    if not rows:
        return ["no result table in the output"]
    got = [r["size"] for r in rows]
    if got != sizes:
        errs.append(f"table has sizes {bandwidth.human(got[0])}..{bandwidth.human(got[-1])} ({len(got)} rows), "
                    f"expected {bandwidth.human(sizes[0])}..{bandwidth.human(sizes[-1])} ({len(sizes)} rows)")
    if found["devices"] != ranks:
        errs.append(f"{found['devices']} rank(s) listed under '# Using devices', expected {ranks}")
    unverified = [bandwidth.human(r["size"]) for r in rows if r["oop"]["wrong"] is None or r["ip"]["wrong"] is None]
    if unverified:
        errs.append(f"results not verified (#wrong N/A) at {', '.join(unverified[:4])}")
    wrong = [f"{bandwidth.human(r['size'])}: {int((r['oop']['wrong'] or 0) + (r['ip']['wrong'] or 0))}"
             for r in rows if (r["oop"]["wrong"] or 0) + (r["ip"]["wrong"] or 0) > 0]
    if wrong:
        errs.append(f"wrong elements at {', '.join(wrong[:4])}")
    oob = found["out_of_bounds"]
    if oob is None:
        errs.append("no '# Out of bounds values' line")
    elif oob != (0, "OK"):
        errs.append(f"# Out of bounds values : {oob[0]} {oob[1]}")
    # busbw = algbw * 2(n-1)/n for all-reduce: a table that disagrees was not run on `ranks` ranks
    factor = 2.0 * (ranks - 1) / ranks
    off = [bandwidth.human(r["size"]) for r in rows for side in (r["oop"], r["ip"])
           if abs(side["busbw"] - side["algbw"] * factor) > 0.02 + 0.02 * side["busbw"]]
    if off:
        errs.append(f"busbw is not algbw*2(n-1)/n for {ranks} ranks at {', '.join(sorted(set(off))[:4])}")
    if ranks > 1 and rows[-1]["oop"]["busbw"] <= 0:
        errs.append(f"busbw 0 at {bandwidth.human(rows[-1]['size'])} with {ranks} ranks")
    return errs
