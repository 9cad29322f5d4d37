"""build_all and `imagebuild build` on tiny fixture contexts built FROM the local Debian base:
success and cache, a failing step, keep-going, parallel jobs in dependency order, no leftover
containers, and a CA bundle given as a BuildKit secret that never reaches a layer."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import ROOT, need
from imagebuild.builder.scheduler import (
    BUILT, FAILED, NOT_STARTED, SKIPPED, BuildJob, BuildOutcome, build_all, check_jobs, format_table,
)
from imagebuild.engines import BuildResult, get_engine
from imagebuild.errors import BuildError, UsageError

FIX = ROOT / "tests" / "fixtures" / "build"
BASE = "imagebuild/base:debian-bookworm"


# ------------------------------------------------------------------ pure logic

def _job(i, deps=()):
    return BuildJob(image_id=i, context=FIX / "ok", ref=f"imagebuild/{i}:local", depends_on=tuple(deps))


def test_dependency_cycles_and_duplicates_are_refused():
    with pytest.raises(UsageError, match=r"cycle between images: a -> b -> c -> a \(each depends on the next\)"):
        check_jobs([_job("a", ["b"]), _job("b", ["c"]), _job("c", ["a"])])
    # graphlib's CycleError names the cycle; it is said from the cycle's image listed first
    with pytest.raises(UsageError, match="cycle between images: c -> a -> b -> c "):
        check_jobs([_job("x"), _job("c", ["a"]), _job("a", ["b", "external"]), _job("b", ["c"])])
    with pytest.raises(UsageError, match="cycle between images: a -> a "):
        check_jobs([_job("a", ["a"])])
    with pytest.raises(UsageError, match="listed twice"):
        check_jobs([_job("a"), _job("a")])
    with pytest.raises(UsageError, match="invalid image id"):
        check_jobs([_job("a/../b")])
    assert set(check_jobs([_job("a", ["external"]), _job("b", ["a"])])) == {"a", "b"}


def test_table_lists_every_image_even_failed_ones(tmp_path):
    res = BuildResult("imagebuild/a:local", "sha256:" + "ab" * 32, 123_456_789, 12.34, 5, 3, tmp_path / "a.log")
    table = format_table([BuildOutcome("a", res.ref, BUILT, res, None, res.log_path),
                          BuildOutcome("b", "imagebuild/b:local", FAILED, None, "boom", tmp_path / "b.log")])
    header, a, b = table.splitlines()
    assert header.split() == ["IMAGE", "STATUS", "IMAGE", "ID", "SIZE", "TIME", "CACHED"]
    assert a.split() == ["a", "built", "abababababab", "123.5", "MB", "12.3", "s", "3/5"]
    assert b.split() == ["b", "failed", "-", "-", "-", "-"]


class _RecordingEngine:
    """Pure scheduling check: records calls, fails the images it is told to fail."""

    def __init__(self, fail=()):
        self.fail, self.calls = set(fail), []

    def build(self, context, ref, *, log, progress=None, **kw):
        self.calls.append(ref)
        if ref.split("/")[1].split(":")[0] in self.fail:
            raise BuildError(f"building {ref} failed at step 2/3 RUN false")
        return BuildResult(ref, "sha256:" + "0" * 64, 1, 0.0, 1, 0, log)


def test_scheduling_skips_dependents_and_stops_without_keep_going(tmp_path):
    jobs = [_job("a"), _job("b", ["a"]), _job("c"), _job("d", ["b"])]
    eng = _RecordingEngine(fail={"a"})
    out = build_all(jobs, engine=eng, keep_going=True, log_dir=tmp_path)
    assert [o.status for o in out] == [FAILED, SKIPPED, BUILT, SKIPPED]
    assert "because a failed" in out[1].error and "because b skipped" in out[3].error
    eng = _RecordingEngine(fail={"a"})
    out = build_all(jobs, engine=eng, keep_going=False, log_dir=tmp_path)
    assert [o.status for o in out] == [FAILED, SKIPPED, NOT_STARTED, SKIPPED]
    assert eng.calls == ["imagebuild/a:local"]


def test_ready_jobs_start_in_the_jobs_order_and_outside_dependencies_are_not_waited_for(tmp_path):
    # z, x and w are ready at once; y once x is built: it then comes before w, as listed
    jobs = [_job("z"), _job("y", ["x"]), _job("x", ["base-in-the-engine"]), _job("w")]
    eng = _RecordingEngine()
    out = build_all(jobs, engine=eng, log_dir=tmp_path)
    assert [o.image_id for o in out] == ["z", "y", "x", "w"] and all(o.ok for o in out)
    assert eng.calls == ["imagebuild/z:local", "imagebuild/x:local", "imagebuild/y:local", "imagebuild/w:local"]


def test_a_skip_names_the_first_dependency_not_built(tmp_path):
    jobs = [_job("a"), _job("ok"), _job("both", ["ok", "a"]), _job("next", ["both", "ok"])]
    lines: list[str] = []
    out = build_all(jobs, engine=_RecordingEngine(fail={"a"}), keep_going=True, log_dir=tmp_path,
                    progress=lines.append)
    assert [o.status for o in out] == [FAILED, BUILT, SKIPPED, SKIPPED]
    assert [o.error for o in out[2:]] == ["not built because a failed", "not built because both skipped"]
    assert "both: skipped (not built because a failed)" in lines
    assert out[3].log_path == tmp_path / "next.log" and out[3].result is None


class _GatedEngine:
    """Builds that wait for each other: `together` must run at the same time (a barrier), and
    each build records when it started and ended."""

    def __init__(self, together=(), block=()):
        import threading
        self.events: list[str] = []
        self.barrier = threading.Barrier(len(together), timeout=10) if together else None
        self.together, self.block = set(together), set(block)
        self.cancelled = threading.Event()
        self.lock = threading.Lock()

    def build(self, context, ref, *, log, progress=None, **kw):
        name = ref.split("/")[1].split(":")[0]
        with self.lock:
            self.events.append(f"start {name}")
        if name in self.together:
            self.barrier.wait()
        if name in self.block:
            if not self.cancelled.wait(10):
                raise AssertionError("never cancelled")
            raise BuildError(f"{ref}: cancelled")
        if name == "interrupted":
            raise KeyboardInterrupt
        with self.lock:
            self.events.append(f"end {name}")
        return BuildResult(ref, "sha256:" + "0" * 64, 1, 0.0, 1, 0, log)

    def cancel_builds(self):
        self.cancelled.set()


def test_parallel_jobs_run_together_and_after_their_dependencies(tmp_path):
    jobs = [_job("child", ["parent"]), _job("parent"), _job("other")]
    eng = _GatedEngine(together=("parent", "other"))   # one worker: the barrier would time out
    out = build_all(jobs, engine=eng, jobs_n=2, log_dir=tmp_path)
    assert [o.status for o in out] == [BUILT, BUILT, BUILT]
    assert eng.events.index("end parent") < eng.events.index("start child")


def test_an_interrupt_cancels_the_running_builds_and_starts_no_other(tmp_path):
    jobs = [_job("slow"), _job("interrupted"), _job("later"), _job("after", ["slow"])]
    eng = _GatedEngine(block=("slow",))
    with pytest.raises(KeyboardInterrupt):
        build_all(jobs, engine=eng, jobs_n=2, log_dir=tmp_path)
    assert eng.cancelled.is_set()
    assert sorted(eng.events) == ["start interrupted", "start slow"]


# ------------------------------------------------------------------ real builds

@pytest.fixture(scope="session")
def engine(docker_client):
    eng = get_engine("docker", client=docker_client)
    if not eng.exists(BASE):
        need(f"the base image {BASE}", "create it with `imagebuild base debian-bookworm`")
    return eng


@pytest.fixture(scope="session")
def token():
    return secrets.token_hex(6)


@pytest.fixture(scope="session")
def refs(engine, token):
    """Unique refs for this session, removed at its end."""
    made: list[str] = []

    def ref(name: str) -> str:
        r = f"imagebuild/test-{name}:{token}"
        made.append(r)
        return r

    yield ref
    for r in made:
        if engine.exists(r):
            engine.remove(r, force=True)


def test_build_then_rebuild_is_fully_cached(engine, refs, token, tmp_path):
    lines: list[str] = []
    ref = refs("ok")
    job = BuildJob("ok", FIX / "ok", ref, buildargs={"TOKEN": token},
                   labels={"io.imagebuild.image-id": "ok", "org.opencontainers.image.title": "fixture ok"})
    (first,) = build_all([job], engine=engine, log_dir=tmp_path / "logs", progress=lines.append)
    assert first.ok, first.error
    r1 = first.result
    assert r1.steps >= 4 and r1.cached_steps < r1.steps      # the TOKEN step cannot be cached
    assert r1.log_path == tmp_path / "logs" / "ok.log"
    assert "hello from a fixture build context" in r1.log_path.read_text()
    assert any(line.startswith("ok: Step ") for line in lines)
    info = engine.inspect(ref)
    assert info.id == r1.image_id and info.size == r1.size_bytes
    assert info.labels["io.imagebuild.image-id"] == "ok"
    assert info.env["FIXTURE_GREETING"] == "hello world"
    run = engine.run(ref, ["cat", "/token.txt", "/hello.txt"], timeout=60)
    assert run.output.splitlines() == [f"built for {token}", "hello from a fixture build context"]

    (second,) = build_all([job], engine=engine, log_dir=tmp_path / "logs")
    r2 = second.result
    assert r2.image_id == r1.image_id
    assert r2.cached_steps == r2.steps == r1.steps


def test_failing_step_is_named_keep_going_builds_the_rest(engine, refs, token, tmp_path, docker_client):
    bad = BuildJob("fails", FIX / "fails", refs("fails"), buildargs={"TOKEN": token})
    good = BuildJob("parent", FIX / "parent", refs("parent-kg"), buildargs={"TOKEN": token + "kg"})
    out = build_all([bad, good], engine=engine, keep_going=True, log_dir=tmp_path)
    assert [o.status for o in out] == [FAILED, BUILT]
    err = out[0].error
    assert "imagebuild/test-fails" in err and 'RUN echo "about-to-fail-$TOKEN" && false' in err
    assert "step 4/5 " in err and str(tmp_path / "fails.log") in err
    assert f"about-to-fail-{token}" in (tmp_path / "fails.log").read_text()
    assert not engine.exists(bad.ref)
    assert engine.run(good.ref, ["cat", "/parent.txt"], timeout=60).output.strip() == f"parent {token}kg"
    # the classic builder's container for the failed step is removed too
    left = [c for c in docker_client.containers.list(all=True)
            if "about-to-fail-" in json.dumps(c.attrs["Config"].get("Cmd"))
            and token in json.dumps(c.attrs["Config"].get("Cmd"))]
    assert left == []

    out = build_all([bad, good], engine=engine, keep_going=False, log_dir=tmp_path / "stop")
    assert [o.status for o in out] == [FAILED, NOT_STARTED]


def test_parallel_jobs_follow_dependencies(engine, refs, token, tmp_path):
    parent_ref = refs("parent")
    jobs = [
        BuildJob("child", FIX / "child", refs("child"), buildargs={"PARENT": parent_ref}, depends_on=("parent",)),
        BuildJob("parent", FIX / "parent", parent_ref, buildargs={"TOKEN": token}),
        BuildJob("other", FIX / "ok", refs("other"), buildargs={"TOKEN": token + "o"}),
    ]
    lines: list[str] = []
    out = build_all(jobs, engine=engine, jobs_n=2, log_dir=tmp_path, progress=lines.append)
    assert [o.status for o in out] == [BUILT, BUILT, BUILT], [o.error for o in out]
    events = [ln for ln in lines if ": building " in ln or ": built " in ln]
    starts = {ln.split(":")[0]: i for i, ln in enumerate(events) if ": building " in ln}
    ends = {ln.split(":")[0]: i for i, ln in enumerate(events) if ": built " in ln}
    assert starts["parent"] < ends["parent"] < starts["child"]         # dependency order
    assert starts["other"] < ends["parent"] and starts["parent"] < ends["other"]  # ran together
    child = engine.run(jobs[0].ref, ["cat", "/child.txt"], timeout=60)
    assert child.output.strip() == f"parent {token}"
    assert engine.inspect(jobs[0].ref).layers[:-1] == engine.inspect(parent_ref).layers


def test_cli_reports_table_and_exits_1_on_failure(engine, token, tmp_path):
    ctx = tmp_path / "clifails"
    shutil.copytree(FIX / "fails", ctx)
    out_dir = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "imagebuild", "build", "--context", str(ctx),
                           "--context", str(FIX / "ok"), "--keep-going", "--jobs", "2",
                           "--output", str(out_dir), "--log-dir", str(tmp_path / "logs")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines()[1:]}
    assert rows["clifails"][1] == "failed" and rows["ok"][1] == "built"
    report = json.loads((out_dir / "build-report.json").read_text())
    assert [r["status"] for r in report] == ["failed", "built"]
    assert "RUN echo" in report[0]["error"]
    assert (tmp_path / "logs" / "ok.log").is_file()
    engine.remove("imagebuild/ok:local", force=True)


# ------------------------------------------------------------------ CA bundle as a secret

def _bundle(path: Path) -> bytes:
    body = base64.encodebytes(secrets.token_bytes(1536))
    data = b"-----BEGIN CERTIFICATE-----\n" + body + b"-----END CERTIFICATE-----\n"
    path.write_bytes(data)
    return body[:600]            # a long unique run of bytes (line breaks included) from the bundle


def _layers_with(image_tar: Path, needle: bytes) -> tuple[int, list[str]]:
    """Scan every layer tar (and the config) of a `docker save` archive for `needle`."""
    found, scanned = [], 0
    with tarfile.open(image_tar) as outer:
        manifest = json.load(outer.extractfile("manifest.json"))[0]
        for name in manifest["Layers"] + [manifest["Config"]]:
            data = outer.extractfile(name).read()
            scanned += 1
            if needle in data:
                found.append(name)
            if name.endswith(".tar"):   # also each file's bytes as stored, in case of odd framing
                with tarfile.open(fileobj=outer.extractfile(name)) as layer:
                    for member in layer:
                        if member.isfile() and needle in layer.extractfile(member).read():
                            found.append(f"{name}:{member.name}")
    return scanned, found


def test_ca_bundle_is_used_by_the_build_but_in_no_layer(engine, tmp_path):
    bundle = tmp_path / "site-ca.pem"
    needle = _bundle(bundle)
    sha = hashlib.sha256(bundle.read_bytes()).hexdigest()
    ctx = tmp_path / "ca-secret"
    shutil.copytree(FIX / "ca-secret", ctx)
    # BuildKit's cache key ignores secret contents: a fresh first step makes the secret steps run
    text = (ctx / "Dockerfile").read_text().replace(
        f"FROM {BASE}\n", f"FROM {BASE}\nRUN echo {secrets.token_hex(8)} > /nonce\n", 1)
    (ctx / "Dockerfile").write_text(text)
    proc = subprocess.run([sys.executable, "-m", "imagebuild", "build", "--context", str(ctx),
                           "--ca-bundle", str(bundle), "--output", str(tmp_path / "out"),
                           "--log-dir", str(tmp_path / "logs")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    ref = "imagebuild/ca-secret:local"
    try:
        assert "BuildKit CLI with secrets ca-bundle" in (tmp_path / "logs" / "ca-secret.log").read_text()
        seen = engine.run(ref, ["cat", "/ca-bundle.sha256", "/ca-bundle.size"], timeout=60).output.split()
        assert seen == [sha, str(bundle.stat().st_size)]      # the RUN steps read the real bundle
        saved = engine.save(ref, tmp_path / "secret.tar")
        scanned, found = _layers_with(saved, needle)
        assert scanned == len(engine.inspect(ref).layers) + 1
        assert found == []
    finally:
        engine.remove(ref, force=True)

    # control: the same scan finds the bytes when a Dockerfile COPYs the bundle in
    ctl = tmp_path / "ca-copied"
    shutil.copytree(FIX / "ca-copied", ctl)
    shutil.copy(bundle, ctl / "ca-bundle.pem")
    res = engine.build(ctl, "imagebuild/ca-copied:local", log=tmp_path / "ctl.log")
    try:
        scanned, found = _layers_with(engine.save(res.ref, tmp_path / "copied.tar"), needle)
        assert scanned >= 2
        assert len(found) == 2 and found[1].endswith("etc/leaked-ca-bundle.pem"), found
    finally:
        engine.remove(res.ref, force=True)


def test_bad_ca_bundle_is_one_line(tmp_path):
    notpem = tmp_path / "x.pem"
    notpem.write_text("hello\n")
    for arg, want in ((str(notpem), "not a PEM CA bundle"), (str(tmp_path / "missing.pem"), "cannot read")):
        proc = subprocess.run([sys.executable, "-m", "imagebuild", "build", "--context", str(FIX / "ok"),
                               "--ca-bundle", arg], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                              env=dict(os.environ))
        assert proc.returncode == 2 and want in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr


@pytest.mark.parametrize("name", ["no-such-image", "smoke-cpu;rm -rf /"])
def test_cli_unknown_or_hostile_image_name_is_one_line(name, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "imagebuild", "build", "--matrix", str(ROOT / "matrix.yaml"),
                           name, "--output", str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and f"unknown image {name!r}" in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.quiet_engine
def test_buildkit_engine_counts_cache_and_names_the_failing_step(docker_client, engine, refs, token, tmp_path):
    bk = get_engine("buildkit", client=docker_client)
    ref = refs("bk-ok")
    first = bk.build(FIX / "ok", ref, buildargs={"TOKEN": token + "bk"}, labels={"io.imagebuild.flavor": "cpu"},
                     log=tmp_path / "bk1.log")
    again = bk.build(FIX / "ok", ref, buildargs={"TOKEN": token + "bk"}, labels={"io.imagebuild.flavor": "cpu"},
                     log=tmp_path / "bk2.log")
    assert first.steps == again.steps == 3          # RUN, COPY, RUN: BuildKit shows no ARG/ENV steps
    assert first.cached_steps < 3 and again.cached_steps == 3 and again.image_id == first.image_id
    assert engine.inspect(ref).labels["io.imagebuild.flavor"] == "cpu"
    with pytest.raises(BuildError) as exc:
        bk.build(FIX / "fails", refs("bk-fails"), buildargs={"TOKEN": token + "bk"}, log=tmp_path / "bk3.log")
    msg = str(exc.value)
    assert f'step 3/4 RUN echo "about-to-fail-{token}bk" && false' in msg, msg   # BuildKit expands ARGs
    assert f"last lines: about-to-fail-{token}bk" in msg and "exit code: 1" in msg and str(tmp_path / "bk3.log") in msg
