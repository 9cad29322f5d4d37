#!/usr/bin/env python3
"""What each Slurm export costs, against the engine's own flattening measured in the same run.

    python benchmarks/bench_export.py [--image REF] [--repeat R] [--workdir DIR]

Anchor: ``docker export`` of a created container of the image, streamed into ``tar -x`` (what
every export must do at least once). Then, for the same image:

1. ``sqsh``: imagebuild's enroot squashfs (flatten + enroot files + mksquashfs), at the default
   gzip level 1 and at level 9 (mksquashfs's own default), with each file's size;
2. ``oci-bundle`` with the default method (flatten + ``runc spec``);
3. ``oci-bundle`` with ``--oci-method umoci`` (``skopeo copy docker-daemon:`` + ``umoci unpack``);
4. the second ``sqsh`` export's sha256 against the first (must be equal: reproducible).

One untimed flattening runs first (a warm page cache for every case). Prints the median seconds
of each and its ratio to the anchor of this run. Needs a Docker engine
in DOCKER_HOST, mksquashfs, runc, skopeo and umoci, and root (numeric owners in the rootfs).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from imagebuild.deliver import export  # noqa: E402
from imagebuild.engines import connect  # noqa: E402
from imagebuild.errors import ImagebuildError  # noqa: E402


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def anchor(client, ref: str, target: Path) -> None:
    target.mkdir()
    container = client.containers.create(ref, command=["/bin/true"], entrypoint=[])
    try:
        untar = subprocess.Popen(["tar", "-C", str(target), "--numeric-owner", "-px", "-f", "-"],
                                 stdin=subprocess.PIPE)
        for chunk in container.export(chunk_size=1 << 20):
            untar.stdin.write(chunk)
        untar.stdin.close()
        if untar.wait() != 0:
            raise SystemExit("tar failed in the anchor")
    finally:
        container.remove(force=True)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--image", default="imagebuild/base:debian-bookworm", help="local image reference")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each (median; default 3)")
    ap.add_argument("--workdir", default=None, help="scratch folder (default: a temp folder)")
    args = ap.parse_args()
    try:
        client = connect()
        image = client.images.get(export.check_ref(args.image))
    except ImagebuildError as exc:
        print(f"bench_export: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - ImageNotFound
        print(f"bench_export: image {args.image} not found ({type(exc).__name__})", file=sys.stderr)
        return 2
    ref = image.id  # by id: a tag moved by a concurrent build must not change the image mid-run
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="bench-export-"))
    workdir.mkdir(parents=True, exist_ok=True)
    size_mb = image.attrs.get("Size", 0) / 1e6
    print(f"image {args.image} ({image.id[:19]}, {size_mb:.0f} MB), {args.repeat} run(s) each, "
          f"{os.cpu_count()} CPUs")

    def out(name: str) -> Path:
        """A fresh output path: whatever an earlier run left there is removed before timing."""
        path = workdir / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        return path

    cases = {
        "anchor: docker export | tar -x": lambda p: anchor(client, ref, p),
        "sqsh": lambda p: export.export_sqsh(client, ref, p),
        "sqsh, gzip level 9": lambda p: export.export_sqsh(client, ref, p, level=9),
        "oci-bundle (flatten + runc spec)": lambda p: export.export_oci_bundle(
            client, ref, p, method="flatten"),
        "oci-bundle (skopeo + umoci)": lambda p: export.export_oci_bundle(
            client, ref, p, method="umoci"),
    }
    # one untimed flattening first, so that no case pays alone for reading the layers from disk
    anchor(client, ref, out("warm"))
    out("warm")
    medians: dict[str, float] = {}
    sizes: dict[str, str] = {}
    for index, (name, fn) in enumerate(cases.items()):
        times = []
        for _ in range(args.repeat):
            path = out(f"case{index}")
            times.append(timed(lambda: fn(path)))
        medians[name] = statistics.median(times)
        if path.is_file():
            sizes[name] = f"  {path.stat().st_size / 1e6:.0f} MB"
        out(f"case{index}")  # free the space before the next case
    base = medians["anchor: docker export | tar -x"]
    for name, seconds in medians.items():
        print(f"{name:<36} {seconds:8.2f} s  {seconds / base:6.2f} x anchor{sizes.get(name, '')}")
    export.export_sqsh(client, ref, out("a.sqsh"))
    export.export_sqsh(client, ref, out("b.sqsh"))
    first = sha256(workdir / "a.sqsh")
    print(f"sqsh reproducible: {'yes' if sha256(workdir / 'b.sqsh') == first else 'NO'} "
          f"(sha256 {first[:16]}..., {(workdir / 'a.sqsh').stat().st_size / 1e6:.0f} MB)")
    if not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
