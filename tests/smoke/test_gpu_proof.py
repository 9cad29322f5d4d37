"""benchmarks/gpu_proof/compare_nccl.py on the all_reduce_perf logs of the first gpu_proof run
(2026-11-26, one H100, the comms image's binary and the host-built one, three rounds each, the
host's NCCL 2.28.9 under both): the verdict it gave there, and the ways it must fail. Pure logic;
the pack half of gpu_proof.sh is tested on the built image in tests/smoke/test_comms_wheels_image.py."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

from conftest import ROOT

SCRIPT = ROOT / "benchmarks" / "gpu_proof" / "compare_nccl.py"
LOGS = ROOT / "tests" / "data" / "gpu_proof"


def _compare(folder) -> tuple[int, list[str]]:
    res = subprocess.run([sys.executable, str(SCRIPT), str(folder)], capture_output=True, text=True, timeout=60)
    return res.returncode, res.stdout.splitlines()


def _copy(tmp_path):
    for log in LOGS.glob("nccl_*.txt"):
        shutil.copy(log, tmp_path / log.name)
    return tmp_path


def _scale_large_rows(path, factor: float) -> None:
    """Multiply the out-of-place algbw of every size of 64 MiB and up by factor."""
    out = []
    for line in path.read_text().splitlines():
        cols = line.split()
        if cols and cols[0].isdigit() and int(cols[0]) >= 64 << 20:
            cols[6] = f"{float(cols[6]) * factor:.2f}"
            line = "  ".join(cols)
        out.append(line)
    path.write_text("\n".join(out) + "\n")


def test_the_h100_run_meets_the_target_on_one_rank():
    code, lines = _compare(LOGS)
    assert code == 0, lines
    assert lines[-1].startswith("verdict: image/host algbw 1.000 ") and "out-of-place only: one rank" in lines[-1]
    assert "'nccl-library': '22809'" in lines[0] and "NVIDIA H100 80GB HBM3" in lines[0]
    # one rank: the in-place column (a no-op, 1e6 GB/s of noise at 1 GiB) is not shown nor counted
    assert "image ip" not in "\n".join(lines)


def test_a_slower_image_binary_fails(tmp_path):
    folder = _copy(tmp_path)
    for log in folder.glob("nccl_image_*.txt"):
        _scale_large_rows(log, 0.9)
    code, lines = _compare(folder)
    assert code == 1 and re.match(r"verdict: image/host algbw 0\.9\d\d .* FAIL$", lines[-1]), lines[-1]


def test_a_wrong_element_fails_even_at_full_speed(tmp_path):
    folder = _copy(tmp_path)
    log = folder / "nccl_host_2.txt"
    text = log.read_text().splitlines()
    i = next(k for k, line in enumerate(text) if line.split()[:1] == ["4096"])
    cols = text[i].split()
    cols[8] = "3"  # out-of-place #wrong
    text[i] = "  ".join(cols)
    log.write_text("\n".join(text) + "\n")
    code, lines = _compare(folder)
    assert code == 1 and "3 wrong elements" in lines[-1] and lines[-1].endswith("FAIL")


def test_no_host_log_is_no_verdict(tmp_path):
    folder = _copy(tmp_path)
    for log in folder.glob("nccl_host_*.txt"):
        log.unlink()
    code, lines = _compare(folder)
    assert code == 1 and lines == ["verdict: no comparison: 3 image run(s), 0 host run(s) parsed"]
