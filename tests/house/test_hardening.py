"""docs/hardening.md's classes, planted on every surface its table lists (issue 44).

The table is read here: a command missing from it, or an option that writes a file that is not
listed, fails; every row gets the attacks of its class. So a new command gets the same probes by
being listed. The attacks are real: a FIFO, /dev/null, links, a password in Docker's spelling,
terminal escapes, JSON with a key twice or a 5,000-digit number, local servers that flood, drip
or lie."""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import ROOT
from imagebuild import cli

DOC = ROOT / "docs" / "hardening.md"
SECRET = "hunter2-5e3a9c"
EVIL = "\x1b]0;pwned\x07\x1b[2Jx\u202e"


def _rows() -> list[tuple[str, str, str]]:
    rows = []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        m = re.fullmatch(r"\| ([a-z-]+) \| ([a-z]+) \| `([^`]+)` \|", line.strip())
        if m:
            rows.append((m.group(1), m.group(2), m.group(3)))
    return rows


ROWS = _rows()


def _of(kind: str) -> list[str]:
    return [argv for _, k, argv in ROWS if k == kind]


def _run(capsys, argv: list[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(err: str) -> None:
    """No traceback, and exactly one error line (progress and warning lines aside)."""
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("imagebuild ") and ": warning: " not in ln]
    assert len(lines) == 1, err


# ------------------------------------------------------------------------------ the list itself

def test_the_table_names_every_command_and_each_class_has_surfaces():
    listed = {c for c, _, _ in ROWS}
    assert set(cli.COMMANDS) <= listed, sorted(set(cli.COMMANDS) - listed)
    for kind in ("output", "secrets", "json", "unbounded"):
        assert _of(kind), kind


def _writing_options() -> set[str]:
    """`COMMAND --option` for every option of every command whose destination cli.OUTPUT_ARGS
    checks (sub-actions included)."""
    import argparse
    import importlib
    found = set()
    for name, (modname, _help) in cli.COMMANDS.items():
        parser = argparse.ArgumentParser(prog=name)
        importlib.import_module(f"imagebuild.cli.commands.{modname}").configure(parser)
        stack = [(parser, name)]
        while stack:
            p, prefix = stack.pop()
            for action in p._actions:
                if isinstance(action, argparse._SubParsersAction):
                    stack += [(sub, f"{prefix} {word}") for word, sub in action.choices.items()]
                elif action.dest in cli.OUTPUT_ARGS:
                    found.add(f"{prefix} {action.option_strings[0] if action.option_strings else '{out}'}")
    return found


def test_every_option_that_writes_is_listed_under_output():
    rows = _of("output")
    for option in sorted(_writing_options()):
        words = option.split()
        if words[-1] == "{out}":
            ok = any(r.startswith(" ".join(words[:-1])) and "{out}" in r for r in rows)
        else:
            ok = any(r.split()[0] == words[0] and f"{words[-1]} {{out}}" in r for r in rows)
        assert ok, f"{option} writes a file but docs/hardening.md does not list it under output"


# ------------------------------------------------------------------------------ data destroyed

def _plant(kind: str, tmp: Path) -> tuple[str, callable]:
    """(the path to give, a check that it is as it was)."""
    if kind == "devnull":
        return "/dev/null", lambda: stat.S_ISCHR(os.lstat("/dev/null").st_mode)
    if kind == "fifo":
        path = tmp / "fifo"
        os.mkfifo(path)
        return str(path), lambda: stat.S_ISFIFO(os.lstat(path).st_mode)
    if kind == "link-devnull":
        path = tmp / "null-link"
        path.symlink_to("/dev/null")
        return str(path), lambda: path.is_symlink() and os.readlink(path) == "/dev/null" \
            and stat.S_ISCHR(os.lstat("/dev/null").st_mode)
    path, target = tmp / "dangling", tmp / "not-there"
    path.symlink_to(target)
    return str(path), lambda: path.is_symlink() and not target.exists()


@pytest.mark.parametrize("kind", ["fifo", "devnull", "link-devnull", "dangling"])
@pytest.mark.parametrize("template", [r for r in _of("output") if "{out}" in r])
def test_an_output_never_replaces_what_the_command_did_not_make(template, kind, tmp_path, capsys):
    path, unchanged = _plant(kind, tmp_path)
    argv = template.replace("{out}", path).replace("{tmp}", str(tmp_path)).split()
    code, _, err = _run(capsys, argv)
    assert code == 2, err
    _one_line(err)
    assert unchanged(), f"{template}: {kind} was replaced"
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(("fifo", "null-link", "dangling"))) == []


