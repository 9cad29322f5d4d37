"""`imagebuild notes IMAGE|REF`: the human page of an image, every line from the matrix, the wheel
lock or images.lock; attached to the published image as an OCI referrer by `publish --notes`
(against the real registry and engine of tests/deliver/test_publish.py)."""

from __future__ import annotations

import hashlib
import json
import pytest

from conftest import ROOT, answer
from imagebuild import cli
from imagebuild.deliver import lockfile, notes, referrers
from imagebuild.render.run import MatrixRun
from imagebuild.versions import NONE
from registry_service import api_for, build_small, engine, registry  # noqa: F401 - fixtures
from test_publish_referrers import cli_publish

MATRIX = str(ROOT / "matrix.yaml")


@pytest.fixture(scope="module")
def run():
    return MatrixRun.open(MATRIX)


def _cli(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_every_component_row_is_the_matrix_s(run, capsys):
    k = run.k
    for image_id in ("smoke-cpu", "pytorch-2.13.0-cu130-ubuntu24.04-runtime",
                     "comms-cu130-nccl2.30.7-debian12-runtime"):
        spec = run.images[image_id]
        code, out, _ = _cli(capsys, "notes", image_id, "--matrix", MATRIX)
        assert code == 0 and out.startswith(f"# {image_id}\n")
        for comp in notes.COMPONENTS:
            val = spec.stack.get(comp, NONE)
            row = next(ln for ln in out.splitlines() if ln.startswith(f"| {comp} |"))
            if val == NONE:
                assert row == f"| {comp} | not in this image |  |"
            elif comp != "os":
                assert row.startswith(f"| {comp} | {val} | ") and "not recorded" not in row, row
        if spec.stack["cuda"] != NONE:
            assert f"Minimum driver: {spec.min_driver} " in out
            # a branch the image runs on from a release says from which; one it does not, says so
            assert "| R580 | " in out and "| R535 |" not in out     # R535 is past its end of life
        assert "Not in images.lock" in out
    # the same inputs, the same bytes
    assert notes.render(k, run.images["smoke-cpu"], None) == notes.render(k, run.images["smoke-cpu"], None)


def test_the_lock_s_proof_and_a_published_reference(run, tmp_path, capsys):
    spec = run.images["smoke-cpu"]
    entry = lockfile.compute_entry(stack=dict(spec.stack), dockerfile_sha256="1" * 64, base_image=None,
                                   image_id="sha256:" + "2" * 64,
                                   smoke={"counts": {"fail": 0, "pass": 31, "skip": 2}, "passed": True,
                                          "report_sha256": "3" * 64})
    entry["provenance"] = {"base_digest": None, "recipe_sha256": "4" * 64, "sbom_sha256": "5" * 64,
                           "test_report_sha256": "3" * 64, "wheel_lock_sha256": None}
    entry["published"] = {"127.0.0.1:5000/hpc/smoke-cpu": {"digest": "sha256:" + "6" * 64,
                                                           "tags": sorted(spec.tags)}}
    lock = tmp_path / "images.lock"
    lockfile.write_lock(lock, {"smoke-cpu": entry})
    for ref in (f"127.0.0.1:5000/hpc/smoke-cpu:{spec.tags[0]}", "127.0.0.1:5000/hpc/smoke-cpu@sha256:" + "6" * 64,
                "smoke-cpu", spec.local_ref):
        code, out, _ = _cli(capsys, "notes", ref, "--matrix", MATRIX, "--lock", str(lock), "--json")
        page = answer(out, "notes")["markdown"]
        assert code == 0 and page.startswith("# smoke-cpu\n")
        assert "smoke suite: passed (31 pass, 0 fail, 2 skip), report sha256 `" + "3" * 64 in page
        assert "SBOM sha256: `" + "5" * 64 in page and "sha256:" + "6" * 64 in page
    out_file = tmp_path / "NOTES.md"
    code, out, _ = _cli(capsys, "notes", "smoke-cpu", "--matrix", MATRIX, "--lock", str(lock),
                        "--output", str(out_file))
    assert code == 0 and out_file.read_text() == notes.render(run.k, spec, entry)


@pytest.mark.parametrize("argv, needle", [
    (["notes", "no-such-image"], "argument IMAGE|REF"),
    (["notes", "127.0.0.1:5000/hpc/smoke-cpu:nope"], "argument IMAGE|REF"),
    (["notes", "smoke-cpu", "--date", "2026-13-40"], "argument --date"),
    (["notes", "smoke-cpu", "--output", "/dev/null"], "argument --output"),
])
def test_bad_input_is_one_line(argv, needle, capsys):
    code, _, err = _cli(capsys, *argv, "--matrix", MATRIX)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_publish_attaches_the_notes_as_a_referrer(engine, registry, tmp_path, monkeypatch, capfd,  # noqa: F811
                                                  run):
    """`publish --notes` pushes the page the lock vouches for as a text/markdown referrer of the
    published manifest; the registry serves the same bytes back."""
    name = "pub-notes"
    ref = build_small(engine, name)
    page = notes.render(run.k, run.images["smoke-cpu"], None).encode()
    # the published image is a small stand-in (tests/deliver/test_publish.py's): its page is smoke-cpu's
    monkeypatch.setattr(notes, "render", lambda k, spec, entry, **kw: page.decode())
    capfd.readouterr()
    assert cli_publish(engine, registry, ref, name, tmp_path, monkeypatch, "--json", "--notes") == 0
    out, _ = capfd.readouterr()
    result = answer(out, "publish")[0]
    attached = result["notes"]
    assert attached["layer_digest"] == "sha256:" + hashlib.sha256(page).hexdigest()
    api = api_for(registry)
    repo = f"ci/{name}"
    listed, _ = referrers.list_referrers(api, repo, result["digest"])
    mine = [m for m in listed if m.get("artifactType") == referrers.NOTES_MARKDOWN]
    assert [m["digest"] for m in mine] == [attached["digest"]]
    body = json.loads(api.get_manifest(repo, attached["digest"], accept=referrers.OCI_MANIFEST).body)
    assert api.get_blob(repo, body["layers"][0]["digest"], max_bytes=1 << 20) == page

