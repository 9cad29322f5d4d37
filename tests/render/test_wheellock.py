"""Wheel locks: every pip install of every image is hash-pinned and resolves nothing at build time.

Pure parts (parsing, checking, wheel sets, the uv command) run anywhere. Two tests use real tools:
uv writing the smoke-cpu lock again from the real index (same bytes as the committed one), and the
host's pip refusing a wheel whose sha256 is not the lock's."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from imagebuild import cli, knowledge
from imagebuild.render import images, output, renderer as render, wheellock
from imagebuild.errors import RenderError
from imagebuild.render.wheellock import LockError, WheelSet, check_lock, parse_lock

from conftest import ROOT, need

MATRIX = str(ROOT / "matrix.yaml")
H1, H2 = "a" * 64, "b" * 64
GOOD = f"""# a comment
torch==2.9.1 \\
    --hash=sha256:{H1} \\
    --hash=sha256:{H2}
nvidia-nccl-cu12==2.27.5 \\
    --hash=sha256:{H1}
"""


def _ws(**kw) -> WheelSet:
    base = dict(key="x", requirements=("nvidia-nccl-cu12==2.27.5", "torch==2.9.1"), python="3.12",
                glibc="2.39", index=None, host=False, exclude_newer="2026-11-21",
                nccl_package="nvidia-nccl-cu12")
    base.update(kw)
    return WheelSet(**base)


def test_parse_reads_pins_and_hashes():
    lock = parse_lock(GOOD, "x.txt")
    assert set(lock.entries) == {"torch", "nvidia-nccl-cu12"}
    assert lock.entries["torch"].hashes == (H1, H2)
    assert lock.entries["torch"].line == 2
    sub = lock.subset(["nvidia-nccl-cu12"])
    assert "nvidia-nccl-cu12==2.27.5" in sub and "torch" not in sub
    assert parse_lock(sub, "sub.txt").entries["nvidia-nccl-cu12"].hashes == (H1,)


@pytest.mark.parametrize("text, line, words", [
    ("torch==2.9.1\n", 1, "no --hash"),
    (f"torch>=2.9 \\\n    --hash=sha256:{H1}\n", 1, "unexpected line"),
    (f"--index-url https://example.invalid/simple\ntorch==2.9.1 --hash=sha256:{H1}\n", 1,
     "unexpected line"),
    (f"torch==2.9.1 \\\n    --hash=sha256:{H1[:-1]}\n", 2, "unexpected line"),
    (f"torch==2.9.1 \\\n    --hash=md5:{H1[:32]}\n", 2, "unexpected line"),
    (f"torch==2.9.x \\\n    --hash=sha256:{H1}\n", 1, "malformed version"),
    (f"torch==2.9.1 \\\n  --hash=sha256:{H1}\nTorch==2.9.1 \\\n  --hash=sha256:{H1}\n", 3,
     "pinned twice"),
    (f"torch==1; rm -rf / \\\n    --hash=sha256:{H1}\n", 1, "unexpected line"),
])
def test_parse_refuses_anything_but_hash_pinned_entries(text, line, words):
    with pytest.raises(LockError) as exc:
        parse_lock(text, "bad.txt")
    assert words in str(exc.value)
    assert f"bad.txt:{line}" in str(exc.value)


def test_an_empty_lock_is_refused():
    with pytest.raises(LockError, match="pins nothing"):
        parse_lock("# nothing\n", "empty.txt")


def test_check_finds_a_stale_pin_and_a_missing_one():
    lock = parse_lock(GOOD, "x.txt")
    check_lock(lock, _ws())
    with pytest.raises(LockError, match=r"stale lock: torch 2.9.1, matrix wants torch==2.10.0"):
        check_lock(lock, _ws(requirements=("torch==2.10.0",)))
    with pytest.raises(LockError, match=r"triton is not pinned"):
        check_lock(lock, _ws(requirements=("triton==3.5.1",)))


def test_a_local_version_label_satisfies_the_release_pin():
    lock = parse_lock(f"torch==2.13.0+cpu \\\n    --hash=sha256:{H1}\n", "cpu.txt")
    check_lock(lock, _ws(requirements=("torch==2.13.0",)))


def test_a_pin_is_met_by_its_release_only():
    """check_lock's verdicts are packaging's for `==release` (the oracle): a local label is
    ignored, zero padding is equal, a pre-, post- or other release is stale."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version
    for pinned in ("2.13.0", "2.13", "2.13.0.0", "2.13.0+cu130", "2.13.0rc1", "2.13.0.post1",
                   "2.13.1", "2.12.9"):
        lock = parse_lock(f"torch=={pinned} \\\n    --hash=sha256:{H1}\n", "x.txt")
        met = SpecifierSet("==2.13.0").contains(Version(pinned), prereleases=True)
        if met:
            check_lock(lock, _ws(requirements=("torch==2.13.0",)))
        else:
            with pytest.raises(LockError, match="stale lock"):
                check_lock(lock, _ws(requirements=("torch==2.13.0",)))
    with pytest.raises(LockError, match="is not name==version"):
        check_lock(lock, _ws(requirements=("torch>=2.13",)))


