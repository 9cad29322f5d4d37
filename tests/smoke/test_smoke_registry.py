"""One registry of smoke checks (issue 26, item 5): every list of check names is read from it, so a
check cannot be missing from one of them; a planted check reaches the names the suite and `--only`
use; docs/smoke.md's table lists exactly the registered checks; the Singularity %test line is the
registry's quick checks."""

from __future__ import annotations

import re

import pytest

from imagebuild import smoke
from imagebuild.smoke import checks, registry
from imagebuild.smoke.report import PASS, CheckResult

from conftest import ROOT


def test_every_name_list_comes_from_the_registry():
    assert list(checks.CHECKS) == [c.name for c in registry.REGISTRY.values() if not c.host]
    assert smoke.CHECK_NAMES + smoke.GPU_CHECK_NAMES == tuple(checks.CHECKS)
    assert set(smoke.HOST_CHECK_NAMES) == {c.name for c in registry.REGISTRY.values() if c.host}
    assert all(checks.CHECKS[n] is registry.REGISTRY[n].fn for n in checks.CHECKS)


def test_a_planted_check_is_registered_once_and_listed(monkeypatch):
    monkeypatch.setattr(registry, "REGISTRY", dict(registry.REGISTRY))

    @registry.check("planted.check", what="a test's own check")
    def planted(ctx):
        return CheckResult("planted.check", PASS, "ok")

    assert registry.names(tier="cpu")[-1] == "planted.check"
    with pytest.raises(ValueError, match="registered twice"):
        registry.check("planted.check", what="again")(planted)


def test_the_docs_table_lists_exactly_the_registered_checks():
    text = (ROOT / "docs" / "smoke.md").read_text()
    table = text.split("## Checks", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `([a-z0-9.-]+)` \|", table, re.M)
    assert sorted(documented) == sorted(registry.REGISTRY)


def test_the_singularity_test_line_runs_the_quick_checks():
    """In every committed definition (both templates: images and devel images FROM them)."""
    defs = sorted((ROOT / "singularity").glob("*.def"))
    assert defs
    for path in defs:
        lines = [line for line in path.read_text().splitlines() if "imagebuild-smoke" in line and "--only" in line]
        assert len(lines) == 1, path.name
        assert lines[0].split("--only ", 1)[1].split() == list(smoke.QUICK_CHECK_NAMES), path.name
