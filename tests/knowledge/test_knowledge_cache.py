"""The validated knowledge kept across processes (knowledge/cache.py): a second load of the same
bytes is read from the cache and answers exactly as a fresh load does; a changed matrix, a changed
imagebuild, a damaged, crafted, foreign or linked entry is never used; concurrent first runs leave
one whole entry; IMAGEBUILD_NO_CACHE turns it off."""

from __future__ import annotations

import dataclasses
import os
import pickle
import shutil
import subprocess
import sys

import pytest

from imagebuild import knowledge, usercache
from imagebuild.digests import sha256_raw
from imagebuild.errors import KnowledgeError
from imagebuild.knowledge import cache as C
from imagebuild.knowledge import loader as L
from imagebuild.knowledge.matchers import Matcher, version_matcher
from imagebuild.resolve import solver as R

from conftest import ROOT

HOSTS = [(R.Host(driver="535.104.05", gpu="H100"), {"pytorch": ">=2.4"}),
         (R.Host(driver="580.95.05", gpu="B200"), {}),
         (R.Host(driver="470.82.01", gpu="A100"), {"pytorch": "2.9"}),
         (R.Host(driver="520.61.05", gpu="GH200"), {"pytorch": ">=2.0"})]


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(usercache.OFF, raising=False)
    return tmp_path / "cache" / "imagebuild"


@pytest.fixture
def matrix(tmp_path):
    path = tmp_path / "project" / "matrix.yaml"
    path.parent.mkdir()
    shutil.copy(ROOT / "matrix.yaml", path)
    return path


@pytest.fixture
def builds(monkeypatch):
    """How many times load() compiled the matrix (instead of reading the cache)."""
    calls = []
    real = L.build

    def counting(doc, path):
        calls.append(path)
        return real(doc, path)
    monkeypatch.setattr(L, "build", counting)
    return calls


def _entries(folder):
    return sorted(folder.glob(f"{C.PREFIX}*.pickle")) if folder.is_dir() else []


def _answers(k):
    out = []
    for host, wishes in HOSTS:
        res = R.resolve(k, host, wishes)
        out.append((res.ok, res.stack, res.explanation, res.warnings))
    return out


def test_a_second_load_reads_the_cache_and_answers_the_same(matrix, builds, private_cache):
    first = knowledge.load(matrix)
    assert len(builds) == 1 and len(_entries(private_cache)) == 1
    second = knowledge.load(matrix)
    assert len(builds) == 1, "the second load compiled the matrix again"
    assert second is not first and second.sha256 == first.sha256 and second.path == str(matrix)
    assert second.rules == first.rules and second.gpus == first.gpus
    assert _answers(second) == _answers(first)


def test_the_cached_knowledge_is_the_fresh_one_for_every_query(matrix, monkeypatch):
    knowledge.load(matrix)                                  # fills the cache
    cached = knowledge.load(matrix)
    monkeypatch.setenv(usercache.OFF, "1")
    fresh = knowledge.load(matrix)
    assert _answers(cached) == _answers(fresh)
    for comp in ("pytorch", "cuda", "cudnn", "nccl", "os", "ucx", "openmpi"):
        assert cached.domain(comp) == fresh.domain(comp)
    groups = [(g.head, g.tails) for g in R.enumerate_stacks(cached, R.Host(driver="550.54.15", gpu="A100"))]
    assert groups == [(g.head, g.tails) for g in R.enumerate_stacks(fresh, R.Host(driver="550.54.15", gpu="A100"))]


def test_the_same_bytes_elsewhere_are_named_by_their_own_path(matrix, tmp_path, builds):
    knowledge.load(matrix)
    other = tmp_path / "elsewhere" / "matrix.yaml"
    other.parent.mkdir()
    shutil.copy(matrix, other)
    k = knowledge.load(other)
    assert len(builds) == 1 and k.path == str(other)


def test_changed_bytes_or_a_changed_imagebuild_compile_again(matrix, builds, monkeypatch):
    knowledge.load(matrix)
    matrix.write_text(matrix.read_text() + "# a comment changes the bytes\n")
    knowledge.load(matrix)
    assert len(builds) == 2
    monkeypatch.setattr(usercache, "source_fingerprint", lambda: "0" * 64)
    knowledge.load(matrix)
    assert len(builds) == 3


