"""Portable build contexts (issue 27): a context built by BuildKit (`docker build`, no imagebuild
inside) and by buildah (`buildah bud --layers`), each brought to imagebuild's form with
`imagebuild normalize`, is one image ID.

On the real engine and a real buildah with a private image store. The fast tier builds a small
context that uses every instruction form of the generated recipes' last stages
(tests/fixtures/contexts/two-stage); the heavy tier builds smoke-cpu's real context, as
`imagebuild context` writes it, with buildah and compares it with `imagebuild build`'s image."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import CA_BUNDLE, ROOT, answer, need

from imagebuild import cli

pytestmark = pytest.mark.engine

BASE = "imagebuild/base:debian-bookworm"
FIXTURE = ROOT / "tests" / "fixtures" / "contexts" / "two-stage"


@pytest.fixture(scope="module")
def buildah(tmp_path_factory, docker_client):
    """buildah with an image store of its own, holding the engine's Debian base; returns a
    function running `buildah ARGS` in that store."""
    if shutil.which("buildah") is None:
        need("buildah (Debian package buildah)", "not on PATH")
    try:
        docker_client.images.get(BASE)
    except Exception:  # noqa: BLE001 - ImageNotFound
        if cli.main(["base", "debian-bookworm"]) != 0:
            need("the local Debian base image", "imagebuild base debian-bookworm failed")
    root = tmp_path_factory.mktemp("buildah")
    store = ["--root", str(root / "storage"), "--runroot", str(root / "run")]

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(["buildah", *store, *args], capture_output=True, text=True, timeout=3600)
        if check:
            assert proc.returncode == 0, f"buildah {' '.join(args)}: {proc.stderr[-2000:]}"
        return proc

    archive = root / "base.tar"
    with open(archive, "wb") as fh:
        for chunk in docker_client.images.get(BASE).save(named=True):
            fh.write(chunk)
    run("pull", "-q", f"docker-archive:{archive}")
    archive.unlink()
    yield run
    run("rmi", "--all", "--force", check=False)
    shutil.rmtree(root, ignore_errors=True)


def _into_engine(buildah, docker_client, name: str, ref: str, tmp_path: Path) -> str:
    """Copy buildah's image ``name`` into the engine as ``ref``; returns its ID there."""
    archive = tmp_path / f"{name.replace('/', '_').replace(':', '_')}.tar"
    buildah("push", "-q", name, f"docker-archive:{archive}:{ref}")
    with open(archive, "rb") as fh:
        loaded = {image.id for image in docker_client.images.load(fh)}   # under ref and buildah's own name
    archive.unlink()
    assert len(loaded) == 1, loaded
    return loaded.pop()


def _remove(docker_client, *refs: str) -> None:
    """The images ``refs`` name, with every other name they have (buildah's localhost/...)."""
    for ref in refs:
        try:
            docker_client.images.remove(docker_client.images.get(ref).id, force=True)
        except Exception:  # noqa: BLE001 - not built, or gone with another name
            pass


def _normalize(ref: str, context: Path, capsys) -> tuple[str, list[str]]:
    assert cli.main(["normalize", ref, "--context", str(context), "--json"]) == 0
    captured = capsys.readouterr()
    return answer(captured.out, "normalize")["image_id"], captured.err.splitlines()


def _buildkit_build(ref: str, context: Path) -> None:
    from imagebuild.engines.buildkit_cli import docker_cli
    build = subprocess.run([docker_cli(), "build", "-q", "--secret", f"id=ca-bundle,src={CA_BUNDLE}", "-t", ref,
                            str(context)], capture_output=True, text=True, timeout=3600,
                           env=dict(os.environ, DOCKER_BUILDKIT="1"))
    assert build.returncode == 0, build.stderr[-2000:]


