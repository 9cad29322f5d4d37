"""Mistakes the matrix loader used to let through to generate or the engine (issue 23, item 9),
each made in a copy of the real matrix.yaml by editing one line, each refused in one line naming
the file and the line: as_of out of range, two tarballs under one cache file name, `sources: git`
on a release without a git archive, `build.cuda_arch` naming an architecture the matrix does not
know or one the image's CUDA cannot compile."""

from __future__ import annotations


import pytest

from imagebuild import cli

from conftest import ROOT, edit_matrix, refused_in_one_line

MATRIX = ROOT / "matrix.yaml"


def test_sources_git_without_the_release_s_git_archive_is_refused_at_load(tmp_path, capsys):
    path, _ = edit_matrix(tmp_path, r'^\s+git_archive: \{file: "ucx-1\.22\.0-git\.tar\.gz".*$', "      # (no git archive)",
                    site=True)
    family_line = next(i + 1 for i, text in enumerate(open(path).read().splitlines())
                       if text.strip() == "sources: git")
    refused_in_one_line(capsys, ["knowledge", "validate", "--matrix", path], path, family_line,
             "sources: git compiles ucx 1.22.0 from its git tag archive")


def test_an_unknown_cuda_arch_is_refused_at_load(tmp_path, capsys):
    path, line = edit_matrix(tmp_path, r'cuda_arch: \["8\.0", "9\.0", "10\.0"\]', 'cuda_arch: ["8.0", "8.5", "10.0"]', site=True)
    refused_in_one_line(capsys, ["knowledge", "validate", "--matrix", path], path, line,
             "build.cuda_arch: 8.5 is not an architecture the matrix knows")


@pytest.mark.parametrize("arch,words", [("7.0", "was dropped after CUDA 12.9"),
                                        ("3.7", "was dropped after CUDA 11.8")])
def test_a_cuda_arch_the_image_s_cuda_cannot_compile_is_refused_before_the_engine(tmp_path, capsys, arch, words):
    path, line = edit_matrix(tmp_path, r'cuda_arch: \["8\.0", "9\.0", "10\.0"\]', f'cuda_arch: ["{arch}", "9.0"]', site=True)
    family_line = max(i + 1 for i, text in enumerate(open(path).read().splitlines()[:line])
                      if text.strip().startswith("- family:"))
    assert cli.main(["knowledge", "validate", "--matrix", path]) == 0      # every name is known
    capsys.readouterr()
    refused_in_one_line(capsys, ["generate", "--check", "--matrix", path, "--output", str(tmp_path / "out")],
             path, family_line, words)


@pytest.mark.parametrize("size, words", [
    ('"90695"', "tools.gdrcopy.size '90695' must be a whole number of bytes from 1 to 268435456, not a string"),
    ("0", "tools.gdrcopy.size 0 must be a whole number of bytes from 1 to 268435456"),
    ("268435457", "tools.gdrcopy.size 268435457 must be a whole number of bytes"),
    ("true", "tools.gdrcopy.size must be a whole number of bytes from 1 to 268435456, not a boolean"),
])
def test_a_tarball_size_that_is_no_byte_count_isrefused_in_one_line(tmp_path, capsys, size, words):
    path, line = edit_matrix(tmp_path, r"size: 90695,", f"size: {size},")
    refused_in_one_line(capsys, ["knowledge", "validate", "--matrix", path], path, line, words)


# one line of the real matrix edited, refused at that line: (what, pattern, replacement, words)
ONE_LINE = [
    ("as_of out of range", r'^as_of: "2026-11-21"', 'as_of: "0001-01-01"', "outside 1980-01-01"),
    ("two tarballs under one cache file name", r'file: "openmpi-5\.0\.10-git\.tar\.gz"',
     'file: "ucx-1.22.0-git.tar.gz"', "the source cache file 'ucx-1.22.0-git.tar.gz' is also ucx.releases"),
    ("a git archive's size", r"size: 3591357,", "size: -1,",
     "ucx.releases[0].git_archive.size -1 must be a whole number of bytes"),
    ("a lifecycle_source without type or eol", r'branch: 615, newest_cuda',
     'branch: 615, lifecycle_source: S6, newest_cuda',
     "lifecycle_source names the source of type and eol, and neither is given"),
    ("a platforms_source without platforms",
     r'(cuda: "12\.8", cudnn: "9\.7\.1\.26", .*arch: \[[^]]*\]), platforms: \[x86_64, aarch64\],',
     r'\1,', "platforms_source names the source of platforms, which are not given"),
]


@pytest.mark.parametrize("what, pattern, replacement, words", ONE_LINE, ids=[row[0] for row in ONE_LINE])
def test_a_mistake_on_one_line_is_refused_at_that_line(tmp_path, capsys, what, pattern, replacement, words):
    path, line = edit_matrix(tmp_path, pattern, replacement)
    refused_in_one_line(capsys, ["knowledge", "validate", "--matrix", path], path, line, words)


@pytest.mark.parametrize("mode_id, words", [
    ("'1.0; rm -rf /'", "is not a compatibility mode the resolver knows"),
    ("native", "mode native is listed twice")])
def test_a_cuda_mode_the_resolver_does_not_know_is_refused_at_load(tmp_path, capsys, mode_id, words):
    """The modes are the resolver's vocabulary (native, minor-version, forward-compat): an id
    outside it reached resolve's ranking as a KeyError (found by the matrix fuzzer)."""
    path, line = edit_matrix(tmp_path, r"^    - id: minor-version$", f"    - id: {mode_id}")
    refused_in_one_line(capsys, ["knowledge", "validate", "--matrix", path], path, line, words)


@pytest.mark.parametrize("pattern, replacement, words", [
    # a confirmed build must name its NCCL, or say that no first-party source gives it
    (r'(\{cuda: "12\.6", cudnn: "9\.10\.2\.21"), nccl_verified: false,', r'\1,',
     "a verified variant names its nccl, or says nccl_verified: false"),
    # nccl_source cites where an NCCL was read: without one it cites nothing
    (r'(\{cuda: "12\.6", cudnn: "9\.10\.2\.21", nccl_verified: false),', r'\1, nccl_source: TORCHREL29BM,',
     "nccl_source names the source of nccl, which is not given"),
    (r'(nccl: "2\.27\.5", nccl_verified: false, nccl_source: )TORCHREL29BM', r'\1NOSUCH',
     "unknown source 'NOSUCH'"),
])
def test_a_variant_s_nccl_confirmation_is_checked_at_its_line(tmp_path, capsys, pattern, replacement, words):
    """issue 25: `nccl_verified: false` marks a published build whose NCCL no first-party source
    gives (torch 2.8.0+cu126: RELEASE.md lists none); the loader holds each such line to it."""
    path, line = edit_matrix(tmp_path, pattern, replacement)
    refused_in_one_line(capsys, ["knowledge", "validate", "--matrix", path], path, line, words)
