"""`imagebuild build --locked` builds FROM the base images.lock records, not from whatever the tag
names when the build starts (imagebuild/builder/pinning.py)."""

from __future__ import annotations

import io
import json
import uuid

import pytest

from conftest import ROOT
from imagebuild import cli
from imagebuild.builder import pinning
from imagebuild.errors import BuildError

BASE = "imagebuild/base:debian-bookworm"
ID_A = "sha256:" + "a" * 64
DIGEST = "registry.example.org:5000/team/cuda@sha256:" + "d" * 64


# ---------------------------------------------------------------- the rewriting (pure logic)

def test_pin_text_rewrites_only_external_from_lines():
    text = ("# FROM ubuntu:24.04 in a comment stays\n"
            "FROM --platform=linux/amd64 ubuntu:24.04 AS devel\n"
            "RUN echo FROM ubuntu:24.04\n"
            "FROM devel AS second\n"
            "from ubuntu:24.04\r\n"
            "COPY --from=devel /x /x\n")
    out = pinning.pin_text(text, {"ubuntu:24.04": "ubuntu@sha256:" + "1" * 64})
    assert out.splitlines(keepends=True) == [
        "# FROM ubuntu:24.04 in a comment stays\n",
        f"FROM --platform=linux/amd64 ubuntu@sha256:{'1' * 64} AS devel\n",
        "RUN echo FROM ubuntu:24.04\n",
        "FROM devel AS second\n",
        f"from ubuntu@sha256:{'1' * 64}\r\n",
        "COPY --from=devel /x /x\n"]


class _NoTagging:
    """Stands in for the engine where no tag may be made (a digest pin needs none)."""
    @staticmethod
    def tag(*_a, **_k):
        raise AssertionError("a base pinned by digest needs no temporary tag")

    @staticmethod
    def untag(*_a, **_k):
        raise AssertionError("nothing was tagged")


def test_a_recorded_registry_digest_is_used_as_is():
    text = "FROM cuda:13.0-base AS build\nRUN true\nFROM cuda:13.0-base\n"
    pinned = pinning.pin_bases(_NoTagging(), text, {"cuda:13.0-base": {"id": ID_A, "digest": DIGEST}},
                               what="img")
    assert pinned.text == f"FROM {DIGEST} AS build\nRUN true\nFROM {DIGEST}\n"
    assert pinned.temporary == []
    assert pinned.labels == {"org.opencontainers.image.base.name": "cuda:13.0-base",
                             "org.opencontainers.image.base.digest": "sha256:" + "d" * 64}


def test_a_base_the_lock_knows_nothing_of_is_refused():
    with pytest.raises(BuildError, match="records no id or digest for its base cuda:13.0-base"):
        pinning.pin_bases(_NoTagging(), "FROM cuda:13.0-base\n",
                          {"cuda:13.0-base": {"id": None, "digest": None}}, what="img")


# ---------------------------------------------------------------- on the real engine

@pytest.fixture()
def moved_tag(docker_client):
    """Two small images A and B on the local base; the tag the recipe names points at B, the lock
    at A (the tag moved after the lock was written)."""
    try:
        docker_client.images.get(BASE)
    except Exception:  # noqa: BLE001 - ImageNotFound
        assert cli.main(["base", "debian-bookworm"]) == 0, "imagebuild base debian-bookworm failed"
    token = uuid.uuid4().hex[:12]
    made = {}
    for name in ("a", "b"):
        ref = f"imagebuild/pin-{token}-{name}:test"
        docker_client.images.build(fileobj=io.BytesIO(f"FROM {BASE}\nRUN echo {name} > /marker\n".encode()),
                                   tag=ref, rm=True)
        made[name] = docker_client.images.get(ref)
    moving = f"imagebuild/pin-{token}-moving:tag"
    made["b"].tag(moving)
    refs = [moving, *(f"imagebuild/pin-{token}-{n}:test" for n in ("a", "b"))]
    yield moving, made["a"], refs
    for ref in [f"imagebuild/pin-{token}-built:local", *refs]:
        try:
            docker_client.images.remove(ref, force=True)
        except Exception:  # noqa: BLE001 - already gone
            pass


def _temporary_tags(client) -> list[str]:
    return [t for image in client.images.list() for t in image.tags
            if t.startswith(pinning.PIN_REPOSITORY + ":")]


