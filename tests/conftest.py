"""Shared fixtures. Tests that need a real engine use the `docker_client` fixture: when no engine
answers it skips, except under CI=true, where it fails (CI must have started one)."""

from __future__ import annotations

import datetime
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: the recipe templates, package data of imagebuild (read with importlib.resources)
RECIPES = ROOT / "imagebuild" / "recipes"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


#: the project's matrix, which most tests read
MATRIX = ROOT / "matrix.yaml"


@pytest.fixture(scope="session")
def k():
    """The project's knowledge, loaded once for the session: knowledge.Knowledge is frozen, so no
    test can change what another reads (a test that needs another matrix loads its own copy)."""
    from imagebuild import knowledge
    return knowledge.load(MATRIX)


@pytest.fixture(scope="module")
def specs(k):
    """The project's declared images (images.expand's specs, in the matrix's order), expanded once
    per module: an ImageSpec is frozen, but its stack and labels are dicts a test could change."""
    from imagebuild.render import images
    return images.expand(k)[0]


@pytest.fixture(scope="module")
def specs_by_id(specs) -> dict:
    """The same images by id."""
    return {s.id: s for s in specs}


def answer(stdout: str, command: str | None = None, *, code: int = 0):
    """The `result` of a `--json` envelope (README, "Output"), once the envelope itself has been
    checked: its schema, the command, the exit code and `ok` agreeing with it."""
    import json

    doc = json.loads(stdout)
    assert doc["schema"] == "imagebuild.result/1", doc
    assert doc["exit_code"] == code and doc["ok"] is (code == 0), doc
    assert command is None or doc["command"] == command, doc
    return doc["result"]


def fake_matrix(monkeypatch, specs: dict, k=None) -> None:
    """Commands in-process see ``specs`` (id -> a spec-like value) as the images of whatever matrix
    they are given: render.run.MatrixRun.open, the one way a command reads its images, made to
    return them with the Knowledge ``k`` (None: no matrix is read)."""
    from imagebuild.render.run import MatrixRun

    monkeypatch.setattr(MatrixRun, "open", classmethod(
        lambda cls, matrix, **kw: cls(str(matrix), k, dict(specs))))


