"""Versions and specifiers.

Software versions (CUDA 12.4.1, cuDNN 9.1.0.70, NCCL 2.21.5, torch 2.4.1) are PEP 440 versions from
`packaging`; a specifier is a PEP 440 SpecifierSet ("<13,>=12.4") or a bare version ("12.4"), which
means "12.4 or any 12.4.x". The literal "none" names an absent component.

Driver versions (535.104.05) are not PEP 440 (the "05" is a field, not a number to normalise), so they
are compared as tuples of integers; their branch is the first field (R535).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from packaging.version import InvalidVersion, Version

NONE = "none"

_VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+){0,4}\Z")
_DRIVER_RE = re.compile(r"^[0-9]{3}(\.[0-9]{1,3}){0,2}\Z")
_SPEC_ATOM_RE = re.compile(r"^(==|!=|>=|<=|>|<|~=)?\s*[0-9]+(\.[0-9]+){0,4}(\.\*)?\Z")


class VersionSyntaxError(ValueError):
    """A string that is not a version or specifier we accept."""


@lru_cache(maxsize=4096)
def parse_version(text: str) -> Version:
    """A strict release version: digits and dots only (no local parts, no 'latest')."""
    text = str(text).strip()
    if not _VERSION_RE.match(text):
        raise VersionSyntaxError(f"malformed version {text!r} (expected digits and dots, e.g. 12.4.1)")
    try:
        return Version(text)
    except InvalidVersion:  # pragma: no cover - the pattern above is stricter
        raise VersionSyntaxError(f"malformed version {text!r}") from None


def is_version(text: str) -> bool:
    return bool(_VERSION_RE.match(str(text).strip()))


@dataclass(frozen=True, order=True)
class DriverVersion:
    """An NVIDIA Linux driver version such as 535.104.05, ordered field by field."""

    fields: tuple[int, ...]
    text: str

    @property
    def branch(self) -> int:
        return self.fields[0]

    def __str__(self) -> str:
        return self.text


@lru_cache(maxsize=1024)
def parse_driver(text: str) -> DriverVersion:
    text = str(text).strip()
    if not _DRIVER_RE.match(text):
        raise VersionSyntaxError(
            f"malformed driver version {text!r} (expected e.g. 535.104.05)")
    fields = tuple(int(p) for p in text.split("."))
    # pad so that 570.26 < 570.26.1 and 580 compares as 580.0.0
    return DriverVersion(fields + (0,) * (3 - len(fields)), text)


def parse_host_driver(text: str) -> DriverVersion:
    """A host's driver as a user gives it: a release (535.104.05), never a bare branch. A branch
    stands for every release on it, and the answers differ across them (a CUDA release needs the
    driver it shipped with, which is a release inside a branch), so `580` is refused rather than
    read as 580.0.0, which no driver is; so is NVIDIA's way of naming a branch, R580."""
    branch = re.fullmatch(r"\s*[Rr](\d{3})\s*", str(text))
    drv = parse_driver(branch.group(1) if branch else text)
    if "." not in drv.text:
        raise VersionSyntaxError(
            f"{str(text).strip()!r} is a driver branch, not a driver release: give the whole version the "
            f"node reports (nvidia-smi --query-gpu=driver_version --format=csv,noheader, or "
            f"`imagebuild doctor`), such as {drv.text}.NN.NN")
    return drv


@dataclass(frozen=True)
class Spec:
    """A specifier over versions, or the literal 'none' (component absent), or 'any'.

    Its clauses are PEP 440 comparisons of plain releases (`_SPEC_ATOM_RE`), and the versions it
    is asked about are plain releases too (parse_version), so each clause is one comparison of
    release numbers, evaluated here as PEP 440 defines it for such versions (zero padding; `.*`
    prefix matching; `~=`); no pre-, post- or dev-release or local label can occur on either
    side, which is all that packaging's SpecifierSet adds. tests/knowledge/test_versions.py holds the two
    to the same verdicts over every version the matrix names."""

    text: str
    clauses: tuple[tuple[str, tuple[int, ...], bool], ...] | None   # (op, release, .*); None: "none"
    none: bool = False
    # value -> verdict: the resolver asks the same few hundred versions of each specifier over
    # and over; bounded, cleared when full
    _memo: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    def contains(self, value: str) -> bool:
        verdict = self._memo.get(value)
        if verdict is None:
            if value == NONE:
                verdict = self.none
            elif self.none:
                verdict = False
            else:
                release = parse_version(value).release
                verdict = all(_holds(op, want, wild, release) for op, want, wild in self.clauses)
            if len(self._memo) >= 4096:
                self._memo.clear()
            self._memo[value] = verdict
        return verdict

    def __str__(self) -> str:
        return self.text


def _strip(release: tuple[int, ...]) -> tuple[int, ...]:
    """A release without its trailing zeros: 12.4 and 12.4.0 are one version (PEP 440)."""
    end = len(release)
    while end > 1 and release[end - 1] == 0:
        end -= 1
    return release[:end]


def _prefixed(release: tuple[int, ...], prefix: tuple[int, ...]) -> bool:
    """`==prefix.*`: the release, padded with zeros to the prefix's length, starts with it."""
    n = len(prefix)
    return (release + (0,) * (n - len(release)))[:n] == prefix


def _holds(op: str, want: tuple[int, ...], wild: bool, release: tuple[int, ...]) -> bool:
    if op in ("==", "!="):
        same = _prefixed(release, want) if wild else _strip(release) == _strip(want)
        return same == (op == "==")
    have, want_s = _strip(release), _strip(want)
    if op == ">=":
        return have >= want_s
    if op == "<=":
        return have <= want_s
    if op == ">":
        return have > want_s
    if op == "<":
        return have < want_s
    # "~=": this release or a later one of the same series (~=2.4.1: >=2.4.1, ==2.4.*)
    return have >= want_s and _prefixed(release, want[:-1])


ANY = Spec("any", ())


@lru_cache(maxsize=4096)
def parse_spec(text: str) -> Spec:
    """Parse '>=2.4', '12.4' (== 12.4 or 12.4.x), '==2.4.1', '>=12,<13', 'none' or 'any'."""
    raw = str(text).strip()
    if raw == NONE:
        return Spec(NONE, None, none=True)
    if raw in ("", "any", "*"):
        return ANY
    clauses = []
    for atom in (a.strip() for a in raw.split(",")):
        match = _SPEC_ATOM_RE.match(atom)
        if not match:
            raise VersionSyntaxError(
                f"malformed specifier {raw!r} (expected e.g. '>=2.4', '12.4', '>=12,<13' or 'none')")
        op = match.group(1) or "=="         # a bare version: that release and its patch releases
        number = atom[len(match.group(1) or ""):].strip()
        wild = number.endswith(".*") or not match.group(1)
        release = parse_version(number.removesuffix(".*")).release
        # PEP 440: a wildcard only after == and !=; ~= needs two release numbers, and no wildcard
        if wild and op not in ("==", "!=") or op == "~=" and len(release) < 2:
            raise VersionSyntaxError(f"malformed specifier {raw!r}")
        clauses.append((op, release, wild))
    return Spec(raw, tuple(clauses))


def version_key(value: str):
    """Sort key: 'none' sorts below every version."""
    if value == NONE:
        return (0, Version("0"))
    return (1, parse_version(value))


def major_minor(value: str) -> str:
    v = parse_version(value)
    return f"{v.major}.{v.minor}"
