"""The resolver's problem: the host and the wishes (`Host`), what an answer holds (`Resolution`,
`CudaMode`), and `Problem`, the provider the search asks: the candidate values of each stack
component, best first, and the rules over them, compiled from the knowledge. Also the facts a
system copy of cuDNN or NCCL is checked against, and the minimum driver of a stack. The search is
in search.py, the explanations in explain.py, the API (resolve, check, enumerate_stacks) in
solver.py."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field

from ..errors import UsageError
from ..knowledge import STACK, Knowledge, Matcher, Rule, version_matcher
from ..versions import (NONE, VersionSyntaxError, major_minor, parse_driver, parse_host_driver,
                        parse_version)
from .systemcopies import system_copy_problems, system_releases

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
    # the facts the answer rests on that the knowledge lacks (also among the warnings):
    # `resolve --strict` refuses an answer with any
    unknown: list[str] = field(default_factory=list)
    # where the stack's CUDA comes from: a repository (or torch's own wheels), or NVIDIA's
    # cuda-toolkit wheels without PyTorch ("wheels": an image family with cuda_from: wheels)
    cuda_from: str = "repository"
    # with cuda_from "wheels": the facts that rule out every stack with CUDA from a repository
    repository_chain: list[str] = field(default_factory=list)

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
                "warnings": list(self.warnings), "unknown": list(self.unknown),
                "cuda_from": self.cuda_from,
                **({"repository_chain": list(self.repository_chain)} if self.repository_chain else {})}


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
                alias = {a: pid for pid, e in self.k.platforms.items() for a in e.aliases}
                names = [alias.get(n, n) for n in names]
            known = list(self.k.os) if comp == "os" else self.k.domain("platform")
            unknown = [n for n in names if n not in known]
            if unknown:
                raise UsageError(f"unknown {'OS' if comp == 'os' else comp} {unknown[0]!r} "
                                 f"(one of {', '.join(known)})", argument=f"--{comp}")
            return Matcher(" or ".join(names), "in", tuple(names))
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
            # what a wish admits over the whole domain, computed once per knowledge (check() asks
            # the same ==version wishes for every image it is given)
            admitted = None if wish is None else k.admitted(comp, wish)
            unwished = None if wish is None else \
                Fact(f"wish:{comp}", f"you asked for {comp} {wish.text}", None)   # one for all
            pruned = self.pruned[comp]
            for val in values:
                if admitted is not None and val not in admitted:
                    pruned[val] = unwished
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
                            parts.append((comp, self.k.admitted(comp, m)))
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
                        compiled.append((part, comp, self.k.admitted(comp, m)))
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
        a PyTorch build bundles (or, not confirmed, is read to bundle) ranks before newer ones
        (installed over it on request)."""
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
        # (pytorch, cuda major.minor) -> the NCCL its wheels bundle (read-only: shared), for the
        # ranking only: a value read in third-party copies (nccl_verified: false) ranks first too,
        # as the likeliest match, but constrains nothing unless unverified facts are allowed
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
# What the answers and the explanations (explain.py) share: the minimum driver (a source's mark,
# _src, is systemcopies.py's)


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
