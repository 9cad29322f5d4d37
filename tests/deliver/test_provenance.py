"""Provenance in images.lock (recipe, wheel lock, SBOM and test report hashes, the base the image
was built on) and the publish gate on it: only an image whose engine id and smoke report are the
ones the lock records is pushed."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import types
import uuid
from pathlib import Path

import pytest

from imagebuild import cli, knowledge
from imagebuild.deliver import lockfile, publish
from imagebuild.errors import ImagebuildError

from conftest import fake_matrix

ROOT = Path(__file__).resolve().parents[2]
ID_A = "sha256:" + "a" * 64
ID_B = "sha256:" + "b" * 64


def test_context_hash_is_stable_and_sees_every_file_but_host_wheels(tmp_path):
    ctx = tmp_path / "ctx"
    (ctx / "lib").mkdir(parents=True)
    (ctx / "wheels").mkdir()
    (ctx / "Dockerfile").write_text("FROM x\n")
    (ctx / "lib" / "a.py").write_text("a = 1\n")
    (ctx / "wheels" / "torch.whl").write_bytes(b"1")
    first = lockfile.context_sha256(ctx)
    assert first == lockfile.context_sha256(ctx)
    (ctx / "wheels" / "torch.whl").write_bytes(b"2")       # pinned by hash in requirements/
    assert lockfile.context_sha256(ctx) == first
    (ctx / "lib" / "a.py").write_text("a = 2\n")
    assert lockfile.context_sha256(ctx) != first


def test_report_and_sbom_count_only_for_the_image_they_describe(tmp_path):
    report = tmp_path / "r.json"
    report.write_text(json.dumps({"image_id": ID_A, "passed": True}))
    assert lockfile.report_sha256_for(report, ID_A) == lockfile.sha256_file(report)
    assert lockfile.report_sha256_for(report, ID_B) is None
    assert lockfile.report_sha256_for(tmp_path / "none.json", ID_A) is None
    sbom = tmp_path / "s.cdx.json"
    sbom.write_text(json.dumps({"metadata": {"component": {"bom-ref": f"image:{ID_A}"}}}))
    assert lockfile.sbom_sha256_for(sbom, ID_A) == lockfile.sha256_file(sbom)
    assert lockfile.sbom_sha256_for(sbom, ID_B) is None
    sbom.write_text("[]")
    with pytest.raises(ImagebuildError, match="not a CycloneDX SBOM"):
        lockfile.sbom_sha256_for(sbom, ID_A)


def _entry(**prov):
    entry = lockfile.compute_entry(stack={}, dockerfile_sha256="0" * 64, base_image=None, image_id=ID_A,
                                   smoke=None)
    entry["provenance"] = {"base_digest": None, "recipe_sha256": "1" * 64, "sbom_sha256": None,
                           "test_report_sha256": None, "wheel_lock_sha256": None, **prov}
    return entry


def test_lock_provenance_is_checked_when_read_and_drift_names_it(tmp_path):
    path = tmp_path / "images.lock"
    lockfile.write_lock(path, {"x": _entry(base_digest=ID_B)})
    assert lockfile.read_lock(path)["x"]["provenance"]["base_digest"] == ID_B
    for bad in ({"recipe_sha256": None}, {"sbom_sha256": "nothex"}, {"base_digest": "b" * 64}):
        doc = json.loads(path.read_text())
        doc["images"]["x"]["provenance"].update(bad)
        path.write_text(json.dumps(doc))
        with pytest.raises(ImagebuildError, match="provenance"):
            lockfile.read_lock(path)
    doc["images"]["x"]["provenance"]["extra"] = None
    path.write_text(json.dumps(doc))
    with pytest.raises(ImagebuildError, match="provenance must be"):
        lockfile.read_lock(path)
    lines = lockfile.drift(_entry(), _entry(recipe_sha256="2" * 64, sbom_sha256="3" * 64))
    assert lines == ["recipe sha256 changed", "sbom sha256 added"]
    assert lockfile.drift(_entry(base_digest=ID_A), _entry(base_digest=ID_B)) == [
        f"built on base {ID_A[:19]} -> {ID_B[:19]}"]
    # a rebuild that gives another image id is drift (lock --check exits 1 on it)
    other = _entry()
    other["image_id"] = ID_B
    assert lockfile.drift(_entry(), other) == [f"image {ID_A[:19]} -> {ID_B[:19]}"]


def test_lock_records_recipe_and_wheel_lock_hashes(tmp_path):
    from imagebuild.render.run import load_images

    lock = tmp_path / "images.lock"
    proc = subprocess.run([sys.executable, "-m", "imagebuild", "lock", "smoke-cpu", "--no-engine", "--lock",
                           str(lock), "--reports-dir", str(tmp_path), "--sbom-dir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    prov = lockfile.read_lock(lock)["smoke-cpu"]["provenance"]
    spec = load_images(ROOT / "matrix.yaml")["smoke-cpu"]
    assert prov["recipe_sha256"] == lockfile.recipe_sha256(spec, knowledge.load(ROOT / "matrix.yaml"))
    assert prov["wheel_lock_sha256"] == lockfile.sha256_file(ROOT / spec.wheel_lock)
    assert (prov["base_digest"], prov["sbom_sha256"], prov["test_report_sha256"]) == (None, None, None)
    again = subprocess.run([sys.executable, "-m", "imagebuild", "lock", "smoke-cpu", "--no-engine", "--check",
                            "--lock", str(lock), "--reports-dir", str(tmp_path), "--sbom-dir", str(tmp_path)],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr


def test_publish_gate_on_the_lock(tmp_path):
    raw = b'{"image_id": "%s", "passed": true}' % ID_A.encode()
    ok = _entry(test_report_sha256=lockfile.sha256_bytes(raw))
    lockfile.check_publishable(ok, name="x", engine_id=ID_A, report_raw=raw, lock_path="images.lock")
    cases = [(None, ID_A, raw, "x: not in the lock"),
             (ok, ID_B, raw, "the lock records image sha256:aaaaaaaaaaaa, the engine holds sha256:bbbbbbbbbbbb"),
             (_entry(), ID_A, raw, "the lock records no test report"),
             (ok, ID_A, raw + b" ", "the smoke report is not the one the lock records")]
    for entry, engine_id, report, why in cases:
        with pytest.raises(publish.NotTestedError) as info:
            lockfile.check_publishable(entry, name="x", engine_id=engine_id, report_raw=report,
                                       lock_path="images.lock")
        assert why in str(info.value) and "not published" in str(info.value) and "\n" not in str(info.value)


@pytest.fixture()
def small_image(docker_client):
    token = uuid.uuid4().hex
    ref = f"imagebuild/prov-{token[:8]}:test"
    dockerfile = f"FROM imagebuild/base:debian-bookworm AS src\nRUN echo {token} > /token\n" \
                 "FROM scratch\nCOPY --from=src /token /token\n"
    docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=ref, rm=True)
    yield ref
    docker_client.images.remove(ref, force=True)


def test_publish_cli_refuses_what_the_lock_does_not_vouch_for(docker_client, small_image, tmp_path,
                                                             monkeypatch, capfd):
    """The real engine; the registry (a closed port) is never reached: every refusal comes first."""
    name = "prov-gate"
    engine_id = docker_client.images.get(small_image).id
    report = tmp_path / f"{name}.json"
    report.write_text(json.dumps({"image": name, "image_id": engine_id, "passed": True}))
    spec = types.SimpleNamespace(id=name, local_ref=small_image, tags=["1"], labels={}, stack={})
    fake_matrix(monkeypatch, {name: spec})
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))
    lock = tmp_path / "images.lock"

    def publish_cli() -> tuple[int, str]:
        code = cli.main(["publish", name, "--registry", "localhost:9/none", "--report", str(report),
                         "--lock", str(lock)])
        return code, capfd.readouterr().err

    code, err = publish_cli()                      # no lock at all
    assert code == 2 and len(err.strip().splitlines()) == 1 and "no lock file" in err, err
    entry = _entry(test_report_sha256=lockfile.sha256_file(report))
    entry["image_id"] = ID_B                       # the lock records another build
    lockfile.write_lock(lock, {name: entry})
    code, err = publish_cli()
    assert code == 2 and "the lock records image sha256:bbbbbbbbbbbb" in err and "Traceback" not in err, err
    entry["image_id"] = engine_id
    lockfile.write_lock(lock, {name: entry})
    report.write_text(report.read_text() + "\n")   # a report other than the recorded one
    code, err = publish_cli()
    assert code == 2 and "not the one the lock records" in err and len(err.strip().splitlines()) == 1, err
