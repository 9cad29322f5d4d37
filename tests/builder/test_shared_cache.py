"""`imagebuild build --cache-to PREFIX` / `--cache-from PREFIX`: the layer cache shared through a
registry (imagebuild.builder.buildcache.SharedCache, BuildKit's inline cache on Docker 20.10).

On the real engine, a real local registry (with a password) and a second real engine beside the
session's (tests/second_engine.py: its own data root, socket and bridge, no way out to the
network): a two-stage recipe built on the first engine fills the cache; the second engine, which
holds only the base image, builds the same recipe from that cache with every step cached (a step
that ran again would write other time stamps), and normalises it to the same image ID."""

from __future__ import annotations

import base64
import io
import json
import os
import secrets

import pytest
import requests

from conftest import need
from imagebuild import sourcedate
from imagebuild.builder import reproducible as rp
from registry_service import PASSWORD, USER, registry  # noqa: F401 - the module's registry fixture

pytestmark = [pytest.mark.engine, pytest.mark.registry]

BASE = "imagebuild/base:debian-bookworm"
EPOCH = sourcedate.source_epoch("2026-11-21")


@pytest.fixture(scope="module")
def engine2(tmp_path_factory, docker_client):
    import docker
    from second_engine import copy_image, second_engine

    try:
        docker_client.images.get(BASE)
    except Exception:  # noqa: BLE001 - ImageNotFound
        need(f"the base image {BASE}", "create it with `imagebuild base debian-bookworm`")
    first_host = os.environ["DOCKER_HOST"]
    try:
        with second_engine(tmp_path_factory.mktemp("engine2")) as host:
            copy_image(BASE, first_host, host)
            client = docker.DockerClient(base_url=host, timeout=900)
            yield host, client
            client.close()
    except RuntimeError as exc:
        need("a second Docker engine", str(exc))
    # the session's engine still builds after the second one stopped (MACHINE.md's docker0 story)
    docker_client.images.build(fileobj=io.BytesIO(f"FROM {BASE}\nRUN true\n".encode()), rm=True, nocache=True)


def _docker_config(tmp_path, host: str):
    folder = tmp_path / "docker-config"
    folder.mkdir()
    auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    (folder / "config.json").write_text(json.dumps({"auths": {host: {"auth": auth}}}))
    (folder / "config.json").chmod(0o600)
    return folder


def _build(client, ref, ctx, tmp_path, cache, name, kind="docker"):
    from imagebuild.builder.scheduler import BuildJob, build_all
    from imagebuild.engines import get_engine

    engine = rp.BuildTimeEngine(get_engine(kind, client=client), {ref: EPOCH}, cache=cache)
    said: list[str] = []
    (out,) = build_all([BuildJob(image_id=name, context=ctx, ref=ref)], engine=engine,
                       log_dir=tmp_path / f"logs-{name}", progress=said.append)
    assert out.ok, out.error
    return out.result, said


# quiet_engine: the control build on the first engine needs the first build's cache records, which
# a concurrent build (the session's background build of the communication image) may evict
@pytest.mark.quiet_engine
def test_a_second_engine_builds_from_the_first_ones_registry_cache(docker_client, engine2, registry,  # noqa: F811
                                                                   tmp_path, monkeypatch):
    host2, client2 = engine2
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    token = secrets.token_hex(4)
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(
        f"FROM {BASE} AS work\n"
        f"RUN sleep 2 && echo {token} > /opt/token && date +%s%N > /opt/when\n"
        f"FROM {BASE}\n"
        "COPY --from=work /opt/token /opt/when /opt/\n"
        "RUN date +%s%N > /opt/final\n")
    name = f"cache-{token}"
    ref = f"imagebuild/{name}:local"
    prefix = f"{registry}/cache"
    config = _docker_config(tmp_path, registry)

    first, said1 = _build(docker_client, ref, ctx, tmp_path,
                          rp.SharedCache(None, prefix, docker_config=config,
                                         auth={"username": USER, "password": PASSWORD}), "one")
    assert first.cached_steps < first.steps
    assert any(f"build cache pushed to {prefix}/{name}:buildcache" in s for s in said1), said1
    # the registry holds the builder's image with its cache records in its config
    api = f"http://{registry}/v2/cache/{name}"
    manifest = requests.get(f"{api}/manifests/buildcache", auth=(USER, PASSWORD), timeout=10, headers={
        "Accept": "application/vnd.docker.distribution.manifest.v2+json"}).json()
    blob = requests.get(f"{api}/blobs/{manifest['config']['digest']}", auth=(USER, PASSWORD), timeout=10).json()
    assert rp.INLINE_CACHE_KEY in blob
    # the normalised image does not: the same ID as the same recipe built without --cache-to
    plain, _ = _build(docker_client, f"imagebuild/{name}-plain:local", ctx, tmp_path, None, "plain",
                      kind="buildkit")
    assert plain.image_id == first.image_id

    monkeypatch.setenv("DOCKER_HOST", host2)          # the BuildKit CLI builds on the second engine
    second, said2 = _build(client2, ref, ctx, tmp_path, rp.SharedCache(prefix, None, docker_config=config), "two")
    assert second.cached_steps == second.steps > 0, said2           # every step from the registry
    assert second.image_id == first.image_id                        # normalised to the same ID
    run = ["cat", "/opt/token", "/opt/when", "/opt/final"]
    out1 = docker_client.containers.run(ref, run, remove=True)
    out2 = client2.containers.run(ref, run, remove=True)
    assert out1 == out2 and out1.decode().startswith(token)          # no step ran again
