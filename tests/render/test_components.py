"""A compiled component that only some images carry, built on others, is four edits in three files
(issue 47): its row in imagebuild/components.py (with `after` and `when`), its fragment, its
tarball in matrix.yaml and the switch a family turns on there. This plants one, `libfoo`: built
after NCCL and UCX and beneath Open MPI (Open MPI's row names it in `after`, as UCC's NCCL layer
would be placed), compiled only by the first communication family (`build: {foo: true}`), with an
environment variable of its own. It follows it through a fresh interpreter to everything that
must learn of it: the matrix's checks (its `tools:` entry is required by that family only), the
recipe (its devel step between NCCL and Open MPI, its prefix copied into the run-time stage and on
PATH, its ENV), the images that do not carry it, image.json (`built`) and the smoke suite (the
libraries check walks what image.json lists). Pure logic: nothing is built or downloaded. The
planted tarball entry is gdrcopy's own (url, sha256, source) under the new name, so the test
names no tarball that does not exist."""

from __future__ import annotations

import filecmp
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
OTHER = "pytorch-2.11.0-cu130-ubuntu24.04-runtime"   # another family: no switch
ROW = ('    Component("libfoo", "libfoo {version}", "/opt/libfoo", bin=True, lib=True,\n'
       '              after=(NCCL, "ucx"), when="foo", env=(("LIBFOO_HOME", "/opt/libfoo"),)),\n')
FRAGMENT = ("#workdir /tmp/build/libfoo\n#source {{ file }}\n"
            "tar -xf /tmp/sources/{{ file }} --strip-components=1\n"
            "make PREFIX={{ prefixes.libfoo }} CUDA_HOME={{ cuda_home }} NCCL_HOME={{ nccl_home }} "
            "UCX_HOME={{ prefixes.ucx }} install\n")
SWITCH = ("  - family: comms\n"
          "    description: \"communication base: CUDA, NCCL, nccl-tests, UCX and Open MPI, no PyTorch\"\n")


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> tuple[Path, Path, Path, Path]:
    """(a copy of the package with libfoo's row and fragment, a matrix with its tarball and the
    switch on, the same without the tarball, the same with neither)."""
    d = tmp_path_factory.mktemp("component")
    pkg = d / "pkg"
    shutil.copytree(ROOT / "imagebuild", pkg / "imagebuild", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    comp = pkg / "imagebuild" / "components.py"
    text = comp.read_text(encoding="utf-8")
    end = text.index("\n)\n", text.index("COMPONENTS: tuple[Component, ...] = ("))
    text = text[:end + 1] + ROW + text[end + 1:]                                    # edit 1: the row
    assert text.count('after=("ucx",), env=(("OMPI_MCA_osc"') == 1
    text = text.replace('after=("ucx",), env=(("OMPI_MCA_osc"', 'after=("ucx", "libfoo"), env=(("OMPI_MCA_osc"')
    comp.write_text(text, encoding="utf-8")                            # ... and Open MPI is built on it
    (pkg / "imagebuild" / "recipes" / "fragments" / "libfoo.sh.j2").write_text(FRAGMENT)  # edit 2
    matrix = (ROOT / "matrix.yaml").read_text(encoding="utf-8")
    line = next(ln for ln in matrix.splitlines() if ln.lstrip().startswith("gdrcopy: {version:"))
    assert matrix.count(SWITCH) == 1
    switched = matrix.replace(SWITCH, SWITCH + "    build: {foo: true}\n")          # edit 4: the switch
    neither = d / "neither.yaml"
    neither.write_text(matrix, encoding="utf-8")
    without = d / "without.yaml"
    without.write_text(switched, encoding="utf-8")
    with_foo = d / "matrix.yaml"                                                   # edit 3: the tarball
    with_foo.write_text(switched.replace(line, line + "\n" + line.replace("gdrcopy:", "libfoo:", 1)),
                        encoding="utf-8")
    shutil.copytree(ROOT / "locks", d / "locks")
    return pkg, with_foo, without, neither


def test_the_planted_component_is_two_files_of_the_package(planted):
    """The newcomer's edits, counted: of the package, components.py and the new fragment differ
    from the project's; the rest is matrix.yaml (the tarball and the switch)."""
    pkg, _, _, _ = planted
    changed = []

    def walk(cmp: filecmp.dircmp, rel: str) -> None:
        changed.extend(f"{rel}{n}" for n in cmp.diff_files + cmp.left_only + cmp.right_only
                       if n != "__pycache__")
        for name, sub in cmp.subdirs.items():
            if name != "__pycache__":
                walk(sub, f"{rel}{name}/")
    walk(filecmp.dircmp(pkg / "imagebuild", ROOT / "imagebuild"), "")
    assert sorted(changed) == ["components.py", "recipes/fragments/libfoo.sh.j2"]


def _run(pkg: Path, *args: str, code: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(pkg))
    argv = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "imagebuild", *args]
    return subprocess.run(argv, env=env, cwd=pkg.parent, capture_output=True, text=True, timeout=300)