def test_names_are_normalised_as_packaging_does():
    from packaging.utils import canonicalize_name
    names = {m.group(1) for lock in (ROOT / "locks" / "wheels").glob("*.txt")
             for m in re.finditer(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", lock.read_text(), re.M)}
    names |= {"Torch", "nvidia_nccl.cu12", "A--b__C..d", "x-_.y", "ruamel.yaml", "a"}
    assert len(names) > 50
    for name in names:
        assert wheellock.canonical_name(name) == canonicalize_name(name), name


def test_wheel_sets_of_the_matrix(k, specs_by_id):
    def ws(iid):
        s = specs_by_id[iid]
        return wheellock.wheel_set(k, s.stack, s.os, s.wheels)

    default = ws("pytorch-2.9.1-cu128-ubuntu24.04-runtime")
    assert default.requirements == ("nvidia-nccl-cu12==2.27.5", "torch==2.9.1")
    assert default.index is None and not default.host
    assert default.platform == "x86_64-manylinux_2_39" and default.python == "3.12"
    assert ws("pytorch-2.9.1-cu128-ubuntu24.04-devel") == default   # flavors share one lock
    comms = ws("comms-cu129-nccl2.27.5-ubuntu24.04-runtime")
    assert comms.requirements == ("nvidia-nccl-cu12==2.27.5",) and comms.nccl_package
    cpu = ws("smoke-cpu")
    assert cpu.host and cpu.requirements == ("torch==2.13.0",) and cpu.nccl_package is None
    assert cpu.exclude_newer == k.as_of
    rocky = ws("pytorch-2.13.0-cu130-rockylinux8-runtime")
    assert rocky.platform == "x86_64-manylinux_2_28"


def test_a_variant_from_pytorchs_own_index_names_that_index(k):
    specs, skipped = images.expand(k, require_locks=False)
    variant = [s for s in specs if s.id == "pytorch-2.10.0-cu130-ubuntu24.04-runtime"][0]
    ws = wheellock.wheel_set(k, variant.stack, variant.os, variant.wheels)
    assert ws.index == "https://download.pytorch.org/whl/cu130"
    cmd = wheellock.uv_command(ws, uv="uv")
    env = wheellock.uv_environment(ws, index_url="https://index.invalid/simple/", find_links=["/w"],
                                   base={"UV_EXTRA_INDEX_URL": "https://stale.invalid/", "HOME": "/h"})
    # locations travel in the environment (they may carry credentials), never in argv
    assert not [a for a in cmd if "://" in a or a in ("--index-url", "--extra-index-url", "--find-links")]
    assert env["UV_INDEX"] == ws.index and env["UV_DEFAULT_INDEX"] == "https://index.invalid/simple/"
    assert "UV_FIND_LINKS" not in env                     # only host sets read find-links
    assert "UV_EXTRA_INDEX_URL" not in env and env["HOME"] == "/h"   # inherited locations dropped
    assert cmd[cmd.index("--exclude-newer") + 1] == k.as_of
    assert cmd[cmd.index("--python-platform") + 1] == "x86_64-manylinux_2_39"
    assert "--generate-hashes" in cmd and "--no-header" in cmd


def test_every_committed_lock_is_current_and_used(k):
    assert cli.main(["wheels", "check", "--matrix", MATRIX]) == 0
    specs, _ = images.expand(k)
    used = {s.wheel_lock for s in specs if s.wheel_lock}
    on_disk = {str(p.relative_to(ROOT)) for p in (ROOT / "locks" / "wheels").glob("*.txt")}
    assert used == on_disk


def test_every_pip_install_of_every_recipe_is_hash_checked():
    """No generated recipe may resolve or fetch an unpinned wheel."""
    n = 0
    for path in sorted((ROOT / "Dockerfiles").glob("*/Dockerfile")) + \
            sorted((ROOT / "singularity").glob("*.def")):
        for line in path.read_text().splitlines():
            if "pip install" in line:
                n += 1
                assert "--require-hashes" in line and "--no-deps" in line, (path, line)
                assert re.search(r" -r /opt/imagebuild/requirements/(wheels|nccl|runtime)\.txt", line), line
    assert n >= 100


def _copy_repo(tmp_path: Path) -> Path:
    for name in ("matrix.yaml", "locks"):      # the templates come with the package
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, tmp_path / name)
    return tmp_path


def test_an_image_without_its_lock_is_listed_with_the_command_that_writes_it(tmp_path):
    root = _copy_repo(tmp_path)
    lock = root / "locks" / "wheels" / "torch-2.9.1-cu128-py3.12-manylinux_2_39.txt"
    lock.unlink()
    k = knowledge.load(root / "matrix.yaml")
    specs, skipped = images.expand(k)
    ids = {s.id for s in specs}
    assert "pytorch-2.9.1-cu128-ubuntu24.04-runtime" not in ids
    assert "pytorch-2.9.1-cu128-ubuntu22.04-runtime" in ids
    why = [s.reason(k) for s in skipped if s.combination == "torch 2.9.1+cu128 on ubuntu24.04"]
    assert why and "no wheel lock" in why[0] and "imagebuild wheels lock" in why[0]
    assert cli.main(["wheels", "check", "--matrix", str(root / "matrix.yaml")]) == 0
    assert cli.main(["wheels", "check", "--strict", "--matrix", str(root / "matrix.yaml")]) == 1


def test_a_stale_or_broken_lock_fails_check_and_generate_with_its_line(tmp_path, capsys):
    root = _copy_repo(tmp_path)
    lock = root / "locks" / "wheels" / "torch-2.9.1-cu128-py3.12-manylinux_2_39.txt"
    text = lock.read_text()
    lock.write_text(text.replace("\ntorch==2.9.1 ", "\ntorch==2.9.0 "))
    matrix = str(root / "matrix.yaml")
    assert cli.main(["wheels", "check", "--matrix", matrix]) == 1
    assert "stale lock: torch 2.9.0, matrix wants torch==2.9.1" in capsys.readouterr().out
    lock.write_text(text.replace("--hash=sha256:", "--hash=sha256:zz", 1))
    assert cli.main(["generate", "--matrix", matrix, "--output", str(root / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and lock.name in err[0] and "unexpected line" in err[0]
    assert not (root / "out" / "Dockerfiles").exists()      # nothing half-written


def test_an_orphan_lock_fails_check(tmp_path, capsys):
    root = _copy_repo(tmp_path)
    shutil.copy2(root / "locks" / "wheels" / "torch-2.9.1-cu128-py3.12-manylinux_2_39.txt",
                 root / "locks" / "wheels" / "torch-0.1.0-cu128-py3.12-manylinux_2_39.txt")
    assert cli.main(["wheels", "check", "--matrix", str(root / "matrix.yaml")]) == 1
    assert "orphan: locks/wheels/torch-0.1.0" in capsys.readouterr().out


def test_the_lock_sha_is_a_label_so_a_new_lock_changes_the_recipe(tmp_path, k, specs_by_id):
    spec = specs_by_id["comms-cu129-nccl2.27.5-ubuntu24.04-runtime"]
    before = render.Renderer().dockerfile(spec, k)
    lock = ROOT / spec.wheel_lock
    assert f'io.imagebuild.wheels-lock="sha256:{wheellock.parse_lock(lock.read_text(), "x").sha256}"' \
        in before
    root = _copy_repo(tmp_path)
    (root / spec.wheel_lock).write_text(lock.read_text() + "# reviewed\n")
    k2 = knowledge.load(root / "matrix.yaml")
    spec2 = {s.id: s for s in images.expand(k2)[0]}[spec.id]
    after = render.Renderer().dockerfile(spec2, k2)
    assert after != before and "io.imagebuild.wheels-lock" in after


def test_the_build_context_carries_the_lock_and_its_nccl_subset(tmp_path, k, specs_by_id):
    spec = specs_by_id["pytorch-2.9.1-cu128-ubuntu24.04-runtime"]
    ctx = output.write_context(spec, tmp_path / "ctx", k=k)
    whole = (ctx / "requirements" / "wheels.txt").read_text()
    assert whole == (ROOT / spec.wheel_lock).read_text()
    nccl = parse_lock((ctx / "requirements" / "nccl.txt").read_text(), "nccl.txt")
    assert list(nccl.entries) == ["nvidia-nccl-cu12"]
    assert nccl.entries["nvidia-nccl-cu12"].hashes == \
        parse_lock(whole, "w").entries["nvidia-nccl-cu12"].hashes


def _index_reachable() -> str | None:
    from imagebuild.knowledge.sync import default_index
    src = wheellock.pip_sources()
    url = (src.get("index-url") or [default_index()])[0]
    try:
        import requests
        requests.head(url, timeout=20)
    except Exception as exc:  # noqa: BLE001 - any failure means "not reachable"
        return f"{url}: {type(exc).__name__}"
    return None


def test_uv_writes_the_same_smoke_cpu_lock_again(tmp_path, k):
    """Real uv, real index, real host wheels: the committed lock is what the command writes, byte
    for byte (files newer than the matrix's as_of date are not considered)."""
    why = _index_reachable()
    if why:
        need("the package index", why)
    root = _copy_repo(tmp_path)
    committed = sorted((root / "locks" / "wheels").glob("torch-2.13.0-cpu-*.txt"))
    assert len(committed) == 1
    before = committed[0].read_text()
    committed[0].unlink()
    assert cli.main(["wheels", "lock", "smoke-cpu", "--matrix", str(root / "matrix.yaml")]) == 0
    assert committed[0].read_text() == before


def test_the_host_pip_refuses_a_wheel_whose_hash_is_not_the_locks(tmp_path):
    """The same pip check the image build relies on, run on the host: one changed hash and the
    download fails, naming the lock; nothing is left in the cache."""
    lock_path = sorted((ROOT / "locks" / "wheels").glob("torch-2.13.0-cpu-*.txt"))[0]
    text = lock_path.read_text()
    entry = parse_lock(text, str(lock_path)).entries["torch"]
    bad = parse_lock(text.replace(entry.hashes[0], "0" * 64), "tampered.txt")
    proc = subprocess.run(["python3", "-m", "pip", "--version"], capture_output=True)
    if proc.returncode != 0:
        need("the host's pip", "python3 -m pip does not run")
    with pytest.raises(RenderError, match=r"tampered.txt .*sha256 mismatch: torch==2.13.0\+cpu"):
        output.host_wheels(bad, cache=tmp_path / "cache")
    assert not (tmp_path / "cache" / f"lock-{bad.sha256[:16]}").exists()
