#!/usr/bin/env python3
"""Resolver figures against anchors measured in the same run.

- process: a whole `imagebuild resolve` process vs a process that only loads matrix.yaml with PyYAML
  (yaml.safe_load, what a user's own script would do). Targets (issue 47): warm <= 0.7, cold
  <= 1.3. The validated knowledge (knowledge/cache.py) and the declared image's expansion
  (render/expandcache.py) are kept across processes in imagebuild's cache folder: "warm" runs use
  a private folder filled by one run first (every later run, until the matrix, a lock or
  imagebuild changes), "cold" an empty folder each time (a first run after a change).
- query: one resolve() on an already loaded knowledge base. Target: < 20 ms. (Repeated queries
  reuse the specifiers' verdicts, versions.Spec; the first query of a process is in "process".)
- enumerate: every consistent stack of the whole knowledge base (no host facts). Target: < 1 s.
Prints medians of N runs; each process row's ratio is the median of the ratios of each run to an
anchor run made just before it (the machine's speed drifts between rows). Run from the repository
root.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MATRIX = str(ROOT / "matrix.yaml")
N = int(sys.argv[1]) if len(sys.argv) > 1 else 15


CACHE = tempfile.mkdtemp(prefix="bench-resolve-cache-")     # the processes' cache folder


def wall(cmd: list[str], cache: str | None = None) -> float:
    # Python as users run it writes and reuses bytecode (a wheel install compiles it too): a shell
    # that sets PYTHONDONTWRITEBYTECODE would time compiling imagebuild's ~1 MB of source instead
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["XDG_CACHE_HOME"] = cache or CACHE
    t = time.perf_counter()
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT,
                   env=env)
    return time.perf_counter() - t


def cold(cmd: list[str]) -> float:
    """`cmd` with an empty cache folder: what a first run after a change costs."""
    with tempfile.TemporaryDirectory(prefix="bench-resolve-cold-") as folder:
        return wall(cmd, folder)


def median(f, n=N) -> float:
    return statistics.median(f() for _ in range(n))


ANCHORS: list[float] = []       # every anchor run of the process rows


def paired(anchor, f, n=N) -> tuple[float, float]:
    """(median seconds of `f`, median of the ratios of `f` to the anchor run just before it): the
    machine's speed drifts over a run of minutes, and a ratio of two runs made side by side
    drifts far less than a ratio of two medians taken minutes apart."""
    times, ratios = [], []
    for _ in range(n):
        a = anchor()
        t = f()
        ANCHORS.append(a)
        times.append(t)
        ratios.append(t / a)
    return statistics.median(times), statistics.median(ratios)


def main() -> None:
    py = sys.executable
    load = [py, "-c", f"import yaml; yaml.safe_load(open({MATRIX!r}))"]
    anchor = lambda: wall(load)                                       # noqa: E731
    anchor_cload = median(lambda: wall([py, "-c", "import yaml; yaml.load(open(%r), Loader=yaml.CSafeLoader)" % MATRIX]))
    query = [py, "-m", "imagebuild", "resolve", "--driver", "535.104.05", "--gpu", "H100",
             "--torch", ">=2.4"]
    wall(query)                                   # fills the cache folder, as any first run does
    proc = paired(anchor, lambda: wall(query))
    proc_json = paired(anchor, lambda: wall(query + ["--json"]))
    proc_cold = paired(anchor, lambda: cold(query))
    proc_fail = paired(anchor, lambda: wall([py, "-m", "imagebuild", "resolve", "--driver", "470.82.01",
                                             "--gpu", "A100", "--why-not", "torch==2.9.1"]), max(3, N // 3))
    proc_sys = paired(anchor, lambda: wall([py, "-m", "imagebuild", "resolve", "--driver", "580.95.05",
                                            "--gpu", "H100", "--system-cudnn", "8.9.7", "--system-nccl", "2.18.3"]),
                      max(3, N // 3))
    proc_all = paired(anchor, lambda: wall([py, "-m", "imagebuild", "resolve", "--all"]), max(3, N // 3))
    # the longest explanation known: every torch release rules itself out on an aarch64 host
    # R520: no torch build runs on a Grace node (R550 got one once 2.10's aarch64 builds were known)
    proc_arm = paired(anchor, lambda: wall([py, "-m", "imagebuild", "resolve", "--driver", "520.61.05",
                                            "--gpu", "GH200", "--torch", ">=2.0"]), 3)
    anchor_load = statistics.median(ANCHORS)

    sys.path.insert(0, str(ROOT))
    from imagebuild import knowledge
    from imagebuild.resolve import solver as R
    k = knowledge.load(MATRIX)
    R.resolve(k, R.Host(driver="535.104.05", gpu="H100"), {})  # compile once, as a process does
    hosts = [(R.Host(driver="535.104.05", gpu="H100"), {"pytorch": ">=2.4"}),
             (R.Host(driver="580.95.05", gpu="B200"), {}),
             (R.Host(driver="550.54.15", gpu="A100"), {"cuda": "12.4"}),
             (R.Host(driver="470.82.01", gpu="A100"), {"pytorch": "2.9"})]
    per_query = {}
    for host, wishes in hosts:
        t = median(lambda: _time(lambda: R.resolve(k, host, wishes)), 25)
        per_query[f"{host.driver}/{host.gpu} {wishes or ''}"] = t
    system = {"cudnn": "8.9.7", "nccl": "2.18.3"}      # an NGC-style machine's own libraries
    host = R.Host(driver="580.95.05", gpu="H100")
    per_query["580.95.05/H100 system cuDNN 8.9.7, NCCL 2.18.3"] = median(
        lambda: _time(lambda: R.resolve(k, host, {}, system=system)), 25)
    load_in = median(lambda: _time(lambda: knowledge.load(MATRIX)), 10)     # from the cache
    os.environ["IMAGEBUILD_NO_CACHE"] = "1"
    load_full = median(lambda: _time(lambda: knowledge.load(MATRIX)), 10)   # read and validated
    del os.environ["IMAGEBUILD_NO_CACHE"]
    enum = median(lambda: _time(lambda: R.enumerate_stacks(k, R.Host())), 5)
    groups = R.enumerate_stacks(k, R.Host())
    count = sum(len(g.tails) for g in groups)

    print(f"anchor  process: python + yaml.safe_load(matrix.yaml)     {anchor_load*1000:8.1f} ms"
          f"  (median of {len(ANCHORS)} runs, one before each run below)")
    print(f"        (same with the C loader, for reference)            {anchor_cload*1000:8.1f} ms")
    rows = [("imagebuild resolve, warm (a stack found)", proc, "(target <= 0.7)"),
            ("imagebuild resolve --json, warm", proc_json, "(target <= 0.7)"),
            ("imagebuild resolve, cold (empty cache folder)", proc_cold, "(target <= 1.3)"),
            ("imagebuild resolve --why-not (no stack, chain)", proc_fail, ""),
            ("imagebuild resolve --system-cudnn --system-nccl", proc_sys, "(target <= 2)"),
            ("imagebuild resolve --all (whole table)", proc_all, ""),
            ("imagebuild resolve, no stack on GH200/R520 (60-line chain)", proc_arm, "")]
    for label, (t, ratio), target in rows:
        print(f"process {label:<58} {t*1000:8.1f} ms  ratio {ratio:5.2f}  {target}".rstrip())
    print(f"in-process load + validate + compile of matrix.yaml       {load_full*1000:8.1f} ms")
    print(f"in-process load from the knowledge cache                  {load_in*1000:8.1f} ms")
    for label, t in per_query.items():
        print(f"query   {label:<48} {t*1000:8.2f} ms  (target < 20 ms)")
    print(f"enumerate every consistent stack ({count} stacks, {len(groups)} groups)  {enum*1000:8.1f} ms  (target < 1000 ms)")


def _time(f) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


if __name__ == "__main__":
    try:
        main()
    finally:
        shutil.rmtree(CACHE, ignore_errors=True)
