"""Golden tests: every component fragment, in each format, for seven reference images (CUDA
runtime images on Ubuntu (apt) and Rocky Linux (dnf), communication images with DOCA-OFED on each,
the Debian communication image built from the registries, the same image as a site compiles it from
git tag archives against CUDA from the wheels (docs/examples/comms-from-git.yaml), and smoke-cpu).
A change to one fragment changes exactly its golden files.
Regenerate deliberately with IMAGEBUILD_UPDATE_GOLDEN=1 and review the diff."""

from __future__ import annotations

import os

import pytest

import tempfile
from pathlib import Path

from conftest import RECIPES, ROOT, site_matrix
from imagebuild.render import images, renderer as render
from imagebuild import knowledge

GOLDEN = ROOT / "tests" / "golden"
# The DOCA-OFED images rest on an unverified fact (the repository key), so they are expanded with
# allow_unverified here; the committed recipes do not hold them.
REFERENCE = ("pytorch-2.6.0-cu124-ubuntu22.04-runtime", "smoke-cpu",
             "pytorch-2.13.0-cu130-rockylinux9-runtime",
             "comms-cu130-nccl2.30.7-ubuntu24.04-doca3.2.0-runtime",
             "comms-cu130-nccl2.30.7-rockylinux9-doca3.2.0-runtime",
             "comms-cu130-nccl2.30.7-debian12-runtime")


SITE_REFERENCE = ("comms-cu130-nccl2.30.7-debian12-runtime",)


def _cases():
    r = render.Renderer()
    cases = {}
    k = knowledge.load(ROOT / "matrix.yaml")
    specs = {s.id: s for s in images.expand(k, allow_unverified=True)[0]}
    for image in REFERENCE:
        for (frag, fmt), text in r.fragment_texts(specs[image], k).items():
            cases.setdefault(f"{frag}.{fmt}", text)
    with tempfile.TemporaryDirectory() as tmp:    # the fragments only the site's image has
        site = knowledge.load(site_matrix(Path(tmp)))
        site_specs = {s.id: s for s in images.expand(site)[0]}
        for image in SITE_REFERENCE:
            for (frag, fmt), text in r.fragment_texts(site_specs[image], site).items():
                cases.setdefault(f"{frag}.{fmt}", text)
    return cases


CASES = _cases()


def test_every_fragment_has_golden_files_in_both_formats():
    fragments = {p.name[:-len(".sh.j2")] for p in (RECIPES / "fragments").glob("*.sh.j2")}
    covered = {name.rsplit(".", 1)[0] for name in CASES}
    # tarball.sh.j2 is included by gdrcopy, ucx, openmpi and nccl-tests, not used on its own;
    # packages.sh.j2 is every OS packages step, filed as <role>-<package manager>
    assert fragments - covered == {"tarball", "packages"}
    for manager in ("apt", "dnf"):
        for role in ("os-runtime", "os-devel", "openssh", "rdma-runtime", "cuda-runtime", "cuda-devel"):
            assert f"{role}-{manager}" in covered, (role, manager)
    for frag in covered:
        assert f"{frag}.docker" in CASES and f"{frag}.singularity" in CASES


@pytest.mark.parametrize("name", sorted(CASES))
def test_fragment_matches_golden(name):
    path = GOLDEN / name
    if os.environ.get("IMAGEBUILD_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(CASES[name])
    assert path.is_file(), f"no golden file {path}: run with IMAGEBUILD_UPDATE_GOLDEN=1 and review"
    assert CASES[name] == path.read_text(), f"{name} changed: review, then IMAGEBUILD_UPDATE_GOLDEN=1"
