"""`resolve`, `plan` and `images` read matrix.yaml once, with and without --json (issue 47): the
loader keeps the sha256 of the bytes it parsed, the answer's knowledge line, the declared image's
cache key and the --json envelope all take it from there. Counted on every way this process opens
a file (os.open, the io layer, Path.read_bytes), in-process."""

from __future__ import annotations

import builtins
import io
import os
import shutil

import pytest

from conftest import ROOT
from imagebuild import cli
from imagebuild.knowledge import load


@pytest.fixture
def counted(tmp_path, monkeypatch):
    matrix = tmp_path / "matrix.yaml"
    shutil.copy(ROOT / "matrix.yaml", matrix)
    shutil.copytree(ROOT / "locks", tmp_path / "locks")
    seen: list[str] = []
    real_os_open, real_open = os.open, builtins.open

    def os_open(path, *a, **kw):
        if os.fspath(path) == str(matrix):
            seen.append("os.open")
        return real_os_open(path, *a, **kw)

    def any_open(file, *a, **kw):
        if isinstance(file, (str, os.PathLike)) and os.fspath(file) == str(matrix):
            seen.append("open")
        return real_open(file, *a, **kw)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(builtins, "open", any_open)
    monkeypatch.setattr(io, "open", any_open)
    return matrix, seen


@pytest.mark.parametrize("argv", [
    ["resolve", "--driver", "580.95.05", "--gpu", "H100"],
    ["resolve", "--driver", "580.95.05", "--gpu", "H100", "--json"],
    ["plan", "--driver-from", "570.172.08", "--driver-to", "580.95.05", "--gpu", "H100"],
    ["plan", "--driver-from", "570.172.08", "--driver-to", "580.95.05", "--gpu", "H100", "--json"],
    ["images"], ["images", "--json"],
], ids=lambda a: " ".join(a))
def test_one_read(counted, argv, capsys):
    matrix, seen = counted
    assert cli.main([*argv, "--matrix", str(matrix)]) == 0
    out = capsys.readouterr().out
    assert len(seen) == 1, seen
    if "--json" in argv:       # the envelope names the bytes the command parsed
        import hashlib
        import json
        assert json.loads(out)["knowledge"]["sha256"] == hashlib.sha256(matrix.read_bytes()).hexdigest()


def test_the_loader_keeps_the_digest_of_what_it_parsed(tmp_path):
    import hashlib
    matrix = tmp_path / "matrix.yaml"
    shutil.copy(ROOT / "matrix.yaml", matrix)
    shutil.copytree(ROOT / "locks", tmp_path / "locks")
    k = load(matrix)
    assert k.sha256 == hashlib.sha256(matrix.read_bytes()).hexdigest()
