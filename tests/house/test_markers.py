"""Service markers are complete: with no engine, no registry and no Slurm, and CI=true (where a
test that needs a service fails instead of skipping), everything that `-m "not engine and not
registry and not slurm"` selects passes; and a test that needs the engine fails there rather than
skip. Runs pytest itself, on the files whose tests use the services."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT

FILES = ["tests/deliver/test_export.py", "tests/builder/test_base.py", "tests/builder/test_engine.py", "tests/builder/test_build.py",
         "tests/builder/test_build_interrupt.py", "tests/builder/test_build_locked.py", "tests/deliver/test_slurm.py",
         "tests/deliver/test_lockfile.py", "tests/smoke/test_smoke_image.py", "tests/deliver/test_publish.py"]


def _pytest(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, CI="true", DOCKER_HOST="unix:///nonexistent/imagebuild-no-engine.sock")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def test_unmarked_tests_need_no_service():
    run = _pytest("-m", "not engine and not registry and not slurm", *FILES)
    assert run.returncode == 0, run.stdout[-3000:]
    assert " deselected" in run.stdout  # the service tests were there, and left out


def test_an_engine_test_fails_under_ci_without_an_engine():
    run = _pytest("-m", "engine", "tests/deliver/test_export.py", "-k", "sqsh_is_reproducible")
    assert run.returncode == 1, run.stdout[-3000:]
    assert "is required under CI=true" in run.stdout
