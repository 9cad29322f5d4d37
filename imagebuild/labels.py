"""Every image label and annotation key imagebuild writes or reads, spelled once: the recipes'
LABEL lines (render/images.py), the engine's own labels on what it starts (a smoke container, an
export), the base images it builds, the SBOM's and the referrers' annotations, and what `test`,
`check`, `sbom` and `doctor` read back from a built image. tests/house/test_layout.py keeps these
strings out of every other module. Imports nothing: every stage may use it."""

from __future__ import annotations

#: imagebuild's own keys
PREFIX = "io.imagebuild."
IMAGE_ID = PREFIX + "image-id"
FLAVOR = PREFIX + "flavor"
MIN_DRIVER = PREFIX + "min-driver"
RDMA = PREFIX + "rdma"
SOURCES = PREFIX + "sources"
BUILD = PREFIX + "build"
FEATURES = PREFIX + "features"
WHEELS_LOCK = PREFIX + "wheels-lock"
CUDA_PROVIDER = PREFIX + "cuda.provider"
STACK = PREFIX + "stack."            # + a component: io.imagebuild.stack.cuda
OWNER = PREFIX + "owner"             # on every container imagebuild starts
SMOKE = PREFIX + "smoke"             # the smoke suite's containers
EXPORT = PREFIX + "export"           # the container an export reads a file system from
BASE = PREFIX + "base"               # a base image imagebuild built (the base's name)

#: the OCI image spec's pre-defined annotation keys
OCI = "org.opencontainers.image."
TITLE = OCI + "title"
VERSION = OCI + "version"
DESCRIPTION = OCI + "description"
CREATED = OCI + "created"
SOURCE = OCI + "source"
LICENSES = OCI + "licenses"
REVISION = OCI + "revision"
BASE_NAME = OCI + "base.name"
BASE_DIGEST = OCI + "base.digest"


def stack(component: str) -> str:
    """The label that records one component of an image's stack."""
    return STACK + component
