"""`imagebuild context` and `imagebuild normalize` refuse in one line (issue 27): an existing folder
is not overwritten, a folder that is no such context is named. That a context builds with plain
`docker build` and normalises to `imagebuild build`'s image ID is tested on the communication
image, which CI builds with BuildKit anyway (tests/smoke/test_comms_wheels_image.py)."""

from __future__ import annotations

import json

from imagebuild import cli

from conftest import ROOT

MATRIX = str(ROOT / "matrix.yaml")


def test_an_existing_context_folder_is_not_overwritten(tmp_path, capsys):
    (tmp_path / "smoke-cpu").mkdir()
    (tmp_path / "smoke-cpu" / "mine.txt").write_text("kept\n")
    assert cli.main(["context", "--matrix", MATRIX, "smoke-cpu", "--output", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"imagebuild context: argument --output: {tmp_path / 'smoke-cpu'} exists; nothing was "
                   "written (choose another --output, or remove it)"]
    assert (tmp_path / "smoke-cpu" / "mine.txt").read_text() == "kept\n"
    assert cli.main(["context", "--matrix", MATRIX, "no-such-image", "--output", str(tmp_path / "x")]) == 2
    assert "unknown image 'no-such-image'" in capsys.readouterr().err


def test_normalize_wants_a_context_imagebuild_wrote(tmp_path, capsys):
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    assert cli.main(["normalize", "some/image:1", "--context", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"imagebuild normalize: argument --context: {tmp_path}: not a "
                                               "context `imagebuild context` wrote")
    (tmp_path / "imagebuild-context.json").write_text(json.dumps({"labels": {"a": 1}, "source_date_epoch": 5}))
    assert cli.main(["normalize", "some/image:1", "--context", str(tmp_path)]) == 2
    assert "no labels mapping or source_date_epoch" in capsys.readouterr().err


def test_a_context_says_how_buildkit_and_buildah_build_it(tmp_path, capsys):
    """smoke-cpu's context (its host wheels gathered into it): the file normalize reads, and the
    commands for each builder whose image normalize brings to `build`'s ID
    (tests/builder/test_context_builders.py builds it with both)."""
    assert cli.main(["context", "--matrix", MATRIX, "smoke-cpu", "--output", str(tmp_path)]) == 0
    ctx = tmp_path / "smoke-cpu"
    meta = json.loads((ctx / "imagebuild-context.json").read_text())
    assert meta["image_id"] == "smoke-cpu" and meta["builder"] == "buildkit"
    assert sorted(p.name for p in ctx.iterdir()) == [".dockerignore", "Dockerfile", "image.json",
                                                     "imagebuild-context.json", "lib", "requirements", "wheels"]
    ref = meta["ref"]
    lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    assert lines[0] == f"smoke-cpu: {ctx}"
    assert lines[1].startswith("DOCKER_BUILDKIT=1 docker build") and lines[1].endswith(f"-t {ref} {ctx}")
    assert lines[2] == (f"(or buildah: buildah bud --layers --format docker [--secret id=ca-bundle,src=CA.pem] -t "
                        f"{ref} {ctx} && buildah push {ref} docker-archive:{ctx}.tar:{ref} && docker load -i {ctx}.tar)")
    assert lines[3] == f"imagebuild normalize {ref} --context {ctx}"
