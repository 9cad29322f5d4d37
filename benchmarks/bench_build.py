#!/usr/bin/env python3
"""How much the layer cache and layer order save, against a cold build measured in the same run.

    python benchmarks/bench_build.py [--context DIR] [--change-line N] [--repeat R]

1. cold build: without the build cache (--no-cache), after removing what earlier runs built;
2. rebuild with nothing changed (ratio to cold; every step should come from the cache);
3. rebuild after changing one late line (default: the last RUN): which steps were cached;
4. the image of 1 and the image of 3 differ only in their last layers: the share of bytes they
   share (sum of the sizes of their common lower layers / image size).

Needs a Docker engine in DOCKER_HOST and the base image the context is built FROM. Prints one
line per figure; ratios are against the cold build of this run, never against a remembered time.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from imagebuild.engines import dockerfile_needs_buildkit, get_engine  # noqa: E402
from imagebuild.errors import ImagebuildError  # noqa: E402

DEFAULT_CONTEXT = ROOT / "tests" / "fixtures" / "build" / "ok"
REF = "imagebuild/bench-build"


def instructions(text: str) -> list[tuple[int, int, str]]:
    """(first line, last line, keyword) of each instruction, 1-based, continuation lines joined."""
    out, start, lines = [], None, text.splitlines()
    for i, line in enumerate(lines, 1):
        if start is None:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            start = i
        if not line.rstrip().endswith("\\"):
            out.append((start, i, lines[start - 1].split()[0].upper()))
            start = None
    return out


def change_line(text: str, line_no: int | None, nonce: str) -> tuple[str, int]:
    """The Dockerfile with the instruction at line_no (default: the last RUN) changed."""
    instrs = instructions(text)
    if line_no is None:
        runs = [ins for ins in instrs if ins[2] == "RUN"]
        if not runs:
            raise SystemExit("bench_build: the Dockerfile has no RUN line; pass --change-line N")
        target = runs[-1]
    else:
        target = next((ins for ins in instrs if ins[0] <= line_no <= ins[1]), None)
        if target is None:
            raise SystemExit(f"bench_build: line {line_no} is not part of an instruction")
    lines = text.splitlines()
    extra = f"echo bench-{nonce} > /.imagebuild-bench-change"   # a real change in the last layer
    if target[2] == "RUN" and not re.search(r"<<", lines[target[1] - 1]):
        lines[target[1] - 1] = f"{lines[target[1] - 1]} && {extra}"
    else:   # not a RUN: a RUN right after it changes the same layer boundary
        lines.insert(target[1], f"RUN {extra}")
    return "\n".join(lines) + "\n", target[0]


def _link_or_copy(src, dst):
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def cold_reset(engine, refs: list[str], built_ids: set[str]) -> None:
    """Remove the refs and every image this run built (a rebuilt tag leaves its old image behind,
    which would keep the classic builder's intermediate images, its cache, alive). The cold build
    itself runs without the cache, so other people's images and caches on the engine stay."""
    for ref in list(refs) + sorted(built_ids):
        if engine.exists(ref):
            engine.remove(ref, force=True)       # also removes its untagged parents
    built_ids.clear()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--context", type=Path, default=DEFAULT_CONTEXT, help="a build context (default: a fixture)")
    ap.add_argument("--dockerfile", default="Dockerfile")
    ap.add_argument("--change-line", type=int, default=None, metavar="N",
                    help="the Dockerfile line to change for the rebuild (default: the last RUN)")
    ap.add_argument("--repeat", type=int, default=1, help="measure each figure R times, report the median")
    ap.add_argument("--secret", action="append", default=[], metavar="ID=FILE",
                    help="a BuildKit secret the Dockerfile mounts (e.g. ca-bundle=/etc/ssl/certs/ca-certificates.crt)")
    ap.add_argument("--keep", action="store_true", help="keep the two images at the end")
    args = ap.parse_args(argv)
    ctx = args.context.resolve()
    secrets_ = {}
    for item in args.secret:
        sid, sep, path = item.partition("=")
        if not sep:
            ap.error(f"--secret {item!r}: expected ID=FILE")
        secrets_[sid] = Path(path)
    text = (ctx / args.dockerfile).read_text()
    buildkit = dockerfile_needs_buildkit(text) or bool(secrets_)
    try:
        engine = get_engine("docker")
    except ImagebuildError as exc:
        print(f"bench_build: {exc}", file=sys.stderr)
        return 2
    base_ref, changed_ref = f"{REF}:base", f"{REF}:changed"
    logs = Path(tempfile.mkdtemp(prefix="bench-build-logs-"))
    print(f"bench_build: context {ctx} ({args.dockerfile}), engine {engine.name} "
          f"{'BuildKit CLI' if buildkit else 'classic builder'}, repeat {args.repeat}")

    cold, warm, changed = [], [], []
    built: set[str] = set()

    def build(context: Path, ref: str, log: str, no_cache: bool = False):
        res = engine.build(context, ref, dockerfile=args.dockerfile, secrets=secrets_ or None,
                           log=logs / log, no_cache=no_cache)
        built.add(res.image_id)
        return res

    tmp = Path(tempfile.mkdtemp(prefix="bench-build-ctx-"))
    try:
        for r in range(args.repeat):
            cold_reset(engine, [changed_ref, base_ref], built)
            cold.append(build(ctx, base_ref, f"cold{r}.log", no_cache=True))
        for r in range(args.repeat):
            warm.append(build(ctx, base_ref, f"warm{r}.log"))
        changed_line = 0
        for r in range(args.repeat):
            cdir = tmp / f"changed{r}"
            shutil.copytree(ctx, cdir, copy_function=_link_or_copy, symlinks=True)
            new_text, changed_line = change_line(text, args.change_line, secrets.token_hex(6))
            (cdir / args.dockerfile).unlink()
            (cdir / args.dockerfile).write_text(new_text)
            if r and engine.exists(changed_ref):
                engine.remove(changed_ref, force=True)       # keep only one changed image
            changed.append(build(cdir, changed_ref, f"changed{r}.log"))
        anchor = statistics.median(b.seconds for b in cold)

        def line(label: str, runs, extra: str = "") -> None:
            secs = statistics.median(b.seconds for b in runs)
            b = runs[-1]
            print(f"{label:<34} {secs:8.2f} s  {secs / anchor:6.3f} x cold  "
                  f"cached {b.cached_steps}/{b.steps}{extra}")

        line("cold build (anchor)", cold)
        line("rebuild, nothing changed", warm)
        line(f"rebuild, line {changed_line} changed", changed)

        a = engine.layer_sizes(base_ref)
        b = engine.layer_sizes(changed_ref)
        shared = 0
        for (da, sa), (db, _sb) in zip(a, b):
            if da != db:
                break
            shared += sa
        n_shared = sum(1 for (da, _), (db, _) in zip(a, b) if da == db)
        total_b = sum(s for _, s in b)
        print(f"{'layers shared, base vs changed':<34} {n_shared}/{len(b)} layers, "
              f"{shared / 1e6:.1f} MB of {total_b / 1e6:.1f} MB = {shared / total_b:.6f} of the changed "
              f"image ({total_b - shared} bytes of its own)")
        print(f"{'image sizes (engine)':<34} base {cold[-1].size_bytes / 1e6:.1f} MB, "
              f"changed {changed[-1].size_bytes / 1e6:.1f} MB")
    except ImagebuildError as exc:
        print(f"bench_build: {exc}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if not args.keep:
            try:
                cold_reset(engine, [changed_ref, base_ref], built)
            except ImagebuildError:
                pass
    print(f"bench_build: logs in {logs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
