"""Fifty images, several builders (issue 27, items 1 and 2): `--shard K/N` on the real matrix is an
exact partition that keeps every FROM chain in one shard, balanced and stable; `lock --merge`
joins the shard locks and refuses two builds of one image that disagree. Pure logic and files:
no engine."""

from __future__ import annotations


import pytest

from imagebuild import cli
from imagebuild.builder import shards
from imagebuild.deliver import lockfile

from conftest import ROOT, answer

MATRIX = str(ROOT / "matrix.yaml")


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
def test_the_shards_are_every_image_once_with_each_chain_whole(k, specs_by_id, n):
    parts = [shards.shard_of(k, specs_by_id, part, n) for part in range(1, n + 1)]
    flat = [i for p in parts for i in p]
    assert sorted(flat) == sorted(specs_by_id) and len(flat) == len(set(flat))
    where = {i: part for part, ids in enumerate(parts) for i in ids}
    devels = [s for s in specs_by_id.values() if s.depends_on]
    assert devels, "the matrix has images built FROM others"
    for spec in devels:
        assert all(where[d] == where[spec.id] for d in spec.depends_on), spec.id
        ids = parts[where[spec.id]]
        assert all(ids.index(d) < ids.index(spec.id) for d in spec.depends_on)   # bases first


def test_what_compiles_weighs_more(k, specs_by_id):
    comms = next(s for s in specs_by_id.values() if s.family == "comms" and s.compiles)
    assert shards.image_weight(k, comms) > shards.image_weight(k, specs_by_id["smoke-cpu"]) == 1
    # the communication image built from the registries compiles one small program: no more
    registry = specs_by_id["comms-cu130-nccl2.30.7-debian12-runtime"]
    assert shards.image_weight(k, registry) == 1


@pytest.mark.parametrize("n", [2, 4, 8])
def test_balanced_and_stable_when_one_chain_comes_or_goes(k, specs_by_id, n):
    chains = shards.chains(k, specs_by_id)
    base = shards.assign(chains, n)
    load = shards.loads(k, specs_by_id, n)
    # within the bound, or over it by less than one chain (placed where the least was)
    bound = shards.SLACK * sum(load.values()) / n + 1
    assert max(load.values()) <= bound + max(c.weight for c in chains)
    assert max(load.values()) <= 1.25 * sum(load.values()) / n
    for drop in chains:
        rest = [c for c in chains if c is not drop]
        after = shards.assign(rest, n)
        moved = sum(1 for c in rest if after[c.root] != base[c.root])
        assert moved <= len(chains) // 4, (drop.root, moved)   # a split by position moves about half


def test_shard_arguments_are_checked(capsys):
    for bad in ("5/4", "0/4", "1/0", "a/b", "1/4/2"):
        assert cli.main(["images", "--matrix", MATRIX, "--shard", bad]) == 2
        assert "--shard" in capsys.readouterr().err
    assert cli.main(["build", "--matrix", MATRIX, "--shard", "1/2", "smoke-cpu"]) == 2
    assert "not both" in capsys.readouterr().err


def test_images_lists_one_shard(k, specs_by_id, capsys):
    assert cli.main(["images", "--matrix", MATRIX, "--shard", "2/3", "--json"]) == 0
    doc = answer(capsys.readouterr().out, "images")
    assert [i["id"] for i in doc["images"]] == [s for s in specs_by_id if s in shards.shard_of(k, specs_by_id, 2, 3)]
    assert doc["shard"] == {"shard": 2, "of": 3, "weight": shards.loads(k, specs_by_id, 3)[2]}


