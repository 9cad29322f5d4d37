"""Matchers: what a rule asks of one component, as a predicate with the text that explanations
show."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from ..versions import NONE, VersionSyntaxError, major_minor, parse_driver, parse_spec, parse_version
from .schema import BOOLEAN, CATEGORY, COMPONENTS, DRIVER

@dataclass(frozen=True)
class Matcher:
    """A predicate on one component's value, with the text used in explanations."""

    text: str
    test: Callable[[str], bool] = field(compare=False, repr=False)

    def __call__(self, value: str) -> bool:
        return self.test(value)


def version_matcher(spec_text: str) -> Matcher:
    spec = parse_spec(spec_text)
    return Matcher(str(spec), spec.contains)


def any_of(matchers: list[Matcher]) -> Matcher:
    if len(matchers) == 1:
        return matchers[0]
    tests = [m.test for m in matchers]
    return Matcher(" or ".join(m.text for m in matchers), lambda v: any(t(v) for t in tests))


def category_matcher(names: Iterable[str]) -> Matcher:
    allowed = frozenset(str(n) for n in names)
    return Matcher(" or ".join(sorted(allowed)), allowed.__contains__)


def bool_matcher(flag: bool) -> Matcher:
    want = "true" if flag else "false"
    return Matcher(want, lambda v: v == want)


def driver_min(text: str) -> Matcher:
    floor = parse_driver(text)
    return Matcher(f">= {text}", lambda v: v != NONE and parse_driver(v) >= floor)


def driver_max_branch(branch: int) -> Matcher:
    return Matcher(f"branch R{branch} or older",
                   lambda v: v != NONE and parse_driver(v).branch <= branch)


def driver_min_branch(branch: int) -> Matcher:
    return Matcher(f"branch R{branch} or newer",
                   lambda v: v != NONE and parse_driver(v).branch >= branch)


def mm_range(lo: str | None, hi: str | None, allow_none: bool = False) -> Matcher:
    """Major.minor between lo and hi inclusive (patch releases of hi included)."""
    lo_v = parse_version(lo) if lo else None
    hi_v = parse_version(hi) if hi else None

    def test(v: str) -> bool:
        if v == NONE:
            return allow_none
        mm = parse_version(major_minor(v))
        return (lo_v is None or mm >= lo_v) and (hi_v is None or mm <= hi_v)

    if lo and hi:
        text = f"{lo} to {hi}.x"
    elif lo:
        text = f">= {lo}"
    else:
        text = f"<= {hi}.x"
    return Matcher(text + (" (or none)" if allow_none else ""), test)


def arch_matcher(arch: list[str]) -> Matcher:
    """Compute capabilities an arch list runs on: a cubin for X.Y runs on X.Z for Z >= Y (same
    major); PTX for X.Y is compiled by the driver for any newer GPU."""
    ranges = []
    for entry in arch:
        ptx = entry.endswith("+PTX")
        cc = parse_version(entry[:-4] if ptx else entry)
        ranges.append((cc, ptx))

    def test(v: str) -> bool:
        if v == NONE:
            return True
        gpu = parse_version(v)
        return any(gpu >= cc and (ptx or gpu.major == cc.major) for cc, ptx in ranges)

    return Matcher("sm " + ", ".join(arch), test)



def matcher_for(c, comp: str, value, node, where: str) -> Matcher:
    """Compile a YAML value for one component into a Matcher (validated)."""
    if comp not in COMPONENTS:
        c.fail(f"{where}: unknown component {comp!r} (known: {', '.join(COMPONENTS)})", node, comp)
    if value == NONE:
        return Matcher("none", lambda x: x == NONE)
    if comp in BOOLEAN:
        if not isinstance(value, bool):
            c.fail(f"{where}: {comp} must be true or false", node, comp)
        return bool_matcher(value)
    if comp in CATEGORY:
        names = value if isinstance(value, list) else [value]
        return category_matcher(str(n) for n in names)
    alts = value if isinstance(value, list) else [value]
    out = []
    for alt in alts:
        if isinstance(alt, bool) or not isinstance(alt, (str, int, float)):
            c.fail(f"{where}: {comp} must be a specifier such as '>=12.4'", node, comp)
        text = str(alt)
        try:
            if comp in DRIVER:
                spec = parse_spec(text)
                out.append(Matcher(text, lambda x, s=spec: x != NONE and s.contains(x)))
            else:
                out.append(version_matcher(text))
        except VersionSyntaxError as exc:
            c.fail(f"{where}: {comp}: {exc}", node, comp)
    return any_of(out)
