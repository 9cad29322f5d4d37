"""Images for several platforms (issue 29): a family's `platforms:` gives one image per platform,
with the same name and tag, its own id (`-arm64`), base, wheel lock and recipe; `build --platform`
picks each image's twin and checks emulation before anything else. Pure logic and the CLI's
refusals: no engine (the arm64 builds are test_arm64_images.py's, heavy tier)."""

from __future__ import annotations

import pytest

from imagebuild import cli, platforms
from imagebuild.builder import emulation
from imagebuild.engines.base import check_platform
from imagebuild.errors import UsageError
from imagebuild.render import images, output, wheellock

from conftest import ROOT, edit_matrix, refused_in_one_line

MATRIX = ROOT / "matrix.yaml"
NAME = "pytorch-2.13.0-cu130-debian12-runtime"
ARM = f"{NAME}-arm64"


@pytest.fixture(scope="module")
def every(specs_by_id):
    return specs_by_id


def test_the_family_gives_one_image_per_platform_under_one_tag(k, every):
    amd, arm = every[NAME], every[ARM]
    assert (amd.oci_platform, arm.oci_platform) == ("linux/amd64", "linux/arm64")
    assert (amd.platform, arm.platform) == ("x86_64", "aarch64")
    assert amd.tag == arm.tag and amd.base_name == arm.base_name == NAME
    assert amd.name == "" and arm.name == NAME          # x86_64's id is as before
    assert {c: v for c, v in amd.stack.items() if c != "platform"} == \
        {c: v for c, v in arm.stack.items() if c != "platform"}
    # every other image is for the matrix's first platform, ids unchanged, but the twins the
    # matrix asks for (the Ubuntu images of the newest releases, for Grace nodes)
    arm64 = {i for i, s in every.items() if s.oci_platform == "linux/arm64"}
    assert arm64 == {i for i in every if i.endswith("-arm64")}
    assert all(s.oci_platform == "linux/amd64" and s.name == "" for i, s in every.items() if i not in arm64)
    assert all(every[i[:-len("-arm64")]].tag == every[i].tag for i in arm64)


def test_ubuntu_twins_take_cuda_from_the_sbsa_repository(k, every):
    """An Ubuntu image for Grace nodes installs CUDA from the sbsa folder of NVIDIA's repository of
    its Ubuntu release (matrix.yaml platforms: cuda_repo), with the key checked as for x86_64; its
    devel image is built FROM the arm64 runtime; PyTorch and NCCL from the aarch64 wheel lock."""
    ubuntu = sorted(i for i, s in every.items() if s.platform == "aarch64" and s.os.id.startswith("ubuntu"))
    assert ubuntu and {every[i].stack["pytorch"] for i in ubuntu} >= {"2.13.0", "2.14.1", "2.15.0"}
    for image_id in ubuntu:
        spec, twin = every[image_id], every[image_id[:-len("-arm64")]]
        text = (ROOT / "Dockerfiles" / image_id / "Dockerfile").read_text()
        assert 'io.imagebuild.stack.platform="aarch64"' in text
        if spec.flavor == "devel":
            runtime = every[image_id.replace("-devel-", "-runtime-")]
            assert f"\nFROM {runtime.local_ref}\n" in text and runtime.id.endswith("-arm64")
            continue
        repo = spec.os.nvidia_repo
        assert f"https://developer.download.nvidia.com/compute/cuda/repos/{repo}/sbsa/ /" in text
        assert "/x86_64/ /" not in text
        assert f"/cuda/repos/{repo}/x86_64/ /" in (ROOT / "Dockerfiles" / twin.id / "Dockerfile").read_text()
        assert spec.wheel_lock.endswith("_aarch64.txt") and (ROOT / spec.wheel_lock).is_file()


def test_each_platform_has_its_base_wheels_and_recipe(k, every):
    amd, arm = every[NAME], every[ARM]
    text = {s.id: (ROOT / "Dockerfiles" / s.id / "Dockerfile").read_text() for s in (amd, arm)}
    assert "\nFROM imagebuild/base:debian-bookworm\n" in text[NAME]
    assert "\nFROM imagebuild/base:debian-bookworm-arm64\n" in text[ARM]
    assert 'io.imagebuild.stack.platform="aarch64"' in text[ARM]
    ws = {s.id: wheellock.wheel_set(k, s.stack, s.os, s.wheels, s.toolkit_wheels) for s in (amd, arm)}
    assert ws[NAME].platform == "x86_64-manylinux_2_36" and not ws[NAME].key.endswith("aarch64")
    assert ws[ARM].platform == "aarch64-manylinux_2_36" and ws[ARM].key == ws[NAME].key + "_aarch64"
    lock = (ROOT / arm.wheel_lock).read_text()
    assert "# for: Python 3.11, aarch64-manylinux_2_36" in lock and "\ntorch==2.13.0 \\" in lock
    assert ws[ARM].pip_platform == "manylinux_2_36_aarch64"


