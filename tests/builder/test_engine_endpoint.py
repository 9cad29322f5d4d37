"""The engine found without DOCKER_HOST (imagebuild/engines/endpoint.py): Docker contexts
(DOCKER_CONTEXT, `docker context use` -> config.json currentContext -> contexts/meta/<sha256>/
meta.json) and podman's default sockets. The last tests connect to the real engine through a
context and through a podman socket path, with DOCKER_HOST unset."""

from __future__ import annotations

import hashlib
import json
import socket

import pytest

from imagebuild.engines import connect, docker_host, endpoint
from imagebuild.errors import UsageError


@pytest.fixture
def cfg(tmp_path, monkeypatch):
    """An empty Docker config folder, no DOCKER_HOST, no default sockets on this machine."""
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setattr(endpoint, "DOCKER_SOCKET", str(tmp_path / "none" / "docker.sock"))
    monkeypatch.setattr(endpoint, "PODMAN_ROOT_SOCKET", str(tmp_path / "none" / "podman.sock"))
    (tmp_path / "docker").mkdir()
    return tmp_path / "docker"


def add_context(cfg, name: str, host: str, current: bool = False) -> None:
    """What `docker context create NAME --docker host=HOST` (and `docker context use`) write."""
    meta = cfg / "contexts" / "meta" / hashlib.sha256(name.encode()).hexdigest()
    meta.mkdir(parents=True)
    (meta / "meta.json").write_text(json.dumps({"Name": name, "Metadata": {},
                                                "Endpoints": {"docker": {"Host": host, "SkipTLSVerify": False}}}))
    if current:
        (cfg / "config.json").write_text(json.dumps({"auths": {}, "currentContext": name}))


def listening_socket(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    return s


def test_docker_host_wins(cfg, monkeypatch):
    add_context(cfg, "remote", "tcp://10.0.0.1:2375", current=True)
    monkeypatch.setenv("DOCKER_HOST", "unix:///tmp/x.sock")
    assert endpoint.resolve() == endpoint.Endpoint("unix:///tmp/x.sock", "DOCKER_HOST")


def test_current_context_then_docker_context(cfg, monkeypatch):
    add_context(cfg, "remote", "tcp://10.0.0.1:2375", current=True)
    add_context(cfg, "other", "ssh://builder@10.0.0.2")
    found = endpoint.resolve()
    assert found.host == "tcp://10.0.0.1:2375" and "docker context 'remote'" in found.origin
    assert "DOCKER_HOST not set" in found.describe()
    monkeypatch.setenv("DOCKER_CONTEXT", "other")
    assert docker_host() == "ssh://builder@10.0.0.2"


def test_default_context_and_sockets(cfg, tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_CONTEXT", "default")
    assert endpoint.resolve().host == f"unix://{endpoint.DOCKER_SOCKET}"   # nothing found: the default
    sock = listening_socket(tmp_path / "run" / "podman" / "podman.sock")
    try:
        found = endpoint.resolve()
        assert found.host == f"unix://{tmp_path}/run/podman/podman.sock" and "podman" in found.origin
    finally:
        sock.close()
    docker_sock = listening_socket(tmp_path / "d" / "docker.sock")
    monkeypatch.setattr(endpoint, "DOCKER_SOCKET", str(tmp_path / "d" / "docker.sock"))
    try:
        assert endpoint.resolve().host == f"unix://{tmp_path}/d/docker.sock"   # Docker's before podman's
    finally:
        docker_sock.close()


def test_a_missing_or_broken_context_is_one_line(cfg, monkeypatch):
    monkeypatch.setenv("DOCKER_CONTEXT", "gone")
    with pytest.raises(UsageError, match=r"docker context 'gone' \(from DOCKER_CONTEXT\) does not exist: no "):
        endpoint.resolve()
    add_context(cfg, "empty", "")
    monkeypatch.setenv("DOCKER_CONTEXT", "empty")
    with pytest.raises(UsageError, match="has no Endpoints.docker.Host"):
        endpoint.resolve()
    monkeypatch.delenv("DOCKER_CONTEXT")
    (cfg / "config.json").write_text("{")
    with pytest.raises(UsageError, match="cannot read the Docker config"):
        endpoint.resolve()


def test_cli_names_a_missing_context_in_one_line(cfg, monkeypatch):
    import subprocess
    import sys
    monkeypatch.setenv("DOCKER_CONTEXT", "gone")
    proc = subprocess.run([sys.executable, "-m", "imagebuild", "test", "imagebuild/smoke-cpu:x"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "docker context 'gone'" in proc.stderr


@pytest.fixture
def real_socket(docker_client) -> str:
    """The test engine's socket path (read before `cfg` unsets DOCKER_HOST)."""
    import os
    host = os.environ.get("DOCKER_HOST", "")
    if not host.startswith("unix://"):
        pytest.fail(f"these tests reach the test engine through its unix socket; DOCKER_HOST={host!r}")
    return host[len("unix://"):]


def test_real_engine_through_a_context(real_socket, cfg):
    add_context(cfg, "imagebuild-test", f"unix://{real_socket}", current=True)
    assert connect(timeout=30).version()["ApiVersion"]


def test_real_engine_through_podmans_socket_path(real_socket, cfg, tmp_path):
    """podman's rootless socket path, here a link to the test engine's socket (podman serves the
    same Docker API there); found with no DOCKER_HOST and no context."""
    link = tmp_path / "run" / "podman" / "podman.sock"
    link.parent.mkdir(parents=True)
    link.symlink_to(real_socket)
    assert endpoint.resolve().host == f"unix://{link}"
    assert connect(timeout=30).ping()
