#!/usr/bin/env python3
"""What emulation costs: the same work for linux/arm64 under QEMU and natively, in one run.

    python benchmarks/bench_emulation.py [--repeat R] [--workdir DIR] [--mirror URL]
    python benchmarks/bench_emulation.py --image NAME [--ca-bundle FILE] [--sources DIR]

1. base: `imagebuild base debian-bookworm --force` natively (the anchor) and with
   `--platform linux/arm64` (debootstrap's second stage and every maintainer script under
   qemu-aarch64), each into a throwaway ref;
2. run: a shell loop of 2,000 `expr` processes in a container of each base (process start-up and
   small programs, what a smoke suite's shell and Python start-up cost), with the container's
   own start included.

With --image NAME (a matrix image declared for linux/amd64 and linux/arm64), instead:

3. build: `imagebuild build NAME --no-cache` natively (the anchor) and `--platform linux/arm64`
   (every RUN step under QEMU; both bases must exist), each image's whole build as `build`
   reports it, normalising included;
4. test: `imagebuild test NAME [--platform linux/arm64]`, the smoke suite's CPU tier.

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

from imagebuild.builder.emulation import PLATFORMS, check_emulation  # noqa: E402
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


def _cli(*argv: str) -> float:
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "imagebuild", *argv], cwd=ROOT, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise SystemExit(f"imagebuild {' '.join(argv)} failed: {proc.stderr.strip()[-800:]}")
    return time.perf_counter() - t


def image_mode(args, how: str) -> int:
    """Build and test one image natively and for linux/arm64, in this order, --repeat times."""
    extra = []
    if args.ca_bundle:
        extra += ["--ca-bundle", str(args.ca_bundle)]
    if args.sources:
        extra += ["--sources", str(args.sources)]
    times: dict[str, dict[str, list[float]]] = {p: {"build": [], "test": []}
                                                 for p in ("linux/amd64", "linux/arm64")}
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        for n in range(args.repeat):
            for p in times:                            # native first: the anchor
                plat = ["--platform", p]
                times[p]["build"].append(_cli("build", args.image, "--no-cache", "--quiet", *plat, *extra))
                times[p]["test"].append(_cli("test", args.image, "--quiet", *plat,
                                             "--report", f"{tmp}/{n}-{p.replace('/', '-')}.json"))
    print(f"emulation: {how}; image {args.image}; {args.repeat} run(s), medians")
    for what, label in (("build", "imagebuild build --no-cache"), ("test", "imagebuild test (CPU tier)")):
        native = statistics.median(times["linux/amd64"][what])
        arm = statistics.median(times["linux/arm64"][what])
        print(f"{label:<64} native {native:8.1f} s   arm64 {arm:8.1f} s   ratio {arm / native:6.2f}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--workdir", type=Path, default=Path(os.environ.get("TMPDIR", "/var/tmp")))
    ap.add_argument("--mirror")
    ap.add_argument("--image", help="build and test this matrix image natively and for linux/arm64")
    ap.add_argument("--ca-bundle", type=Path, help="for --image: the build's CA bundle")
    ap.add_argument("--sources", type=Path, help="for --image: the source tarballs' mirror folder")
    args = ap.parse_args()
    try:
        how = check_emulation(PLATFORMS["linux/arm64"])
    except ImagebuildError as exc:
        print(f"bench_emulation: {exc}", file=sys.stderr)
        return 3
    if args.image:
        return image_mode(args, how)
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
