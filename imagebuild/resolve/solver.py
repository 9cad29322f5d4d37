"""The resolver: the best consistent stack for a host and a set of wishes, and why.

The search is generic: `Problem` (the provider) turns the knowledge, the host facts and the wishes
into domains of candidate values, ordered best first, and rules over them; `_search` assigns the
stack's components in order, checks every rule as soon as its components are known, and backtracks.
It knows nothing about CUDA. A `Trace` (the reporter) records which rule removed which candidate, and
the explanations are built from what it saw:

- for a solution: per component, the better candidates that were passed over and the fact that ruled
  each out;
- for no solution: a minimal set of facts that together leave nothing (deletion-based: a fact stays in
  the set only if the problem becomes solvable without it), printed as a chain with sources.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field, replace
from typing import Iterator

from ..errors import UsageError
from ..knowledge import STACK, Knowledge, Matcher, Rule, version_matcher
from ..versions import (NONE, VersionSyntaxError, major_minor, parse_driver, parse_host_driver,
                        parse_version, version_key)

# A CPU build ("n/a": no CUDA) ranks last: on a GPU host any CUDA build that runs beats it.
MODE_RANK = {"native": 0, "minor-version": 1, "forward-compat": 2, "unknown": 3, "n/a": 4}


# --------------------------------------------------------------------------------------------------
# Inputs


@dataclass(frozen=True)
class Host:
    """What is known about the cluster's nodes. None means unknown (not checked)."""

    driver: str | None = None
    gpu: str | None = None          # product name, sm_XY, or "none"
    kernel: str | None = None
    ofed: bool | None = None
    open_kernel_modules: bool | None = None
    date: str | None = None         # the day end-of-life is judged on (default: the matrix's as_of)


@dataclass(frozen=True)
class CudaMode:
    mode: str                       # native | minor-version | forward-compat | unknown | n/a
    text: str
    source: str | None = None
    package: str | None = None
    caveat: str | None = None


@dataclass
class Resolution:
    ok: bool
    stack: dict[str, str] = field(default_factory=dict)
    mode: CudaMode | None = None
    explanation: list[str] = field(default_factory=list)
    gpudirect: list[dict] = field(default_factory=list)
    min_driver: str | None = None
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        modes = {}
        if self.mode is not None:
            modes["cuda"] = {"mode": self.mode.mode, "detail": self.mode.text}
            if self.mode.package:
                modes["cuda"]["package"] = self.mode.package
            if self.mode.caveat:
                modes["cuda"]["caveat"] = self.mode.caveat
        if self.gpudirect:
            modes["gpudirect"] = self.gpudirect
        return {"ok": self.ok, "stack": dict(self.stack), "modes": modes,
                "min_driver": self.min_driver, "explanation": list(self.explanation),
                "warnings": list(self.warnings)}


# --------------------------------------------------------------------------------------------------
# The provider


@dataclass(frozen=True)
class Fact:
    """One reason a candidate or combination is excluded: a rule, a CUDA-mode verdict, a wish."""

    key: str            # stable id used by the core search
    text: str
    source: str | None


