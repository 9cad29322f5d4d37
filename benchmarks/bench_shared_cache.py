#!/usr/bin/env python3
"""What the registry's shared layer cache saves a second builder, in one run.

    python benchmarks/bench_shared_cache.py [IMAGE] [--sources DIR] [--ca-bundle FILE]

1. the anchor: `imagebuild build IMAGE --no-cache --cache-to HOST/cache` on the session's engine
   (DOCKER_HOST): a cold build (every step anew) that pushes the image's cache to a local
   registry started for the run;
2. `imagebuild build IMAGE --cache-from HOST/cache` on a second, empty engine (its own data root,
   socket and bridge, no way out to the network; tests/second_engine.py) holding only the base
   image: every step from the registry's cache, then normalised.

Prints both times, the ratio (target: under 10 % for an image whose lower layers are cached), and
whether both engines gave the same image ID. IMAGE defaults to smoke-cpu. Needs root, dockerd,
iproute2, docker-registry, a Docker engine in DOCKER_HOST with the base image.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from second_engine import copy_image, second_engine  # noqa: E402

BASE = "imagebuild/base:debian-bookworm"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _build(image: str, extra: list[str], host: str, workdir: Path, name: str) -> tuple[float, str]:
    env = dict(os.environ, DOCKER_HOST=host, XDG_CACHE_HOME=str(workdir / f"xdg-{name}"))
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "imagebuild", "build", image, "--json", "--quiet",
                           "--output", str(workdir / f"build-{name}"), "--log-dir", str(workdir / f"logs-{name}"),
                           *extra], cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t
    if proc.returncode != 0:
        sys.exit(f"bench_shared_cache: the {name} build failed: {proc.stderr.strip()[-600:]}")
    rows = json.loads(proc.stdout)["result"]
    (row,) = [r for r in rows if r["image"] == image]
    return seconds, row["image_id"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("image", nargs="?", default="smoke-cpu")
    parser.add_argument("--sources")
    parser.add_argument("--ca-bundle")
    args = parser.parse_args()
    first_host = os.environ.get("DOCKER_HOST")
    if not first_host or not shutil.which("docker-registry"):
        sys.exit("bench_shared_cache: needs DOCKER_HOST (the session's engine) and docker-registry")
    extra = [*(["--sources", args.sources] if args.sources else []),
             *(["--ca-bundle", args.ca_bundle] if args.ca_bundle else [])]
    with tempfile.TemporaryDirectory(prefix="bench-shared-cache-", dir="/var/tmp") as tmp:
        work = Path(tmp)
        port = _port()
        (work / "registry.yml").write_text(
            f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {work / 'reg'}\n"
            f"http:\n  addr: 127.0.0.1:{port}\n")
        registry = subprocess.Popen(["docker-registry", "serve", str(work / "registry.yml")],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(2)
            prefix = f"127.0.0.1:{port}/cache"
            cold, id1 = _build(args.image, ["--no-cache", "--cache-to", prefix, *extra], first_host, work, "cold")
            with second_engine(work / "engine2") as host2:
                copy_image(BASE, first_host, host2)
                warm, id2 = _build(args.image, ["--cache-from", prefix, *extra], host2, work, "shared")
        finally:
            registry.terminate()
            registry.wait()
    print(f"anchor  cold build of {args.image} on engine 1, pushing its cache   {cold:8.1f} s")
    print(f"        build on an empty engine 2 from the registry's cache      {warm:8.1f} s"
          f"  ratio {warm / cold:5.2f}  (target < 0.10)")
    print(f"        same image ID on both engines: {id1 == id2} ({id1[:19]})")


if __name__ == "__main__":
    main()
