"""The source cache: which tarballs an image compiles, and filling the cache from a mirror folder or
URL with every file checked against matrix.yaml's sha256, atomically."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import os
import shutil
import subprocess
import threading
import time

import pytest

from imagebuild import cli
from imagebuild.render import sources as S

from conftest import ROOT, need

MATRIX = ROOT / "matrix.yaml"
COMMS = "comms-cu130-nccl2.30.7-ubuntu24.04-runtime"


def test_a_cuda_image_compiles_four_tarballs_each_with_its_checksum(k, specs_by_id):
    tbs = S.for_image(k, specs_by_id[COMMS])
    assert [t.name for t in tbs] == ["gdrcopy", "nccl-tests", "ucx", "openmpi"]
    assert all(len(t.sha256) == 64 and t.url.startswith("https://") for t in tbs)
    assert {t.file for t in tbs} == {"gdrcopy-2.5.1.tar.gz", "nccl-tests-2.17.6.tar.gz",
                                     "ucx-1.22.0.tar.gz", "openmpi-5.0.10.tar.bz2"}


def test_the_git_form_takes_the_tag_archives_the_matrix_records(k, specs_by_id):
    tbs = {t.name: t for t in S.for_image(k, specs_by_id[COMMS], "git")}
    assert tbs["ucx"].file == "ucx-1.22.0-git.tar.gz" and tbs["ucx"].url is None
    assert tbs["openmpi"].sha256.startswith("e0e4679b") and tbs["openmpi"].source == "OMPIGIT"
    # gdrcopy's release URL already is a tag archive: one form
    assert tbs["gdrcopy"].form == "release"


def test_an_image_with_the_os_mpi_compiles_nothing(k, specs_by_id):
    assert S.for_image(k, specs_by_id["smoke-cpu"]) == []


def _fake(tmp_path, content=b"payload"):
    """A one-tarball catalog with a known checksum, and a mirror folder holding it."""
    tb = S.Tarball("gdrcopy", "2.5.1", "release", "gdrcopy-2.5.1.tar.gz",
                   hashlib.sha256(content).hexdigest(), "https://example.invalid/x", "SPACK")
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / tb.file).write_bytes(content)
    return tb, mirror


def test_fetch_from_a_mirror_folder_then_from_the_cache(tmp_path):
    tb, mirror = _fake(tmp_path)
    cache = tmp_path / "cache"
    first = S.fetch([tb], cache, str(mirror))
    assert [f.how for f in first] == ["copied"]
    assert (cache / tb.file).read_bytes() == b"payload"
    assert [f.how for f in S.fetch([tb], cache, str(mirror))] == ["cached"]


def test_a_tampered_file_is_refused_and_nothing_is_left(tmp_path):
    tb, mirror = _fake(tmp_path)
    (mirror / tb.file).write_bytes(b"tampered")
    cache = tmp_path / "cache"
    with pytest.raises(S.SourceError, match="is not the .* matrix.yaml records"):
        S.fetch([tb], cache, str(mirror))
    assert list(cache.iterdir()) == []      # no file under its name, no .part left behind


def test_a_bad_cached_file_is_replaced_by_a_checked_one(tmp_path):
    tb, mirror = _fake(tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / tb.file).write_bytes(b"stale")
    assert [f.how for f in S.fetch([tb], cache, str(mirror))] == ["copied"]
    assert (cache / tb.file).read_bytes() == b"payload"


@contextlib.contextmanager
def _http_mirror(mirror):
    """An http server on the loopback address serving the folder ``mirror``; yields its base URL."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(mirror))
    handler.log_message = lambda *a, **kw: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def test_fetch_from_a_mirror_url(tmp_path):
    tb, mirror = _fake(tmp_path)
    with _http_mirror(mirror) as url:
        got = S.fetch([tb], tmp_path / "cache", url)
        assert [f.how for f in got] == ["downloaded"] and got[0].origin == url + tb.file
        missing = S.Tarball("ucx", "1.22.0", "git", "ucx-1.22.0-git.tar.gz", "0" * 64, None, "UCXGIT")
        with pytest.raises(S.SourceError, match="HTTP 404"):
            S.fetch([missing], tmp_path / "cache", url)