class Problem:
    """Domains and rules for one query. Values are strings; 'none' means absent."""

    def __init__(self, k: Knowledge, host: Host, wishes: dict[str, str] | None = None,
                 allow_unverified: bool = False, repo_cuda: bool = False,
                 skip_tags: frozenset[str] = frozenset(), compat_package: bool = True,
                 system: dict[str, str] | None = None):
        self.k = k
        self.host = host
        self.date = host.date or k.as_of
        self.allow_unverified = allow_unverified
        # repo_cuda: CUDA must come from NVIDIA's package repository for the OS (what the image
        # recipes install); otherwise a PyTorch stack takes CUDA from the wheels torch pins.
        self.repo_cuda = repo_cuda
        # compat_package: a mode that needs a package (cuda-compat-X-Y) is open; an image whose
        # CUDA comes from torch's wheels carries none, so forward compatibility is not its to offer
        self.compat_package = compat_package
        self.skip_tags = skip_tags
        self.facts_host: dict[str, str] = self._host_facts(host)
        # system copies (NGC-style: cuDNN or NCCL the host provides beside the stack's own):
        # library -> (as given, the releases it can be); they narrow CUDA (_build_domains)
        self.system = {comp: (val, system_releases(k, comp, val))
                       for comp, val in sorted((system or {}).items())}
        self.system_rules: dict[str, list[Rule]] = {}    # system_copy_problems' rules per library
        self.wishes = {c: self._wish(c, s) for c, s in (wishes or {}).items()}
        # what depends only on the knowledge and the options is shared by every query that has
        # the same ones (images.expand and hostfit.fits make dozens): see _RuleSet
        self.ruleset = _RuleSet.of(k, allow_unverified, repo_cuda, skip_tags)
        self.rules = list(self.ruleset.rules)
        # (pytorch, cuda major.minor) -> the NCCL its wheels bundle: ranked before newer NCCLs
        self.bundled_nccl = self.ruleset.bundled_nccl
        self.order = list(STACK)
        self.domains: dict[str, list[str]] = {}
        self.pruned: dict[str, dict[str, Fact]] = {c: {} for c in STACK}  # value -> why removed
        self.modes: dict[str, CudaMode] = {}
        self._build_domains()
        self._index_rules()

    # -- host facts

    def _host_facts(self, host: Host) -> dict[str, str]:
        facts: dict[str, str] = {}
        if host.driver is not None:
            try:
                parse_host_driver(host.driver)
            except VersionSyntaxError as exc:
                raise UsageError(str(exc), argument="--driver") from None
            facts["driver"] = host.driver
        if host.gpu is not None:
            if host.gpu.lower() == NONE:
                facts["gpu"], facts["gpu.cc"], facts["gpu.datacenter"] = NONE, NONE, "false"
            else:
                gpu = self.k.gpu_by_name(host.gpu)
                if gpu is None:
                    known = ", ".join(sorted(self.k.gpus))
                    raise UsageError(f"unknown GPU {host.gpu!r} (a name: {known}; or sm_XY)",
                                     argument="--gpu")
                facts["gpu"], facts["gpu.cc"] = gpu.name, gpu.cc
                facts["gpu.datacenter"] = "true" if gpu.datacenter else "false"
        if host.kernel is not None:
            try:
                parse_version(host.kernel)
            except VersionSyntaxError as exc:
                raise UsageError(str(exc), argument="--kernel") from None
            facts["kernel"] = host.kernel
        if host.ofed is not None:
            facts["ofed"] = "true" if host.ofed else "false"
        if host.open_kernel_modules is not None:
            facts["open_kernel_modules"] = "true" if host.open_kernel_modules else "false"
        if host.date is not None:
            try:
                _dt.date.fromisoformat(host.date)
            except ValueError:
                raise UsageError(f"malformed date {host.date!r} (YYYY-MM-DD)",
                                 argument="--date") from None
        return facts

    def gpu_host(self) -> bool:
        """The host has a GPU: its --gpu names one, or only its driver is given."""
        gpu = self.facts_host.get("gpu")
        return (gpu is not None and gpu != NONE) or (gpu is None and "driver" in self.facts_host)

    def _wish(self, comp: str, spec: str) -> Matcher:
        if comp not in STACK:
            raise UsageError(f"unknown component {comp!r} (one of {', '.join(STACK)})",
                             argument=f"--{comp}")
        if comp in ("os", "platform"):
            names = [s.strip() for s in spec.split(",")]
            if comp == "platform":   # arm64, sbsa, amd64: the names other tools use
                alias = {a: pid for pid, e in self.k.platforms.items() for a in e.get("aliases", [])}
                names = [alias.get(n, n) for n in names]
            known = list(self.k.os) if comp == "os" else self.k.domain("platform")
            unknown = [n for n in names if n not in known]
            if unknown:
                raise UsageError(f"unknown {'OS' if comp == 'os' else comp} {unknown[0]!r} "
                                 f"(one of {', '.join(known)})", argument=f"--{comp}")
            return Matcher(" or ".join(names), frozenset(names).__contains__)
        try:
            return version_matcher(spec)
        except VersionSyntaxError as exc:
            raise UsageError(str(exc), argument=f"--{comp}") from None

    def _system_conflict(self, cuda: str) -> str:
        """Why the host's system copies cannot sit beside CUDA ``cuda`` ('' when they can)."""
        if cuda == NONE:
            return ""
        out = []
        for comp, (val, matches) in self.system.items():
            out += system_copy_problems(self, comp, val, matches, cuda) if matches else [
                f"system {comp} {val}: not a {comp} release the knowledge names"]
        return "; ".join(out)

    # -- CUDA modes (interpreted from the cuda.modes data)

    def cuda_mode(self, version: str) -> CudaMode | None:
        """The first mode whose conditions hold for this release on this host, or None."""
        if version == NONE:
            return CudaMode("n/a", "no CUDA in the stack")
        drv = self.facts_host.get("driver")
        if drv is None:
            rel = self.k.releases[version]
            need = (f"native needs >= {rel.driver}" if rel.driver else
                    "the driver it shipped with is not known")
            return CudaMode("unknown", f"host driver not given; {need}", rel.source)
        if self.facts_host.get("gpu.cc") == NONE:
            return None
        return self._first_mode(version, drv)[0]

    def _first_mode(self, version: str, drv: str) -> tuple[CudaMode | None, list[str]]:
        rel = self.k.releases[version]
        v = parse_version(version)
        host = parse_driver(drv)
        reasons: list[str] = []
        for m in self.k.modes:
            if m.driver_floor == "release":
                if rel.driver is None:
                    reasons.append(f"the driver CUDA {version} shipped with is not known")
                    continue
                if host >= parse_driver(rel.driver):
                    return CudaMode(m.id, f"driver {drv} >= {rel.driver}, the driver CUDA {version} "
                                    f"shipped with [{rel.source}]", rel.source), reasons
                reasons.append(f"native needs driver >= {rel.driver} [{rel.source}]")
                continue
            if m.driver_floor == "major":
                floor, src = self.k.majors[v.major]
                if host >= parse_driver(floor):
                    return CudaMode(m.id, f"driver {drv} >= {floor}, the floor for any CUDA {v.major}.x "
                                    f"[{src}]", src, caveat=m.caveat), reasons
                reasons.append(f"CUDA {v.major}.x needs driver >= {floor} even with minor-version "
                               f"compatibility [{src}]")
                continue
            blocked = []
            pkg = (m.package or "").format(major=v.major, minor=v.minor)
            if pkg and not self.compat_package:
                reasons.append(f"the image carries no {pkg}: its CUDA comes from torch's wheels, "
                               "not NVIDIA's repository")
                continue
            for attr, want in m.gpu:
                have = self.facts_host.get(f"gpu.{attr}")
                if have is None:
                    blocked.append(f"the GPU is not known, and cuda-compat needs a {attr} GPU")
                elif have != ("true" if want else "false"):
                    blocked.append(f"{self.facts_host.get('gpu')} is not a data-center GPU, which "
                                   f"cuda-compat needs [{m.source}]")
            if m.branch_listed:
                entry = self.k.compat.get(f"{v.major}.{v.minor}")
                if entry is None:
                    blocked.append(f"no {pkg or 'cuda-compat'} support table for CUDA "
                                   f"{v.major}.{v.minor} is known [{m.source}]")
                elif host.branch not in entry.branches:
                    blocked.append(f"{pkg} supports driver branches "
                                   f"{', '.join(f'R{b}' for b in entry.branches)}, not the host's "
                                   f"R{host.branch} [{entry.source}]")
            if m.branch_supported:
                supported, why = self.k.branch_supported(host.branch, self.date)
                if not supported:
                    blocked.append(f"{why}, so cuda-compat cannot help [{m.source}]")
            if blocked:
                reasons.extend(blocked)
                continue
            return CudaMode(m.id, f"through {pkg}: the image's user-mode driver runs on the host's "
                            f"supported branch R{host.branch} [{m.source}]", m.source,
                            package=pkg, caveat=m.caveat), reasons
        return None, reasons

    # -- domains

    def _build_domains(self) -> None:
        k = self.k
        for comp in STACK:
            values = k.domain(comp, self.allow_unverified)
            kept = []
            wish = self.wishes.get(comp)
            for val in values:
                if wish is not None and not wish(val):
                    self.pruned[comp][val] = Fact(f"wish:{comp}", f"you asked for {comp} {wish.text}",
                                                  None)
                    continue
                if comp == "cuda" and val == NONE and wish is None and self.gpu_host():
                    # A user with a GPU wants a GPU stack; a CPU one only when asked for.
                    self.pruned[comp][val] = Fact(
                        "gpu-host", "the host has a GPU, so a CPU-only stack is given only when "
                        "asked for (--cuda none or --gpu none)", None)
                    continue
                if comp == "cuda":
                    mode = self.cuda_mode(val)
                    if mode is None:
                        _, reasons = (None, ["the host has no GPU"]) \
                            if self.facts_host.get("gpu.cc") == NONE \
                            else self._first_mode(val, self.facts_host["driver"])
                        self.pruned[comp][val] = Fact(f"mode:{val}", "; ".join(reasons), None)
                        continue
                    self.modes[val] = mode
                    why = self._system_conflict(val)
                    if why:
                        self.pruned[comp][val] = Fact(f"system:{val}", why, None)
                        continue
                kept.append(val)
            if comp == "cuda":
                # Within a major.minor, releases a repository or image is confirmed to carry come
                # before those known from NVIDIA's wheels only.
                kept.sort(key=lambda v: (v == NONE, tuple(-x for x in parse_version(
                    major_minor(v)).release) if v != NONE else (),
                    not k.releases[v].in_repository if v != NONE else False))
            if comp == "cuda" and "mode" in k.preference and \
                    k.preference.index("mode") < k.preference.index("cuda"):
                kept.sort(key=lambda v: MODE_RANK[self.modes[v].mode])  # stable: newest first within
            self.domains[comp] = kept

    # -- rules

    def _index_rules(self) -> None:
        # the rule set depends on the options too: they are part of the cache key below
        # The compiled rules depend on the host facts only (allowed sets are computed over whole
        # domains), so they are built once per host and kept on the knowledge object, with what
        # the search memoises about them (_Compiled).
        cache = self.k.__dict__.setdefault("_compiled", {})
        key = (tuple(sorted(self.facts_host.items())), self.allow_unverified, self.ruleset.ids)
        if key not in cache:
            cache[key] = _Compiled(self.order, *self._compile_rules())
        self.compiled = cache[key]
        self.host_violations, self.by_depth = self.compiled.host_violations, self.compiled.by_depth

    def _compile_rules(self):
        pos = {c: i for i, c in enumerate(self.order)}
        self.host_violations: list[Rule] = []
        self.by_depth: list[list[tuple[Rule, list]]] = [[] for _ in self.order]
        for r in self.rules:
            # An unknown host fact is not checked: a rule conditioned on one is skipped, and a
            # requirement on one is dropped (the image may still suit some hosts).
            if any(c not in pos and c not in self.facts_host for c, _ in r.when):
                continue
            compiled = []
            skip = False
            if r.any_of:
                alts = []
                for alt in r.any_of:
                    parts, host_ok = [], True
                    for comp, m in alt:
                        if comp in pos:
                            parts.append((comp, self._allowed(comp, m)))
                        elif comp in self.facts_host and not m(self.facts_host[comp]):
                            host_ok = False   # an unknown host fact is not checked
                    if host_ok:
                        alts.append(tuple(parts))
                if any(not parts for parts in alts) and not r.require:
                    continue                  # a row holds whatever the stack: nothing to check
                compiled.append(("any", None, tuple(alts)))
            for part in ("when", "require"):
                for comp, m in getattr(r, part):
                    if comp not in pos and comp not in self.facts_host:
                        continue
                    if comp in pos:
                        compiled.append((part, comp, self._allowed(comp, m)))
                    else:
                        holds = m(self.facts_host[comp])
                        if part == "when" and not holds:
                            skip = True
                        compiled.append((part, comp, holds))
            if skip or not any(part in ("require", "any") for part, _, _ in compiled):
                continue
            stack_comps = [comp for part, comp, _ in compiled if comp in pos]
            stack_comps += [comp for part, _, alts in compiled if part == "any"
                            for parts in alts for comp, _ in parts]
            if not stack_comps:
                if not all(h for part, _, h in compiled if part == "require") or \
                        any(part == "any" and not alts for part, _, alts in compiled):
                    self.host_violations.append(r)
                continue
            depth = max(pos[c] for c in stack_comps)
            self.by_depth[depth].append((r, compiled))
        return self.host_violations, self.by_depth

    def _all_values(self, comp: str) -> list[str]:
        return self.k.domain(comp, True)

    def _allowed(self, comp: str, m: Matcher) -> frozenset[str]:
        """The values of `comp` (over its whole domain, unverified ones too) that `m` admits. This
        depends on neither the host nor the options, so it is computed once per knowledge and
        matcher, not once per compilation (a process compiles the rules for several hosts and
        rule sets: the image expansion's, hostfit's, the query's own)."""
        cache = self.k.__dict__.setdefault("_allowed", {})
        hit = cache.get((comp, id(m)))
        if hit is None or hit[0] is not m:     # keyed by identity: the matcher is kept to pin it
            hit = cache[(comp, id(m))] = (m, frozenset(v for v in self._all_values(comp) if m(v)))
        return hit[1]

    @staticmethod
    def violated(compiled, assign: dict[str, str]) -> bool:
        for part, comp, allowed in compiled:
            if part != "when":
                continue
            ok = allowed if isinstance(allowed, bool) else assign[comp] in allowed
            if not ok:
                return False
        for part, comp, allowed in compiled:
            if part == "any":
                if not any(all(assign[c] in vals for c, vals in alt) for alt in allowed):
                    return True
                continue
            if part != "require":
                continue
            ok = allowed if isinstance(allowed, bool) else assign[comp] in allowed
            if not ok:
                return True
        return False

    def ordered(self, comp: str, assign: dict[str, str], values: list[str]) -> list[str]:
        """A component's candidates best first, given the components assigned before it: the NCCL
        a PyTorch build bundles ranks before newer ones (installed over it on request)."""
        if comp == "nccl" and assign.get("pytorch", NONE) != NONE and assign.get("cuda", NONE) != NONE:
            bundled = self.bundled_nccl.get((assign["pytorch"], major_minor(assign["cuda"])))
            if bundled is not None and bundled in values and values[0] != bundled:
                return [bundled] + [v for v in values if v != bundled]
        return values