def default_signals() -> None:
    """A child's SIGINT and SIGTERM at their defaults, as a shell in a terminal starts a command
    (Popen's preexec_fn). A job that a non-interactive shell put in the background (some CI
    runners start the suite so) inherits SIGINT ignored, and Python then installs no
    KeyboardInterrupt handler: a test of what imagebuild does with Ctrl-C sets what it needs
    instead of inheriting the runner's disposition."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def need(what: str, reason: str):
    """Skip locally, fail under CI=true: a check that did not run is never a pass in CI."""
    if IN_CI:
        pytest.fail(f"{what} is required under CI=true: {reason}")
    pytest.skip(f"{what} not available: {reason}")


# A test that uses one of these fixtures (directly or through another fixture) needs the service:
# it gets the marker, so `-m "not engine"` and the like select exactly the tests that run without.
SERVICE_FIXTURES = {"docker_client": "engine", "smoke_cpu_image": "engine", "registry": "registry",
                    "slurm_cluster": "slurm"}


# The modules that build the biggest images run last, in this order. Both Debian CUDA images are
# built in the background (PREBUILD: `imagebuild build` in a process of its own). The
# communication image (Debian's packages and NVIDIA's wheels, its benchmark compiled: about 90 s
# cold) starts with the session. The PyTorch CUDA-wheels image (5.5 GB) mostly waits on the
# package index and the disk (its wheels, then normalising): it starts when the late modules do
# (after the tests that need a quiet engine), so that it neither slows the compile nor keeps those
# tests waiting, and it is done while the communication and devel modules run. Each module then
# builds its image through the real path again, in this process: the builder's cache serves every
# step and `build` tags the image the prebuild normalised (buildcache.NormalizeMemo), or rebuilds
# with the real error if the prebuild failed. The CUDA-wheels module comes last and drops its
# image and the build cache made since that module began (the prebuild's stays: the session ends).
LATE = ("test_comms_wheels_image.py", "test_devel_image.py", "test_cuda_wheels_image.py")
PREBUILD = {"comms-cu130-nccl2.30.7-debian12-runtime": ("session", ("test_comms_wheels_image.py", "test_devel_image.py",
                                                                   "test_shards_engines.py")),
            "pytorch-2.13.0-cu130-debian12-runtime": ("late", ("test_cuda_wheels_image.py",))}
_PREBUILD_LATE: list[str] = []
_PREBUILDS: dict[str, "subprocess.Popen"] = {}


def pytest_addoption(parser):
    group = parser.getgroup("imagebuild tiers")
    group.addoption("--heavy", action="store_true",
                    help="run the heavy tier only: the tests marked `heavy`, which rebuild what the "
                         "fast tier built already (second cold builds for identical image IDs)")
    group.addoption("--all-tiers", action="store_true", help="run both tiers")


def _select_tier(config, items) -> None:
    """The fast tier (the default, and CI's) leaves the `heavy` tests out; `--heavy` runs only
    them, `--all-tiers` both. Left out is deselected, never skipped: a deselected test is not
    reported as a pass."""
    if config.getoption("--all-tiers"):
        return
    want_heavy = config.getoption("--heavy")
    keep = [i for i in items if (i.get_closest_marker("heavy") is not None) == want_heavy]
    dropped = [i for i in items if i not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def pytest_collection_modifyitems(config, items):
    _select_tier(config, items)
    late = [i for name in LATE for i in items if i.path.name == name]
    # tests that count the engine's own cache hits run when no background build shares the
    # engine: just before the late modules, after the prebuild (quiet_engine waits for it)
    quiet = [i for i in items if i.get_closest_marker("quiet_engine") is not None and i not in late]
    if late or quiet:
        items[:] = [i for i in items if i.path.name not in LATE and i not in quiet] + quiet + late
    modules = {i.path.name for i in items}
    for image_id, (when, users) in PREBUILD.items():
        if modules & set(users) and not config.getoption("collectonly"):
            if when == "session":
                _start_prebuild(image_id)
            else:
                _PREBUILD_LATE.append(image_id)
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        for fixture, marker in SERVICE_FIXTURES.items():
            if fixture in used and item.get_closest_marker(marker) is None:
                item.add_marker(getattr(pytest.mark, marker))


def pytest_runtest_setup(item):
    """The late prebuilds start with the first test of a late module."""
    if _PREBUILD_LATE and item.path.name in LATE:
        for image_id in _PREBUILD_LATE:
            _start_prebuild(image_id)
        _PREBUILD_LATE.clear()


@pytest.fixture(autouse=True)
def _quiet_engine(request):
    """A test marked quiet_engine starts once every background build has ended (BuildKit shares
    and evicts cache records between concurrent builds, so a count of cached steps is only
    meaningful on an engine with nothing else building)."""
    if request.node.get_closest_marker("quiet_engine") is not None:
        for image_id in list(_PREBUILDS):
            _await_prebuild(image_id)


@pytest.fixture(scope="session")
def docker_client():
    try:
        import docker
        client = docker.from_env(timeout=600)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure means "no engine"
        need("a Docker engine (DOCKER_HOST)", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    return client


def engine_time(client) -> datetime.datetime:
    """The engine's clock now (build cache records are stamped by it)."""
    return _rfc3339(client.info()["SystemTime"])


def _rfc3339(text: str) -> datetime.datetime:
    # the engine writes RFC 3339 with nanoseconds, trailing zeros cut, in its own time zone;
    # datetime takes up to microseconds
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", text)
    if m is None:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    return datetime.datetime.fromisoformat(f"{m.group(1)}.{((m.group(2) or '') + '000000')[:6]}{zone}")


def prune_build_cache_since(client, since: datetime.datetime) -> int:
    """Remove the engine's build cache records created at or after ``since`` (the builds of one
    test module), children before parents (the engine prunes only records nothing else points
    to, one id per call). Returns the bytes reclaimed. CI's disk is the limit these tests meet
    first (the PyTorch CUDA-wheels image is 5.5 GB, and its cache as much again)."""
    freed = 0
    while True:
        cache = client.df().get("BuildCache") or []
        records = [r for r in cache if _rfc3339(r["CreatedAt"]) >= since and not r.get("InUse")]
        parents = {r.get("Parent") for r in cache}
        leaves = [r["ID"] for r in records if r["ID"] not in parents]
        if not leaves:
            return freed
        deleted = 0
        for record in leaves:
            done = client.api.prune_builds(filters={"id": record})
            deleted += len(done.get("CachesDeleted") or [])
            freed += int(done.get("SpaceReclaimed") or 0)
        if not deleted:
            return freed


def drop_image(client, ref: str, since: datetime.datetime) -> None:
    """Remove ``ref`` and the build cache its module's builds made since ``since``."""
    try:
        client.images.remove(ref, force=True)
    except Exception:  # noqa: BLE001 - already gone
        pass
    prune_build_cache_since(client, since)


def _start_prebuild(image_id: str) -> None:
    """`imagebuild build IMAGE` in the background, as build_debian_image would run it, its output
    in a log file. It only warms the engine's build cache: the test that needs the image waits for
    it and then builds through the real path in its own process, which fails there with the real
    error if the prebuild did. Nothing is started without an engine or the CA bundle (the test then
    says what is missing), or with IMAGEBUILD_TEST_PREBUILD=0."""
    import subprocess
    import sys
    import tempfile
    if image_id in _PREBUILDS or os.environ.get("IMAGEBUILD_TEST_PREBUILD", "1") == "0":
        return
    if not (os.environ.get("DOCKER_HOST") and CA_BUNDLE.is_file()):
        return
    work = Path(tempfile.mkdtemp(prefix=f"imagebuild-prebuild-{image_id}-"))
    log = open(work / "prebuild.log", "wb")  # noqa: SIM115 - the child writes it until it ends
    _PREBUILDS[image_id] = subprocess.Popen(
        [sys.executable, "-m", "imagebuild", "build", "--matrix", str(ROOT / "matrix.yaml"),
         "--ca-bundle", str(CA_BUNDLE), "--quiet",
         "--output", str(work / "build"), "--log-dir", str(work / "logs"), image_id],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def _await_prebuild(image_id: str) -> None:
    proc = _PREBUILDS.get(image_id)
    if proc is not None:
        proc.wait()


def pytest_sessionfinish(session, exitstatus):
    import signal
    for proc in _PREBUILDS.values():
        if proc.poll() is None:          # the session ended first (-x, Ctrl-C): stop the build
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=60)
            except Exception:  # noqa: BLE001 - gone already, or will not stop
                proc.kill()
#: a site's communication image compiled from upstream git tag archives (docs/examples): the
#: recipes these machines render, lint and check as data but never compile (issue 42)
SITE_GIT_EXAMPLE = ROOT / "docs" / "examples" / "comms-from-git.yaml"
_REGISTRY_FAMILY_HEAD = '  - family: comms\n    description: "communication base from the package registries'


def edit_matrix(tmp_path, pattern: str, replacement: str, site: bool = False) -> tuple[str, int]:
    """A copy of the matrix with the one line matching ``pattern`` rewritten; (path, its line).
    ``site``: of the matrix with the site's git-form communication family (conftest.site_matrix),
    which has the `sources: git` and `build:` lines these mistakes are made in."""
    base = site_matrix(tmp_path / "site") if site else ROOT / "matrix.yaml"
    lines = base.read_text().splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if re.search(pattern, line)]
    assert len(hits) == 1, (pattern, hits)
    lines[hits[0]] = re.sub(pattern, replacement, lines[hits[0]])
    path = tmp_path / "matrix.yaml"
    path.write_text("".join(lines))
    shutil.copytree(ROOT / "locks", tmp_path / "locks")
    return str(path), hits[0] + 1


