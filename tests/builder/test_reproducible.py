"""Reproducible images (imagebuild/builder/reproducible.py): the normalising step, and two cold builds of
the same recipe on the real engine giving one image ID."""

from __future__ import annotations

import io
import json
import os
import random
import re
import secrets
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from imagebuild.builder import reproducible as rp
from conftest import answer, build_cold_twice
from imagebuild import dockerfile, sourcedate

ROOT = Path(__file__).resolve().parents[2]
EPOCH = sourcedate.source_epoch("2026-11-21")
BASE = "imagebuild/base:debian-bookworm"


def test_source_date_is_the_as_of_day_in_rfc3339():
    assert sourcedate.rfc3339(EPOCH) == "2026-11-21T00:00:00Z"
    assert EPOCH == 1795219200
    with pytest.raises(Exception, match="not a YYYY-MM-DD"):
        sourcedate.source_epoch("21.11.2026")


def _tar(entries) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:", format=tarfile.PAX_FORMAT) as tf:
        for name, kind, mtime, data in entries:
            info = tarfile.TarInfo(name)
            info.mtime = mtime
            if kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(info)
            elif kind == "link":
                info.type, info.linkname = tarfile.LNKTYPE, data
                tf.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                info.pax_headers = {"atime": str(mtime), "SCHILY.xattr.user.x": "1"}
                tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _pyc_bytes(mtime: int) -> bytes:
    return b"\xa7\r\r\n" + b"\0\0\0\0" + mtime.to_bytes(4, "little") + (5).to_bytes(4, "little") + b"code"


def _layer(order_seed: int, now: int, tmp_path: Path) -> Path:
    entries = [
        ("opt", "dir", now, None),
        ("opt/a.txt", "file", now, b"a"),
        ("opt/old.txt", "file", EPOCH - 86400, b"old"),
        ("opt/z.txt", "link", now, "opt/a.txt"),     # hard link to a.txt
        ("opt/m.py", "file", now, b"x = 1\n"),
        ("opt/__pycache__", "dir", now, None),
        ("opt/__pycache__/m.cpython-311.pyc", "file", now, _pyc_bytes(now)),
        ("var/log/apt/history.log", "file", now, f"Start-Date: {now}".encode()),
        ("var/cache/ldconfig/aux-cache", "file", now, secrets.token_bytes(8)),
        ("root/.cache/pip/x", "file", now, secrets.token_bytes(8)),
        ("var/lib/apt/lists/.wh.auxfiles", "file", now, b""),   # a whiteout: kept
    ]
    head, tail = entries[:4], entries[4:]
    random.Random(order_seed).shuffle(tail)   # an engine's directory order differs between builds
    path = tmp_path / f"in-{order_seed}-{now}.tar"
    path.write_bytes(_tar(head + tail))
    return path


def test_layers_of_two_builds_normalise_to_the_same_bytes(tmp_path):
    first = _layer(1, EPOCH + 3600, tmp_path)
    second = _layer(2, EPOCH + 7200, tmp_path)
    assert first.read_bytes() != second.read_bytes()
    d1 = rp.normalize_layer(first, tmp_path / "out1.tar", EPOCH)
    d2 = rp.normalize_layer(second, tmp_path / "out2.tar", EPOCH)
    assert d1 == d2
    assert (tmp_path / "out1.tar").read_bytes() == (tmp_path / "out2.tar").read_bytes()
    with tarfile.open(tmp_path / "out1.tar") as tf:
        members = {m.name: m for m in tf.getmembers()}
        names = [m.name for m in tf.getmembers()]
        # volatile files are gone, directories stay
        assert not [n for n in names if n.startswith(("var/log/apt/", "root/.cache/", "var/cache/ldconfig/"))]
        assert "var/lib/apt/lists/.wh.auxfiles" in names
        # sorted, parents first; the hard link comes after the file holding the data
        assert names == sorted(names, key=lambda n: n.split("/"))
        assert members["opt/a.txt"].isreg() and members["opt/z.txt"].islnk()
        assert members["opt/z.txt"].linkname == "opt/a.txt"
        # clamped, older times kept; extended attributes kept, atime dropped
        assert members["opt/a.txt"].mtime == EPOCH and members["opt/old.txt"].mtime == EPOCH - 86400
        assert members["opt/a.txt"].pax_headers == {"SCHILY.xattr.user.x": "1"}
        pyc = tf.extractfile(members["opt/__pycache__/m.cpython-311.pyc"]).read()
        assert int.from_bytes(pyc[8:12], "little") == EPOCH == members["opt/m.py"].mtime
    # normalising again changes nothing
    assert rp.normalize_layer(tmp_path / "out1.tar", tmp_path / "again.tar", EPOCH) == d1