def _tag_applies(tag: str | None, repo_cuda: bool, allow_unverified: bool = False) -> bool:
    if tag == "repo-cuda":
        return repo_cuda
    if tag == "wheel-cuda":
        return not repo_cuda
    if tag == "verified-only":      # the verified half of a fact whose unverified rule widens it
        return not allow_unverified
    return True


class _RuleSet:
    """The rules one set of options applies (allow_unverified, repo_cuda, skip_tags), and what
    derives from them alone, kept on the knowledge object for every Problem with those options: a
    `resolve` process asks dozens of queries (its declared image expands the matrix's images and
    checks them against the host), and filtering ~200 rules for each was a measurable share."""

    __slots__ = ("bundled_nccl", "driver_rules", "ids", "rules")

    def __init__(self, k: Knowledge, allow_unverified: bool, repo_cuda: bool,
                 skip_tags: frozenset[str]):
        self.rules = tuple(r for r in k.rules if (r.verified or allow_unverified)
                           and not (r.verified_only and allow_unverified)
                           and r.tag not in skip_tags
                           and _tag_applies(r.tag, repo_cuda, allow_unverified))
        self.ids = tuple(r.id for r in self.rules)
        # (pytorch, cuda major.minor) -> the NCCL its wheels bundle (read-only: shared)
        self.bundled_nccl = {key: v.nccl for key, v in k.variants.items()
                             if v.nccl != NONE and (v.verified or allow_unverified)}
        # min_driver's rules (those that ask for a driver) and the stack components they mention
        drules = tuple(r for r in self.rules
                       if any(comp == "driver" for comp, _ in r.require)
                       or any(comp == "driver" for alt in r.any_of for comp, _ in alt))
        comps = tuple(sorted({c for r in drules for c in r.components if c in STACK} | {"cuda"}))
        self.driver_rules = (drules, comps)

    @classmethod
    def of(cls, k: Knowledge, allow_unverified: bool, repo_cuda: bool,
           skip_tags: frozenset[str]) -> _RuleSet:
        cache = k.__dict__.setdefault("_rulesets", {})
        key = (allow_unverified, repo_cuda, frozenset(skip_tags))
        hit = cache.get(key)
        if hit is None or hit[0] is not k.rules:   # a knowledge given new rules: filter again
            hit = cache[key] = (k.rules, cls(k, allow_unverified, repo_cuda, frozenset(skip_tags)))
        return hit[1]


