"""One tag, two platforms (deliver/platforms.py): `imagebuild publish` of the images of one name
built for linux/amd64 and linux/arm64 writes an OCI image index under the name's tags, once both
are in the registry, and `docker pull --platform` gets each platform's own image back.

Real registry (test_publish's docker-registry with htpasswd) and real engine. The two images are
tiny (FROM scratch, one file naming the platform), built by the engine for each platform: a build
with no RUN step needs no emulation, so this runs in the fast tier; the arm64 images built and
tested under emulation are the heavy tier's (test_arm64_images.py)."""

from __future__ import annotations

import json
import types

import pytest

from conftest import fake_matrix
from imagebuild import cli
from imagebuild.deliver import platforms, publish
from imagebuild.deliver.referrers import OCI_INDEX, OCI_MANIFEST
from imagebuild.errors import RegistryError

from registry_service import (CREDS, PASSWORD, USER, api_for, engine, passing_report,  # noqa: F401 - fixtures
                              registry, write_lock)

NAME = "multi-pub"
TAG = "1.0-cpu"
TAGS = (TAG, f"{TAG}-20260101")
PLATFORMS = ("linux/amd64", "linux/arm64")


def _build(client, tmp_path, name: str, platform: str, token: str) -> str:
    ctx = tmp_path / f"ctx-{platform.replace('/', '-')}"
    ctx.mkdir()
    (ctx / "platform").write_text(f"{platform} {token}\n")
    (ctx / "Dockerfile").write_text(f"FROM scratch\nCOPY platform /platform\nLABEL io.imagebuild.image-id={name}\n")
    ref = f"imagebuild/{name}:{TAG}"
    image, _ = client.images.build(path=str(ctx), tag=ref, platform=platform, rm=True)
    assert image.attrs["Architecture"] == platform.split("/")[1]
    return ref


def _specs(client, tmp_path, token: str) -> dict:
    """Two ImageSpec-shaped twins, as the matrix expands a family with platforms: [x86_64, aarch64]."""
    out = {}
    for platform in PLATFORMS:
        iid = NAME if platform == PLATFORMS[0] else f"{NAME}-{platform.split('/')[1]}"
        ref = _build(client, tmp_path, iid, platform, token)
        out[iid] = types.SimpleNamespace(id=iid, base_name=NAME, oci_platform=platform, tag=TAG,
                                         tags=list(TAGS), local_ref=ref, labels={}, stack={})
    return out


def _publish(client, registry, tmp_path, monkeypatch, specs, iid, namespace):  # noqa: F811
    """`imagebuild publish IID` in-process, imagebuild.render.images replaced by ``specs``."""
    spec = specs[iid]
    report = tmp_path / f"{iid}.json"
    report.write_text(json.dumps(passing_report(client, spec.local_ref, iid)))
    fake_matrix(monkeypatch, specs)
    monkeypatch.setenv(publish.USER_ENV, USER)
    monkeypatch.setenv(publish.PASSWORD_ENV, PASSWORD)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))
    lock = write_lock(client, spec.local_ref, iid, report, tmp_path)
    return cli.main(["publish", iid, "--registry", f"{registry}/{namespace}", "--report", str(report),
                     "--lock", str(lock), "--json"])


def test_index_body_is_deterministic_and_typed_by_its_members():
    a = platforms.Member("linux/amd64", OCI_MANIFEST, "sha256:" + "a" * 64, 10, {"architecture": "amd64", "os": "linux"})
    b = platforms.Member("linux/arm64", OCI_MANIFEST, "sha256:" + "b" * 64, 11,
                         {"architecture": "arm64", "os": "linux", "variant": "v8"})
    body, media = platforms.index_body([a, b])
    assert media == OCI_INDEX and body == platforms.index_body([a, b])[0]
    doc = json.loads(body)
    assert [m["platform"]["architecture"] for m in doc["manifests"]] == ["amd64", "arm64"]
    assert doc["manifests"][1]["platform"]["variant"] == "v8" and doc["mediaType"] == OCI_INDEX
    docker = platforms.Member("linux/arm64", platforms.DOCKER_MANIFEST, b.digest, 11, b.platform)
    assert platforms.index_body([a, docker])[1] == platforms.DOCKER_LIST
    assert platforms.arch_tag("1.0-cpu-20260101", "linux/arm64") == "1.0-cpu-20260101-arm64"