def _corrupt(path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("where", ["magic", "digest", "payload", "truncated", "empty"])
def test_a_damaged_entry_is_compiled_again_and_replaced(matrix, builds, private_cache, where):
    good = knowledge.load(matrix)
    [entry] = _entries(private_cache)
    if where == "truncated":
        entry.write_bytes(entry.read_bytes()[:-100])
    elif where == "empty":
        entry.write_bytes(b"")
    else:
        _corrupt(entry, {"magic": 3, "digest": len(C.MAGIC) + 5, "payload": -50}[where])
    k = knowledge.load(matrix)
    assert len(builds) == 2 and _answers(k) == _answers(good)
    knowledge.load(matrix)                      # rewritten whole: read again
    assert len(builds) == 2


class _Boom:
    """What a crafted entry would hold: unpickling it runs a function (os.system)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_crafted_entry_that_passes_the_hash_runs_nothing(matrix, builds, private_cache, tmp_path):
    k = knowledge.load(matrix)
    [entry] = _entries(private_cache)
    marker = tmp_path / "ran"
    path, key = C._entry(k.sha256)
    assert path == entry
    for payload in (pickle.dumps(_Boom(marker)),                       # a function
                    pickle.dumps({"not": "a knowledge"}),              # the wrong type
                    pickle.dumps(dataclasses.replace(k, sha256="0" * 64))):   # another matrix's
        entry.write_bytes(C.MAGIC + sha256_raw(key + b"\0" + payload) + payload)
        os.chmod(entry, 0o600)
        again = knowledge.load(matrix)
        assert not marker.exists(), "unpickling a cache entry ran code"
        assert again.sha256 == k.sha256 and _answers(again) == _answers(k)
    assert len(builds) == 4


def test_an_entry_others_can_write_or_a_link_is_not_read(matrix, builds, private_cache, tmp_path):
    knowledge.load(matrix)
    [entry] = _entries(private_cache)
    os.chmod(entry, 0o666)
    knowledge.load(matrix)
    assert len(builds) == 2                     # not read: compiled again (and replaced, 0600)
    assert entry.stat().st_mode & 0o077 == 0
    knowledge.load(matrix)
    assert len(builds) == 2
    elsewhere = tmp_path / "entry"
    entry.rename(elsewhere)
    entry.symlink_to(elsewhere)
    knowledge.load(matrix)
    assert len(builds) == 3


def test_a_refused_matrix_is_never_cached(tmp_path, private_cache):
    bad = tmp_path / "matrix.yaml"
    bad.write_text((ROOT / "matrix.yaml").read_text().replace("as_of:", "as_of_typo:", 1))
    for _ in range(2):
        with pytest.raises(KnowledgeError):
            knowledge.load(bad)
    assert _entries(private_cache) == []


def test_off_writes_nothing_and_an_unwritable_folder_costs_only_time(matrix, builds, private_cache,
                                                                      monkeypatch):
    monkeypatch.setenv(usercache.OFF, "1")
    knowledge.load(matrix)
    knowledge.load(matrix)
    assert len(builds) == 2 and not private_cache.exists()
    monkeypatch.delenv(usercache.OFF)
    private_cache.parent.mkdir(parents=True)
    private_cache.write_text("a file where the folder goes")
    k = knowledge.load(matrix)
    assert k.sha256 and len(builds) == 3


def test_concurrent_first_runs_leave_one_whole_entry(matrix, private_cache):
    code = ("import sys; from imagebuild import knowledge; "
            "print(knowledge.load(sys.argv[1]).sha256)")
    env = {**os.environ, "XDG_CACHE_HOME": str(private_cache.parent)}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(matrix)], stdout=subprocess.PIPE,
                              text=True, env=env, cwd=ROOT) for _ in range(6)]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert len(set(outs)) == 1 and len(outs[0]) == 64
    assert len(_entries(private_cache)) == 1
    assert not [p for p in private_cache.iterdir() if p.name.startswith(".")], "a temporary file was left"
    assert C.lookup(outs[0]) is not None


def test_the_cache_keeps_a_bounded_number_of_entries(tmp_path, private_cache):
    text = (ROOT / "matrix.yaml").read_text()
    for i in range(C.KEEP + 3):
        path = tmp_path / f"m{i}" / "matrix.yaml"
        path.parent.mkdir()
        path.write_text(text + f"# variant {i}\n")
        knowledge.load(path)
    assert len(_entries(private_cache)) == C.KEEP


def test_knowledge_is_frozen_and_matchers_are_data():
    k = knowledge.load(ROOT / "matrix.yaml")
    with pytest.raises(dataclasses.FrozenInstanceError):
        k.as_of = "2000-01-01"
    m = version_matcher(">=2.4")
    back = pickle.loads(pickle.dumps(m))
    assert back == m and back("2.5.0") and not back("2.3.1")
    assert Matcher("x", "eq", "1") != Matcher("x", "eq", "2")     # equal only if they test the same
    with pytest.raises(ValueError):
        Matcher("x", "exec", "print(1)")
