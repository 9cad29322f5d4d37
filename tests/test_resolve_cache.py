"""The declared images' expansion that `imagebuild resolve` remembers across processes
(render.expandcache.expand_cached): the same images as expand() on a hit, computed again whenever the
matrix, a wheel lock it reads or imagebuild's source changes, and never trusted when the file is
damaged (not JSON, wrong types, another schema, a FIFO, too large). Pure logic on a copy of the
real matrix and its locks, with the cache folder in tmp_path."""

from __future__ import annotations

import json
import os
import shutil
import threading

import pytest

from imagebuild import cli, knowledge, usercache
from imagebuild.render import expandcache as C
from imagebuild.render import images as I

from conftest import ROOT, answer

DESCRIPTION = "PyTorch with CUDA-aware Open MPI on UCX, NCCL and nccl-tests"


def _copy_project(folder):
    (folder / "locks").mkdir(parents=True)
    shutil.copy(ROOT / "matrix.yaml", folder / "matrix.yaml")
    shutil.copytree(ROOT / "locks" / "wheels", folder / "locks" / "wheels")
    return folder


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture
def project(tmp_path):
    """A copy of the matrix and its wheel locks, for a test that changes them."""
    return _copy_project(tmp_path / "project")


@pytest.fixture(scope="module")
def unchanged(tmp_path_factory):
    """A copy that no test changes: its knowledge, digest and expansion, computed once."""
    matrix = _copy_project(tmp_path_factory.mktemp("unchanged")) / "matrix.yaml"
    digest = I.matrix_sha256(matrix)
    k = knowledge.load(matrix)
    return k, digest, I.expand(k)


@pytest.fixture
def computed(monkeypatch):
    """How many times expand_cached computed the expansion (instead of reading it)."""
    calls = []
    real = I._expansion

    def counting(*args, **kw):
        if "lock_digests" in kw:                  # expand_cached's call, not expand()'s
            calls.append(args)
        return real(*args, **kw)

    monkeypatch.setattr(I, "_expansion", counting)
    return calls


def _cached(matrix, **kw):
    digest = I.matrix_sha256(matrix)          # before loading, as `resolve` takes it
    k = knowledge.load(matrix)
    return k, C.expand_cached(k, digest, **kw)


def _cache_files(tmp_path):
    return sorted((tmp_path / "cache" / "imagebuild").glob(f"{C.CACHE_PREFIX}*.json"))


def test_a_hit_gives_the_very_images_expand_gives(project, tmp_path, computed):
    matrix = project / "matrix.yaml"
    k, first = _cached(matrix)
    assert len(computed) == 1 and len(_cache_files(tmp_path)) == 1
    k, second = _cached(matrix)
    assert len(computed) == 1                                  # read, not computed
    expected = I.expand(k)
    assert second == first == expected and len(second[0]) > 20 and second[1]
    for got, want in zip(second[0], expected[0]):
        # the knowledge's own entries, not copies; tuples stay tuples
        assert got.os is want.os and got.ucx is want.ucx and got.openmpi is want.openmpi
        assert got.rdma is want.rdma and isinstance(got.tags, tuple)
        assert got.labels == want.labels and got.image_json == want.image_json
    # the options are part of the key
    _, unverified = _cached(matrix, allow_unverified=True)
    assert len(computed) == 2 and unverified == I.expand(k, allow_unverified=True)


def test_a_changed_matrix_is_expanded_again(project, computed):
    matrix = project / "matrix.yaml"
    _cached(matrix)
    matrix.write_text(matrix.read_text().replace(DESCRIPTION, "Changed"))
    k, (specs, skipped) = _cached(matrix)
    assert len(computed) == 2 and (specs, skipped) == I.expand(k)
    assert any(s.description == "Changed" for s in specs)


def test_a_changed_added_or_removed_lock_is_read_again(project, computed):
    matrix = project / "matrix.yaml"
    k, (specs, _) = _cached(matrix)
    lock = project / specs[0].wheel_lock
    text = lock.read_text()
    lock.unlink()                                             # the image loses its lock
    k, (specs2, skipped2) = _cached(matrix)
    assert len(computed) == 2 and (specs2, skipped2) == I.expand(k)
    assert specs[0].id not in {s.id for s in specs2} and any(x.no_lock for x in skipped2)
    lock.write_text(text)                                     # and gets it back
    k, again = _cached(matrix)
    assert len(computed) == 3 and again == I.expand(k) and again[0][0].id == specs[0].id
    lock.write_text(text + "# edited\n")                       # the same pins, other bytes
    _cached(matrix)
    assert len(computed) == 4
    _cached(matrix)
    assert len(computed) == 4


def test_a_change_to_imagebuild_itself_is_expanded_again(project, computed, monkeypatch):
    matrix = project / "matrix.yaml"
    _cached(matrix)
    monkeypatch.setattr(usercache, "source_fingerprint", lambda: "0" * 64)
    _cached(matrix)
    assert len(computed) == 2


