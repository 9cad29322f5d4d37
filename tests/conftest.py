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
