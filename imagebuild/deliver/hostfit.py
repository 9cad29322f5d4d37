"""Which of the matrix's images run on one host, best first.

An image runs on a host when its stack, read as imagebuild built it, is consistent with the host
facts: the same test `imagebuild plan` and `check --image` make (`resolve.check(..., image=True)`).
The CUDA compatibility mode comes from that check. Images are ordered by the matrix's `preference`
list (README, "Which stack is best"): newest PyTorch, best mode, newest CUDA, newest Python, the
OS in the matrix's order, newest Open MPI, newest UCX; then runtime before devel, then the id. On a
host with a GPU, CPU-only images come after every GPU image (a GPU host gets a GPU stack). `best`
gives the first of that order alone, checking only as many images as it needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from ..knowledge.schema import FLAVORS
from ..knowledge import Knowledge
from ..resolve.solver import MODE_RANK, Host, check
from ..versions import NONE, version_key

if TYPE_CHECKING:   # only named in annotations: `resolve` reads the images without importing the
    from ..render.images import ImageSpec   # renderer (and its wheel-lock machinery) when it can


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
        if name == pid or name in entry.aliases:
            return pid
    return name


def rank_key(k: Knowledge, fit: Fit, gpu_host: bool):
    key = _leading_key(k, fit.spec, gpu_host)
    oses = list(k.os)
    stack = fit.spec.stack
    for comp in k.preference[len(key) - 1:]:
        if comp == "mode":
            key.append(MODE_RANK.get(fit.mode, len(MODE_RANK)))
        else:
            key.append(_component_key(comp, stack, oses))
    flavor = fit.spec.flavor
    key.append(FLAVORS.index(flavor) if flavor in FLAVORS else len(FLAVORS))
    key.append(fit.spec.id)
    return tuple(key)


def _leading_key(k: Knowledge, spec: ImageSpec, gpu_host: bool) -> list:
    """The start of rank_key that needs no check: a CPU image on a GPU host last, then the
    preference components before `mode` (which only the check says)."""
    return _lead(k, spec.stack, spec.stack.get("cuda", NONE) != NONE, gpu_host)


def _lead(k: Knowledge, stack: dict, cuda: bool | None, gpu_host: bool) -> list | None:
    """_leading_key of a stack known in part (`cuda`: whether it holds CUDA, None: not known);
    None when a part the key needs is not known."""
    if gpu_host and cuda is None:
        return None
    key: list = [gpu_host and not cuda]
    oses = list(k.os)
    for comp in k.preference:
        if comp == "mode":
            break
        if comp not in stack:
            return None
        key.append(_component_key(comp, stack, oses))
    return key


def _component_key(comp: str, stack: dict, oses: list[str]):
    if comp == "os":
        return oses.index(stack["os"]) if stack.get("os") in oses else len(oses)
    return _Desc(version_key(stack.get(comp, NONE)))


def fits(k: Knowledge, specs: list[ImageSpec], host: Host, platform: str | None = None,
         allow_unverified: bool = False) -> tuple[list[Fit], list[Misfit]]:
    """The images that run on `host` (best first) and those that do not (in the given order),
    each with the reason. `platform`: the host's CPU architecture, when known."""
    platform = platform_id(k, platform)
    good: list[Fit] = []
    bad: list[Misfit] = []
    # The verdict depends on the stack and how it is read (cuda_from) only: a family's runtime and
    # devel images share both, so each distinct pair is checked once.
    verdicts: dict[tuple, object] = {}
    for spec in specs:
        built_for = spec.stack.get("platform")
        if platform and built_for and built_for != platform:
            bad.append(Misfit(spec, f"built for {built_for}, the host is {platform}"))
            continue
        key = (tuple(sorted(spec.stack.items())), spec.cuda_from)
        res = verdicts.get(key)
        if res is None:     # (read only below: the shared Resolution is never changed)
            res = verdicts[key] = check(k, host, dict(spec.stack), allow_unverified, image=True,
                                        cuda_from=spec.cuda_from, warnings=False)  # verdict, mode
        if not res.ok:
            bad.append(Misfit(spec, "; ".join(res.explanation[-2:]) or "inconsistent"))
            continue
        mode = res.mode
        good.append(Fit(spec=spec, mode=mode.mode if mode else "n/a",
                        detail=mode.text if mode else "no CUDA in the stack",
                        package=mode.package if mode else None,
                        caveat=mode.caveat if mode else None,
                        gpudirect=tuple(res.gpudirect)))
    gpu_host = _gpu_host(host)
    good.sort(key=lambda f: rank_key(k, f, gpu_host))
    return good, bad


