"""Container engines behind one small interface; the only package of imagebuild that knows the
docker SDK.

`get_engine()` returns an `Engine` for the engine in DOCKER_HOST: Docker itself, or podman's
Docker-compatible socket (`podman system service`); without DOCKER_HOST, the Docker CLI's context
(DOCKER_CONTEXT, `docker context use`) or Docker's or podman's default socket (endpoint.py).
Everything that talks to an engine goes through it, so "no engine" is one clear error everywhere.

`Engine` (engines/base.py) is the interface the rest of imagebuild uses: build, run, run_many,
network, inspect, lookup, exists, remove, tag, untag, push, save, save_stream, load, load_stream,
layer_sizes, export_filesystem and containers (a ContainerSession for the smoke run). Two
implementations:

- `docker_sdk.DockerEngine`: the docker SDK against Docker or podman (classic builder for builds;
  builds that need BuildKit go through the BuildKit CLI, buildkit_cli.py).
- `buildkit.BuildKitEngine`: the same, except that every build goes through the BuildKit CLI
  (`DOCKER_BUILDKIT=1 /usr/bin/docker build`), which is needed for `RUN --mount=type=secret`.

The values exchanged are small frozen dataclasses (engines/base.py), so a caller never sees a
docker SDK object; failures are imagebuild's errors (EngineError; NoSuchImage, EngineRefused with
the engine's own words). Every name that may reach a command line (image references, container
and network names, build-arg and label keys, secret ids) is checked against a strict pattern
before use.

The modules import one way only: base <- common <- buildkit_cli <- docker_sdk <- buildkit, and
this package's __init__ imports them (get_engine's BuildKitEngine lazily).
"""

from __future__ import annotations

from ..errors import UsageError
from .base import (
    HOSTNAME_RE, KEY_RE, NAME_RE, SECRET_ID_RE, SIZE_RE, BuildResult, Container,
    ContainerSession, Engine, ImageInfo, Mount, Progress, PushResult, RunResult, RunSpec,
    check_hostname, check_key, check_mapping, check_name, check_ref, check_secrets, check_value,
    docker_host, dockerfile_needs_buildkit,
)
from .docker_sdk import DockerEngine, connect, registry_auth


def get_engine(kind: str = "docker", *, client=None) -> Engine:
    """An engine for DOCKER_HOST. kind: "docker" (docker SDK; also podman's socket) or "buildkit"
    (builds through the BuildKit CLI, everything else through the SDK). ``client``: a docker SDK
    client to use (tests), else one is connected."""
    if kind == "docker":
        return DockerEngine(client)
    if kind == "buildkit":
        from .buildkit import BuildKitEngine
        return BuildKitEngine(client)
    raise UsageError(f"unknown engine {kind!r} (one of: docker, buildkit)")


__all__ = [
    "BuildResult", "Container", "ContainerSession", "DockerEngine", "Engine", "HOSTNAME_RE",
    "ImageInfo", "KEY_RE", "Mount", "NAME_RE", "Progress", "PushResult",
    "RunResult", "RunSpec", "SECRET_ID_RE", "SIZE_RE", "check_hostname", "check_key",
    "check_mapping", "check_name", "check_ref", "check_secrets", "check_value", "connect",
    "docker_host", "dockerfile_needs_buildkit", "get_engine", "registry_auth",
]
