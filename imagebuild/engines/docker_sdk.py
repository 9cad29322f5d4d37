"""The docker SDK engine: Docker itself, or podman's Docker-compatible API socket.

`connect()` returns a pinged docker SDK client for the engine in DOCKER_HOST (or the Docker
context's, or the default socket: endpoint.py). This package is the only place that knows the
SDK: everything else gets an Engine and the small values of engines/base.py.

Builds go through the engine's classic builder (the only one the SDK speaks). A build that needs
BuildKit (secrets, `RUN --mount=`) is handed to the BuildKit CLI (buildkit_cli.build_with_cli).

Containers started here carry the label `io.imagebuild.owner=imagebuild` and are always removed,
also when the caller is interrupted.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import secrets as _secrets
import time
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Sequence

from ..atomic import atomic_file
from ..errors import (EngineError, EngineRefused, EngineUnavailable, NoSuchImage,
                      UsageError)
from .pushprogress import PUSH_REPORT_SECONDS, PushProgress  # noqa: F401 - re-exported
from .base import (
    SIZE_RE, BuildCache, BuildResult, ImageInfo, Mount, Progress, PushResult, RunResult, RunSpec,
    check_hostname, check_mapping, check_name, check_platform, check_ref, check_value, docker_host,
    dockerfile_needs_buildkit,
)
from .buildkit_cli import build_with_cli
from .common import _one_line, _open_log, cancel_builds, cancellable, check_context, step_failure

from .docker_session import OWNER_LABEL, DockerSession, engine_errors  # noqa: F401 - re-exported
# Docker's classic builder: "Step 2/5 : RUN x" / " ---> Using cache"; podman (buildah) through its
# Docker API: "STEP 2/5: RUN x" / "--> Using cache 0123abcd..."
_STEP_RE = re.compile(r"^(?:Step|STEP) (\d+)/(\d+) ?: (.*)\Z")
_CACHE_RE = re.compile(r"^\s*-{2,3}> Using cache\b")
_TARGET_RE = re.compile(r"^/[^\x00-\x1f\x7f:,]*\Z")


def _stream_closer(stream) -> Callable[[], None]:
    """A function that cuts the HTTP connection of a docker SDK build stream: the engine then
    cancels the build (its running step's container is killed and, with forcerm, removed), and
    the thread reading the stream gets an error at once."""
    import socket

    frame = getattr(stream, "gi_frame", None)  # the SDK's _stream_helper(response, decode)
    response = frame.f_locals.get("response") if frame is not None else None

    def stop() -> None:
        if response is None:
            return
        raw = response.raw._fp.fp.raw
        sock = getattr(raw, "_sock", raw)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    return stop


def _parse_time(text: str | None) -> float | None:
    """Docker's RFC 3339 timestamps carry nanoseconds; keep microseconds."""
    if not text or text.startswith("0001-"):
        return None
    m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)\Z", text)
    if not m:
        return None
    frac = (m.group(2) or "0")[:6].ljust(6, "0")
    tz = "+00:00" if m.group(3) == "Z" else m.group(3)
    return datetime.fromisoformat(f"{m.group(1)}.{frac}{tz}").timestamp()


#: the fix for a missing engine, as it applies on a user's machine (not this project's CI script)
START_ENGINE = ("start Docker (`sudo systemctl start docker`; without root, join the docker group), "
                "or podman's API service (`systemctl --user start podman.socket`, then "
                "DOCKER_HOST=unix://$XDG_RUNTIME_DIR/podman/podman.sock), or set DOCKER_HOST to "
                "the engine you use")


def connect(timeout: int = 900):
    """A pinged docker SDK client, or EngineError naming DOCKER_HOST."""
    try:
        import docker
        from docker.errors import DockerException
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise EngineError(f"the docker SDK is not installed ({exc})") from None
    from .endpoint import client as endpoint_client
    from .endpoint import resolve

    found = resolve()
    host = found.describe()
    try:
        if found.origin == "DOCKER_HOST":
            client = docker.from_env(timeout=timeout)
        else:   # a Docker context, or Docker's or podman's default socket
            client = endpoint_client(found, timeout)
        client.ping()
    except DockerException as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise EngineUnavailable(f"no container engine answers at {host} ({first}); {START_ENGINE}") from None
    except Exception as exc:  # noqa: BLE001 - requests/urllib3 errors from a dead socket
        raise EngineUnavailable(f"no container engine answers at {host} "
                                f"({type(exc).__name__}); {START_ENGINE}") from None
    return client


