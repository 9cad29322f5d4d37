"""Build choices turned back on build for real (issue 22): a site that needs Open MPI's Fortran
bindings sets `fortran: true` in its family's `build:`, and the communication image compiles them.

Heavy tier (`bash scripts/test --heavy`): one more cold build of the Debian communication image,
from a copy of matrix.yaml whose family turns Fortran on. The rendering of every switch is checked
in the fast tier (tests/test_render.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from conftest import CA_BUNDLE, ROOT, SHARED_SOURCES, answer, drop_image, engine_time, need

IMAGE = "comms-cu130-nccl2.30.7-debian12-runtime"
OFF = "build: {gda: false, fortran: false, romio: false, oshmem: false,"
ON = "build: {gda: false, fortran: true, romio: false, oshmem: false,"


@pytest.mark.heavy
def test_fortran_turned_on_in_the_matrix_builds_the_bindings(docker_client, tmp_path):
    if not SHARED_SOURCES.is_dir():
        need("the source tarballs", f"{SHARED_SOURCES} is missing")
    text = (ROOT / "matrix.yaml").read_text()
    assert text.count(OFF) == 1, "the Debian communication family's build: line moved"
    site = tmp_path / "site"
    site.mkdir()
    (site / "matrix.yaml").write_text(text.replace(OFF, ON))
    shutil.copytree(ROOT / "locks", site / "locks")
    since = engine_time(docker_client)
    proc = subprocess.run([sys.executable, "-m", "imagebuild", "build", IMAGE, "--matrix", str(site / "matrix.yaml"),
                           "--sources", str(SHARED_SOURCES), "--ca-bundle", str(CA_BUNDLE), "--json", "--quiet"],
                          cwd=site, capture_output=True, text=True, timeout=3 * 3600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = [r for r in answer(proc.stdout, "build") if r["image"] == IMAGE]
    try:
        image = docker_client.images.get(row["ref"])
        assert image.labels["io.imagebuild.build"].startswith("fortran=on,")
        # the bindings are built, and the run time a program linked against them needs is in the
        # image (Open MPI's own libraries do not link libgfortran: Debian links --as-needed)
        out = docker_client.containers.run(
            row["ref"], ["-c", "ompi_info | grep -E 'Fort (mpif.h|use mpi_f08)'; "
                               "ls /opt/openmpi/lib/libmpi_usempif08.so.40 /opt/openmpi/lib/libmpi_mpifh.so.40; "
                               "ldconfig -p | grep -o 'libgfortran.so.5 (libc6,x86-64) => /[^ ]*'"],
            entrypoint="bash", remove=True).decode()
        assert "Fort mpif.h: yes" in out and "Fort use mpi_f08: yes" in out, out
        assert "/opt/openmpi/lib/libmpi_usempif08.so.40" in out and "/opt/openmpi/lib/libmpi_mpifh.so.40" in out, out
        assert "libgfortran.so.5 (libc6,x86-64) => /" in out, out
    finally:
        drop_image(docker_client, row["ref"], since)
