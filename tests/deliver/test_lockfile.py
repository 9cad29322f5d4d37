"""images.lock: pure logic (entries, drift, determinism, malformed files) plus the `lock`
command over a real engine image."""

from __future__ import annotations

import io
import json
import types
import uuid

import pytest

from imagebuild import cli, dockerfile
from imagebuild.deliver import lockfile
from imagebuild.errors import ImagebuildError

from conftest import fake_matrix, need

SHA_A, SHA_B = "a" * 64, "b" * 64


def entry(**over):
    base = lockfile.compute_entry(
        stack={"pytorch": "2.4.0", "cuda": "12.4.1", "python": "3.11"}, dockerfile_sha256=SHA_A,
        base_image="sha256:" + "1" * 64, image_id="sha256:" + "2" * 64,
        smoke={"counts": {"pass": 9, "fail": 0, "skip": 1}, "passed": True, "report_sha256": SHA_B})
    base.update(over)
    return base


def test_write_is_deterministic_sorted_and_newline_terminated(tmp_path):
    entries = {"b-img": entry(), "a-img": entry(stack={"python": "3.12", "cuda": "12.4.1"})}
    lockfile.write_lock(tmp_path / "one.lock", entries)
    lockfile.write_lock(tmp_path / "two.lock", dict(reversed(list(entries.items()))))
    one = (tmp_path / "one.lock").read_bytes()
    assert one == (tmp_path / "two.lock").read_bytes()
    assert one.endswith(b"}\n") and not one.endswith(b"\n\n")
    data = json.loads(one)
    assert list(data["images"]) == ["a-img", "b-img"]
    assert list(data["images"]["a-img"]["stack"]) == ["cuda", "python"]
    assert lockfile.read_lock(tmp_path / "one.lock") == json.loads(one)["images"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp left


def test_drift_names_each_difference():
    old = entry()
    new = entry(stack={"pytorch": "2.4.1", "python": "3.11", "nccl": "2.21.5"},
                dockerfile_sha256=SHA_B, image_id="sha256:" + "3" * 64,
                smoke={"counts": {"pass": 8, "fail": 1, "skip": 1}, "passed": False, "report_sha256": SHA_A})
    assert lockfile.drift(old, new) == [
        "cuda removed (was 12.4.1)",
        "nccl added (2.21.5)",
        "pytorch 2.4.0 -> 2.4.1",
        "Dockerfile sha256 changed",
        "image sha256:222222222222 -> sha256:333333333333",
        "smoke passed -> failed",
        "smoke fail 0 -> 1",
        "smoke pass 9 -> 8",
    ]
    assert lockfile.drift(old, entry()) == []
    # before a build only the inputs count
    assert lockfile.drift(old, new, only=lockfile.BUILD_INPUTS) == [
        "cuda removed (was 12.4.1)", "nccl added (2.21.5)", "pytorch 2.4.0 -> 2.4.1",
        "Dockerfile sha256 changed"]
    assert lockfile.drift(old, entry(smoke={**old["smoke"], "report_sha256": SHA_A})) == [
        "smoke report sha256 changed"]
    assert lockfile.drift_all({"a": old, "gone": old}, {"a": old, "new": old}) == {
        "gone": ["in the lock but no longer declared"], "new": ["not in the lock"]}


@pytest.mark.parametrize("text, where", [
    ('{"images": {}, "version": 1,\n}', "images.lock:2:1"),
    ('{"images": [], "version": 1}', "images.lock"),
    ('{"images": {}, "version": 7}', "images.lock"),
    ('{"images": {"x": {"stack": {}}}, "version": 1}', "images.lock"),
    ('{"images": {"bad id;": {}}, "version": 1}', "images.lock"),
    ("", "images.lock:1:1"),
])
def test_malformed_lock_is_one_line_naming_the_file(tmp_path, text, where):
    path = tmp_path / "images.lock"
    path.write_text(text)
    with pytest.raises(lockfile.LockError) as err:
        lockfile.read_lock(path)
    message = str(err.value)
    assert "\n" not in message and message.startswith(str(tmp_path / where))


def test_one_lock_error_for_both_kinds_of_lock():
    from imagebuild import errors
    from imagebuild.render import wheellock
    assert lockfile.LockError is wheellock.LockError is errors.LockError
    assert issubclass(wheellock.LockUnavailable, errors.LockError)


def test_summarize_report_counts_statuses(tmp_path):
    report = {"image": "x", "passed": True, "summary": {"pass": 2, "fail": 0, "skip": 1},
              "checks": [{"name": "a", "status": "pass"}]}
    raw = json.dumps(report).encode()
    summary = lockfile.summarize_report(report, raw)
    assert summary["counts"] == {"fail": 0, "pass": 2, "skip": 1} and summary["passed"] is True
    no_summary = {"passed": False, "checks": [{"status": "fail"}, {"status": "pass"}, {"status": "fail"}]}
    assert lockfile.summarize_report(no_summary, b"{}")["counts"] == {"fail": 2, "pass": 1, "skip": 0}
    (tmp_path / "r.json").write_bytes(raw)
    assert lockfile.read_report_summary(tmp_path / "r.json") == summary
    assert lockfile.read_report_summary(tmp_path / "missing.json") is None


def test_base_refs_skip_stage_names():
    text = ("FROM nvidia/cuda:12.4.1-devel AS devel\nRUN make\n"
            "from --platform=linux/amd64 devel as tools\n"
            "FROM imagebuild/base:debian-bookworm\nCOPY --from=devel /opt /opt\n")
    assert dockerfile.base_refs(text) == ["nvidia/cuda:12.4.1-devel", "imagebuild/base:debian-bookworm"]


def test_write_refuses_invalid_entries_and_leaves_old_lock(tmp_path):
    path = tmp_path / "images.lock"
    lockfile.write_lock(path, {"a": entry()})
    before = path.read_bytes()
    with pytest.raises(ImagebuildError):
        lockfile.write_lock(path, {"a": {**entry(), "dockerfile_sha256": "nope"}})
    assert path.read_bytes() == before


@pytest.mark.engine
def test_lock_command_writes_then_checks_drift(docker_client, tmp_path, monkeypatch, capsys):
    base = "imagebuild/base:debian-bookworm"
    try:
        base_id = docker_client.images.get(base).id
    except Exception:  # noqa: BLE001
        need(f"the base image {base}", "create it with debootstrap + docker import")
    dockerfile = f"FROM {base}\nRUN echo lock-test > /lock-test\n"
    folder = tmp_path / "Dockerfiles" / "lock-test"
    folder.mkdir(parents=True)
    (folder / "Dockerfile").write_text(dockerfile)
    ref = "imagebuild/lock-test:test"
    built = docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=ref, rm=True)[0]
    reports = tmp_path / ".imagebuild" / "reports"
    reports.mkdir(parents=True)
    (reports / "lock-test.json").write_text(json.dumps(
        {"image": "lock-test", "image_id": built.id, "passed": True,
         "summary": {"pass": 3, "fail": 0, "skip": 0}}))
    spec = types.SimpleNamespace(id="lock-test", local_ref=ref, tags=["t"], labels={},
                                 stack={"os": "debian-12", "python": "3.11"}, depends_on=())
    fake_matrix(monkeypatch, {"lock-test": spec})
    matrix = str(tmp_path / "matrix.yaml")
    # no matrix here to render the context from: the recipe hash is that of the Dockerfile's folder
    monkeypatch.setattr(lockfile, "recipe_sha256", lambda spec, m: lockfile.context_sha256(folder))

    assert cli.main(["lock", "--matrix", matrix]) == 0
    lock = json.loads((tmp_path / "images.lock").read_text())["images"]["lock-test"]
    assert lock["provenance"] == {"base_digest": None, "recipe_sha256": lockfile.context_sha256(folder),
                                  "sbom_sha256": None, "wheel_lock_sha256": None,
                                  "test_report_sha256": lockfile.sha256_file(reports / "lock-test.json")}
    assert lock["base_image"] == base_id and lock["image_id"] == built.id
    assert lock["smoke"]["counts"] == {"fail": 0, "pass": 3, "skip": 0}
    assert lock["dockerfile_sha256"] == lockfile.sha256_file(folder / "Dockerfile")
    assert cli.main(["lock", "--check", "--matrix", matrix]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("images.lock: 1 image(s) match")

    spec.stack = {"os": "debian-12", "python": "3.12"}
    (folder / "Dockerfile").write_text(dockerfile + "# changed\n")
    assert cli.main(["lock", "--check", "--matrix", matrix]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == ["lock-test: python 3.11 -> 3.12", "lock-test: Dockerfile sha256 changed",
                   "lock-test: recipe sha256 changed"]

    (tmp_path / "images.lock").write_text("{\n  broken")
    assert cli.main(["lock", "--check", "--matrix", matrix]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{tmp_path / 'images.lock'}:2:" in err[0]


def test_bases_are_checked_and_compared():
    bases = {"ubuntu:22.04": {"id": "sha256:" + "3" * 64, "digest": "ubuntu@sha256:" + "4" * 64},
             "imagebuild/base:debian-bookworm": {"id": "sha256:" + "5" * 64, "digest": None}}
    one = {**entry(), "bases": bases}
    lockfile._check_entry("a", one, "images.lock")
    lockfile._check_entry("a", entry(), "images.lock")  # a lock written before bases is still read
    for bad in ({"x": {"id": "sha256:12", "digest": None}}, {"x": {"id": None}},
                {"x": {"id": None, "digest": "ubuntu:22.04"}}):
        with pytest.raises(ImagebuildError, match="bases"):
            lockfile._check_entry("a", {**entry(), "bases": bad}, "images.lock")
    moved = {**bases, "ubuntu:22.04": {"id": "sha256:" + "6" * 64, "digest": "ubuntu@sha256:" + "7" * 64}}
    assert lockfile.drift(one, {**one, "bases": moved}, only=lockfile.BUILD_INPUTS) == [
        "base ubuntu:22.04 id sha256:333333333333 -> sha256:666666666666",
        f"base ubuntu:22.04 digest ubuntu@sha256:{'4' * 64} -> ubuntu@sha256:{'7' * 64}"]
    assert lockfile.drift(entry(), {**one}, only=lockfile.BUILD_INPUTS) == []  # older lock: not compared


@pytest.mark.engine
def test_lock_records_every_base_and_names_the_one_that_moved(docker_client, tmp_path, monkeypatch, capsys):
    base = "imagebuild/base:debian-bookworm"
    try:
        base_image = docker_client.images.get(base)
    except Exception:  # noqa: BLE001
        need(f"the base image {base}", "create it with `imagebuild base debian-bookworm`")
    token = uuid.uuid4().hex[:10]
    second = f"imagebuild/lock-second-base:{token}"

    def make_second(word: str) -> str:
        return docker_client.images.build(fileobj=io.BytesIO(f"FROM {base}\nRUN echo {word} > /w\n".encode()),
                                          tag=second, rm=True)[0].id

    first_id = make_second("one")
    dockerfile = f"FROM {base} AS devel\nRUN true\nFROM {second}\nCOPY --from=devel /etc/os-release /x\n"
    folder = tmp_path / "Dockerfiles" / "two-bases"
    folder.mkdir(parents=True)
    (folder / "Dockerfile").write_text(dockerfile)
    spec = types.SimpleNamespace(id="two-bases", local_ref=f"imagebuild/two-bases:{token}", tags=["t"],
                                 labels={}, stack={"os": "debian-12"}, depends_on=())
    fake_matrix(monkeypatch, {"two-bases": spec})
    matrix = str(tmp_path / "matrix.yaml")
    monkeypatch.setattr(lockfile, "recipe_sha256", lambda spec, m: lockfile.context_sha256(folder))
    try:
        assert cli.main(["lock", "--matrix", matrix]) == 0
        lock = json.loads((tmp_path / "images.lock").read_text())["images"]["two-bases"]
        assert lock["bases"] == {
            base: {"id": base_image.id,
                   "digest": lockfile.repo_digest(base, base_image.attrs.get("RepoDigests") or [])},
            second: {"id": first_id, "digest": None}}  # built here, never in a registry
        assert lock["base_image"] == base_image.id
        capsys.readouterr()
        second_id = make_second("two")
        assert cli.main(["lock", "--check", "--matrix", matrix]) == 1
        out = capsys.readouterr().out.splitlines()
        assert out == [f"two-bases: base {second} id {first_id[:19]} -> {second_id[:19]}"]
    finally:
        docker_client.images.remove(second, force=True)


# ---------------------------------------------------------------- one writer at a time

def _publish_slowly(lock_path: str, repository: str, go, guarded: bool) -> None:
    """A child process: record one publish, with the read widened to 0.3 s so that writers that
    do not wait for each other would overwrite each other's record."""
    import contextlib
    import time

    real_read = lockfile.read_lock

    def slow_read(path):
        entries = real_read(path)
        time.sleep(0.3)
        return entries

    lockfile.read_lock = slow_read
    if not guarded:   # the planted defect: the same update without the writers' lock
        lockfile.one_writer = lambda path, wait=0: contextlib.nullcontext()
    go.wait(10)
    lockfile.record_published(lock_path, "img", engine_image_id="sha256:" + "2" * 64,
                              repository=repository, digest="sha256:" + "c" * 64, tags=["1"])


def _publish_at_once(tmp_path, guarded: bool) -> dict:
    import multiprocessing

    lock = tmp_path / "images.lock"
    lockfile.write_lock(lock, {"img": entry()})
    ctx = multiprocessing.get_context("fork")
    go = ctx.Event()
    procs = [ctx.Process(target=_publish_slowly, args=(str(lock), f"localhost:5000/ns{i}/img", go, guarded))
             for i in range(4)]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    return lockfile.read_lock(lock)["img"].get("published", {})


def test_concurrent_publishes_keep_every_record(tmp_path):
    """Four processes record a publish in one lock at the same moment: each waits for the one
    before it and reads what it wrote, so all four records stay. Without the writers' lock the
    same four lose records (checked too, so this test can see the defect it guards against)."""
    (tmp_path / "guarded").mkdir()
    (tmp_path / "bare").mkdir()
    kept = _publish_at_once(tmp_path / "guarded", guarded=True)
    assert sorted(kept) == [f"localhost:5000/ns{i}/img" for i in range(4)]
    assert len(_publish_at_once(tmp_path / "bare", guarded=False)) < 4


def test_a_writer_held_too_long_is_one_line(tmp_path):
    import filelock

    lock = tmp_path / "images.lock"
    with filelock.FileLock(str(tmp_path / ".images.lock.lock")):
        with pytest.raises(ImagebuildError, match=r"another imagebuild has been writing this lock for 0 s "
                                                  r"\(it holds \.images\.lock\.lock\)"):
            with lockfile.one_writer(lock, wait=0.2):
                pass
    with lockfile.one_writer(lock, wait=0.2):   # free again once the holder let go
        pass
