#!/usr/bin/env python3
"""What emulation costs: the same work for linux/arm64 under QEMU and natively, in one run.

    python benchmarks/bench_emulation.py [--repeat R] [--workdir DIR] [--mirror URL]

1. base: `imagebuild base debian-bookworm --force` natively (the anchor) and with
   `--platform linux/arm64` (debootstrap's second stage and every maintainer script under
   qemu-aarch64), each into a throwaway ref;
2. run: a shell loop of 2,000 `expr` processes in a container of each base (process start-up and
   small programs, what a smoke suite's shell and Python start-up cost), with the container's
   own start included.

Prints the median seconds of each and the ratio emulated / native. Needs root, debootstrap, a
Docker engine in DOCKER_HOST, binfmt_misc and qemu-user-static (checked first, one line).
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from imagebuild.build.emulation import PLATFORMS, check_emulation  # noqa: E402
from imagebuild.engines import get_engine  # noqa: E402
from imagebuild.errors import ImagebuildError  # noqa: E402

LOOP = "i=0; while [ $i -lt 2000 ]; do i=$(expr $i + 1); done; echo $i"


def _base(ref: str, platform: str, workdir: Path, mirror: str | None) -> float:
    argv = [sys.executable, "-m", "imagebuild", "base", "debian-bookworm", "--force", "--quiet",
            "--ref", ref, "--platform", platform, "--workdir", str(workdir),
            "--log", str(workdir / f"{platform.replace('/', '-')}.log")]
    if mirror:
        argv += ["--mirror", mirror]
    t = time.perf_counter()
    subprocess.run(argv, check=True, cwd=ROOT)
    return time.perf_counter() - t


def _run(engine, ref: str) -> float:
    t = time.perf_counter()
    out = engine.run(ref, ["sh", "-c", LOOP], timeout=3600)
    took = time.perf_counter() - t
    if not out.ok or out.output.strip() != "2000":
        raise SystemExit(f"{ref}: the loop failed: {out.output[-500:]}")
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--workdir", type=Path, default=Path(os.environ.get("TMPDIR", "/var/tmp")))
    ap.add_argument("--mirror")
    args = ap.parse_args()
    try:
        how = check_emulation(PLATFORMS["linux/arm64"])
    except ImagebuildError as exc:
        print(f"bench_emulation: {exc}", file=sys.stderr)
        return 3
    engine = get_engine("docker")
    tag = secrets.token_hex(4)
    refs = {p: f"imagebuild/bench-base-{p.split('/')[1]}:{tag}" for p in ("linux/amd64", "linux/arm64")}
    times: dict[str, dict[str, list[float]]] = {p: {"base": [], "run": []} for p in refs}
    try:
        with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
            for _ in range(args.repeat):
                for p, ref in refs.items():           # native first: the anchor
                    times[p]["base"].append(_base(ref, p, Path(tmp), args.mirror))
                    times[p]["run"].append(_run(engine, ref))
    finally:
        for ref in refs.values():
            if engine.exists(ref):
                engine.remove(ref, force=True)
    print(f"emulation: {how}; {args.repeat} run(s), medians")
    for what, label in (("base", "imagebuild base debian-bookworm (debootstrap, normalise, load)"),
                        ("run", "2,000 expr processes in a container")):
        native = statistics.median(times["linux/amd64"][what])
        arm = statistics.median(times["linux/arm64"][what])
        print(f"{label:<64} native {native:8.1f} s   arm64 {arm:8.1f} s   ratio {arm / native:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
