"""Property tests of the resolver against a brute-force oracle written here.

Hypothesis draws small knowledge bases (a few CUDA releases with drivers, 1-3 GPUs, 1-3 torch
releases with variants, 1-2 OSes, UCX/Open MPI releases, cuDNN lines, generic constraints), writes
them as YAML and loads them with the real loader, so the real rule compiler runs. It draws host
facts and wishes too. The oracle enumerates every combination of the stack's values, keeps those
that satisfy every rule (evaluated from the rules' own matchers) and the CUDA-mode definition
(re-implemented here from the matrix's documented meaning), and checks:

(a) every stack `resolve` returns is in the oracle's set (so it satisfies every rule);
(b) `resolve` finds no stack exactly when the oracle's set is empty;
(c) `enumerate_stacks`, its groups' tails expanded, is exactly the oracle's set;
(d) the stack `resolve` returns is a maximum of the documented preference order;
    and `check` of a complete stack says yes exactly when the stack is in the oracle's set;
(e) a failure's explanation is a chain of cited facts (a wish, a host line, or "[source]") and
    the rules it cites leave nothing on their own, and, when it names no CUDA-mode verdicts,
    dropping any one of them leaves something (a minimal core).
"""

from __future__ import annotations

import datetime as dt
import itertools
import re
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from imagebuild import knowledge
from imagebuild.resolve import solver as resolve
from imagebuild.versions import parse_driver, parse_spec, parse_version

AS_OF = "2026-11-21"
STACK = ("pytorch", "cuda", "cudnn", "nccl", "python", "os", "openmpi", "ucx")
NONE = "none"

CUDA_POOL = [("11.8.0", "520.61.05"), ("12.1.1", "530.30.02"), ("12.4.1", "550.54.15"),
             ("12.6.3", "560.35.05"), ("12.8.1", "570.124.06"), ("13.0.2", "580.95.05")]
MAJOR_FLOOR = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}
BRANCHES = [520, 535, 550, 560, 570, 580]
ARCHS = {"7.0": "Volta", "8.0": "Ampere", "9.0": "Hopper", "10.0": "Blackwell"}
TORCH_POOL = ["2.4.1", "2.6.0", "2.9.1"]
PY_SPECS = [">=3.9", ">=3.10,<3.13", ">=3.11", ">=3.8,<3.12"]
CUDNN_POOL = ["9.1.0.70", "9.5.1.17", "9.10.2.21"]
NCCL_POOL = ["2.20.5", "2.21.5", "2.27.5"]
OS_POOL = [("ubuntu22.04", ("3.10",), ">=11.7"), ("rocky9", ("3.9", "3.11", "3.12"), ">=12.0.1"),
           ("ubuntu24.04", ("3.12",), ">=12.5"), ("debian12", ("3.11",), None)]
UCX_POOL = ["1.14.1", "1.18.0", "1.20.0"]
OMPI_POOL = ["4.1.7", "5.0.10"]
DRIVERS = ["450.80.02", "525.60.13", "535.104.05", "550.54.15", "560.35.05", "570.124.06",
           "580.95.05"]

# The order the resolver documents (matrix.yaml `preference`): torch, CUDA mode (native, then
# minor-version, then forward-compat; "unknown" when the host driver is not given), CUDA, Python,
# OS (the file's order), Open MPI, UCX. A CPU stack (no mode) ranks after every CUDA mode. cuDNN
# then NCCL, which `preference` does not name, rank as the resolver takes them: right after CUDA,
# newest first, "none" last.
MODE_RANK = {"native": 0, "minor-version": 1, "forward-compat": 2, "unknown": 3, "n/a": 4}


# --------------------------------------------------------------------------------------------------
# strategies


def _tarball(comp: str, version: str) -> dict:
    """A source release's download (the loader refuses one without url and sha256); the solver
    never reads either, so a fixed digest of the name stands in."""
    import hashlib

    name = f"{comp}-{version}.tar.gz"
    return {"url": f"https://example.invalid/{name}", "sha256": hashlib.sha256(name.encode()).hexdigest()}


def _subset(draw, pool, lo, hi):
    return draw(st.lists(st.sampled_from(pool), min_size=lo, max_size=hi, unique=True))


