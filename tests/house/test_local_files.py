"""Files named on the command line are regular files, read under a cap (issue 23, item 8): a FIFO
used to hang the command, a link to /dev/zero to end in a MemoryError. Each is now one line
naming the argument or the file, exit 2, at once. Real FIFOs and device links; the command runs
in a subprocess with a timeout, so a hang fails the test instead of hanging the suite."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT

MATRIX = str(ROOT / "matrix.yaml")


@pytest.fixture(params=["fifo", "zero", "folder"])
def hostile(request, tmp_path):
    path = tmp_path / f"hostile-{request.param}"
    if request.param == "fifo":
        os.mkfifo(path)
    elif request.param == "zero":
        os.symlink("/dev/zero", path)
    else:
        path.mkdir()
    return request.param, str(path)


CASES = {
    "lock": lambda p: ["find", "--matrix", MATRIX, "--lock", p, "--gpu", "none"],
    "doctor": lambda p: ["find", "--matrix", MATRIX, "--from-doctor", p],
    "json": lambda p: ["check", "--matrix", MATRIX, "--from-json", p],
    "key": lambda p: ["verify", "127.0.0.1:9/ns/x:1", "--key", p],
    "matrix": lambda p: ["resolve", "--matrix", p, "--driver", "580.95.05"],
    "lock-check": lambda p: ["lock", "--matrix", MATRIX, "--check", "--no-engine", "--lock", p],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_special_file_is_one_line_at_once(hostile, case):
    kind, path = hostile
    proc = subprocess.run([sys.executable, "-m", "imagebuild", *CASES[case](path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, (kind, case, proc.returncode, proc.stderr[-1000:])
    assert len(lines) == 1 and "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr, lines
    assert path in lines[0] or "argument" in lines[0], lines[0]
    assert ("regular file" in lines[0] or "folder" in lines[0].lower() or "directory" in lines[0].lower()), lines[0]
