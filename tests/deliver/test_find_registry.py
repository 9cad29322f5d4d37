"""`imagebuild publish` records what it pushed in images.lock, `imagebuild lock` keeps that record
for the same image and drops it for a new one, and `imagebuild find --registry` asks a real
registry (Debian's docker-registry with htpasswd auth and deletion enabled, started by
test_publish's fixture) whether each image's dated tag still serves the recorded digest.

Engine, registry, `lock`, `publish` and `find` are the real ones. The one stand-in: the local
reference of the two matrix images (smoke-cpu and a PyTorch runtime) is a tiny image built here
from the local base, so that the real builds other people keep in the shared engine are never
re-tagged; the ids, tags and stacks are the matrix's."""

from __future__ import annotations

import dataclasses
import json
import types

import pytest
import requests

from imagebuild import cli
from imagebuild.deliver import lockfile, publish
from imagebuild.render.images import ImageSpec
from imagebuild.render.run import MatrixRun

from conftest import ROOT, answer, fake_matrix
from registry_service import (PASSWORD, USER, build_small, engine, free_port,  # noqa: F401 - fixtures
                              passing_report, registry)

MATRIX = str(ROOT / "matrix.yaml")
CPU, GPU = "smoke-cpu", "pytorch-2.6.0-cu124-ubuntu22.04-runtime"
H100 = ["--driver", "580.159.04", "--gpu", "NVIDIA H100 80GB HBM3"]   # both images run there
CREDS = publish.Credentials(USER, PASSWORD)


@dataclasses.dataclass(frozen=True)
class _StandIn(ImageSpec):
    """A matrix image whose local reference is a tiny image built by these tests."""

    built_ref: str = ""

    @property
    def local_ref(self) -> str:
        return self.built_ref


@pytest.fixture(scope="module")
def real_run():
    return MatrixRun.open(MATRIX)


@pytest.fixture(scope="module")
def built(engine, registry, tmp_path_factory):
    """One tiny image per matrix id, with a passing smoke report for its engine id."""
    reports = tmp_path_factory.mktemp("find-registry-reports")
    refs = {CPU: build_small(engine, "findreg-cpu"), GPU: build_small(engine, "findreg-gpu")}
    for image_id, ref in refs.items():
        (reports / f"{image_id}.json").write_text(json.dumps(passing_report(engine, ref, image_id)))
    yield types.SimpleNamespace(refs=refs, reports=reports)
    for image in engine.images.list():     # only the names these tests made
        for tag in image.tags:
            if tag.startswith((f"{registry}/", "imagebuild/findreg-")):
                try:
                    engine.images.remove(tag, noprune=False)
                except Exception:  # noqa: BLE001 - best effort
                    pass


def cli_run(capfd, monkeypatch, real_run, refs, *argv, password=PASSWORD):
    """One `imagebuild` command in-process, the matrix images' local references pointed at
    ``refs``; registry credentials from the environment. (code, stdout, stderr)."""
    specs = dict(real_run.images)
    for image_id, ref in refs.items():
        spec = real_run.images[image_id]
        specs[image_id] = _StandIn(**{f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)},
                                   built_ref=ref)
    fake_matrix(monkeypatch, specs, k=real_run.k)
    monkeypatch.setenv(publish.USER_ENV, USER)
    monkeypatch.setenv(publish.PASSWORD_ENV, password)
    capfd.readouterr()
    code = cli.main(list(argv))
    out, err = capfd.readouterr()
    return code, out, err


class Project:
    """images.lock in a temporary folder, written by `imagebuild lock`, published by `publish`."""

    def __init__(self, capfd, monkeypatch, real_run, built, registry, tmp_path):
        self.capfd, self.monkeypatch, self.real = capfd, monkeypatch, real_run
        self.refs, self.reports, self.registry = dict(built.refs), built.reports, registry
        self.lock = tmp_path / "images.lock"
        self.tmp = tmp_path

    def run(self, *argv, password=PASSWORD):
        return cli_run(self.capfd, self.monkeypatch, self.real, self.refs, *argv, password=password)

    def do_lock(self, *ids):
        code, out, err = self.run("lock", *(ids or (CPU, GPU)), "--matrix", MATRIX, "--lock", str(self.lock),
                                  "--reports-dir", str(self.reports), "--sbom-dir", str(self.tmp / "sbom"))
        assert code == 0, err
        return err

    def do_publish(self, namespace):
        code, out, err = self.run("publish", CPU, GPU, "--matrix", MATRIX, "--lock", str(self.lock),
                                  "--reports-dir", str(self.reports), "--registry",
                                  f"{self.registry}/{namespace}")
        assert code == 0, err
        return out

    def find(self, namespace, *extra, json_out=True, registry=None):
        argv = ["find", "--matrix", MATRIX, "--lock", str(self.lock), *H100,
                "--registry", f"{registry or self.registry}/{namespace}", *extra]
        return self.run(*argv, *(["--json"] if json_out else []))

    def dated(self, image_id):
        return self.real.images[image_id].tags[-1]