def refused_in_one_line(capsys, argv, path: str, line: int | None, words: str):
    """`imagebuild argv` refuses with exit 2 and one line naming `path` (and `line`) and `words`."""
    from imagebuild import cli
    code = cli.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "Traceback" not in err[0], err
    where = f"{path}:{line}" if line else path
    assert where in err[0] and words in err[0], err[0]


def site_matrix(folder: Path) -> Path:
    """A copy of matrix.yaml in ``folder`` (its locks beside it) whose Debian communication family
    is the site's git-form one of docs/examples/comms-from-git.yaml: the same image ids, compiled
    from UCX's and Open MPI's git tag archives. Returns the copy's path."""
    text = (ROOT / "matrix.yaml").read_text()
    start = text.index(_REGISTRY_FAMILY_HEAD)
    end = text.index("  - family: ", start + len(_REGISTRY_FAMILY_HEAD))
    entry = "".join("  " + ln if ln.strip() else ln for ln in SITE_GIT_EXAMPLE.read_text().splitlines(True)
                    if not ln.startswith("#"))
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "matrix.yaml"
    out.write_text(text[:start] + entry + text[end:])
    if not (folder / "locks").exists():
        (folder / "locks").symlink_to(ROOT / "locks")
    return out


@pytest.fixture(scope="session")
def site_git(tmp_path_factory):
    """(knowledge, specs by id) of site_matrix: the git-form Debian communication images."""
    from imagebuild import knowledge
    from imagebuild.render import images
    k = knowledge.load(site_matrix(tmp_path_factory.mktemp("site-git")))
    return k, {s.id: s for s in images.expand(k)[0]}


CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")   # Debian's ca-certificates: the index over HTTPS


