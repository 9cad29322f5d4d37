"""The real suite on the bare host: Debian's Open MPI + UCX and the CPU build of torch 2.13.0.

mpi.allreduce, torch.allreduce and ddp.equivalence must really pass here: real mpirun, real
ranks, real gloo. Without torch or mpirun the tests skip locally and fail under CI=true.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, need


@pytest.fixture(scope="module")
def host_ready():
    if importlib.util.find_spec("torch") is None:
        need("torch (pip install torch==2.13.0, the CPU wheel)", "not importable on this host")
    if shutil.which("mpirun") is None:
        need("Open MPI (openmpi-bin, libopenmpi-dev)", "mpirun not on PATH")


def _suite(tmp_path, *args):
    report = tmp_path / "report.json"
    out = subprocess.run([sys.executable, "-m", "imagebuild.smoke", "--report", str(report), *args],
                         capture_output=True, text=True, cwd=ROOT, timeout=900)
    data = json.loads(report.read_text()) if report.exists() else None
    return out, data


@pytest.fixture(scope="module")
def cpu_run(host_ready, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("host-suite")
    return _suite(tmp, "--tier", "cpu", "--ranks", "2", "--timeout", "300")


def test_distributed_checks_really_pass_on_the_host(cpu_run):
    out, data = cpu_run
    assert data is not None, out.stdout + out.stderr
    by_name = {c["name"]: c for c in data["checks"]}
    for name in ("mpi.allreduce", "torch.allreduce", "ddp.equivalence"):
        assert by_name[name]["status"] == "pass", f"{name}: {by_name[name]['detail']}"
    mpi = by_name["mpi.allreduce"]["metrics"]
    assert mpi["ranks"] == 2 and mpi["elements_checked"] > 300_000
    tar = by_name["torch.allreduce"]["metrics"]
    assert tar["elements_checked"] > 0 and tar["busbw_GBps.2M"] > 0 and tar["algbw_GBps.8B"] > 0
    assert "bfloat16" in by_name["torch.allreduce"]["detail"]
    ddp = by_name["ddp.equivalence"]["metrics"]
    assert ddp["max_rank_diff"] == 0 and ddp["max_rel_diff"] <= ddp["tolerance"] == 1e-5


def test_host_report_is_complete_and_exit_code_matches(cpu_run, tmp_path):
    out, data = cpu_run
    assert [c["name"] for c in data["checks"]] == ["versions", "libraries", "mpi.config", "mpi.allreduce",
                                                   "torch.allreduce", "ddp.equivalence", "ddp.elastic",
                                                   "gpudirect", "nccl.bench"]
    # without an expectation the version comparison cannot run: a skip with its reason, not a pass
    versions = next(c for c in data["checks"] if c["name"] == "versions")
    assert versions["status"] == "skip" and "no expectation" in versions["detail"]
    assert data["skipped"]["versions"] == versions["detail"]
    assert out.returncode == (0 if data["passed"] else 1)
    assert out.stdout.splitlines()[-1].startswith("PASSED" if data["passed"] else "FAILED")


def test_a_wrong_expectation_fails_versions_and_the_exit_code(host_ready, tmp_path):
    expect = tmp_path / "image.json"
    expect.write_text(json.dumps({"id": "host", "flavor": "cpu",
                                  "stack": {"pytorch": "2.12.0", "python": "3.11", "openmpi": "4.1.4"}}))
    out, data = _suite(tmp_path, "--only", "versions", "--expect", str(expect))
    assert out.returncode == 1, out.stdout + out.stderr
    versions = data["checks"][0]
    assert versions["status"] == "fail" and data["passed"] is False
    assert "pytorch: 2.13.0+cpu does not match 2.12.0" in versions["detail"]
    assert "openmpi (ompi_info --parsable): 4.1.4 matches 4.1.4" in versions["detail"]


def test_gpu_tier_without_cuda_skips_with_a_reason(host_ready, tmp_path):
    out, data = _suite(tmp_path, "--tier", "gpu", "--only", "torch.allreduce", "ddp.equivalence", "gpudirect")
    by_name = {c["name"]: c for c in data["checks"]}
    for name in ("torch.allreduce", "ddp.equivalence"):
        assert by_name[name]["status"] == "skip"
        assert by_name[name]["detail"].startswith("tier gpu: no CUDA device visible")
    assert by_name["gpudirect"]["status"] == "pass" and "not measured" in by_name["gpudirect"]["detail"]
    assert "skipped: torch.allreduce, ddp.equivalence" in out.stdout


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if text in cmd:
            found.append(f"{pid}: {cmd}")
    return found


def test_ranks_past_the_timeout_are_killed_and_reported(host_ready, tmp_path):
    """Ranks that stall (here: every process with torchrun's RANK set sleeps at start-up, through a
    sitecustomize on PYTHONPATH, so the stall does not depend on how fast this machine is): the
    check fails "timed out after 4s" and no rank survives it (their --out lies under our TMPDIR)."""
    stall = tmp_path / "stall"
    stall.mkdir()
    (stall / "sitecustomize.py").write_text(
        "import os, time\nif 'RANK' in os.environ:\n    time.sleep(600)\n")
    report = tmp_path / "r.json"
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=str(stall))
    env.pop("RANK", None)
    out = subprocess.run([sys.executable, "-m", "imagebuild.smoke", "--only", "ddp.equivalence", "--timeout", "4",
                          "--report", str(report)], capture_output=True, text=True, cwd=ROOT, timeout=300, env=env)
    data = json.loads(report.read_text())
    check = data["checks"][0]
    assert check["status"] == "fail" and check["detail"].startswith("timed out after 4s"), out.stdout
    assert out.returncode == 1 and data["passed"] is False
    assert _processes_mentioning(str(tmp_path)) == []


def test_mpi_allreduce_needs_no_ssh(host_ready, tmp_path):
    """Runtime images may carry no ssh/rsh client; Open MPI 4's mpirun refuses to launch even
    local ranks then, unless told so. The check runs with a PATH holding only MPI's tools."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("mpirun", "orterun", "orted", "ompi_info", "ldd", "ldconfig", "sh", "bash"):
        found = shutil.which(tool)
        if found:
            (bindir / tool).symlink_to(found)
    assert not (bindir / "ssh").exists() and not (bindir / "rsh").exists()
    report = tmp_path / "r.json"
    env = dict(os.environ, PATH=str(bindir))
    out = subprocess.run([sys.executable, "-m", "imagebuild.smoke", "--only", "mpi.allreduce", "--report", str(report)],
                         capture_output=True, text=True, cwd=ROOT, timeout=300, env=env)
    check = json.loads(report.read_text())["checks"][0]
    assert check["status"] == "pass", check["detail"] + out.stderr