def test_local_and_registry_bases_per_platform():
    assert platforms.platform_base("imagebuild/base:debian-bookworm", "linux/arm64") == \
        "imagebuild/base:debian-bookworm-arm64"
    assert platforms.platform_base("imagebuild/base:debian-bookworm", "linux/amd64") == \
        "imagebuild/base:debian-bookworm"
    assert platforms.platform_base("ubuntu:24.04", "linux/arm64") == "ubuntu:24.04"   # an index
    assert platforms.repository_names(ARM) == (ARM, NAME)
    assert platforms.repository_names(NAME) == (NAME,)


def test_for_platform_finds_each_twin_or_names_what_has_none(every):
    chosen = images.select(every, [NAME])
    assert [s.id for s in images.for_platform(every, chosen, "linux/arm64")] == [ARM]
    assert [s.id for s in images.for_platform(every, [every[ARM]], "linux/amd64")] == [NAME]
    with pytest.raises(UsageError) as err:
        images.for_platform(every, images.select(every, ["smoke-cpu"]), "linux/arm64")
    assert "smoke-cpu is not built for linux/arm64" in str(err.value)
    assert "linux/amd64" in str(err.value) and err.value.argument == "--platform"


def test_engine_platform_values_are_checked():
    assert check_platform("linux/arm64") == "linux/arm64" and check_platform(None) is None
    for bad in ("linux/arm64;rm", "linux", "LINUX/ARM64", "linux/arm64/v8/x", "-x/y"):
        with pytest.raises(UsageError):
            check_platform(bad)


def test_build_for_arm64_without_emulation_is_one_line_before_the_engine(tmp_path, monkeypatch, capsys):
    """No binfmt_misc here (a folder that is not mounted): one line naming the image, the missing
    piece, the fix and how to build this host's images only; no engine asked, nothing rendered."""
    original = emulation.check_emulation
    monkeypatch.setattr(emulation, "check_emulation",
                        lambda target: original(target, binfmt=tmp_path / "binfmt_misc"))
    monkeypatch.setattr(emulation, "is_native", lambda target: target.machine == "x86_64")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    code = cli.main(["build", NAME, "--platform", "arm64", "--matrix", str(MATRIX),
                     "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1, err
    assert f"{ARM} is for linux/arm64" in err[0] and "binfmt_misc" in err[0]
    assert "qemu-user-static" in err[0] and "--platform linux/amd64" in err[0]
    assert "no container engine" not in err[0] and not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, words", [
    (["build", NAME, "--platform", "linux/s390x"], "unknown platform 'linux/s390x'"),
    (["build", "smoke-cpu", "--platform", "linux/arm64"], "smoke-cpu is not built for linux/arm64"),
    (["build", "--context", ".", "--platform", "linux/arm64"], "--platform builds matrix images"),
])
def test_bad_platform_arguments_are_one_line(argv, words, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    code = cli.main(argv + ["--matrix", str(MATRIX)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and words in err[0], err


def test_an_unknown_platform_in_a_family_names_its_line(tmp_path, capsys):
    path, line = edit_matrix(tmp_path, r"^    platforms: \[x86_64, aarch64\]$", "    platforms: [x86_64, riscv64]")
    refused_in_one_line(capsys, ["knowledge", "validate", "--matrix", path], path, line,
             "platforms: unknown platform 'riscv64'")


def test_host_wheels_for_another_cpu_ask_pip_for_that_platform(tmp_path, monkeypatch, k, every):
    """A host-wheels image for another CPU: pip is told the image's platform and Python, never
    left to pick wheels for this host's."""
    import subprocess
    seen = []

    def fake_run(cmd, **kw):
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: stop here")

    monkeypatch.setattr(output.subprocess, "run", fake_run)
    arm = every[ARM]
    ws = wheellock.wheel_set(k, arm.stack, arm.os, "host", arm.toolkit_wheels)
    lock = wheellock.parse_lock((ROOT / arm.wheel_lock).read_text(), arm.wheel_lock)
    with pytest.raises(Exception, match="cannot gather the wheels"):
        output.host_wheels(lock, tmp_path / "cache", ws)
    cmd = seen[0]
    assert cmd[cmd.index("--platform") + 1] == "manylinux_2_36_aarch64"
    assert cmd[cmd.index("--python-version") + 1] == "3.11" and "--implementation" in cmd
