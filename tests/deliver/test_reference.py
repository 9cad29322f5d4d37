"""The one image-reference grammar (imagebuild/reference.py), on names Docker accepts and refuses."""

from __future__ import annotations

import pytest

from imagebuild import reference
from imagebuild.reference import Reference

D = "sha256:" + "ab" * 32

GOOD = {
    "ubuntu": Reference("", "ubuntu"),
    "ubuntu:24.04": Reference("", "ubuntu", "24.04"),
    "imagebuild/base:debian-bookworm": Reference("", "imagebuild/base", "debian-bookworm"),
    "localhost:5000/hpc/smoke-cpu:1.0": Reference("localhost:5000", "hpc/smoke-cpu", "1.0"),
    "localhost/x": Reference("localhost", "x"),
    "registry.example.org/a/b/c": Reference("registry.example.org", "a/b/c"),
    f"registry.example.org:443/ns/img@{D}": Reference("registry.example.org:443", "ns/img", "", D),
    f"ns/img:tag@{D}": Reference("", "ns/img", "tag", D),
    "[::1]:5000/ns/x:v2": Reference("[::1]:5000", "ns/x", "v2"),
    "a__b/c--d/e.f_g:_t": Reference("", "a__b/c--d/e.f_g", "_t"),
}

BAD = [
    "", "UPPER", "ns/UPPER", "a//b", "/a", "a/", "-a", "a-", "a..b", "a:", ":tag", "a:.tag",
    "a:-t", "a:" + "t" * 129, "a@sha256:abc", f"a@md5:{'0' * 32}", "a b", "a\nb", "a:t\n",
    "localhost:port/x", "UPPER/x", "Registry.example.org/x", "exa_mple.org/x", "x" * 256, "host:5000/", "a/b:c/d",
]


@pytest.mark.parametrize("text", sorted(GOOD))
def test_good_references_parse_and_print_back(text):
    ref = reference.parse(text)
    assert ref == GOOD[text]
    assert str(ref) == text
    assert reference.is_reference(text) and reference.is_reference_or_id(text)


@pytest.mark.parametrize("text", BAD)
def test_bad_references_are_refused_with_a_reason(text):
    with pytest.raises(ValueError) as caught:
        reference.parse(text)
    assert str(caught.value)
    assert not reference.is_reference(text)


def test_repository_keeps_the_host():
    assert reference.parse("localhost:5000/hpc/x:1").repository == "localhost:5000/hpc/x"
    assert reference.parse("hpc/x:1").repository == "hpc/x"


def test_image_ids():
    assert reference.is_image_id("sha256:" + "0" * 64)
    assert reference.is_image_id("0123456789ab")
    assert not reference.is_image_id("0123456789a")          # shorter than Docker's short ID
    assert not reference.is_image_id("sha256:" + "0" * 65)
    assert reference.is_image_id("sha256:0123456789ab")       # a prefix, as engines take it
    assert not reference.is_image_id("sha256:0123456789aB")
    assert reference.is_reference_or_id("0123456789ab") and not reference.is_reference_or_id("")


def test_repo_digests():
    assert reference.is_repo_digest(f"localhost:5000/ns/x@{D}")
    assert reference.is_repo_digest(f"ubuntu@{D}")
    assert not reference.is_repo_digest(f"ubuntu:24.04@{D}")   # an engine records no tag there
    assert not reference.is_repo_digest("ubuntu:24.04")
    assert not reference.is_repo_digest(f"UP/x@{D[:-1]}")


def test_not_a_string():
    for value in (None, 5, b"ubuntu", ["ubuntu"]):
        assert not reference.is_reference(value)
        assert not reference.is_image_id(value)


def test_every_checker_uses_this_grammar():
    """The engine boundary, export, the smoke runner, the matrix's grammar and the renderer's last
    check accept and refuse the same names (they were five grammars that disagreed on 4 of 10)."""
    from imagebuild.deliver import export
    from imagebuild.knowledge import grammar
    from imagebuild.render import renderer as render
    from imagebuild.testrun import runner as testrun
    from imagebuild.engines import check_ref
    from imagebuild.errors import ImagebuildError

    def accepts(fn, text) -> bool:
        try:
            fn(text)
        except ImagebuildError:
            return False
        return True

    checkers = {
        "engines": check_ref,
        "export": export.check_ref,
        "testrun": testrun.validate_ref,
        "render": lambda t: render._safe("ref", t, "image reference"),
        "grammar": lambda t: None if grammar.check("ref", t) is None else (_ for _ in ()).throw(
            ImagebuildError("refused")),
    }
    for text in [*GOOD, *BAD]:
        want = reference.is_reference(text)
        got = {name: accepts(fn, text) for name, fn in checkers.items()}
        assert set(got.values()) == {want}, (text, got)
