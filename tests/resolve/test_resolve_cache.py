"""The declared images' expansion as `imagebuild resolve` does it (render.expandcache.Declared):
only the combinations that can hold the best image for the host are expanded
(hostfit.best_expanding), and the answer is the one the whole expansion gives, for every host
tried; what each combination gives is remembered across processes: the same images as expand() on
a hit, computed again whenever the matrix, the wheel lock it reads or imagebuild's source changes,
and never trusted when the file or a record is damaged (not JSON, wrong types, another schema or
combination, a FIFO, too large). Pure logic on a copy of the real matrix and its locks, with the
cache folder in tmp_path."""

from __future__ import annotations

import json
import os
import shutil
import threading

import pytest

from imagebuild import cli, knowledge, usercache
from imagebuild.deliver import hostfit
from imagebuild.render import expandcache as C
from imagebuild.render import images as I
from imagebuild.resolve.solver import Host

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
    return k, digest, I.expand(k)[0]


@pytest.fixture
def computed(monkeypatch):
    """The combinations Declared computed (instead of reading them from the cache), by index."""
    calls = []
    real = C.Declared._remember

    def counting(self, i, *args):
        calls.append(i)
        return real(self, i, *args)

    monkeypatch.setattr(C.Declared, "_remember", counting)
    return calls


def _all(k, digest, **kw):
    declared = C.Declared(k, digest, **kw)
    specs = declared.all()
    declared.save()
    return specs


def _cached(matrix, **kw):
    digest = I.matrix_sha256(matrix)          # before loading, as `resolve` takes it
    k = knowledge.load(matrix)
    return k, _all(k, digest, **kw)


def _cache_files(tmp_path):
    return sorted((tmp_path / "cache" / "imagebuild").glob(f"{C.CACHE_PREFIX}*.json"))


def test_a_hit_gives_the_very_images_expand_gives(project, tmp_path, computed):
    matrix = project / "matrix.yaml"
    k, first = _cached(matrix)
    plan = I.combinations(k)
    assert len(computed) == len(plan) > 40 and len(_cache_files(tmp_path)) == 1
    assert _cache_files(tmp_path)[0].stat().st_mode & 0o777 == 0o600     # this user's alone
    k, second = _cached(matrix)
    assert len(computed) == len(plan)                         # read, not computed
    expected = I.expand(k)[0]
    assert second == first == expected and len(second) > 20
    for got, want in zip(second, expected):
        # the knowledge's own entries, not copies; tuples stay tuples
        assert got.os is want.os and got.ucx is want.ucx and got.openmpi is want.openmpi
        assert got.rdma is want.rdma and isinstance(got.tags, tuple)
        assert got.labels == want.labels and got.image_json == want.image_json
    # the options are part of the key
    _, unverified = _cached(matrix, allow_unverified=True)
    assert len(computed) == 2 * len(plan) and unverified == I.expand(k, allow_unverified=True)[0]


def test_what_a_combination_is_known_to_hold_is_what_it_holds(unchanged):
    """best_expanding orders the combinations by what their wishes fix before resolving: that
    must be exactly what their images hold, or the best image could be passed over."""
    k, digest, _ = unchanged
    declared = C.Declared(k, None)
    for i, (fixed, cuda) in enumerate(declared.known()):
        for spec in declared.expand([i]):
            assert {c: spec.stack[c] for c in fixed} == fixed, (declared.plan[i].label, spec.id)
            assert cuda is None or cuda == (spec.stack["cuda"] != "none"), spec.id


HOSTS = [("535.104.05", "H100", {}), ("535.104.05", "H100", {"pytorch": ">=2.4"}),
         ("580.95.05", "B200", {}), ("550.54.15", "A100", {"cuda": "12.4"}),
         ("470.82.01", "A100", {}), ("580.95.05", "GH200", {}), ("570.124.06", "L40S", {}),
         ("575.57.08", "H100", {"os": "rockylinux9"}), ("590.44.01", "H200", {}),
         (None, "none", {}), ("580.95.05", "H100", {"pytorch": "none"}),
         ("525.60.13", "V100", {"python": "3.11"})]


