"""Print the hostile-input figures of docs/reliability.md: mutants of matrix.yaml tried, refused,
accepted, injected lines and tracebacks, by kind and by section; then the two YAML bombs (deep
nesting, alias expansion), each timed and measured in a subprocess under a 256 MiB address-space
limit, against the unmutated matrix.yaml as the anchor.

    python tests/fuzz_report.py                 # the default set (about 1,100 mutants)
    python tests/fuzz_report.py --every-hostile # every hostile string in every recipe field
    python tests/fuzz_report.py --seed 3

Deterministic for a given matrix.yaml and seed; exit code 1 when any problem was found.
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from fuzz_mutants import HOSTILE, RECIPE_SECTIONS, ROOT, Workdir, mutants  # noqa: E402

# The child's own peak: VmHWM of /proc/self/status (ru_maxrss would carry the parent's peak over
# fork and exec), and the peak of Python's allocations while loading (tracemalloc).
_LIMITED = """
import resource, sys, time, tracemalloc
resource.setrlimit(resource.RLIMIT_AS, (256 * 2**20, 256 * 2**20))
from imagebuild import knowledge
from imagebuild.errors import ImagebuildError
def load():
    try:
        knowledge.load(sys.argv[1])
        return "accepted"
    except ImagebuildError as exc:
        return "refused: " + str(exc).replace(sys.argv[1], "FILE")
t1 = time.perf_counter()
outcome = load()
t2 = time.perf_counter()
tracemalloc.start()  # a second load, traced (tracing slows it down, so it is not the one timed)
load()
peak = tracemalloc.get_traced_memory()[1]
hwm = next(int(ln.split()[1]) for ln in open("/proc/self/status") if ln.startswith("VmHWM:"))
print(f"{t2 - t1:.3f} {hwm} {peak} {outcome}")
"""


def _bomb_files(original: str, folder: Path) -> dict[str, Path]:
    line = next(i for i, ln in enumerate(original.splitlines()) if ln.startswith("    description: "))
    lines = original.splitlines(keepends=True)

    def with_description(value: str) -> str:
        out = list(lines)
        out[line] = lines[line].split("description:")[0] + "description: " + value + "\n"
        return "".join(out)

    levels = ["&a0 [" + ", ".join(["lol"] * 10) + "]"]
    levels += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    files = {
        "matrix.yaml (anchor)": original,
        "nesting 100,000 deep": with_description("[" * 100_000 + "]" * 100_000),
        "alias bomb, 10^9 nodes": with_description("[" + ", ".join(levels) + "]"),
    }
    out = {}
    for i, (name, text) in enumerate(files.items()):
        path = folder / f"bomb{i}.yaml"
        path.write_text(text, encoding="utf-8")
        out[name] = path
    return out


def bombs(original: str, folder: Path) -> list[str]:
    rows = []
    for name, path in _bomb_files(original, folder).items():
        proc = subprocess.run([sys.executable, "-c", _LIMITED, str(path)], capture_output=True,
                              text=True, timeout=300, cwd=str(ROOT))
        if proc.returncode != 0 or not proc.stdout.strip():
            rows.append(f"  {name:<24} FAILED (exit {proc.returncode}): "
                        f"{(proc.stderr.strip().splitlines() or ['?'])[-1][:120]}")
            continue
        secs, kib, peak, outcome = proc.stdout.strip().split(" ", 3)
        rows.append(f"  {name:<24} {float(secs) * 1000:7.1f} ms  process peak RSS "
                    f"{int(kib) / 1024:5.1f} MiB  Python allocations peak "
                    f"{int(peak) / 2**20:5.2f} MiB  {outcome[:130]}")
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--every-hostile", action="store_true",
                    help=f"all {len(HOSTILE)} hostile strings in every recipe-facing field")
    ap.add_argument("--matrix", default=str(ROOT / "matrix.yaml"))
    args = ap.parse_args(argv)
    original = Path(args.matrix).read_text(encoding="utf-8")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="imagebuild-fuzz-") as tmp:
        work = Workdir(Path(tmp) / "work", original)
        ms = mutants(original, seed=args.seed, hostile_per_leaf=2, others=40,
                     every_hostile=args.every_hostile)
        by_kind = collections.defaultdict(collections.Counter)
        by_section = collections.defaultdict(collections.Counter)
        problems = []
        for m in ms:
            o = work.run(m)
            section = m.where.split(".")[0].split("[")[0]
            section = section if section in RECIPE_SECTIONS else "other sections"
            for table, key in ((by_kind, m.kind), (by_section, section)):
                c = table[key]
                c["tried"] += 1
                c["accepted" if o.accepted else "refused"] += 1
                c["injections"] += o.injections
                c["tracebacks"] += o.tracebacks
                c["problems"] += bool(o.problems)
            problems += [f"{m.kind} {m.where} = {m.value!r}: {p}" for p in o.problems]
        elapsed = time.perf_counter() - started
        bomb_rows = bombs(original, Path(tmp))

    total = collections.Counter()
    for c in by_kind.values():
        total.update(c)
    cols = ("tried", "refused", "accepted", "injections", "tracebacks", "problems")
    print(f"imagebuild hostile-input fuzz, seed {args.seed}"
          f"{', every hostile string' if args.every_hostile else ''}: {time.strftime('%Y-%m-%d')}, "
          f"{platform.node() or 'host'}, {platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}")
    print(f"{len(ms)} mutants x 3 commands (knowledge validate, generate --allow-unverified, "
          f"resolve) in {elapsed:.0f} s")
    header = f"  {'':<16}" + "".join(f"{c:>12}" for c in cols)
    for title, table in (("by kind", by_kind), ("by section", by_section)):
        print(f"\n{title}")
        print(header)
        for key in sorted(table):
            print(f"  {key:<16}" + "".join(f"{table[key][c]:>12}" for c in cols))
    print(f"  {'total':<16}" + "".join(f"{total[c]:>12}" for c in cols))
    print("\nYAML bombs (knowledge.load in a subprocess limited to 256 MiB of address space)")
    for row in bomb_rows:
        print(row)
    if problems:
        print(f"\n{len(problems)} problems, e.g.:")
        for p in problems[:20]:
            print(f"  {p[:300]}")
    bad = problems or any("FAILED" in r or "accepted" in r for r in bomb_rows[1:])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