class _Compiled:
    """The rules compiled for one host and rule set (Problem._compile_rules), kept on the knowledge
    for every query with that host and rule set, with what the search needs of them per depth.

    `guarded[d]`: the rules checked at depth d, in checking order, each with the parts of its
    `when` on components assigned before depth d. A rule whose such part fails holds whatever the
    value at depth d (its condition is not met), so the search leaves it out for the whole loop
    over that depth's candidates instead of testing it against each: most rules at a depth are
    conditioned on one PyTorch release or CUDA version (27 of the 30 at NCCL's), so a candidate
    is tested against a few rules instead of all of them. The verdicts are the same ones, found
    in the same order."""

    #: lists of active rules kept per depth (see active), so that a long-lived process stays
    #: bounded; past it the list is made anew each time, as it is for searches that disable rules
    LIMIT = 1 << 14

    def __init__(self, order: list[str], host_violations: list[Rule],
                 by_depth: list[list[tuple[Rule, list]]]):
        self.host_violations = host_violations
        self.by_depth = by_depth
        pos = {c: i for i, c in enumerate(order)}
        self.guarded: list[list[tuple[Rule, list, tuple]]] = [
            [(rule, compiled, tuple((comp, allowed) for part, comp, allowed in compiled
                                    if part == "when" and comp in pos and pos[comp] < d))
             for rule, compiled in level]
            for d, level in enumerate(by_depth)]
        # the components the guards at each depth read, in the search's order: the memo's key
        self.guard_comps: list[tuple[str, ...]] = [
            tuple(sorted({c for _, _, guard in level for c, _ in guard}, key=pos.__getitem__))
            for level in self.guarded]
        self.memo: list[dict[tuple, list]] = [{} for _ in by_depth]
        self.subtree_keys: dict[int, list[tuple[str, ...]]] = {}   # searches that disable nothing

    def active(self, d: int, assign: dict[str, str], disabled: frozenset[str]) -> list[tuple]:
        """The (rule, compiled) pairs at depth d, in checking order, that are not disabled and
        whose condition on the components before d holds. For searches that disable nothing the
        list is memoised on those components' values (the same prefixes recur in every query)."""
        if not disabled:
            key = tuple([assign[c] for c in self.guard_comps[d]])
            hit = self.memo[d].get(key)
            if hit is not None:
                return hit
        out = []
        for rule, compiled, guard in self.guarded[d]:
            if rule.id in disabled:
                continue
            for comp, allowed in guard:
                if assign[comp] not in allowed:
                    break
            else:
                out.append((rule, compiled))
        if not disabled and len(self.memo[d]) < self.LIMIT:
            self.memo[d][key] = out
        return out


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


# --------------------------------------------------------------------------------------------------
# Public API


def resolve(k: Knowledge, host: Host, wishes: dict[str, str] | None = None,
            allow_unverified: bool = False, explain: bool = True,
            repo_cuda: bool = False, skip_tags: frozenset[str] = frozenset(),
            compat_package: bool = True, system: dict[str, str] | None = None,
            warnings: bool = True) -> Resolution:
    """The best stack, or (explain=True) the minimal chain of facts that rules every stack out.
    `repo_cuda`: CUDA must come from NVIDIA's repository for the OS (as image recipes install it).
    `skip_tags`: rules with these tags are not applied (see knowledge.RULE_TAGS).
    `compat_package`: forward compatibility (a cuda-compat package) is possible; an image whose
    CUDA comes from torch's wheels has none.
    `system`: cuDNN or NCCL the host provides (library -> version, NGC-style), beside the stack's
    own: only a CUDA they are built for and whose support matrix they meet on the host is chosen,
    and the answer names them (`system_cudnn`, `system_nccl`).
    `warnings=False`: leave out the warnings (end of life, unverified facts against the answer,
    why no PyTorch fits), for callers that only want the verdict: each costs a Problem of its own."""
    p = Problem(k, host, wishes, allow_unverified, repo_cuda, skip_tags, compat_package, system)
    passed: list = []
    trace = Trace()
    sol = None
    for s in _search(p, trace=trace, passed=passed):
        sol = s
        break
    if sol is None:
        why = explain_failure(p, trace) if explain else ["no consistent stack (not explained)"]
        return Resolution(ok=False, explanation=why,
                          warnings=_unverified_warning(p) + _end_of_life(p))
    res = _describe(p, sol, passed[0] if passed else None, brief=not explain)
    for comp, (val, matches) in p.system.items():
        if sol["cuda"] == NONE:
            res.warnings.append(f"system {comp} {val}: not used by a stack without CUDA")
            continue
        res.stack[f"system_{comp}"] = val
        if explain:
            facts, unknown = system_copy_facts(p, comp, val, matches, sol["cuda"])
            res.explanation.append(f"system {comp} {val}: consistent with CUDA {sol['cuda']} and "
                                   f"the host (beside the stack's own {comp} {sol[comp]}): {facts}")
            if warnings:
                res.warnings += unknown
    if explain and warnings:
        res.warnings += _end_of_life(p, res.mode) + _unverified_against(p, sol)
        if sol["pytorch"] == NONE and p.gpu_host() and "pytorch" not in (wishes or {}):
            res.warnings.append(_no_pytorch(k, host, wishes or {}, allow_unverified, repo_cuda,
                                            skip_tags, compat_package))
    return res


def _end_of_life(p: Problem, mode: CudaMode | None = None) -> list[str]:
    """The host's driver branch past its end of life on the day judged (--date, else the matrix's
    as_of), with the source; nothing when it is supported or its end is not known. A stack that
    reaches its CUDA through cuda-compat on that branch (forward compatibility onto an
    end-of-life branch) is flagged too."""
    drv = p.facts_host.get("driver")
    if drv is None:
        return []
    supported, why = p.k.branch_supported(parse_driver(drv).branch, p.date)
    if supported is not False:
        return []
    day = f"on {p.date}" + (" (--date)" if p.host.date else " (the matrix's as_of)")
    text = f"driver {drv}: {why}, judged {day}: NVIDIA no longer fixes it; plan an upgrade"
    if mode is not None and mode.package:
        text += (f". This stack's CUDA runs on it only through {mode.package}: forward "
                 "compatibility onto an end-of-life branch")
    return [text]