def test_buildkit_and_buildah_builds_of_one_context_normalise_to_one_image_id(
        buildah, docker_client, tmp_path, capsys):
    ctx = tmp_path / "two-stage"
    shutil.copytree(FIXTURE, ctx)
    refs = {"buildkit": "imagebuild-test/two-stage:buildkit", "buildah": "imagebuild-test/two-stage:buildah"}
    try:
        _buildkit_build(refs["buildkit"], ctx)
        buildah("bud", "--layers", "--format", "docker", "-q", "--secret", f"id=ca-bundle,src={CA_BUNDLE}",
                "-t", "two-stage:bud", str(ctx))
        raw = _into_engine(buildah, docker_client, "two-stage:bud", refs["buildah"], tmp_path)
        builder_ids = {docker_client.images.get(refs["buildkit"]).id, raw}
        ids = {}
        for builder, ref in refs.items():
            ids[builder], said = _normalize(ref, ctx, capsys)
            assert any("built by buildah" in line for line in said) == (builder == "buildah"), said
        assert ids["buildkit"] == ids["buildah"]
        assert len(builder_ids) == 2 and ids["buildah"] not in builder_ids     # two builders, two images
        # the same files, and the image runs: the secret reached the step (a CA bundle), the
        # entry point and command are BuildKit's
        out = docker_client.containers.run(refs["buildah"], remove=True)
        assert out == b"hello\n"
        had = docker_client.containers.run(refs["buildah"], ["-c", "cat /opt/imagebuild/had-secret /opt/stage/file"],
                                           remove=True)
        assert had == b"secret\nfrom-stage\n"
        config = docker_client.images.get(refs["buildah"]).attrs["Config"]
        assert "io.buildah.version" not in (config.get("Labels") or {})
    finally:
        _remove(docker_client, *refs.values())


def test_a_buildah_build_without_layers_is_refused_in_one_line(buildah, docker_client, tmp_path, capsys):
    """Without --layers buildah commits one layer for the whole stage: no rewriting of the config
    can give BuildKit's image, so normalize says so and leaves the image as it is."""
    ctx = tmp_path / "two-stage"
    shutil.copytree(FIXTURE, ctx)
    ref = "imagebuild-test/two-stage:squashed"
    buildah("bud", "--format", "docker", "-q", "--secret", f"id=ca-bundle,src={CA_BUNDLE}", "-t", "two-stage:squashed",
            str(ctx))
    raw = _into_engine(buildah, docker_client, "two-stage:squashed", ref, tmp_path)
    try:
        assert cli.main(["normalize", ref, "--context", str(ctx)]) != 0
        err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("imagebuild normalize:")]
        assert len(err) == 1 and "not a `buildah bud --layers` build of this context" in err[0], err
        assert docker_client.images.get(ref).id == raw
    finally:
        _remove(docker_client, ref)


@pytest.mark.heavy
def test_smoke_cpu_context_built_by_buildah_has_imagebuild_builds_image_id(
        buildah, docker_client, tmp_path, capsys):
    """The real thing: smoke-cpu's context as `imagebuild context` writes it, built by buildah
    (its apt packages from the network, the host's wheels in the context), normalised, is the
    image `imagebuild build --ca-bundle` makes (BuildKit)."""
    matrix = str(ROOT / "matrix.yaml")
    assert cli.main(["build", "--matrix", matrix, "--ca-bundle", str(CA_BUNDLE), "smoke-cpu", "--json"]) == 0
    built = json.loads(capsys.readouterr().out)["result"][0]["image_id"]
    assert cli.main(["context", "--matrix", matrix, "smoke-cpu", "--output", str(tmp_path), "--json"]) == 0
    doc = answer(capsys.readouterr().out, "context")["contexts"][0]
    ctx = tmp_path / "smoke-cpu"
    ref = "imagebuild-test/smoke-cpu:buildah"
    buildah("bud", "--layers", "--format", "docker", "-q", "--secret", f"id=ca-bundle,src={CA_BUNDLE}",
            "-t", "smoke-cpu:bud", str(ctx))
    _into_engine(buildah, docker_client, "smoke-cpu:bud", ref, tmp_path)
    try:
        image_id, said = _normalize(ref, ctx, capsys)
        assert any("built by buildah" in line for line in said), said
        assert image_id == built == docker_client.images.get(doc["ref"]).id
    finally:
        _remove(docker_client, ref)