@pytest.mark.parametrize("driver, gpu, wishes", HOSTS)
def test_the_best_image_is_the_one_the_whole_expansion_gives(unchanged, driver, gpu, wishes):
    from imagebuild.knowledge.matchers import version_matcher
    k, _, every = unchanged
    host = Host(driver=driver, gpu=gpu)
    keep = _keep(wishes, version_matcher)
    whole = hostfit.best(k, [s for s in every if keep(s)], host)
    gpu_host = hostfit._gpu_host(host)
    for screened in (False, True):             # as resolve asks it, and without the screen
        declared = C.Declared(k, None)
        asked = []

        def expand(indices):
            asked.extend(indices)
            return declared.expand(indices)

        lazy = hostfit.best_expanding(k, declared.known(), expand, host, keep=keep,
                                      possible=(lambda i: declared.could_fit(i, host)) if screened
                                      else (lambda i: True))
        assert (lazy is None) == (whole is None)
        leads = [hostfit._lead(k, fixed, cuda, gpu_host) for fixed, cuda in declared.known()]
        if whole is None:
            rank = set(range(len(declared.plan)))
        else:
            assert (lazy.spec.id, lazy.mode, lazy.detail) == (whole.spec.id, whole.mode, whole.detail)
            best = hostfit._leading_key(k, lazy.spec, gpu_host)
            rank = {i for i, lead in enumerate(leads) if lead is None or not best < lead}
        # exactly the combinations that can rank as high as the best one were expanded, less
        # (screened) those whose images cannot run on the host
        if screened:
            assert set(asked) <= rank
        else:
            assert set(asked) == rank


@pytest.mark.parametrize("driver, gpu, wishes", HOSTS)
def test_a_combination_ruled_out_for_a_host_has_no_image_that_fits_there(unchanged, driver, gpu, wishes):
    """solver.could_hold is a relaxation: where it says no, fits() says no for every image."""
    k, _, _ = unchanged
    host = Host(driver=driver, gpu=gpu)
    declared = C.Declared(k, None)
    ruled = [i for i in range(len(declared.plan)) if not declared.could_fit(i, host)]
    for i in ruled:
        specs = declared.expand([i])
        assert hostfit.fits(k, specs, host)[0] == [], declared.plan[i].label
    # not vacuous: an old driver cannot run the CUDA 13 builds, and the screen says so
    if driver in ("470.82.01", "535.104.05"):
        assert any(declared.plan[i].wishes.get("cuda", "").startswith("13.") for i in ruled)


def test_what_is_ruled_out_for_a_host_is_remembered_for_that_host(unchanged, tmp_path, monkeypatch):
    from imagebuild.resolve import solver
    k, digest, _ = unchanged
    asked = []
    real = solver.could_hold
    monkeypatch.setattr(solver, "could_hold", lambda *a, **kw: asked.append(a) or real(*a, **kw))
    old, new = Host(driver="535.104.05", gpu="H100"), Host(driver="580.95.05", gpu="H100")
    first = C.Declared(k, digest)
    ruled = [i for i in range(len(first.plan)) if not first.could_fit(i, old)]
    first.save()
    assert ruled and len(asked) == len(first.plan)
    again = C.Declared(k, digest)
    assert [i for i in range(len(again.plan)) if not again.could_fit(i, old)] == ruled
    assert len(asked) == len(first.plan) + len(first.plan) - len(ruled)   # only the others asked
    n = len(asked)
    other = C.Declared(k, digest)
    other.could_fit(0, new)                                  # another host: asked again
    assert len(asked) == n + 1
    # a damaged verdict list is not trusted: its host's combinations are asked again
    path = _cache_files(tmp_path)[0]
    for damage in ({"x": 1}, [1.0 * ruled[0]], [True], "0"):
        doc = json.loads(path.read_text())
        doc["ruled_out"] = {next(iter(doc["ruled_out"])): damage}
        path.write_text(json.dumps(doc))
        n = len(asked)
        assert C.Declared(k, digest).could_fit(ruled[0], old) is False and len(asked) == n + 1, damage


def test_the_file_keeps_a_bounded_number_of_hosts(unchanged, tmp_path):
    k, digest, _ = unchanged
    days = [f"2026-{m:02d}-{d:02d}" for m in (1, 2) for d in range(1, 29)][:C.CACHE_HOSTS + 3]
    for day in days:
        declared = C.Declared(k, digest)
        assert declared.could_fit(0, Host(driver="470.82.01", gpu="A100", date=day)) is False
        declared.save()
    doc = json.loads(_cache_files(tmp_path)[0].read_text())
    assert len(doc["ruled_out"]) == C.CACHE_HOSTS
    assert f'"{days[-1]}"' in list(doc["ruled_out"])[-1]       # the newest kept, the oldest gone
    assert not any(f'"{day}"' in key for key in doc["ruled_out"] for day in days[:3])


