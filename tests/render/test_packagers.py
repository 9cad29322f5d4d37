"""Package managers are data (issue 26): every OS packages step is one `packages` fragment written
from a row of imagebuild/packagers.py, and a row names its own repository fragments. This plants a
third package manager, zypper, in a copy of the package (a row for an OS family `suse` and its two
repository fragments) and makes Rocky Linux 9 an OS of that family in a copy of matrix.yaml: the
matrix's checks accept the family, and the recipes of its images install, refresh and clean with
zypper and add NVIDIA's repository with the planted fragment, with no dnf line left. The row reuses
the rhel row's package names and files: what is shown is the mechanism, not a SUSE recipe. Pure
logic: nothing is built."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

IMAGES = ("comms-cu129-nccl2.30.7-rockylinux9-runtime", "pytorch-2.13.0-cu130-rockylinux9-runtime")
ROW = '''
PACKAGERS["suse"] = {
    **PACKAGERS["rhel"], "name": "zypper",
    "update": ("zypper --non-interactive refresh",),
    "install": "zypper --non-interactive install --no-recommends",
    "clean": ("zypper --non-interactive clean --all",),
    "repo_fragments": {"cuda": "cuda-repo-zypper", "doca": "doca-repo-zypper"},
    "repo_files": ("/etc/pki/rpm-gpg/RPM-GPG-KEY-NVIDIA-CUDA", "/etc/zypp/repos.d/cuda.repo"),
}
'''
ROCKY9 = 'family: rhel, base: "rockylinux/rockylinux:9"'


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("packager")
    pkg = d / "pkg"
    shutil.copytree(ROOT / "imagebuild", pkg / "imagebuild", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    rows = pkg / "imagebuild" / "packagers.py"
    rows.write_text(rows.read_text(encoding="utf-8") + ROW, encoding="utf-8")            # the row
    frags = pkg / "imagebuild" / "recipes" / "fragments"
    for kind in ("cuda", "doca"):                                                         # its fragments
        text = (frags / f"{kind}-repo-dnf.sh.j2").read_text(encoding="utf-8")
        (frags / f"{kind}-repo-zypper.sh.j2").write_text(
            text.replace("/etc/yum.repos.d/", "/etc/zypp/repos.d/"), encoding="utf-8")
    text = (ROOT / "matrix.yaml").read_text(encoding="utf-8")
    assert text.count(ROCKY9) == 1, "the test's premise: Rocky Linux 9's entry"
    matrix = d / "matrix.yaml"                                                            # an OS of it
    matrix.write_text(text.replace(ROCKY9, 'family: suse, base: "rockylinux/rockylinux:9"'),
                      encoding="utf-8")
    shutil.copytree(ROOT / "locks", d / "locks")
    return pkg, matrix


def _run(pkg: Path | None, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if pkg is not None:
        env["PYTHONPATH"] = str(pkg)
    return subprocess.run([sys.executable, "-m", "imagebuild", *args], env=env,
                          cwd=(pkg or ROOT).parent, capture_output=True, text=True, timeout=300)


def test_the_matrix_accepts_the_family_only_with_its_row(planted):
    pkg, matrix = planted
    ok = _run(pkg, "knowledge", "validate", "--matrix", str(matrix))
    assert ok.returncode == 0, ok.stderr
    without = _run(None, "knowledge", "validate", "--matrix", str(matrix))   # the package as shipped
    assert without.returncode == 2 and "not 'suse'" in without.stderr, without.stderr
    assert len(without.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("image", IMAGES)
def test_its_images_install_with_the_planted_package_manager(planted, tmp_path, image):
    pkg, matrix = planted
    proc = _run(pkg, "generate", image, "--matrix", str(matrix), "--output", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    docker = (tmp_path / "Dockerfiles" / image / "Dockerfile").read_text(encoding="utf-8")
    sif = (tmp_path / "singularity" / f"{image}.def").read_text(encoding="utf-8")
    for text in (docker, sif):
        assert "dnf " not in text and "/var/cache/dnf" not in text
        assert text.count("zypper --non-interactive install --no-recommends ") >= 4   # os, ssh, cuda, rdma
        assert text.count("zypper --non-interactive refresh") == \
            text.count("zypper --non-interactive install ")                        # before each install
        assert "zypper --non-interactive clean --all" in text
        assert "> /etc/zypp/repos.d/cuda.repo" in text                            # its repository fragment
        assert "openssh-server" in text and "rm -f /etc/ssh/ssh_host_*" in text
    # the run-time stage copies the repository files the row names from the devel stage
    assert "COPY --from=devel /etc/zypp/repos.d/cuda.repo /etc/zypp/repos.d/cuda.repo" in docker


def test_a_row_without_a_role_is_one_line_naming_both():
    from imagebuild.packagers import PACKAGERS, PackagerError, packages
    row = {**PACKAGERS["rhel"], "name": "zypper",
           "packages": {k: v for k, v in PACKAGERS["rhel"]["packages"].items() if k != "openssh"}}
    with pytest.raises(PackagerError, match=r"the zypper row names no 'openssh' packages \(roles it has: "):
        packages(row, "openssh")
    assert packages(PACKAGERS["rhel"], "os-runtime", python="3.12")[-1] == "python3.12"
