"""The generic search (solver.py's docstring says how it works): `_search` assigns the stack's
components in order over `Problem`'s domains, checks every rule as soon as its components are
known, and backtracks; a `Trace` records which rule removed which candidate, for explain.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

from ..knowledge import Rule

from .problem import Problem



# --------------------------------------------------------------------------------------------------
# The search


@dataclass
class Trace:
    """The reporter: what the search saw."""

    fired: dict[str, Rule] = field(default_factory=dict)     # rule id -> rule, every violation
    steps: int = 0


def _search(p: Problem, disabled: frozenset[str] = frozenset(), trace: Trace | None = None,
            domains: dict[str, list[str]] | None = None,
            passed: list | None = None, start: int = 0, stop: int | None = None,
            prefix: dict[str, str] | None = None) -> Iterator[dict[str, str]]:
    """Yield consistent stacks, best first. `passed`, when given, receives per depth the better
    candidates passed over on the way to each yielded solution. `start`/`stop` search only the
    components order[start:stop], given `prefix` for those before `start`."""
    doms = domains or p.domains
    order = p.order
    n = len(order) if stop is None else stop
    assign: dict[str, str] = dict(prefix or {})
    tried: list[list[tuple[str, str | None]]] = [[] for _ in order]
    # Whether the components from depth d on can be completed depends only on the values of the
    # earlier components that the rules checked from depth d on mention: a subtree that failed once
    # for those values fails again (without this, a search with no answer, as the explanation's
    # rule-deletion runs many, could take minutes).
    keys = _subtree_keys(p, disabled, n)
    dead: set[tuple] = set()
    active, violated = p.compiled.active, Problem.violated

    def rec(d: int):
        if d == n:
            if passed is not None:
                passed.append([list(t) for t in tried])
            yield dict(assign)
            return
        comp = order[d]
        tried[d] = []
        rules = active(d, assign, disabled)
        for val in p.ordered(comp, assign, doms[comp]):
            assign[comp] = val
            if trace is not None:
                trace.steps += 1
            bad = None
            for rule, compiled in rules:        # the first broken rule, in checking order
                if violated(compiled, assign):
                    bad = rule
                    break
            if bad is not None:
                if trace is not None:
                    trace.fired[bad.id] = bad
                tried[d].append((val, bad.id))
                continue
            key = (d + 1, tuple(assign[c] for c in keys[d + 1]))
            found = False
            if key not in dead:
                for sol in rec(d + 1):
                    found = True
                    yield sol
                if not found:
                    dead.add(key)
            if not found:
                tried[d].append((val, None))
        assign.pop(comp, None)

    if p.host_violations and not (set(r.id for r in p.host_violations) <= disabled):
        return
    yield from rec(start)


def _subtree_keys(p: Problem, disabled: frozenset[str], n: int) -> list[tuple[str, ...]]:
    """keys[d]: the components before depth d that a rule checked at depth d..n-1 mentions (the
    same for every search of the compiled rules that disables none: computed once for those)."""
    if disabled:
        return _subtree_keys_of(p, disabled, n)
    keys = p.compiled.subtree_keys.get(n)
    if keys is None:
        keys = p.compiled.subtree_keys[n] = _subtree_keys_of(p, disabled, n)
    return keys


def _subtree_keys_of(p: Problem, disabled: frozenset[str], n: int) -> list[tuple[str, ...]]:
    keys: list[tuple[str, ...]] = [()] * (n + 1)
    mentioned: set[str] = set()
    for d in range(n - 1, -1, -1):
        for rule, compiled in p.by_depth[d]:
            if rule.id in disabled:
                continue
            for part, comp, allowed in compiled:
                if part == "any":
                    mentioned.update(c for alt in allowed for c, _ in alt)
                else:
                    mentioned.add(comp)
        keys[d] = tuple(c for c in p.order[:d] if c in mentioned)
    return keys


def _first(p: Problem, disabled=frozenset(), domains=None) -> dict[str, str] | None:
    for sol in _search(p, disabled, domains=domains):
        return sol
    return None
