"""A wheel install works (issue 14): the wheel carries the recipe templates, the smoke suite and
py.typed as package data; installed into a fresh virtual environment and run from a folder that is
not the repository (the package comes from the wheel, never from the source tree), `resolve` and
`generate` answer as the checkout does, byte for byte, and nothing is written beside the install.

Nothing here can skip: no network is used (the wheel is built without build isolation, installed
with --no-index, its dependencies come from the system site-packages the venv sees)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from imagebuild import cli

from conftest import RECIPES, ROOT, answer

IMAGES = ("smoke-cpu", "pytorch-2.13.0-cu130-ubuntu24.04-runtime")


def _env() -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "IMAGEBUILD_MATRIX")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _run(argv, cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"{argv[:4]} -> {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv python, venv imagebuild, its site-packages, a project folder with a matrix copy)."""
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"      # a copy of what the build reads: the checkout stays untouched
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "imagebuild", src / "imagebuild", ignore=ignore)   # templates included
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
          "-w", base / "dist", src], cwd=base)
    wheels = list((base / "dist").glob("imagebuild-*.whl"))
    assert len(wheels) == 1
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", venv], cwd=base)
    py = venv / "bin" / "python"
    _run([py, "-m", "pip", "install", "--no-deps", "--no-index", "--force-reinstall", wheels[0]], cwd=base)
    site = Path(_run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     cwd=base).stdout.strip())
    project = base / "project"
    project.mkdir()
    shutil.copy2(ROOT / "matrix.yaml", project / "matrix.yaml")
    shutil.copytree(ROOT / "locks", project / "locks")
    return py, venv / "bin" / "imagebuild", site, project, wheels[0]


def test_the_wheel_carries_its_package_data(installed):
    *_, wheel = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "imagebuild/py.typed" in names
    assert "imagebuild/smoke/workers/probe.py" in names
    templates = sorted(str(p.relative_to(ROOT)) for p in RECIPES.rglob("*.j2"))
    assert templates and set(templates) <= names


def test_the_package_comes_from_the_wheel(installed, tmp_path):
    py, _, site, _, _ = installed
    where = _run([py, "-c", "import imagebuild; print(imagebuild.__file__)"], cwd=tmp_path).stdout.strip()
    assert Path(where) == site / "imagebuild" / "__init__.py"
    assert not Path(where).resolve().is_relative_to(ROOT.resolve())


def test_resolve_from_the_wheel(installed, capsys):
    _, exe, _, project, _ = installed
    argv = ["resolve", "--driver", "535.104.05", "--gpu", "H100", "--matrix", project / "matrix.yaml"]
    got = _run([exe, *argv], cwd=project).stdout
    assert cli.main([str(a) for a in argv]) == 0
    assert got == capsys.readouterr().out and "cuda" in got.lower()


def test_generate_from_the_wheel_is_byte_identical(installed, tmp_path, capsys):
    _, exe, site, project, _ = installed
    out = tmp_path / "wheel-out"
    _run([exe, "generate", "--matrix", project / "matrix.yaml", "--output", out], cwd=project)
    ref = tmp_path / "checkout-out"
    assert cli.main(["generate", "--matrix", str(project / "matrix.yaml"), "--output", str(ref)]) == 0

    def tree(d: Path) -> dict[str, bytes]:
        return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}

    got = tree(out)
    assert got and got == tree(ref)
    for image in IMAGES:      # and the committed recipes of two images, byte for byte
        assert got[f"Dockerfiles/{image}/Dockerfile"] == (ROOT / "Dockerfiles" / image / "Dockerfile").read_bytes()
        assert got[f"singularity/{image}.def"] == (ROOT / "singularity" / f"{image}.def").read_bytes()
    # state goes to the project (or --output), never beside the installed package
    assert not (site / ".imagebuild").exists() and not (site / "Dockerfiles").exists()


def test_a_build_context_from_the_wheel(installed, tmp_path):
    """What `imagebuild build` hands the engine, written by the installed package: the smoke suite
    is copied from the install, the Dockerfile is the committed one."""
    py, _, site, project, _ = installed
    code = ("import sys; from imagebuild.knowledge import load; "
            "from imagebuild.cli.commands.build import jobs_for; "
            f"j = jobs_for([{IMAGES[1]!r}], load(sys.argv[1]), sys.argv[2]); print(j[0].context)")
    ctx = Path(_run([py, "-c", code, project / "matrix.yaml", tmp_path / "ctx"], cwd=project).stdout.strip())
    assert (ctx / "Dockerfile").read_bytes() == (ROOT / "Dockerfiles" / IMAGES[1] / "Dockerfile").read_bytes()
    assert (ctx / "lib" / "imagebuild" / "smoke" / "__main__.py").read_bytes() == \
        (site / "imagebuild" / "smoke" / "__main__.py").read_bytes()
    assert (ctx / "image.json").is_file()


