#!/usr/bin/env python3
"""The cost of reproducible images: cold builds with and without the normalising step.

    python benchmarks/bench_reproducible.py [IMAGE] [--repeat R]

Runs `imagebuild build IMAGE --no-cache --json` R times with `--no-normalize` and R times
without it (alternating, so both see the same engine load), and prints per mode the build times
(median, min, max), the image ids and whether all ids of the mode are equal. The normalised
build's time includes the save, layer rewrite and load (imagebuild/builder/reproducible.py). IMAGE is
a matrix image (default smoke-cpu). Needs a Docker engine in DOCKER_HOST and the image's base.
Each build's step images (named in its log) are removed after it, the tagged image kept.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def drop_chain(log: Path, keep: set[str]) -> None:
    """Remove the step images one --no-cache build made (named in its log), untagged ones only:
    each cold build of smoke-cpu leaves about 3 GB otherwise."""
    import docker
    client = docker.from_env(timeout=600)
    ids = re.findall(r"^ ---> ([0-9a-f]{12})$", log.read_text(errors="replace"), re.MULTILINE)
    for short in reversed(ids):
        try:
            image = client.images.get(short)
            if image.id not in keep and not image.tags:
                client.images.remove(image.id)
        except Exception:  # noqa: BLE001 - gone already, or in use: leave it
            pass


def build(image: str, normalize: bool, logs: Path) -> tuple[float, str]:
    argv = [sys.executable, "-m", "imagebuild", "build", image, "--no-cache", "--json", "--quiet",
            "--log-dir", str(logs)]
    if not normalize:
        argv.append("--no-normalize")
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"bench_reproducible: build failed: {proc.stderr.strip().splitlines()[-1:]}")
    report = {r["image"]: r for r in json.loads(proc.stdout)["result"]}   # the --json envelope
    drop_chain(logs / f"{image}.log", {report[image]["image_id"]})
    return seconds, report[image]["image_id"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("image", nargs="?", default="smoke-cpu")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    runs: dict[str, list[tuple[float, str]]] = {"plain": [], "normalised": []}
    with tempfile.TemporaryDirectory(prefix="bench-reproducible-") as logs:
        for _ in range(args.repeat):
            runs["plain"].append(build(args.image, False, Path(logs)))
            runs["normalised"].append(build(args.image, True, Path(logs)))
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
