"""One place names a project's files (imagebuild/workspace.py): every default is beside the matrix,
whatever folder a command runs from, so `test` writes a report where `lock` and `publish` read it."""

from __future__ import annotations

import ast
from pathlib import Path

from imagebuild.deliver import lockfile, publish
from imagebuild.render import output
from imagebuild import workspace
from imagebuild.workspace import Workspace

ROOT = Path(__file__).resolve().parents[2]


def test_every_folder_is_beside_the_matrix_not_the_current_folder(tmp_path, monkeypatch):
    project = tmp_path / "project"
    project.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    ws = Workspace.of("../project/matrix.yaml")
    assert ws.root == project.resolve() and ws.matrix == project.resolve() / "matrix.yaml"
    assert ws.lock == project.resolve() / "images.lock"
    for name in ("build", "logs", "reports", "sbom", "sources", "wheels"):
        assert getattr(ws, name) == project.resolve() / ".imagebuild" / name


def test_the_reports_lock_reads_are_where_test_writes_them(tmp_path):
    ws = Workspace.of(tmp_path / "matrix.yaml")
    # lock's default (entry_for_image without reports_dir) and publish's name the same file
    assert tmp_path / publish.REPORTS_DIR == ws.reports
    assert publish.default_report_path("smoke-cpu", ws.reports) == ws.reports / "smoke-cpu.json"
    assert lockfile.DEFAULT_LOCK == ws.lock.name
    assert output.wheel_cache(type("K", (), {"path": str(tmp_path / "matrix.yaml")})()) == ws.wheels


def _spellings(source: str) -> list[int]:
    """Lines of string literals that spell the state folder's name."""
    return [node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and node.value.strip("/").split("/")[0] == workspace.STATE_DIR.name]


def test_only_workspace_spells_the_state_folder():
    offenders = []
    for path in sorted((ROOT / "imagebuild").rglob("*.py")):
        rel = path.relative_to(ROOT / "imagebuild")
        if rel.parts[0] == "smoke" or rel == Path("workspace.py"):
            continue     # the smoke suite is copied into images: it names no host folder
        offenders += [f"{rel}:{line}" for line in _spellings(path.read_text(encoding="utf-8"))]
    assert offenders == []
    # the check sees a planted spelling
    assert _spellings('out = root / ".imagebuild" / "reports"\n') == [1]
    assert _spellings('x = ".imagebuild/logs"\n') == [1]
