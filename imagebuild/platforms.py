"""The platforms imagebuild builds for, as the tools name them (OCI, Debian, the kernel, QEMU), and
the local base images `imagebuild base` makes for each. Names only, no compatibility fact: the
matrix's `platforms:` section says which stacks exist for which; build/emulation.py says how
another CPU's programs run on this host."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import UsageError


@dataclass(frozen=True)
class Platform:
    oci: str            # linux/arm64: what engines and registries call it
    architecture: str   # arm64: the image config's `architecture`
    variant: str        # v8: the image config's `variant` ("" where OCI names none)
    debian: str         # arm64: debootstrap --arch
    machine: str        # aarch64: `uname -m`, and the matrix's platform id
    qemu: str           # aarch64: the binfmt_misc entry is qemu-<this>

    @property
    def suffix(self) -> str:
        """The tag suffix of a local base for this platform ('' for x86_64, the default)."""
        return "" if self.machine == "x86_64" else f"-{self.architecture}"


PLATFORMS: dict[str, Platform] = {
    "linux/amd64": Platform("linux/amd64", "amd64", "", "amd64", "x86_64", "x86_64"),
    "linux/arm64": Platform("linux/arm64", "arm64", "v8", "arm64", "aarch64", "aarch64"),
}
_ALIASES = {"amd64": "linux/amd64", "x86_64": "linux/amd64", "linux/x86_64": "linux/amd64",
            "arm64": "linux/arm64", "aarch64": "linux/arm64", "linux/aarch64": "linux/arm64",
            "linux/arm64/v8": "linux/arm64", "sbsa": "linux/arm64"}

def platform_of(text: str, argument: str = "--platform") -> Platform:
    """linux/arm64, arm64, aarch64, sbsa -> linux/arm64; amd64, x86_64 -> linux/amd64."""
    key = (text or "").strip().lower()
    key = _ALIASES.get(key, key)
    if key not in PLATFORMS:
        raise UsageError(f"unknown platform {text!r} (one of: {', '.join(PLATFORMS)}; arm64, "
                         "aarch64 and amd64, x86_64 are read as those)", argument=argument)
    return PLATFORMS[key]


# `imagebuild base NAME` makes imagebuild/base:NAME (build/baseimage.py)
LOCAL_BASE = "imagebuild/base:{name}"


def local_base_ref(name: str, target: Platform | None = None) -> str:
    """imagebuild/base:NAME for x86_64, imagebuild/base:NAME-arm64 for arm64: a local engine
    holds one image per tag (no index), so each platform's base has its own."""
    return LOCAL_BASE.format(name=name) + (target.suffix if target else "")


def platform_base(base: str, oci_platform: str) -> str:
    """The base an image for ``oci_platform`` starts FROM. A registry's base (ubuntu:24.04) is an
    index the engine picks the platform's image from; a local base `imagebuild base` made
    (imagebuild/base:NAME) is one platform's image per tag, so another platform's has its own
    (imagebuild/base:NAME-arm64, as `imagebuild base --platform` names it)."""
    prefix = LOCAL_BASE.split("{", 1)[0]
    target = PLATFORMS.get(oci_platform)
    if not base.startswith(prefix) or target is None:
        return base
    return local_base_ref(base[len(prefix):], target)


def repository_names(image_id: str) -> tuple[str, ...]:
    """The repository names an image may be published under: its id, and for one platform's image
    of a multi-platform name (an id ending in a platform's suffix, -arm64) that name, whose
    repository holds every platform's image and the index over them (deliver/platforms.py)."""
    names = [image_id]
    for target in PLATFORMS.values():
        if target.suffix and image_id.endswith(target.suffix) and len(image_id) > len(target.suffix):
            names.append(image_id[:-len(target.suffix)])
    return tuple(names)
