"""Labels come from facts or are left out: org.opencontainers.image.source is matrix.yaml's
`project.source` in the recipes, else (at build time only) the https `origin` of the project's git
clone with its credentials removed, else absent. Real git repositories, the real renderer."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from imagebuild import cli, knowledge
from imagebuild.render import images, renderer as render
from imagebuild.cli.commands.build import build_labels
from imagebuild.errors import KnowledgeError

ROOT = Path(__file__).resolve().parents[2]
LABEL = images.SOURCE_LABEL


def _project(tmp_path: Path, source: str | None) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    shutil.copytree(ROOT / "locks", root / "locks")      # the templates come with the package
    text = (ROOT / "matrix.yaml").read_text()
    if source is not None:
        text = text.replace("\nas_of:", f"\nproject:\n  source: {source}\nas_of:", 1)
    (root / "matrix.yaml").write_text(text)
    return root


def _git(folder: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True)


def _smoke(root: Path):
    k = knowledge.load(root / "matrix.yaml")
    return {s.id: s for s in images.expand(k)[0]}["smoke-cpu"], k


def test_no_source_is_invented(tmp_path):
    root = _project(tmp_path, None)
    spec, k = _smoke(root)
    assert LABEL not in spec.labels
    docker = render.Renderer().dockerfile(spec, k)
    assert "image.source" not in docker and "org.opencontainers.image.title" in docker
    # not a git clone: nothing added at build time either
    assert build_labels(spec, root) == {}
    # the committed recipes hold no made-up repository
    for path in [*ROOT.glob("Dockerfiles/*/Dockerfile"), *ROOT.glob("singularity/*.def")]:
        assert "image.source" not in path.read_text(), path


def test_the_matrix_states_the_source(tmp_path):
    url = "https://git.example.org/hpc/images"
    root = _project(tmp_path, url)
    spec, k = _smoke(root)
    assert spec.labels[LABEL] == url
    r = render.Renderer()
    first = r.dockerfile(spec, k)
    assert f'{LABEL}="{url}"' in first
    assert f"{LABEL} {url}" in r.singularity(spec, k)
    # deterministic: the same matrix, the same bytes; and the build adds nothing over it
    assert render.Renderer().dockerfile(_smoke(root)[0], knowledge.load(root / "matrix.yaml")) == first
    assert build_labels(spec, root) == {}


@pytest.mark.parametrize("bad", ['"https://x.example/a\\nRUN id"', "http://x.example/a",
                                 "https://user:tok@x.example/a", "[1, 2]"])
def test_a_bad_project_source_is_one_line_naming_its_line(tmp_path, capsys, bad):
    root = _project(tmp_path, bad)
    line = (root / "matrix.yaml").read_text().splitlines().index(f"  source: {bad}") + 1
    with pytest.raises(KnowledgeError) as err:
        knowledge.load(root / "matrix.yaml")
    assert err.value.line == line and "project" in str(err.value)
    assert cli.main(["knowledge", "validate", "--matrix", str(root / "matrix.yaml")]) == 2
    out = capsys.readouterr().err.strip().splitlines()
    assert len(out) == 1 and f"matrix.yaml:{line}" in out[0], out
    assert "tok" not in out[0] or "***" in out[0]


def test_unknown_project_keys_are_refused(tmp_path):
    root = _project(tmp_path, "https://git.example.org/a")
    text = (root / "matrix.yaml").read_text().replace("  source: https://git.example.org/a",
                                                      "  source: https://git.example.org/a\n  homepage: x")
    (root / "matrix.yaml").write_text(text)
    with pytest.raises(KnowledgeError, match="project: unknown key 'homepage'"):
        knowledge.load(root / "matrix.yaml")


def test_git_origin_is_a_build_time_fact_without_credentials(tmp_path):
    if shutil.which("git") is None:
        pytest.fail("git is needed (Debian package git)")
    root = _project(tmp_path, None)
    _git(root, "init", "-q")
    spec, k = _smoke(root)
    images.git_source_url.cache_clear()
    assert build_labels(spec, root) == {}                       # a clone without origin
    cases = [("https://ci-user:Tok-9z@git.example.org/hpc/images.git", "https://git.example.org/hpc/images.git"),
             ("https://git.example.org/hpc/images", "https://git.example.org/hpc/images"),
             ("git@git.example.org:hpc/images.git", None),     # ssh: not a URL a label can hold
             ("https://git.example.org/hpc/a%22b c", None)]      # refused by the URL grammar
    _git(root, "remote", "add", "origin", cases[0][0])
    for remote, want in cases:
        _git(root, "remote", "set-url", "origin", remote)
        images.git_source_url.cache_clear()
        assert build_labels(spec, root) == ({LABEL: want} if want else {}), remote
    # the recipe never depends on the clone: same bytes with and without a remote
    images.git_source_url.cache_clear()
    assert LABEL not in render.Renderer().dockerfile(spec, k)