@pytest.mark.registry
@pytest.mark.engine
def test_one_tag_two_platforms_pulled_back_per_platform(engine, registry, tmp_path, monkeypatch,  # noqa: F811
                                                         capsys):
    specs = _specs(engine, tmp_path, "t1")
    ids = {s.oci_platform: engine.images.get(s.local_ref).id for s in specs.values()}
    arm = f"{NAME}-arm64"
    # the arm64 image first (its CI job ended first): pushed under its own tags, no index yet
    assert _publish(engine, registry, tmp_path, monkeypatch, specs, arm, "plat") == 0
    out = json.loads(capsys.readouterr().out)["result"][0]
    assert out["platforms"]["digest"] is None and out["platforms"]["waiting_for"] == ["linux/amd64"]
    api = api_for(registry)
    repo = f"plat/{NAME}"
    assert api.manifest_digest(repo, TAG) is None and api.manifest_digest(repo, f"{TAG}-20260101") is None
    assert api.manifest_digest(repo, f"{TAG}-arm64") == out["digest"]
    # then amd64: both are there, the index is written under the name's own tags
    assert _publish(engine, registry, tmp_path, monkeypatch, specs, NAME, "plat") == 0
    out = json.loads(capsys.readouterr().out)["result"][0]
    index = out["platforms"]
    assert index["waiting_for"] == [] and set(index["manifests"]) == set(PLATFORMS)
    for tag in TAGS:
        assert api.manifest_digest(repo, tag) == index["digest"]
    served = api.get_manifest(repo, TAG)
    doc = json.loads(served.body)
    assert served.digest == index["digest"] and doc["mediaType"] == served.media_type
    assert [(m["platform"]["os"], m["platform"]["architecture"]) for m in doc["manifests"]] == \
        [("linux", "amd64"), ("linux", "arm64")]
    # pulled by the one tag, each platform gets its own image
    reference = f"{registry}/{repo}"
    for platform in PLATFORMS:
        for s in specs.values():
            try:
                engine.images.remove(f"{reference}:{TAG}")
            except Exception:  # noqa: BLE001 - not there yet
                pass
        pulled = engine.images.pull(reference, tag=TAG, platform=platform, auth_config=CREDS.auth_config())
        assert pulled.attrs["Architecture"] == platform.split("/")[1]
        assert pulled.id == ids[platform]
    # publishing again writes the same bytes: nothing moves
    assert _publish(engine, registry, tmp_path, monkeypatch, specs, arm, "plat") == 0
    assert json.loads(capsys.readouterr().out)["result"][0]["platforms"]["digest"] == index["digest"]


@pytest.mark.registry
@pytest.mark.engine
def test_a_platform_tag_serving_another_platform_is_refused(engine, registry, tmp_path):  # noqa: F811
    """A registry (or a mistaken push) whose TAG-arm64 serves the amd64 image: no index is written."""
    specs = _specs(engine, tmp_path, "t2")
    amd = specs[NAME]
    target = publish.parse_target(f"{registry}/lie")
    for spec, platform in ((amd, "linux/amd64"), (amd, "linux/arm64")):   # amd64's image twice
        publish.publish_image(_engine(engine), image_id=spec.id, local_ref=spec.local_ref,
                              tags=[platforms.arch_tag(t, platform) for t in TAGS], target=target,
                              report=passing_report(engine, spec.local_ref, spec.id), credentials=CREDS,
                              api=api_for(registry), repository_name=NAME)
    api = api_for(registry)
    with pytest.raises(RegistryError, match="serves an image for linux/amd64, not linux/arm64"):
        platforms.publish_index(api, host=registry, repository=f"lie/{NAME}",
                                tags=publish.order_tags(list(TAGS)), platforms=list(PLATFORMS))
    assert api.manifest_digest(f"lie/{NAME}", TAG) is None


@pytest.mark.registry
@pytest.mark.engine
def test_the_dated_tag_is_never_moved_to_another_index(engine, registry, tmp_path):  # noqa: F811
    target = publish.parse_target(f"{registry}/immut")
    api = api_for(registry)
    repo = f"immut/{NAME}"

    def push(spec, tags):
        return publish.publish_image(
            _engine(engine), image_id=spec.id, local_ref=spec.local_ref, tags=tags, target=target,
            report=passing_report(engine, spec.local_ref, spec.id), credentials=CREDS, api=api,
            repository_name=NAME, staging_tag=platforms.arch_tag(publish.STAGING_TAG, spec.oci_platform))

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for spec in _specs(engine, tmp_path / "a", "a").values():
        push(spec, [platforms.arch_tag(t, spec.oci_platform) for t in TAGS])
    first = platforms.publish_index(api, host=registry, repository=repo,
                                    tags=publish.order_tags(list(TAGS)), platforms=list(PLATFORMS))
    assert first.digest is not None
    # another arm64 image under the dated arm64 tag (moved by hand, as a mistaken push could):
    # the index over it would be another one, and the dated tag is not moved to it
    other = _specs(engine, tmp_path / "b", "b")[f"{NAME}-arm64"]
    push(other, ["other-arm64"])
    moved = api.get_manifest(repo, "other-arm64")
    api.put_manifest(repo, f"{TAG}-20260101-arm64", moved.body, moved.media_type)
    with pytest.raises(RegistryError, match="immutable tag .* already names"):
        platforms.publish_index(api, host=registry, repository=repo,
                                tags=publish.order_tags(list(TAGS)), platforms=list(PLATFORMS))
    for tag in TAGS:
        assert api.manifest_digest(repo, tag) == first.digest


def _engine(client):
    from imagebuild.engines import get_engine
    return get_engine("docker", client=client)