@pytest.fixture
def project(capfd, monkeypatch, real_run, built, registry, tmp_path):
    return Project(capfd, monkeypatch, real_run, built, registry, tmp_path)


def api_for(host):
    return publish.RegistryAPI(host, CREDS, backoff=0.01)


# ----------------------------------------------------------------------------- publish records

@pytest.mark.registry
@pytest.mark.engine
def test_publish_records_the_verified_digest_in_the_lock(project, registry, engine):
    project.do_lock()
    assert all("published" not in e for e in lockfile.read_lock(project.lock).values())
    printed = project.do_publish("rec")
    entries = lockfile.read_lock(project.lock)
    api = api_for(registry)
    for image_id in (CPU, GPU):
        repo = f"{registry}/rec/{image_id}"
        record = entries[image_id]["published"]
        assert list(record) == [repo]
        digest = record[repo]["digest"]
        # the registry serves that digest under every tag, and the engine pushed it
        assert {api.manifest_digest(f"rec/{image_id}", t) for t in project.real.images[image_id].tags} == {digest}
        assert f"{repo}@{digest}" in engine.images.get(project.refs[image_id]).attrs["RepoDigests"]
        assert record[repo]["tags"] == sorted(project.real.images[image_id].tags)
        assert f"{repo}:{project.dated(image_id)}@{digest}" in printed
    # written by the lock's own writer: same entries, same bytes
    assert project.lock.read_text() == lockfile.dumps(entries)
    # a second registry is a second record; the first stays
    project.do_publish("rec2")
    record = lockfile.read_lock(project.lock)[CPU]["published"]
    assert sorted(record) == [f"{registry}/rec/{CPU}", f"{registry}/rec2/{CPU}"]


@pytest.mark.registry
@pytest.mark.engine
def test_lock_keeps_the_record_for_the_same_image_and_drops_it_for_a_new_one(project, engine):
    project.do_lock()
    project.do_publish("keep")
    before = lockfile.read_lock(project.lock)
    # the same images again: the records stay, byte for byte
    text = project.lock.read_text()
    assert project.do_lock() == ""
    assert project.lock.read_text() == text
    # smoke-cpu rebuilt (another image id) and tested again: its record goes, the other stays
    new = build_small(engine, "findreg-cpu-rebuilt")
    project.refs[CPU] = new
    report = project.tmp / "reports"
    report.mkdir()
    for image_id in (CPU, GPU):
        (report / f"{image_id}.json").write_text(json.dumps(
            passing_report(engine, project.refs[image_id], image_id)))
    project.reports = report
    err = project.do_lock(CPU)
    assert err.splitlines() == [f"imagebuild lock: warning: {CPU}: the image changed since it was "
                                "published; its publish record is dropped"]
    after = lockfile.read_lock(project.lock)
    assert "published" not in after[CPU] and after[CPU]["image_id"] != before[CPU]["image_id"]
    assert after[GPU] == before[GPU]
    # find: the registry still serves the old smoke-cpu under its dated tag, but nothing in the
    # lock says that is the image now locked and tested: not offered
    code, out, _ = project.find("keep")
    data = answer(out, "find")
    assert code == 0 and [i["image"] for i in data["images"]] == [GPU]
    (refused,) = data["not_offered"]
    assert refused["image"] == CPU and refused["registry"]["status"] == "unrecorded"
    assert refused["registry"]["serves"] == before[CPU]["published"][f"{project.registry}/keep/{CPU}"]["digest"]


def test_carry_published_needs_the_same_non_null_image_id():
    record = {"r:5000/ns/a": {"digest": "sha256:" + "1" * 64, "tags": ["t"]}}
    old = {"a": {"image_id": "sha256:" + "a" * 64, "published": record},
           "b": {"image_id": "sha256:" + "b" * 64, "published": record},
           "c": {"image_id": "sha256:" + "c" * 64, "published": record},
           "d": {"image_id": "sha256:" + "d" * 64}}
    new = {"a": {"image_id": "sha256:" + "a" * 64}, "b": {"image_id": "sha256:" + "e" * 64},
           "c": {"image_id": None}, "d": {"image_id": "sha256:" + "d" * 64}}
    assert lockfile.carry_published(old, new) == ["b", "c"]
    assert new["a"]["published"] == record
    assert all("published" not in new[i] for i in "bcd")