def _gpu_host(host: Host) -> bool:
    return (host.gpu.lower() != NONE) if host.gpu is not None else host.driver is not None


def best(k: Knowledge, specs: list[ImageSpec], host: Host, platform: str | None = None,
         allow_unverified: bool = False) -> Fit | None:
    """The first of fits(...)'s good images (None when none runs), checking only the images it
    takes: the start of the ranking needs no check (_leading_key: a CPU image on a GPU host last,
    then the newest PyTorch, as the preference orders), so the images are checked in that order,
    one group of equal leading keys after another, and the best fit is the best of the first group
    in which any fits. `resolve` names it for every answer; the newest PyTorch's group usually
    decides, so a handful of checks instead of one per declared stack."""
    gpu_host = _gpu_host(host)
    ordered = sorted(specs, key=lambda s: _leading_key(k, s, gpu_host))
    i = 0
    while i < len(ordered):
        lead = _leading_key(k, ordered[i], gpu_host)
        j = i
        while j < len(ordered) and _leading_key(k, ordered[j], gpu_host) == lead:
            j += 1
        good, _ = fits(k, ordered[i:j], host, platform, allow_unverified)
        if good:
            return good[0]
        i = j
    return None


def best_expanding(k: Knowledge, known: list[tuple[dict, bool | None]],
                   expand: Callable[[list[int]], list[ImageSpec]], host: Host,
                   platform: str | None = None, allow_unverified: bool = False,
                   keep: Callable[[ImageSpec], bool] = lambda spec: True,
                   possible: Callable[[int], bool] = lambda i: True) -> Fit | None:
    """best(k, [the images kept], host), where the images are not expanded yet: `known[i]` is
    what combination i's images are known to hold before it is resolved (part of their stack;
    whether they hold CUDA, None when not known), `expand(indices)` resolves combinations into
    the images not given before. The combinations whose leading key is not known are expanded
    first; then, best leading key first, those of each key, and the images of that key checked:
    the first group in which any fits holds the best fit, as in best(). `resolve` thus expands
    the newest PyTorch's combinations only, mostly, instead of every declared one. `possible(i)`
    False: no image of combination i can fit this host (solver.could_hold), so it is not
    expanded."""
    gpu_host = _gpu_host(host)
    leads = [_lead(k, stack, cuda, gpu_host) for stack, cuda in known]
    todo = sorted((i for i, lead in enumerate(leads) if lead is not None), key=lambda i: leads[i])
    pool = [s for s in expand([i for i, lead in enumerate(leads) if lead is None]) if keep(s)]
    j = 0
    while pool or j < len(todo):
        keys = [_leading_key(k, s, gpu_host) for s in pool]
        lead = min(keys + ([leads[todo[j]]] if j < len(todo) else []))
        batch = []
        while j < len(todo) and leads[todo[j]] == lead:
            if possible(todo[j]):
                batch.append(todo[j])
            j += 1
        new = [s for s in expand(batch) if keep(s)]
        pool += new
        keys += [_leading_key(k, s, gpu_host) for s in new]
        group = [s for s, key in zip(pool, keys) if key == lead]
        pool = [s for s, key in zip(pool, keys) if key != lead]
        if group:
            good, _ = fits(k, group, host, platform, allow_unverified)
            if good:
                return good[0]
    return None
