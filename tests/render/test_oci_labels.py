"""OCI labels by the spec (org.opencontainers.image.*): `created` is an RFC 3339 date-time of the
source date (the matrix's as_of), `licenses` only when matrix.yaml states it (an SPDX expression,
checked by the grammar), `revision` only at build time from a clean checkout; no label holds a
placeholder. (`base.name`/`base.digest` on a real build: tests/builder/test_reproducible.py.)"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from imagebuild.render import images, renderer as render
from imagebuild import knowledge
from imagebuild.cli.commands.build import build_labels
from imagebuild.errors import KnowledgeError

ROOT = Path(__file__).resolve().parents[2]
RFC3339 = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?(?:Z|[+-][0-9]{2}:[0-9]{2})")


def _project(tmp_path: Path, project: str | None) -> Path:
    root = tmp_path / "project"
    root.mkdir(parents=True)
    shutil.copytree(ROOT / "locks", root / "locks")      # the templates come with the package
    text = (ROOT / "matrix.yaml").read_text()
    if project is not None:
        text = text.replace("\nas_of:", f"\nproject:\n{project}\nas_of:", 1)
    (root / "matrix.yaml").write_text(text)
    return root


def _smoke(root: Path):
    k = knowledge.load(root / "matrix.yaml")
    return {s.id: s for s in images.expand(k)[0]}["smoke-cpu"], k


def test_created_is_rfc3339_of_the_as_of_day():
    k = knowledge.load(ROOT / "matrix.yaml")
    spec = {s.id: s for s in images.expand(k)[0]}["smoke-cpu"]
    created = spec.labels["org.opencontainers.image.created"]
    assert RFC3339.fullmatch(created) and created == f"{k.as_of}T00:00:00Z"


def test_committed_recipes_hold_no_placeholder_and_an_rfc3339_created():
    paths = [*ROOT.glob("Dockerfiles/*/Dockerfile"), *ROOT.glob("singularity/*.def")]
    assert paths
    for path in paths:
        text = path.read_text()
        found = re.findall(r'org\.opencontainers\.image\.([a-z.]+)[= ]"?([^"\n\\]*)', text)
        assert found, path
        for key, value in found:
            value = value.strip()
            assert value and value.lower() not in ("unknown", "none", "n/a", "todo", "noassertion"), (path, key)
            if key == "created":
                assert RFC3339.fullmatch(value), (path, value)
        assert "image.licenses" not in text, path     # matrix.yaml states no licenses: none invented


def test_licenses_only_when_the_matrix_states_them(tmp_path):
    spec, k = _smoke(_project(tmp_path / "none", None))
    assert "org.opencontainers.image.licenses" not in spec.labels
    expr = "(MIT OR Apache-2.0) AND BSD-3-Clause"
    spec, k = _smoke(_project(tmp_path / "some", f'  licenses: "{expr}"'))
    assert spec.labels["org.opencontainers.image.licenses"] == expr
    assert f'org.opencontainers.image.licenses="{expr}"' in render.Renderer().dockerfile(spec, k)


@pytest.mark.parametrize("bad", ['"MIT; id"', '"(MIT"', "NOASSERTION", '"MIT or BSD"', "[MIT]"])
def test_a_bad_licenses_value_is_one_line_naming_its_line(tmp_path, bad):
    root = _project(tmp_path, f"  licenses: {bad}")
    line = (root / "matrix.yaml").read_text().splitlines().index(f"  licenses: {bad}") + 1
    with pytest.raises(KnowledgeError) as info:
        knowledge.load(root / "matrix.yaml")
    text = str(info.value)
    assert "\n" not in text and "licenses" in text and f":{line}" in text, text


def test_revision_is_the_commit_of_a_clean_checkout_only(tmp_path):
    root = _project(tmp_path, None)
    spec, _ = _smoke(root)
    assert "org.opencontainers.image.revision" not in build_labels(spec, root)   # not a checkout
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "c"], check=True)
    head = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert build_labels(spec, root) == {"org.opencontainers.image.revision": head}
    (root / "matrix.yaml").write_text((root / "matrix.yaml").read_text() + "\n")
    assert build_labels(spec, root) == {}       # uncommitted change: no commit describes the build