# ----------------------------------------------------------------------------- find asks the registry

@pytest.mark.registry
@pytest.mark.engine
def test_find_checks_each_tag_and_offers_the_digest(project):
    project.do_lock()
    project.do_publish("ok")
    code, out, err = project.find("ok")
    assert code == 0 and err == ""
    data = answer(out, "find")
    assert [i["image"] for i in data["images"]] == [GPU, CPU] and data["not_offered"] == []
    entries = lockfile.read_lock(project.lock)
    reg = project.registry
    for item in data["images"]:
        image_id, dated = item["image"], project.dated(item["image"])
        digest = entries[image_id]["published"][f"{reg}/ok/{image_id}"]["digest"]
        assert item["registry"]["status"] == "ok" and item["registry"]["serves"] == digest
        assert item["registry"]["tags"] == {t: digest for t in project.real.images[image_id].tags}
        assert item["docker"][0] == f"{reg}/ok/{image_id}@{digest}"
        assert item["commands"][:2] == [f"docker pull {reg}/ok/{image_id}@{digest}",
                                        f"enroot import docker://{reg}#ok/{image_id}:{dated}"]
    # the same inputs give the same bytes
    assert project.find("ok")[1] == out
    code, text, _ = project.find("ok", json_out=False)
    assert code == 0
    lines = text.splitlines()
    assert lines[0] == f"1. {GPU} (native)"
    assert lines[1] == f"   registry: ok ({project.dated(GPU)} serves the digest publish recorded)"
    assert lines[2].startswith(f"   docker pull {reg}/ok/{GPU}@sha256:")
    assert "Not offered" not in text


@pytest.mark.registry
@pytest.mark.engine
def test_find_does_not_offer_an_image_whose_dated_tag_moved(project, engine, registry):
    project.do_lock()
    project.do_publish("moved")
    # someone pushes another image under the PyTorch image's dated tag
    other = engine.images.get(build_small(engine, "findreg-other"))
    repo = f"{registry}/moved/{GPU}"
    other.tag(repo, tag=project.dated(GPU))
    for event in engine.api.push(repo, tag=project.dated(GPU), auth_config=CREDS.auth_config(),
                                 stream=True, decode=True):
        assert "error" not in event, event
    moved_to = api_for(registry).manifest_digest(f"moved/{GPU}", project.dated(GPU))
    recorded = lockfile.read_lock(project.lock)[GPU]["published"][repo]["digest"]
    assert moved_to != recorded
    code, out, _ = project.find("moved")
    data = answer(out, "find")
    assert code == 0 and [i["image"] for i in data["images"]] == [CPU]
    (refused,) = data["not_offered"]
    assert refused["image"] == GPU and refused["registry"]["status"] == "moved"
    assert refused["registry"]["serves"] == moved_to and refused["registry"]["recorded"] == recorded
    assert refused["why"].startswith(f"tag moved to {moved_to}: {repo}:{project.dated(GPU)} no longer serves "
                                     f"{recorded}")
    code, text, _ = project.find("moved", json_out=False)
    assert code == 0
    assert f"docker pull {repo}" not in text and f"#moved/{GPU}" not in text   # not offered to run
    assert "Not offered: 1 image(s) that run here are not in the registry as published:" in text
    assert f"  {GPU}: tag moved to {moved_to}" in text


@pytest.mark.registry
@pytest.mark.engine
def test_find_says_not_in_registry_for_a_deleted_or_never_pushed_image(project, registry):
    project.do_lock()
    project.do_publish("gone")
    repo = f"gone/{CPU}"
    digest = lockfile.read_lock(project.lock)[CPU]["published"][f"{registry}/{repo}"]["digest"]
    deleted = requests.delete(f"http://{registry}/v2/{repo}/manifests/{digest}", auth=(USER, PASSWORD),
                              timeout=10)
    assert deleted.status_code == 202, deleted.text
    code, out, _ = project.find("gone")
    data = answer(out, "find")
    assert code == 0 and [i["image"] for i in data["images"]] == [GPU]
    (refused,) = data["not_offered"]
    assert refused["registry"]["status"] == "not-in-registry" and refused["registry"]["serves"] is None
    assert refused["why"] == f"not in registry: {registry}/{repo}:{project.dated(CPU)} does not exist"
    # a namespace nothing was pushed to: nothing is offered, exit 1, each image says why
    code, text, err = project.find("never", json_out=False)
    assert code == 1 and err == ""
    assert text.splitlines() == [
        f"No image of {project.lock} that runs on this host is in {registry}/never as it was published.",
        f"  {GPU}: not in registry: {registry}/never/{GPU}:{project.dated(GPU)} does not exist",
        f"  {CPU}: not in registry: {registry}/never/{CPU}:{project.dated(CPU)} does not exist"]


