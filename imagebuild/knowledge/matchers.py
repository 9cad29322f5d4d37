"""Matchers: what a rule asks of one component, as a predicate with the text that explanations
show."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ..versions import NONE, VersionSyntaxError, major_minor, parse_driver, parse_spec, parse_version
from .schema import BOOLEAN, CATEGORY, COMPONENTS, DRIVER

@dataclass(frozen=True)
class Matcher:
    """A predicate on one component's value, with the text used in explanations. The predicate is
    described by data (`op`, one of OPS, and its `arg`), never by a function of its own, so that a
    compiled knowledge base can be kept across processes (knowledge/cache.py) and rebuilt without
    running anything but these operations."""

    text: str
    op: str = field(repr=False)
    arg: Any = field(default=None, repr=False)
    test: Callable[[str], bool] = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        build = OPS.get(self.op)
        if build is None:
            raise ValueError(f"unknown matcher operation {self.op!r}")
        object.__setattr__(self, "test", build(self.arg))

    def __reduce__(self):
        return (Matcher, (self.text, self.op, self.arg))

    def __call__(self, value: str) -> bool:
        return self.test(value)


def _spec(text):
    return parse_spec(text).contains


def _driver_spec(text):
    spec = parse_spec(text)
    return lambda x: x != NONE and spec.contains(x)


def _driver_min(text):
    floor = parse_driver(text)
    return lambda v: v != NONE and parse_driver(v) >= floor


def _mm_range(arg):
    lo, hi, allow_none = arg
    lo_v = parse_version(lo) if lo else None
    hi_v = parse_version(hi) if hi else None

    def test(v: str) -> bool:
        if v == NONE:
            return allow_none
        mm = parse_version(major_minor(v))
        return (lo_v is None or mm >= lo_v) and (hi_v is None or mm <= hi_v)
    return test


def _arch(arch):
    ranges = []
    for entry in arch:
        ptx = entry.endswith("+PTX")
        ranges.append((parse_version(entry[:-4] if ptx else entry), ptx))

    def test(v: str) -> bool:
        if v == NONE:
            return True
        gpu = parse_version(v)
        return any(gpu >= cc and (ptx or gpu.major == cc.major) for cc, ptx in ranges)
    return test


def _at_least_or_none(since):
    floor = parse_version(since)
    return lambda v: v == NONE or parse_version(v) >= floor


def _same_major_at_least(since):
    floor = parse_version(since)
    return lambda x: x != NONE and parse_version(x) >= floor and parse_version(x).major == floor.major


def _any(matchers):
    tests = tuple(m.test for m in matchers)
    return lambda v: any(t(v) for t in tests)


def _or_none(m):
    test = m.test
    return lambda v: v == NONE or test(v)


#: every operation a Matcher can be: name -> (arg -> predicate)
OPS: dict[str, Callable[[Any], Callable[[str], bool]]] = {
    "spec": _spec,                                  # a version specifier's text
    "driver_spec": _driver_spec,                    # the same, never none
    "eq": lambda want: lambda x: x == want,
    "in": lambda names: frozenset(names).__contains__,
    "not_in": lambda names: (lambda ws: lambda x: x not in ws)(frozenset(names)),
    "never": lambda _: lambda x: False,
    "any": _any,                                    # a tuple of Matchers
    "or_none": _or_none,                            # a Matcher, or none
    "driver_min": _driver_min,                      # a driver version
    "branch_max": lambda b: lambda v: v != NONE and parse_driver(v).branch <= b,
    "branch_min": lambda b: lambda v: v != NONE and parse_driver(v).branch >= b,
    "mm_range": _mm_range,                          # (lo, hi, allow_none)
    "arch": _arch,                                  # compute capabilities, X.Y or X.Y+PTX
    "at_least_or_none": _at_least_or_none,          # a version
    "same_major_at_least": _same_major_at_least,    # a version: it or newer, same major
}


def version_matcher(spec_text: str) -> Matcher:
    spec = parse_spec(spec_text)
    return Matcher(str(spec), "spec", spec_text)


def equal_to(value: str, text: str | None = None) -> Matcher:
    return Matcher(value if text is None else text, "eq", value)


def none_matcher(text: str = "none") -> Matcher:
    return Matcher(text, "eq", NONE)


def any_of(matchers: list[Matcher]) -> Matcher:
    if len(matchers) == 1:
        return matchers[0]
    return Matcher(" or ".join(m.text for m in matchers), "any", tuple(matchers))


def or_none(m: Matcher) -> Matcher:
    return Matcher(f"{m.text} (or none)", "or_none", m)


def category_matcher(names: Iterable[str]) -> Matcher:
    allowed = frozenset(str(n) for n in names)
    return Matcher(" or ".join(sorted(allowed)), "in", tuple(sorted(allowed)))


def bool_matcher(flag: bool) -> Matcher:
    want = "true" if flag else "false"
    return Matcher(want, "eq", want)


def driver_min(text: str) -> Matcher:
    return Matcher(f">= {text}", "driver_min", text)


def driver_max_branch(branch: int) -> Matcher:
    return Matcher(f"branch R{branch} or older", "branch_max", branch)


def driver_min_branch(branch: int) -> Matcher:
    return Matcher(f"branch R{branch} or newer", "branch_min", branch)


def mm_range(lo: str | None, hi: str | None, allow_none: bool = False) -> Matcher:
    """Major.minor between lo and hi inclusive (patch releases of hi included)."""
    if lo and hi:
        text = f"{lo} to {hi}.x"
    elif lo:
        text = f">= {lo}"
    else:
        text = f"<= {hi}.x"
    return Matcher(text + (" (or none)" if allow_none else ""), "mm_range", (lo, hi, allow_none))


def arch_matcher(arch: list[str]) -> Matcher:
    """Compute capabilities an arch list runs on: a cubin for X.Y runs on X.Z for Z >= Y (same
    major); PTX for X.Y is compiled by the driver for any newer GPU."""
    return Matcher("sm " + ", ".join(arch), "arch", tuple(arch))


def matcher_for(c, comp: str, value, node, where: str) -> Matcher:
    """Compile a YAML value for one component into a Matcher (validated)."""
    if comp not in COMPONENTS:
        c.fail(f"{where}: unknown component {comp!r} (known: {', '.join(COMPONENTS)})", node, comp)
    if value == NONE:
        return none_matcher()
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
                out.append(Matcher(text, "driver_spec", text))
            else:
                out.append(version_matcher(text))
        except VersionSyntaxError as exc:
            c.fail(f"{where}: {comp}: {exc}", node, comp)
    return any_of(out)
