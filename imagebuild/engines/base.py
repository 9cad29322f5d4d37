"""The values, names and checks every engine shares: what callers exchange with an engine (small
frozen dataclasses, never a docker SDK object), the `Engine` interface, and the validation of
every name that may reach an engine or a command line. Imports nothing of the other engine
modules, so each of them can import it (engines/__init__.py re-exports all of it)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import (Any, Callable, ContextManager, Iterable, Iterator, Mapping, Protocol, Sequence,
                    runtime_checkable)

from .. import reference
from ..errors import UsageError
from ..patterns import HOST_LABEL

Progress = Callable[[str], None]


def docker_host() -> str:
    """DOCKER_HOST, else the Docker context's endpoint, else Docker's or podman's default socket
    (engines/endpoint.py)."""
    from .endpoint import resolve

    return resolve().host


# --------------------------------------------------------------------------------------------
# Validation of everything that reaches an engine or a command line

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}\Z")           # containers, networks
HOSTNAME_RE = re.compile(rf"^{HOST_LABEL}\Z")
KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}\Z")              # build args, labels, env
SECRET_ID_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}\Z")
SIZE_RE = re.compile(r"^[0-9]{1,12}[bkmgBKMG]?\Z")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def check_ref(ref: str, what: str = "image reference") -> str:
    """An image reference (`[host[:port]/]name[:tag][@digest]`, reference.py's grammar) or an
    image ID."""
    if not reference.is_reference_or_id(ref):
        raise UsageError(f"invalid {what} {ref!r}: expected name[:tag] of lowercase letters, digits, "
                         "'.', '_', '-', '/' (e.g. imagebuild/base:debian-bookworm)")
    return ref


def check_name(name: str, what: str) -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise UsageError(f"invalid {what} {name!r}: expected 1-63 of letters, digits, '_', '.', '-'")
    return name


def check_hostname(name: str) -> str:
    if not isinstance(name, str) or not HOSTNAME_RE.match(name):
        raise UsageError(f"invalid hostname {name!r}: expected letters, digits and '-' (at most 63)")
    return name


def check_key(key: str, what: str) -> str:
    if not isinstance(key, str) or not KEY_RE.match(key):
        raise UsageError(f"invalid {what} {key!r}: expected a letter or '_' then letters, digits, '_.-'")
    return key


PLATFORM_RE = re.compile(r"[a-z0-9]{1,16}/[a-z0-9_]{1,16}(/v[0-9]{1,2})?")


def check_platform(platform: str | None) -> str | None:
    """An OCI platform (os/arch[/variant]) passed to a build, or None."""
    if platform is not None and (not isinstance(platform, str) or not PLATFORM_RE.fullmatch(platform)):
        raise UsageError(f"invalid platform {platform!r}: expected OS/ARCH such as linux/arm64")
    return platform


def check_value(value: str, what: str) -> str:
    """A value passed as one argv element (never through a shell): no control characters."""
    if not isinstance(value, str) or _CONTROL.search(value) or len(value) > 4096:
        raise UsageError(f"invalid {what} {value!r}: control characters or newlines are not allowed")
    return value


def check_mapping(values: Mapping[str, str] | None, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in sorted((values or {}).items()):
        check_key(k, f"{what} name")
        out[k] = check_value(str(v), f"{what} {k}")
    return out


def check_secrets(secrets: Mapping[str, Path] | None) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for sid, src in sorted((secrets or {}).items()):
        if not SECRET_ID_RE.match(sid):
            raise UsageError(f"invalid secret id {sid!r}: expected lowercase letters, digits, '_.-'")
        path = Path(src)
        if not path.is_file():
            raise UsageError(f"secret {sid}: {path} is not a readable file")
        text = str(path.resolve())
        if any(c in text for c in ',"=\n\r') or _CONTROL.search(text):
            raise UsageError(f"secret {sid}: path {text!r} contains ',', '=', quotes or control "
                             "characters, which the BuildKit CLI cannot take; copy the file elsewhere")
        out[sid] = path.resolve()
    return out


# --------------------------------------------------------------------------------------------
# Values exchanged with engines

@dataclass(frozen=True)
class BuildResult:
    ref: str
    image_id: str
    size_bytes: int
    seconds: float
    steps: int            # build steps after FROM that the builder ran or took from its cache
    cached_steps: int     # of those, how many came from the cache
    log_path: Path


@dataclass(frozen=True)
class BuildCache:
    """A build's shared layer cache in a registry (BuildKit's inline cache, what Docker 20.10's
    built-in BuildKit offers): ``cache_from`` the images whose cache records the build may reuse
    (a missing one is no error: BuildKit says so in the log and builds), ``inline`` whether the
    built image carries its own cache records (for a later push as a cache image), and
    ``docker_config`` a folder holding a config.json with the cache registry's credentials for the
    CLI (None: the user's own Docker config)."""
    cache_from: tuple[str, ...] = ()
    inline: bool = False
    docker_config: Path | None = None


@dataclass(frozen=True)
class RunResult:
    exit_code: int | None   # None when the container was killed on timeout before it exited
    output: str             # stdout and stderr as the engine logged them (each stream in order)
    timed_out: bool
    seconds: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


@dataclass(frozen=True)
class Mount:
    """A bind mount of a host path into a container (read-only unless said otherwise)."""
    source: Path
    target: str
    read_only: bool = True


@dataclass(frozen=True)
class RunSpec:
    image: str
    command: tuple[str, ...]
    env: Mapping[str, str] | None = None
    network: str | None = None
    name: str | None = None
    hostname: str | None = None
    mounts: tuple[Mount, ...] = ()
    shm_size: str | None = None


@dataclass(frozen=True)
class ImageInfo:
    id: str
    repo_digests: tuple[str, ...]
    size: int
    labels: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    layers: tuple[str, ...] = ()     # diff ids, lowest first
    # the image's config as the engine reports it (Env, Entrypoint, Cmd, WorkingDir, User, ...)
    config: Mapping[str, Any] = field(default_factory=dict, compare=False)
    tags: tuple[str, ...] = ()       # the repository:tag names it has now (none: dangling)
    architecture: str = ""           # the config's architecture (amd64, arm64; "" not reported)


@dataclass(frozen=True)
class PushResult:
    """What the engine said while pushing one tag: every digest it reported (in order) and the
    first error it reported (None when it reported none; the engine's own words)."""
    digests: tuple[str, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class Container:
    """A container of a ContainerSession (its engine id and its name)."""
    id: str
    name: str


@runtime_checkable
class ContainerSession(Protocol):
    """Containers and networks created together and removed together by ``close()`` (also on
    Ctrl-C), each carrying the label ``<label>=<token>``. Errors: NoSuchImage for an unknown
    image, EngineRefused (its ``detail`` the engine's words) when the engine refuses."""

    token: str

    def __enter__(self) -> "ContainerSession": ...

    def __exit__(self, *exc) -> None: ...

    def network(self, name: str) -> str: ...

    def create(self, image: str, command: Sequence[str], *, name: str,
               env: Mapping[str, str] | None = None, network: str | None = None,
               hostname: str | None = None, shm_size: str | None = None, shareable: bool = False,
               join: Container | None = None, gpus: bool = False) -> Container: ...

    def put_files(self, container: Container, tar: bytes, path: str = "/") -> bool: ...

    def start(self, container: Container) -> None: ...

    def wait(self, container: Container, timeout: float) -> int | None: ...

    def kill(self, container: Container) -> None: ...

    def status(self, container: Container) -> str: ...

    def exec(self, container: Container, argv: Sequence[str]) -> tuple[int | None, bytes]: ...

    def logs(self, container: Container, tail: int | None = None) -> str: ...

    def follow(self, container: Container) -> Iterator[bytes]: ...

    def read_archive(self, container: Container, path: str) -> bytes | None: ...

    def close(self) -> None: ...


@runtime_checkable
class Engine(Protocol):
    """What imagebuild needs from a container engine."""

    name: str

    def build(self, context: Path, ref: str, *, dockerfile: str = "Dockerfile",
              buildargs: Mapping[str, str] | None = None, labels: Mapping[str, str] | None = None,
              secrets: Mapping[str, Path] | None = None, log: Path,
              progress: Progress | None = None, no_cache: bool = False,
              cache: BuildCache | None = None, platform: str | None = None) -> BuildResult: ...

    def run(self, image: str, command: Sequence[str], *, env: Mapping[str, str] | None = None,
            network: str | None = None, name: str | None = None, hostname: str | None = None,
            mounts: Sequence[Mount] | None = None, timeout: float,
            shm_size: str | None = None) -> RunResult: ...

    def run_many(self, specs: Sequence[RunSpec], timeout: float) -> list[RunResult]: ...

    def network(self, name: str | None = None, *, internal: bool = False) -> ContextManager[str]: ...

    def inspect(self, ref: str) -> ImageInfo: ...

    def exists(self, ref: str) -> bool: ...

    def remove(self, ref: str, *, force: bool = False, prune: bool = True) -> None: ...

    def save(self, ref: str, path: Path) -> Path: ...

    def load(self, tar_path: Path) -> list[str]: ...

    def lookup(self, ref: str) -> ImageInfo | None: ...

    def tag(self, source: str, repository: str, tag: str) -> None: ...

    def untag(self, ref: str) -> None: ...

    def push(self, repository: str, tag: str, *,
             auth: Mapping[str, str] | None = None,
             progress: Progress | None = None) -> PushResult: ...

    def save_stream(self, ref: str) -> Iterator[bytes]: ...

    def load_stream(self, chunks: Iterable[bytes]) -> None: ...

    def export_filesystem(self, ref: str, *,
                          labels: Mapping[str, str] | None = None) -> ContextManager[Iterator[bytes]]: ...

    def containers(self, prefix: str, label: str) -> ContainerSession: ...


def dockerfile_needs_buildkit(text: str) -> bool:
    """True when a Dockerfile uses syntax only BuildKit understands (RUN --mount=...)."""
    return bool(re.search(r"^\s*RUN\s+(?:--[a-z-]+=\S+\s+)*--mount=", text, re.MULTILINE | re.IGNORECASE))
