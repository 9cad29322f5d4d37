"""NVIDIA's container requirements (`NVIDIA_REQUIRE_*`), judged as NVIDIA's runtime judges them.

Every runtime that starts a GPU container through libnvidia-container (the NVIDIA Container Toolkit's
hook, enroot and so pyxis) passes each `NVIDIA_REQUIRE_*` variable of the image to
`nvidia-container-cli configure --require=...` unless `NVIDIA_DISABLE_REQUIRE` is set, and refuses to
start the container when one is unsatisfied ("unsatisfied condition: ..."). This module is a model
of that check, written from the rules of libnvidia-container's `src/cli/dsl.c` and
`src/cli/configure.c` (https://github.com/NVIDIA/libnvidia-container), so imagebuild can say
"NVIDIA's runtime would refuse this image here" before a user finds out:

- a requirement is a list of alternatives separated by single spaces (OR); each alternative is a
  list of conditions separated by commas (AND); empty items are skipped; alternatives are tried in
  order and the first one whose conditions all hold satisfies the requirement (later ones are not
  read, nor are the conditions after the first false one of an alternative);
- a condition is NAME OP VALUE: NAME one of cuda, driver, arch, brand (any case), OP exactly one of
  = != < <= > >=, VALUE not empty; anything else is an invalid expression, which fails the
  container whatever else holds;
- `cuda` is the CUDA version the host's driver supports (NVML's, "13.0" on an R580 driver), not the
  image's; `driver` the driver's version; `arch` a GPU's compute capability ("9.0"); `brand` the
  GPU's brand as libnvidia-container names it (Quadro, Tesla, NVS, GRID, GeForce, TITAN, and
  Unknown for every other NVML brand: the NVIDIA brand that A100, H100 and later data-center GPUs
  report, and the RTX workstation brands). Versions compare numerically part by part, trailing
  zero parts ignored (13.0 = 13); brands case-insensitively, with = and != only;
- the conditions on arch and brand hold when no GPU is visible; on a node with GPUs every
  requirement is judged once per visible GPU, each against that GPU; a fact the driver does not
  report makes its conditions hold;
- an unsatisfied requirement is reported by its text up to the first space.

Standard library only: it runs inside every image (imagebuild-check) and in imagebuild itself.
"""

from __future__ import annotations

from dataclasses import dataclass

OPERATORS = ("=", "!=", "<", "<=", ">", ">=")
NAMES = ("cuda", "driver", "arch", "brand")
PREFIX = "NVIDIA_REQUIRE_"
DISABLE = "NVIDIA_DISABLE_REQUIRE"
_UINTMAX = (1 << 64) - 1
#: the brands libnvidia-container reports (driver.c: NVML's brands it names; every other is Unknown)
RUNTIME_BRANDS = ("Quadro", "Tesla", "NVS", "GRID", "GeForce", "TITAN", "Unknown")


class InvalidRequirement(ValueError):
    """The runtime answers "invalid expression": the container does not start."""


@dataclass(frozen=True)
class Gpu:
    arch: str                      # compute capability, "9.0"
    brand: str | None = "Unknown"  # as libnvidia-container reports it; None: not reported


@dataclass(frozen=True)
class Node:
    """What the runtime reads of a node: the driver's version and the CUDA version it supports
    (None: not reported), and the GPUs visible to the container."""
    driver: str | None
    cuda: str | None
    gpus: tuple[Gpu, ...] = ()


def compare_version(v1: str, op: str, v2: str) -> bool:
    """v1 OP v2 as libnvidia-container compares versions; InvalidRequirement where it answers -1
    (a character other than digits and dots, a part that is no number, a number too large)."""
    for v in (v1, v2):
        if any(ch not in "0123456789." for ch in v):
            raise InvalidRequirement(f"{v!r} is not a version (digits and dots only)")
    i = j = 0
    while i < len(v1) and j < len(v2):
        n1, i2 = _number(v1, i)
        n2, j2 = _number(v2, j)
        if n1 != n2:
            if op == "=":
                return False
            if op == "!=":
                return True
            if op in ("<", "<="):
                return n1 < n2
            return n1 > n2
        i = _skip(v1, i2, ".")
        j = _skip(v2, j2, ".")
    rest1 = v1[_skip(v1, i, ".0"):]
    rest2 = v2[_skip(v2, j, ".0"):]
    if op == "!=":
        return bool(rest1 or rest2)
    if op in ("=", "<=", ">="):
        if not rest1 and not rest2:
            return True
        if op == "=":
            return False
    if op in ("<", "<="):
        return not rest1 and bool(rest2)
    return bool(rest1) and not rest2