@pytest.mark.registry
@pytest.mark.engine
def test_dead_registry_is_one_line_exit_3_and_no_check_asks_nothing(project, registry):
    project.do_lock()
    project.do_publish("dead")
    dead = f"127.0.0.1:{free_port()}"     # nothing listens there
    code, out, err = project.find("dead", registry=dead, json_out=False)
    assert code == 3 and out == ""
    assert err.splitlines() == [f"imagebuild find: registry {dead} is unreachable: GET /v2/ failed 4 times "
                                "(connection refused)"]
    # --no-check prints the recorded digest without asking anyone: the record is moved to the
    # dead host's name, which no registry answers
    entries = lockfile.read_lock(project.lock)
    for image_id, entry in entries.items():
        (record,) = entry["published"].values()
        entry["published"] = {f"{dead}/dead/{image_id}": record}
    lockfile.write_lock(project.lock, entries)
    code, out, err = project.find("dead", "--no-check", registry=dead, json_out=False)
    assert code == 0 and err == ""
    digest = entries[CPU]["published"][f"{dead}/dead/{CPU}"]["digest"]
    assert f"   docker pull {dead}/dead/{CPU}@{digest}" in out.splitlines()
    assert "the registry was not asked (--no-check)" in out
    # --no-check alone is a mistake
    code, out, err = project.run("find", "--matrix", MATRIX, "--lock", str(project.lock), *H100, "--no-check")
    assert code == 2 and out == "" and err.splitlines() == [
        "imagebuild find: argument --no-check: --no-check goes with --registry (without it no registry "
        "is asked)"]


@pytest.mark.registry
@pytest.mark.engine
def test_refused_credentials_are_one_line_and_never_printed(project, registry):
    project.do_lock()
    wrong = "Wr0ng-find-Pw-7q2x"
    code, out, err = project.run("find", "--matrix", MATRIX, "--lock", str(project.lock), *H100,
                                 "--registry", f"{registry}/ci", password=wrong)
    assert code == 2 and out == ""
    assert err.splitlines() == [f"imagebuild find: registry {registry} refused the credentials for {USER}"]
    assert wrong not in out + err


# ----------------------------------------------------------------------------- the record's grammar

GOOD = {"digest": "sha256:" + "a" * 64, "tags": ["1.0", "1.0-20261121"]}


@pytest.mark.parametrize("published, says", [
    ({}, "published must map HOST[:PORT]/NAMESPACE/IMAGE to {digest, tags}"),
    ({"reg:5000/ns/other-image": GOOD}, "published key 'reg:5000/ns/other-image' is not "
                                        "HOST[:PORT]/NAMESPACE/smoke-cpu"),
    ({"no-namespace": GOOD}, "is not HOST[:PORT]/NAMESPACE/smoke-cpu"),
    ({"reg:5000/ns/smoke-cpu": {"digest": "sha256:abc", "tags": ["1.0"]}}, ".digest is not sha256:"),
    ({"reg:5000/ns/smoke-cpu": {**GOOD, "extra": 1}}, "must be {digest, tags}"),
    ({"reg:5000/ns/smoke-cpu": {**GOOD, "tags": []}}, ".tags must be a non-empty list of tags"),
    ({"reg:5000/ns/smoke-cpu": {**GOOD, "tags": ["b", "a"]}}, ".tags must be sorted and unique"),
    ({"reg:5000/ns/smoke-cpu": {**GOOD, "tags": ["bad tag"]}}, ".tags must be a non-empty list"),
])
def test_a_malformed_publish_record_is_one_line_naming_the_lock(tmp_path, published, says, capsys):
    entry = lockfile.compute_entry(stack={}, dockerfile_sha256="0" * 64, base_image=None,
                                   image_id=None, smoke=None)
    path = tmp_path / "images.lock"
    path.write_text(json.dumps({"images": {CPU: {**entry, "published": published}}, "version": 1}))
    with pytest.raises(lockfile.LockError) as err:
        lockfile.read_lock(path)
    assert str(err.value).startswith(f"{path}: image 'smoke-cpu': ") and says in str(err.value)
    code = cli.main(["find", "--matrix", MATRIX, "--lock", str(path), "--gpu", "none"])
    out, errtext = capsys.readouterr()
    assert code == 2 and out == "" and errtext == f"imagebuild find: {err.value}\n"
    # the good record is read back as written
    path.write_text(lockfile.dumps({CPU: {**entry, "published": {"reg:5000/ns/smoke-cpu": GOOD}}}))
    assert lockfile.read_lock(path)[CPU]["published"] == {"reg:5000/ns/smoke-cpu": GOOD}
