"""A library the host provides (`--system-cudnn`, `--system-nccl`): the releases the knowledge names
that such a copy can be, the rules about that library alone that it must meet beside a stack's
CUDA on the host, and the facts that vouch for it in an answer. The functions take the resolver's
Problem (problem.py, which imports them; ``p`` is duck-typed here so that the import points one
way)."""

from __future__ import annotations

from ..errors import UsageError
from ..knowledge import Knowledge, Rule, version_matcher
from ..versions import NONE, VersionSyntaxError, version_key


def _src(sid: str | None) -> str:
    """A source's mark after a fact's text: " [S9]", or nothing."""
    return f" [{sid}]" if sid else ""


SYSTEM_COPIES = ("cudnn", "nccl")


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


def system_copy_problems(p, comp: str, val: str, matches: list[str],
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


def _system_rules(p, comp: str) -> list[Rule]:
    """The rules about library ``comp`` alone (with CUDA and the host), those a system copy of it
    must meet: once per query, not per CUDA."""
    cache = p.system_rules
    if comp not in cache:
        allowed = {comp, "cuda", "driver", "gpu", "gpu.cc", "gpu.datacenter"}
        cache[comp] = [r for r in p.rules if comp in r.components and "pytorch" not in r.components
                       and r.components <= allowed]
    return cache[comp]


def system_copy_facts(p, comp: str, val: str, matches: list[str],
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
