"""Which engine to talk to when DOCKER_HOST is not set: the Docker CLI's context, then the default
sockets of Docker and podman.

The order is the Docker CLI's own, then podman's:

1. ``DOCKER_HOST`` (unchanged: it wins over any context, as with the docker CLI);
2. ``DOCKER_CONTEXT``, else ``currentContext`` of ``$DOCKER_CONFIG/config.json`` (default
   ``~/.docker/config.json``; written by ``docker context use``): that context's
   ``Endpoints.docker.Host`` from ``$DOCKER_CONFIG/contexts/meta/<sha256 of the name>/meta.json``,
   with its TLS files from ``contexts/tls/<sha256>/docker/{ca,cert,key}.pem`` when present
   (``default`` is the built-in context: no file, the default socket);
3. Docker's socket ``/var/run/docker.sock`` when it exists;
4. podman's: ``$XDG_RUNTIME_DIR/podman/podman.sock`` (rootless), then ``/run/podman/podman.sock``;
5. otherwise ``unix:///var/run/docker.sock`` (so the error names what was tried).

A context named but not found, or a meta.json without a docker endpoint, is a usage error in one
line naming the file.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from ..digests import sha256_bytes

DOCKER_SOCKET = "/var/run/docker.sock"
PODMAN_ROOT_SOCKET = "/run/podman/podman.sock"


@dataclass(frozen=True)
class Endpoint:
    host: str                    # unix:///..., tcp://..., ssh://...
    origin: str                  # how it was found, for messages: "DOCKER_HOST", "docker context 'x'", ...
    tls_dir: str | None = None   # the context's TLS files (ca.pem, cert.pem, key.pem), if any
    skip_tls_verify: bool = False

    def describe(self) -> str:
        if self.origin == "DOCKER_HOST":
            return f"DOCKER_HOST={self.host}"
        return f"{self.host} ({self.origin}; DOCKER_HOST not set)"


def config_dir() -> Path:
    env = os.environ.get("DOCKER_CONFIG")
    return Path(env) if env else Path.home() / ".docker"


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def current_context() -> tuple[str | None, str]:
    """(context name or None, where it was read)."""
    name = os.environ.get("DOCKER_CONTEXT")
    if name:
        return name, "DOCKER_CONTEXT"
    path = config_dir() / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, ""
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: cannot read the Docker config ({getattr(exc, 'strerror', None) or exc})") from None
    name = data.get("currentContext") if isinstance(data, dict) else None
    return (name if isinstance(name, str) and name else None), str(path)


def context_endpoint(name: str, where: str) -> Endpoint | None:
    """The docker endpoint of a named context; None for the built-in 'default'."""
    if name == "default":
        return None
    digest = sha256_bytes(name)
    meta = config_dir() / "contexts" / "meta" / digest / "meta.json"
    try:
        data = json.loads(meta.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"docker context {name!r} (from {where}) does not exist: no {meta}") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{meta}: cannot read docker context {name!r} "
                         f"({getattr(exc, 'strerror', None) or exc})") from None
    docker = ((data.get("Endpoints") or {}).get("docker") or {}) if isinstance(data, dict) else {}
    host = docker.get("Host") if isinstance(docker, dict) else None
    if not isinstance(host, str) or not host:
        raise UsageError(f"{meta}: docker context {name!r} has no Endpoints.docker.Host")
    tls = config_dir() / "contexts" / "tls" / digest / "docker"
    return Endpoint(host, f"docker context {name!r} from {where}",
                    tls_dir=str(tls) if (tls / "ca.pem").exists() or (tls / "cert.pem").exists() else None,
                    skip_tls_verify=bool(docker.get("SkipTLSVerify")))


def resolve() -> Endpoint:
    host = os.environ.get("DOCKER_HOST")
    if host:
        return Endpoint(host, "DOCKER_HOST")
    name, where = current_context()
    if name:
        found = context_endpoint(name, where)
        if found is not None:
            return found
    if _is_socket(DOCKER_SOCKET):
        return Endpoint(f"unix://{DOCKER_SOCKET}", "Docker's default socket")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    for path, what in ((os.path.join(runtime, "podman", "podman.sock") if runtime else None,
                        "podman's rootless socket"), (PODMAN_ROOT_SOCKET, "podman's socket")):
        if path and _is_socket(path):
            return Endpoint(f"unix://{path}", what)
    return Endpoint(f"unix://{DOCKER_SOCKET}", "the default; no context, no Docker or podman socket found")


def client(endpoint: Endpoint, timeout: int):
    """A docker SDK client for an endpoint found without DOCKER_HOST (with the context's TLS)."""
    import docker

    tls = None
    if endpoint.tls_dir or endpoint.skip_tls_verify:
        from docker.tls import TLSConfig

        d = Path(endpoint.tls_dir) if endpoint.tls_dir else None
        cert = (str(d / "cert.pem"), str(d / "key.pem")) if d and (d / "cert.pem").exists() else None
        ca = str(d / "ca.pem") if d and (d / "ca.pem").exists() else None
        tls = TLSConfig(client_cert=cert, ca_cert=ca, verify=False if endpoint.skip_tls_verify else (ca or True))
    return docker.DockerClient(base_url=endpoint.host, timeout=timeout, tls=tls or False)
