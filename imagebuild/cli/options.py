"""Options and their reading that several commands share: the host facts and wishes (`resolve`,
`check`, `find`), the GPU pools, runner labels and images.lock of the driver-upgrade day (`plan`,
`upgrade`). Here, so that no command imports another."""

from __future__ import annotations

from ..errors import UsageError

# command-line flag -> stack component
WISH_FLAGS = {"torch": "pytorch", "pytorch": "pytorch", "cuda": "cuda", "cudnn": "cudnn",
              "nccl": "nccl", "python": "python", "os": "os", "platform": "platform", "ucx": "ucx",
              "openmpi": "openmpi"}


def add_host_options(parser) -> None:
    g = parser.add_argument_group("host facts")
    g.add_argument("--driver", help="the nodes' NVIDIA driver, e.g. 535.104.05")
    g.add_argument("--gpu", help="GPU model (H100, A100, RTX 4090), sm_XY, or none")
    g.add_argument("--kernel", help="the nodes' Linux kernel, e.g. 5.15")
    g.add_argument("--ofed", action=_Tristate, help="MLNX_OFED/DOCA-OFED installed (yes/no)")
    g.add_argument("--open-kernel-modules", action=_Tristate, dest="open_kernel_modules",
                   help="the driver uses NVIDIA's open kernel modules (yes/no)")
    g.add_argument("--date", help="judge end of life on this day (default: the matrix's as_of)")
    parser.add_argument("--allow-unverified", action="store_true",
                        help="also use facts marked verified: false")


class _Tristate:
    """--flag (yes), --flag yes|no|true|false."""

    def __new__(cls, option_strings, dest, **kw):
        import argparse

        class Action(argparse.Action):
            def __call__(self, parser, ns, value, option_string=None):
                if value is None:
                    setattr(ns, self.dest, True)
                    return
                low = value.lower()
                if low in ("yes", "true", "1"):
                    setattr(ns, self.dest, True)
                elif low in ("no", "false", "0"):
                    setattr(ns, self.dest, False)
                else:
                    raise UsageError(f"expected yes or no, got {value!r}", argument=option_string)

        return Action(option_strings, dest, nargs="?", default=None, **kw)


def add_system_options(group) -> None:
    """--system-cudnn / --system-nccl: libraries the host provides (NGC-style machines)."""
    group.add_argument("--system-cudnn", metavar="VERSION",
                       help="a system cuDNN the host provides beside the one torch's wheels bring "
                            "(NGC-style), e.g. 9.14.0")
    group.add_argument("--system-nccl", metavar="VERSION",
                       help="a system NCCL the host provides beside the one torch's wheels bring")


def system_from(args) -> dict[str, str]:
    return {comp: getattr(args, f"system_{comp}") for comp in ("cudnn", "nccl")
            if getattr(args, f"system_{comp}", None)}


def host_from(args):
    from ..resolve.solver import Host
    return Host(driver=args.driver, gpu=args.gpu, kernel=args.kernel, ofed=args.ofed,
                open_kernel_modules=args.open_kernel_modules, date=args.date)


def wishes_from(args) -> dict[str, str]:
    wishes: dict[str, str] = {}
    for flag, comp in WISH_FLAGS.items():
        value = getattr(args, f"wish_{flag}", None)
        if value is not None:
            if comp in wishes:
                raise UsageError("--torch and --pytorch name the same component", argument=f"--{flag}")
            if comp not in ("os", "platform"):      # those two are names, checked against the matrix
                from ..knowledge.matchers import version_matcher
                from ..versions import VersionSyntaxError
                try:
                    version_matcher(value)
                except VersionSyntaxError as exc:   # named by the flag as typed (--torch, not --pytorch)
                    raise UsageError(str(exc), argument=f"--{flag}") from None
            wishes[comp] = value
    return wishes


def parse_wish(text: str) -> tuple[str, str]:
    """'torch==2.9.1' -> ('pytorch', '==2.9.1'); 'cuda>=13' -> ('cuda', '>=13')."""
    import re
    m = re.match(r"^\s*([a-z]+)\s*((?:==|>=|<=|!=|~=|>|<).*|\s+\S.*)\Z", text)
    if not m or m.group(1) not in WISH_FLAGS:
        raise UsageError(f"expected COMPONENT SPEC such as torch==2.9.1, got {text!r}",
                         argument="--why-not")
    return WISH_FLAGS[m.group(1)], m.group(2).strip()




def gpu_pools(text: str) -> list[str | None]:
    names = [g.strip() for g in text.split(",") if g.strip()]
    if not names:
        raise UsageError("no GPU named", argument="--gpu")
    if any(g.lower() == "any" for g in names):
        if len(names) > 1:
            raise UsageError("`any` stands alone, not in a list of pools", argument="--gpu")
        return [None]
    return list(dict.fromkeys(names))



def runner_labels(values: list[str]) -> dict[str, str]:
    import re
    out = {}
    for value in values:
        plat, sep, label = value.partition("=")
        if not sep or not re.fullmatch(r"linux/[a-z0-9]+(/v[0-9])?", plat) or \
                not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", label):
            raise UsageError(f"{value!r} is not PLATFORM=LABEL (e.g. linux/arm64=ubuntu-24.04-arm)",
                             argument="--runner")
        out[plat] = label
    return out



def read_lock_or_none(args, matrix: str) -> dict | None:
    from pathlib import Path

    from ..deliver import lockfile
    from ..errors import LockError
    from ..workspace import Workspace

    path = Path(args.lock_in) if args.lock_in else Workspace.of(matrix).lock
    try:
        return lockfile.read_lock(path)
    except LockError:
        if args.lock_in:
            raise
        return None




def driver_pair(args) -> None:
    """--driver-from and --driver-to are driver releases (570.172.08), never bare branches."""
    from ..versions import VersionSyntaxError, parse_host_driver

    for flag, value in (("--driver-from", args.driver_from), ("--driver-to", args.driver_to)):
        try:
            parse_host_driver(value)
        except VersionSyntaxError as exc:
            raise UsageError(str(exc), argument=flag) from None