def _spec_for(draw, comp, model):
    """A value a generic constraint can hold for `comp`."""
    if comp == "cuda":
        return draw(st.sampled_from([">=12", "<12.6", ">=12.4,<13", "12.1", NONE, ">=13"]))
    if comp == "ucx":
        return draw(st.sampled_from([">=1.18", "<1.20", "1.14.1", ">=1.20"]))
    if comp == "openmpi":
        return draw(st.sampled_from([">=5", "4.1", "<5"]))
    if comp == "python":
        return draw(st.sampled_from([">=3.11", "<3.12", "3.10"]))
    if comp == "pytorch":
        return draw(st.sampled_from([">=2.6", "<2.9", "2.4.1", NONE]))
    if comp == "nccl":
        return draw(st.sampled_from([">=2.21", "<2.27", NONE]))
    if comp == "cudnn":
        return draw(st.sampled_from([">=9.5", NONE]))
    if comp == "os":
        return draw(st.sampled_from([o["id"] for o in model["os"]]))
    if comp == "gpu.cc":
        return draw(st.sampled_from([">=8.0", "<9.0", NONE]))
    if comp == "driver":
        return draw(st.sampled_from([">=550", ">=535.104.05", "<570"]))
    raise AssertionError(comp)


@st.composite
def models(draw):
    cudas = sorted(_subset(draw, CUDA_POOL, 2, 4), key=lambda c: parse_version(c[0]))
    majors = sorted({parse_version(v).major for v, _ in cudas})
    branches = []
    for b in _subset(draw, BRANCHES, 1, 4):
        eol = draw(st.sampled_from([True, "2025-04-17", "2026-06-30", "2028-06-30"]))
        branches.append({"branch": b, "type": "PB", "eol": eol, "source": "S1"})
    archs = []
    for cc in _subset(draw, sorted(ARCHS), 1, 3):
        a = {"cc": cc, "name": ARCHS[cc], "source": "S1"}
        first = draw(st.sampled_from([None, "11.8", "12.1", "12.8"]))
        if first:
            a["first_cuda"] = first
        if draw(st.booleans()) and cc == "7.0":
            a["last_cuda"] = "12.9"
            a["last_branch"] = 580
        archs.append(a)
    gpus = []
    for i in range(draw(st.integers(1, 3))):
        gpus.append({"name": f"G{i}", "cc": draw(st.sampled_from([a["cc"] for a in archs])),
                     "datacenter": draw(st.booleans()), "source": "S1"})
    mms = sorted({f"{parse_version(v).major}.{parse_version(v).minor}" for v, _ in cudas})
    releases = []
    for ver in _subset(draw, TORCH_POOL, 1, 3):
        variants = []
        for j, mm in enumerate(_subset(draw, mms + ["cpu"], 1, 3)):
            v = {"source": "S1"}
            if mm == "cpu":
                v["cpu"] = True
            else:
                v["cuda"] = mm
                verified = draw(st.booleans()) or draw(st.booleans())
                if not verified:
                    v["verified"] = False
                if verified or draw(st.booleans()):
                    v["cudnn"] = draw(st.sampled_from(CUDNN_POOL))
                    v["nccl"] = draw(st.sampled_from(NCCL_POOL))
                if draw(st.booleans()):
                    v["arch"] = _subset(draw, ["7.0", "8.0", "9.0", "9.0+PTX", "10.0"], 1, 3)
            if j == 0:
                v["default"] = True
            variants.append(v)
        releases.append({"version": ver, "python": draw(st.sampled_from(PY_SPECS)), "source": "S1",
                         "variants": variants})
    oses = []
    for oid, pys, cuda in _subset(draw, OS_POOL, 1, 2):
        o = {"id": oid, "name": oid, "family": "linux", "python": list(pys), "source": "S1"}
        if cuda:
            o["cuda"] = cuda
        oses.append(o)
    ucx = []
    for v in _subset(draw, UCX_POOL, 1, 2):
        u = {"version": v, "source": "S1"}
        if draw(st.integers(0, 3)) == 0:
            u["install"] = "os"
            u["os"] = [oses[0]["id"]]
            u["cuda"] = False
        else:
            u.update(_tarball("ucx", v))
        ucx.append(u)
    ompi = [{"version": v, "source": "S1", **_tarball("openmpi", v)} for v in _subset(draw, OMPI_POOL, 1, 2)]
    model = {"os": oses}
    lines = []
    pairs = [(v, c) for v in (">=9.1,<9.2", ">=9.5,<9.11", ">=9.10,<9.11")
             for c in (">=12,<13", ">=11.8,<12", ">=12.4,<13")]
    for versions, cuda in _subset(draw, pairs, 0, 2):
        ln = {"versions": versions, "cuda": cuda, "source": "S1"}
        if draw(st.booleans()):
            ln["driver"] = draw(st.sampled_from(["525.60.13", "550.54.15", "570.124.06"]))
        if draw(st.booleans()):
            ln["cc"] = draw(st.sampled_from([">=7.5", ">=8.0,<=9.0"]))
        lines.append(ln)
    constraints = []
    comps = ["cuda", "ucx", "openmpi", "python", "pytorch", "nccl", "cudnn", "os", "gpu.cc", "driver"]
    for i in range(draw(st.integers(0, 4))):
        w, r = draw(st.lists(st.sampled_from(comps), min_size=2, max_size=2, unique=True))
        c = {"id": f"c{i}", "when": {w: _spec_for(draw, w, model)},
             "require": {r: _spec_for(draw, r, model)}, "source": "S2"}
        if draw(st.integers(0, 4)) == 0:
            c["verified"] = False
        constraints.append(c)
    doc = {
        "schema": 1, "as_of": AS_OF,
        "sources": {"S1": {"title": "one", "url": "https://example.invalid/1"},
                    "S2": {"title": "two", "url": "https://example.invalid/2"}},
        "preference": ["pytorch", "mode", "cuda", "python", "os", "openmpi", "ucx"],
        "cuda": {
            "modes": [{"id": "native", "driver_floor": "release", "source": "S1"},
                      {"id": "minor-version", "driver_floor": "major", "source": "S1"},
                      {"id": "forward-compat", "driver_floor": "none", "gpu": {"datacenter": True},
                       "branch": {"supported": True}, "package": "cuda-compat-{major}-{minor}",
                       "source": "S1"}],
            "majors": [{"major": m, "minor_compat_driver": MAJOR_FLOOR[m], "source": "S1"}
                       for m in majors],
            "releases": [{"version": v, "driver": d, "source": "S1"} for v, d in cudas]},
        "drivers": {"branches": branches},
        "architectures": archs,
        "gpus": gpus,
        "pytorch": {"releases": releases},
        "ucx": {"releases": ucx},
        "openmpi": {"releases": ompi},
        "os": oses,
        "constraints": constraints,
    }
    if lines:
        doc["cudnn"] = {"lines": lines}
    return doc


