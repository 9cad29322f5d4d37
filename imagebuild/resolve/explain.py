"""The explanations built from what a `Trace` saw: for a solution, per component, the better
candidates passed over and the fact that ruled each out; for no solution, a minimal set of facts
that together leave nothing, printed as a chain with sources; and the GPUDirect RDMA paths a
stack's host offers."""

from __future__ import annotations


from ..knowledge import STACK
from ..versions import (NONE, major_minor, parse_version)

from .problem import CudaMode, Problem, Resolution, min_driver
from .systemcopies import _src
from .search import Trace, _first



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
        if var is not None and var.cuda != NONE and var.confirmed_nccl(p.allow_unverified) is None:
            seen = (f" (NCCL {var.nccl} is read only in third-party copies "
                    f"[{var.nccl_cited}])" if var.nccl != NONE else "")
            how = "explicitly" if sol["nccl"] == var.nccl else "over it"
            res.warnings.append(f"the NCCL that torch {var.pytorch}+{var.tag}'s wheels bundle is not "
                                f"confirmed{seen}: install nccl {sol['nccl']} {how}, as the images "
                                "do, and check what the wheel brings")
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
        return f"the newest release that fits{_src(k.pytorch[val].source)}"
    if comp == "cuda":
        if val == NONE:
            return "a CPU stack"
        rel = k.releases[val]
        return (f"newest CUDA {major_minor(val)}.x release{_src(rel.source)}, the best "
                f"compatibility mode first{_published(p, rel, sol)}")
    if comp in ("cudnn", "nccl"):
        var = k.variants.get((sol["pytorch"], NONE if sol["cuda"] == NONE else major_minor(sol["cuda"])))
        if var is not None and val != NONE:
            wheel = f"nvidia-{comp}-cu{major_minor(sol['cuda']).split('.')[0]}=={val}"
            confirmed = comp == "cudnn" or var.confirmed_nccl(p.allow_unverified) is not None
            bundled = getattr(var, comp)
            src = _src(var.nccl_cited if comp == "nccl" else var.source)
            if bundled == NONE:
                return (f"newest that fits; the NCCL torch {var.pytorch}+{var.tag} bundles is not "
                        f"known{_src(var.source)}, so this one is installed over it ({wheel}) "
                        "and preloaded")
            if not confirmed:
                said = f"third-party copies say torch {var.pytorch}+{var.tag} bundles{src} (not confirmed)"
                if bundled == val:
                    return f"what {said}: installed explicitly ({wheel}) and preloaded"
                return f"newer than the {bundled} that {said}: installed over it ({wheel}) and preloaded"
            if bundled == val:
                return f"bundled by torch {var.pytorch}+{var.tag}{src}"
            return (f"newer than the {bundled} torch {var.pytorch}+{var.tag} bundles"
                    f"{_src(var.source)}: installed over it ({wheel}) and preloaded, as you asked")
        return "not part of this stack" if val == NONE else "newest that fits"
    if comp == "platform":
        entry = k.platforms.get(val)
        return (f"the first platform in the matrix's order that fits{_src(entry.source)}"
                if entry else "the only platform the matrix knows")
    if comp == "python":
        return f"newest the OS offers that torch supports{_src(k.os[sol['os']].source)}"
    if comp == "os":
        return f"first in the matrix's OS order that fits{_src(k.os[val].source)}"
    table = getattr(k, comp)
    entry = table[val]
    how = "the OS's package" if entry.install == "os" else "built from the release tarball"
    if not entry.cuda_aware and sol.get("cuda", NONE) != NONE:
        how += ", built without CUDA: not CUDA-aware"
    return f"newest that fits ({how}){_src(entry.source)}"


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
                    and (entry.nvidia_repo if a.kind == "repos" else entry.id) in a.names
                    and (not a.platforms or sol.get("platform") in a.platforms)})
    return f"; published for {entry.name}: {'; '.join(facts)}" if facts else ""


def gpudirect_paths(p: Problem, sol: dict[str, str]) -> list[dict]:
    facts = dict(p.facts_host)
    facts.update(sol)
    out = []
    for g in sorted(p.k.gpudirect, key=lambda g: g.preferred):
        missing, failing = [], []
        for comp, m in g.requires:
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
        out.append({"path": g.id, "allowed": status, "detail": detail, "source": g.source})
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