def test_context_keeps_an_existing_runtime_folder(tmp_path, capsys):
    """A devel image's context run writes its runtime's folder too: one already there (the
    user's) is refused before anything is written, and is left whole."""
    from imagebuild.render.run import load_images
    specs = load_images(ROOT / "matrix.yaml")
    devel = next(s for s in specs.values() if s.depends_on)
    mine = tmp_path / devel.depends_on[0]
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    code, _, err = _run(capsys, ["context", devel.id, "--output", str(tmp_path)])
    assert code == 2 and devel.depends_on[0] in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == [devel.depends_on[0]]
    assert (mine / "notes.txt").read_text() == "mine"


def test_knowledge_copy_keeps_an_edited_wheel_lock(tmp_path, capsys):
    locks = tmp_path / "locks" / "wheels"
    locks.mkdir(parents=True)
    packaged = sorted((ROOT / "locks" / "wheels").glob("*.txt"))[0]
    (locks / packaged.name).write_text("# edited by the user\n")
    code, _, err = _run(capsys, ["knowledge", "copy", str(tmp_path)])
    assert code == 2 and packaged.name in err, err
    assert (locks / packaged.name).read_text() == "# edited by the user\n"
    assert not (tmp_path / "matrix.yaml").exists()
    code, _, err = _run(capsys, ["knowledge", "copy", str(tmp_path / "fresh")])
    assert code == 0, err
    assert (tmp_path / "fresh" / "locks" / "wheels" / packaged.name).read_bytes() == packaged.read_bytes()


def test_a_link_to_a_regular_file_is_written_through(tmp_path, capsys):
    real = tmp_path / "schema.json"
    real.write_text("old")
    (tmp_path / "link.json").symlink_to(real)
    code, _, err = _run(capsys, ["knowledge", "schema", "--output", str(tmp_path / "link.json")])
    assert code == 0, err
    assert (tmp_path / "link.json").is_symlink() and json.loads(real.read_text())["$schema"]


# ------------------------------------------------------------------------------ secrets printed

def _cred(template: str) -> str:
    before = template.split("{cred}")[0].split()
    url_form = before and before[-1] in ("--index-url", "--from")
    return (f"https://user:{SECRET}@127.0.0.1:9/simple/" if url_form
            else f"user:{SECRET}@127.0.0.1:9/ns" + ("/x:1" if before and before[-1] == "verify" else ""))


