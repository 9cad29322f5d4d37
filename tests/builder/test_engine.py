"""The engine layer against the real Docker engine: run (always removed, timeouts), run_many on a
private network, inspect/exists/remove/save, and the one-line errors for bad input."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
import threading

import pytest

from conftest import ROOT, need
from imagebuild.engines import (
    Mount, RunSpec, check_ref, check_secrets, connect, dockerfile_needs_buildkit, get_engine,
)
from imagebuild.errors import EngineError, UsageError

BASE = "imagebuild/base:debian-bookworm"


# ------------------------------------------------------------------ pure logic: validation

@pytest.mark.parametrize("ref", [
    "imagebuild/base:debian-bookworm", "localhost:5000/team/img:1.2.3", "img", "a-b/c_d:T.1",
    "sha256:" + "a" * 64, "img@sha256:" + "0" * 64,
])
def test_check_ref_accepts_real_references(ref):
    assert check_ref(ref) == ref


@pytest.mark.parametrize("ref", [
    "", "UPPER/case", "img:tag; rm -rf /", "$(id)", "img:tag\nnext", "../img", "img:-tag",
    "img:" + "t" * 129, "a b", "img:tag:tag",
])
def test_check_ref_refuses_hostile_strings(ref):
    with pytest.raises(UsageError) as exc:
        check_ref(ref)
    assert "\n" not in str(exc.value)


def test_secrets_must_be_files_with_plain_paths(tmp_path):
    good = tmp_path / "ca.pem"
    good.write_text("x")
    assert check_secrets({"ca-bundle": good}) == {"ca-bundle": good.resolve()}
    with pytest.raises(UsageError, match="not a readable file"):
        check_secrets({"ca-bundle": tmp_path / "missing.pem"})
    with pytest.raises(UsageError, match="invalid secret id"):
        check_secrets({"CA bundle": good})
    odd = tmp_path / "a,b.pem"
    odd.write_text("x")
    with pytest.raises(UsageError, match="BuildKit CLI"):
        check_secrets({"ca-bundle": odd})


def test_buildkit_is_needed_only_for_run_mount():
    assert dockerfile_needs_buildkit("FROM x\nRUN --mount=type=secret,id=a cat /run/secrets/a\n")
    assert dockerfile_needs_buildkit("FROM x\nRUN --network=none --mount=type=cache,target=/c true\n")
    assert not dockerfile_needs_buildkit("FROM x\n# RUN --mount=type=secret is documented here\nRUN true\n")


def test_no_engine_is_one_line_naming_docker_host(monkeypatch, tmp_path):
    sock = tmp_path / "nothing.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{sock}")
    with pytest.raises(EngineError) as exc:
        connect(timeout=5)
    assert f"DOCKER_HOST=unix://{sock}" in str(exc.value)


def test_cli_without_engine_exits_3_with_one_line(tmp_path):
    """An engine that does not answer is an outage (3), not the user's mistake (2): CI may retry."""
    ctx = ROOT / "tests/fixtures/build/ok"
    env = dict(os.environ, DOCKER_HOST=f"unix://{tmp_path}/nothing.sock")
    proc = subprocess.run([sys.executable, "-m", "imagebuild", "build", "--context", str(ctx),
                           "--output", str(tmp_path / "out")], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=60)
    assert proc.returncode == 3, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "DOCKER_HOST=unix://" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out" / "build-report.json").exists()


# ------------------------------------------------------------------ the real engine

@pytest.fixture(scope="session")
def engine(docker_client):
    return get_engine("docker", client=docker_client)


@pytest.fixture(scope="session")
def base_image(engine):
    if not engine.exists(BASE):
        need(f"the base image {BASE}", "create it with `imagebuild base debian-bookworm`")
    return BASE


def _leftovers(client, name: str) -> list:
    return client.containers.list(all=True, filters={"name": f"^/{name}$"})


def test_run_returns_exit_code_and_both_streams(engine, base_image, docker_client):
    name = f"ib-test-run-{secrets.token_hex(4)}"
    res = engine.run(base_image, ["sh", "-c", "echo out; echo err >&2; exit 3"], name=name,
                     env={"GREETING": "hi"}, timeout=60)
    assert res.exit_code == 3 and not res.timed_out and not res.ok
    # stdout and stderr are two pipes: the engine keeps each stream's order, not their interleaving
    assert sorted(res.output.splitlines()) == ["err", "out"]
    assert _leftovers(docker_client, name) == []


