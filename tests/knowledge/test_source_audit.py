"""The source audit: re-derive from the package index every fact of matrix.yaml that it publishes,
and fail where the matrix disagrees.

What is re-derived (S10 in the matrix): each PyTorch release's default-wheel pins (CUDA runtime or
cuda-toolkit, cuDNN, NCCL) and its Python range (the CPython tags of its Linux x86_64 wheels); the
wheel pip picks for Linux x86_64 and aarch64 of every release (the `wheels:` records: file, sha256,
size, torch/version.py's CUDA and commit, and the architectures of libtorch_python.so, read
through HTTP ranges); every NCCL and cuDNN wheel release
per CUDA major with a Linux x86_64 wheel (nvidia-nccl-cuXX, nvidia-cudnn-cuXX) and the newest of each (the `builds` ranges);
every CUDA release NVIDIA publishes as a `cuda-toolkit` wheel. Only files uploaded by the matrix's
`as_of` day count, so the audit of one matrix gives the same verdict on any later day; what came
after is printed, not failed on.

Network: the package index only (pip's configured index, else its default). Unreachable: skipped
with the reason locally, failed under CI=true.
"""

from __future__ import annotations

import re

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from imagebuild.knowledge import sync

from conftest import ROOT, need

MATRIX = ROOT / "matrix.yaml"


@pytest.fixture(scope="module")
def index():
    import requests

    idx = sync.Index(timeout=60)
    try:
        idx.links("nvidia-nccl-cu13")
    except (sync.SyncError, requests.RequestException) as exc:
        need("the package index", str(exc).splitlines()[0])
    return idx


def _versions(values) -> set[Version]:
    return {Version(str(v)) for v in values}


def _release_lists(k, comp: str) -> dict[int, set[Version]]:
    node = k.document[comp]
    return {int(r["cuda_major"]): _versions(r["versions"]) for r in node.get("releases", [])}


def _later(index, project: str, as_of: str) -> list[str]:
    every = sync.published(index.links(project))
    return sorted((v for v, day in every.items() if day > as_of), key=Version)


@pytest.mark.parametrize("comp,major", [("nccl", 11), ("nccl", 12), ("nccl", 13),
                                        ("cudnn", 11), ("cudnn", 12), ("cudnn", 13)])
def test_every_wheel_release_by_as_of_is_in_the_matrix(k, index, comp, major, capsys):
    project = f"nvidia-{comp}-cu{major}"
    on_index = _versions(sync.published(index.links(project), until=k.as_of))
    in_matrix = _release_lists(k, comp).get(major, set())
    assert on_index, f"{project}: nothing published by {k.as_of}?"
    missing, extra = on_index - in_matrix, in_matrix - on_index
    assert not missing, f"{project} releases missing from matrix.yaml {comp}.releases: " \
        f"{sorted(map(str, missing), key=Version)}"
    assert not extra, f"matrix.yaml {comp}.releases names {project} releases the index lacks: " \
        f"{sorted(map(str, extra), key=Version)}"
    # the `builds` range of that CUDA major ends at the newest release
    builds = next(b for b in k.document[comp]["builds"] if b["cuda_major"] == major)
    upper = re.search(r"<=\s*([0-9.]+)", builds["versions"])
    assert upper and Version(upper.group(1)) == max(on_index), \
        f"{comp}.builds for CUDA {major} ends at {upper and upper.group(1)}, the index's newest " \
        f"by {k.as_of} is {max(on_index)}"
    later = _later(index, project, k.as_of)
    if later:
        print(f"{project}: published after {k.as_of} (not audited): {', '.join(later)}")


def test_every_cuda_toolkit_wheel_is_a_cuda_release(k, index):
    # a pure meta-package: its wheels are py3-none-any
    on_index = _versions(sync.published(index.links("cuda-toolkit"), until=k.as_of, platform=None))
    releases = _versions(k.releases)
    missing = sorted((str(v) for v in on_index - releases), key=Version)
    assert not missing, f"cuda-toolkit releases missing from matrix.yaml cuda.releases: {missing}"


def _torch_releases(k):
    return sorted(k.pytorch, key=Version, reverse=True)


def test_default_wheel_pins_agree(k, index):
    """Every release's default wheel: its CUDA runtime or cuda-toolkit, cuDNN and NCCL pins."""
    pins = {v: index.pins(v) for v in _torch_releases(k)}
    reports = sync.compare(k, pins)
    differing = [r for r in reports if r.differences]
    assert not differing, "\n".join(sync.format_report(differing, str(MATRIX), index.url))


def test_python_ranges_follow_the_wheels(k, index):
    """A release supports the Pythons it has Linux x86_64 wheels for: each one is in the
    matrix's range, and the next minor after the newest is not."""
    links = index.links("torch")
    wrong = []
    for v in _torch_releases(k):
        pythons = sync.wheel_pythons(links, v)
        assert pythons, f"torch {v}: no Linux x86_64 CPython wheel on the index"
        spec = SpecifierSet(",".join(
            a if not a[0].isdigit() else f"=={a}.*" for a in k.pytorch[v].python.split(",")))
        newest = Version(pythons[-1])
        beyond = f"{newest.major}.{newest.minor + 1}"
        inside = [p for p in pythons if Version(p) in spec]
        if inside != list(pythons) or Version(beyond) in spec:
            wrong.append(f"torch {v}: wheels for Python {', '.join(pythons)}, matrix says "
                         f"{k.pytorch[v].python}")
    assert not wrong, "\n".join(wrong)


def test_wheel_records_are_the_index_wheels(k, index):
    """Each release's `wheels:` records (PYPIWHEEL) are what the index serves, as of the matrix's
    as_of day: for Linux x86_64 and aarch64, the wheel pip picks, its sha256 and size, and from
    inside it (torch/version.py, through HTTP ranges) the CUDA it was built for and its commit. So
    "the aarch64 wheel of 2.9.1 is a CPU build" is read from the wheel, not from its name."""
    from imagebuild.knowledge import wheelevidence

    # a record's architectures were read from the bytes its sha256 names: for the same sha256 they
    # are not read again (about 10 MB a wheel); everything else is
    known = {(v, w.platform): w for v, rel in k.pytorch.items() for w in rel.wheels}
    found = {(v, plat): index.wheel_evidence(v, plat, until=k.as_of, known=known.get((v, plat)))
             for v in k.pytorch for plat in k.platforms}
    recorded = {v: rel.wheels for v, rel in k.pytorch.items()}
    assert sum(len(r) for r in recorded.values()) >= 2 * len(k.pytorch) - 2, \
        "the matrix records almost no wheels: the audit would check nothing"
    changes = wheelevidence.compare(recorded, found)
    assert not changes, "\n".join(c.describe() for c in changes)
