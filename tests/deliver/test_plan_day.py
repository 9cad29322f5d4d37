"""`imagebuild plan` on the driver-upgrade day (issue 46): a driver is an input to no recipe, so an
upgrade queues no build of an image images.lock records with the recipe the matrix renders now;
it says which images to keep, move to, build, rebuild or retire, and which tag each GPU pool
moves to, in the user's words. The lock here is written from the matrix's own rendered recipes
(what `imagebuild lock` records), with publish records in the lock's format."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT, answer
from imagebuild import cli
from imagebuild.deliver import lockfile
from imagebuild.deliver.plan import ACTIONS, BUILDS, day, github_matrix
from imagebuild.digests import sha256_bytes
from imagebuild.render.renderer import Renderer
from imagebuild.render.run import MatrixRun

MATRIX = str(ROOT / "matrix.yaml")
FROM, TO = "570.172.08", "580.95.05"


@pytest.fixture(scope="module")
def run():
    return MatrixRun.open(MATRIX)


@pytest.fixture(scope="module")
def recipes(run):
    r = Renderer()
    return {s.id: sha256_bytes(r.dockerfile(s, run.k).encode()) for s in run.images.values()}


def _lock(run, recipes, *, published=True, changed=()):
    out = {}
    for i, spec in sorted(run.images.items()):
        entry = lockfile.compute_entry(stack=dict(spec.stack),
                                       dockerfile_sha256="0" * 64 if i in changed else recipes[i],
                                       base_image=None, image_id="sha256:" + sha256_bytes(i.encode()),
                                       smoke=None)
        if published:
            entry["published"] = {f"127.0.0.1:5000/hpc/{i}": {"digest": "sha256:" + sha256_bytes(i.encode()),
                                                               "tags": sorted(spec.tags)}}
        out[i] = entry
    return out


def test_a_driver_only_upgrade_queues_no_build_and_moves_each_pool(run, recipes):
    specs = list(run.images.values())
    plan = day(run.k, specs, FROM, TO, ["H100", "A100"], locked=_lock(run, recipes), recipes=recipes)
    assert github_matrix(plan.verdicts)["include"] == []
    assert {v.action for v in plan.verdicts} <= set(ACTIONS) - set(BUILDS)
    moved = [v for v in plan.verdicts if v.action == "move"]
    assert moved and all(v.status in ("newly-usable", "improved") and v.published for v in moved)
    for v in plan.verdicts:       # the reasons are the user's, not the solver's
        assert "you asked for" not in v.why and "(your wish)" not in v.why
    for pool in plan.pools:
        assert pool.action == "move" and pool.after in {v.image for v in moved}
        assert pool.after_tag == run.images[pool.after].tag and pool.after_tag in pool.why
        assert pool.published_only


def test_a_changed_recipe_is_rebuilt_and_an_unbuilt_image_is_built(run, recipes):
    specs = list(run.images.values())
    newly = next(v.image for v in day(run.k, specs, FROM, TO, ["H100"]).verdicts
                 if v.status == "newly-usable" and not run.images[v.image].depends_on)
    kept = next(v.image for v in day(run.k, specs, FROM, TO, ["H100"]).verdicts
                if v.status == "unchanged" and not run.images[v.image].depends_on)
    locked = _lock(run, recipes, changed=(kept,))
    del locked[newly]
    plan = day(run.k, specs, FROM, TO, ["H100"], locked=locked, recipes=recipes)
    rows = {r["image"]: r for r in github_matrix(plan.verdicts)["include"]}
    assert set(rows) == {newly, kept}
    assert rows[newly]["action"] == "build" and rows[kept]["action"] == "rebuild"


def test_a_downgrade_retires_and_the_cli_reports_it(run, recipes, tmp_path, capsys):
    lock = tmp_path / "images.lock"
    lockfile.write_lock(lock, _lock(run, recipes))
    code = cli.main(["plan", "--matrix", MATRIX, "--driver-from", TO, "--driver-to", FROM,
                     "--gpu", "H100", "--lock", str(lock), "--json"])
    doc = answer(capsys.readouterr().out, "plan", code=code)
    assert code == 0 and doc["lock_read"]
    retired = [i for i in doc["images"] if i["action"] == "retire"]
    assert retired and all(i["status"] == "broken" and i["why"].startswith(f"does not run on {FROM}")
                           for i in retired)
    (pool,) = doc["pools"]
    assert pool["gpu"] == "H100" and pool["action"] in ("move", "stay")
    code = cli.main(["plan", "--matrix", MATRIX, "--driver-from", FROM, "--driver-to", TO,
                     "--gpu", "H100", "--lock", str(lock), "--format", "github"])
    assert code == 0 and json.loads(capsys.readouterr().out) == {"include": []}
    code = cli.main(["plan", "--matrix", MATRIX, "--driver-from", FROM, "--driver-to", TO,
                     "--gpu", "H100,any"])
    assert code == 2 and "argument --gpu" in capsys.readouterr().err