class DockerEngine:
    """The Engine interface on the docker SDK."""

    def __init__(self, client=None):
        self._client = client if client is not None else connect(timeout=3600)
        with engine_errors("asking the engine for its version"):
            version = self._client.version()
        comps = " ".join(str(c.get("Name", "")) for c in version.get("Components") or [])
        self.name = "podman" if "podman" in comps.lower() else "docker"
        self.api_version = str(version.get("ApiVersion", ""))

    @staticmethod
    def cancel_builds() -> int:
        """Stop every build running now (see cancel_builds at module level)."""
        return cancel_builds()

    # ---------------------------------------------------------------------------- build
    def build(self, context: Path, ref: str, *, dockerfile: str = "Dockerfile",
              buildargs: Mapping[str, str] | None = None, labels: Mapping[str, str] | None = None,
              secrets: Mapping[str, Path] | None = None, log: Path,
              progress: Progress | None = None, no_cache: bool = False,
              cache: BuildCache | None = None, platform: str | None = None) -> BuildResult:
        context, dockerfile_path = check_context(context, dockerfile)
        # a registry cache is BuildKit's (the classic builder's --cache-from only reads images
        # already in this engine)
        if secrets or cache or dockerfile_needs_buildkit(dockerfile_path.read_text(errors="replace")):
            return build_with_cli(context, ref, engine_name=self.name, inspect=self.inspect,
                                  dockerfile=dockerfile, buildargs=buildargs, labels=labels,
                                  secrets=secrets, log=log, progress=progress, no_cache=no_cache,
                                  cache=cache, platform=platform)
        check_ref(ref)
        platform = check_platform(platform)
        buildargs = check_mapping(buildargs, "build argument")
        labels = check_mapping(labels, "label")
        progress = progress or (lambda _line: None)
        steps = cached = 0
        current = ""
        tail: collections.deque[str] = collections.deque(maxlen=8)
        image_id = None
        error = None
        pending = ""
        t0 = time.monotonic()
        with _open_log(log) as out:
            out.write(f"# imagebuild: build {ref} from {context} ({dockerfile}), "
                      f"{'podman (buildah)' if self.name == 'podman' else 'docker classic builder'}\n")

            def lines(text: str):
                nonlocal pending
                pending += text
                while "\n" in pending:
                    line, pending = pending.split("\n", 1)
                    yield line

            def handle(line: str) -> None:
                nonlocal steps, cached, current
                m = _STEP_RE.match(line)
                if m:
                    current = f"{m.group(1)}/{m.group(2)} {_one_line(m.group(3), 80)}"
                    tail.clear()
                    if not m.group(3).upper().startswith("FROM "):
                        steps += 1
                    progress(f"Step {m.group(1)}/{m.group(2)}: {_one_line(m.group(3), 60)}")
                elif _CACHE_RE.match(line):
                    cached += 1
                    progress(f"Step {current.split(' ', 1)[0]}: cached")
                elif line.strip() and not re.match(r"^\s*-{2,3}> ", line):
                    tail.append(line)

            with engine_errors(f"building {ref}"):
                stream = self._client.api.build(
                    path=str(context), dockerfile=dockerfile, tag=ref, labels=labels or None,
                    buildargs=buildargs or None, rm=True, forcerm=True, decode=True,
                    nocache=no_cache, platform=platform)
                with cancellable(_stream_closer(stream)):
                    for chunk in stream:
                        if "stream" in chunk:
                            text = str(chunk["stream"])
                            out.write(text)
                            for line in lines(text):
                                handle(line)
                        elif "error" in chunk:
                            error = _one_line(chunk.get("error"))
                            out.write(f"\nERROR: {chunk.get('error')}\n")
                        elif "aux" in chunk and isinstance(chunk["aux"], dict) and "ID" in chunk["aux"]:
                            image_id = str(chunk["aux"]["ID"])
                        elif "status" in chunk:
                            out.write(f"{chunk['status']} {chunk.get('progress', '')}\n")
                if pending:
                    handle(pending)
        seconds = time.monotonic() - t0
        if error is not None or image_id is None:
            raise step_failure(ref, current, error or "the builder reported no image id", list(tail), log)
        info = self.inspect(image_id)
        return BuildResult(ref=ref, image_id=info.id, size_bytes=info.size, seconds=seconds,
                           steps=steps, cached_steps=cached, log_path=Path(log))

    # ---------------------------------------------------------------------------- run
    def run(self, image: str, command: Sequence[str], *, env: Mapping[str, str] | None = None,
            network: str | None = None, name: str | None = None, hostname: str | None = None,
            mounts: Sequence[Mount] | None = None, timeout: float,
            shm_size: str | None = None) -> RunResult:
        spec = RunSpec(image=image, command=tuple(command), env=env, network=network, name=name,
                       hostname=hostname, mounts=tuple(mounts or ()), shm_size=shm_size)
        return self.run_many([spec], timeout)[0]

    def run_many(self, specs: Sequence[RunSpec], timeout: float) -> list[RunResult]:
        """Start every container, wait for all until `timeout` seconds have passed, kill those still
        running, and remove all of them whatever happens (also on KeyboardInterrupt)."""
        if timeout is None or timeout <= 0:
            raise UsageError(f"invalid timeout {timeout!r}: expected seconds > 0")
        kwargs = [self._container_args(s) for s in specs]
        containers = []
        try:
            for spec, kw in zip(specs, kwargs):
                with engine_errors(f"creating a container of {spec.image}"):
                    containers.append(self._client.containers.create(**kw))
            started = time.monotonic()
            for spec, c in zip(specs, containers):
                with engine_errors(f"starting a container of {spec.image}"):
                    c.start()
            deadline = started + timeout
            codes: list[int | None] = []
            timed: list[bool] = []
            for c in containers:
                code, to = self._wait(c, deadline)
                codes.append(code)
                timed.append(to)
            if any(timed):
                for c in containers:
                    with contextlib.suppress(Exception):
                        c.kill()
            results = []
            for spec, c, code, to in zip(specs, containers, codes, timed):
                with engine_errors(f"reading the output of {spec.image}"):
                    output = c.logs(stdout=True, stderr=True).decode("utf-8", "replace")
                    c.reload()
                state = c.attrs.get("State", {})
                t_start, t_end = _parse_time(state.get("StartedAt")), _parse_time(state.get("FinishedAt"))
                secs = (t_end - t_start) if (t_start and t_end and t_end >= t_start) \
                    else time.monotonic() - started
                results.append(RunResult(exit_code=None if to else code, output=output,
                                         timed_out=to, seconds=secs))
            return results
        finally:
            for c in containers:
                with contextlib.suppress(Exception):
                    c.remove(force=True)

    def _wait(self, container, deadline: float) -> tuple[int | None, bool]:
        import requests
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            container.reload()
            if container.status == "exited":
                return int(container.attrs["State"]["ExitCode"]), False
            return None, True
        try:
            with_timeout = max(1, int(remaining + 0.999))
            res = container.wait(timeout=with_timeout)
            return int(res.get("StatusCode", -1)), False
        except requests.exceptions.RequestException:
            with engine_errors("waiting for a container"):
                container.reload()
            if container.status == "exited":
                return int(container.attrs["State"]["ExitCode"]), False
            return None, True

    def _container_args(self, spec: RunSpec) -> dict:
        from docker.types import Mount as DMount
        check_ref(spec.image)
        if not spec.command or not all(isinstance(a, str) for a in spec.command):
            raise UsageError(f"a command for {spec.image} must be a non-empty list of strings")
        for a in spec.command:
            if "\x00" in a:
                raise UsageError(f"command argument {a!r} contains a NUL byte")
        kw: dict = dict(image=spec.image, command=list(spec.command), detach=True,
                        labels=dict(OWNER_LABEL), environment=check_mapping(spec.env, "environment variable"))
        if spec.network:
            kw["network"] = check_name(spec.network, "network name")
        if spec.name:
            kw["name"] = check_name(spec.name, "container name")
        if spec.hostname:
            kw["hostname"] = check_hostname(spec.hostname)
        if spec.shm_size:
            if not SIZE_RE.match(str(spec.shm_size)):
                raise UsageError(f"invalid shm size {spec.shm_size!r}: expected e.g. 1g, 512m")
            kw["shm_size"] = str(spec.shm_size)
        mounts = []
        for m in spec.mounts:
            src = Path(m.source).resolve()
            if not src.exists():
                raise UsageError(f"mount source {src} does not exist")
            check_value(str(src), "mount source")
            if not _TARGET_RE.match(m.target):
                raise UsageError(f"invalid mount target {m.target!r}: expected an absolute path "
                                 "without ':' or ','")
            mounts.append(DMount(target=m.target, source=str(src), type="bind", read_only=m.read_only))
        if mounts:
            kw["mounts"] = mounts
        return kw

    # ---------------------------------------------------------------------------- networks
    @contextlib.contextmanager
    def network(self, name: str | None = None, *, internal: bool = False) -> Iterator[str]:
        """A private user-defined bridge network for the duration of the block (`internal`: no
        route out of it, only between its containers)."""
        import docker.errors
        name = check_name(name or f"imagebuild-{_secrets.token_hex(4)}", "network name")
        with engine_errors(f"creating network {name}"):
            if self._client.networks.list(names=[name]):
                raise EngineError(f"a network named {name} already exists")
            net = self._client.networks.create(name, driver="bridge", labels=dict(OWNER_LABEL),
                                               internal=internal, check_duplicate=True)
        try:
            yield name
        finally:
            with contextlib.suppress(docker.errors.NotFound):
                with engine_errors(f"removing network {name}"):
                    net.reload()
                    for c in net.containers:
                        with contextlib.suppress(Exception):
                            net.disconnect(c, force=True)
                    net.remove()

    # ---------------------------------------------------------------------------- images
    def inspect(self, ref: str) -> ImageInfo:
        check_ref(ref)
        with engine_errors(f"inspecting {ref}"):
            data = self._client.api.inspect_image(ref)
        cfg = data.get("Config") or {}
        env = {}
        for item in cfg.get("Env") or []:
            k, _, v = str(item).partition("=")
            env[k] = v
        return ImageInfo(
            id=str(data["Id"]), repo_digests=tuple(sorted(data.get("RepoDigests") or ())),
            size=int(data.get("Size") or 0), labels=dict(sorted((cfg.get("Labels") or {}).items())),
            env=env, layers=tuple((data.get("RootFS") or {}).get("Layers") or ()), config=dict(cfg),
            tags=tuple(sorted(t for t in data.get("RepoTags") or () if t != "<none>:<none>")),
            architecture=str(data.get("Architecture") or ""))

    def exists(self, ref: str) -> bool:
        import docker.errors
        check_ref(ref)
        try:
            self._client.api.inspect_image(ref)
            return True
        except docker.errors.ImageNotFound:
            return False
        except docker.errors.NotFound:
            return False
        except Exception:  # noqa: BLE001 - translate transport errors
            with engine_errors(f"looking up {ref}"):
                raise

    def remove(self, ref: str, *, force: bool = False, prune: bool = True) -> None:
        """Remove an image; ``prune=False`` keeps its untagged parents (the classic builder's
        cache: each step's image is the parent of the next)."""
        check_ref(ref)
        if not self.exists(ref):
            raise EngineError(f"no image {ref} in the engine at DOCKER_HOST={docker_host()}")
        with engine_errors(f"removing {ref}"):
            self._client.api.remove_image(ref, force=force, noprune=not prune)

    def save(self, ref: str, path: Path) -> Path:
        """`docker save` of one image into a tar at `path` (a temp file renamed into place)."""
        self.inspect(ref)  # a clear error for an unknown image, before any file exists
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with atomic_file(path, "wb") as f, engine_errors(f"saving {ref}"):
                for chunk in self._client.api.get_image(ref, chunk_size=1 << 20):
                    f.write(chunk)
        except OSError as exc:
            raise EngineError(f"saving {ref} to {path}: {exc.strerror or exc}") from None
        return path

    def layer_sizes(self, ref: str) -> list[tuple[str, int]]:
        """(diff id, bytes of its uncompressed tar), lowest layer first, read from the `docker save`
        stream without writing it anywhere."""
        import json
        import tarfile

        info = self.inspect(ref)

        class _Stream:       # a file-like view of the chunk iterator for tarfile's stream mode
            def __init__(self, chunks):
                self._chunks, self._buf = iter(chunks), b""

            def read(self, n=-1):
                while n < 0 or len(self._buf) < n:
                    try:
                        self._buf += next(self._chunks)
                    except StopIteration:
                        break
                data, self._buf = (self._buf, b"") if n < 0 else (self._buf[:n], self._buf[n:])
                return data

        sizes: dict[str, int] = {}
        manifest = None
        with engine_errors(f"reading the layers of {ref}"):
            with tarfile.open(fileobj=_Stream(self._client.api.get_image(info.id, chunk_size=1 << 20)),
                              mode="r|") as tf:
                for member in tf:
                    if member.name.endswith("/layer.tar"):
                        sizes[member.name] = member.size
                    elif member.name == "manifest.json":
                        manifest = json.load(tf.extractfile(member))
        if not manifest:
            raise EngineError(f"reading the layers of {ref}: the engine's archive has no manifest")
        layers = manifest[0]["Layers"]
        return [(diff, sizes.get(path, 0)) for diff, path in zip(info.layers, layers)]

    def load(self, tar_path: Path) -> list[str]:
        """`docker load` a tar (docker save layout); returns what the engine says it loaded."""
        loaded: list[str] = []
        with engine_errors(f"loading {tar_path}"):
            with open(tar_path, "rb") as f:
                for chunk in self._client.api.load_image(f):
                    if "error" in chunk:
                        raise EngineError(f"loading {tar_path}: {_one_line(chunk['error'])}")
                    text = str(chunk.get("stream", "")).strip()
                    for prefix in ("Loaded image ID: ", "Loaded image: "):
                        if text.startswith(prefix):
                            loaded.append(text[len(prefix):])
        return loaded

    def lookup(self, ref: str) -> ImageInfo | None:
        """inspect(), or None when the engine holds no such image."""
        try:
            return self.inspect(ref)
        except NoSuchImage:
            return None

    def tag(self, source: str, repository: str, tag: str) -> None:
        """Name the image ``source`` (a reference or an id) ``repository:tag``. NoSuchImage when
        the engine does not hold it."""
        check_ref(source)
        check_ref(f"{repository}:{tag}")
        with engine_errors(f"tagging {source} as {repository}:{tag}"):
            self._client.api.tag(source, repository, tag)

    def untag(self, ref: str) -> None:
        """Remove the name ``ref`` only: the image keeps its other names, its children and,
        when it has no other name, its layers (no prune)."""
        check_ref(ref)
        with engine_errors(f"untagging {ref}"):
            self._client.api.remove_image(ref, noprune=True)

    def push(self, repository: str, tag: str, *,
             auth: Mapping[str, str] | None = None,
             progress: Progress | None = None) -> PushResult:
        """Push ``repository:tag`` (with ``auth``: {"username", "password"}); the digests the
        engine reported and the first error it reported, which ends the push. EngineRefused when
        the engine refuses the request itself. ``progress``: plain lines, at most one every
        PUSH_REPORT_SECONDS, of the bytes and layers pushed so far (a 1.4 GB push is not silent)."""
        check_ref(f"{repository}:{tag}")
        kwargs: dict = {"stream": True, "decode": True}
        if auth is not None:
            kwargs["auth_config"] = dict(auth)
        digests: list[str] = []
        seen = PushProgress(f"{repository}:{tag}", progress)
        with engine_errors(f"pushing {repository}:{tag}"):
            for event in self._client.api.push(repository, tag=tag, **kwargs):
                if not isinstance(event, dict):
                    continue
                if "error" in event:
                    return PushResult(tuple(digests), str(event.get("error") or ""))
                seen.event(event)
                aux = event.get("aux")
                if isinstance(aux, dict) and isinstance(aux.get("Digest"), str):
                    digests.append(aux["Digest"])
        seen.done()
        return PushResult(tuple(digests), None)

    def save_stream(self, ref: str) -> Iterator[bytes]:
        """The `docker save` tar of the image ``ref`` (saved by its id: no RepoTags), in chunks
        as the engine sends them."""
        info = self.inspect(ref)
        with engine_errors(f"saving {ref}"):
            yield from self._client.api.get_image(info.id, chunk_size=1 << 20)

    def load_stream(self, chunks: Iterable[bytes]) -> None:
        """`docker load` of a tar (docker save layout) given as chunks. EngineRefused with the
        engine's words when it refuses the tar."""
        with engine_errors("loading an image"):
            for event in self._client.api.load_image(iter(chunks)):
                if isinstance(event, dict) and "error" in event:
                    text = str(event.get("error") or "")
                    raise EngineRefused(f"loading an image: {_one_line(text)}", detail=text)

    @contextlib.contextmanager
    def export_filesystem(self, ref: str, *,
                          labels: Mapping[str, str] | None = None) -> Iterator[Iterator[bytes]]:
        """The file system of the image ``ref`` as one tar (whiteouts applied by the engine): the
        `export` of a created, never started container without network, removed after the
        block. Yields the tar's chunks."""
        check_ref(ref)
        with engine_errors(f"creating a container of {ref}"):
            container = self._client.containers.create(
                ref, command=["/bin/true"], entrypoint=[], network_disabled=True,
                labels={**OWNER_LABEL, **check_mapping(labels, "label")})
        try:
            def chunks() -> Iterator[bytes]:
                with engine_errors(f"exporting the file system of {ref}"):
                    yield from container.export(chunk_size=1 << 20)
            yield chunks()
        finally:
            with contextlib.suppress(Exception):   # cleanup must not hide the real error
                container.remove(force=True)

    def containers(self, prefix: str, label: str) -> "DockerSession":
        """A ContainerSession whose containers and networks carry ``label=<prefix>-<token>``."""
        return DockerSession(self._client, prefix, label)