def test_the_planted_package_is_the_one_that_runs(planted):
    pkg, _, _, _ = planted
    proc = _run(pkg, code="import imagebuild.components as c; print(c.__file__); "
                          "print(' '.join(x.name for x in c.COMPONENTS))")
    path, names = proc.stdout.splitlines()
    assert Path(path).is_relative_to(pkg) and names.split()[-1] == "libfoo", proc.stderr


def test_the_matrix_checks_learn_its_tarball(planted):
    pkg, with_foo, without, neither = planted
    ok = _run(pkg, "knowledge", "validate", "--matrix", str(with_foo))
    assert ok.returncode == 0, ok.stderr
    # the family that turns it on compiles it, so a matrix without its tarball is refused there
    missing = _run(pkg, "knowledge", "validate", "--matrix", str(without))
    assert missing.returncode == 2 and "tools.libfoo, which is missing" in missing.stderr, missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    # no family turns it on: no image compiles it, and its tarball is not asked for
    unused = _run(pkg, "knowledge", "validate", "--matrix", str(neither))
    assert unused.returncode == 0, unused.stderr
    # and its entry is held to a tarball's grammar, as gdrcopy's is
    bad = with_foo.parent / "bad.yaml"
    bad.write_text(with_foo.read_text(encoding="utf-8").replace(
        "libfoo: {version: \"", "libfoo: {version: \"v", 1), encoding="utf-8")
    refused = _run(pkg, "knowledge", "validate", "--matrix", str(bad))
    assert refused.returncode == 2 and "tools.libfoo.version" in refused.stderr, refused.stderr


def test_the_recipe_builds_copies_and_finds_it(planted, tmp_path):
    pkg, with_foo, _, _ = planted
    proc = _run(pkg, "generate", IMAGE, OTHER, "--matrix", str(with_foo), "--output", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "Dockerfiles" / IMAGE / "Dockerfile").read_text(encoding="utf-8")
    *_, devel, runtime = text.split("\nFROM ")[1:]
    version = re.search(r'libfoo: \{version: "([0-9.]+)"', with_foo.read_text()).group(1)
    # built on NCCL and UCX, beneath Open MPI (and so nccl-tests, which Open MPI is beneath)
    order = [devel.index(mark) for mark in ("# UCX ", "# NCCL ", f"# libfoo {version}",
                                            "# Open MPI ", "# nccl-tests ")]
    assert order == sorted(order), order
    assert "make PREFIX=/opt/libfoo CUDA_HOME=" in devel and "UCX_HOME=/opt/ucx install" in devel
    assert "COPY --from=devel /opt/libfoo /opt/libfoo\n" in runtime
    assert re.search(r'PATH="[^"]*/opt/libfoo/bin:', runtime)
    assert re.search(r'LD_LIBRARY_PATH="[^"]*/opt/libfoo/lib:', runtime)
    assert 'LIBFOO_HOME="/opt/libfoo"' in runtime
    sif = (tmp_path / "singularity" / f"{IMAGE}.def").read_text(encoding="utf-8")
    assert "make PREFIX=/opt/libfoo" in sif and "/opt/libfoo" in sif
    # the family without the switch: nothing of it, Open MPI before NCCL as before
    other = (tmp_path / "Dockerfiles" / OTHER / "Dockerfile").read_text(encoding="utf-8")
    assert "libfoo" not in other.lower()
    assert other.index("# Open MPI ") < other.index("# NCCL ")


def test_image_json_lists_it_and_the_smoke_suite_walks_it(planted):
    pkg, with_foo, _, _ = planted
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
    assert out["built"] == ["/opt/gdrcopy", "/opt/ucx", "/opt/libfoo", "/opt/openmpi", "/opt/nccl-tests"]
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