def build_debian_image(docker_client, image_id: str):
    """Build one Debian image of matrix.yaml through the real path (`imagebuild build`, the OS
    packages from Debian's mirror, the wheels from the package index with the host's CA bundle as
    the build's secret), making the Debian base first when the engine lacks it. Returns the image's
    ImageSpec. What is built here comes from those registries alone: no image built in a test
    compiles an upstream source archive (../shared/sources/SOURCES.md)."""
    from imagebuild import cli
    from imagebuild.render.run import load_images

    matrix = ROOT / "matrix.yaml"
    spec = load_images(matrix)[image_id]
    for needed in (image_id, *spec.depends_on):   # a devel image's build builds its runtime first
        _await_prebuild(needed)
    if not CA_BUNDLE.is_file():
        need("the host's CA bundle", f"{CA_BUNDLE} is missing (Debian's ca-certificates)")
    try:
        docker_client.images.get(spec.os.base)
    except Exception:  # noqa: BLE001 - ImageNotFound
        if cli.main(["base", "debian-bookworm"]) != 0:
            need("the local Debian base image", "imagebuild base debian-bookworm failed")
    argv = ["build", "--matrix", str(matrix), "--ca-bundle", str(CA_BUNDLE)]
    code = cli.main(argv + [image_id])
    assert code == 0, f"imagebuild build {image_id} failed (see .imagebuild/logs/{image_id}.log)"
    docker_client.images.get(spec.local_ref)
    return spec


def build_cold_twice(docker_client, ctx: Path, refs: list[str], log_dir: Path, *, epoch: int | None,
                     fresh_files: list[str] = ()) -> list[tuple[str, str, object, str]]:
    """Build the context ``ctx`` twice without the build cache, one build per ref, one after the
    other as two CI runs would, normalised with the source date ``epoch`` as `imagebuild build`
    normalises a matrix image (no normalising when None). Before each build the ``fresh_files``
    are written anew with another mtime, as a fresh checkout or rendering would. Returns, per
    build, (ref, the image ID, the engine's image, the engine's own ID before normalising)."""
    import time
    from imagebuild.builder import reproducible as rp
    from imagebuild.builder.scheduler import BuildJob, build_all
    from imagebuild.engines import get_engine

    inner = get_engine("docker", client=docker_client)
    raw_build, raw_ids = inner.build, []

    def build(*args, **kwargs):         # the engine's own image, before it is normalised
        result = raw_build(*args, **kwargs)
        raw_ids.append(result.image_id)
        return result

    inner.build = build
    engine = rp.BuildTimeEngine(inner, {r: epoch for r in refs} if epoch is not None else {}, no_cache=True)
    outcomes = []
    for i, ref in enumerate(refs):
        for name in fresh_files:
            path = ctx / name
            path.write_bytes(path.read_bytes())
            stamp = time.time() + 100 * i
            os.utime(path, (stamp, stamp))
        (out,) = build_all([BuildJob(image_id=ref.split("/")[1].split(":")[0], context=ctx, ref=ref)],
                           engine=engine, log_dir=log_dir)
        assert out.ok, out.error
        outcomes.append((ref, out.result.image_id, docker_client.images.get(ref), raw_ids[-1]))
    return outcomes


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def smoke_cpu_image(docker_client) -> str:
    """smoke-cpu built once per session through the real path: matrix.yaml -> resolver -> renderer
    -> `imagebuild build` on the engine. Returns its local reference."""
    from imagebuild import cli
    from imagebuild.render.run import load_images

    spec = load_images(ROOT / "matrix.yaml")["smoke-cpu"]
    try:
        docker_client.images.get("imagebuild/base:debian-bookworm")
    except Exception:  # noqa: BLE001 - ImageNotFound
        if cli.main(["base", "debian-bookworm"]) != 0:
            need("the local Debian base image", "imagebuild base debian-bookworm failed")
    code = cli.main(["build", "--matrix", str(ROOT / "matrix.yaml"), "smoke-cpu"])
    assert code == 0, "imagebuild build smoke-cpu failed (see .imagebuild/logs/smoke-cpu.log)"
    docker_client.images.get(spec.local_ref)
    return spec.local_ref


# --- the clock: seconds per test module, printed at the end of every run ---------------------------
# `--durations=30` names the slowest tests; this names the slowest modules (a module fixture's
# build is charged to the module), so that CI's log shows where its time grows.
_MODULE_SECONDS: dict[str, float] = {}
_MODULE_TESTS: dict[str, int] = {}


def pytest_runtest_logreport(report):
    module = report.nodeid.split("::", 1)[0]
    _MODULE_SECONDS[module] = _MODULE_SECONDS.get(module, 0.0) + report.duration
    if report.when == "call":
        _MODULE_TESTS[module] = _MODULE_TESTS.get(module, 0) + 1


def pytest_terminal_summary(terminalreporter):
    if not _MODULE_SECONDS:
        return
    total = sum(_MODULE_SECONDS.values())
    tr = terminalreporter
    tr.section("seconds per test module")
    for module, seconds in sorted(_MODULE_SECONDS.items(), key=lambda kv: (-kv[1], kv[0])):
        tr.write_line(f"{seconds:9.1f} s {100 * seconds / total:5.1f} %  {_MODULE_TESTS.get(module, 0):4d} tests  {module}")
    tr.write_line(f"{total:9.1f} s in all (setup, call and teardown of every test)")
