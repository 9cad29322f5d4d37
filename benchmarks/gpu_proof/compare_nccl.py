#!/usr/bin/env python3
"""The image's all-reduce benchmark against the same benchmark built on the host, from gpu_proof.sh's
logs: imagebuild-nccl-bw (the registry-built image's) or nccl-tests' all_reduce_perf (a site's
image), which print the same table.

    python3 benchmarks/gpu_proof/compare_nccl.py OUTDIR

Reads OUTDIR/nccl_image_N.txt and OUTDIR/nccl_host_N.txt (rounds run alternately, same arguments,
same NCCL library), takes per message size the median over rounds of the out-of-place and in-place
figures, and prints a table and the ratio image/host. With one rank the bus bandwidth is 0 by
definition (busbw = algbw x 2(n-1)/n), so the ratio is taken on bus bandwidth when it is non-zero
and on the out-of-place algorithm bandwidth otherwise (a copy within one GPU), and says which: an
in-place all-reduce of one rank moves nothing, its time is noise and its algbw is not a figure.
The last line is the verdict; exit 1 when a log is missing or unreadable, any element was wrong,
or the ratio over the sizes of 64 MiB and up is under 0.95.
"""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

TARGET = 0.95
LARGE = 64 << 20
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)\s+(.*)$")


def parse(text: str) -> tuple[dict[int, dict[str, float]], dict[str, str]]:
    """rows by size (oop/ip time, algbw, busbw, wrong) and header facts (versions, devices)."""
    rows: dict[int, dict[str, float]] = {}
    facts: dict[str, str] = {}
    for line in text.splitlines():
        if m := re.search(r"(nccl-tests version|imagebuild-nccl-bw) (\S+?):?\s.*?nccl-library=(\d+)", line):
            facts[m.group(1).split()[0]], facts["nccl-library"] = m.group(2), m.group(3)
        elif m := re.search(r"NCCL version (\S+)", line):
            facts.setdefault("nccl", m.group(1))
        elif m := re.search(r"Rank\s+0 .* device\s+0 \[(.*?)\]\s+(.*)$", line):
            facts["device"] = m.group(2).strip()
        m = ROW.match(line)
        if not m:
            continue
        cols = m.group(6).split()
        if len(cols) < 8:
            continue
        try:
            rows[int(m.group(1))] = {
                "oop_time": float(cols[0]), "oop_algbw": float(cols[1]), "oop_busbw": float(cols[2]),
                "oop_wrong": float(cols[3]) if cols[3] != "N/A" else 0.0,
                "ip_time": float(cols[4]), "ip_algbw": float(cols[5]), "ip_busbw": float(cols[6]),
                "ip_wrong": float(cols[7]) if cols[7] != "N/A" else 0.0,
            }
        except ValueError:
            continue
    return rows, facts


def load(outdir: Path, which: str) -> tuple[list[dict[int, dict[str, float]]], dict[str, str]]:
    runs, facts = [], {}
    for path in sorted(outdir.glob(f"nccl_{which}_*.txt")):
        rows, f = parse(path.read_text(errors="replace")[:4_000_000])
        if rows:
            runs.append(rows)
            facts.update(f)
    return runs, facts


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    outdir = Path(argv[1])
    image, image_facts = load(outdir, "image")
    host, host_facts = load(outdir, "host")
    if not image or not host:
        print(f"verdict: no comparison: {len(image)} image run(s), {len(host)} host run(s) parsed")
        return 1
    sizes = sorted(set.intersection(*(set(r) for r in image + host)))
    wrong = sum(r[s]["oop_wrong"] + r[s]["ip_wrong"] for r in image + host for s in r)
    use_bus = any(r[s]["oop_busbw"] > 0 for r in image + host for s in r)
    key = "busbw" if use_bus else "algbw"
    places = ("oop", "ip") if use_bus else ("oop",)
    print(f"image: {len(image)} runs, {image_facts}")
    print(f"host:  {len(host)} runs, {host_facts}")
    head = "".join(f" {'image ' + p:>10} {'host ' + p:>10} {'ratio':>6}" for p in places)
    print(f"{'bytes':>12}{head}   ({key}, GB/s, medians over rounds)")
    large: list[float] = []
    for s in sizes:
        cells = []
        for place in places:
            a = statistics.median(r[s][f"{place}_{key}"] for r in image)
            b = statistics.median(r[s][f"{place}_{key}"] for r in host)
            ratio = a / b if b else float("nan")
            cells += [f"{a:10.2f}", f"{b:10.2f}", f"{ratio:6.3f}"]
            if s >= LARGE and b:
                large.append(ratio)
        print(f"{s:>12} " + " ".join(cells))
    if not large:
        print(f"verdict: no sizes of {LARGE} bytes or more in both logs")
        return 1
    ratio = statistics.geometric_mean(large)
    ok = ratio >= TARGET and wrong == 0
    which = "out-of-place and in-place" if use_bus else "out-of-place only: one rank"
    print(f"verdict: image/host {key} {ratio:.3f} (geometric mean, sizes >= 64 MiB, {which}; "
          f"target {TARGET}), {int(wrong)} wrong elements, {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
