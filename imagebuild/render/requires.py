"""What a CUDA image asks of NVIDIA's container runtime: `NVIDIA_REQUIRE_CUDA` and
`NVIDIA_REQUIRE_ARCH`, written from imagebuild's own verdicts, so that the runtime starts the image
on exactly the nodes where imagebuild (resolve, check, imagebuild-check) says it runs.

The runtime (libnvidia-container, modelled in smoke/nvrequire.py) reads every `NVIDIA_REQUIRE_*`
variable; each must hold for each visible GPU. It knows the node's driver version, the CUDA version
that driver supports, and each GPU's compute capability and brand, nothing more:

- `NVIDIA_REQUIRE_CUDA`: the driver, per brand. `cuda>=X.0,driver>=MIN`, MIN the image's minimum
  driver (minor-version compatibility of its CUDA major, and every other driver floor of its stack,
  cuDNN's rows among them); then, for an image that carries cuda-compat-X-Y (CUDA from NVIDIA's
  repository), one alternative per host branch the resolver accepts for forward compatibility and
  per brand libnvidia-container reports for data-center GPUs: `brand=tesla,driver>=B,driver<B+1`
  and the same for `unknown`, the name it gives NVML's NVIDIA brand (A100, H100, B200 and later);
  the floor is the branch's lowest release the resolver accepts when it accepts only some.
- `NVIDIA_REQUIRE_ARCH`: the GPUs, one alternative per compute capability the matrix knows and the
  resolver accepts for the image's stack (its CUDA release's architectures, its PyTorch build's),
  with the driver branches that drive that architecture: `arch=10.0,driver>=570`. A GPU of an
  architecture the matrix does not know is refused: unknown never reads as yes.

What the runtime cannot see, it cannot be told: a GPU's own floor within its architecture (H200
needs R550, H100 of the same compute capability does not) and whether a GPU reported as Unknown is
a data-center GPU or an RTX workstation card (both report NVML brands libnvidia-container calls
Unknown). imagebuild-check, inside the image, says those.
"""

from __future__ import annotations

from ..resolve.solver import Host, check
from ..versions import NONE, parse_driver, parse_version
from .images import ImageSpec

#: the brands libnvidia-container reports for data-center GPUs (src/driver.c: NVML's Tesla brand as
#: Tesla; every brand it does not name, NVML's NVIDIA brand of the data-center GPUs from Ampere on
#: among them, as Unknown), in NVIDIA_REQUIRE_CUDA's spelling
DATACENTER_BRANDS = ("tesla", "unknown")


def image_requires(spec: ImageSpec, k) -> dict[str, str]:
    """NVIDIA_REQUIRE_CUDA and, where the matrix knows architectures, NVIDIA_REQUIRE_ARCH of a CUDA
    image ({} for a CPU image)."""
    plan = _plan(spec, k)
    return {} if plan is None else dict(plan[1])


def forward_compat_branches(spec: ImageSpec, k) -> list[int]:
    """The host branches below the image's minimum driver on which it runs through the cuda-compat
    package it carries, newest first (the same windows NVIDIA_REQUIRE_CUDA's brand clauses name:
    image.json's needs.forward_compat)."""
    plan = _plan(spec, k)
    return [] if plan is None else sorted((b for _, b in plan[0]), reverse=True)


# (id of the knowledge, stack, cuda_from, min_driver) -> (that knowledge, (windows, requirements));
# the knowledge is kept so that its id is not reused by another while the entry stands
_CACHE: dict[tuple, tuple] = {}


def _plan(spec: ImageSpec, k) -> tuple | None:
    """(forward-compatibility windows, the requirements) of a CUDA image, found once per stack: a
    runtime and a devel image share one, and image.json and the recipe's ENV read the same."""
    if spec.stack["cuda"] == NONE or not spec.min_driver:
        return None
    key = (id(k), tuple(sorted(spec.stack.items())), spec.cuda_from, spec.min_driver)
    hit = _CACHE.get(key)
    if hit is None or hit[0] is not k:
        hit = _CACHE[key] = (k, _requires(k, *key[1:]))
    return hit[1]


def _requires(k, stack_items: tuple, cuda_from: str, min_driver: str) -> tuple:
    stack = dict(stack_items)
    major = parse_version(stack["cuda"]).major
    archs = arch_windows(k, stack_items, cuda_from)
    clauses = [f"cuda>={major}.0,driver>={min_driver}"]
    windows: tuple = ()
    if cuda_from == "repository":          # the image carries cuda-compat-X-Y
        windows = forward_compat_windows(k, stack_items, cuda_from, archs, min_driver)
        for floor, branch in windows:
            clauses += [f"brand={b},driver>={_short(floor)},driver<{branch + 1}" for b in DATACENTER_BRANDS]
    out = [("NVIDIA_REQUIRE_CUDA", " ".join(clauses))]
    if archs:
        bounds = arch_drivers(k, stack_items, cuda_from, archs, min_driver, windows)
        out.append(("NVIDIA_REQUIRE_ARCH", " ".join(
            ",".join([f"arch={cc}", *([f"driver>={_short(lo)}"] if lo else []),
                      *([f"driver<{hi + 1}"] if hi else [])])
            for cc, lo, hi in bounds)))
    return windows, tuple(out)


def _runs(k, stack: dict, cuda_from: str, gpu: str, driver: str) -> bool:
    """Whether the resolver runs the image's stack on this GPU with this driver."""
    return check(k, Host(driver=driver, gpu=gpu), dict(stack), image=True, cuda_from=cuda_from,
                 warnings=False).ok


def _short(driver: str) -> str:
    """A branch's lowest release written as the branch (535.0.0 -> 535)."""
    return driver[:-4] if driver.endswith(".0.0") else driver


