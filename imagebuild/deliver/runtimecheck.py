"""Would NVIDIA's container runtime start this image on this host? The image's NVIDIA_REQUIRE_*
variables judged by the model of libnvidia-container's check (smoke/nvrequire.py) against what the
runtime would read of the host: the driver, the CUDA version that driver's branch supports
(matrix.yaml drivers: newest_cuda), each GPU's compute capability and brand. `check --image` and
`doctor` say so before a user finds out from `docker run`, enroot or pyxis.

The brand is the one libnvidia-container reports, where the matrix tells it: a data-center GPU is
Tesla before Ampere and Unknown from Ampere on (NVML's NVIDIA brand, which the runtime does not
name). For any other GPU the brand is left unknown, so conditions on it hold: a refusal printed here
is one the runtime makes whatever the GPU's brand."""

from __future__ import annotations

from ..smoke.nvrequire import Gpu, Node, admits
from ..versions import VersionSyntaxError, parse_driver


def runtime_brand(cc: str, datacenter: bool | None) -> str | None:
    """The brand libnvidia-container reports for a GPU of this kind (None: not known here)."""
    if not datacenter:
        return None
    try:
        return "Tesla" if tuple(int(p) for p in cc.split(".")) < (8, 0) else "Unknown"
    except ValueError:
        return None


def gpu_of(k, name: str, cc: str | None = None) -> tuple[str, bool | None] | None:
    """(compute capability, data-center?) of a GPU named as the user or nvidia-smi names it: the
    matrix's model when it knows it, else ``cc`` (as nvidia-smi reports it) with the kind unknown;
    an `sm_XY` name tells the architecture, never the kind. None when nothing is known."""
    known = k.gpu_by_name(name)
    if known is None:
        return (cc, None) if cc else None
    return (cc or known.cc, None if known.name.startswith("sm_") else known.datacenter)


def runtime_node(k, driver: str | None, gpus: list[tuple[str, bool | None]]) -> Node:
    """The runtime's view of a host: its driver, the CUDA its branch supports (None when the matrix
    does not say: conditions on it then hold), and (compute capability, data-center?) per GPU."""
    cuda = None
    if driver:
        try:
            branch = k.branches.get(parse_driver(driver).branch)
        except VersionSyntaxError:
            branch = None
        cuda = branch.newest_cuda if branch is not None else None
    return Node(driver=driver, cuda=cuda,
                gpus=tuple(Gpu(arch=cc, brand=runtime_brand(cc, dc)) for cc, dc in gpus if cc))


def refusal(k, env: dict[str, str], driver: str | None,
            gpus: list[tuple[str, bool | None]]) -> str | None:
    """The runtime's error for an image of environment ``env`` on this host, or None when it would
    start it (or nothing is known of the host's driver: nothing to judge)."""
    if not driver:
        return None
    ok, message = admits(env, runtime_node(k, driver, gpus))
    return None if ok else message
