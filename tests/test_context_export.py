"""`imagebuild context` and `imagebuild normalize` refuse in one line (issue 27): an existing folder
is not overwritten, a folder that is no such context is named. That a context builds with plain
`docker build` and normalises to `imagebuild build`'s image ID is tested on the communication
image, which CI builds with BuildKit anyway (tests/test_comms_wheels_image.py)."""

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
                   "written (choose another --output)"]
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