#: the environment variables that hold imagebuild's own secrets: no credential helper sees them
OWN_SECRETS = ("IMAGEBUILD_SIGN_KEY_PASSWORD", "IMAGEBUILD_REGISTRY_PASSWORD", "IMAGEBUILD_REGISTRY_USER")


@contextlib.contextmanager
def _without_env(names):
    """os.environ without ``names`` for the block (the commands that ask for credentials do so on
    their main thread, before any worker starts)."""
    saved = {n: os.environ.pop(n) for n in names if n in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def registry_auth(config: Mapping, host: str, env: Mapping[str, str]) -> dict | None:
    """The credentials for registry ``host`` in a Docker config (its parsed JSON ``config``), as
    docker reads them: ``credHelpers``, ``credsStore`` (running the ``docker-credential-*``
    helper with ``env``), ``auths``. None when there are none. EngineError, its message the
    SDK's words, when the config or a helper fails."""
    import json
    import warnings

    import docker.auth
    import docker.errors

    copy = json.loads(json.dumps(dict(config)))          # docker.auth consumes the dict it is given
    helper_env = {k: v for k, v in env.items() if k not in OWN_SECRETS}
    try:
        # the SDK starts a helper with os.environ plus credstore_env: imagebuild's own secrets are
        # taken out of both for the call (a helper needs its own credentials, never ours)
        with warnings.catch_warnings(), _without_env(OWN_SECRETS):
            warnings.simplefilter("ignore")          # a missing helper warns, then fails below
            auth = docker.auth.load_config(config_dict=copy, credstore_env=helper_env)
            return auth.resolve_authconfig(host)
    except (docker.errors.DockerException, ValueError, KeyError, TypeError) as exc:
        raise EngineError(str(exc)) from None