def _unverified_against(p: Problem, sol: dict[str, str]) -> list[str]:
    """Facts marked unverified that this stack breaks: the default answer ignores them, so it says
    which would rule it out (--allow-unverified applies them, and may answer an older stack). The
    rules are judged as the search judges them: compiled by a Problem that admits unverified facts."""
    if p.allow_unverified:
        return []
    q = Problem(p.k, p.host, None, True, p.repo_cuda, p.skip_tags, p.compat_package)
    broken = {r.id for r in q.host_violations if not r.verified}
    broken |= {r.id for level in q.by_depth for r, compiled in level
               if not r.verified and Problem.violated(compiled, sol)}
    return [f"an unverified fact rules this stack out: {rule.text}{_src(rule.source)} "
            f"(matrix.yaml line {rule.line}); confirm it: --allow-unverified applies it and may "
            "answer another stack" for rule in p.k.rules if rule.id in broken]


def _no_pytorch(k: Knowledge, host: Host, wishes: dict, allow_unverified: bool, repo_cuda: bool,
                skip_tags, compat_package: bool) -> str:
    """Why a GPU host got no PyTorch, and the nearest driver that gives one (the drivers CUDA
    releases shipped with, above the host's, lowest first), or that none in the knowledge does."""
    opts = dict(allow_unverified=allow_unverified, repo_cuda=repo_cuda, skip_tags=skip_tags,
                compat_package=compat_package)
    newest = max(k.pytorch, key=parse_version)
    why = resolve(k, host, {**wishes, "pytorch": newest}, explain=True, **opts)
    chain = "; ".join([e for e in why.explanation if "your wish" not in e][:2]) if not why.ok else ""
    text = f"no PyTorch fits this GPU host, so the stack has none (torch {newest}: {chain})" \
        if chain else "no PyTorch fits this GPU host, so the stack has none"
    if host.driver is not None:
        have = parse_driver(host.driver)
        drivers = sorted({r.driver for r in k.releases.values() if r.driver and r.verified
                          and parse_driver(r.driver) > have}, key=parse_driver)
        for drv in drivers:
            got = resolve(k, replace(host, driver=drv), wishes, explain=False, **opts)
            if got.ok and got.stack.get("pytorch", NONE) != NONE:
                return (f"{text}. Nearest change: a driver >= {drv} (R{parse_driver(drv).branch}) "
                        f"gives torch {got.stack['pytorch']} with CUDA {got.stack['cuda']}")
        return f"{text}. No newer driver in the knowledge gives one (the GPU's platform or " \
            "architecture rules it out)"
    return text


TAIL = ("openmpi", "ucx")


@dataclass
class StackGroup:
    """Every consistent stack that shares its first components; the tail components (Open MPI,
    UCX) are listed as the consistent pairs, since they rarely depend on the rest."""

    head: dict[str, str]
    tails: list[tuple[str, ...]]
    mode: CudaMode | None
    min_driver: str | None

    def to_json(self) -> dict:
        out = dict(self.head)
        for i, comp in enumerate(TAIL):
            out[comp] = sorted({t[i] for t in self.tails}, key=parse_version, reverse=True)
        out["stacks"] = len(self.tails)
        out["mode"] = self.mode.mode if self.mode else None
        out["min_driver"] = self.min_driver
        return out


def enumerate_stacks(k: Knowledge, host: Host, wishes: dict[str, str] | None = None,
                     allow_unverified: bool = False, repo_cuda: bool = False,
                     system: dict[str, str] | None = None) -> list[StackGroup]:
    """Every consistent stack, best first, grouped by everything but the tail components.
    The tail's consistent values depend only on the head components its rules mention, so they
    are computed once per distinct value of those (memoised). `system` as for resolve()."""
    p = Problem(k, host, wishes, allow_unverified, repo_cuda, system=system)
    split = len(p.order) - len(TAIL)
    assert tuple(p.order[split:]) == TAIL
    deps = sorted({c for level in p.by_depth[split:] for r, _ in level for c in r.components
                   if c in p.order[:split]})
    memo: dict[tuple, list[tuple[str, ...]]] = {}
    groups = []
    for head in _search(p, stop=split):
        key = tuple(head[c] for c in deps)
        tails = memo.get(key)
        if tails is None:
            tails = [tuple(s[c] for c in TAIL) for s in _search(p, start=split, prefix=head)]
            memo[key] = tails
        if tails:
            groups.append(StackGroup(head, tails, p.modes.get(head["cuda"]), min_driver(p, head)))
    return groups


SYSTEM_COPIES = ("cudnn", "nccl")


def check(k: Knowledge, host: Host, stack: dict[str, str],
          allow_unverified: bool = False,
          system: dict[str, str] | None = None, image: bool = False,
          cuda_from: str = "repository", warnings: bool = True) -> Resolution:
    """Is this stack consistent on this host? Each named component is a wish for that version
    (a less precise version matches its patch releases: cuDNN 9.14.0 is 9.14.0.x); a component
    not named is "any". `system` names copies installed beside the stack's own (NGC-style: a
    system cuDNN or NCCL next to the ones torch's wheels bring); each is checked against the
    facts about that library, the stack's CUDA and the host. `image`: the stack is an imagebuild
    image's, not a machine's: CUDA from NVIDIA's repository, or from torch's wheels with
    `cuda_from="wheels"`, UCX and Open MPI as the image built them (see image_reading)."""
    wishes = {}
    for comp, val in stack.items():
        if comp not in STACK:
            raise UsageError(f"unknown component {comp!r} (one of {', '.join(STACK)})",
                             argument=f"--{comp}")
        val = str(val).strip()
        if val.startswith("=="):
            val = val[2:]
        wishes[comp] = val
    # An existing machine's UCX/Open MPI may be built without CUDA: the rules about CUDA-aware
    # builds become warnings (when the stack breaks them) instead of ruling the machine out.
    if image:
        res = resolve(k, host, wishes, allow_unverified, warnings=warnings,
                      **image_reading(k, cuda_from, wishes))
    else:
        res = resolve(k, host, wishes, allow_unverified, skip_tags=frozenset({"cuda-aware"}),
                      warnings=warnings)
    if res.ok and not image:
        for rule in k.rules:
            if rule.tag == "cuda-aware" and (rule.verified or allow_unverified) and \
                    all(c in res.stack and m(res.stack[c]) for c, m in rule.when) and \
                    not all(c in res.stack and m(res.stack[c]) for c, m in rule.require):
                res.warnings.append(f"{rule.text}{_src(rule.source)}: fine if this "
                                    f"{'/'.join(sorted(c for c, _ in rule.require))} is built "
                                    "without CUDA, not if it must be CUDA-aware")
    for comp, val in sorted((system or {}).items()):
        problems, facts, unknown = _system_copy_verdict(k, host, comp, val,
                                                        res.stack if res.ok else stack)
        if problems:
            res.ok = False
            res.explanation = list(res.explanation) + problems
        elif res.ok:
            res.explanation.append(f"system {comp} {val}: consistent with CUDA "
                                   f"{res.stack.get('cuda')} and the host (checked beside the "
                                   f"stack's own {comp} {res.stack.get(comp)}): {facts}")
            res.stack[f"system_{comp}"] = val
            if warnings:
                res.warnings += unknown
    return res


