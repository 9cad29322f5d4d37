#!/usr/bin/env python3
"""How much a devel image reuses of its runtime image, now that it is built FROM it (issue 14).

    python benchmarks/bench_layer_reuse.py [--devel ID] [--cold] [--ca-bundle FILE] [--sources DIR]

1. the runtime image the devel is FROM, built through the product's build path (imagebuild's
   jobs, BuildTimeEngine: the build, then the normalising step): from the build cache as it is, or
   with --cold without it (every step anew: the anchor a devel build is compared with);
2. the devel image, always without the build cache (its own steps anew, FROM the runtime image);
3. both images' layers (diff ids and uncompressed sizes, from the engine): the runtime's size, the
   devel's, the bytes of the runtime's layers the devel has as its lowest, and their share of the
   runtime's bytes.

Needs a Docker engine in DOCKER_HOST, the base image of the runtime and the package index; a site
image that compiles upstream tarballs also needs them (--sources, as `imagebuild build --sources`;
the default Debian images compile none). Prints one line per figure.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from imagebuild import knowledge  # noqa: E402
from imagebuild.builder.scheduler import build_all  # noqa: E402
from imagebuild.cli.commands.build import CA_SECRET, check_ca_bundle, jobs_for  # noqa: E402
from imagebuild.engines import get_engine  # noqa: E402
from imagebuild.render.images import expand  # noqa: E402
from imagebuild.builder.reproducible import BuildTimeEngine  # noqa: E402
from imagebuild.sourcedate import source_epoch  # noqa: E402

DEVEL = "comms-cu130-nccl2.30.7-debian12-devel"


def shared_bytes(base: list[tuple[str, int]], image: list[tuple[str, int]]) -> int:
    """Bytes of ``base``'s layers that are ``image``'s lowest layers, in order."""
    total = 0
    for (b_id, size), (i_id, _) in zip(base, image):
        if b_id != i_id:
            break
        total += size
    return total


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devel", default=DEVEL, help=f"the devel image (default: {DEVEL})")
    ap.add_argument("--cold", action="store_true", help="build the runtime image without the cache too")
    ap.add_argument("--ca-bundle", type=Path, default=Path("/etc/ssl/certs/ca-certificates.crt"))
    ap.add_argument("--sources", default=None, help="a mirror of the source tarballs a site image compiles")
    args = ap.parse_args(argv)

    k = knowledge.load(ROOT / "matrix.yaml")
    specs = {s.id: s for s in expand(k)[0]}
    devel = specs[args.devel]
    if not devel.depends_on:
        raise SystemExit(f"bench_layer_reuse: {devel.id} is not built FROM another image")
    runtime = specs[devel.depends_on[0]]
    secrets = {CA_SECRET: check_ca_bundle(args.ca_bundle)} if args.ca_bundle.is_file() else {}
    epochs = {s.local_ref: source_epoch(s.as_of) for s in specs.values()}
    engine = get_engine("docker")
    with tempfile.TemporaryDirectory(prefix="bench-layer-reuse-") as tmp:
        jobs = {j.image_id: j for j in jobs_for([devel.id], k, Path(tmp) / "ctx", secrets=secrets,
                                                 sources=args.sources)}
        seconds = {}
        for job, cold in ((jobs[runtime.id], args.cold), (jobs[devel.id], True)):
            (out,) = build_all([job], engine=BuildTimeEngine(engine, epochs, no_cache=cold),
                               log_dir=Path(tmp) / "logs")
            if not out.ok:
                raise SystemExit(f"bench_layer_reuse: {job.image_id}: {out.status}: {out.error}")
            seconds[job.image_id] = (out.result.seconds, out.result.cached_steps, out.result.steps)
    r_layers = engine.layer_sizes(runtime.local_ref)
    d_layers = engine.layer_sizes(devel.local_ref)
    r_size, d_size = sum(s for _, s in r_layers), sum(s for _, s in d_layers)
    shared = shared_bytes(r_layers, d_layers)
    rs, rc, rn = seconds[runtime.id]
    ds, dc, dn = seconds[devel.id]
    print(f"runtime {runtime.id}: {_mb(r_size)} in {len(r_layers)} layers; built in {rs:.1f} s "
          f"({'cold' if args.cold else 'build cache as it was'}, {rc}/{rn} steps cached)")
    print(f"devel   {devel.id}: {_mb(d_size)} in {len(d_layers)} layers; built cold in {ds:.1f} s "
          f"({dc}/{dn} steps cached)" + (f" = {ds / rs:.3f} x the runtime's cold build" if args.cold else ""))
    print(f"shared: the devel's lowest {sum(1 for a, b in zip(r_layers, d_layers) if a[0] == b[0])} "
          f"layers are the runtime's: {_mb(shared)} = {100 * shared / r_size:.2f} % of the runtime's "
          f"bytes, {100 * shared / d_size:.1f} % of the devel's; the devel adds {_mb(d_size - shared)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