def test_a_git_archive_never_comes_from_upstream(tmp_path):
    tb = S.Tarball("ucx", "1.22.0", "git", "ucx-1.22.0-git.tar.gz", "0" * 64, None, "UCXGIT")
    with pytest.raises(S.SourceError, match="no upstream twin"):
        S.fetch([tb], tmp_path / "cache")


def test_cli_bad_input_is_one_line(capsys, tmp_path):
    assert cli.main(["sources", "--matrix", str(MATRIX), "fetch", COMMS, "--from",
                     str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--from" in err[0] and "no folder" in err[0]


def _site_mirror(tmp_path, k, spec, form: str):
    """A site's mirror folder of tarballs the test makes itself (no upstream code: a small tar.gz
    per tarball the image compiles, under the file name the matrix gives it), and a copy of
    matrix.yaml whose entries record those files' sha256 and size in place of upstream's."""
    import io
    import re
    import tarfile
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    text = MATRIX.read_text()
    for tb in S.for_image(k, spec, form):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            data = f"{tb.name} {tb.version}: made by tests/render/test_sources.py\n".encode()
            info = tarfile.TarInfo(f"{tb.name}-{tb.version}/README")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        (mirror / tb.file).write_bytes(buf.getvalue())
        digest = hashlib.sha256(buf.getvalue()).hexdigest()
        # the size where the entry records one (written in the flow style), else the sha256 alone
        text, n = re.subn(rf'sha256: "{tb.sha256}", size: \d+',
                          f'sha256: "{digest}", size: {len(buf.getvalue())}', text)
        if not n:
            text, n = re.subn(rf'sha256: "{tb.sha256}"', f'sha256: "{digest}"', text)
        assert n == 1, tb.file
    copy = tmp_path / "site" / "matrix.yaml"
    copy.parent.mkdir()
    copy.write_text(text)
    (copy.parent / "locks").symlink_to(ROOT / "locks")
    return mirror, copy


@pytest.mark.parametrize("form", ["release", "git"])
def test_fill_the_cache_from_a_site_mirror(tmp_path, capsys, k, specs_by_id, form):
    """`sources fetch IMAGE --from MIRROR` as a site runs it: every tarball the image compiles,
    in either form, copied into the cache and checked against what its matrix records."""
    mirror, matrix = _site_mirror(tmp_path, k, specs_by_id[COMMS], form)
    cache = tmp_path / "cache"
    assert cli.main(["sources", "--matrix", str(matrix), "fetch", COMMS, "--form", form,
                     "--from", str(mirror), "--cache", str(cache)]) == 0
    out = capsys.readouterr().out
    assert "4 tarballs in" in out and out.count("sha256 ok") == 4
    want = {"release": ["gdrcopy-2.5.1.tar.gz", "nccl-tests-2.17.6.tar.gz", "openmpi-5.0.10.tar.bz2",
                        "ucx-1.22.0.tar.gz"],
            "git": ["gdrcopy-2.5.1.tar.gz", "nccl-tests-2.17.6.tar.gz", "openmpi-5.0.10-git.tar.gz",
                    "ucx-1.22.0-git.tar.gz"]}[form]
    assert sorted(p.name for p in cache.iterdir()) == want
    for name in want:
        assert (cache / name).read_bytes() == (mirror / name).read_bytes()
    # the same mirror against the real matrix: the first file is refused, nothing is cached
    capsys.readouterr()
    assert cli.main(["sources", "--matrix", str(MATRIX), "fetch", COMMS, "--form", form,
                     "--from", str(mirror), "--cache", str(tmp_path / "cache2")]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("imagebuild sources:")]
    assert len(err) == 1 and "matrix.yaml records" in err[0], err
    assert not [p for p in (tmp_path / "cache2").iterdir() if not p.name.startswith(".")]


def test_an_unreachable_mirror_is_an_outage_exit_3(capsys, tmp_path):
    import socket
    with socket.socket() as s:          # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert cli.main(["sources", "--matrix", str(MATRIX), "fetch", COMMS, "--from",
                     f"http://127.0.0.1:{port}/mirror/", "--cache", str(tmp_path / "cache")]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("imagebuild sources:")]   # beside progress
    assert len(errors) == 1 and "cannot download" in errors[0] and "ConnectionError" in errors[0], err


