#!/usr/bin/env python3
"""How even and how stable `--shard K/N` is, against a split by list position in the same run.

    python benchmarks/bench_shards.py [--matrix matrix.yaml]

For N = 2, 4 and 8 builders, over the matrix's FROM chains (build/shards.py):
- balance: the heaviest shard's weight over the average (1.00 is perfect);
- stability: when one chain is removed (as adding one is, seen from the other side), how many of
  the others change shard; mean and worst over every chain removed in turn.
The anchor is the naive split a site would write by hand: chains sorted by id, dealt round-robin
by position. Pure computation: no engine, seconds to run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from imagebuild.builder import shards  # noqa: E402
from imagebuild.knowledge import load  # noqa: E402
from imagebuild.render.images import expand  # noqa: E402


def by_position(chains, n):
    return {c.root: i % n + 1 for i, c in enumerate(sorted(chains, key=lambda c: c.root))}


def measure(assign, chains, n):
    base = assign(chains, n)
    load = dict.fromkeys(range(1, n + 1), 0)
    for c in chains:
        load[base[c.root]] += c.weight
    balance = max(load.values()) / (sum(load.values()) / n)
    moved = []
    for drop in chains:
        rest = [c for c in chains if c is not drop]
        after = assign(rest, n)
        moved.append(sum(1 for c in rest if after[c.root] != base[c.root]))
    return balance, statistics.mean(moved), max(moved)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--matrix", default=str(ROOT / "matrix.yaml"))
    args = ap.parse_args()
    k = load(args.matrix)
    specs = {s.id: s for s in expand(k)[0]}
    chains = shards.chains(k, specs)
    print(f"{len(specs)} images in {len(chains)} FROM chains, total weight {sum(c.weight for c in chains)}")
    print(f"{'N':>2}  {'method':<22} {'max/avg':>8} {'moved (mean)':>13} {'moved (worst)':>14}")
    for n in (2, 4, 8):
        for name, fn in (("by position (anchor)", by_position), ("--shard (hashed)", shards.assign)):
            balance, mean, worst = measure(fn, chains, n)
            print(f"{n:>2}  {name:<22} {balance:8.2f} {mean:13.1f} {worst:14d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
