"""The machine's speed anchor: seconds CPython takes for `for i in range(20_000_000): s += i`,
the median of three. Printed at the start of every test run (scripts/test) and beside every CI
time in docs/benchmarks.md, so that a slower machine is told apart from a heavier suite: compare
CI seconds divided by this figure."""

from __future__ import annotations

import platform
import statistics
import time


def loop_seconds() -> float:
    start = time.perf_counter()
    s = 0
    for i in range(20_000_000):
        s += i
    return time.perf_counter() - start


def main() -> None:
    runs = [loop_seconds() for _ in range(3)]
    print(f"speed anchor: {statistics.median(runs):.2f} s for 20,000,000 CPython loop steps "
          f"(median of {', '.join(f'{r:.2f}' for r in runs)}; Python {platform.python_version()}, "
          f"{platform.machine()})")


if __name__ == "__main__":
    main()
