"""The BuildKit CLI engine: builds with `DOCKER_BUILDKIT=1 docker build --progress=plain`
(engines/buildkit_cli.py), needed for `RUN --mount=type=secret`.

Everything but `build` (run, inspect, save, ...) is the docker SDK engine's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from .base import BuildCache, BuildResult, Progress
from .buildkit_cli import DEFAULT_CLI, build_with_cli, docker_cli
from .docker_sdk import DockerEngine

__all__ = ["BuildKitEngine", "DEFAULT_CLI", "docker_cli"]


class BuildKitEngine(DockerEngine):
    """DockerEngine whose builds all run through the BuildKit CLI."""

    def build(self, context: Path, ref: str, *, dockerfile: str = "Dockerfile",
              buildargs: Mapping[str, str] | None = None, labels: Mapping[str, str] | None = None,
              secrets: Mapping[str, Path] | None = None, log: Path,
              progress: Progress | None = None, no_cache: bool = False,
              cache: BuildCache | None = None, platform: str | None = None) -> BuildResult:
        return build_with_cli(context, ref, engine_name=self.name, inspect=self.inspect,
                              dockerfile=dockerfile, buildargs=buildargs, labels=labels,
                              secrets=secrets, log=log, progress=progress, no_cache=no_cache,
                              cache=cache, platform=platform)