@st.composite
def queries(draw, doc):
    driver = draw(st.sampled_from([None] + DRIVERS))
    gpu = draw(st.sampled_from([None, NONE] + [g["name"] for g in doc["gpus"]]))
    host = resolve.Host(driver=driver, gpu=gpu)
    wishes = {}
    torches = [r["version"] for r in doc["pytorch"]["releases"]]
    majors = sorted({str(parse_version(r["version"]).major) for r in doc["cuda"]["releases"]})
    if draw(st.integers(0, 2)) == 0:
        wishes["pytorch"] = draw(st.sampled_from([f"=={v}" for v in torches] + [f">={v}" for v in torches]
                                                 + [NONE]))
    if draw(st.integers(0, 2)) == 0:
        wishes["cuda"] = draw(st.sampled_from(majors + [f">={m}" for m in majors] + [NONE]))
    if draw(st.integers(0, 5)) == 0:
        wishes["python"] = draw(st.sampled_from(sorted({p for o in doc["os"] for p in o["python"]})))
    if draw(st.integers(0, 5)) == 0:
        wishes["ucx"] = ">=" + draw(st.sampled_from([u["version"] for u in doc["ucx"]["releases"]]))
    return host, wishes, draw(st.integers(0, 3)) == 0


# --------------------------------------------------------------------------------------------------
# the oracle


def _vkey(v):
    return (0, parse_version("0")) if v == NONE else (1, parse_version(v))