def _candidates(k) -> list[str]:
    """The driver releases a requirement can turn on, lowest first: every release the matrix names
    (Table 3, the minor-version floors) and each known branch's lowest and highest."""
    named = {r.driver for r in k.releases.values() if r.driver}
    named |= {floor for floor, _ in k.majors.values()}
    for branch in k.branches:
        named |= {f"{branch}.0.0", f"{branch}.999.99"}
    return sorted(named, key=parse_driver)


def arch_drivers(k, stack_items: tuple, cuda_from: str, archs: tuple, min_driver: str,
                 windows: tuple) -> tuple[tuple[str, str | None, int | None], ...]:
    """Each supported architecture with the drivers the resolver runs the stack on with a GPU of
    it: the lowest it accepts (None: no floor beyond the image's own) and the last branch (None:
    every newer one), found among the drivers the image's requirement admits at all (its minimum
    and up, its forward-compatibility windows), on the architecture's representative GPU
    (data-center where the matrix has one)."""
    stack = dict(stack_items)
    floor = parse_driver(min_driver)
    admitted = [d for d in _candidates(k)
                if parse_driver(d) >= floor or any(parse_driver(f) <= parse_driver(d) and parse_driver(d).branch == b
                                                   for f, b in windows)]
    general = admitted[0] if admitted else None
    out = []
    for cc, first, last in archs:
        gpu = representative_gpu(k, cc, True, stack.get("platform")) or \
            representative_gpu(k, cc, False, stack.get("platform"))
        if gpu is None or general is None:
            lo = _products_floor(k, cc, first)
            if lo != (f"{first}.0.0" if first else None) and lo is not None and \
                    general is not None and parse_driver(lo) <= parse_driver(general):
                lo = None          # the products' own floors are below what the image asks anyway
            out.append((cc, lo, last))
            continue
        lo = next((d for d in admitted if _runs(k, stack, cuda_from, gpu.name, d)), None)
        if lo is None:
            continue                       # no admitted driver runs it: the architecture is left out
        top = next((d for d in reversed(admitted) if _runs(k, stack, cuda_from, gpu.name, d)), lo)
        hi = parse_driver(top).branch if top != admitted[-1] else None
        out.append((cc, None if lo == general else lo, hi))
    return tuple(out)


def _cc_key(cc: str) -> tuple[int, ...]:
    return tuple(int(p) for p in cc.split("."))


def arch_windows(k, stack_items: tuple, cuda_from: str) -> tuple[tuple[str, int | None, int | None], ...]:
    """(compute capability, first driver branch, last driver branch) of every architecture the
    matrix knows on which the resolver accepts the image's stack (no driver named: the stack's own
    facts only), in order."""
    stack = dict(stack_items)
    out = []
    for cc in sorted(k.architectures, key=_cc_key):
        res = check(k, Host(gpu=f"sm_{cc.replace('.', '')}"), dict(stack), image=True,
                    cuda_from=cuda_from, warnings=False)
        if res.ok:
            arch = k.architectures[cc]
            out.append((cc, arch.first_branch, arch.last_branch))
    return tuple(out)


def _products_floor(k, cc: str, first: int | None) -> str | None:
    """The lowest driver any GPU of this architecture runs on, where each has a floor of its own
    (the runtime sees the architecture, not the product): the lowest of their floors, never below
    the architecture's first branch; None when neither says."""
    arch_floor = f"{first}.0.0" if first else None
    own = [g.first_driver or (f"{g.first_branch}.0.0" if g.first_branch else arch_floor)
           for g in k.gpus.values() if g.cc == cc]
    if not own or None in own:
        return arch_floor
    low = min(own, key=parse_driver)
    if arch_floor and parse_driver(arch_floor) > parse_driver(low):
        return arch_floor
    return low


def representative_gpu(k, cc: str, datacenter: bool, platform: str | None = None):
    """The matrix's first GPU of this compute capability and kind (data-center or not) with no
    driver floor of its own, for the platform when given: what stands for the GPUs the runtime
    cannot tell apart (same capability, same brand). None when the matrix has none."""
    for g in k.gpus.values():
        if g.cc == cc and g.datacenter == datacenter and g.first_branch is None and \
                (platform is None or not g.platforms or platform in g.platforms):
            return g
    return None


def forward_compat_windows(k, stack_items: tuple, cuda_from: str, archs: tuple,
                           min_driver: str) -> tuple[tuple[str, int], ...]:
    """(lowest accepted driver, branch) for each host branch below the image's minimum driver on
    which the resolver runs the stack through forward compatibility on a data-center GPU: the
    branches NVIDIA's table lists for its cuda-compat package (and that the matrix's mode accepts,
    e.g. while supported), each at its lowest release the resolver accepts."""
    stack = dict(stack_items)
    cuda = parse_version(stack["cuda"])
    row = k.compat.get(f"{cuda.major}.{cuda.minor}")
    if row is None:
        return ()
    gpu = next((g for cc, _, _ in archs
                for g in [representative_gpu(k, cc, True, stack.get("platform"))] if g is not None), None)
    if gpu is None:
        return ()

    def runs(driver: str) -> bool:
        return _runs(k, stack, cuda_from, gpu.name, driver)

    known = sorted({r.driver for r in k.releases.values() if r.driver}, key=parse_driver)
    out = []
    for branch in sorted(row.branches):
        if parse_driver(f"{branch}.0.0") >= parse_driver(min_driver):
            continue          # the whole branch is at or above the minimum: no forward compatibility
        if not runs(f"{branch}.999.99"):
            continue
        if runs(f"{branch}.0.0"):
            out.append((str(branch), branch))
            continue
        floor = next((d for d in known if parse_driver(d).branch == branch and runs(d)), None)
        if floor is not None:
            out.append((floor, branch))
    return tuple(out)