def test_hard_link_sorting_before_its_target_gets_the_data(tmp_path):
    src = tmp_path / "in.tar"
    src.write_bytes(_tar([("b", "file", EPOCH, b"data"), ("a", "link", EPOCH, "b")]))
    rp.normalize_layer(src, tmp_path / "out.tar", EPOCH)
    with tarfile.open(tmp_path / "out.tar") as tf:
        a, b = tf.getmembers()
        assert (a.name, a.isreg(), tf.extractfile(a).read()) == ("a", True, b"data")
        assert (b.name, b.islnk(), b.linkname) == ("b", True, "a")


def test_shadow_days_of_accounts_added_in_the_build_are_clamped(tmp_path):
    """useradd writes the day it ran into /etc/shadow (openssh-server adds sshd): two builds on
    two days would differ there; the day becomes the source date's, older days stay."""
    day = EPOCH // 86400
    def shadow(today: int) -> bytes:
        return (f"root:*:{day - 900}:0:99999:7:::\n_apt:*:{day - 900}:0:99999:7:::\n"
                f"sshd:!:{today}::::::\nnobody:*::0:99999:7:::\n").encode()
    outs = []
    for i, today in enumerate((day + 2, day + 9)):
        src = tmp_path / f"in{i}.tar"
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:", format=tarfile.PAX_FORMAT) as tf:
            for name in ("etc/shadow", "etc/shadow-"):
                data = shadow(today if name == "etc/shadow" else day - 900)
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o640, EPOCH + 3600 * (i + 1)
                tf.addfile(info, io.BytesIO(data))
        src.write_bytes(buf.getvalue())
        outs.append(rp.normalize_layer(src, tmp_path / f"out{i}.tar", EPOCH))
    assert outs[0] == outs[1]
    with tarfile.open(tmp_path / "out0.tar") as tf:
        text = tf.extractfile("etc/shadow").read().decode()
        assert tf.extractfile("etc/shadow-").read() == shadow(day - 900)    # nothing after the day: kept
    assert text.splitlines() == [f"root:*:{day - 900}:0:99999:7:::", f"_apt:*:{day - 900}:0:99999:7:::",
                                 f"sshd:!:{day}::::::", "nobody:*::0:99999:7:::"]