def image_reading(k: Knowledge, cuda_from: str, stack: dict) -> dict:
    """How the resolver reads an image's stack: CUDA from NVIDIA's repository (the recipes install
    its packages: the `repo-cuda` rules bind) or from torch's wheels (the `wheel-cuda` rules bind:
    CUDA is the wheels' own); the `cuda-aware` rules (UCX >= 1.20 for CUDA 13, ...) only where the
    image's UCX is built with CUDA, not for an OS package built without it (Debian's libucx0);
    forward compatibility only where the image can carry cuda-compat (from the repository); and
    without PyTorch, CUDA from a repository unless the image takes the toolkit's wheels.
    `stack` names the UCX as a version or a wish (==1.13.1)."""
    ucx = str(stack.get("ucx") or "").lstrip("=")
    entry = k.ucx.get(ucx)
    skip = frozenset({"cuda-aware"}) if entry is not None and not entry.get("cuda_aware", True) \
        else frozenset()
    if cuda_from == "wheels":
        # the CUDA toolkit comes from NVIDIA's wheels (cuda-toolkit==X.Y.Z), with or without torch
        skip |= {"toolkit-repo"}
    return {"repo_cuda": cuda_from != "wheels", "skip_tags": skip,
            "compat_package": cuda_from != "wheels"}


def check_system_copy(k: Knowledge, host: Host, comp: str, val: str,
                      stack: dict[str, str]) -> list[str]:
    """The facts a system copy of cuDNN or NCCL violates (empty: none). The copy must be a release
    the knowledge knows, built for the stack's CUDA major, and meet its support matrix on this
    host; rules that tie a component to PyTorch's bundled copy do not bind it."""
    return _system_copy_verdict(k, host, comp, val, stack)[0]


def _system_copy_verdict(k: Knowledge, host: Host, comp: str, val: str,
                         stack: dict[str, str]) -> tuple[list[str], str, list[str]]:
    """check_system_copy's problems, and for a copy that fits, system_copy_facts' two answers."""
    matches = system_releases(k, comp, val)
    if not matches:
        return [f"system {comp} {val}: not a {comp} release the knowledge names"], "", []
    p = Problem(k, host, {}, False)
    problems = system_copy_problems(p, comp, val, matches, stack.get("cuda"))
    if problems:
        return problems, "", []
    return ([], *system_copy_facts(p, comp, val, matches, stack.get("cuda")))


def system_releases(k: Knowledge, comp: str, val: str) -> list[str]:
    """The releases the knowledge names that a system copy given as ``val`` (9.14.0: any
    9.14.0.x) can be; a malformed version or an unmodelled library is the user's mistake."""
    if comp not in SYSTEM_COPIES:
        raise UsageError(f"no system copy of {comp!r} is modelled (only {', '.join(SYSTEM_COPIES)})",
                         argument=f"--system-{comp}")
    try:
        spec = version_matcher(val)
    except VersionSyntaxError as exc:
        raise UsageError(str(exc), argument=f"--system-{comp}") from None
    # the wheels' releases (every NCCL a stack can select) and NVIDIA's redistributables (`redist`)
    known = set(k.cudnn_releases if comp == "cudnn" else k.domain("nccl", True))
    known |= set(k.library_releases.get(comp, ()))
    return [v for v in sorted(known, key=version_key, reverse=True) if v != NONE and spec(v)]


def system_copy_problems(p: Problem, comp: str, val: str, matches: list[str],
                         cuda: str | None) -> list[str]:
    """check_system_copy's rules, with the problem's own rules and host facts: the text of each
    rule no release in ``matches`` satisfies beside CUDA ``cuda`` on the host."""
    out = []
    for rule in _system_rules(p, comp):
        if "cuda" in rule.components and (cuda is None or cuda == NONE):
            continue

        def holds(pairs, value):
            for c, m in pairs:
                have = value if c == comp else (cuda if c == "cuda" else p.facts_host.get(c))
                if have is None:
                    continue      # not known: not checked
                if not m(have):
                    return False
            return True

        # The copy fits if some release matching `val` satisfies the rule.
        if not any(not holds(rule.when, v) or (holds(rule.require, v) and (
                not rule.any_of or any(holds(alt, v) for alt in rule.any_of)))
                for v in matches):
            out.append(f"system {comp} {val}: {rule.text}{_src(rule.source)}")
    return out


def _system_rules(p: Problem, comp: str) -> list[Rule]:
    """The rules about library ``comp`` alone (with CUDA and the host), those a system copy of it
    must meet: once per query, not per CUDA."""
    cache = p.system_rules
    if comp not in cache:
        allowed = {comp, "cuda", "driver", "gpu", "gpu.cc", "gpu.datacenter"}
        cache[comp] = [r for r in p.rules if comp in r.components and "pytorch" not in r.components
                       and r.components <= allowed]
    return cache[comp]


def system_copy_facts(p: Problem, comp: str, val: str, matches: list[str],
                      cuda: str | None) -> tuple[str, list[str]]:
    """What vouches for a system copy that fits beside CUDA ``cuda`` on the host: the releases it
    can be with the sources that name them (a wheel's S10, an NVIDIA redistributable's manifest),
    then every fact about it that applied here, with its source. And what is not known, as
    warnings: a cuDNN that no support-matrix line covers (or only an unverified one: its driver
    and GPUs are then not checked), a redistributable release whose CUDA builds were not read."""
    known = p.k.library_releases.get(comp, {})
    shown = matches[:3] + (["..."] if len(matches) > 3 else [])
    srcs = list(dict.fromkeys(s for m in matches for s in (known[m].sources if m in known else ())))
    parts = [f"release{'s' if len(matches) > 1 else ''} {', '.join(shown)}"
             + (" [" + ", ".join(srcs) + "]" if srcs else "")]

    def when_holds(rule, value):
        for c, m in rule.when:
            have = value if c == comp else (cuda if c == "cuda" else p.facts_host.get(c))
            if have is None or have == NONE or not m(have):
                return False
        return True

    applied = [r for r in _system_rules(p, comp) if any(when_holds(r, v) for v in matches)]
    parts += [f"{r.text}{_src(r.source)}" for r in applied]
    unknown = []
    if comp == "cudnn" and not any(r.any_of for r in applied):
        lines = [r for r in p.k.rules if r.any_of and any(
            c == comp and m(v) for c, m in r.when for v in matches)]
        if lines:
            unknown.append(f"system {comp} {val}: only an unverified support-matrix line is known for "
                           f"it ({lines[0].text}{_src(lines[0].source)}): the driver and GPUs it needs "
                           "are not checked unless --allow-unverified applies it")
        else:
            unknown.append(f"system {comp} {val}: no support-matrix line of the knowledge covers it "
                           "(matrix.yaml cudnn.lines): the driver and GPUs it needs are not checked")
    if srcs and not any(known[m].cuda_majors for m in matches if m in known):
        unknown.append(f"system {comp} {val}: the CUDA builds of "
                       f"{'this release' if len(matches) == 1 else 'these releases'} are not known "
                       f"[{', '.join(srcs)}]: judged by the CUDA majors the {comp} wheels cover")
    return "; ".join(parts), unknown


