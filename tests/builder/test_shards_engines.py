"""Two builders, two shards, one lock (issue 27): the shards workflow's path on real engines.

Two real Docker engines (the session's, and a second one beside it with its own data root, socket
and bridge: tests/second_engine.py) share one local registry (with a password) as their layer
cache. Each builds its shard of a matrix with two FROM chains, through the CLI as the workflow's
build jobs run it (`build --shard K/N --cache-from P --cache-to P`, then `lock`); the shard locks
are merged (`lock --merge`). The same images built on one engine and locked give the same
images.lock, byte for byte: the same image IDs from two builders.

The matrix is matrix.yaml with its images cut down to the two chains these machines can build:
the Debian communication image built from the registries (its runtime, and the devel image built
FROM it) and smoke-cpu.
The session's engine holds the communication chain already (the session's prebuild, or
build_debian_image), so its shard costs a rebuild from its cache and a push; the second engine
builds smoke-cpu from the network (its apt packages) and the host's wheels. Heavy tier: it
rebuilds images the fast tier built."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import CA_BUNDLE, ROOT, build_debian_image
from registry_service import PASSWORD, USER, registry  # noqa: F401 - the module's registry fixture

from imagebuild.deliver import lockfile

pytestmark = [pytest.mark.heavy, pytest.mark.engine, pytest.mark.registry]

BASE = "imagebuild/base:debian-bookworm"
COMMS = "comms-cu130-nccl2.30.7-debian12-runtime"
COMMS_DEVEL = "comms-cu130-nccl2.30.7-debian12-devel"
SMOKE = "smoke-cpu"


def _two_chain_matrix(folder: Path) -> Path:
    """matrix.yaml with only the Debian communication family and smoke-cpu as its images (the
    blocks as matrix.yaml has them, so the ids and recipes are the real ones), its wheel locks
    beside it. Every line above `images:` keeps its number."""
    text = (ROOT / "matrix.yaml").read_text(encoding="utf-8")
    head, sep, _ = text.partition("\nimages:\n")
    assert sep, "matrix.yaml has no images: section"
    blocks = [b for b in yaml.safe_load(text)["images"]
              if b.get("os") == ["debian12"] and b["family"] in ("comms", "smoke-cpu")]
    assert {b["family"] for b in blocks} == {"comms", "smoke-cpu"}, blocks
    folder.mkdir(parents=True)
    matrix = folder / "matrix.yaml"
    matrix.write_text(head + sep + yaml.safe_dump(blocks, sort_keys=False, width=200), encoding="utf-8")
    shutil.copytree(ROOT / "locks", folder / "locks")
    return matrix


def _imagebuild(*args: str, host: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`imagebuild ARGS` in a process of its own, on the engine ``host``, as a build job runs it."""
    proc = subprocess.run([sys.executable, "-m", "imagebuild", *args], cwd=cwd, capture_output=True,
                          text=True, env={**env, "DOCKER_HOST": host}, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"imagebuild {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc


def _shard(matrix: Path, k: int, n: int, *, cwd: Path, env) -> list[str]:
    out = _imagebuild("images", "--matrix", str(matrix), "--shard", f"{k}/{n}", "--json",
                      host=env["DOCKER_HOST"], cwd=cwd, env=env)
    return [i["id"] for i in json.loads(out.stdout)["result"]["images"]]


def test_two_shards_on_two_engines_lock_as_one_engine_does(docker_client, registry, tmp_path,  # noqa: F811
                                                           tmp_path_factory):
    from second_engine import copy_image, second_engine

    build_debian_image(docker_client, COMMS_DEVEL)   # the session's engine holds the chain (its cache)
    matrix = _two_chain_matrix(tmp_path / "site")
    work = tmp_path / "work"                          # every command runs outside the checkout
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGEBUILD_")}
    env.update({"XDG_CACHE_HOME": str(tmp_path / "xdg"), "IMAGEBUILD_REGISTRY_USER": USER,
                "IMAGEBUILD_REGISTRY_PASSWORD": PASSWORD, "PYTHONPATH": str(ROOT)})
    host1 = env["DOCKER_HOST"]

    # the site's checkout: its matrix and the recipes generated from it (lock reads them)
    _imagebuild("generate", "--matrix", str(matrix), host=host1, cwd=work, env=env)

    # the split: every image once, each chain whole, one chain per builder
    shards = {k: _shard(matrix, k, 2, cwd=work, env=env) for k in (1, 2)}
    assert sorted(shards[1] + shards[2]) == sorted([COMMS, COMMS_DEVEL, SMOKE]), shards
    chain = next(k for k in shards if COMMS in shards[k])
    assert COMMS_DEVEL in shards[chain] and shards[3 - chain] == [SMOKE], shards

    cache = f"{registry}/cache"
    common = ["--matrix", str(matrix), "--ca-bundle", str(CA_BUNDLE), "--cache-from", cache, "--cache-to", cache]
    locks = {}
    with second_engine(tmp_path_factory.mktemp("engine2"), network=True) as host2:
        copy_image(BASE, host1, host2)
        for k, host in ((chain, host1), (3 - chain, host2)):
            built = _imagebuild("build", "--shard", f"{k}/2", "--json", "--output", str(tmp_path / f"out{k}"),
                                *common, host=host, cwd=work, env=env)
            report = json.loads(built.stdout)["result"]
            assert sorted(i["image"] for i in report if i["image_id"]) == sorted(shards[k]), report
            locks[k] = tmp_path / f"shard{k}.lock"
            _imagebuild("lock", "--matrix", str(matrix), "--lock", str(locks[k]), *shards[k],
                        host=host, cwd=work, env=env)
        smoke_on_2 = lockfile.read_lock(locks[3 - chain])[SMOKE]["image_id"]
    merged = tmp_path / "merged.lock"
    _imagebuild("lock", "--matrix", str(matrix), "--lock", str(merged), "--merge", str(locks[1]), str(locks[2]),
                host=host1, cwd=work, env=env)

    # one engine builds everything (smoke-cpu's steps from the second builder's cache) and locks it
    single = tmp_path / "single.lock"
    built = _imagebuild("build", "--json", "--output", str(tmp_path / "out-single"), *common[:-2],
                        host=host1, cwd=work, env=env)
    smoke = next(i for i in json.loads(built.stdout)["result"] if i["image"] == SMOKE)
    assert smoke["cached_steps"] == smoke["steps"] > 0, smoke     # every step from a cache
    _imagebuild("lock", "--matrix", str(matrix), "--lock", str(single), host=host1, cwd=work, env=env)

    assert merged.read_bytes() == single.read_bytes()
    ids = {name: entry["image_id"] for name, entry in lockfile.read_lock(single).items()}
    assert sorted(ids) == sorted([COMMS, COMMS_DEVEL, SMOKE]), ids
    assert smoke_on_2 == ids[SMOKE] == smoke["image_id"]