def test_run_passes_env_mounts_hostname_and_shm(engine, base_image, tmp_path):
    (tmp_path / "data.txt").write_text("mounted bytes\n")
    res = engine.run(base_image, ["sh", "-c", 'echo "$GREETING"; cat /data/data.txt; hostname; '
                                              "df -k /dev/shm | tail -n 1 | tr -s ' ' | cut -d' ' -f2; "
                                              "touch /data/x 2>/dev/null && echo writable || echo read-only"],
                     env={"GREETING": "hello there"}, hostname="node7",
                     mounts=[Mount(tmp_path, "/data")], shm_size="64m", timeout=60)
    assert res.ok, res.output
    greeting, data, host, shm_kb, ro = res.output.splitlines()
    assert (greeting, data, host, ro) == ("hello there", "mounted bytes", "node7", "read-only")
    assert int(shm_kb) == 64 * 1024


def test_run_kills_and_removes_on_timeout(engine, base_image, docker_client):
    name = f"ib-test-timeout-{secrets.token_hex(4)}"
    res = engine.run(base_image, ["sh", "-c", "echo started; sleep 120"], name=name, timeout=2)
    assert res.timed_out and res.exit_code is None and not res.ok
    assert "started" in res.output
    assert _leftovers(docker_client, name) == []


def test_run_removes_the_container_on_keyboard_interrupt(engine, base_image, docker_client):
    if threading.current_thread() is not threading.main_thread():  # pragma: no cover
        pytest.fail("signals need the main thread")
    name = f"ib-test-sigint-{secrets.token_hex(4)}"
    seen = threading.Event()

    def interrupt_when_running():
        for _ in range(200):
            if docker_client.containers.list(filters={"name": f"^/{name}$", "status": "running"}):
                seen.set()
                os.kill(os.getpid(), signal.SIGINT)
                return
            threading.Event().wait(0.1)

    # Ctrl-C's handler installed here, whatever the runner inherited: a suite started as a
    # background job of a non-interactive shell has SIGINT ignored, and the signal would be lost
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        t = threading.Thread(target=interrupt_when_running, daemon=True)
        t.start()
        with pytest.raises(KeyboardInterrupt):
            engine.run(base_image, ["sleep", "120"], name=name, timeout=60)
        t.join()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert seen.is_set()
    assert _leftovers(docker_client, name) == []


def test_run_many_on_a_private_network_then_everything_is_gone(engine, base_image, docker_client):
    token = secrets.token_hex(4)
    with engine.network(f"ib-test-net-{token}") as net:
        results = engine.run_many([
            RunSpec(base_image, ("sleep", "2"), network=net, name=f"ib-n1-{token}", hostname="node1"),
            RunSpec(base_image, ("getent", "hosts", f"ib-n1-{token}"), network=net, name=f"ib-n2-{token}",
                    hostname="node2"),
            RunSpec(base_image, ("sh", "-c", "echo waiting; sleep 120"), network=net, name=f"ib-n3-{token}"),
        ], timeout=5)
        assert [r.timed_out for r in results] == [False, False, True]
        assert results[0].exit_code == 0 and results[1].exit_code == 0
        ip = results[1].output.split()[0]
        assert ip.count(".") == 3, results[1].output     # node2 resolved node1 on the network
        assert docker_client.networks.list(names=[net])
    assert docker_client.networks.list(names=[f"ib-test-net-{token}"]) == []
    for n in ("ib-n1", "ib-n2", "ib-n3"):
        assert _leftovers(docker_client, f"{n}-{token}") == []


def test_unknown_image_and_hostile_names_are_one_line_errors(engine, docker_client):
    with pytest.raises(EngineError, match="imagebuild/no-such-image:x"):
        engine.run("imagebuild/no-such-image:x", ["true"], timeout=10)
    with pytest.raises(EngineError, match="imagebuild/no-such-image:x"):
        engine.inspect("imagebuild/no-such-image:x")
    with pytest.raises(UsageError, match="container name"):
        engine.run(BASE, ["true"], name="x; docker rm -f everything", timeout=10)
    with pytest.raises(UsageError, match="environment variable"):
        engine.run(BASE, ["true"], env={"A B": "1"}, timeout=10)
    with pytest.raises(UsageError, match="timeout"):
        engine.run(BASE, ["true"], timeout=0)
    assert engine.exists("imagebuild/no-such-image:x") is False