def _number(text: str, at: int) -> tuple[int, int]:
    end = at
    while end < len(text) and text[end].isdigit():
        end += 1
    if end == at:
        raise InvalidRequirement(f"{text!r}: a part is no number")
    value = int(text[at:end])
    if value >= _UINTMAX:
        raise InvalidRequirement(f"{text!r}: a number too large")
    return value, end


def _skip(text: str, at: int, chars: str) -> int:
    while at < len(text) and text[at] in chars:
        at += 1
    return at


def parse_condition(expr: str) -> tuple[str, str, str]:
    """(name, operator, value) of one condition; InvalidRequirement as the runtime's -1."""
    n = 0
    while n < len(expr) and expr[n] not in "<>=!":
        n += 1
    if n == 0:
        raise InvalidRequirement(f"{expr!r}: no name before the operator")
    m = n
    while m < len(expr) and expr[m] in "<>=!":
        m += 1
    run, value = expr[n:m], expr[m:]
    # the first operator, in the runtime's order, whose first len(run) characters are the run
    # (strncmp over the run's length): `!` alone is taken as `!=`, `<` as `<` before `<=`
    op = next((o for o in OPERATORS if len(o) >= len(run) and o[:len(run)] == run), None)
    if not run or op is None:
        raise InvalidRequirement(f"{expr!r}: {run or 'no operator'} is not one of {' '.join(OPERATORS)}")
    if not value:
        raise InvalidRequirement(f"{expr!r}: no value")
    name = expr[:n].lower()
    if name not in NAMES:
        raise InvalidRequirement(f"{expr!r}: {expr[:n]!r} is not one of {', '.join(NAMES)}")
    return name, op, value


def _condition(expr: str, node: Node, gpu: Gpu | None) -> bool:
    name, op, value = parse_condition(expr)
    if name == "cuda":
        return True if node.cuda is None else compare_version(node.cuda, op, value)
    if name == "driver":
        return True if node.driver is None else compare_version(node.driver, op, value)
    if gpu is None:      # no GPU visible: arch and brand are taken to hold
        return True
    if name == "arch":
        return compare_version(gpu.arch, op, value)
    if gpu.brand is None:
        return True
    if op not in ("=", "!="):
        raise InvalidRequirement(f"{expr!r}: a brand compares with = or != only")
    return (gpu.brand.lower() == value.lower()) == (op == "=")


def satisfied(requirement: str, node: Node, gpu: Gpu | None) -> bool:
    """Whether one requirement holds for one GPU (None: none visible), in the runtime's order of
    reading; InvalidRequirement for a condition it reads and cannot parse."""
    ret = True
    for alternative in requirement.split(" "):
        if not alternative:
            continue
        completed = True
        for expr in alternative.split(","):
            if not expr:
                continue
            ret = _condition(expr, node, gpu)
            if not ret:
                completed = False
                break
        if completed:
            break
    return ret


def unsatisfied_message(requirement: str) -> str:
    """The runtime's message for an unsatisfied requirement: its text up to the first space."""
    head = requirement.split(" ", 1)[0]
    if head.startswith("cuda>="):
        return (f"unsatisfied condition: {head}, please update your driver to a newer version, "
                "or use an earlier cuda container")
    return f"unsatisfied condition: {head}"


def requirements(env: dict[str, str]) -> list[tuple[str, str]]:
    """(variable, requirement) for each NVIDIA_REQUIRE_* of an image's environment, by name, as
    enroot's hook lists them; none when NVIDIA_DISABLE_REQUIRE is set to anything."""
    if env.get(DISABLE):
        return []
    return sorted((k, v) for k, v in env.items() if k.startswith(PREFIX))


def admits(env: dict[str, str], node: Node) -> tuple[bool, str]:
    """(True, "") when NVIDIA's runtime starts a container of this environment on this node, else
    (False, its error): every requirement judged per visible GPU, or once with no GPU."""
    reqs = requirements(env)
    targets: tuple[Gpu | None, ...] = node.gpus or (None,)
    for gpu in targets:
        for name, req in reqs:
            try:
                ok = satisfied(req, node, gpu)
            except InvalidRequirement as exc:
                return False, f"requirement error: invalid expression ({name}: {exc})"
            if not ok:
                return False, f"requirement error: {unsatisfied_message(req)}"
    return True, ""


def check_syntax(requirement: str) -> None:
    """Every condition of a requirement parses (the runtime reads only some of them: a condition it
    would skip could still be wrong). InvalidRequirement naming the first that does not."""
    for alternative in requirement.split(" "):
        for expr in alternative.split(","):
            if expr:
                name, op, value = parse_condition(expr)
                if name == "brand":
                    if op not in ("=", "!="):
                        raise InvalidRequirement(f"{expr!r}: a brand compares with = or != only")
                else:
                    compare_version(value, "=", value)