# --------------------------------------------------------------------------------------------------
# Explanations


def _src(sid: str | None) -> str:
    return f" [{sid}]" if sid else ""


def _describe(p: Problem, sol: dict[str, str], passed, brief: bool = False) -> Resolution:
    k = p.k
    stack = {"driver": p.facts_host.get("driver", "unknown"), "gpu": p.facts_host.get("gpu", "unknown")}
    stack.update({c: sol[c] for c in ("os", "platform", "python", "cuda", "cudnn", "nccl", "ucx",
                                      "openmpi", "pytorch")})
    if brief:
        return Resolution(ok=True, stack=stack, mode=p.modes.get(sol["cuda"]),
                          min_driver=min_driver(p, sol))
    mode = p.modes.get(sol["cuda"])
    res = Resolution(ok=True, stack=stack, mode=mode, min_driver=min_driver(p, sol))
    if brief:
        return res
    lines = []
    for d, comp in enumerate(p.order):
        val = sol[comp]
        why = _chosen_because(p, comp, val, sol)
        skipped = []
        if passed is not None:
            for cand, rid in passed[d][:3]:
                if rid is None:
                    # true only given what was chosen before it: say so (python 3.14 rules out
                    # an OS without it, not the OS on its own)
                    skipped.append(f"{cand} (no consistent stack with it" + (
                        f" and the {', '.join(p.order[:d])} chosen above)" if d else ")"))
                else:
                    rule = next(r for r in p.rules if r.id == rid)
                    skipped.append(f"{cand} ({rule.text}{_src(rule.source)})")
        line = f"{comp} {val}: {why}"
        if skipped:
            line += "; passed over: " + "; ".join(skipped)
        lines.append(line)
    if mode is not None and sol["cuda"] != NONE:
        text = f"CUDA {sol['cuda']} runs in {mode.mode} mode: {mode.text}"
        if mode.caveat:
            text += f" (caveat: {mode.caveat})"
        lines.append(text)
    res.explanation = lines
    res.gpudirect = gpudirect_paths(p, sol)
    res.warnings = _unverified_warning(p)
    if sol["pytorch"] != NONE:
        var = k.variants.get((sol["pytorch"], NONE if sol["cuda"] == NONE else major_minor(sol["cuda"])))
        if var is not None and var.arch is None and var.cuda != NONE:
            res.warnings.append(f"the GPU architectures of torch {var.pytorch}+{var.tag} are not "
                                "confirmed; only the CUDA toolkit's GPU support was checked")
    return res


def _unverified_warning(p: Problem) -> list[str]:
    if p.allow_unverified:
        return ["unverified facts were allowed (--allow-unverified): confirm them before relying "
                "on this answer"]
    return []


def _chosen_because(p: Problem, comp: str, val: str, sol: dict[str, str]) -> str:
    k = p.k
    if comp == "pytorch":
        if val == NONE:
            return "no PyTorch in this stack"
        return f"the newest release that fits{_src(k.pytorch[val]['source'])}"
    if comp == "cuda":
        if val == NONE:
            return "a CPU stack"
        rel = k.releases[val]
        return (f"newest CUDA {major_minor(val)}.x release{_src(rel.source)}, the best "
                f"compatibility mode first{_published(p, rel, sol)}")
    if comp in ("cudnn", "nccl"):
        var = k.variants.get((sol["pytorch"], NONE if sol["cuda"] == NONE else major_minor(sol["cuda"])))
        if var is not None and val != NONE:
            bundled = getattr(var, comp)
            if bundled == val:
                return f"bundled by torch {var.pytorch}+{var.tag}{_src(var.source)}"
            return (f"newer than the {bundled} torch {var.pytorch}+{var.tag} bundles"
                    f"{_src(var.source)}: installed over it (nvidia-{comp}-cu{val and major_minor(sol['cuda']).split('.')[0]}"
                    f"=={val}) and preloaded, as you asked")
        return "not part of this stack" if val == NONE else "newest that fits"
    if comp == "platform":
        entry = k.platforms.get(val)
        return (f"the first platform in the matrix's order that fits{_src(entry['source'])}"
                if entry else "the only platform the matrix knows")
    if comp == "python":
        return f"newest the OS offers that torch supports{_src(k.os[sol['os']]['source'])}"
    if comp == "os":
        return f"first in the matrix's OS order that fits{_src(k.os[val]['source'])}"
    table = getattr(k, comp)
    entry = table[val]
    how = "the OS's package" if entry["install"] == "os" else "built from the release tarball"
    if not entry.get("cuda_aware", True) and sol.get("cuda", NONE) != NONE:
        how += ", built without CUDA: not CUDA-aware"
    return f"newest that fits ({how}){_src(entry['source'])}"


def _published(p: Problem, rel, sol: dict[str, str]) -> str:
    """Where a stack that takes CUDA from NVIDIA's repository gets this release, when the
    release's own availability facts (not the OS's range) say so: '' otherwise."""
    from_repo = p.repo_cuda or (sol.get("pytorch") == NONE and "toolkit-repo" not in p.skip_tags)
    entry = p.k.os.get(sol.get("os", ""))
    if not from_repo or entry is None or not rel.availability:
        return ""
    facts = sorted({("NVIDIA's repository" if a.kind == "repos" else "nvidia/cuda images")
                    + f" [{a.source}]" + ("" if a.verified else ", unverified")
                    for a in rel.availability
                    if (a.verified or p.allow_unverified)
                    and (entry.get("nvidia_repo") if a.kind == "repos" else entry["id"]) in a.names
                    and (not a.platforms or sol.get("platform") in a.platforms)})
    return f"; published for {entry['name']}: {'; '.join(facts)}" if facts else ""


def min_driver(p: Problem, sol: dict[str, str]) -> str | None:
    """The oldest host driver this stack runs on (minor-version compatibility included)."""
    cuda = sol.get("cuda", NONE)
    if cuda == NONE:
        return None
    # The rules that ask for a driver, and the stack components they mention, once per problem;
    # the answer is memoised on those components' values (enumerate asks once per group).
    # (The rules and components come from the rule set, shared by queries with the same options;
    # the memo is the problem's own: the answer depends on its host facts too.)
    drules = p.__dict__.get("_driver_rules")
    if drules is None:
        p.__dict__["_driver_rules"] = drules = (*p.ruleset.driver_rules, {})
    rules, comps, memo = drules
    key = tuple(sol.get(c) for c in comps)
    if key not in memo:
        memo[key] = _min_driver(p, sol, rules, cuda)
    return memo[key]