def _damage_json(path, change):
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


DAMAGE = {
    "not json": lambda p: p.write_bytes(b"{\"schema\": \"imagebuild.declared"),
    "not utf-8": lambda p: p.write_bytes(b"\xff\xfe" * 100),
    "empty": lambda p: p.write_bytes(b""),
    "nested too deep": lambda p: p.write_text("[" * 100_000 + "]" * 100_000),
    "a list": lambda p: p.write_text("[]"),
    "another schema": lambda p: _damage_json(p, lambda d: d.update(schema="imagebuild.declared-images/0")),
    "another key": lambda p: _damage_json(p, lambda d: d["key"].update(matrix="0" * 64)),
    "a stack of the wrong type": lambda p: _damage_json(p, lambda d: d["specs"][0].update(stack=5)),
    "a missing field": lambda p: _damage_json(p, lambda d: d["specs"][0].pop("tag")),
    "an unknown OS": lambda p: _damage_json(p, lambda d: d["specs"][0].update(os="plan9")),
    "a tag that is no string": lambda p: _damage_json(p, lambda d: d["specs"][0].update(tags=[1])),
    "a wish that is no pair": lambda p: _damage_json(p, lambda d: d["skipped"][0].update(wishes=[["os"]])),
    "a lock outside the folder": lambda p: _damage_json(p, lambda d: d["locks"].update({"../../x": None})),
    "a lock of other bytes": lambda p: _damage_json(
        p, lambda d: d["locks"].update({next(iter(d["locks"])): "0" * 64})),
    "a folder": lambda p: (p.unlink(), p.mkdir()),
    "a FIFO": lambda p: (p.unlink(), os.mkfifo(p)),        # must not block the reader
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_cache_file_is_ignored_and_recomputed(unchanged, tmp_path, computed, damage):
    k, digest, expected = unchanged
    C.expand_cached(k, digest)
    [path] = _cache_files(tmp_path)
    DAMAGE[damage](path)
    result: list = []
    reader = threading.Thread(target=lambda: result.append(C.expand_cached(k, digest)), daemon=True)
    reader.start()
    reader.join(timeout=60)
    assert result, "the cache reader blocked"
    assert len(computed) == 2 and result[0] == expected
    if damage != "a folder":                      # written anew (a folder cannot be replaced)
        assert C.expand_cached(k, digest) == expected and len(computed) == 2


def test_a_cache_file_over_the_size_limit_is_not_read(unchanged, tmp_path, computed, monkeypatch):
    k, digest, expected = unchanged
    C.expand_cached(k, digest)
    [path] = _cache_files(tmp_path)
    monkeypatch.setattr(C, "CACHE_MAX_BYTES", path.stat().st_size - 1)
    assert C.expand_cached(k, digest) == expected and len(computed) == 2


def test_the_cache_folder_keeps_a_bounded_number_of_files(unchanged, tmp_path):
    folder = tmp_path / "cache" / "imagebuild"
    folder.mkdir(parents=True)
    for i in range(C.CACHE_FILES + 3):
        old = folder / f"{C.CACHE_PREFIX}{i:032x}.json"
        old.write_text("{}")
        os.utime(old, (1_000_000 + i, 1_000_000 + i))
    (folder / "other.json").write_text("{}")               # not the expansion's: left alone
    k, digest, _ = unchanged
    C.expand_cached(k, digest)
    files = _cache_files(tmp_path)
    assert len(files) == C.CACHE_FILES and (folder / "other.json").exists()
    assert any(json.loads(f.read_text()).get("schema") == C.CACHE_SCHEMA for f in files)


def test_no_digest_means_no_cache(unchanged, tmp_path):
    k, _, expected = unchanged
    assert C.expand_cached(k, None) == expected and not _cache_files(tmp_path)
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    assert I.matrix_sha256(fifo) is None                   # at once: no writer needed
    assert I.matrix_sha256(tmp_path / "missing.yaml") is None


def test_an_unwritable_cache_folder_costs_only_the_time(unchanged, tmp_path):
    (tmp_path / "cache").write_text("a file where the folder would be")
    k, digest, expected = unchanged
    assert C.expand_cached(k, digest) == expected


def test_resolve_answers_the_same_from_the_cache(unchanged, tmp_path, capsys, computed):
    argv = ["resolve", "--matrix", unchanged[0].path, "--driver", "580.95.05", "--gpu", "H100"]
    outs = []
    for extra in ([], [], ["--json"], ["--json"]):
        code = cli.main(argv + extra)
        outs.append((code, capsys.readouterr().out))
    assert len(computed) == 1 and outs[0] == outs[1] and outs[0][0] == 0
    assert "Declared image: " in outs[0][1]
    assert answer(outs[2][1], "resolve") == answer(outs[3][1], "resolve")
    # the same answer as without any cache file
    for f in _cache_files(tmp_path):
        f.unlink()
    code = cli.main(argv)
    assert (code, capsys.readouterr().out) == outs[0]
