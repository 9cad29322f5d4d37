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

This module is the API (`resolve`, `enumerate_stacks`, `check`, `check_system_copy`); the parts
are problem.py (inputs, answers, the provider), search.py (the search and its trace) and
explain.py (the explanations).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import UsageError
from ..knowledge import STACK, Knowledge
from ..versions import NONE, major_minor, parse_driver, parse_version
# the resolver's parts (problem.py, search.py, explain.py); the names other packages and the tests
# use are this module's, as before the split
from .explain import _describe, _unverified_warning, explain_failure, gpudirect_paths  # noqa: F401
from .problem import (MODE_RANK, CudaMode, Fact, Host, Problem, Resolution,  # noqa: F401
                      min_driver)
from .systemcopies import (SYSTEM_COPIES, _src, system_copy_facts,  # noqa: F401
                           system_copy_problems, system_releases)
from .search import Trace, _first, _search  # noqa: F401
from ..knowledge.completeness import host_unknowns


# --------------------------------------------------------------------------------------------------
# Public API


def resolve(k: Knowledge, host: Host, wishes: dict[str, str] | None = None,
            allow_unverified: bool = False, explain: bool = True,
            repo_cuda: bool = False, skip_tags: frozenset[str] = frozenset(),
            compat_package: bool = True, system: dict[str, str] | None = None,
            warnings: bool = True, wheels_route: bool = True) -> Resolution:
    """The best stack, or (explain=True) the minimal chain of facts that rules every stack out.
    `repo_cuda`: CUDA must come from NVIDIA's repository for the OS (as image recipes install it).
    `skip_tags`: rules with these tags are not applied (see knowledge.RULE_TAGS).
    `compat_package`: forward compatibility (a cuda-compat package) is possible; an image whose
    CUDA comes from torch's wheels has none.
    `system`: cuDNN or NCCL the host provides (library -> version, NGC-style), beside the stack's
    own: only a CUDA they are built for and whose support matrix they meet on the host is chosen,
    and the answer names them (`system_cudnn`, `system_nccl`).
    `warnings=False`: leave out the warnings (end of life, unverified facts against the answer,
    why no PyTorch fits), for callers that only want the verdict: each costs a Problem of its own.
    `wheels_route=False`: no second try with CUDA from NVIDIA's wheels (`check` judges the stack
    as given)."""
    p = Problem(k, host, wishes, allow_unverified, repo_cuda, skip_tags, compat_package, system)
    passed: list = []
    trace = Trace()
    sol = None
    for s in _search(p, trace=trace, passed=passed):
        sol = s
        break
    if sol is None:
        why = explain_failure(p, trace) if explain else ["no consistent stack (not explained)"]
        routed = None if not wheels_route else _wheels_route(
            k, host, wishes, allow_unverified, explain, repo_cuda, skip_tags, system, warnings)
        if routed is not None:
            routed.repository_chain = list(why)
            return routed
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
    # what the answer rests on that the knowledge lacks: a GPU's cells, a platform's wheel
    # architectures (warnings; `resolve --strict` refuses the answer)
    res.unknown = host_unknowns(k, p.facts_host.get("gpu"), p.facts_host.get("driver"), sol) \
        + _arch_elsewhere(p, sol)
    if explain and warnings:
        res.warnings += res.unknown
        res.warnings += _end_of_life(p, res.mode) + _unverified_against(p, sol)
        if sol["pytorch"] == NONE and p.gpu_host() and "pytorch" not in (wishes or {}):
            res.warnings.append(_no_pytorch(k, host, wishes or {}, allow_unverified, repo_cuda,
                                            skip_tags, compat_package))
    return res


def _wheels_route(k: Knowledge, host: Host, wishes: dict[str, str] | None, allow_unverified: bool,
                  explain: bool, repo_cuda: bool, skip_tags: frozenset[str],
                  system: dict[str, str] | None, warnings: bool) -> Resolution | None:
    """A host query no stack with CUDA from a repository answers, asked again with CUDA from
    NVIDIA's wheels (cuda-toolkit==X.Y.Z, no PyTorch, no cuda-compat): what an image family that
    takes CUDA from the wheels (`cuda_from: wheels`, the Debian communication family) builds. A
    CUDA release known from the wheels only, or newer than every repository here, is offered that
    way and the answer says so. None where that does not fit either (or the query is an image's)."""
    wishes = dict(wishes or {})
    if repo_cuda or "toolkit-repo" in skip_tags or wishes.get("pytorch", NONE) != NONE or \
            wishes.get("cuda") == NONE or host.gpu is None or host.gpu.lower() == NONE:
        return None
    res = resolve(k, host, {**wishes, "pytorch": NONE}, allow_unverified, explain,
                  skip_tags=skip_tags | {"toolkit-repo"}, compat_package=False, system=system,
                  warnings=warnings)
    if not res.ok:
        return None
    res.cuda_from = "wheels"
    families = sorted({f"{f.name} on {', '.join(f.oses)}" for f in k.families
                       if f.cuda_from == "wheels" and f.pytorch == NONE})
    how = (f"an image that takes CUDA from NVIDIA's wheels (cuda-toolkit=={res.stack['cuda']}, "
           "no PyTorch, no cuda-compat)"
           + (f": the {', '.join(families)} family with cuda_from: wheels in matrix.yaml" if families
              else ""))
    res.explanation.insert(0, f"CUDA {res.stack['cuda']} from NVIDIA's wheels: no stack with CUDA "
                              f"from an OS repository fits, so this one needs {how} [S10]")
    if warnings:
        res.warnings.insert(0, f"CUDA {res.stack['cuda']} comes from NVIDIA's wheels here, not from "
                               "an OS repository: build it from a family with cuda_from: wheels")
    return res