def test_inspect_save_remove_roundtrip(engine, base_image, tmp_path, docker_client):
    ref = f"imagebuild/test-save:{secrets.token_hex(4)}"
    docker_client.api.tag(base_image, ref.split(":")[0], ref.split(":")[1])
    try:
        info = engine.inspect(ref)
        assert info.id.startswith("sha256:") and info.size > 10_000_000
        assert info.layers and all(layer.startswith("sha256:") for layer in info.layers)
        out = tmp_path / "sub" / "image.tar"
        assert engine.save(ref, out) == out
        assert [p.name for p in out.parent.iterdir()] == ["image.tar"]   # no temp file left
        with tarfile.open(out) as tf:
            manifest = json.load(tf.extractfile("manifest.json"))
        assert manifest[0]["RepoTags"] == [ref]
        assert len(manifest[0]["Layers"]) == len(info.layers)
    finally:
        engine.remove(ref)
    assert not engine.exists(ref)
    with pytest.raises(EngineError, match=ref):
        engine.save(ref, tmp_path / "gone.tar")
    assert not (tmp_path / "gone.tar").exists()
    with pytest.raises(EngineError, match=ref):
        engine.remove(ref)


# ------------------------------------------------------------------ podman (scripts/setup installs it)

PODMAN_CONF = """[containers]
default_ulimits = []
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
"""


@pytest.fixture(scope="session")
def podman_client(tmp_path_factory, engine, base_image):
    """A private `podman system service` (own storage, own socket) holding a copy of the base
    image; the settings are MACHINE.md's (cgroupfs, runc, no default ulimits)."""
    podman = shutil.which("podman")
    if not podman or not shutil.which("runc"):
        need("podman and runc (Debian packages podman runc; scripts/setup installs them)", "not on PATH")
    import docker
    d = tmp_path_factory.mktemp("podman")
    (d / "containers.conf").write_text(PODMAN_CONF)
    sock = d / "podman.sock"
    env = dict(os.environ, CONTAINERS_CONF=str(d / "containers.conf"))
    argv = [podman, "--root", str(d / "root"), "--runroot", str(d / "run"), "--runtime", "runc",
            "--cgroup-manager", "cgroupfs", "system", "service", "--time=0", f"unix://{sock}"]
    log = open(d / "service.log", "wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        client = None
        for _ in range(100):
            try:
                client = docker.DockerClient(base_url=f"unix://{sock}", timeout=300)
                client.ping()
                break
            except Exception:  # noqa: BLE001 - not up yet
                client = None
                threading.Event().wait(0.1)
        assert client is not None, (d / "service.log").read_text()[-2000:]
        pod = get_engine("docker", client=client)
        pod.load(engine.save(base_image, d / "base.tar"))
        (d / "base.tar").unlink()
        yield client
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        subprocess.run([podman, "--root", str(d / "root"), "--runroot", str(d / "run"), "system", "reset",
                        "--force"], env=env, capture_output=True, timeout=120)


def test_podman_socket_builds_and_runs(podman_client, tmp_path):
    """The same engine code through podman's Docker-compatible API."""
    eng = get_engine("docker", client=podman_client)
    assert eng.name == "podman"
    ctx = tmp_path / "ctx"
    shutil.copytree(ROOT / "tests/fixtures/build/ok", ctx)
    res = eng.build(ctx, "imagebuild/podman-test:local", buildargs={"TOKEN": "podman"},
                    labels={"io.imagebuild.flavor": "cpu"}, log=tmp_path / "p.log")
    assert res.steps == 6 and res.image_id.startswith("sha256:")     # 7 steps (LABEL added) less FROM
    again = eng.build(ctx, "imagebuild/podman-test:local", buildargs={"TOKEN": "podman"},
                      labels={"io.imagebuild.flavor": "cpu"}, log=tmp_path / "p2.log")
    assert again.image_id == res.image_id and again.cached_steps == again.steps == 6
    assert eng.inspect("imagebuild/podman-test:local").labels["io.imagebuild.flavor"] == "cpu"
    run = eng.run("imagebuild/podman-test:local", ["cat", "/token.txt"], timeout=120)
    assert run.ok and run.output.strip() == "built for podman"
    timed = eng.run("imagebuild/podman-test:local", ["sleep", "60"], timeout=2)
    assert timed.timed_out
    assert podman_client.containers.list(all=True) == []
    with pytest.raises(EngineError, match="podman"):
        eng.build(ROOT / "tests/fixtures/build/ca-secret", "imagebuild/podman-ca:local", log=tmp_path / "c.log")


def test_full_disk_is_one_line_and_leaves_no_file(engine, base_image, tmp_path):
    """save() onto a real 1 MB tmpfs: the engine streams 200 MB, the disk fills up."""
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        need("mounting a small tmpfs (root)", mounted.stderr.strip() or "mount failed")
    try:
        with pytest.raises(EngineError) as exc:
            engine.save(base_image, small / "base.tar")
        assert "No space left on device" in str(exc.value) and str(small / "base.tar") in str(exc.value)
        assert list(small.iterdir()) == []
    finally:
        subprocess.run(["umount", str(small)], check=False)
