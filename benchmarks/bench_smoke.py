#!/usr/bin/env python3
"""How long the CPU smoke suite takes inside an image, against an anchor measured in the same run.

The anchor is the time of `python3 -c "import torch"` inside the same container: every torch
check pays it at least once per rank, so "suite = N x import torch" stays comparable between
machines of different speed. Prints per-check seconds, each as a multiple of the anchor, and the
total wall time of `imagebuild-smoke` (target: under 60 s with 2 ranks on the CI machine).

    python benchmarks/bench_smoke.py [IMAGE] [--ranks 2] [--repeat 3]
    python benchmarks/bench_smoke.py --host          # the same on the bare host, no container

IMAGE defaults to imagebuild/smoke-cpu-proto:test (built by tests/smoke/test_smoke_image.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

TIMER = ("import subprocess, sys, time; t = time.perf_counter(); "
         "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode; "
         "print(rc, time.perf_counter() - t)")


class InContainer:
    def __init__(self, image: str):
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        from imagebuild.engines import connect

        self.client = connect()
        self.box = self.client.containers.run(image, ["sleep", "3600"], detach=True, shm_size="512m",
                                              labels={"io.imagebuild.smoke": "bench"})

    def timed(self, argv: list[str]) -> tuple[int, float]:
        code, out = self.box.exec_run(["python3", "-c", TIMER, *argv])
        rc, seconds = out.decode().split()
        return int(rc), float(seconds)

    def read(self, path: str) -> dict:
        code, out = self.box.exec_run(["cat", path])
        return json.loads(out)

    def close(self) -> None:
        self.box.remove(force=True)


class OnHost:
    def timed(self, argv: list[str]) -> tuple[int, float]:
        out = subprocess.run([sys.executable, "-c", TIMER, *argv], capture_output=True, text=True, check=True)
        rc, seconds = out.stdout.split()
        return int(rc), float(seconds)

    def read(self, path: str) -> dict:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)

    def close(self) -> None:
        pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("image", nargs="?", default="imagebuild/smoke-cpu-proto:test")
    ap.add_argument("--host", action="store_true", help="run on this host instead of in a container")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3, help="anchor repetitions (median)")
    args = ap.parse_args()

    where = OnHost() if args.host else InContainer(args.image)
    try:
        if args.host:
            report = os.path.join(tempfile.mkdtemp(prefix="bench-smoke-"), "r.json")
            root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
            os.environ["PYTHONPATH"] = root + os.pathsep + os.environ.get("PYTHONPATH", "")
            suite = [sys.executable, "-m", "imagebuild.smoke"]
            python = sys.executable
        else:
            report = "/tmp/bench-smoke.json"
            suite = ["imagebuild-smoke"]
            python = "python3"
        anchors = [where.timed([python, "-c", "import torch"])[1] for _ in range(args.repeat)]
        anchor = statistics.median(anchors)
        rc, total = where.timed(suite + ["--tier", "cpu", "--ranks", str(args.ranks), "--report", report])
        data = where.read(report)
    finally:
        where.close()

    print(f"machine: {os.cpu_count()} cores; {'host' if args.host else args.image}; ranks {args.ranks}")
    print(f"anchor  python3 -c 'import torch' (median of {args.repeat}): {anchor:.2f} s")
    print(f"{'check':<18}{'status':<8}{'seconds':>9}{'x anchor':>10}")
    for check in data["checks"]:
        secs = float(check["metrics"].get("seconds", 0.0))
        print(f"{check['name']:<18}{check['status']:<8}{secs:9.2f}{secs / anchor:10.2f}")
    print(f"{'suite wall time':<26}{total:9.2f}{total / anchor:10.2f}   (exit {rc}, passed {data['passed']}, "
          f"target < 60 s: {'met' if total < 60 else 'NOT met'})")
    return 0 if data["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
