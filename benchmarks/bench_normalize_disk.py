#!/usr/bin/env python3
"""The disk a reproducible build needs: the peak drop of free space while one image is normalised.

    python benchmarks/bench_normalize_disk.py REF [--workdir DIR] [--interval S]

Normalises the engine's image REF in place (imagebuild/builder/reproducible.py: save, rewrite of each
layer above the base its label names, load) with the source date --epoch: give each run another
date to make it write new layers, as a build does (with the build's date an image normalised
already comes out with the same ID and the engine stores nothing new), while
a thread samples the free space of the file system that holds DIR (default: the system's
temporary folder); where the engine's data root is on that file system too, the drop counts the
engine's copies (the load's own scratch, the new layers) beside imagebuild's. Prints the
image's size (the anchor), the peak drop of free space and their ratio, the seconds, and the
image ID before and after. Needs a Docker engine in DOCKER_HOST holding REF. Run it with
PYTHONPATH pointing at another checkout to measure that checkout's normalising step.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path


def free(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ref")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--interval", type=float, default=0.1, help="seconds between samples")
    ap.add_argument("--epoch", type=int, default=1795219200, help="the source date, seconds since 1970 (default: 2026-11-21)")
    args = ap.parse_args()

    from imagebuild.engines import get_engine
    from imagebuild.builder.reproducible import normalize_image
    engine = get_engine("docker")
    before = engine.lookup(args.ref)
    if before is None:
        sys.exit(f"bench_normalize_disk: no image {args.ref} in the engine")
    where = str(args.workdir)
    start, peak = free(where), [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], start - free(where))
            time.sleep(args.interval)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    t0 = time.monotonic()
    # the base the build kept byte for byte (its label), so that only the image's own layers
    # are rewritten, as in `imagebuild build`
    base = before.labels.get("org.opencontainers.image.base.name")
    after = normalize_image(engine, args.ref, args.epoch, base=base, workdir=args.workdir)
    seconds = time.monotonic() - t0
    done.set()
    thread.join()
    size = before.size
    print(f"image {args.ref}: {size / 1e9:.2f} GB (anchor), {before.id[:19]} -> {after[:19]}, "
          f"normalised in {seconds:.1f} s")
    print(f"peak drop of free space on the file system of {where}: {peak[0] / 1e9:.2f} GB = "
          f"{peak[0] / size:.2f} x the image")
    return 0


if __name__ == "__main__":
    sys.exit(main())