class Oracle:
    """Straightforward evaluation of the model: domains from the YAML model, rules from the loaded
    knowledge's matchers, CUDA modes from their documented meaning."""

    def __init__(self, doc, k, host, wishes, allow_unverified=False, gpu_wants_gpu=True,
                 skip_tags=(), compat_package=True):
        self.doc, self.k, self.host, self.wishes = doc, k, host, wishes
        self.compat_package = compat_package
        self.facts = {}
        if host.driver is not None:
            self.facts["driver"] = host.driver
        if host.gpu is not None:
            if host.gpu == NONE:
                self.facts.update({"gpu": NONE, "gpu.cc": NONE, "gpu.datacenter": "false"})
            else:
                g = next(g for g in doc["gpus"] if g["name"] == host.gpu)
                self.facts.update({"gpu": g["name"], "gpu.cc": g["cc"],
                                   "gpu.datacenter": "true" if g["datacenter"] else "false"})
        # resolve's default reading: CUDA from the wheels for PyTorch stacks (rules tagged
        # repo-cuda are the image expansion's), every other rule as it stands
        # a "verified-only" rule (a release's confirmed CUDA builds, an OS repository's confirmed
        # CUDA releases) gives way to its unverified twin when unverified facts are allowed
        self.rules = [r for r in k.rules if (r.verified or allow_unverified) and r.tag != "repo-cuda"
                      and r.tag not in skip_tags
                      and not (allow_unverified and (r.tag == "verified-only" or r.verified_only))]
        variants = [(rel["version"], v) for rel in doc["pytorch"]["releases"] for v in rel["variants"]
                    if v.get("verified", True) or allow_unverified]
        self.bundled = {(ver, v["cuda"]): v["nccl"] for ver, v in variants if "cuda" in v and "nccl" in v}
        dom = {
            "pytorch": sorted({ver for ver, _ in variants}, key=_vkey, reverse=True) + [NONE],
            "cuda": sorted((r["version"] for r in doc["cuda"]["releases"]), key=_vkey,
                           reverse=True) + [NONE],
            "cudnn": sorted({v["cudnn"] for _, v in variants if "cudnn" in v}, key=_vkey,
                            reverse=True) + [NONE],
            "nccl": sorted({v["nccl"] for _, v in variants if "nccl" in v}, key=_vkey,
                           reverse=True) + [NONE],
            "python": sorted({p for o in doc["os"] for p in o["python"]}, key=_vkey, reverse=True),
            "os": [o["id"] for o in doc["os"]],
            "openmpi": sorted((r["version"] for r in doc["openmpi"]["releases"]), key=_vkey,
                              reverse=True),
            "ucx": sorted((r["version"] for r in doc["ucx"]["releases"]), key=_vkey, reverse=True),
        }
        self.mode = {c: self.cuda_mode(c) for c in dom["cuda"]}
        self.domains = {}
        for comp, values in dom.items():
            keep = [v for v in values if self._wished(comp, v)]
            if comp == "cuda":
                keep = [v for v in keep if self.mode[v] is not None]
                # a host with a GPU gets a GPU stack unless it asks for CUDA (e.g. none)
                gpu_host = (self.facts.get("gpu", NONE) != NONE if "gpu" in self.facts
                            else "driver" in self.facts)
                if gpu_wants_gpu and gpu_host and "cuda" not in wishes:
                    keep = [v for v in keep if v != NONE]
            self.domains[comp] = keep

    def _wished(self, comp, value):
        if comp not in self.wishes:
            return True
        return parse_spec(self.wishes[comp]).contains(value)

    def branch_supported(self, branch):
        b = next((b for b in self.doc["drivers"]["branches"] if b["branch"] == branch), None)
        if b is None or b["eol"] is True:
            return False
        return dt.date.fromisoformat(AS_OF) < dt.date.fromisoformat(b["eol"])

    def cuda_mode(self, version):
        """The first mode of cuda.modes whose conditions hold, or None (the release cannot run)."""
        if version == NONE:
            return "n/a"
        if "driver" not in self.facts:
            return "unknown"
        if self.facts.get("gpu.cc") == NONE:
            return None
        host = parse_driver(self.facts["driver"])
        rel = next(r for r in self.doc["cuda"]["releases"] if r["version"] == version)
        if host >= parse_driver(rel["driver"]):
            return "native"
        if host >= parse_driver(MAJOR_FLOOR[parse_version(version).major]):
            return "minor-version"
        if self.compat_package and self.facts.get("gpu.datacenter") == "true" and \
                self.branch_supported(host.branch):
            return "forward-compat"
        return None

    def rule_holds(self, rule, full):
        for comp, m in rule.when:
            if comp not in full or not m(full[comp]):
                return True      # an unknown host fact is not checked; a false `when` is no claim
        if rule.any_of and not any(all(m(full[comp]) for comp, m in alt if comp in full)
                                   for alt in rule.any_of):
            return False         # a support matrix: some row must hold (unknown facts hold)
        return all(m(full[comp]) for comp, m in rule.require if comp in full)

    def violated(self, full, rules=None):
        return [r for r in (self.rules if rules is None else rules) if not self.rule_holds(r, full)]

    def solutions(self, rules=None, cuda_values=None):
        """Every consistent stack: the full product of the domains, filtered."""
        doms = dict(self.domains)
        if cuda_values is not None:
            doms["cuda"] = cuda_values
        out = []
        for combo in itertools.product(*(doms[c] for c in STACK)):
            full = dict(self.facts)
            full.update(zip(STACK, combo))
            if not self.violated(full, rules):
                out.append(dict(zip(STACK, combo)))
        return out

    def consistent(self, stack):
        """Is this complete stack one of `solutions()`? (Membership without the enumeration.)"""
        return (all(stack[c] in self.domains[c] for c in STACK)
                and not self.violated({**self.facts, **stack}))

    def preference_key(self, s):
        """Smaller is better."""
        neg = lambda v: tuple(-x for x in parse_version(v).release) if v != NONE else (1,)  # noqa: E731
        # NCCL: the one the PyTorch build bundles first, then newer ones (installed over it)
        mm = NONE if s["cuda"] == NONE else ".".join(s["cuda"].split(".")[:2])
        nccl_rank = (0 if self.bundled.get((s["pytorch"], mm)) == s["nccl"] else 1, neg(s["nccl"]))
        return (neg(s["pytorch"]), MODE_RANK[self.mode[s["cuda"]]], neg(s["cuda"]),
                neg(s["cudnn"]), nccl_rank, neg(s["python"]), self.domains["os"].index(s["os"]), neg(s["openmpi"]),
                neg(s["ucx"]))