def test_bad_input_from_the_wheel_is_one_line(installed, tmp_path):
    _, exe, *_ = installed
    proc = subprocess.run([str(exe), "generate", "--matrix", str(tmp_path / "missing.yaml")], cwd=tmp_path,
                          env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "missing.yaml" in proc.stderr and "Traceback" not in proc.stderr


def test_the_wheel_answers_with_its_own_knowledge(installed, tmp_path):
    """A cluster node has no checkout: from an empty folder, with no --matrix and no
    $IMAGEBUILD_MATRIX, the installed package answers from the matrix it was built with, and says so."""
    _, exe, site, _, wheel = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "imagebuild/data/matrix.yaml" in names
    assert {f"imagebuild/data/locks/wheels/{p.name}" for p in (ROOT / "locks" / "wheels").iterdir()} <= names
    packaged = site / "imagebuild" / "data" / "matrix.yaml"
    assert not packaged.is_symlink() and packaged.read_bytes() == (ROOT / "matrix.yaml").read_bytes()
    which = answer(_run([exe, "knowledge", "which", "--json"], cwd=tmp_path).stdout, "knowledge which")
    assert which["origin"] == "packaged" and Path(which["path"]) == packaged
    out = _run([exe, "resolve", "--driver", "580.95.05", "--gpu", "H100", "--json"], cwd=tmp_path).stdout
    envelope = json.loads(out)                              # what every command's --json holds
    assert envelope["knowledge"]["origin"] == "packaged" and envelope["knowledge"]["as_of"]
    doc = answer(out, "resolve")
    assert doc["ok"] and doc["image"]["id"]
    _run([exe, "generate", "smoke-cpu"], cwd=tmp_path)      # the state goes here, not to site
    assert (tmp_path / "Dockerfiles" / "smoke-cpu" / "Dockerfile").is_file()
    assert not (site / "imagebuild" / "data" / "Dockerfiles").exists()


def test_a_pip_installed_ci_flow_needs_no_checkout(installed, tmp_path):
    """From the wheel in an empty folder, with the packaged matrix: `lock` renders the recipe it
    hashes (no `generate` first) and reads the wheel lock from the package, writing ./images.lock;
    `notes` prints the page with what that lock records. (An engine-free lock: `build` from the
    wheel is tests/house/test_wheel_install.py's heavy case.)"""
    import hashlib

    py, exe, site, _, _ = installed
    out = _run([exe, "lock", "smoke-cpu", "--no-engine", "--json"], cwd=tmp_path).stdout
    assert answer(out, "lock")["lock"] == str(tmp_path / "images.lock")
    entry = json.loads((tmp_path / "images.lock").read_text())["images"]["smoke-cpu"]
    code = ("import sys; from imagebuild.render.run import MatrixRun; "
            "from imagebuild.render.renderer import Renderer; r = MatrixRun.open(sys.argv[1]); "
            "sys.stdout.write(Renderer().dockerfile(r.images['smoke-cpu'], r.k))")
    rendered = _run([py, "-c", code, str(site / "imagebuild" / "data" / "matrix.yaml")],
                    cwd=tmp_path).stdout
    assert entry["dockerfile_sha256"] == hashlib.sha256(rendered.encode()).hexdigest()
    lock_name = next(p for p in (site / "imagebuild" / "data" / "locks" / "wheels").iterdir()
                     if p.name.startswith("torch-2.13.0-cpu-"))
    assert entry["provenance"]["wheel_lock_sha256"] == hashlib.sha256(lock_name.read_bytes()).hexdigest()
    assert not (tmp_path / "Dockerfiles").exists()          # nothing generated was needed
    page = _run([exe, "notes", "smoke-cpu"], cwd=tmp_path).stdout
    assert page.startswith("# smoke-cpu\n") and "## What it was proven with" in page
    assert "Not in images.lock" not in page                 # the lock written above is read


@pytest.mark.heavy
def test_build_and_lock_from_the_wheel_in_an_empty_folder(installed, tmp_path):
    """The whole pip-installed flow on the real engine: build, then lock with the engine's ids."""
    _, exe, _, _, _ = installed
    _run([exe, "build", "smoke-cpu"], cwd=tmp_path)
    _run([exe, "lock", "smoke-cpu"], cwd=tmp_path)
    entry = json.loads((tmp_path / "images.lock").read_text())["images"]["smoke-cpu"]
    assert entry["image_id"] and entry["image_id"].startswith("sha256:")
