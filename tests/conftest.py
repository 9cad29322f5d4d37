"""Shared fixtures. Tests that need a real engine use the `docker_client` fixture: when no engine
answers it skips, except under CI=true, where it fails (CI must have started one)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need(what: str, reason: str):
    """Skip locally, fail under CI=true: a check that did not run is never a pass in CI."""
    if IN_CI:
        pytest.fail(f"{what} is required under CI=true: {reason}")
    pytest.skip(f"{what} not available: {reason}")


# A test that uses one of these fixtures (directly or through another fixture) needs the service:
# it gets the marker, so `-m "not engine"` and the like select exactly the tests that run without.
SERVICE_FIXTURES = {"docker_client": "engine", "smoke_cpu_image": "engine", "registry": "registry",
                    "slurm_cluster": "slurm"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        for fixture, marker in SERVICE_FIXTURES.items():
            if fixture in used and item.get_closest_marker(marker) is None:
                item.add_marker(getattr(pytest.mark, marker))


@pytest.fixture(scope="session")
def docker_client():
    try:
        import docker
        client = docker.from_env(timeout=600)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure means "no engine"
        need("a Docker engine (DOCKER_HOST)", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    return client


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def smoke_cpu_image(docker_client) -> str:
    """smoke-cpu built once per session through the real path: matrix.yaml -> resolver -> renderer
    -> `imagebuild build` on the engine. Returns its local reference."""
    from imagebuild import cli
    from imagebuild.images import load_images

    spec = load_images(ROOT / "matrix.yaml")["smoke-cpu"]
    try:
        docker_client.images.get("imagebuild/base:debian-bookworm")
    except Exception:  # noqa: BLE001 - ImageNotFound
        if cli.main(["base", "debian-bookworm"]) != 0:
            need("the local Debian base image", "imagebuild base debian-bookworm failed")
    code = cli.main(["build", "--matrix", str(ROOT / "matrix.yaml"), "smoke-cpu"])
    assert code == 0, "imagebuild build smoke-cpu failed (see .imagebuild/logs/smoke-cpu.log)"
    docker_client.images.get(spec.local_ref)
    return spec.local_ref
