"""Which of the matrix's images run on one host, best first.

An image runs on a host when its stack, read as imagebuild built it, is consistent with the host
facts: the same test `imagebuild plan` and `check --image` make (`resolve.check(..., image=True)`).
The CUDA compatibility mode comes from that check. Images are ordered by the matrix's `preference`
list (README, "Which stack is best"): newest PyTorch, best mode, newest CUDA, newest Python, the
OS in the matrix's order, newest Open MPI, newest UCX; then runtime before devel, then the id. On a
host with a GPU, CPU-only images come after every GPU image (a GPU host gets a GPU stack).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..knowledge.grammar import FLAVORS
from ..render.images import ImageSpec
from ..knowledge import Knowledge
from ..resolve.solver import MODE_RANK, Host, check
from ..versions import NONE, version_key


@dataclass(frozen=True)
class Fit:
    spec: ImageSpec
    mode: str                     # native | minor-version | forward-compat | n/a (no CUDA)
    detail: str
    package: str | None = None    # cuda-compat-X-Y, for forward compatibility
    caveat: str | None = None
    gpudirect: tuple = field(default_factory=tuple)

    def to_json(self) -> dict:
        out = {"image": self.spec.id, "mode": self.mode, "detail": self.detail,
               "tags": list(self.spec.tags), "min_driver": self.spec.min_driver,
               "stack": dict(sorted(self.spec.stack.items()))}
        if self.package:
            out["package"] = self.package
        if self.caveat:
            out["caveat"] = self.caveat
        if self.gpudirect:
            out["gpudirect"] = [dict(g) for g in self.gpudirect]
        return out


@dataclass(frozen=True)
class Misfit:
    spec: ImageSpec
    why: str

    def to_json(self) -> dict:
        return {"image": self.spec.id, "why": self.why}


class _Desc:
    """Reverses the order of one element of a sort key (newest first)."""

    __slots__ = ("v",)

    def __init__(self, v):
        self.v = v

    def __lt__(self, other):
        return other.v < self.v

    def __eq__(self, other):
        return self.v == other.v


def platform_id(k: Knowledge, name: str | None) -> str | None:
    """A platform name as the matrix spells it (amd64 -> x86_64, arm64/sbsa -> aarch64)."""
    if name is None:
        return None
    for pid, entry in k.platforms.items():
        if name == pid or name in entry.get("aliases", []):
            return pid
    return name


def rank_key(k: Knowledge, fit: Fit, gpu_host: bool):
    stack = fit.spec.stack
    key: list = [gpu_host and stack.get("cuda", NONE) == NONE]
    oses = list(k.os)
    for comp in k.preference:
        if comp == "mode":
            key.append(MODE_RANK.get(fit.mode, len(MODE_RANK)))
        elif comp == "os":
            key.append(oses.index(stack["os"]) if stack.get("os") in oses else len(oses))
        else:
            key.append(_Desc(version_key(stack.get(comp, NONE))))
    flavor = fit.spec.flavor
    key.append(FLAVORS.index(flavor) if flavor in FLAVORS else len(FLAVORS))
    key.append(fit.spec.id)
    return tuple(key)


def fits(k: Knowledge, specs: list[ImageSpec], host: Host, platform: str | None = None,
         allow_unverified: bool = False) -> tuple[list[Fit], list[Misfit]]:
    """The images that run on `host` (best first) and those that do not (in the given order),
    each with the reason. `platform`: the host's CPU architecture, when known."""
    platform = platform_id(k, platform)
    good: list[Fit] = []
    bad: list[Misfit] = []
    for spec in specs:
        built_for = spec.stack.get("platform")
        if platform and built_for and built_for != platform:
            bad.append(Misfit(spec, f"built for {built_for}, the host is {platform}"))
            continue
        res = check(k, host, dict(spec.stack), allow_unverified, image=True,
                    cuda_from=spec.cuda_from, warnings=False)     # the verdict and mode only
        if not res.ok:
            bad.append(Misfit(spec, "; ".join(res.explanation[-2:]) or "inconsistent"))
            continue
        mode = res.mode
        good.append(Fit(spec=spec, mode=mode.mode if mode else "n/a",
                        detail=mode.text if mode else "no CUDA in the stack",
                        package=mode.package if mode else None,
                        caveat=mode.caveat if mode else None,
                        gpudirect=tuple(res.gpudirect)))
    gpu_host = (host.gpu.lower() != NONE) if host.gpu is not None else host.driver is not None
    good.sort(key=lambda f: rank_key(k, f, gpu_host))
    return good, bad
