"""The one list of smoke checks: each check is a function decorated with `@check(...)`, which
records its name, its tier and what it needs. Everything that names checks reads it: the suite's
run order (`smoke.CHECK_NAMES`, `GPU_CHECK_NAMES`), `imagebuild-smoke --only`'s choices, `imagebuild
test`, the sbatch script's list, the Singularity `%test` line (the quick ones) and the test that
keeps docs/smoke.md in step. A check missing from one of several hand-kept lists can no longer go
unrun: there is one list.

Checks run from the host by `imagebuild test` (two containers, two nodes) are declared here too,
without a function (`host=True`): the suite inside the image never runs them.

Standard library only (it runs inside every image)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

TIERS = ("cpu", "gpu")


@dataclass(frozen=True)
class CheckInfo:
    name: str
    tier: str                  # cpu: every run; gpu: tier gpu only (or when --only names it)
    what: str                  # one line: what it proves
    quick: bool = False        # also in a Singularity image's %test (seconds, no ranks)
    host: bool = False         # run by `imagebuild test` from outside the image
    fn: Callable | None = None


#: name -> CheckInfo, in the order the suite runs them (registration order)
REGISTRY: dict[str, CheckInfo] = {}


def check(name: str, *, tier: str = "cpu", what: str, quick: bool = False):
    """Register the decorated function as the check `name`."""
    if tier not in TIERS:
        raise ValueError(f"check {name}: tier must be one of {TIERS}")

    def register(fn: Callable) -> Callable:
        if name in REGISTRY:
            raise ValueError(f"check {name} is registered twice")
        REGISTRY[name] = CheckInfo(name, tier, what, quick=quick, fn=fn)
        return fn
    return register


def host_check(name: str, *, what: str) -> None:
    """Declare a check `imagebuild test` runs from the host."""
    if name in REGISTRY:
        raise ValueError(f"check {name} is registered twice")
    REGISTRY[name] = CheckInfo(name, "cpu", what, host=True)


def names(*, tier: str | None = None, host: bool = False, quick: bool | None = None) -> tuple[str, ...]:
    return tuple(c.name for c in REGISTRY.values()
                 if c.host == host and (tier is None or c.tier == tier) and (quick is None or c.quick == quick))