@pytest.mark.parametrize("json_mode", [False, True])
@pytest.mark.parametrize("template", _of("secrets"))
def test_no_password_in_any_output(template, json_mode, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("IMAGEBUILD_HTTP_DEADLINE", "5")
    (tmp_path / "key.pub").write_text("not a key\n")
    argv = template.replace("{cred}", _cred(template)).replace("{tmp}", str(tmp_path)).split()
    code, out, err = _run(capsys, argv + (["--json"] if json_mode else []))
    if json_mode and code == 2 and "unrecognized arguments: --json" in err:
        pytest.skip(f"{argv[0]} has no --json")
    assert SECRET not in out and SECRET not in err, (out + err)[-2000:]
    assert "Traceback" not in err


@pytest.mark.parametrize("text", [f"user:{SECRET}@registry.example:5000/cache", f"x:{SECRET}@h",
                                  f"https://u:{SECRET}@h/x", f"Authorization: Basic {SECRET}AAAA",
                                  f"--cache-to=user:{SECRET}@10.0.0.1/c"])
def test_one_redaction_knows_every_spelling(text):
    from imagebuild.redact import redact, shown
    assert SECRET not in redact(text) and SECRET not in shown(text)


def test_references_and_digests_are_not_taken_for_credentials():
    from imagebuild.redact import redact
    for text in ("registry:5000/ns/img:2.1@sha256:" + "a" * 64, "img:tag@sha256:" + "1" * 64,
                 "docker pull 127.0.0.1:5000/hpc/smoke-cpu:2026", "user@host#ns/img:tag"):
        assert redact(text) == text


def test_a_matrix_url_with_credentials_is_refused_at_load(tmp_path, capsys):
    text = (ROOT / "matrix.yaml").read_text(encoding="utf-8")
    url = re.search(r'url: "https://([^"/]+)/', text)
    bad = text[:url.start(1)] + f"user:{SECRET}@" + text[url.start(1):]
    (tmp_path / "matrix.yaml").write_text(bad, encoding="utf-8")
    for argv in (["knowledge", "show", "sources"], ["knowledge", "evidence"], ["images"]):
        code, out, err = _run(capsys, argv + ["--matrix", str(tmp_path / "matrix.yaml")])
        assert code == 2 and "credentials" in err and SECRET not in out + err, err
        _one_line(err)


# ------------------------------------------------------------------------------ control characters

@pytest.mark.parametrize("template", [r for r in _of("output") if "{evil}" in r])
def test_no_terminal_escape_reaches_the_terminal(template, capsys):
    argv = [a.replace("{evil}", EVIL) for a in template.split()]
    code, out, err = _run(capsys, argv)
    assert code != 0
    for raw in ("\x1b", "\x07", "\u202e"):
        assert raw not in out and raw not in err, repr(err)
    assert "\\x1b" in out + err


def test_a_gpu_name_with_escapes_is_escaped_by_doctor(tmp_path, capsys):
    tree = tmp_path / "node"
    shutil.copytree(ROOT / "tests" / "fixtures" / "doctor" / "dgx-h100-ib", tree, symlinks=True)
    smi = tree / "nvidia-smi.csv"
    smi.write_text(smi.read_text().replace("NVIDIA", "\x1b]0;pwned\x07NVIDIA", 1))
    code, out, err = _run(capsys, ["doctor", "--root", str(tree)])
    assert "\x1b" not in out + err and "\\x1b]0;pwned\\x07NVIDIA" in out


def test_doctor_says_when_the_driver_file_is_a_link_to_a_device(tmp_path, capsys):
    tree = tmp_path / "node"
    shutil.copytree(ROOT / "tests" / "fixtures" / "doctor" / "dgx-h100-ib", tree, symlinks=True)
    version = tree / "proc" / "driver" / "nvidia" / "version"
    version.unlink()
    version.symlink_to("/dev/zero")
    code, out, _ = _run(capsys, ["doctor", "--root", str(tree)])
    assert code == 0 and "/proc/driver/nvidia/version is present but is not a readable" in out


def test_images_json_carries_every_warning(tmp_path, capsys):
    shutil.copy(ROOT / "matrix.yaml", tmp_path / "matrix.yaml")      # no locks/ beside it
    code, out, err = _run(capsys, ["images", "--matrix", str(tmp_path / "matrix.yaml"), "--json"])
    doc = json.loads(out)
    assert code == 0 and doc["result"]["images"] == []
    said = " ".join(w["message"] for w in doc["warnings"])
    assert "locks/" in said and "declares no image" in said


# ------------------------------------------------------------------------------ typed reading

HOSTILE_JSON = {
    "key twice": '{"images": {}, "images": {}, "version": 1}',
    "5000 digits": '{"images": {}, "version": ' + "9" * 5000 + "}",
    "wrong types": '{"images": "all of them", "version": [1], "host": 3, "files": 7}',
    "not an object": "[[[[[]]]]]",
}


@pytest.mark.parametrize("what", sorted(HOSTILE_JSON))
@pytest.mark.parametrize("template", _of("json"))
def test_hostile_json_is_one_line(template, what, tmp_path, capsys):
    path = tmp_path / "hostile.json"
    if "--context" in template:                    # a context folder holding the JSON
        path = tmp_path / "ctx"
        path.mkdir()
        (path / "imagebuild-context.json").write_text(HOSTILE_JSON[what])
        (path / "Dockerfile").write_text("FROM scratch\n")
    else:
        path.write_text(HOSTILE_JSON[what])
    code, out, err = _run(capsys, template.replace("{json}", str(path)).split())
    assert code == 2, err
    _one_line(err)


def test_a_context_folder_that_is_a_link_is_refused(tmp_path, capsys):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    code, _, err = _run(capsys, ["normalize", "x:1", "--context", str(tmp_path / "link")])
    assert code == 2 and "symbolic link" in err, err


def test_a_context_that_sets_provenance_labels_is_refused(tmp_path, capsys):
    (tmp_path / "Dockerfile").write_text("FROM imagebuild/base:debian-bookworm\n")
    (tmp_path / "imagebuild-context.json").write_text(json.dumps(
        {"source_date_epoch": 1, "labels": {"org.opencontainers.image.base.digest": "sha256:" + "0" * 64}}))
    code, _, err = _run(capsys, ["normalize", "x:1", "--context", str(tmp_path)])
    assert code == 2 and "org.opencontainers.image.base.digest" in err, err


# ------------------------------------------------------------------------------ shard locks

def _entry(**over) -> dict:
    entry = {"base_image": "sha256:" + "1" * 64, "dockerfile_sha256": "2" * 64,
             "image_id": "sha256:" + "3" * 64, "smoke": None, "stack": {"os": "debian12"}}
    return {**entry, **over}


SHARDS = {
    "one image twice": '{"images": {"smoke-cpu": %s, "smoke-cpu": %s}, "version": 1}' % (
        json.dumps(_entry()), json.dumps(_entry(image_id="sha256:" + "4" * 64))),
    "image id not a digest": json.dumps({"images": {"smoke-cpu": _entry(image_id="latest")}, "version": 1}),
    "stack with a newline": json.dumps({"images": {"smoke-cpu": _entry(stack={"os": "debian12\nFROM x"})},
                                        "version": 1}),
    "undeclared image": json.dumps({"images": {"not-in-the-matrix": _entry()}, "version": 1}),
}


@pytest.mark.parametrize("what", sorted(SHARDS))
def test_a_bad_shard_lock_is_refused_and_the_lock_kept(what, tmp_path, capsys):
    target = tmp_path / "images.lock"
    target.write_text('{"images": {}, "version": 1}\n')
    before = target.read_bytes()
    (tmp_path / "shard.lock").write_text(SHARDS[what])
    code, _, err = _run(capsys, ["lock", "--matrix", str(ROOT / "matrix.yaml"), "--merge",
                                 str(tmp_path / "shard.lock"), "--lock", str(target)])
    assert code == 2 and "shard.lock" in err, err
    _one_line(err)
    assert target.read_bytes() == before


def test_the_matrix_refuses_numbers_of_thousands_of_digits(tmp_path, capsys):
    text = (ROOT / "matrix.yaml").read_text(encoding="utf-8")
    size = re.search(r"size: (\d+)", text)
    for number in ("9" * 5000, "0x" + "f" * 4000):
        (tmp_path / "matrix.yaml").write_text(text[:size.start(1)] + number + text[size.end(1):])
        code, _, err = _run(capsys, ["knowledge", "validate", "--matrix", str(tmp_path / "matrix.yaml")])
        line = text[:size.start(1)].count("\n") + 1
        assert code == 2 and f"matrix.yaml:{line}:" in err and "characters" in err, err


# ------------------------------------------------------------------------------ provenance

def test_a_wheel_record_citing_a_third_party_source_is_not_first_party(tmp_path, capsys):
    text = (ROOT / "matrix.yaml").read_text(encoding="utf-8")
    third = re.search(r"\n  ([A-Z0-9]+): \{title: \"third-party", text).group(1)
    (tmp_path / "matrix.yaml").write_text(text.replace("source: PYPIWHEEL}", f"source: {third}}}"))
    code, out, _ = _run(capsys, ["knowledge", "evidence", "--matrix", str(tmp_path / "matrix.yaml"), "--json"])
    rows = [r for r in json.loads(out)["result"]["rows"] if r["kind"] == "wheel"]
    assert rows and not any(r["first_party"] for r in rows)


def test_gpu_proof_runs_nothing_without_the_packs_sha256(tmp_path):
    pack = tmp_path / ".gpu-proof"
    pack.mkdir()
    (pack / "pack.tar.xz").write_bytes(b"not what pack made")
    env = {**os.environ, "IMAGEBUILD_GPU_PROOF_DIR": str(pack)}
    env.pop("IMAGEBUILD_GPU_PROOF_SHA256", None)
    for extra in ([], ["--sha256", "0" * 64]):
        proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_proof.sh"), "run", *extra],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert "sha256" in proc.stderr and not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------ unbounded

class _Hostile(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 - http.server API
        try:
            getattr(self, "_" + self.server.mode.replace("-", "_"))()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _flood(self):          # 300 MB without a length, bounded in count
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chunk = b" " * (1 << 20)
        for _ in range(300):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        self.wfile.write(b"0\r\n\r\n")

    def _declares_huge(self):
        self.send_response(200)
        self.send_header("Content-Length", str(1 << 40))
        self.end_headers()

    def _bad_length(self):
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 12abc\r\n\r\n{}")

    def _drip(self):           # a byte every 0.3 s for at most 60 s
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
        self.send_header("Content-Length", "100000")
        self.end_headers()
        for _ in range(200):
            self.wfile.write(b" ")
            self.wfile.flush()
            time.sleep(0.3)

    def _malformed(self):
        body = b'{"files": {"url": 3}}'
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


_PEAK = r"""
import resource, sys
from imagebuild import cli
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
code = cli.main(sys.argv[1:])
print("GROWN", (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) // 1024, "CODE", code)
"""


@pytest.mark.parametrize("mode", ["flood", "declares-huge", "bad-length", "drip", "malformed"])
@pytest.mark.parametrize("template", _of("unbounded"))
def test_a_hostile_server_is_one_line_within_bounds(template, mode, tmp_path):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    httpd.daemon_threads, httpd.mode = True, mode
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    host = f"127.0.0.1:{httpd.server_address[1]}"
    argv = template.replace("{url}", f"http://{host}/simple/").replace("{host}", host).split()
    env = {**os.environ, "IMAGEBUILD_HTTP_DEADLINE": "3", "PYTHONPATH": str(ROOT)}
    try:
        proc = subprocess.run([sys.executable, "-c", _PEAK, *argv], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
    finally:
        httpd.shutdown()
        httpd.server_close()
    grown, code = (int(x) for x in re.search(r"GROWN (-?\d+) CODE (\d+)", proc.stdout).groups())
    assert code in (2, 3), proc.stderr
    _one_line(proc.stderr)
    assert grown <= 64, f"{mode}: peak memory grew by {grown} MiB"
    if mode == "drip":
        assert code == 3 and "deadline" in proc.stderr


class _Ranges(http.server.BaseHTTPRequestHandler):
    """A 206 for every range: honest, ten times longer than asked, or for other bytes."""
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 - http.server API
        start, end = (int(x) for x in self.headers["Range"][6:].split("-"))
        length = end - start + 1
        sent = {"honest": length, "oversend": length * 10, "elsewhere": length}[self.server.mode]
        first = start + (7 if self.server.mode == "elsewhere" else 0)
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {first}-{first + length - 1}/99999999")
        self.send_header("Content-Length", str(sent))
        self.end_headers()
        try:
            self.wfile.write(b"r" * sent)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("mode", ["honest", "oversend", "elsewhere"])
def test_a_byte_range_is_the_range_asked_and_no_more(mode):
    import requests
    from imagebuild.errors import ImagebuildError
    from imagebuild.knowledge.wheelindex import ranged_get
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ranges)
    httpd.daemon_threads, httpd.mode = True, mode
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/torch.whl"
    try:
        if mode == "honest":
            assert ranged_get(requests.Session(), url, 1000, 1 << 19, 10, time.monotonic() + 10) \
                == b"r" * (1 << 19)
        else:
            with pytest.raises(ImagebuildError, match="declares|Content-Range"):
                ranged_get(requests.Session(), url, 1000, 1 << 19, 10, time.monotonic() + 10)
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def two_lineages(docker_client):
    """C built FROM A; B beside A; all on the local Debian base (made when missing)."""
    import io
    base = "imagebuild/base:debian-bookworm"
    try:
        docker_client.images.get(base)
    except Exception:  # noqa: BLE001 - ImageNotFound
        if cli.main(["base", "debian-bookworm"]) != 0:
            pytest.fail("imagebuild base debian-bookworm failed")
    refs = {}
    for name, parent, step in (("a", base, "echo a > /a"), ("b", base, "echo b > /b"),
                               ("c", "imagebuild/hardening-a:test", "echo c > /c")):
        dockerfile = f"FROM {parent}\nRUN {step}\n".encode()
        docker_client.images.build(fileobj=io.BytesIO(dockerfile), tag=f"imagebuild/hardening-{name}:test",
                                   rm=True)
        refs[name] = f"imagebuild/hardening-{name}:test"
    yield refs
    for ref in reversed(list(refs.values())):
        try:
            docker_client.images.remove(ref, force=True)
        except Exception:  # noqa: BLE001 - already gone
            pass


def test_normalize_refuses_a_base_the_image_was_not_built_on(two_lineages, tmp_path, capsys):
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "imagebuild-context.json").write_text(json.dumps({"source_date_epoch": 1, "labels": {}}))
    (ctx / "Dockerfile").write_text(f"FROM {two_lineages['b']}\nRUN echo c > /c\n")   # the edited FROM
    code, _, err = _run(capsys, ["normalize", two_lineages["c"], "--context", str(ctx)])
    assert code == 2 and f"was not built on {two_lineages['b']}" in err, err
    (ctx / "Dockerfile").write_text(f"FROM {two_lineages['a']}\nRUN echo c > /c\n")   # the real one
    code, out, err = _run(capsys, ["normalize", two_lineages["c"], "--context", str(ctx)])
    assert code == 0, err


def _hostile_wheel(kind: str) -> bytes:
    """A torch wheel whose torch/version.py entry is flagged encrypted, compressed by an unknown
    method, or whose name is flagged UTF-8 without being so: patched in both headers."""
    import io
    import zipfile
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("torch/version.py", "cuda = '12.1'\ngit_version = '" + "a" * 40 + "'\n")
        zf.writestr("torch-2.4.1.dist-info/METADATA", "Name: torch\nVersion: 2.4.1\n")
    data = bytearray(buf.getvalue())
    for sig, flag_at, method_at, name_at in ((b"PK\x03\x04", 6, 8, 30), (b"PK\x01\x02", 8, 10, 46)):
        at = data.find(sig)
        if kind == "encrypted":
            data[at + flag_at] |= 0x01
        elif kind == "unknown-method":
            data[at + method_at:at + method_at + 2] = (99).to_bytes(2, "little")
        else:                                    # bit 11: the name is UTF-8; make it not so
            data[at + flag_at + 1] |= 0x08
            data[at + name_at] = 0xFF
    return bytes(data)


@pytest.mark.parametrize("kind", ["encrypted", "unknown-method", "name-not-utf8"])
def test_a_hostile_zip_from_the_index_is_one_line(kind, tmp_path):
    import hashlib
    from range_server import RangeServer
    from imagebuild.errors import ImagebuildError
    from imagebuild.knowledge.wheelindex import Index
    body = _hostile_wheel(kind)
    name = "torch-2.4.1-cp312-cp312-manylinux1_x86_64.whl"
    server = RangeServer({f"/files/{name}": body, "/simple/torch/": (
        f'<a href="../../files/{name}#sha256={hashlib.sha256(body).hexdigest()}">{name}</a>').encode()})
    try:
        with pytest.raises(ImagebuildError) as err:
            Index(server.url, settings={}).wheel_evidence("2.4.1", "x86_64")
    finally:
        server.close()
    assert "\n" not in str(err.value) and name in str(err.value), str(err.value)
