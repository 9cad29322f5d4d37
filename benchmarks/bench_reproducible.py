#!/usr/bin/env python3
"""The cost of reproducible images: cold builds with and without the normalising step.

    python benchmarks/bench_reproducible.py [IMAGE] [--repeat R]

Runs `imagebuild build IMAGE --no-cache --json` R times with `--no-normalize` and R times
without it (alternating, so both see the same engine load), and prints per mode the build times
(median, min, max), the image ids and whether all ids of the mode are equal. The normalised
build's time includes the save, layer rewrite and load (imagebuild/reproducible.py). IMAGE is
a matrix image (default smoke-cpu). Needs a Docker engine in DOCKER_HOST and the image's base.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build(image: str, normalize: bool) -> tuple[float, str]:
    argv = [sys.executable, "-m", "imagebuild", "build", image, "--no-cache", "--json", "--quiet"]
    if not normalize:
        argv.append("--no-normalize")
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"bench_reproducible: build failed: {proc.stderr.strip().splitlines()[-1:]}")
    report = {r["image"]: r for r in json.loads(proc.stdout)}
    return seconds, report[image]["image_id"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("image", nargs="?", default="smoke-cpu")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    runs: dict[str, list[tuple[float, str]]] = {"plain": [], "normalised": []}
    for _ in range(args.repeat):
        runs["plain"].append(build(args.image, False))
        runs["normalised"].append(build(args.image, True))
    for mode, results in runs.items():
        times = [t for t, _ in results]
        ids = [i for _, i in results]
        print(f"{args.image} {mode}: median {statistics.median(times):.1f} s "
              f"(min {min(times):.1f}, max {max(times):.1f}, n={len(times)}); "
              f"ids {', '.join(i[7:19] for i in ids)}; identical: {'yes' if len(set(ids)) == 1 else 'no'}")
    plain = statistics.median(t for t, _ in runs["plain"])
    norm = statistics.median(t for t, _ in runs["normalised"])
    print(f"{args.image}: reproducibility costs {norm - plain:+.1f} s ({(norm / plain - 1) * 100:+.0f}%) per cold build")
    return 0


if __name__ == "__main__":
    sys.exit(main())
