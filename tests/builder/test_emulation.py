"""Platforms and the emulation check (issue 29). The check reads binfmt_misc's files: here a
folder laid out as the kernel lays out /proc/sys/fs/binfmt_misc, for each way it can be wrong.
The real thing is used by test_base.py's arm64 base (heavy tier)."""

from __future__ import annotations

import json

import pytest

from imagebuild.builder import baseimage, emulation
from imagebuild.builder.emulation import PLATFORMS, check_emulation, platform_of
from imagebuild.errors import ImagebuildError, UsageError

ARM = PLATFORMS["linux/arm64"]
AMD = PLATFORMS["linux/amd64"]

# what Debian's qemu-user-static registers (flags: P preserve argv[0], O open binary, C
# credentials, F fix binary)
ENTRY = """enabled
interpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P
flags: POCF
offset 0
magic 7f454c460201010000000000000000000200b700
mask ffffffffffffff00fffffffffffffffffeffffff
"""


@pytest.mark.parametrize("typed, oci", [
    ("linux/arm64", "linux/arm64"), ("arm64", "linux/arm64"), ("aarch64", "linux/arm64"),
    ("LINUX/ARM64/V8", "linux/arm64"), ("sbsa", "linux/arm64"), ("amd64", "linux/amd64"),
    ("x86_64", "linux/amd64"), (" linux/amd64 ", "linux/amd64")])
def test_platform_names_users_type(typed, oci):
    assert platform_of(typed).oci == oci


@pytest.mark.parametrize("typed", ["", "linux/riscv64", "arm", "windows/amd64", "linux/arm64;rm -rf /"])
def test_unknown_platforms_are_refused_naming_the_argument(typed):
    with pytest.raises(UsageError) as err:
        platform_of(typed)
    assert "--platform" in str(err.value) and "linux/arm64" in str(err.value)


@pytest.fixture
def on_x86(monkeypatch):
    monkeypatch.setattr(emulation._platform, "machine", lambda: "x86_64")


def _binfmt(tmp_path, status="enabled", entry=ENTRY):
    root = tmp_path / "binfmt_misc"
    root.mkdir()
    if status is not None:
        (root / "status").write_text(status + "\n")
        (root / "register").write_text("")
    if entry is not None:
        (root / "qemu-aarch64").write_text(entry)
    return root


def test_native_needs_nothing(on_x86, tmp_path):
    assert check_emulation(AMD, tmp_path / "absent") == ""


def test_a_registered_emulator_with_the_f_flag_is_enough(on_x86, tmp_path, monkeypatch):
    monkeypatch.setattr(emulation, "qemu_version", lambda interpreter: None)
    binfmt = _binfmt(tmp_path)
    assert check_emulation(ARM, binfmt) == "aarch64-binfmt-P via binfmt_misc, flags POCF"
    monkeypatch.setattr(emulation, "qemu_version", lambda interpreter: "7.2.0")
    how = check_emulation(ARM, binfmt)
    assert how == "aarch64-binfmt-P (QEMU 7.2.0) via binfmt_misc, flags POCF"
    # QEMU 7.2 runs debootstrap and pip, but PyTorch's aarch64 wheels die at import under it
    assert "QEMU 8 or later" in emulation.too_old_for_pytorch(how)
    assert emulation.too_old_for_pytorch(how.replace("7.2.0", "10.0.2")) is None
    assert emulation.too_old_for_pytorch("aarch64-binfmt-P via binfmt_misc, flags POCF") is None


def test_the_emulator_s_version_is_read_from_it_by_its_real_name(tmp_path):
    fake = tmp_path / "qemu-aarch64"
    fake.write_text("#!/bin/sh\n[ \"$1\" = --version ] && echo 'qemu-aarch64 version 10.0.2 (Debian 1:10.0.2)'\n")
    fake.chmod(0o755)
    alias = tmp_path / "aarch64-binfmt-P"
    alias.symlink_to(fake)
    assert emulation.qemu_version(str(alias)) == "10.0.2"
    assert emulation.qemu_version(str(tmp_path / "missing")) is None


@pytest.mark.parametrize("status, entry, says", [
    (None, None, "mount -t binfmt_misc binfmt_misc"),
    ("disabled", ENTRY, "needs binfmt_misc, which is disabled"),
    ("enabled", None, "apt-get install qemu-user-static"),
    ("enabled", ENTRY.replace("enabled\n", "disabled\n", 1), "registered but disabled"),
    ("enabled", ENTRY.replace("flags: POCF", "flags: POC"), "without the F (fix-binary) flag"),
])
def test_what_is_missing_is_one_line_with_its_fix(on_x86, tmp_path, monkeypatch, status, entry, says):
    monkeypatch.setattr(emulation, "BINFMT_D", tmp_path / "no-binfmt.d")
    with pytest.raises(ImagebuildError) as err:
        check_emulation(ARM, _binfmt(tmp_path, status, entry))
    text = str(err.value)
    assert says in text and "\n" not in text
    assert "linux/arm64" in text or "aarch64" in text


def test_an_installed_but_unregistered_emulator_is_told_how_to_register(on_x86, tmp_path, monkeypatch):
    """In a container without systemd, installing qemu-user-static registers nothing."""
    conf = tmp_path / "binfmt.d"
    conf.mkdir()
    (conf / "qemu-aarch64.conf").write_text(":qemu-aarch64:M::...:OPF\n")
    monkeypatch.setattr(emulation, "BINFMT_D", conf)
    root = _binfmt(tmp_path, entry=None)
    with pytest.raises(ImagebuildError) as err:
        check_emulation(ARM, root)
    assert f"`cat {conf / 'qemu-aarch64.conf'} > {root / 'register'}`" in str(err.value)


def test_base_refs_and_configs_per_platform():
    spec = baseimage.base_spec("debian-bookworm")
    assert baseimage.default_ref("debian-bookworm", AMD) == "imagebuild/base:debian-bookworm"
    assert baseimage.default_ref("debian-bookworm", ARM) == "imagebuild/base:debian-bookworm-arm64"
    diff = "sha256:" + "a" * 64
    arm = json.loads(baseimage.image_config(diff, spec, ARM))
    amd = json.loads(baseimage.image_config(diff, spec, AMD))
    assert (arm["architecture"], arm["variant"]) == ("arm64", "v8") and "--arch=arm64" in arm["history"][0]["created_by"]
    # the amd64 config is the one made before platforms existed: same bytes, same base image ID
    assert amd["architecture"] == "amd64" and "variant" not in amd
    assert "--arch" not in amd["history"][0]["created_by"]
