"""`imagebuild build --locked`: nothing is built when the stack, Dockerfile or base drifted."""

from __future__ import annotations

import json

from conftest import ROOT
from imagebuild import cli

MATRIX = str(ROOT / "matrix.yaml")


def test_locked_build_refuses_drift_and_names_it(docker_client, tmp_path, capsys):
    lock = tmp_path / "images.lock"
    assert cli.main(["lock", "--matrix", MATRIX, "--lock", str(lock)]) == 0
    doc = json.loads(lock.read_text())
    entry = doc["images"]["smoke-cpu"]
    entry["stack"]["pytorch"] = "2.12.0"
    entry["dockerfile_sha256"] = "0" * 64
    lock.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    capsys.readouterr()
    out = tmp_path / "build"
    assert cli.main(["build", "--matrix", MATRIX, "--locked", "--lock", str(lock),
                     "--output", str(out), "smoke-cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "pytorch 2.12.0 -> 2.13.0" in err[0] and "Dockerfile sha256 changed" in err[0]
    assert not (out / "smoke-cpu").exists(), "nothing is rendered or built after a refusal"


def test_locked_build_without_a_lock_is_one_line(docker_client, tmp_path, capsys):
    assert cli.main(["build", "--matrix", MATRIX, "--locked", "--lock", str(tmp_path / "none.lock"),
                     "smoke-cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no lock file" in err[0]
