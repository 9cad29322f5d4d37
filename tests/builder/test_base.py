"""`imagebuild base`: refusals (unknown name, hostile input, no debootstrap, not root), the no-op on
an existing ref, reproducible packing of a root file system, and one real debootstrap run."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys

import pytest

from conftest import need
from imagebuild.builder import baseimage
from imagebuild.builder.baseimage import (
    BASES, base_spec, check_tools, normalize_rootfs, pack_rootfs, write_image_tar,
)
from imagebuild.engines import get_engine
from imagebuild.errors import ImagebuildError, UsageError

BASE = "imagebuild/base:debian-bookworm"


def _cli(*args, env=None, cwd=None, timeout=60):
    return subprocess.run([sys.executable, "-m", "imagebuild", "base", *args], capture_output=True,
                          text=True, timeout=timeout, env=env or dict(os.environ), cwd=cwd)


@pytest.mark.parametrize("args, want", [
    (["debian-sid"], "unknown base 'debian-sid' (known: debian-bookworm)"),
    (["debian-bookworm", "--mirror", "http://mirror.example;rm -rf /"], "invalid mirror"),
    (["debian-bookworm", "--mirror", "ftp://x/"], "invalid mirror"),
    (["debian-bookworm", "--ref", "Base:$(id)"], "invalid image reference"),
    (["debian-bookworm", "--platform", "linux/riscv64"], "unknown platform 'linux/riscv64'"),
])
def test_bad_input_is_one_line_before_anything_runs(args, want, tmp_path):
    env = dict(os.environ, DOCKER_HOST=f"unix://{tmp_path}/no.sock")   # must not even be asked
    proc = _cli(*args, env=env, cwd=tmp_path)
    assert proc.returncode == 2
    assert want in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_supported_bases_are_data():
    for name, spec in BASES.items():
        assert spec.name == name and spec.tool == "debootstrap" and spec.epoch > 0
    with pytest.raises(UsageError):
        base_spec("ubuntu-jammy")


def test_refuses_without_debootstrap_or_root(monkeypatch, tmp_path):
    spec = BASES["debian-bookworm"]
    monkeypatch.setenv("PATH", str(tmp_path))           # an empty PATH: no debootstrap
    with pytest.raises(ImagebuildError, match="debootstrap is not installed"):
        check_tools(spec)
    monkeypatch.undo()
    if not shutil.which("debootstrap"):
        need("debootstrap", "apt-get install debootstrap")
    monkeypatch.setattr(baseimage.os, "geteuid", lambda: 1000)
    with pytest.raises(ImagebuildError, match="needs root"):
        check_tools(spec)


@pytest.fixture(scope="session")
def engine(docker_client):
    eng = get_engine("docker", client=docker_client)
    if not eng.exists(BASE):
        need(f"the base image {BASE}", "create it with `imagebuild base debian-bookworm`")
    return eng


def test_debootstrap_must_check_the_release_signature(monkeypatch, tmp_path):
    """debootstrap is told to check the Release signature against the archive keyring and to
    stop rather than fall back; a missing keyring is one line before anything runs."""
    if os.geteuid() != 0:
        need("root", "imagebuild base runs debootstrap as root")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    argv_file = tmp_path / "argv"
    fake = bindir / "debootstrap"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {argv_file}\necho "E: stop here"\nexit 1\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    with pytest.raises(ImagebuildError, match="debootstrap failed"):
        baseimage.create_base("debian-bookworm", engine=None, force=True, workdir=tmp_path / "w")
    argv = argv_file.read_text().splitlines()
    assert argv[:2] == ["--force-check-gpg", "--keyring=/usr/share/keyrings/debian-archive-keyring.gpg"]
    missing = baseimage.BaseSpec("x", "debootstrap", "bookworm", "minbase", 1, "x", str(tmp_path / "none.gpg"))
    monkeypatch.setitem(baseimage.BASES, "x", missing)
    with pytest.raises(ImagebuildError, match=r"archive keyring .*none.gpg is missing"):
        baseimage.create_base("x", engine=None, force=True, workdir=tmp_path / "w")


def test_existing_ref_is_left_alone(engine):
    before = engine.inspect(BASE).id
    proc = _cli("debian-bookworm")
    assert proc.returncode == 0, proc.stderr
    assert "already exists" in proc.stdout and before in proc.stdout
    assert engine.inspect(BASE).id == before


def test_same_root_file_system_gives_the_same_image_id(engine, docker_client, tmp_path):
    """Two copies of one root file system, touched at different times, normalize and pack to the
    same layer and load as the same image id (no network: the rootfs comes from the base image)."""
    spec = BASES["debian-bookworm"]
    container = docker_client.containers.create(BASE, ["true"])
    try:
        export = tmp_path / "rootfs.tar"
        with open(export, "wb") as f:
            for chunk in container.export():
                f.write(chunk)
    finally:
        container.remove(force=True)
    ids, layers = [], []
    token = secrets.token_hex(4)
    for n in ("a", "b"):
        root = tmp_path / n / "rootfs"
        root.mkdir(parents=True)
        subprocess.run(["tar", "-C", str(root), "-xf", str(export)], check=True)
        (root / "var/log/dpkg.log").write_text(f"run {n}: {secrets.token_hex(8)}\n")   # differs per run
        (root / "etc/hostname").write_text(f"builder-{n}\n")
        (root / "etc/resolv.conf").write_text(f"nameserver 10.0.0.{len(n)}\n")
        normalize_rootfs(root, spec.epoch)
        diff_id = pack_rootfs(root, tmp_path / n / "layer.tar", spec.epoch)
        ref = f"imagebuild/test-base-{n}:{token}"
        image_id = write_image_tar(tmp_path / n / "layer.tar", diff_id, tmp_path / n / "image.tar",
                                   ref=ref, spec=spec)
        engine.load(tmp_path / n / "image.tar")
        assert engine.inspect(ref).id == image_id
        ids.append(image_id)
        layers.append(diff_id)
    try:
        assert ids[0] == ids[1] and layers[0] == layers[1]
        info = engine.inspect(f"imagebuild/test-base-a:{token}")
        assert info.layers == (layers[0],)
        assert info.labels["io.imagebuild.base"] == "debian-bookworm"
        out = engine.run(info.id, ["sh", "-c", "cat /etc/debian_version; cut -d: -f3 /etc/shadow | sort -u; "
                                               "echo $(ls -A /var/lib/apt/lists); "
                                               "test -e /var/log/dpkg.log && echo dpkg.log || echo no-dpkg.log"],
                         timeout=60).output.splitlines()
        assert out[0].startswith("12.")
        assert out[1:] == [str(spec.epoch // 86400), "partial", "no-dpkg.log"]
    finally:
        for n in ("a", "b"):
            ref = f"imagebuild/test-base-{n}:{token}"
            if engine.exists(ref):
                engine.remove(ref)


def test_the_sessions_base_is_what_base_makes(engine):
    """The base the test command's set-up made with `imagebuild base debian-bookworm` (scripts/setup:
    debootstrap from the default mirror, normalised, loaded) is checked here, instead of making it
    again: one layer, labelled, apt runs in it, and its debootstrap log shows the Release signature
    was checked. The second debootstrap for the same ID is the heavy tier's
    (test_debootstrap_end_to_end)."""
    from pathlib import Path

    if not engine.exists(BASE):
        need(BASE, "scripts/setup makes it with `imagebuild base debian-bookworm`")
    info = engine.inspect(BASE)
    assert info.labels.get("io.imagebuild.base") == "debian-bookworm" and len(info.layers) == 1
    out = engine.run(BASE, ["sh", "-c", "cat /etc/debian_version; apt-get --version | head -n 1"], timeout=60)
    assert out.ok and out.output.startswith("12.") and "apt " in out.output
    log = Path(os.environ.get("TMPDIR", "/var/tmp")) / "imagebuild-base-debian-bookworm.log"   # baseimage's
    if not log.is_file():
        need(f"the set-up's debootstrap log {log}", "the base was not made in this run's set-up")
    text = log.read_text(errors="replace")
    assert "Base system installed successfully" in text
    assert "Valid Release signature" in text        # --force-check-gpg: checked, never skipped


@pytest.mark.heavy
def test_debootstrap_end_to_end(engine, tmp_path):
    """The real thing again: debootstrap from the default mirror, normalize, load; about a minute.
    Heavy tier: the set-up already made this base, and its only new information is the same ID
    from a second run (test_the_sessions_base_is_what_base_makes checks the first in CI)."""
    if not shutil.which("debootstrap") or os.geteuid() != 0:
        need("debootstrap as root", "apt-get install debootstrap and run the tests as root")
    ref = f"imagebuild/test-base:{secrets.token_hex(4)}"
    proc = _cli("debian-bookworm", "--ref", ref, "--workdir", str(tmp_path), "--log",
                str(tmp_path / "debootstrap.log"), timeout=600)
    try:
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.startswith(f"created {ref} sha256:")
        log = (tmp_path / "debootstrap.log").read_text()
        assert "Base system installed successfully" in log
        assert "Valid Release signature" in log  # --force-check-gpg: checked, never skipped
        assert [p.name for p in tmp_path.iterdir()] == ["debootstrap.log"]    # temp tree removed
        info = engine.inspect(ref)
        assert len(info.layers) == 1 and info.env["PATH"].startswith("/usr/local/sbin")
        out = engine.run(ref, ["sh", "-c", "cat /etc/debian_version; apt-get --version | head -n 1"],
                         timeout=60)
        assert out.ok and out.output.startswith("12.") and "apt " in out.output
        # reproducibility: against the machine's base when `imagebuild base` made it too, the same
        # package versions must give the very same image id (a mirror update may change versions)
        if engine.inspect(BASE).labels.get("io.imagebuild.base") == "debian-bookworm":
            q = ["dpkg-query", "-W", "-f", "${Package} ${Version}\n"]
            mine, theirs = engine.run(ref, q, timeout=60), engine.run(BASE, q, timeout=60)
            assert mine.ok and theirs.ok and len(mine.output.splitlines()) > 50
            if mine.output == theirs.output:
                assert info.id == engine.inspect(BASE).id
        again = _cli("debian-bookworm", "--ref", ref)
        assert again.returncode == 0 and "already exists" in again.stdout
        assert engine.inspect(ref).id == info.id
    finally:
        if engine.exists(ref):
            engine.remove(ref, force=True)


@pytest.mark.heavy
def test_an_arm64_base_under_emulation(engine, tmp_path):
    """Issue 29: the same base for linux/arm64 on this x86_64 host, debootstrap's second stage run
    by QEMU through binfmt_misc. Its programs run in a container (uname says aarch64), its config
    says arm64/v8, and the host platform's base of the same name is refused over it. Heavy tier:
    emulated dpkg takes minutes (docs/benchmarks.md)."""
    from conftest import answer
    from imagebuild.builder.emulation import PLATFORMS, check_emulation

    if not shutil.which("debootstrap") or os.geteuid() != 0:
        need("debootstrap as root", "apt-get install debootstrap and run the tests as root")
    try:
        check_emulation(PLATFORMS["linux/arm64"])
    except ImagebuildError as exc:
        need("arm64 emulation", str(exc))
    ref = f"imagebuild/test-base-arm64:{secrets.token_hex(4)}"
    proc = _cli("debian-bookworm", "--platform", "linux/arm64", "--ref", ref, "--workdir", str(tmp_path),
                "--log", str(tmp_path / "debootstrap.log"), "--json", timeout=3600)
    try:
        assert proc.returncode == 0, proc.stderr[-2000:]
        doc = answer(proc.stdout, "base")
        assert doc["platform"] == "linux/arm64" and doc["created"] and doc["ref"] == ref
        assert "under emulation (" in proc.stderr and "flags " in proc.stderr
        assert "Valid Release signature" in (tmp_path / "debootstrap.log").read_text()
        info = engine.inspect(ref)
        assert info.architecture == "arm64" and info.id == doc["image_id"] and len(info.layers) == 1
        out = engine.run(ref, ["sh", "-c", "uname -m; dpkg --print-architecture; cat /etc/debian_version"],
                         timeout=300)
        machine, arch, version = out.output.split()
        assert out.ok and (machine, arch) == ("aarch64", "arm64") and version.startswith("12.")
        # the host platform's base under the same name is refused, not silently "already there"
        again = _cli("debian-bookworm", "--ref", ref, "--platform", "linux/amd64")
        assert again.returncode == 2 and f"{ref} exists for arm64, not amd64" in again.stderr
    finally:
        if engine.exists(ref):
            engine.remove(ref, force=True)


def test_dead_mirror_is_one_line_and_leaves_nothing(engine, tmp_path):
    if not shutil.which("debootstrap") or os.geteuid() != 0:
        need("debootstrap as root", "apt-get install debootstrap and run the tests as root")
    ref = f"imagebuild/test-base-dead:{secrets.token_hex(4)}"
    proc = _cli("debian-bookworm", "--ref", ref, "--mirror", "http://127.0.0.1:9/debian", "--workdir",
                str(tmp_path), "-q", timeout=120)
    assert proc.returncode == 2
    line = proc.stderr.strip()
    assert "\n" not in line and "debootstrap failed" in line and "127.0.0.1:9" in line, proc.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["imagebuild-base-debian-bookworm.log"]
    assert not engine.exists(ref)
