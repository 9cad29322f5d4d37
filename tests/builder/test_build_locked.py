"""`imagebuild build --locked`: nothing is built when the stack, Dockerfile or base drifted.
`imagebuild lock IMAGE` locks what `build IMAGE` builds: a devel image with its runtime, so that
`build --locked DEVEL` finds both in the lock (engine-free: the lock is written with --no-engine
and checked against an engine that holds none of the images)."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT
from imagebuild import cli
from imagebuild.deliver import lockfile
from imagebuild.errors import BuildError

MATRIX = str(ROOT / "matrix.yaml")
DEVEL = "comms-cu130-nccl2.30.7-debian12-devel"
RUNTIME = "comms-cu130-nccl2.30.7-debian12-runtime"


def _lock(tmp_path, *argv) -> int:
    return cli.main(["lock", "--no-engine", "--matrix", MATRIX, "--lock", str(tmp_path / "images.lock"),
                     "--reports-dir", str(tmp_path), "--sbom-dir", str(tmp_path), *argv])


def test_lock_of_a_devel_image_locks_its_runtime_first_and_says_so(tmp_path, capsys):
    from imagebuild.cli.commands.lock import _all_images, _brought
    from imagebuild.render.run import load_images
    from imagebuild.render.run import MatrixRun

    run = MatrixRun.open(MATRIX)
    assert list(_all_images(run, [DEVEL])) == [RUNTIME, DEVEL]          # dependency order
    assert _brought(_all_images(run, [DEVEL, RUNTIME]), [DEVEL, RUNTIME]) == {}   # both named
    assert _lock(tmp_path, DEVEL) == 0
    out, err = capsys.readouterr()
    assert err.splitlines() == [f"{RUNTIME}: locked too ({DEVEL} is built FROM it)"]
    assert out.splitlines() == [f"wrote {tmp_path / 'images.lock'} (2 image(s))"]
    entries = lockfile.read_lock(tmp_path / "images.lock")
    assert set(entries) == {RUNTIME, DEVEL}
    runtime = load_images(MATRIX)[RUNTIME]
    assert list(entries[DEVEL]["bases"]) == [runtime.local_ref]    # the devel's base is that runtime
    assert entries[RUNTIME]["dockerfile_sha256"] == lockfile.sha256_file(lockfile.dockerfile_path(ROOT, RUNTIME))

    (tmp_path / "images.lock").unlink()
    assert _lock(tmp_path, RUNTIME) == 0                       # a runtime brings no devel
    assert set(lockfile.read_lock(tmp_path / "images.lock")) == {RUNTIME}
    assert capsys.readouterr().err == ""


def test_lock_check_of_a_devel_image_compares_its_runtime_too(tmp_path, capsys):
    assert _lock(tmp_path, DEVEL) == 0
    assert _lock(tmp_path, "--check", DEVEL) == 0
    entries = lockfile.read_lock(tmp_path / "images.lock")
    entries[RUNTIME]["stack"]["ucx"] = "0.1"
    lockfile.write_lock(tmp_path / "images.lock", entries)
    capsys.readouterr()
    assert _lock(tmp_path, "--check", DEVEL) == 1
    out, err = capsys.readouterr()
    assert [line for line in out.splitlines() if not line.startswith(f"{RUNTIME}: ucx 0.1 -> ")] == []
    assert f"{RUNTIME}: checked too ({DEVEL} is built FROM it)" in err and "1 image(s) drifted" in err


class _NothingBuilt:
    """An engine that holds none of the images (as a lock written with --no-engine records)."""

    def lookup(self, ref):
        return None


def test_build_locked_devel_finds_the_runtime_that_lock_devel_wrote(tmp_path, monkeypatch):
    from imagebuild import engines
    from imagebuild.cli.commands.build import check_locked
    from imagebuild.render.run import load_images
    from imagebuild.knowledge import load

    monkeypatch.setattr(engines, "get_engine", lambda *a, **kw: _NothingBuilt())
    k = load(MATRIX)
    lock = tmp_path / "images.lock"
    assert _lock(tmp_path, DEVEL) == 0
    pins = check_locked([DEVEL], k, lock)       # no refusal: the runtime is in the lock
    specs = load_images(MATRIX)
    assert specs[RUNTIME].local_ref not in pins[specs[DEVEL].local_ref]   # built in the run, not pinned
    # a lock without the runtime (written by hand, or by an imagebuild that locked the devel
    # alone) is refused in one line that names it and what to run
    entries = lockfile.read_lock(lock)
    lockfile.write_lock(lock, {DEVEL: entries[DEVEL]})
    with pytest.raises(BuildError) as exc:
        check_locked([DEVEL], k, lock)
    msg = str(exc.value)
    assert f"{RUNTIME}: not in images.lock (the image {DEVEL} is built FROM it)" in msg
    assert msg.endswith(f"(run `imagebuild lock {DEVEL}` to accept)") and "\n" not in msg
    with pytest.raises(BuildError, match=r"\(run `imagebuild lock` to accept\)$"):
        check_locked(["comms"], k, lock)        # a family name, which `lock` does not take


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
