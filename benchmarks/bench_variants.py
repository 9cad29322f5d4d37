#!/usr/bin/env python3
"""Two smoke-cpu variants that differ only in PyTorch (torch 2.13.0 vs none: only one CPU wheel
can be had on these machines), built from the rendered recipes of the same matrix.

Prints: which steps of the second variant came from the cache (target: every layer below PyTorch),
its build time as a ratio to the first variant's cold build time measured in the same run (the
anchor: `--cold` removes the first variant and prunes the build cache first), and the share of
bytes the two images share (their common lower layers over each image's total).
Run from the repository root with DOCKER_HOST set.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from imagebuild.render import images, output
from imagebuild import knowledge  # noqa: E402
from imagebuild.engines import connect, get_engine  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cold", action="store_true", help="measure the first variant's cold build")
    args = ap.parse_args()
    k = knowledge.load(ROOT / "matrix.yaml")
    a = {s.id: s for s in images.expand(k)[0]}["smoke-cpu"]
    b = replace(a, id="smoke-cpu-notorch", stack=dict(a.stack, pytorch="none"), tag="bench")
    ref_b = "imagebuild/smoke-cpu-notorch:bench"
    eng = get_engine("docker")
    client = connect()
    tmp = Path(tempfile.mkdtemp(prefix="bench-variants-"))
    for ref in (ref_b,) + ((a.local_ref,) if args.cold else ()):
        if eng.exists(ref):
            eng.remove(ref, force=True)
    if args.cold:
        client.api.prune_builds() if hasattr(client.api, "prune_builds") else None
    ctx_a = output.write_context(a, tmp / "a", k=k)
    ctx_b = output.write_context(b, tmp / "b", k=k)
    t = time.perf_counter()
    ra = eng.build(ctx_a, a.local_ref, log=tmp / "a.log", no_cache=args.cold)
    ta = time.perf_counter() - t
    t = time.perf_counter()
    rb = eng.build(ctx_b, ref_b, log=tmp / "b.log")
    tb = time.perf_counter() - t
    la, lb = eng.layer_sizes(a.local_ref), eng.layer_sizes(ref_b)
    shared = 0
    common = 0
    for (da, sa), (db, _) in zip(la, lb):
        if da != db:
            break
        shared += sa
        common += 1
    tot_a, tot_b = sum(s for _, s in la), sum(s for _, s in lb)
    torch_layer = max(s for _, s in la)
    kind = "cold" if args.cold else "cached rebuild"
    print(f"anchor  variant A (torch {a.stack['pytorch']}) {kind}: {ta:7.1f} s, "
          f"{ra.cached_steps}/{ra.steps} steps cached, {tot_a/1e6:7.0f} MB in {len(la)} layers")
    print(f"variant B (no PyTorch), after A:          {tb:7.1f} s = {tb/ta:5.3f} x A, "
          f"{rb.cached_steps}/{rb.steps} steps cached, {tot_b/1e6:7.0f} MB in {len(lb)} layers")
    print(f"common lower layers: {common} ({shared/1e6:.0f} MB): {shared/tot_b:.4f} of B's bytes, "
          f"{shared/tot_a:.3f} of A's bytes; the PyTorch layer alone is {torch_layer/1e6:.0f} MB "
          f"({torch_layer/tot_a:.3f} of A)")


if __name__ == "__main__":
    main()