def _keep(wishes, version_matcher):
    matches = {c: (frozenset(t.split(",")).__contains__ if c in ("os", "platform")
                   else version_matcher(t)) for c, t in wishes.items()}
    return lambda spec: all(m(spec.stack[c]) for c, m in matches.items())


def test_a_changed_matrix_is_expanded_again(project, computed):
    matrix = project / "matrix.yaml"
    _cached(matrix)
    matrix.write_text(matrix.read_text().replace(DESCRIPTION, "Changed"))
    k, specs = _cached(matrix)
    assert len(computed) == 2 * len(I.combinations(k)) and specs == I.expand(k)[0]
    assert any(s.description == "Changed" for s in specs)


def test_a_changed_added_or_removed_lock_is_read_again(project, computed):
    matrix = project / "matrix.yaml"
    k, specs = _cached(matrix)
    lock = project / specs[0].wheel_lock
    plan = C.Declared(k, None)
    users = {i for i in range(len(plan.plan))
             if any(s.wheel_lock == specs[0].wheel_lock for s in plan.expand([i]))}
    assert users
    text = lock.read_text()
    lock.unlink()                                             # the image loses its lock
    before = len(computed)
    k, specs2 = _cached(matrix)
    assert set(computed[before:]) == users and specs2 == I.expand(k)[0]   # those combinations only
    assert specs[0].id not in {s.id for s in specs2}
    lock.write_text(text)                                     # and gets it back
    before = len(computed)
    k, again = _cached(matrix)
    assert set(computed[before:]) == users and again == I.expand(k)[0]
    assert again[0].id == specs[0].id
    before = len(computed)
    lock.write_text(text + "# edited\n")                      # the same pins, other bytes
    _cached(matrix)
    assert set(computed[before:]) == users
    before = len(computed)
    _cached(matrix)
    assert len(computed) == before


def test_a_change_to_imagebuild_itself_is_expanded_again(project, computed, monkeypatch):
    matrix = project / "matrix.yaml"
    k, _ = _cached(matrix)
    monkeypatch.setattr(usercache, "source_fingerprint", lambda: "0" * 64)
    _cached(matrix)
    assert len(computed) == 2 * len(I.combinations(k))


def _damage_json(path, change):
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def _record(doc, field=None, value=None, pop=None):
    """Change the first record that holds an image (and a wheel lock)."""
    rec = next(r for r in doc["combinations"].values() if r["specs"] and r["lock"])
    if pop:
        rec["specs"][0].pop(pop)
    elif field in ("label", "lock"):
        rec[field] = value
    else:
        rec["specs"][0][field] = value


