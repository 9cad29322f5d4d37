"""Issue 29: the arm64 twin of the Debian CUDA-wheels PyTorch image, built and tested on this x86_64
host under emulation (binfmt_misc and QEMU), through the product: `imagebuild base --platform`,
`imagebuild build NAME --platform linux/arm64`, `imagebuild test NAME --platform linux/arm64`.

What a Grace node would run, without its GPU: the smoke suite's CPU tier (versions read from the
libraries, ldd over torch and every nvidia wheel's libraries, one copy per soname, Debian's Open
MPI over UCX, torch's all-reduce, DDP equivalence, across two containers). Heavy tier: every
step runs under QEMU, several times slower than natively (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from conftest import CA_BUNDLE, ROOT, need
from test_cuda_wheels_image import assert_cpu_tier_passed
from imagebuild import cli
from imagebuild.errors import ImagebuildError

pytestmark = pytest.mark.heavy

NAME = "pytorch-2.13.0-cu130-debian12-runtime"
ARM = f"{NAME}-arm64"
MATRIX = ROOT / "matrix.yaml"


@pytest.fixture(scope="module")
def arm64_image(docker_client):
    from imagebuild.builder.emulation import PLATFORMS, check_emulation
    from imagebuild.render.run import load_images
    try:
        check_emulation(PLATFORMS["linux/arm64"])
    except ImagebuildError as exc:
        need("arm64 emulation (bash .ci/start-emulation.sh)", str(exc))
    if not CA_BUNDLE.is_file():
        need("the host's CA bundle", f"{CA_BUNDLE} is missing (Debian's ca-certificates)")
    spec = load_images(MATRIX)[ARM]
    try:
        docker_client.images.get("imagebuild/base:debian-bookworm-arm64")
    except Exception:  # noqa: BLE001 - ImageNotFound
        if not shutil.which("debootstrap") or os.geteuid() != 0:
            need("debootstrap as root", "the arm64 base is made with debootstrap")
        assert cli.main(["base", "debian-bookworm", "--platform", "linux/arm64"]) == 0
    code = cli.main(["build", NAME, "--platform", "linux/arm64", "--matrix", str(MATRIX),
                     "--ca-bundle", str(CA_BUNDLE)])
    assert code == 0, f"imagebuild build {NAME} --platform linux/arm64 failed (.imagebuild/logs/{ARM}.log)"
    return spec


@pytest.fixture(scope="module")
def report(arm64_image, tmp_path_factory):
    path = tmp_path_factory.mktemp("arm64-report") / "report.json"
    code = cli.main(["test", NAME, "--platform", "linux/arm64", "--report", str(path), "--ranks", "2"])
    return code, json.loads(path.read_text())


def test_the_image_is_arm64_through_and_through(arm64_image, docker_client):
    image = docker_client.images.get(arm64_image.local_ref)
    assert image.attrs["Architecture"] == "arm64" and image.attrs["Os"] == "linux"
    labels = image.attrs["Config"]["Labels"]
    assert labels["io.imagebuild.stack.platform"] == "aarch64"
    assert labels["io.imagebuild.image-id"] == ARM
    out = docker_client.containers.run(
        arm64_image.local_ref, ["-c", "uname -m; dpkg --print-architecture; "
                                      "/opt/venv/bin/python -c 'import platform; print(platform.machine())'; "
                                      "ls /opt/venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so"],
        entrypoint="bash", remove=True).decode().split()
    assert out[:3] == ["aarch64", "arm64", "aarch64"], out
    # the wheels are the aarch64 lock's (a file of its own, beside the x86_64 one)
    wheels = docker_client.containers.run(arm64_image.local_ref, ["-c", "cat /opt/imagebuild/requirements/wheels.txt"],
                                          entrypoint="bash", remove=True).decode()
    assert "# for: Python 3.11, aarch64-manylinux_2_36" in wheels


def test_every_cpu_tier_check_passes_under_emulation(report):
    assert_cpu_tier_passed(report, ARM)


def test_versions_and_libraries_are_the_aarch64_wheels(report, arm64_image):
    s = arm64_image.stack
    checks = {c["name"]: c["detail"] for c in report[1]["checks"]}
    versions, libraries = checks["versions"], checks["libraries"]
    assert f"torch.version.cuda: 13.0 matches {s['cuda']}" in versions
    assert f"wheel nvidia-cudnn's cuDNN (libcudnn): 9.20.0 matches {s['cudnn']}" in versions
    assert f"wheel nvidia-nccl's NCCL (libnccl.so.2): {s['nccl']} matches {s['nccl']}" in versions
    assert "nvidia wheels:" in libraries and "resolve within the wheels' folders" in libraries
    assert "one copy of each CUDA, cuDNN, NCCL, UCX and MPI library" in libraries