def _end_of_life(p: Problem, mode: CudaMode | None = None) -> list[str]:
    """The host's driver branch past its end of life on the day judged (--date, else the matrix's
    as_of), with the source; nothing when it is supported or its end is not known. A stack that
    reaches its CUDA through cuda-compat on that branch (forward compatibility onto an
    end-of-life branch) is flagged too."""
    drv = p.facts_host.get("driver")
    if drv is None:
        return []
    branch = parse_driver(drv).branch
    supported, why = p.k.branch_supported(branch, p.date)
    if supported is None and branch not in p.k.branches and p.k.branches:
        known = sorted(p.k.branches)
        return [f"driver {drv}: {why} (it knows R{known[0]} to R{known[-1]}): whether NVIDIA still "
                "supports it is not known; the answer reads its CUDA support from its version only"]
    if supported is not False:
        return []
    day = f"on {p.date}" + (" (--date)" if p.host.date else " (the matrix's as_of)")
    text = f"driver {drv}: {why}, judged {day}: NVIDIA no longer fixes it; plan an upgrade"
    if mode is not None and mode.package:
        text += (f". This stack's CUDA runs on it only through {mode.package}: forward "
                 "compatibility onto an end-of-life branch")
    return [text]


def _arch_elsewhere(p: Problem, sol: dict[str, str]) -> list[str]:
    """A GPU stack on a platform whose wheels' architecture list is not recorded: the answer used
    the variant's list, which is the default platform's build's (the aarch64 wheels of 2.11 and
    later carry another, so they can differ)."""
    from ..knowledge.schema import DEFAULT_PLATFORM

    plat, torch, cuda = sol.get("platform"), sol.get("pytorch"), sol.get("cuda")
    if plat in (None, DEFAULT_PLATFORM) or NONE in (torch, cuda) or not p.gpu_host():
        return []
    var = p.k.variants.get((torch, major_minor(cuda)))
    rel = p.k.pytorch.get(torch)
    if var is None or var.arch is None or rel is None or \
            any(w.platform == plat and w.cuda == var.cuda and w.arch for w in rel.wheels):
        return []
    return [f"torch {torch}+{var.tag}: the GPU architectures of its {plat} wheels are not recorded; "
            f"the {DEFAULT_PLATFORM} build's ({', '.join(var.arch)}{_src(var.source)}) were used "
            "for this GPU"]


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
                      warnings=warnings, wheels_route=False)
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
    skip = frozenset({"cuda-aware"}) if entry is not None and not entry.cuda_aware \
        else frozenset()
    if cuda_from == "wheels":
        # the CUDA toolkit comes from NVIDIA's wheels (cuda-toolkit==X.Y.Z), with or without torch
        skip |= {"toolkit-repo"}
    return {"repo_cuda": cuda_from != "wheels", "skip_tags": skip,
            "compat_package": cuda_from != "wheels"}


def could_hold(k: Knowledge, host: Host, wishes: dict[str, str], cuda_from: str,
               allow_unverified: bool = False) -> bool:
    """False only when no image of these wishes whose CUDA comes from `cuda_from` can pass
    check(k, host, its stack, image=True, cuda_from=cuda_from): the query is asked with the
    widest reading any such image gets (image_reading, with every rule tag an image's reading can
    drop dropped; the same CUDA source and cuda-compat), and dropping rules only widens what is
    consistent. `wishes` must hold for every image's stack as check reads it (each component a
    prefix of the stack's version): a relaxation, never a guess. One resolver run, unexplained;
    hostfit.best_expanding asks it before expanding a combination whose images it would check."""
    reading = image_reading(k, cuda_from, {})            # no UCX named: the cuda-aware rules bind
    reading["skip_tags"] = reading["skip_tags"] | {"cuda-aware"}     # ... unless dropped here
    return resolve(k, host, wishes, allow_unverified, explain=False, warnings=False,
                   wheels_route=False, **reading).ok


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
