"""`imagebuild generate` interrupted at random moments (SIGINT, SIGTERM, SIGKILL), and run
concurrently: Dockerfiles/ and singularity/ are always the old or the new set, complete. Real
processes, the real matrix, a second recipes folder that changes 108 of the 165 files."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import RECIPES, ROOT, default_signals
from imagebuild import atomic

TOPS = ("Dockerfiles", "singularity")
PREFIX = ".imagebuild-gen-"


def tree_hash(folder: Path) -> str | None:
    if not folder.is_dir():
        return None
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        h.update(str(path.relative_to(folder)).encode() + b"\0")
        if path.is_file():
            h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


SNAPSHOT: dict[str, Path] = {}  # matrix.yaml and what it reads, copied once: a fixed input


def generate(output: Path, recipes: Path, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "imagebuild", "generate", "--matrix",
                             str(SNAPSHOT["matrix"]), "--recipes", str(recipes), "--output", str(output)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_signals, **kw)


@pytest.fixture(scope="module")
def states(tmp_path_factory):
    """The old tree (today's recipes) and the new one (a fragment changed), generated once."""
    base = tmp_path_factory.mktemp("gen")
    snap = base / "snapshot"
    snap.mkdir()
    shutil.copy2(ROOT / "matrix.yaml", snap / "matrix.yaml")
    shutil.copytree(ROOT / "locks", snap / "locks")
    shutil.copytree(RECIPES, snap / "recipes")
    SNAPSHOT["matrix"] = snap / "matrix.yaml"
    recipes_new = base / "recipes-new"
    shutil.copytree(snap / "recipes", recipes_new)
    frag = recipes_new / "fragments" / "cuda-repo.sh.j2"
    text = frag.read_text()
    assert "rm -f /tmp/cuda-repo.pub" in text
    frag.write_text(text.replace("rm -f /tmp/cuda-repo.pub", "rm -f /tmp/cuda-repo.pub /tmp/cuda-repo.sig"))
    out = {}
    for name, recipes in (("old", snap / "recipes"), ("new", recipes_new)):
        folder = base / name
        proc = generate(folder, recipes)
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
        out[name] = {top: tree_hash(folder / top) for top in TOPS}
        out[f"{name}_dir"] = folder
    assert out["old"]["Dockerfiles"] != out["new"]["Dockerfiles"]
    out["recipes_new"] = recipes_new
    return out


def test_generate_killed_at_random_moments_leaves_old_or_new(states, tmp_path):
    rng = random.Random(20261123)
    target = tmp_path / "target"
    t0 = time.monotonic()  # an uninterrupted run's length: signals are spread over 0 .. 1.3 of it
    proc = generate(tmp_path / "timing", states["recipes_new"])
    assert proc.wait(timeout=300) == 0
    span = (time.monotonic() - t0) * 1.3
    seen = {"old": 0, "new": 0}
    for i in range(24):
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(states["old_dir"], target)
        sig = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)[i % 3]
        proc = generate(target, states["recipes_new"])
        time.sleep(rng.uniform(0, span))
        proc.send_signal(sig)
        rc = proc.wait(timeout=120)
        err = proc.stderr.read()
        for top in TOPS:
            got = tree_hash(target / top)
            assert got in (states["old"][top], states["new"][top]), \
                f"run {i} ({sig.name}): {top}/ is neither the old nor the new set"
            seen["old" if got == states["old"][top] else "new"] += 1
        assert "Traceback" not in err, err
        if sig != signal.SIGKILL:
            assert rc in (0, 130, -sig), (rc, err)
            if rc == 130:
                assert err.strip() == "imagebuild generate: interrupted", err
                # interrupted, not killed: its own temporary folder is gone
                assert not [n for n in os.listdir(target) if n.startswith(PREFIX)]
            if rc == 0:
                assert all(tree_hash(target / t) == states["new"][t] for t in TOPS)
        else:
            # a killed run may leave its temporary folder; the next run removes it
            proc = generate(target, states["recipes_new"])
            assert proc.wait(timeout=300) == 0, proc.stderr.read()
            assert not [n for n in os.listdir(target) if n.startswith(PREFIX)]
            assert all(tree_hash(target / t) == states["new"][t] for t in TOPS)
    print(f"folder states after interrupts: {seen}")


def test_concurrent_generates_do_not_collide(states, tmp_path):
    target = tmp_path / "target"
    shutil.copytree(states["old_dir"], target)
    procs = [generate(target, states["recipes_new"]) for _ in range(4)]
    for proc in procs:
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
    assert all(tree_hash(target / t) == states["new"][t] for t in TOPS)
    assert sorted(os.listdir(target)) == ["Dockerfiles", "singularity"]


def test_work_dir_of_a_live_run_is_never_removed(tmp_path):
    with atomic.work_dir(tmp_path, PREFIX) as mine:
        assert mine.name.startswith(PREFIX)
        assert atomic.remove_stale(tmp_path, PREFIX) == []  # locked: another run leaves it alone
        assert mine.is_dir()
    assert not mine.exists()
    stale = tmp_path / f"{PREFIX}dead"
    stale.mkdir()
    assert atomic.remove_stale(tmp_path, PREFIX) == [stale]


def test_swap_dir_replaces_a_folder_whole(tmp_path):
    cur, new, scratch = tmp_path / "cur", tmp_path / "new", tmp_path / "scratch"
    for folder, word in ((cur, "old"), (new, "new")):
        folder.mkdir()
        (folder / "f").write_text(word)
    scratch.mkdir()
    atomic.swap_dir(new, cur, scratch)
    assert (cur / "f").read_text() == "new"
    if new.exists():  # RENAME_EXCHANGE: the old folder is where the new one was
        assert (new / "f").read_text() == "old"


def test_swap_fallback_puts_the_old_folder_back_when_the_second_rename_fails(tmp_path, monkeypatch):
    """Where RENAME_EXCHANGE is not available: two renames, and a failure (or an interrupt)
    between them moves the old folder back."""
    cur, new, scratch = tmp_path / "cur", tmp_path / "new", tmp_path / "scratch"
    for folder, word in ((cur, "old"), (new, "new")):
        folder.mkdir()
        (folder / "f").write_text(word)
    scratch.mkdir()
    monkeypatch.setattr(atomic, "exchange", lambda a, b: False)
    real = os.replace
    calls = []

    def flaky(src, dst):
        calls.append((src, dst))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", flaky)
    with pytest.raises(KeyboardInterrupt):
        atomic.swap_dir(new, cur, scratch)
    assert (cur / "f").read_text() == "old" and (new / "f").read_text() == "new"
