"""Index credentials never leave through output, files or argv.

A unique token is planted in the index URL (`--index-url`, or pip's PIP_INDEX_URL) of the commands
that read a package index. The index is a real HTTP server on loopback that records the
Authorization header it receives (the credentials must still reach it); `uv` is a real wrapper
script first on PATH that logs its argv and then runs the real uv. Afterwards the token must be in
no stdout, no stderr, no file under the working folders and no argv; the display form
`user:***@` must be where the URL was shown."""

from __future__ import annotations

import base64
import http.server
import os
import shutil
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from imagebuild import errors, redact
from imagebuild.render import wheellock

ROOT = Path(__file__).resolve().parents[2]
USER = "ci-index-user"
COMMS = "comms-cu129-nccl2.27.5-ubuntu24.04-runtime"   # a wheel set without host wheels


class _Index(http.server.BaseHTTPRequestHandler):
    """401 without credentials (so a client that does not send them is seen), 404 with them."""

    def _answer(self):
        self.server.seen.append((self.command, self.path, self.headers.get("Authorization")))
        if not self.headers.get("Authorization"):
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="index"')
        else:
            self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_HEAD = _answer  # noqa: N815 - http.server API

    def log_message(self, *args):
        pass


@pytest.fixture
def index():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Index)
    httpd.seen = []
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def workdir(tmp_path):
    """A copy of the project (matrix, recipes, locks), a fake-uv folder and a private HOME/cache."""
    root = tmp_path / "project"
    root.mkdir()
    for name in ("matrix.yaml", "locks"):      # the templates come with the package
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, root / name)
    real_uv = wheellock.uv_binary()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    argv_log = tmp_path / "uv-argv.log"
    wrapper = bindir / "uv"
    wrapper.write_text(f"#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\" >> '{argv_log}'; done\n"
                       f"echo --- >> '{argv_log}'\nexec '{real_uv}' \"$@\"\n")
    wrapper.chmod(0o755)
    return tmp_path, root, bindir, argv_log