DAMAGE = {
    "not json": lambda p: p.write_bytes(b"{\"schema\": \"imagebuild.declared"),
    "not utf-8": lambda p: p.write_bytes(b"\xff\xfe" * 100),
    "empty": lambda p: p.write_bytes(b""),
    "nested too deep": lambda p: p.write_text("[" * 100_000 + "]" * 100_000),
    "a list": lambda p: p.write_text("[]"),
    "another schema": lambda p: _damage_json(p, lambda d: d.update(schema="imagebuild.declared-images/1")),
    "another key": lambda p: _damage_json(p, lambda d: d["key"].update(matrix="0" * 64)),
    "records that are a list": lambda p: _damage_json(p, lambda d: d.update(combinations=[])),
    "a record of another combination": lambda p: _damage_json(p, lambda d: _record(d, "label", "x")),
    "a stack of the wrong type": lambda p: _damage_json(p, lambda d: _record(d, "stack", 5)),
    "a missing field": lambda p: _damage_json(p, lambda d: _record(d, pop="tag")),
    "an unknown OS": lambda p: _damage_json(p, lambda d: _record(d, "os", "plan9")),
    "a tag that is no string": lambda p: _damage_json(p, lambda d: _record(d, "tags", [1])),
    "a lock outside the folder": lambda p: _damage_json(p, lambda d: _record(d, "lock", ["../../x", None])),
    "a lock that is no pair": lambda p: _damage_json(p, lambda d: _record(d, "lock", "x")),
    "a lock of other bytes": lambda p: _damage_json(
        p, lambda d: _record(d, "lock", [next(r["lock"][0] for r in d["combinations"].values()
                                              if r["lock"]), "0" * 64])),
    "a folder": lambda p: (p.unlink(), p.mkdir()),
    "a FIFO": lambda p: (p.unlink(), os.mkfifo(p)),        # must not block the reader
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_cache_file_is_ignored_and_recomputed(unchanged, tmp_path, computed, damage):
    k, digest, expected = unchanged
    _all(k, digest)
    n = len(computed)
    [path] = _cache_files(tmp_path)
    DAMAGE[damage](path)
    result: list = []
    reader = threading.Thread(target=lambda: result.append(_all(k, digest)), daemon=True)
    reader.start()
    reader.join(timeout=60)
    assert result, "the cache reader blocked"
    assert len(computed) > n and result[0] == expected
    if damage != "a folder":                      # written anew (a folder cannot be replaced)
        again = len(computed)
        assert _all(k, digest) == expected and len(computed) == again


def test_a_cache_file_over_the_size_limit_is_not_read(unchanged, tmp_path, computed, monkeypatch):
    k, digest, expected = unchanged
    _all(k, digest)
    n = len(computed)
    [path] = _cache_files(tmp_path)
    monkeypatch.setattr(C, "CACHE_MAX_BYTES", path.stat().st_size - 1)
    assert _all(k, digest) == expected and len(computed) == 2 * n


def test_records_of_several_runs_are_kept_together(unchanged, tmp_path, computed):
    k, digest, expected = unchanged
    first = C.Declared(k, digest)
    first.expand([0, 1])
    first.save()
    second = C.Declared(k, digest)
    second.expand([0, 1, 2])
    second.save()
    assert computed == [0, 1, 2]
    assert _all(k, digest) == expected and len(computed) == len(first.plan)
    doc = json.loads(_cache_files(tmp_path)[0].read_text())
    assert sorted(doc["combinations"], key=int) == [str(i) for i in range(len(first.plan))]


def test_the_cache_folder_keeps_a_bounded_number_of_files(unchanged, tmp_path):
    folder = tmp_path / "cache" / "imagebuild"
    folder.mkdir(parents=True)
    for i in range(C.CACHE_FILES + 3):
        old = folder / f"{C.CACHE_PREFIX}{i:032x}.json"
        old.write_text("{}")
        os.utime(old, (1_000_000 + i, 1_000_000 + i))
    (folder / "other.json").write_text("{}")               # not the expansion's: left alone
    k, digest, _ = unchanged
    _all(k, digest)
    files = _cache_files(tmp_path)
    assert len(files) == C.CACHE_FILES and (folder / "other.json").exists()
    assert any(json.loads(f.read_text()).get("schema") == C.CACHE_SCHEMA for f in files)


def test_no_digest_means_no_cache(unchanged, tmp_path):
    k, _, expected = unchanged
    assert _all(k, None) == expected and not _cache_files(tmp_path)
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    assert I.matrix_sha256(fifo) is None                   # at once: no writer needed
    assert I.matrix_sha256(tmp_path / "missing.yaml") is None


def test_an_unwritable_cache_folder_costs_only_the_time(unchanged, tmp_path):
    (tmp_path / "cache").write_text("a file where the folder would be")
    k, digest, expected = unchanged
    assert _all(k, digest) == expected


def test_resolve_answers_the_same_from_the_cache(unchanged, tmp_path, capsys, computed):
    argv = ["resolve", "--matrix", unchanged[0].path, "--driver", "580.95.05", "--gpu", "H100"]
    outs = []
    for extra in ([], [], ["--json"], ["--json"]):
        code = cli.main(argv + extra)
        outs.append((code, capsys.readouterr().out))
    plan = I.combinations(unchanged[0])
    assert 0 < len(computed) < len(plan) and outs[0] == outs[1] and outs[0][0] == 0
    assert len(set(computed)) == len(computed)              # each computed once, then read
    assert "Declared image: " in outs[0][1]
    assert answer(outs[2][1], "resolve") == answer(outs[3][1], "resolve")
    # the same answer as without any cache file
    for f in _cache_files(tmp_path):
        f.unlink()
    code = cli.main(argv)
    assert (code, capsys.readouterr().out) == outs[0]
