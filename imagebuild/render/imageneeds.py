"""What an image needs from the node it runs on, as facts from matrix.yaml, for image.json's
``needs`` object (read inside the image by ``imagebuild-check``, imagebuild/smoke/imagecheck.py).

    native_driver   the driver the image's CUDA release shipped with (CUDA Table 3), when known
    forward_compat  {package, branches}: the cuda-compat package the image carries (CUDA from
                    NVIDIA's repository) and the host driver branches below its minimum driver on
                    which imagebuild runs it through that package (NVIDIA's forward-compatibility
                    table, cuda.compat, as the resolver reads it: render/requires.py)
    gpu_archs       the compute capabilities the image's PyTorch build is compiled for, when the
                    matrix has them confirmed (an unverified list is left out, never guessed)

A CPU image, or a fact the matrix does not hold, gives no key. The architectures the image runs
on, with their drivers, are image.json's `nvidia_require` (NVIDIA_REQUIRE_ARCH, render/requires.py). ``min_driver`` (the floor through
minor-version compatibility and cuDNN's rows) is image.json's own key already.
"""

from __future__ import annotations

from .images import ImageSpec
from .requires import forward_compat_branches
from ..versions import NONE, parse_version


def image_needs(spec: ImageSpec, k) -> dict:
    cuda = spec.stack.get("cuda", NONE)
    if cuda == NONE:
        return {}
    needs: dict = {}
    release = k.releases.get(cuda)
    if release is not None and release.driver and release.verified:
        needs["native_driver"] = release.driver
    mm = spec.cuda_mm
    mode = next((m for m in k.modes if m.package), None)
    branches = forward_compat_branches(spec, k) if mode is not None else []
    if branches:
        v = parse_version(cuda)
        needs["forward_compat"] = {"package": mode.package.format(major=v.major, minor=v.minor),
                                   "branches": branches}

    torch = spec.stack.get("pytorch", NONE)
    if torch != NONE:
        variant = k.variants.get((torch, mm))
        if variant is not None and variant.arch and variant.verified:
            needs["gpu_archs"] = list(variant.arch)
    return {"needs": needs} if needs else {}