def test_build_uses_the_locked_id_when_the_tag_moved(docker_client, moved_tag, tmp_path):
    from imagebuild.builder.scheduler import BuildJob, build_all
    from imagebuild.engines import get_engine
    from imagebuild.builder.reproducible import BuildTimeEngine

    moving, image_a, refs = moved_tag
    built = moving.replace("-moving:tag", "-built:local")
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    recipe = f"FROM {moving} AS first\nRUN cp /marker /seen\nFROM first\n"
    (ctx / "Dockerfile").write_text(recipe)
    engine = BuildTimeEngine(get_engine("docker", client=docker_client), {},
                             pins={built: {moving: {"id": image_a.id, "digest": None}}})
    before = set(_temporary_tags(docker_client))
    (out,) = build_all([BuildJob(image_id="pin-test", context=ctx, ref=built)], engine=engine,
                       log_dir=tmp_path / "logs")
    assert out.ok, out.error
    seen = docker_client.containers.run(built, ["cat", "/seen"], remove=True).decode().strip()
    assert seen == "a", "the build started from what the tag names now, not from the locked id"
    labels = docker_client.images.get(built).labels
    assert labels["org.opencontainers.image.base.name"] == moving
    assert labels["org.opencontainers.image.base.digest"] == image_a.id
    assert (ctx / "Dockerfile").read_text() == recipe, "the rendered recipe is left as generated"
    assert (ctx / pinning.LOCKED_DOCKERFILE).read_text().startswith(f"FROM {pinning.PIN_REPOSITORY}:")
    assert set(_temporary_tags(docker_client)) == before, "the temporary tag outlived the build"

    # without the pin the same recipe builds on B: the test above can tell the two apart
    plain = BuildTimeEngine(get_engine("docker", client=docker_client), {})
    (out,) = build_all([BuildJob(image_id="pin-test", context=ctx, ref=built)], engine=plain,
                       log_dir=tmp_path / "logs")
    assert out.ok, out.error
    assert docker_client.containers.run(built, ["cat", "/seen"], remove=True).decode().strip() == "b"


def test_a_locked_id_the_engine_lost_is_one_line(docker_client, moved_tag, tmp_path):
    from imagebuild.builder.scheduler import BuildJob, build_all
    from imagebuild.engines import get_engine
    from imagebuild.builder.reproducible import BuildTimeEngine

    moving, _image_a, _refs = moved_tag
    built = moving.replace("-moving:tag", "-built:local")
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(f"FROM {moving}\nRUN true\n")
    gone = "sha256:" + uuid.uuid4().hex * 2
    engine = BuildTimeEngine(get_engine("docker", client=docker_client), {},
                             pins={built: {moving: {"id": gone, "digest": None}}})
    (out,) = build_all([BuildJob(image_id="pin-test", context=ctx, ref=built)], engine=engine,
                       log_dir=tmp_path / "logs")
    assert not out.ok
    assert "is no longer in the engine" in out.error and "\n" not in out.error
    assert not _temporary_tags(docker_client)


def test_locked_build_of_smoke_cpu_starts_from_the_locked_base(smoke_cpu_image, docker_client, tmp_path):
    """The README's path: lock, then build --locked. The log shows the pinned FROM, and the image is
    the one the unlocked build made (same base, same recipe, normalised: same id)."""
    lock = tmp_path / "images.lock"
    matrix = str(ROOT / "matrix.yaml")
    assert cli.main(["lock", "--matrix", matrix, "--lock", str(lock), "smoke-cpu"]) == 0
    entry = json.loads(lock.read_text())["images"]["smoke-cpu"]
    base_id = docker_client.images.get(BASE).id
    assert entry["bases"][BASE]["id"] == base_id
    unlocked_id = docker_client.images.get(smoke_cpu_image).id
    out = tmp_path / "build"
    logs = tmp_path / "logs"
    assert cli.main(["build", "--matrix", matrix, "--locked", "--lock", str(lock), "--output", str(out),
                     "--log-dir", str(logs), "--quiet", "smoke-cpu"]) == 0
    pinned = (out / "smoke-cpu" / pinning.LOCKED_DOCKERFILE).read_text()
    assert f"FROM {pinning.PIN_REPOSITORY}:{base_id.split(':')[1]}-" in pinned
    assert not [line for line in pinned.splitlines() if line.startswith(f"FROM {BASE}")]
    assert docker_client.images.get(smoke_cpu_image).id == unlocked_id
