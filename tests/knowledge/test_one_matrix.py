"""One matrix per run: `generate --matrix B` and the build contexts of `build --matrix B` are rendered
from B alone, even with another matrix.yaml in the same folder (issue 14: write_context used to
reload <folder>/matrix.yaml, so a build mixed the tools of two matrices)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from imagebuild import cli, knowledge
from imagebuild.deliver import lockfile
from imagebuild.knowledge import grammar, loader
from imagebuild.render import renderer as render

from conftest import ROOT

A_VERSION, A_SHA = "2.5.1", "c6d5ebb7dabb89d798f27609511735595004da73af28d93ac041bb5290c4cbec"
B_VERSION, B_SHA = "2.5.2", "b" * 64
IMAGE = "pytorch-2.13.0-cu130-ubuntu24.04-runtime"   # compiles gdrcopy from its tarball


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A project folder holding A (matrix.yaml, the repository's) and B (other.yaml: the same but for
    the gdrcopy tool's version, URL and sha256), with the wheel locks both refer to."""
    d = tmp_path_factory.mktemp("two-matrices")
    text = (ROOT / "matrix.yaml").read_text(encoding="utf-8")
    line = next(ln for ln in text.splitlines() if ln.lstrip().startswith("gdrcopy: {version:"))
    assert f'version: "{A_VERSION}"' in line and A_SHA in line, "the test's premise: A's gdrcopy"
    b_line = (line.replace(f'version: "{A_VERSION}"', f'version: "{B_VERSION}"')
              .replace("archive/v{version}", "archive/refs/tags/v{version}").replace(A_SHA, B_SHA))
    (d / "matrix.yaml").write_text(text, encoding="utf-8")
    (d / "other.yaml").write_text(text.replace(line, b_line), encoding="utf-8")
    shutil.copytree(ROOT / "locks", d / "locks")
    return d


def _reads(monkeypatch) -> list[str]:
    """The matrix files read from now on: knowledge.load opens each once (loader.read_bytes, also
    when its knowledge then comes from the cache); grammar.read_text reads only when it is given
    no bytes (a file load could not open)."""
    seen: list[str] = []
    real_bytes, real_text = loader.read_bytes, grammar.read_text

    def spy_bytes(path, *a, **kw):
        seen.append(str(Path(path).resolve()))
        return real_bytes(path, *a, **kw)

    def spy_text(path, data=None):
        if data is None:
            seen.append(str(Path(path).resolve()))
        return real_text(path, data)

    monkeypatch.setattr(loader, "read_bytes", spy_bytes)
    monkeypatch.setattr(grammar, "read_text", spy_text)
    return seen


def _text_under(folder: Path) -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(folder.rglob("*"))
                     if p.is_file() and p.suffix in ("", ".def", ".json"))


def test_generate_uses_only_the_named_matrix(project, tmp_path, monkeypatch, capsys):
    reads = _reads(monkeypatch)
    out = tmp_path / "out"
    assert cli.main(["generate", IMAGE, "--matrix", str(project / "other.yaml"),
                     "--output", str(out)]) == 0
    assert reads == [str(project / "other.yaml")]          # loaded once, nothing else read
    docker = (out / "Dockerfiles" / IMAGE / "Dockerfile").read_text(encoding="utf-8")
    assert f"# gdrcopy {B_VERSION} (user space)" in docker
    assert f'echo "{B_SHA}  /tmp/sources/gdrcopy-{B_VERSION}.tar.gz"' in docker
    text = _text_under(out)
    assert A_SHA not in text and f"gdrcopy/archive/v{A_VERSION}" not in text
    assert (out / "singularity" / f"{IMAGE}.def").is_file()


def test_generate_of_a_differs_only_in_the_tool(project, tmp_path, capsys):
    """The same run with A gives A's Dockerfile, and the two differ in the gdrcopy lines only."""
    for name in ("matrix.yaml", "other.yaml"):
        assert cli.main(["generate", IMAGE, "--matrix", str(project / name),
                         "--output", str(tmp_path / name)]) == 0
    a = (tmp_path / "matrix.yaml" / "Dockerfiles" / IMAGE / "Dockerfile").read_text().splitlines()
    b = (tmp_path / "other.yaml" / "Dockerfiles" / IMAGE / "Dockerfile").read_text().splitlines()
    assert len(a) == len(b)
    differ = [(x, y) for x, y in zip(a, b) if x != y]
    assert len(differ) == 3 and all("gdrcopy" in x and "gdrcopy" in y for x, y in differ)


def test_build_context_uses_only_the_named_matrix(project, tmp_path, monkeypatch):
    """What `imagebuild build --matrix other.yaml` builds: the contexts jobs_for writes from the
    run's one loaded matrix. Nothing is read again while they are written."""
    from imagebuild.cli.commands.build import jobs_for
    k = knowledge.load(project / "other.yaml")
    reads = _reads(monkeypatch)
    jobs = jobs_for([IMAGE], k, tmp_path / "ctx")
    assert reads == []
    assert [j.image_id for j in jobs] == [IMAGE]
    ctx = jobs[0].context
    docker = (ctx / "Dockerfile").read_text(encoding="utf-8")
    assert f'echo "{B_SHA}  /tmp/sources/gdrcopy-{B_VERSION}.tar.gz"' in docker
    assert A_SHA not in docker
    assert A_SHA not in _text_under(ctx)
    # the smoke suite comes from the installed package, whatever folder the matrix is in
    pkg = render.package_files()
    assert (ctx / "lib" / "imagebuild" / "smoke" / "__main__.py").read_bytes() == \
        (pkg / "smoke" / "__main__.py").read_bytes()


