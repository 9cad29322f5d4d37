"""The driver-upgrade day's wall time (issue 46), as ratios against an anchor measured in the same run.

Two days, each planned by `imagebuild upgrade --dry-run` in its own process against a lock written
from the matrix's own rendered recipes (what `imagebuild lock` records), with publish records:

- driver only (570.172.08 -> 580.95.05 with every image built and published): the day is the plan
  alone, nothing to build;
- a driver that unlocks CUDA 13 (the same upgrade, with only the images that ran on 570 built and
  published): the day builds the newly usable ones.

The anchor is a Python process that only parses matrix.yaml with yaml.safe_load. The build time
of the unlocking day is estimated, not measured (no CUDA image is built in a benchmark on these
machines): each FROM chain at the cold-build times given (defaults: the figures docs/benchmarks.md
records for a communication runtime, 611.9 s, and its devel, 28.9 s), on one builder, and on N
builders with the chains given longest first to the least loaded one.

    python3 benchmarks/bench_upgrade_day.py [--runs 5] [--runtime-s 611.9] [--devel-s 28.9] [--builders 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FROM, TO, GPU = "570.172.08", "580.95.05", "H100"


def _lock(path: Path, published: set[str] | None) -> None:
    from imagebuild.deliver import lockfile
    from imagebuild.digests import sha256_bytes
    from imagebuild.render.renderer import Renderer
    from imagebuild.render.run import MatrixRun

    run = MatrixRun.open(ROOT / "matrix.yaml")
    r = Renderer()
    out = {}
    for image_id, spec in sorted(run.images.items()):
        if published is not None and image_id not in published:
            continue
        entry = lockfile.compute_entry(stack=dict(spec.stack),
                                       dockerfile_sha256=sha256_bytes(r.dockerfile(spec, run.k).encode()),
                                       base_image=None, image_id="sha256:" + sha256_bytes(image_id.encode()),
                                       smoke=None)
        entry["published"] = {f"127.0.0.1:5000/hpc/{image_id}": {
            "digest": "sha256:" + sha256_bytes(image_id.encode()), "tags": sorted(spec.tags)}}
        out[image_id] = entry
    lockfile.write_lock(path, out)


def _ran_before() -> set[str]:
    from imagebuild.deliver.plan import day
    from imagebuild.render.run import MatrixRun

    run = MatrixRun.open(ROOT / "matrix.yaml")
    plan = day(run.k, list(run.images.values()), FROM, TO, [GPU])
    return {v.image for v in plan.verdicts if v.before != "no"}


def _timed(argv: list[str]) -> tuple[float, dict | None]:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    secs = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv[:4])}: exit {done.returncode}: {done.stderr[-500:]}")
    try:
        return secs, json.loads(done.stdout)
    except ValueError:
        return secs, None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--runtime-s", type=float, default=611.9)
    ap.add_argument("--devel-s", type=float, default=28.9)
    ap.add_argument("--builders", type=int, default=4)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-upgrade-"))
    all_lock, part_lock = tmp / "all.lock", tmp / "part.lock"
    _lock(all_lock, None)
    _lock(part_lock, _ran_before())
    anchor_argv = [sys.executable, "-c", f"import yaml; yaml.safe_load(open({str(ROOT / 'matrix.yaml')!r}))"]
    day = [sys.executable, "-m", "imagebuild", "upgrade", "--driver-from", FROM, "--driver-to", TO,
           "--gpu", GPU, "--dry-run", "--json", "--matrix", str(ROOT / "matrix.yaml")]
    anchor, only, unlock = [], [], []
    doc_only = doc_unlock = None
    for _ in range(a.runs):
        anchor.append(_timed(anchor_argv)[0])
        secs, doc_only = _timed(day + ["--lock", str(all_lock), "--reports-dir", str(tmp / "r1")])
        only.append(secs)
        secs, doc_unlock = _timed(day + ["--lock", str(part_lock), "--reports-dir", str(tmp / "r2")])
        unlock.append(secs)
    base = statistics.median(anchor)
    print(f"anchor  python + yaml.safe_load(matrix.yaml)           {base * 1000:8.1f} ms")
    for name, times, doc in (("driver only", only, doc_only), ("unlocks CUDA 13", unlock, doc_unlock)):
        images = doc["result"]["images"] if doc else []
        queued = [i for i in images if i["action"] in ("build", "rebuild")]
        med = statistics.median(times)
        print(f"plan    {name:<17} {len(queued):3d} image(s) to build   {med * 1000:8.1f} ms  ratio {med / base:5.2f}")
        if queued:
            chains = {}
            for i in queued:
                head = i.get("base") or i["image"]
                chains.setdefault(head, []).append(i)
            cost = {h: sum(a.devel_s if m.get("base") else a.runtime_s for m in ms) for h, ms in chains.items()}
            loads = [0.0] * a.builders
            for h in sorted(cost, key=cost.get, reverse=True):
                loads[loads.index(min(loads))] += cost[h]
            one = sum(cost.values())
            print(f"        estimated builds: {len(chains)} chain(s), one builder {one / 3600:5.2f} h, "
                  f"{a.builders} builders {max(loads) / 3600:5.2f} h (cold times {a.runtime_s} s / {a.devel_s} s)")


if __name__ == "__main__":
    main()
