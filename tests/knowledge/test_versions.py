"""versions.Spec evaluates the matrix's specifiers itself (plain releases on both sides); packaging's
SpecifierSet is the oracle: for every clause form the grammar accepts, over every version the matrix
names and the edge cases of zero padding, the two accept the same specifiers and give the same
verdicts. Pure logic."""

from __future__ import annotations

import itertools

import pytest
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from imagebuild.knowledge.schema import STACK
from imagebuild.versions import NONE, VersionSyntaxError, parse_spec

OPS = ("==", "!=", ">=", "<=", ">", "<", "~=", "")
EDGES = ("0", "1", "2", "2.0", "2.0.0", "2.4", "2.4.0", "2.4.1", "2.4.10", "2.5", "12", "12.0",
         "12.0.1", "12.4", "12.4.0", "12.4.1", "12.10", "13", "13.0", "13.0.0.0", "2.04", "9.1.0.70")


@pytest.fixture(scope="module")
def versions(k):
    seen = set(EDGES)
    for comp in STACK:
        if comp not in ("os", "platform"):
            seen.update(v for v in k.domain(comp, True) if v != NONE)
    return sorted(seen, key=Version)


def _oracle(atom: str) -> SpecifierSet | None:
    op = next((o for o in OPS if o and atom.startswith(o)), "")
    text = atom if op else (f"=={atom}" if atom.endswith(".*") else f"=={atom}.*")
    try:
        return SpecifierSet(text)
    except InvalidSpecifier:
        return None


def test_every_clause_form_agrees_with_packaging(versions):
    anchors = [v for v in versions if len(v.split(".")) <= 3][::3] + list(EDGES)
    checked = 0
    for op, number, wild in itertools.product(OPS, anchors, (False, True)):
        atom = f"{op}{number}{'.*' if wild else ''}"
        want = _oracle(atom)
        if want is None:
            with pytest.raises(VersionSyntaxError):
                parse_spec(atom)
            continue
        got = parse_spec(atom)
        for value in versions:
            assert got.contains(value) == want.contains(Version(value), prereleases=True), (atom, value)
            checked += 1
    assert checked > 10_000


def test_ranges_as_the_matrix_writes_them(versions):
    for text in (">=12.4,<13", ">=2.4,!=2.5.*,<3", "~=2.4.1,!=2.4.10", ">12.0,<=12.4.0", "12.4"):
        got, want = parse_spec(text), SpecifierSet(",".join(
            a if a[0] in "<>=!~" else f"=={a}.*" for a in text.split(",")))
        assert [got.contains(v) for v in versions] == \
            [want.contains(Version(v), prereleases=True) for v in versions], text
    assert parse_spec("none").contains(NONE) and not parse_spec("none").contains("12.4")
    assert parse_spec("any").contains("1") and not parse_spec(">=1").contains(NONE)


@pytest.mark.parametrize("text", ["~=2", "~=2.4.*", ">=12.*", "<13.*", "12.4a1", "==1.2.3.4.5.6",
                                  ">=1,", "latest", "=>1"])
def test_what_packaging_refuses_or_the_grammar_has_not_is_refused(text):
    with pytest.raises(VersionSyntaxError):
        parse_spec(text)