# -- a hostile or broken mirror (issue 23, item 7) ------------------------------------------------

@pytest.mark.parametrize("kind", ["zero", "fifo"])
def test_a_mirror_file_that_is_a_device_or_fifo_is_refused_at_once(tmp_path, kind):
    """A link to /dev/zero was read until the disk was full; a FIFO hung the fetch."""
    tb, mirror = _fake(tmp_path)
    (mirror / tb.file).unlink()
    if kind == "zero":
        os.symlink("/dev/zero", mirror / tb.file)
    else:
        os.mkfifo(mirror / tb.file)
    cache = tmp_path / "cache"
    with pytest.raises(S.SourceError, match="not a regular file"):
        S.fetch([tb], cache, str(mirror))
    assert list(cache.iterdir()) == []


def test_an_http_mirror_declaring_too_much_is_refused_before_reading(tmp_path, monkeypatch):
    tb, mirror = _fake(tmp_path)
    monkeypatch.setattr(S, "MAX_TARBALL_BYTES", 4)          # "payload" is 7 bytes
    with _http_mirror(mirror) as url, pytest.raises(S.SourceError, match="declares 7 bytes, more than the 4"):
        S.fetch([tb], tmp_path / "cache", url)
    assert list((tmp_path / "cache").iterdir()) == []

def _sized(tmp_path, size: int):
    tb, mirror = _fake(tmp_path)
    return S.Tarball(tb.name, tb.version, tb.form, tb.file, tb.sha256, tb.url, tb.source, size), mirror


def test_a_mirror_file_longer_than_its_recorded_size_is_refused_unread(tmp_path):
    tb, mirror = _sized(tmp_path, 5)        # "payload" is 7 bytes
    with pytest.raises(S.SourceError, match="more than the 5 bytes matrix.yaml records; refused"):
        S.fetch([tb], tmp_path / "cache", str(mirror))
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_mirror_file_shorter_than_its_recorded_size_is_named_so(tmp_path):
    tb, mirror = _sized(tmp_path, 9)
    with pytest.raises(S.SourceError, match=r"sent 7 bytes, not the 9 matrix.yaml records \[SPACK\]; refused"):
        S.fetch([tb], tmp_path / "cache", str(mirror))
    assert list((tmp_path / "cache").iterdir()) == []


def test_an_http_mirror_declaring_another_length_is_refused_before_reading(tmp_path):
    tb, mirror = _sized(tmp_path, 6)
    with _http_mirror(mirror) as url:
        with pytest.raises(S.SourceError, match="declares 7 bytes, not the 6 bytes matrix.yaml records; refused"):
            S.fetch([tb], tmp_path / "cache", url)
        assert not (tmp_path / "cache" / tb.file).exists()
        right = S.Tarball(tb.name, tb.version, tb.form, tb.file, tb.sha256, tb.url, tb.source, 7)
        got = S.fetch([right], tmp_path / "cache", url)
        assert [(f.how, f.size) for f in got] == [("downloaded", 7)]

def test_a_part_file_left_by_a_killed_fetch_is_removed_by_the_next(tmp_path):
    tb, mirror = _fake(tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir()
    stale, live = cache / f".{tb.file}.deadbeef.part", cache / f".{tb.file}.cafef00d.part"
    stale.write_bytes(b"half")
    live.write_bytes(b"being written")
    old = time.time() - S.STALE_PART_SECONDS - 60
    os.utime(stale, (old, old))
    S.fetch([tb], cache, str(mirror))
    assert not stale.exists() and live.exists()          # a recent one may have a writer


def test_a_full_disk_is_one_line_and_leaves_nothing(tmp_path):
    """ENOSPC was a traceback. A real full file system: a 1 MiB tmpfs."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        need("root and mount", "mounting a small tmpfs needs them")
    tb, mirror = _fake(tmp_path, content=b"x" * (2 << 20))
    cache = tmp_path / "small"
    cache.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(cache)]).returncode != 0:
        need("a small tmpfs", "mount -t tmpfs failed")
    try:
        with pytest.raises(S.SourceError, match="the disk under the source cache is full"):
            S.fetch([tb], cache, str(mirror))
        assert list(cache.iterdir()) == []
    finally:
        subprocess.run(["umount", str(cache)])
