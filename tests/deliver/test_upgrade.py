"""`imagebuild upgrade` runs the driver-upgrade day end to end on the real engine and the local
registry (tests/deliver/test_publish.py's): with a lock that records every image as built from the recipe
the matrix renders now and published, except smoke-cpu, whose recipe changed, the day builds,
tests, locks and publishes smoke-cpu alone, names each GPU pool's new tag, and writes its report
as Markdown, JSON and JUnit. A second plan on the lock it left queues nothing."""

from __future__ import annotations

import json
from xml.etree import ElementTree as ET

from conftest import ROOT, answer
from imagebuild import cli
from imagebuild.deliver import lockfile, publish
from imagebuild.deliver.plan import day, github_matrix
from imagebuild.digests import sha256_bytes
from imagebuild.render.renderer import Renderer
from imagebuild.render.run import MatrixRun
from registry_service import PASSWORD, USER, registry  # noqa: F401 - the registry fixture

MATRIX = str(ROOT / "matrix.yaml")
FROM, TO = "570.172.08", "580.95.05"


def _recipes(run):
    r = Renderer()
    return {s.id: sha256_bytes(r.dockerfile(s, run.k).encode()) for s in run.images.values()}


def test_the_day_end_to_end(registry, tmp_path, monkeypatch, capsys):  # noqa: F811
    run = MatrixRun.open(MATRIX)
    recipes = _recipes(run)
    entries = {}
    for image_id, spec in sorted(run.images.items()):
        entry = lockfile.compute_entry(stack=dict(spec.stack),
                                       dockerfile_sha256="0" * 64 if image_id == "smoke-cpu" else recipes[image_id],
                                       base_image=None, image_id="sha256:" + sha256_bytes(image_id.encode()),
                                       smoke=None)
        if image_id != "smoke-cpu":
            entry["published"] = {f"127.0.0.1:5000/hpc/{image_id}": {
                "digest": "sha256:" + sha256_bytes(image_id.encode()), "tags": sorted(spec.tags)}}
        entries[image_id] = entry
    lock = tmp_path / "images.lock"
    lockfile.write_lock(lock, entries)
    monkeypatch.setenv(publish.USER_ENV, USER)
    monkeypatch.setenv(publish.PASSWORD_ENV, PASSWORD)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))
    reports = tmp_path / "reports"
    code = cli.main(["upgrade", "--matrix", MATRIX, "--driver-from", FROM, "--driver-to", TO,
                     "--gpu", "H100", "--lock", str(lock), "--registry", f"{registry}/day",
                     "--reports-dir", str(reports), "--json"])
    doc = answer(capsys.readouterr().out, "upgrade", code=code)
    images = {i["image"]: i for i in doc["images"]}
    steps = [(s["step"], s["code"]) for s in images["smoke-cpu"]["done"]]
    assert code == 0, (steps, doc["failed"])
    assert images["smoke-cpu"]["action"] == "rebuild"
    assert steps == [("build", 0), ("test", 0), ("lock", 0), ("publish", 0)]
    assert all(not i["done"] for n, i in images.items() if n != "smoke-cpu")
    (pool,) = doc["pools"]
    assert pool["gpu"] == "H100" and pool["action"] == "move" and pool["after_tag"]
    # the lock now records smoke-cpu's new recipe, its tested image and where it was published
    after = lockfile.read_lock(lock)["smoke-cpu"]
    assert after["dockerfile_sha256"] == recipes["smoke-cpu"] and after["smoke"]["passed"]
    assert f"{registry}/day/smoke-cpu" in after["published"]
    # the report, three ways
    md = (reports / "upgrade.md").read_text()
    assert md.startswith(f"# Driver upgrade {FROM} -> {TO}") and pool["after_tag"] in md
    assert json.loads((reports / "upgrade.json").read_text())["pools"] == doc["pools"]
    suite = ET.parse(reports / "upgrade.junit.xml").getroot()
    assert (suite.get("tests"), suite.get("failures")) == ("4", "0")
    # the day is done: planning again on the lock it left queues nothing
    again = day(run.k, list(run.images.values()), FROM, TO, ["H100"],
                locked=lockfile.read_lock(lock), recipes=recipes)
    assert github_matrix(again.verdicts)["include"] == []