def test_shards_n_is_the_whole_split_and_its_job_matrix(k, specs_by_id, capsys):
    """`images --shards N`: every shard of N with its images, the same as `--shard K/N` gives one
    by one; `--format github` is the job matrix the shards workflow feeds its build jobs."""
    assert cli.main(["images", "--matrix", MATRIX, "--shards", "4", "--json"]) == 0
    parts = answer(capsys.readouterr().out, "images")["shards"]
    assert [p["shard"] for p in parts] == ["1/4", "2/4", "3/4", "4/4"]
    for part, p in enumerate(parts, start=1):
        assert p["images"] == shards.shard_of(k, specs_by_id, part, 4) and p["images"]
        assert p["weight"] == shards.loads(k, specs_by_id, 4)[part]
    assert sorted(i for p in parts for i in p["images"]) == sorted(specs_by_id)
    assert cli.main(["images", "--matrix", MATRIX, "--shards", "4", "--format", "github"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1                  # one line for $GITHUB_OUTPUT
    import json
    assert json.loads(out) == {"include": [{"shard": p["shard"], "images": len(p["images"])} for p in parts]}
    # more builders than chains: the empty shards get no job
    n = len(shards.chains(k, specs_by_id)) + 3
    assert cli.main(["images", "--matrix", MATRIX, "--shards", str(n), "--format", "github"]) == 0
    include = json.loads(capsys.readouterr().out)["include"]
    assert 0 < len(include) < n and sum(e["images"] for e in include) == len(specs_by_id)
    for bad in (["--shards", "0"], ["--shards", "x"], ["--shards", "10000"], ["--shards", "2", "--shard", "1/2"],
                ["--format", "github"]):
        assert cli.main(["images", "--matrix", MATRIX, *bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and ("--shards" in err[0] or "--format" in err[0]), err


# -- lock --merge ----------------------------------------------------------------------------

def _entry(image: str, published: dict | None = None) -> dict:
    entry = {"base_image": "sha256:" + "1" * 64, "dockerfile_sha256": "2" * 64, "image_id": image,
             "smoke": {"counts": {"fail": 0, "pass": 3, "skip": 0}, "passed": True,
                       "report_sha256": "3" * 64},
             "stack": {"os": "debian12", "pytorch": "2.13.0"}}
    if published:
        entry["published"] = published
    return entry


def _lock(path, entries: dict) -> str:
    lockfile.write_lock(path, entries)
    return str(path)


OTHER = "comms-cu130-nccl2.30.7-debian12-runtime"      # a second image the matrix declares


def test_shard_locks_merge_into_one(tmp_path, capsys):
    a = _lock(tmp_path / "a.lock", {"smoke-cpu": _entry("sha256:" + "a" * 64)})
    b = _lock(tmp_path / "b.lock", {
        "smoke-cpu": _entry("sha256:" + "a" * 64, {"r.example:5000/ns/smoke-cpu": {
            "digest": "sha256:" + "d" * 64, "tags": ["t1"]}}),
        OTHER: _entry("sha256:" + "b" * 64)})
    out = tmp_path / "images.lock"
    assert cli.main(["lock", "--matrix", MATRIX, "--lock", str(out), "--merge", a, b]) == 0
    merged = lockfile.read_lock(out)
    assert sorted(merged) == sorted([OTHER, "smoke-cpu"])
    assert merged["smoke-cpu"]["published"]["r.example:5000/ns/smoke-cpu"]["tags"] == ["t1"]
    # merging again (the target is one of the inputs) changes nothing: additive and idempotent
    before = out.read_bytes()
    assert cli.main(["lock", "--matrix", MATRIX, "--lock", str(out), "--merge", a, b]) == 0
    assert out.read_bytes() == before
    capsys.readouterr()


def test_one_image_with_two_ids_is_refused_naming_both(tmp_path, capsys):
    a = _lock(tmp_path / "a.lock", {"smoke-cpu": _entry("sha256:" + "a" * 64)})
    b = _lock(tmp_path / "b.lock", {"smoke-cpu": _entry("sha256:" + "c" * 64)})
    out = tmp_path / "images.lock"
    assert cli.main(["lock", "--matrix", MATRIX, "--lock", str(out), "--merge", a, b]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a.lock records image ID" in err[0] and "b.lock records" in err[0]
    assert not out.exists()                     # nothing half-written


def test_a_merged_lock_is_checked_with_no_engine(tmp_path, capsys):
    """The shards workflow's merge job has no engine: `lock --check --no-engine` compares the
    recipe, stack, wheel lock and smoke report of every image with the merged lock, and leaves out
    the image ids the builders' engines recorded."""
    lock = tmp_path / "images.lock"
    common = ["--matrix", MATRIX, "--lock", str(lock), "--reports-dir", str(tmp_path / "r"), "--no-engine"]
    assert cli.main(["lock", "smoke-cpu", *common]) == 0
    entries = lockfile.read_lock(lock)
    entry = entries["smoke-cpu"]
    # what a builder's engine recorded
    entry["image_id"] = "sha256:" + "a" * 64
    entry["base_image"] = "sha256:" + "b" * 64
    entry["bases"] = {ref: {"id": "sha256:" + "b" * 64, "digest": None} for ref in entry["bases"]}
    entry["provenance"]["base_digest"] = "sha256:" + "b" * 64
    lockfile.write_lock(lock, entries)
    capsys.readouterr()
    assert cli.main(["lock", "smoke-cpu", "--check", *common]) == 0
    # the same lock checked with the engine (which holds neither) drifts on the image ids
    assert not lockfile.drift_all(entries, {"smoke-cpu": lockfile.engine_free(entry)}, engine=False)
    assert lockfile.drift_all(entries, {"smoke-cpu": {**entry, "image_id": None}})
    # a stack that moved is drift with or without an engine
    entry["stack"]["python"] = "3.10"
    lockfile.write_lock(lock, entries)
    capsys.readouterr()
    assert cli.main(["lock", "smoke-cpu", "--check", *common]) == 1
    assert "python" in capsys.readouterr().out
