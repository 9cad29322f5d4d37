#!/usr/bin/env python3
"""The communication image's cold build, before and after a change to what it builds.

    python benchmarks/bench_comms_build.py --baseline REV [--image ID] [--sources DIR]
                                           [--ca-bundle FILE] [--order base-first|new-first] [--keep]

Builds IMAGE (default: the Debian communication image, built from the package registries: Debian's
UCX and Open MPI, NVIDIA's wheels, imagebuild's NCCL benchmark compiled in a build stage) cold twice
on the engine in DOCKER_HOST, one build after the other in the same run: once with the code and
matrix of git revision REV (the anchor; a temporary worktree, so its renderer and recipes are REV's
own) and once with this checkout's. Each build is `imagebuild build IMAGE --no-cache --json` with
the site's CA bundle for the package index (and, for a site image that compiles upstream tarballs,
--sources: its mirror folder). Prints, per build, the wall time of the whole command and of each
RUN step of a build stage (BuildKit's own step times, from the build log), the image ID and size,
and the ratio of the new build to the anchor. The images and the build cache the two builds made
are removed afterwards; with --keep (and the default order, so the new build comes last) the new
build's image stays, e.g. for benchmarks/gpu_proof.sh pack.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from anchor import loop_seconds  # noqa: E402  (the machine's speed anchor, printed beside)

IMAGE = "comms-cu130-nccl2.30.7-debian12-runtime"
# a RUN step of a build stage (not the image's own, unnamed stage): `#12 [nccl-bench 5/6] RUN ...`
STEP_RE = re.compile(r"^#(\d+) \[([a-z][a-z0-9-]*) +(\d+)/\d+\] RUN ", re.MULTILINE)
# what a compiled step compiles: an upstream tarball's name, or imagebuild's own benchmark
WHAT_RE = re.compile(r"(gdrcopy|ucx|openmpi|nccl-tests)-[0-9.]+(?:-git)?\.tar\.(?:gz|bz2)|(nccl_bw\.c)")


def step_seconds(log: str) -> dict[str, float]:
    """The seconds BuildKit gives each RUN step of a build stage (`#N DONE 123.4s`), by what it
    compiles (a tarball's component, nccl-bench), else by stage and step number."""
    out = {}
    for m in STEP_RE.finditer(log):
        number, stage, step = m.groups()
        line = log[m.start():log.find("\n", m.start())]
        what = WHAT_RE.search(line)
        name = (what.group(1) or "nccl-bench") if what else f"{stage} step {step}"
        done = re.search(rf"^#{number} DONE ([0-9.]+)s$", log, re.MULTILINE)
        if done:
            out[name] = float(done.group(1))
    return out


def build(code_root: Path, image: str, sources: Path | None, ca_bundle: Path, work: Path) -> dict:
    logs, out = work / "logs", work / "out"
    argv = [sys.executable, "-m", "imagebuild", "build", image, "--no-cache", "--json", "--quiet",
            "--matrix", str(code_root / "matrix.yaml"), *(["--sources", str(sources)] if sources else []),
            "--ca-bundle", str(ca_bundle), "--log-dir", str(logs), "--output", str(out)]
    env = dict(os.environ, PYTHONPATH=str(code_root))
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=code_root, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"bench_comms_build: the build in {code_root} failed: "
                 f"{(proc.stderr.strip().splitlines() or ['?'])[-1]} (log: {logs / (image + '.log')})")
    (row,) = [r for r in json.loads(proc.stdout)["result"] if r["image"] == image]   # the --json envelope
    log = (logs / f"{image}.log").read_text(errors="replace")
    return {"seconds": seconds, "image_id": row["image_id"], "ref": row["ref"], "steps": step_seconds(log)}


def size_mb(ref: str) -> float:
    import docker
    return docker.from_env(timeout=600).images.get(ref).attrs["Size"] / 1e6


def cleanup(refs: list[str]) -> None:
    import docker
    client = docker.from_env(timeout=600)
    for ref in refs:
        try:
            client.images.remove(ref, force=True)
        except Exception:  # noqa: BLE001 - gone already
            pass
    client.api.prune_builds()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", required=True, metavar="REV", help="the git revision to compare with")
    ap.add_argument("--image", default=IMAGE)
    ap.add_argument("--sources", type=Path, default=None,
                    help="a mirror of the source tarballs a site image compiles (the default image compiles none)")
    ap.add_argument("--ca-bundle", type=Path, default=Path("/etc/ssl/certs/ca-certificates.crt"))
    ap.add_argument("--order", choices=("base-first", "new-first"), default="base-first")
    ap.add_argument("--keep", action="store_true", help="keep the new build's image (base-first only)")
    args = ap.parse_args()
    if args.keep and args.order != "base-first":
        ap.error("--keep needs --order base-first: both builds tag the same reference")
    rev = subprocess.run(["git", "rev-parse", "--short", args.baseline], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.strip()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.strip())
    print(f"speed anchor: {loop_seconds():.2f} s (CPython loop, benchmarks/anchor.py)")
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-comms-") as tmp:
        tree = Path(tmp) / "baseline"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(tree), rev], cwd=ROOT, check=True)
        try:
            runs = [("anchor", tree), ("new", ROOT)]
            if args.order == "new-first":
                runs.reverse()
            for name, code_root in runs:
                print(f"building {args.image} cold with {'rev ' + rev if name == 'anchor' else 'this checkout'} ...",
                      flush=True)
                results[name] = build(code_root, args.image, args.sources.resolve() if args.sources else None,
                                      args.ca_bundle,
                                      Path(tmp) / name)
                results[name]["size_mb"] = size_mb(results[name]["ref"])
                if not (args.keep and name == "new"):
                    cleanup([results[name]["ref"]])
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
    a, n = results["anchor"], results["new"]
    print(f"\n{args.image}, cold (--no-cache), {args.order}")
    print(f"{'':28} {'anchor: ' + rev:>16} {'new: ' + head + ('+' if dirty else ''):>16} {'ratio':>7}")
    print(f"{'imagebuild build, wall':28} {a['seconds']:14.1f} s {n['seconds']:14.1f} s {n['seconds'] / a['seconds']:7.3f}")
    for step in sorted(set(a["steps"]) | set(n["steps"])):
        sa, sn = a["steps"].get(step), n["steps"].get(step)
        cells = [f"{sa:14.1f} s" if sa else f"{'-':>16}", f"{sn:14.1f} s" if sn else f"{'-':>16}"]
        ratio = f"{sn / sa:7.3f}" if sa and sn else f"{'':7}"
        print(f"{'  step ' + step:28} {cells[0]} {cells[1]} {ratio}")
    print(f"{'image size':28} {a['size_mb']:13.1f} MB {n['size_mb']:13.1f} MB {n['size_mb'] / a['size_mb']:7.3f}")
    print(f"image IDs: anchor {a['image_id'][:19]}, new {n['image_id'][:19]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
