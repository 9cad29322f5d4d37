"""Builds through the BuildKit CLI: `DOCKER_BUILDKIT=1 docker build --progress=plain`.

The docker SDK only speaks the classic builder, which knows no `RUN --mount=type=secret`. A build
that needs a secret (a site CA bundle, a token) runs the Docker CLI with BuildKit instead: the
secret is mounted at /run/secrets/<id> for the RUN steps that ask for it and is never written to
a layer. No `# syntax=` line can be used (the frontend image cannot be pulled here); the engine's
built-in Dockerfile frontend understands `RUN --mount`.

`build_with_cli` is the build alone: DockerEngine hands it the builds that need BuildKit, and
BuildKitEngine (engines/buildkit.py) all of its builds. Everything else (run, inspect, save, ...)
is the docker SDK engine's.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Mapping

from ..errors import EngineError
from .base import (BuildCache, BuildResult, ImageInfo, Progress, check_mapping, check_platform, check_ref,
                   check_secrets, docker_host)
from .common import _one_line, _open_log, cancellable, check_context, step_failure

DEFAULT_CLI = "/usr/bin/docker"   # Debian's client: speaks to the 20.10 engine's built-in BuildKit

# "#5 [2/4] RUN echo hi", "#7 [devel 3/9] COPY a b", "#2 [internal] load .dockerignore"
_VERTEX_RE = re.compile(r"^#(\d+) \[([^\]]+)\] (.*)\Z")
_STEPNO_RE = re.compile(r"^(?:(\S+) )?(\d+)/(\d+)\Z")
_CACHED_RE = re.compile(r"^#(\d+) CACHED\Z")
_ERROR_RE = re.compile(r"^#(\d+) ERROR: (.*)\Z")
_OUTPUT_RE = re.compile(r"^#(\d+) \d+\.\d+ (.*)\Z")


def docker_cli() -> str:
    cli = os.environ.get("IMAGEBUILD_DOCKER_CLI", DEFAULT_CLI)
    path = shutil.which(cli)
    if not path:
        raise EngineError(f"BuildKit builds need the Docker CLI at {cli} (Debian package docker.io; "
                          "set IMAGEBUILD_DOCKER_CLI to use another client with built-in BuildKit)")
    return path


def build_with_cli(context: Path, ref: str, *, engine_name: str, inspect: Callable[[str], ImageInfo],
                   dockerfile: str = "Dockerfile", buildargs: Mapping[str, str] | None = None,
                   labels: Mapping[str, str] | None = None, secrets: Mapping[str, Path] | None = None,
                   log: Path, progress: Progress | None = None, no_cache: bool = False,
                   cache: BuildCache | None = None, platform: str | None = None) -> BuildResult:
    """Build ``ref`` with the BuildKit CLI against the engine at DOCKER_HOST (``engine_name``
    "docker" or "podman", which has no BuildKit); ``inspect`` reads the built image back."""
    if engine_name == "podman":
        raise EngineError(f"building {ref}: secrets and RUN --mount need BuildKit, which podman's "
                          f"Docker API at DOCKER_HOST={docker_host()} does not offer; use Docker")
    context, dockerfile_path = check_context(context, dockerfile)
    check_ref(ref)
    buildargs = check_mapping(buildargs, "build argument")
    labels = check_mapping(labels, "label")
    secrets = check_secrets(secrets)
    platform = check_platform(platform)
    cli = docker_cli()
    progress = progress or (lambda _line: None)

    with tempfile.TemporaryDirectory(prefix="imagebuild-bk-") as tmp:
        iidfile = Path(tmp) / "iid"
        argv = _argv(cli, iidfile, dockerfile_path, ref, context, labels=labels, buildargs=buildargs,
                     secrets=secrets, no_cache=no_cache, cache=cache, platform=platform)
        env = dict(os.environ, DOCKER_BUILDKIT="1", DOCKER_HOST=docker_host())
        if cache is not None and cache.docker_config is not None:
            env["DOCKER_CONFIG"] = str(cache.docker_config)     # the cache registry's credentials
        env.pop("BUILDKIT_PROGRESS", None)

        seen = _BuildLog(progress)
        t0 = time.monotonic()
        with _open_log(log) as out:
            out.write(f"# imagebuild: build {ref} from {context} ({dockerfile}), BuildKit CLI"
                      f"{' with secrets ' + ','.join(secrets) if secrets else ''}\n")
            try:
                proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=env, text=True,
                                        encoding="utf-8", errors="replace", bufsize=1)
            except OSError as exc:
                raise EngineError(f"building {ref}: cannot run {cli}: {exc.strerror}") from None

            def stop(proc=proc) -> None:
                # the CLI cancels its BuildKit session on SIGINT, which stops the running
                # step; killed if it has not ended 10 s later
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
                    timer = threading.Timer(10, lambda: proc.poll() is None and proc.kill())
                    timer.daemon = True
                    timer.start()

            with cancellable(stop):
                try:
                    assert proc.stdout is not None
                    for line in proc.stdout:
                        out.write(line)
                        seen.feed(line.rstrip("\n"))
                    rc = proc.wait()
                except BaseException:
                    proc.kill()
                    proc.wait()
                    raise
        seconds = time.monotonic() - t0
        if rc != 0:
            if seen.failed is not None:
                vid, err = seen.failed
                raise step_failure(ref, seen.names.get(vid, f"#{vid}"), _one_line(err),
                                   list(seen.outputs.get(vid, ())), log)
            raise step_failure(ref, "", f"docker build exited with {rc}", list(seen.last_lines), log)
        try:
            image_id = iidfile.read_text().strip()
        except OSError:
            raise step_failure(ref, "", "BuildKit wrote no image id", list(seen.last_lines), log) from None
    info = inspect(image_id)
    return BuildResult(ref=ref, image_id=info.id, size_bytes=info.size, seconds=seconds,
                       steps=len(seen.counted), cached_steps=len(seen.cached), log_path=Path(log))


class _BuildLog:
    """What the BuildKit CLI's plain progress says, line by line: each vertex's name ("2/4 RUN
    ..."), which are build steps (not FROM or BuildKit's own) and which came from the cache (each
    reported to ``progress`` once), the last lines of each step's output, the first error, and the
    last lines of all."""

    def __init__(self, progress: Progress):
        self.progress = progress
        self.names: dict[str, str] = {}          # vertex -> "2/4 RUN ..."
        self.counted: set[str] = set()           # vertices that are build steps (not FROM/internal)
        self.cached: set[str] = set()
        self.outputs: dict[str, collections.deque[str]] = collections.defaultdict(
            lambda: collections.deque(maxlen=8))
        self.last_lines: collections.deque[str] = collections.deque(maxlen=8)
        self.failed: tuple[str, str] | None = None

    def feed(self, line: str) -> None:
        if line.strip():
            self.last_lines.append(line)
        m = _VERTEX_RE.match(line)
        if m:
            vid, bracket, text = m.groups()
            if vid in self.names:
                return
            sm = _STEPNO_RE.match(bracket)
            if not sm:
                self.names[vid] = f"[{bracket}] {_one_line(text, 80)}"
                return
            self.names[vid] = f"{bracket} {_one_line(text, 80)}"
            if not text.upper().startswith("FROM "):
                self.counted.add(vid)
                self.progress(f"Step {sm.group(2)}/{sm.group(3)}: {_one_line(text, 60)}")
            return
        m = _CACHED_RE.match(line)
        if m:
            if m.group(1) in self.counted and m.group(1) not in self.cached:
                self.cached.add(m.group(1))
                self.progress(f"Step {self.names[m.group(1)].split(' ', 1)[0]}: cached")
            return
        m = _ERROR_RE.match(line)
        if m and self.failed is None:
            self.failed = (m.group(1), m.group(2))
            return
        m = _OUTPUT_RE.match(line)
        if m:
            self.outputs[m.group(1)].append(m.group(2))


def _argv(cli: str, iidfile: Path, dockerfile_path: Path, ref: str, context: Path, *,
          labels: Mapping[str, str], buildargs: Mapping[str, str], secrets: Mapping[str, Path],
          no_cache: bool, cache: BuildCache | None, platform: str | None = None) -> list[str]:
    """The `docker build` command line (values checked by the caller; secrets by path only)."""
    argv = [cli, "build", "--progress=plain", "--iidfile", str(iidfile), "-f", str(dockerfile_path), "-t", ref]
    if platform:
        argv += ["--platform", platform]
    for k, v in labels.items():
        argv += ["--label", f"{k}={v}"]
    for k, v in buildargs.items():
        argv += ["--build-arg", f"{k}={v}"]
    for sid, src in secrets.items():
        argv += ["--secret", f"id={sid},src={src}"]
    if no_cache:
        argv.append("--no-cache")
    if cache is not None:
        for source in cache.cache_from:
            argv += ["--cache-from", check_ref(source)]
        if cache.inline:
            # the built image's config carries its cache records (pushed later as a cache
            # image); the normalising step drops them from the image it makes
            argv += ["--build-arg", "BUILDKIT_INLINE_CACHE=1"]
    argv.append(str(context))
    return argv
