"""Container engines behind one small interface.

`connect()` returns a docker SDK client for the engine in DOCKER_HOST: Docker itself, or podman's
Docker-compatible socket (`podman system service`). Everything that talks to an engine goes
through it, so "no engine" is one clear error everywhere.
"""

from __future__ import annotations

import os

from ..errors import EngineError


def connect(timeout: int = 900):
    """A pinged docker SDK client, or EngineError naming DOCKER_HOST."""
    try:
        import docker
        from docker.errors import DockerException
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise EngineError(f"the docker SDK is not installed ({exc})") from None
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except DockerException as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise EngineError(f"no container engine answers at DOCKER_HOST={host} ({first}); "
                          "start dockerd (see .ci/start-docker.sh) or podman's API service") from None
    except Exception as exc:  # noqa: BLE001 - requests/urllib3 errors from a dead socket
        raise EngineError(f"no container engine answers at DOCKER_HOST={host} "
                          f"({type(exc).__name__})") from None
    return client
