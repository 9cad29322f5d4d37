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
    "Registry/x": Reference("Registry", "x"),    # an upper-case first part is a host, as in Docker
}

BAD = [
    "", "UPPER", "ns/UPPER", "a//b", "/a", "a/", "-a", "a-", "a..b", "a:", ":tag", "a:.tag",
    "a:-t", "a:" + "t" * 129, "a@sha256:abc", f"a@md5:{'0' * 32}", "a b", "a\nb", "a:t\n",
    "localhost:port/x", "exa_mple.org/x", "x" * 256, "host:5000/", "a/b:c/d",
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
    assert not reference.is_image_id("sha256:" + "0" * 63)
    assert not reference.is_image_id("sha256:0123456789ab")  # a short ID has no algorithm
    assert reference.is_reference_or_id("0123456789ab") and not reference.is_reference_or_id("")


def test_not_a_string():
    for value in (None, 5, b"ubuntu", ["ubuntu"]):
        assert not reference.is_reference(value)
        assert not reference.is_image_id(value)