def _run(args, *, tmp_path, root, bindir, extra_env=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env.update(PATH=f"{bindir}:{env['PATH']}", PYTHONPATH=str(ROOT), HOME=str(tmp_path / "home"),
               UV_CACHE_DIR=str(tmp_path / "uv-cache"), UV_NO_PROGRESS="1")
    env.update(extra_env or {})
    env["IMAGEBUILD_MATRIX"] = str(root / "matrix.yaml")      # the project's copy
    return subprocess.run([sys.executable, "-m", "imagebuild", *args], capture_output=True, text=True,
                          timeout=300, cwd=root, env=env)


def _files_holding(folder: Path, token: str) -> list[str]:
    hits = []
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink() and token.encode() in path.read_bytes():
            hits.append(str(path))
    return hits


def _assert_no_leak(token: str, proc, tmp_path: Path, argv_log: Path | None = None):
    assert token not in proc.stdout and token not in proc.stderr, proc.stdout + proc.stderr
    assert _files_holding(tmp_path, token) == []
    if argv_log is not None:
        assert argv_log.is_file(), "the uv wrapper was not run"
        assert token not in argv_log.read_text()


@pytest.mark.parametrize("how", ["--index-url", "PIP_INDEX_URL"])
def test_wheels_lock_passes_index_credentials_by_environment_only(how, index, workdir):
    tmp_path, root, bindir, argv_log = workdir
    token = "tok-" + uuid.uuid4().hex
    url = f"http://{USER}:{token}@127.0.0.1:{index.server_address[1]}/simple/"
    args, env = ["wheels", "lock", COMMS, "--refresh"], {}
    if how == "--index-url":
        args += ["--index-url", url]
    else:
        env["PIP_INDEX_URL"] = url
    proc = _run(args, tmp_path=tmp_path, root=root, bindir=bindir, extra_env=env)
    # the index holds nothing: the lock cannot be written, one line says so, the old lock stays
    assert proc.returncode == 2, proc.stderr
    assert "could not be locked" in proc.stderr and "Traceback" not in proc.stderr
    _assert_no_leak(token, proc, tmp_path, argv_log)
    argv = argv_log.read_text().splitlines()
    assert "compile" in argv and not [a for a in argv if "://" in a]
    # ... and yet the credentials reached the index: uv had them from its environment
    sent = {auth for _m, _p, auth in index.seen if auth}
    assert sent == {"Basic " + base64.b64encode(f"{USER}:{token}".encode()).decode()}, index.seen


def test_sync_shows_the_index_without_its_credentials(index, workdir):
    tmp_path, root, bindir, _log = workdir
    token = "tok-" + uuid.uuid4().hex
    port = index.server_address[1]
    url = f"http://{USER}:{token}@127.0.0.1:{port}/simple/"
    proc = _run(["knowledge", "sync", "pytorch", "--versions", "2.9.1", "--index-url", url],
                tmp_path=tmp_path, root=root, bindir=bindir)
    assert proc.returncode == 2, proc.stderr
    _assert_no_leak(token, proc, tmp_path)
    # shown, hidden: the progress line and the error name the index as user:***@
    assert f"http://{USER}:***@127.0.0.1:{port}/simple/" in proc.stderr
    assert len([ln for ln in proc.stderr.splitlines() if ln.startswith("imagebuild")]) == 1
    assert any(auth for _m, _p, auth in index.seen)      # requests sent them, from the URL


def test_a_malformed_index_url_is_refused_without_echoing_its_token(workdir):
    tmp_path, root, bindir, _log = workdir
    token = "tok-" + uuid.uuid4().hex
    proc = _run(["knowledge", "sync", "pytorch", "--index-url", f"https://{USER}:{token}@bad host/"],
                tmp_path=tmp_path, root=root, bindir=bindir)
    assert proc.returncode == 2 and "--index-url" in proc.stderr, proc.stderr
    _assert_no_leak(token, proc, tmp_path)


def test_redact_hides_every_url_password():
    r = redact.redact
    assert r("https://u:p4ss@h.example/simple/") == "https://u:***@h.example/simple/"
    assert r("pip: https://tok3n@h.example/x and http://a:b@c:1/") == \
        "pip: https://***@h.example/x and http://a:***@c:1/"
    assert r("https://u:p@ss:w@rd@h.example/") == "https://u:***@h.example/"   # '@' in the password
    assert r("https://h.example/a@b") == "https://h.example/a@b"   # '@' in a path is no userinfo
    assert r("git@example.org:x/y.git") == "git@example.org:x/y.git"
    # every error message goes through it, whatever raised it
    assert str(errors.ImagebuildError("cannot reach https://u:s3cret@h.example/", argument="--x")) \
        == "argument --x: cannot reach https://u:***@h.example/"


def test_no_index_credentials_reach_an_image(tmp_path):
    """An image build receives no index at all from the user: no build argument (which would be
    kept in the image's history), no ARG in any generated recipe; the only index a recipe names is
    the matrix's PyTorch index, and a matrix URL with userinfo is refused by its grammar."""
    from imagebuild.cli.commands.build import jobs_for
    from imagebuild.knowledge.grammar import check
    assert check("url", "https://download.example/whl/{tag}", ("tag",)) is None
    assert check("url", "https://user:tok@download.example/whl/{tag}", ("tag",)) is not None
    from imagebuild.knowledge import load
    jobs = jobs_for(["smoke-cpu"], load(ROOT / "matrix.yaml"), tmp_path)
    assert jobs and all(dict(j.buildargs) == {} for j in jobs)
    generated = [*(ROOT / "Dockerfiles").rglob("Dockerfile"), *(tmp_path.rglob("Dockerfile"))]
    assert generated
    assert not [str(p) for p in generated
                if any(line.lstrip().upper().startswith("ARG ") for line in p.read_text().splitlines())]


def test_sources_mirror_credentials_are_hidden(index, workdir):
    tmp_path, root, bindir, _log = workdir
    token = "tok-" + uuid.uuid4().hex
    port = index.server_address[1]
    proc = _run(["sources", "fetch", COMMS, "--from", f"http://{USER}:{token}@127.0.0.1:{port}/mirror/",
                 "--cache", str(tmp_path / "cache")], tmp_path=tmp_path, root=root, bindir=bindir)
    assert proc.returncode == 2, proc.stderr           # the mirror holds nothing
    _assert_no_leak(token, proc, tmp_path)
    assert f"from http://{USER}:***@127.0.0.1:{port}/mirror/" in proc.stderr
    assert any(auth for _m, _p, auth in index.seen)


def test_an_unreachable_index_is_exit_3_and_its_token_stays_hidden(workdir):
    import socket
    tmp_path, root, bindir, argv_log = workdir
    with socket.socket() as s:          # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = "tok-" + uuid.uuid4().hex
    proc = _run(["wheels", "lock", COMMS, "--refresh", "--index-url",
                 f"http://{USER}:{token}@127.0.0.1:{port}/simple/"],
                tmp_path=tmp_path, root=root, bindir=bindir)
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    _assert_no_leak(token, proc, tmp_path, argv_log)