def test_config_loses_build_host_noise():
    config = {"architecture": "amd64", "os": "linux", "container": "0123abcd", "docker_version": "20.10",
              "container_config": {"Hostname": "0123abcd"}, "created": "2026-11-23T11:00:01.123Z",
              "config": {"Image": "sha256:" + "1" * 64, "Labels": {"a": "b"}},
              "history": [{"created": "2026-11-23T11:00:00Z", "created_by": "RUN x"},
                          {"created": "2026-11-23T11:00:01Z", "created_by": "ENV a=b", "empty_layer": True},
                          {"created": "2026-11-23T11:00:02Z",
                           "created_by": f"/bin/sh -c #(nop) COPY dir:{'9' * 64} in /opt/venv "}],
              "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "2" * 64, "sha256:" + "4" * 64]}}
    out = rp.normalize_config(config, ["sha256:" + "3" * 64, "sha256:" + "5" * 64], EPOCH)
    assert out == {"architecture": "amd64", "os": "linux", "created": "2026-11-21T00:00:00Z",
                   "config": {"Image": "", "Labels": {"a": "b"}},
                   "history": [{"created": "2026-11-21T00:00:00Z", "created_by": "RUN x"},
                               {"created": "2026-11-21T00:00:00Z", "created_by": "ENV a=b", "empty_layer": True},
                               {"created": "2026-11-21T00:00:00Z",
                                "created_by": f"/bin/sh -c #(nop) COPY dir:{'5' * 64} in /opt/venv "}],
                   "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "3" * 64, "sha256:" + "5" * 64]}}


def test_final_base_follows_stage_names():
    text = "FROM imagebuild/base:debian-bookworm AS torch\nRUN x\nFROM torch AS mid\nFROM mid\n"
    assert dockerfile.final_base(text) == "imagebuild/base:debian-bookworm"
    assert dockerfile.final_base("FROM a:1 AS b\nFROM c:2\n") == "c:2"
    assert dockerfile.final_base("FROM scratch\n") is None


def test_git_revision_only_for_a_clean_checkout(tmp_path):
    assert rp.git_revision(tmp_path) is None      # not a checkout
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(git + ["init", "-q"], check=True)
    (tmp_path / "f").write_text("1")
    subprocess.run(git + ["add", "f"], check=True)
    subprocess.run(git + ["commit", "-qm", "c"], check=True)
    head = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert rp.git_revision(tmp_path) == head
    (tmp_path / "f").write_text("2")              # an uncommitted change: the commit says not what is built
    assert rp.git_revision(tmp_path) is None


# ------------------------------------------------------------------------------ real engine

RECIPE = f"""FROM {BASE} AS stage
RUN mkdir -p /out/opt /out/root/.cache && echo made-in-a-stage > /out/opt/f \\
 && date +%s%N > /out/root/.cache/stage-stamp
FROM {BASE}
# the builder names this source by a hash of its files, the volatile stamp included
COPY --from=stage /out/ /
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN apt-get update \\
 && apt-get install -y --no-install-recommends python3-minimal \\
 && rm -rf /var/lib/apt/lists/*
COPY hello.txt /opt/hello.txt
RUN python3 -c "import os; print(os.sep)" > /opt/out.txt \\
 && printf 'x = 1\\n' > /opt/m.py && python3 -m py_compile /opt/m.py \\
 && mkdir -p /root/.cache && date +%s%N > /root/.cache/stamp
LABEL org.opencontainers.image.created="2026-11-21T00:00:00Z"
"""


class _FakeEngine:
    """Pure logic only: an engine that holds one image of ``size`` bytes and whose save stream
    is ``save`` (an iterable, or an exception to raise)."""

    def __init__(self, size: int, save=()):
        from imagebuild.engines.base import ImageInfo
        self.info = ImageInfo(id="sha256:" + "1" * 64, repo_digests=(), size=size)
        self.save = save
        self.loaded: list[tuple[str, list[str]]] = []

    def lookup(self, ref):
        return self.info

    def save_stream(self, ref):
        if isinstance(self.save, BaseException):
            raise self.save
        return iter(self.save)

    def load_stream(self, chunks, folder=None):
        with tarfile.open(fileobj=rp._Chunks(chunks), mode="r|") as tf:
            for member in tf:
                # what is left in the folder when the engine reads this member
                self.loaded.append((member.name, sorted(str(p.relative_to(folder))
                                                        for p in folder.rglob("*") if p.is_file())))


def test_the_load_sends_each_file_once_and_removes_it(tmp_path):
    folder = tmp_path / "out"
    (folder / "a").mkdir(parents=True)
    for name in ("a/layer.tar", "b.json", "manifest.json"):
        (folder / name).write_bytes(b"x" * 4096)
    engine = _FakeEngine(0)
    engine.load_stream = lambda chunks: _FakeEngine.load_stream(engine, chunks, folder)
    rp._load(engine, folder, "imagebuild/x:1")
    assert [name for name, _ in engine.loaded] == ["a", "a/layer.tar", "b.json", "manifest.json"]
    # never two copies on disk: once the engine has read a file, ours is gone
    left = dict(engine.loaded)
    assert "a/layer.tar" not in left["b.json"] and "b.json" not in left["manifest.json"]
    assert not [p for p in folder.rglob("*") if p.is_file()]


def test_normalising_without_room_for_the_image_is_refused_first(tmp_path):
    engine = _FakeEngine(size=1 << 60)
    with pytest.raises(rp.ImagebuildError, match=r"needs at least its .* GB free under "
                                                 + re.escape(str(tmp_path))):
        rp.normalize_image(engine, "imagebuild/x:1", EPOCH, workdir=tmp_path)
    assert not list(tmp_path.iterdir())       # nothing written


def test_a_full_disk_while_normalising_is_one_line_and_leaves_nothing(tmp_path):
    import errno
    engine = _FakeEngine(size=1, save=OSError(errno.ENOSPC, "No space left on device"))
    with pytest.raises(rp.ImagebuildError, match=r"filled the disk under "
                                                 + re.escape(str(tmp_path))) as exc:
        rp.normalize_image(engine, "imagebuild/x:1", EPOCH, workdir=tmp_path)
    assert "\n" not in str(exc.value) and "--output" in str(exc.value)
    assert not list(tmp_path.iterdir())
    engine.save = OSError(errno.EACCES, "Permission denied")     # any other error is not renamed
    with pytest.raises(PermissionError):
        rp.normalize_image(engine, "imagebuild/x:1", EPOCH, workdir=tmp_path)


@pytest.fixture()
def base_image(docker_client):
    from imagebuild import cli
    try:
        docker_client.images.get(BASE)
    except Exception:  # noqa: BLE001 - ImageNotFound
        assert cli.main(["base", "debian-bookworm"]) == 0, "imagebuild base debian-bookworm failed"
    return docker_client.images.get(BASE)


def _build_twice(docker_client, tmp_path, *, normalize: bool) -> list:
    token = secrets.token_hex(4)
    ctx = tmp_path / f"ctx-{token}"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(RECIPE)
    (ctx / "hello.txt").write_text("hello\n")
    refs = [f"imagebuild/test-repro-{token}-{i}:local" for i in (1, 2)]
    return build_cold_twice(docker_client, ctx, refs, tmp_path / "logs", epoch=EPOCH if normalize else None,
                            fresh_files=["hello.txt"])


@pytest.fixture()
def cleanup(docker_client):
    refs: list[str] = []
    yield refs
    for ref in refs:
        try:
            docker_client.images.remove(ref, force=True)
        except Exception:  # noqa: BLE001 - already gone
            pass


def test_two_cold_builds_give_one_image_id(docker_client, base_image, tmp_path, cleanup):
    plain = _build_twice(docker_client, tmp_path, normalize=False)
    cleanup += [ref for ref, *_ in plain]
    # without the step the engine gives two ids (else this test would prove nothing)
    assert plain[0][1] != plain[1][1]
    built = _build_twice(docker_client, tmp_path, normalize=True)
    cleanup += [ref for ref, *_ in built]
    (ref1, id1, img1, raw1), (ref2, id2, img2, raw2) = built
    # the engine's own, unnormalised image is removed once ref names the normalised one (the
    # plain builds' images stay: nothing took their names)
    assert raw1 != id1 and raw2 != id2
    assert not [i for i in (raw1, raw2) if i in {im.id for im in docker_client.images.list(all=True)}]
    assert plain[1][3] in {im.id for im in docker_client.images.list(all=True)}
    assert id1 == id2 == img1.id == img2.id
    config = img1.attrs
    assert config["Created"] == "2026-11-21T00:00:00Z"
    labels = config["Config"]["Labels"]
    assert labels["org.opencontainers.image.base.name"] == BASE
    assert labels["org.opencontainers.image.base.digest"] == base_image.id
    # the base's layers are kept as they are: the image is still seen to be built on it
    base_layers = base_image.attrs["RootFS"]["Layers"]
    assert img1.attrs["RootFS"]["Layers"][:len(base_layers)] == base_layers
    # the image still works: its files, and Python takes the .pyc made at build time as valid
    # (its header now records the clamped mtime its .py has); the volatile cache is gone
    out = docker_client.containers.run(
        id1, ["bash", "-c", "cat /opt/hello.txt /opt/out.txt; cd /opt && python3 -v -c 'import m' 2>&1 "
                            "| grep -E 'm.cpython-311.pyc|stale'; ls /root/.cache/stamp 2>&1 || true"],
        remove=True).decode()
    assert out.startswith("hello\n/\n"), out
    assert "code object from '/opt/__pycache__/m.cpython-311.pyc'" in out and "stale" not in out, out
    assert "No such file" in out, out


def _cli(*args: str, timeout: int = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "imagebuild", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def _drop_build_chain(client, log: Path, keep: set[str]) -> None:
    """Remove the classic builder's images of one --no-cache build (the steps' ids its log names),
    now untagged beside the normalised image: each is 3 GB of disk for smoke-cpu."""
    ids = re.findall(r"^ ---> ([0-9a-f]{12})$", log.read_text(errors="replace"), re.MULTILINE)
    for short in reversed(ids):
        try:
            image = client.images.get(short)
            if image.id in keep or image.tags:
                continue
            client.images.remove(image.id)
        except Exception:  # noqa: BLE001 - gone with a child already, or still in use: leave it
            pass


@pytest.mark.heavy
def test_smoke_cpu_two_cold_builds_give_one_id_that_lock_check_accepts(docker_client, base_image, tmp_path):
    """Heavy tier: `build smoke-cpu --no-cache --json` twice gives one ID, which `lock --check`
    accepts. The fast tier keeps the mechanism on the small recipe above
    (test_two_cold_builds_give_one_image_id) and lock --check's drift on the smoke-cpu image the
    session built (test_lock_check_sees_another_image_under_the_tag); the same for the CUDA-built
    communication image is the heavy test of tests/smoke/test_comms_wheels_image.py."""
    def build() -> str:
        logs = tmp_path / "logs"
        proc = _cli("build", "smoke-cpu", "--no-cache", "--json", "--quiet", "--output", str(tmp_path / "build"),
                    "--log-dir", str(logs))
        assert proc.returncode == 0, proc.stderr[-3000:]
        (row,) = [r for r in answer(proc.stdout, "build") if r["image"] == "smoke-cpu"]
        assert row["image_id"] == docker_client.images.get(row["ref"]).id
        _drop_build_chain(docker_client, logs / "smoke-cpu.log", keep={base_image.id, row["image_id"]})
        return row["image_id"]

    lock = ["--lock", str(tmp_path / "images.lock"), "--reports-dir", str(tmp_path), "--sbom-dir", str(tmp_path)]
    first = build()
    assert _cli("lock", "smoke-cpu", *lock).returncode == 0
    second = build()
    assert second == first
    check = _cli("lock", "smoke-cpu", "--check", *lock)
    assert check.returncode == 0, check.stdout + check.stderr


def test_lock_check_sees_another_image_under_the_tag(smoke_cpu_image, docker_client, base_image, tmp_path):
    """A rebuild that gave another image ID is drift: `lock --check` exits 1 and names both IDs.
    On the smoke-cpu image the session built once (no rebuild needed to see the check fail)."""
    lock = ["--lock", str(tmp_path / "images.lock"), "--reports-dir", str(tmp_path), "--sbom-dir", str(tmp_path)]
    first = docker_client.images.get(smoke_cpu_image).id
    assert _cli("lock", "smoke-cpu", *lock).returncode == 0
    check = _cli("lock", "smoke-cpu", "--check", *lock)
    assert check.returncode == 0, check.stdout + check.stderr
    repo, tag = smoke_cpu_image.rsplit(":", 1)
    try:
        base_image.tag(repo, tag)                  # another image under the tag: a rebuild that differs
        check = _cli("lock", "smoke-cpu", "--check", *lock)
        assert check.returncode == 1
        assert f"smoke-cpu: image {first[:19]} -> {base_image.id[:19]}" in check.stdout.splitlines()
    finally:
        docker_client.images.get(first).tag(repo, tag)


# --------------------------------------------------------------------------------------------------
# a rebuild the builder's cache serves whole is not normalised again (NormalizeMemo)


def test_a_memo_file_that_is_not_ours_is_no_memo(tmp_path):
    memo = rp.NormalizeMemo("imagebuild/x:1", tmp_path)
    assert memo.read() == {}                                   # none yet
    a, b = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    memo.write(a, b, a)
    assert memo.read() == {"ref": "imagebuild/x:1", "built": a, "key": b, "image": a}
    assert rp.NormalizeMemo("imagebuild/x:2", tmp_path).read() == {}          # another ref's file
    for text in ("{", "[]", '{"ref": "imagebuild/x:1", "built": "x", "key": "y", "image": "z"}',
                 '{"ref": "imagebuild/x:2", "built": "%s", "key": "%s", "image": "%s"}' % (a, b, a),
                 " " * 5000):
        memo.path.write_text(text)
        assert memo.read() == {}, text
    # a FIFO (read without blocking), a link, a group-writable file: no memo
    memo.write(a, b, a)
    assert memo.path.stat().st_mode & 0o777 == 0o600
    memo.path.chmod(0o664)
    assert memo.read() == {}
    memo.path.unlink()
    os.mkfifo(memo.path)
    assert memo.read() == {}
    memo.path.unlink()
    other = tmp_path / "elsewhere.json"
    other.write_text(json.dumps({"ref": "imagebuild/x:1", "built": a, "key": b, "image": a}))
    memo.path.symlink_to(other)
    assert memo.read() == {}
    # the key covers everything normalising depends on besides the builder's image
    keys = {rp.NormalizeMemo.key(a, EPOCH, None, None), rp.NormalizeMemo.key(b, EPOCH, None, None),
            rp.NormalizeMemo.key(a, EPOCH + 1, None, None), rp.NormalizeMemo.key(a, EPOCH, b, None),
            rp.NormalizeMemo.key(a, EPOCH, None, {"k": "v"})}
    assert len(keys) == 5


def test_the_memo_lives_in_imagebuilds_cache_folder_and_obeys_its_switch(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert rp.NormalizeMemo("r").path.parent == tmp_path / "xdg" / "imagebuild" / "normalized"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")       # not absolute: ignored (XDG)
    assert rp.NormalizeMemo("r").path.parent == tmp_path / "home" / ".cache" / "imagebuild" / "normalized"
    monkeypatch.setenv("IMAGEBUILD_NO_CACHE", "1")
    memo = rp.NormalizeMemo("r")
    a = "sha256:" + "a" * 64
    memo.write(a, a, a)
    assert memo.path is None and memo.read() == {} and not (tmp_path / "home").exists()


# quiet_engine: BuildKit shares and evicts cache records between concurrent builds (the session's
# background build of the communication image), and this test needs its rebuild served whole
@pytest.mark.quiet_engine
@pytest.mark.parametrize("builder", ["classic", "buildkit"])
def test_an_unchanged_rebuild_is_tagged_not_normalised_again(docker_client, base_image, tmp_path,
                                                             monkeypatch, cleanup, builder):
    from imagebuild.builder.reproducible import BuildTimeEngine
    from imagebuild.builder.scheduler import BuildJob, build_all
    from imagebuild.engines import get_engine

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    token = secrets.token_hex(4)
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    run = "RUN --mount=type=tmpfs,target=/scratch" if builder == "buildkit" else "RUN"
    (ctx / "Dockerfile").write_text(f"FROM {BASE}\n{run} echo {token} > /opt/token && date +%s%N > /opt/when\n")
    ref = f"imagebuild/test-memo-{token}:local"
    cleanup.append(ref)
    engine = BuildTimeEngine(get_engine("docker", client=docker_client), {ref: EPOCH})
    said: list[str] = []

    def build():
        said.clear()
        (out,) = build_all([BuildJob(image_id="memo", context=ctx, ref=ref)], engine=engine,
                           log_dir=tmp_path / "logs", progress=said.append)
        assert out.ok, out.error
        return out.result.image_id

    first = build()
    assert any("normalised to" in s for s in said), said
    memo = rp.NormalizeMemo(ref).read()
    assert memo["image"] == first and memo["built"] != first
    # the builder's image stays (its last step stays cached), untagged
    raw = docker_client.images.get(memo["built"])
    assert raw.tags == []

    second = build()                     # the builder's cache serves it whole: tagged, not normalised
    assert second == first == docker_client.images.get(ref).id
    assert any("normalised before" in s for s in said) and not any("normalised to" in s for s in said), said

    # the normalised image gone (a prune): normalised again, to the same ID, from the same files
    docker_client.images.remove(ref, force=True)
    third = build()
    assert third == first and any("normalised to" in s for s in said), said
    # a changed recipe: a new builder's image, normalised; the old builder's image is removed
    (ctx / "Dockerfile").write_text((ctx / "Dockerfile").read_text().replace(f"echo {token}", "echo changed"))
    fourth = build()
    assert fourth != first and rp.NormalizeMemo(ref).read()["built"] != memo["built"]
    assert memo["built"] not in {im.id for im in docker_client.images.list(all=True)}
    out = docker_client.containers.run(fourth, ["cat", "/opt/token"], remove=True).decode()
    assert out == "changed\n"