def _min_driver(p: Problem, sol: dict[str, str], rules, cuda: str) -> str:
    v = parse_version(cuda)
    floor, _ = p.k.majors[v.major]
    best = parse_driver(floor)
    facts = {c: val for c, val in p.facts_host.items() if c != "driver"}
    facts.update(sol)

    def floor_of(pairs):
        """The driver floor a conjunction asks for, or None when one of its other parts fails
        (a part on an unknown host fact is taken as holding: some host may meet it)."""
        low = parse_driver("000")
        for comp, m in pairs:
            if comp == "driver":
                if m.text.startswith(">= "):
                    low = max(low, parse_driver(m.text[3:]))
            elif comp in facts and not m(facts[comp]):
                return None
        return low

    for r in rules:
        if floor_of(r.when) is None:
            continue
        req = floor_of(r.require)
        if req is not None:
            best = max(best, req)
        if r.any_of:
            rows = [f for f in (floor_of(alt) for alt in r.any_of) if f is not None]
            if rows:
                best = max(best, min(rows))
    return best.text


def gpudirect_paths(p: Problem, sol: dict[str, str]) -> list[dict]:
    facts = dict(p.facts_host)
    facts.update(sol)
    out = []
    for g in sorted(p.k.gpudirect, key=lambda g: g["preferred"]):
        missing, failing = [], []
        for comp, m in g["requires"]:
            have = facts.get(comp)
            if have is None:
                missing.append(comp)
            elif not m(have):
                failing.append(f"{comp} {m.text} (have {have})")
        if sol.get("cuda", NONE) == NONE:
            status, detail = "no", "no CUDA in the stack"
        elif failing:
            status, detail = "no", "needs " + "; ".join(failing)
        elif missing:
            status, detail = "unknown", "not known: " + ", ".join(missing)
        else:
            status, detail = "yes", "all requirements met"
        out.append({"path": g["id"], "allowed": status, "detail": detail, "source": g["source"]})
    return out


def explain_failure(p: Problem, trace: Trace) -> list[str]:
    """A minimal chain of facts that together leave no stack."""
    if p.host_violations:
        return [f"{r.text}{_src(r.source)}; the host has {_host_text(p)}" for r in p.host_violations]
    empty = [c for c in STACK if not p.domains[c]]
    if empty:
        comp = empty[0]
        reasons = _group_pruned(p, comp)
        # one entry per group of candidates with the same reasons: read as a list, not one line
        return [f"no {comp} candidate is left; each one is ruled out:"] + reasons

    # Deletion-based minimal core over every active rule and the CUDA-mode verdicts. Rules are tried
    # for deletion first, so that a chain keeps the CUDA-mode facts a reader expects to see.
    items = sorted({r.id for level in p.by_depth for r, _ in level},
                   key=lambda rid: (rid not in trace.fired, rid))
    # CUDA releases ruled out by the host (no compatibility mode, or its system cuDNN/NCCL not
    # built for them) take part in the chain as facts, like the rules
    mode_items = sorted(f"mode:{v}" for v, f in p.pruned["cuda"].items()
                        if f.key.startswith(("mode:", "system:")))
    core = list(items) + mode_items

    def solvable(active: list[str]) -> bool:
        disabled = frozenset(i for i in items if i not in active)
        doms = dict(p.domains)
        restore = [i[5:] for i in mode_items if i not in active]
        if restore:
            doms["cuda"] = p.domains["cuda"] + restore
            for v in restore:
                p.modes.setdefault(v, CudaMode("n/a", "restored for explanation"))
        return _first(p, disabled, doms) is not None

    if not solvable([]):
        # Fails even with no rule: the wishes alone conflict with the domains.
        return ["the wishes leave nothing: " + "; ".join(
            r for c in STACK for r in _group_pruned(p, c) if p.pruned[c])]
    # A rule that never pruned a branch of the failed search can go at once: with only the rules
    # that did, the search walks the same tree and fails the same way.
    fired_only = [i for i in core if i in trace.fired or i.startswith("mode:")]
    if len(fired_only) < len(core) and not solvable(fired_only):
        core = fired_only
    i = 0
    while i < len(core):
        trial = core[:i] + core[i + 1:]
        if not solvable(trial):
            core = trial
        else:
            i += 1
    rules = [next(r for r in p.rules if r.id == rid) for rid in core if not rid.startswith("mode:")]
    modes = [rid[5:] for rid in core if rid.startswith("mode:")]
    involved = {c for r in rules for c in r.components} | ({"cuda"} if modes else set())
    chain = [f"{w_comp} {w.text} (your wish)" for w_comp, w in p.wishes.items()
             if w_comp in involved]
    chain += [f"{r.text}{_src(r.source)}" for r in rules]
    if modes:
        chain += _group_modes(p, modes)
    if p.facts_host:
        chain.append(f"the host has {_host_text(p)}")
    return chain + _cpu_hint(p)


def _cpu_hint(p: Problem) -> list[str]:
    """On a GPU host the CPU stacks were left out; say whether one would fit."""
    fact = p.pruned["cuda"].get(NONE)
    if fact is None or fact.key != "gpu-host":
        return []
    doms = dict(p.domains)
    doms["cuda"] = [NONE]
    if _first(p, domains=doms) is not None:
        return ["no GPU stack fits; a CPU-only stack does (ask for it with --cuda none)"]
    return []


def _host_text(p: Problem) -> str:
    f = p.facts_host
    parts = []
    if "driver" in f:
        parts.append(f"driver {f['driver']}")
    if "gpu" in f:
        parts.append(f"GPU {f['gpu']}" + (f" (sm_{f['gpu.cc'].replace('.', '')})"
                                          if f["gpu.cc"] != NONE else ""))
    for key in ("kernel", "ofed", "open_kernel_modules"):
        if key in f:
            parts.append(f"{key} {f[key]}")
    return ", ".join(parts) or "no stated facts"


def _group_modes(p: Problem, versions: list[str]) -> list[str]:
    """One line per CUDA major and reason: what each compatibility mode would need, or what the
    host's system copies rule out."""
    by_major: dict[tuple[int, str], list[str]] = {}
    for v in versions:
        by_major.setdefault((parse_version(v).major, p.pruned["cuda"][v].text), []).append(v)
    lines = []
    for (_, reasons), vs in sorted(by_major.items(), key=lambda kv: (kv[0][0], parse_version(
            min(kv[1], key=parse_version)))):
        vs.sort(key=parse_version)
        label = vs[0] if len(vs) == 1 else f"{vs[0]} to {vs[-1]}"
        lines.append(f"CUDA {label}: {reasons}")
    return lines


def _group_pruned(p: Problem, comp: str) -> list[str]:
    groups: dict[str, list[str]] = {}
    for val, fact in p.pruned[comp].items():
        groups.setdefault(fact.text, []).append(val)
    return [f"{comp} {', '.join(vals[:4])}{'...' if len(vals) > 4 else ''}: {text}"
            for text, vals in groups.items()]