def test_build_reads_the_named_matrix_once(project, tmp_path, monkeypatch, capsys):
    """`imagebuild build --matrix other.yaml` up to the builds: the jobs handed to build_all were
    rendered from B, and B was read once and alone. Stopped where the builds would start: no engine
    is asked anything (get_engine gives a stand-in that fails on any use)."""
    from imagebuild.builder import scheduler as build_mod
    import imagebuild.engines as engines

    handed = []

    class Stop(Exception):
        pass

    class NoEngine:
        def __getattr__(self, name):
            raise AssertionError(f"the engine was used ({name}) before the builds")

    def fake_build_all(jobs, **kw):
        handed.extend(jobs)
        raise Stop()

    monkeypatch.setattr(engines, "get_engine", lambda *a, **kw: NoEngine())
    monkeypatch.setattr(build_mod, "build_all", fake_build_all)
    reads = _reads(monkeypatch)
    with pytest.raises(Stop):
        cli.main(["build", IMAGE, "--matrix", str(project / "other.yaml"),
                  "--output", str(tmp_path / "out"), "--log-dir", str(tmp_path / "logs")])
    assert reads == [str(project / "other.yaml")]
    assert [j.image_id for j in handed] == [IMAGE]
    docker = (handed[0].context / "Dockerfile").read_text(encoding="utf-8")
    assert f'echo "{B_SHA}  /tmp/sources/gdrcopy-{B_VERSION}.tar.gz"' in docker
    assert A_SHA not in docker
    assert A_SHA not in _text_under(handed[0].context)


def test_test_command_reads_the_matrix_once(project, monkeypatch):
    """`imagebuild test id1 id2 ref` turns ids into references from one load of the named matrix."""
    from imagebuild.cli.commands.test import _refs_for
    from imagebuild.render.images import expand
    specs = {s.id: s for s in expand(knowledge.load(project / "other.yaml"))[0]}
    reads = _reads(monkeypatch)
    refs = _refs_for(["smoke-cpu", IMAGE, "example/x:1"], str(project / "other.yaml"))
    assert reads == [str(project / "other.yaml")]
    assert refs == [specs["smoke-cpu"].local_ref, specs[IMAGE].local_ref, "example/x:1"]
    assert _refs_for(["example/x:1"], str(project / "missing.yaml")) == ["example/x:1"]


def test_lock_reads_the_matrix_once(project, tmp_path, monkeypatch, capsys):
    """`imagebuild lock id1 id2` lists and looks up its images and hashes each recipe for its
    provenance from one load of the named matrix (the recipe's hash used to load it again)."""
    from imagebuild.deliver import lockfile
    assert cli.main(["generate", IMAGE, "smoke-cpu", "--matrix", str(project / "other.yaml")]) == 0
    reads = _reads(monkeypatch)
    lock = tmp_path / "images.lock"
    assert cli.main(["lock", IMAGE, "smoke-cpu", "--no-engine", "--matrix", str(project / "other.yaml"),
                     "--lock", str(lock), "--reports-dir", str(tmp_path),
                     "--sbom-dir", str(tmp_path)]) == 0, capsys.readouterr().err
    assert reads == [str(project / "other.yaml")]
    entries = lockfile.read_lock(lock)
    assert sorted(entries) == sorted([IMAGE, "smoke-cpu"])
    assert all(len(e["provenance"]["recipe_sha256"]) == 64 for e in entries.values())
    capsys.readouterr()
    assert cli.main(["lock", "nope", "--no-engine", "--matrix", str(project / "other.yaml"),
                     "--lock", str(lock)]) == 2
    err = capsys.readouterr().err
    assert "unknown image 'nope'" in err and "other.yaml" in err and len(err.splitlines()) == 1


def test_the_other_commands_read_the_matrix_once(project, tmp_path, monkeypatch, capsys):
    """Every command that looks images up by id reads the named matrix once (the run value,
    render/run.py, is made once and passed down)."""
    other = str(project / "other.yaml")
    empty = tmp_path / "empty.lock"
    empty.write_text(lockfile.dumps({}), encoding="utf-8")
    for argv, code in ((["tags", IMAGE], 0), (["images"], 0), (["resolve", "--driver", "580.65.06"], 0),
                       (["slurm-script", "smoke-cpu", "--nodes", "2", "--gpus-per-node", "1",
                         "--output", str(tmp_path / "job.sbatch")], 0),
                       # an empty lock: nothing to offer is exit 1, after the matrix was read
                       (["find", "--driver", "580.65.06", "--gpu", "NVIDIA H100 80GB HBM3",
                         "--lock", str(empty)], 1)):
        reads = _reads(monkeypatch)
        rc = cli.main([*argv, "--matrix", other])
        err = capsys.readouterr().err
        assert rc == code and reads == [other], (argv, err)
        monkeypatch.undo()


def test_a_missing_matrix_is_one_line(tmp_path, capsys):
    rc = cli.main(["generate", "--matrix", str(tmp_path / "nope.yaml"), "--output", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "nope.yaml" in err
    assert "Traceback" not in err
