"""What a torch wheel's metadata says about the stack it bundles (pure): its cuDNN, NCCL and CUDA
runtime pins from `Requires-Dist`, its `Requires-Python` floor raised to the oldest interpreter it
has a wheel for, and the errors of reading an index. sync.py compares them with the matrix;
wheelindex.py reads them from the package index."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from ..errors import ImagebuildError, Unavailable
from ..versions import VersionSyntaxError, parse_version

PROJECT = "torch"


def marker_env(python_tag: str = "cp312") -> dict[str, str]:
    """The environment the markers of a Linux x86_64 CPython install see."""
    py = f"{python_tag[2]}.{python_tag[3:]}"
    return {"platform_system": "Linux", "platform_machine": "x86_64", "sys_platform": "linux",
            "os_name": "posix", "python_version": py, "python_full_version": py + ".0",
            "implementation_name": "cpython", "platform_python_implementation": "CPython",
            "extra": ""}


class SyncError(ImagebuildError):
    """The package index cannot be read, or the matrix cannot be synced."""


class IndexUnavailable(Unavailable, SyncError):
    """The package index cannot be reached or answers 5xx (exit code 3)."""


# --------------------------------------------------------------------------------------------------
# Pins from wheel metadata (pure)


@dataclass(frozen=True)
class WheelPins:
    """What one torch wheel's metadata says about the stack it bundles."""

    version: str
    wheel: str
    requires_python: str | None
    cudnn: str | None = None
    nccl: str | None = None
    cuda_runtime: str | None = None
    cuda: str | None = None          # major.minor implied by the CUDA runtime pin
    how: str = ""                    # how the metadata was read (for the report)
    wheel_pythons: tuple[str, ...] = ()  # the Pythons the release has Linux x86_64 wheels for

    def value(self, name: str) -> str | None:
        if name == "python":
            return effective_python_floor(self.requires_python, self.wheel_pythons)
        return getattr(self, name)


_PIN_NAMES = (
    (re.compile(r"^nvidia-cudnn-cu([0-9]+)\Z"), "cudnn"),
    (re.compile(r"^nvidia-nccl-cu([0-9]+)\Z"), "nccl"),
    (re.compile(r"^nvidia-cuda-runtime-cu([0-9]+)\Z"), "cuda_runtime"),
    (re.compile(r"^nvidia-cuda-runtime\Z"), "cuda_runtime"),
    (re.compile(r"^cuda-toolkit\Z"), "cuda_runtime"),
)


def _pin(req) -> str:
    """The version an exact pin names, else the specifier's text (which then never agrees)."""
    specs = list(req.specifier)
    if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
        return specs[0].version
    return str(req.specifier) or "(unpinned)"


def pins_from_metadata(version: str, wheel: str, requires_python: str | None,
                       requires_dist: Iterable[str], how: str = "",
                       python_tag: str = "cp312", wheel_pythons: Iterable[str] = ()) -> WheelPins:
    """Pick the cuDNN, NCCL and CUDA runtime pins out of a wheel's Requires-Dist lines. Lines whose
    markers do not hold on Linux x86_64 CPython (extras, other platforms) are ignored."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    found: dict[str, str] = {}
    for line in requires_dist:
        try:
            req = Requirement(line)
        except InvalidRequirement as exc:
            raise SyncError(f"torch {version}: unreadable Requires-Dist line {line!r}: {exc}") from None
        if req.marker is not None and not req.marker.evaluate(marker_env(python_tag)):
            continue
        name = canonicalize_name(req.name)
        for pattern, slot in _PIN_NAMES:
            if pattern.match(name):
                # nvidia-cuda-runtime-cuXX wins over cuda-toolkit when a wheel names both
                if slot in found and name == "cuda-toolkit":
                    continue
                found[slot] = _pin(req)
    cuda = None
    if found.get("cuda_runtime"):
        try:
            v = parse_version(found["cuda_runtime"])
            cuda = f"{v.major}.{v.minor}"
        except VersionSyntaxError:
            cuda = None
    return WheelPins(version, wheel, requires_python, found.get("cudnn"), found.get("nccl"),
                     found.get("cuda_runtime"), cuda, how, tuple(wheel_pythons))


def pins_from_pip_report(report: dict, version: str) -> WheelPins:
    """The pins from a `pip install --dry-run --report FILE` report (one install item)."""
    for item in report.get("install", []):
        meta = item.get("metadata", {})
        if meta.get("name", "").lower() == PROJECT and meta.get("version") == version:
            url = item.get("download_info", {}).get("url", "")
            return pins_from_metadata(version, url.rsplit("/", 1)[-1], meta.get("requires_python"),
                                      meta.get("requires_dist", []), "pip report")
    raise SyncError(f"the pip report names no torch {version}")


def effective_python_floor(requires_python: str | None, wheel_pythons: Iterable[str]) -> str | None:
    """The oldest Python a release really installs on: Requires-Python's lower bound, raised to
    the oldest interpreter it has a wheel for (torch 2.5.1 says >=3.8 but has no cp38 wheel)."""
    floor = python_floor(requires_python)
    pys = sorted(wheel_pythons, key=parse_version)
    if pys and (floor is None or parse_version(pys[0]) > parse_version(floor)):
        return pys[0]
    return floor


def python_floor(spec: str | None) -> str | None:
    """The lower bound of a Python specifier ('>=3.10,<3.15' -> '3.10'), or None."""
    if not spec:
        return None
    for atom in str(spec).split(","):
        atom = atom.strip()
        if atom.startswith(">="):
            return atom[2:].strip()
    return None
