"""Ctrl-C and SIGTERM during `imagebuild build`: the build stops (the engine's step, its
process), the command exits non-zero at once with one line, no container of the build is left and
the tag the image had before is unchanged. Real engine, real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from conftest import ROOT, default_signals, need

BASE = "imagebuild/base:debian-bookworm"


def _sleepers(seconds: int) -> list[str]:
    """Host processes running `sleep SECONDS` (a build step's process is one of the host's)."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if argv[:2] == [b"sleep", str(seconds).encode()]:
                out.append(pid)
    return out


def _containers(client, token: str) -> list:
    # sparse: a container the engine removes between the listing and an inspect is no NotFound
    return client.containers.list(all=True, filters={"label": f"io.imagebuild.test-run={token}"}, sparse=True)


def _build(context, tmp_path, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "imagebuild", "build", "--quiet", "--context", str(context),
                             "--output", str(tmp_path / "out"), "--log-dir", str(tmp_path / "logs")],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_signals, **kw)


@pytest.mark.engine
@pytest.mark.parametrize("builder,sig", [("classic", signal.SIGINT), ("classic", signal.SIGTERM),
                                         ("buildkit", signal.SIGINT)])
def test_interrupted_build_stops_and_leaves_the_old_tag(docker_client, tmp_path, builder, sig):
    try:
        docker_client.images.get(BASE)
    except Exception:  # noqa: BLE001
        need(f"the base image {BASE}", "create it with `imagebuild base debian-bookworm`")
    token = uuid.uuid4().hex[:12]
    seconds = 3000 + int(token[:3], 16)  # a sleep no other process runs
    context = tmp_path / f"interrupt-{token}"
    context.mkdir()
    ref = f"imagebuild/interrupt-{token}:local"
    label = f"LABEL io.imagebuild.test-run={token}\n"
    (context / "Dockerfile").write_text(f"FROM {BASE}\n{label}RUN echo one > /one\n")
    first = _build(context, tmp_path)
    assert first.wait(timeout=600) == 0, first.stderr.read()
    old_id = docker_client.images.get(ref).id

    mount = "--mount=type=tmpfs,target=/scratch " if builder == "buildkit" else ""
    (context / "Dockerfile").write_text(f"FROM {BASE}\n{label}RUN {mount}echo two > /two && sleep {seconds}\n")
    proc = _build(context, tmp_path)
    try:
        deadline = time.monotonic() + 300
        while not _sleepers(seconds):  # the slow step is running
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "the slow build step never started"
            time.sleep(0.2)
        proc.send_signal(sig)
        t0 = time.monotonic()
        rc = proc.wait(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read()
    assert rc != 0
    assert err.strip().splitlines() == ["imagebuild build: interrupted"], err
    assert took < 20, f"took {took:.1f} s to stop"  # a generous bound: it stops at once
    # the step's process and the build's containers are gone (the engine removes them as it
    # cancels; give it a few seconds)
    deadline = time.monotonic() + 20
    while (_sleepers(seconds) or _containers(docker_client, token)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _sleepers(seconds) == []
    assert _containers(docker_client, token) == []
    assert docker_client.images.get(ref).id == old_id
    docker_client.images.remove(ref, force=True)
