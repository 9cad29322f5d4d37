"""The local registry the publishing tests push to (Debian's docker-registry with htpasswd auth,
started on a free loopback port, one per test module) and the small images they push: fixtures and
helpers shared by the tests of every stage that needs a registry (deliver/, builder/, house/).
A module imports the fixtures it uses by name."""

from __future__ import annotations

import io
import shutil
import socket
import subprocess
import time
import uuid

import pytest
import requests

from imagebuild.deliver import publish

from conftest import need

BASE = "imagebuild/base:debian-bookworm"
USER, PASSWORD = "ci-user", "Pw-9f3kQz7-not-in-output"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    binary = shutil.which("docker-registry")
    if binary is None:
        need("docker-registry (Debian package docker-registry)", "not on PATH")
    if shutil.which("htpasswd") is None:
        need("htpasswd (Debian package apache2-utils)", "not on PATH")
    root = tmp_path_factory.mktemp("registry")
    htpasswd = subprocess.run(["htpasswd", "-Bbn", USER, PASSWORD], check=True, capture_output=True,
                              text=True).stdout
    (root / "htpasswd").write_text(htpasswd)
    port = free_port()
    (root / "config.yml").write_text(f"""version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: {root / 'data'}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
auth:
  htpasswd:
    realm: imagebuild-test
    path: {root / 'htpasswd'}
""")
    log = open(root / "registry.log", "wb")
    proc = subprocess.Popen([binary, "serve", str(root / "config.yml")], stdout=log, stderr=log)
    host = f"127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                if requests.get(f"http://{host}/v2/", timeout=1).status_code == 401:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.1)
        else:
            pytest.fail(f"docker-registry did not start: {(root / 'registry.log').read_text()[-500:]}")
        yield host
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


@pytest.fixture(scope="module")
def engine(docker_client):
    try:
        docker_client.images.get(BASE)
    except Exception:  # noqa: BLE001
        need(f"the base image {BASE}", "create it with `imagebuild base` or debootstrap + docker import")
    yield docker_client
    # remove what these tests tagged (their own names only)
    for image in docker_client.images.list():
        for tag in image.tags:
            if tag.startswith("imagebuild/pub-") or "/ci/pub-" in tag:
                try:
                    docker_client.images.remove(tag, noprune=False)
                except Exception:  # noqa: BLE001 - best effort
                    pass


def on_engine(client):
    """imagebuild's Engine on the tests' docker SDK client (the SDK itself only sets images up)."""
    from imagebuild.engines import get_engine
    return get_engine("docker", client=client)


def build_small(client, name: str) -> str:
    """A tiny distinct image (one small layer made from the local base) in seconds; its local ref."""
    token = uuid.uuid4().hex
    dockerfile = (f"FROM {BASE} AS src\nRUN echo {token} > /token\n"
                  f"FROM scratch\nCOPY --from=src /token /token\nLABEL io.imagebuild.image-id={name}\n")
    ref = f"imagebuild/{name}:test"
    client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=ref, rm=True)
    return ref


def passing_report(client, ref: str, name: str, passed: bool = True) -> dict:
    return {"image": name, "image_id": client.images.get(ref).id, "passed": passed,
            "counts": {"passed": 3, "failed": 0 if passed else 1}}


def write_lock(client, ref: str, name: str, report, tmp_path, *, image_id: str | None = None):
    """images.lock recording ``ref``'s engine id (or ``image_id``) and ``report``'s sha256 as the
    image's test report, as `imagebuild lock` writes it after `imagebuild test`."""
    from imagebuild.deliver import lockfile
    built = image_id or client.images.get(ref).id
    entry = lockfile.compute_entry(stack={}, dockerfile_sha256="0" * 64, base_image=None,
                                   image_id=built, smoke=None)
    entry["provenance"] = {"base_digest": None, "recipe_sha256": "0" * 64, "sbom_sha256": None,
                           "test_report_sha256": lockfile.report_sha256_for(report, built),
                           "wheel_lock_sha256": None}
    path = tmp_path / f"{name}.lock"
    lockfile.write_lock(path, {name: entry})
    return path


CREDS = publish.Credentials(USER, PASSWORD)


def api_for(host, creds=CREDS, **kw):
    return publish.RegistryAPI(host, creds, backoff=0.01, **kw)
