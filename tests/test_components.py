"""A compiled component is three files (issue 26): a row in imagebuild/components.py, its fragment
and its tarball in matrix.yaml. This plants one, `libfoo`, in a copy of the package and follows it
through a fresh interpreter to everything that must learn of it: the matrix's checks (its
`tools:` entry is accepted, and required for CUDA images), the recipe (its devel step after NCCL,
its prefix copied into the run-time stage and on PATH), image.json (`built`) and the smoke suite
(the libraries check walks what image.json lists). Pure logic: nothing is built or downloaded.
The planted tarball entry is gdrcopy's own (url, sha256, source) under the new name, so the test
names no tarball that does not exist."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

IMAGE = "comms-cu130-nccl2.30.7-ubuntu24.04-runtime"   # compiles UCX, Open MPI, gdrcopy, nccl-tests
ROW = '    Component("libfoo", "libfoo {version}", "/opt/libfoo", bin=True, lib=True, on_nccl=True),\n'
FRAGMENT = ("#workdir /tmp/build/libfoo\n#source {{ file }}\n"
            "tar -xf /tmp/sources/{{ file }} --strip-components=1\n"
            "make PREFIX=/opt/libfoo CUDA_HOME={{ cuda_home }} NCCL_HOME={{ nccl_home }} install\n")


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(a copy of the package with libfoo's row and fragment, a matrix with its tarball, the same
    matrix without it)."""
    d = tmp_path_factory.mktemp("component")
    pkg = d / "pkg"
    shutil.copytree(ROOT / "imagebuild", pkg / "imagebuild", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    comp = pkg / "imagebuild" / "components.py"
    text = comp.read_text(encoding="utf-8")
    end = text.index("\n)\n", text.index("COMPONENTS: tuple[Component, ...] = ("))
    comp.write_text(text[:end + 1] + ROW + text[end + 1:], encoding="utf-8")     # file 1: the row
    (pkg / "imagebuild" / "recipes" / "fragments" / "libfoo.sh.j2").write_text(FRAGMENT)  # file 2
    matrix = (ROOT / "matrix.yaml").read_text(encoding="utf-8")
    line = next(ln for ln in matrix.splitlines() if ln.lstrip().startswith("gdrcopy: {version:"))
    without = d / "without.yaml"
    without.write_text(matrix, encoding="utf-8")
    with_foo = d / "matrix.yaml"                                                   # file 3: the tarball
    with_foo.write_text(matrix.replace(line, line + "\n" + line.replace("gdrcopy:", "libfoo:", 1)),
                        encoding="utf-8")
    shutil.copytree(ROOT / "locks", d / "locks")
    return pkg, with_foo, without


def _run(pkg: Path, *args: str, code: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(pkg))
    argv = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "imagebuild", *args]
    return subprocess.run(argv, env=env, cwd=pkg.parent, capture_output=True, text=True, timeout=300)


def test_the_planted_package_is_the_one_that_runs(planted):
    pkg, _, _ = planted
    proc = _run(pkg, code="import imagebuild.components as c; print(c.__file__); "
                          "print(' '.join(x.name for x in c.COMPONENTS))")
    path, names = proc.stdout.splitlines()
    assert Path(path).is_relative_to(pkg) and names.split()[-1] == "libfoo", proc.stderr


def test_the_matrix_checks_learn_its_tarball(planted):
    pkg, with_foo, without = planted
    ok = _run(pkg, "knowledge", "validate", "--matrix", str(with_foo))
    assert ok.returncode == 0, ok.stderr
    # every CUDA image compiles it, so a matrix without its tarball is refused on its family
    missing = _run(pkg, "knowledge", "validate", "--matrix", str(without))
    assert missing.returncode == 2 and "tools.libfoo, which is missing" in missing.stderr, missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    # and its entry is held to a tarball's grammar, as gdrcopy's is
    bad = with_foo.parent / "bad.yaml"
    bad.write_text(with_foo.read_text(encoding="utf-8").replace(
        "libfoo: {version: \"", "libfoo: {version: \"v", 1), encoding="utf-8")
    refused = _run(pkg, "knowledge", "validate", "--matrix", str(bad))
    assert refused.returncode == 2 and "tools.libfoo.version" in refused.stderr, refused.stderr


def test_the_recipe_builds_copies_and_finds_it(planted, tmp_path):
    pkg, with_foo, _ = planted
    proc = _run(pkg, "generate", IMAGE, "--matrix", str(with_foo), "--output", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "Dockerfiles" / IMAGE / "Dockerfile").read_text(encoding="utf-8")
    *_, devel, runtime = text.split("\nFROM ")[1:]
    version = re.search(r'libfoo: \{version: "([0-9.]+)"', with_foo.read_text()).group(1)
    assert devel.index("# nccl-tests ") < devel.index(f"# libfoo {version}")   # built on NCCL
    assert "make PREFIX=/opt/libfoo CUDA_HOME=" in devel
    assert "COPY --from=devel /opt/libfoo /opt/libfoo\n" in runtime
    assert re.search(r'PATH="[^"]*/opt/libfoo/bin:', runtime)
    assert re.search(r'LD_LIBRARY_PATH="[^"]*/opt/libfoo/lib:', runtime)
    sif = (tmp_path / "singularity" / f"{IMAGE}.def").read_text(encoding="utf-8")
    assert "make PREFIX=/opt/libfoo" in sif and "/opt/libfoo" in sif


def test_image_json_lists_it_and_the_smoke_suite_walks_it(planted):
    pkg, with_foo, _ = planted
    code = ("import json, sys\n"
            "from imagebuild.render.run import MatrixRun\n"
            "from imagebuild.smoke import libs\n"
            "from imagebuild.smoke.context import Context\n"
            f"doc = MatrixRun.open(sys.argv[1]).images[{IMAGE!r}].image_json\n"
            "ctx = Context(expectation=doc)\n"
            "print(json.dumps({'built': doc['built'], 'walked': list(ctx.built_trees(libs.BUILT_TREES))}))\n")
    proc = _run(pkg, str(with_foo), code=code)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["built"] == ["/opt/gdrcopy", "/opt/ucx", "/opt/openmpi", "/opt/nccl-tests", "/opt/libfoo"]
    assert out["walked"] == out["built"]


def test_the_libraries_check_walks_the_trees_image_json_names(tmp_path):
    """The check itself, on a tree of this host: an ELF copied into a folder image.json names is
    read and reported; the fallback list is not walked when image.json has its own."""
    from imagebuild.smoke import checks
    from imagebuild.smoke.context import Context

    tree = tmp_path / "opt" / "libfoo"
    (tree / "bin").mkdir(parents=True)
    shutil.copy2(shutil.which("true"), tree / "bin" / "true")
    ctx = Context(expectation={"stack": {}, "built": [str(tree)]}, timeout=120)
    ctx.start_clock()
    result = checks.check_libraries(ctx)
    assert f"{tree}: 1 ELF files resolve" in result.detail, result.detail
    assert "/opt/ucx:" not in result.detail