# --------------------------------------------------------------------------------------------------
# the properties


def _load(doc) -> knowledge.Knowledge:
    text = yaml.safe_dump(doc, sort_keys=False)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "matrix.yaml"
        path.write_text(text, encoding="utf-8")
        return knowledge.load(path)


CITED = re.compile(r"\[[A-Za-z0-9]+\]")


def _check_explanation(o: Oracle, res: resolve.Resolution):
    chain = res.explanation
    assert chain, "an empty explanation"
    if chain[0].endswith("each one is ruled out:"):
        # an empty domain: a header, then one entry per group of candidates with their reasons
        assert len(chain) > 1 and all(re.match(r"[a-z_]+ \S", line) for line in chain[1:]), chain
        event("explanation: an empty domain")
        return
    for line in chain:
        assert (line.endswith("(your wish)") or line.startswith("the host has ")
                or CITED.search(line) or line.startswith(("no ", "the wishes leave nothing"))
                or re.match(r"CUDA [0-9.]+( to [0-9.]+)?: ", line)), line
    if any(line.startswith(("no ", "the wishes leave nothing")) for line in chain):
        event("explanation: an empty domain")
        return  # an empty domain or conflicting wishes: nothing to rebuild
    by_text: dict[str, list] = {}
    for r in o.rules:
        by_text.setdefault(f"{r.text} [{r.source}]", []).append(r)
    cited = [by_text[line] for line in chain if line in by_text]
    host_rule_lines = [line for line in chain if "; the host has " in line]
    if host_rule_lines:
        event("explanation: a rule about the host alone")
        return  # a rule about the host alone: no stack whatsoever (checked by (b))
    rules = [r for group in cited for r in group]
    mode_lines = [line for line in chain if re.match(r"CUDA [0-9.]+( to [0-9.]+)?: ", line)]
    # the CUDA releases the chain's mode lines rule out stay out; every other release comes back
    out = set()
    for line in mode_lines:
        m = re.match(r"CUDA ([0-9.]+)(?: to ([0-9.]+))?: ", line)
        lo, hi = parse_version(m.group(1)), parse_version(m.group(2) or m.group(1))
        out |= {v for v, mode in o.mode.items()
                if mode is None and lo.major == parse_version(v).major
                and lo <= parse_version(v) <= hi}
    # "the host has GPU X" carries that a GPU host gets a GPU stack: no CUDA stays out when the
    # oracle's own domain left it out for that reason
    cuda_all = [v for v in sorted(o.mode, key=_vkey, reverse=True)
                if o._wished("cuda", v) and v not in out and (v != NONE or NONE in o.domains["cuda"])]
    assert o.solutions(rules, cuda_all) == [], f"the chain's facts leave a stack: {chain}"
    event(f"explanation: a core of {len(rules)} rules" + (" and CUDA-mode verdicts" if mode_lines else ""))
    if not mode_lines and all(len(g) == 1 for g in cited):
        event("explanation: minimality checked")
        for i in range(len(rules)):
            fewer = rules[:i] + rules[i + 1:]
            assert o.solutions(fewer, cuda_all), \
                f"not minimal: without {rules[i].id} still nothing fits: {chain}"


@settings(max_examples=200, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_resolver_agrees_with_brute_force(data):
    doc = data.draw(models())
    k = _load(doc)
    host, wishes, unverified = data.draw(queries(doc))
    o = Oracle(doc, k, host, wishes, unverified)
    truth = o.solutions()

    res = resolve.resolve(k, host, wishes, allow_unverified=unverified)
    event(f"{len(truth) and 'solvable' or 'unsolvable'}" + (" (unverified allowed)" if unverified else ""))
    event(f"stacks: {'0' if not truth else '1' if len(truth) == 1 else '2-9' if len(truth) < 10 else '10+'}")
    # where no stack with CUDA from a repository exists, the answer may take CUDA from NVIDIA's
    # wheels: the model without the toolkit-repo rules, no PyTorch, no cuda-compat, on a GPU host
    if not truth and host.gpu not in (None, NONE) and wishes.get("pytorch", NONE) == NONE \
            and wishes.get("cuda") != NONE:
        routed = Oracle(doc, k, host, {**wishes, "pytorch": NONE}, unverified,
                        skip_tags=("toolkit-repo",), compat_package=False)
        wheels_truth = routed.solutions()
        event("wheels route" + (" fits" if wheels_truth else " does not fit"))
        assert res.ok == bool(wheels_truth) and (res.cuda_from == "wheels") == res.ok, \
            (res.ok, res.cuda_from, len(wheels_truth))
        if res.ok:
            got = {c: res.stack[c] for c in STACK}
            assert got in wheels_truth, got
            best = min(routed.preference_key(s) for s in wheels_truth)
            assert routed.preference_key(got) == best
            return
    # (b)
    assert res.ok == bool(truth), (res.ok, len(truth), res.explanation)
    if res.ok:
        got = {c: res.stack[c] for c in STACK}
        # (a)
        assert got in truth, f"not a consistent stack: {got}; violates " \
            f"{[r.id for r in o.violated({**o.facts, **got})]}"
        # (d)
        best = min(o.preference_key(s) for s in truth)
        assert o.preference_key(got) == best, (got, [s for s in truth if o.preference_key(s) == best])
    else:
        # (e)
        _check_explanation(o, res)

    # `check` of a complete stack agrees with the oracle, for a stack in the set and one drawn from
    # the whole product (usually not in it). `check` takes no wishes, so its oracle is the model
    # without them: a stack the wishes exclude can still be consistent. Without wishes no domain
    # is empty ("none" is a value of every optional component, the others list at least one).
    bare = Oracle(doc, k, host, {}, unverified, gpu_wants_gpu=False)
    assert all(bare.domains[c] for c in STACK if c != "cuda") and NONE in bare.domains["cuda"]
    product = [dict(zip(STACK, c)) for c in itertools.product(*(bare.domains[c] for c in STACK))]
    for stack in ([data.draw(st.sampled_from(truth))] if truth else []) + \
            [data.draw(st.sampled_from(product))]:
        verdict = resolve.check(k, host, stack, allow_unverified=unverified).ok
        assert verdict == bare.consistent(stack), (stack, verdict)
        if stack in truth:
            assert verdict, (stack, "in the wished set but check says no")

    # (c)
    groups = resolve.enumerate_stacks(k, host, wishes, allow_unverified=unverified)
    expanded = [dict(g.head, **dict(zip(resolve.TAIL, t))) for g in groups for t in g.tails]
    as_set = lambda xs: {tuple(s[c] for c in STACK) for s in xs}  # noqa: E731
    assert len(expanded) == len(as_set(expanded)), "a stack listed twice"
    assert as_set(expanded) == as_set(truth)
    if res.ok:
        assert {c: expanded[0][c] for c in STACK} == got
