"""Load and validate matrix.yaml into typed, immutable knowledge.

Every fact keeps its source id and the line it came from, so the resolver can cite both. Validation
is strict: an unknown key, a malformed version, a reference to something that does not exist or two
facts that contradict each other raise KnowledgeError naming file, line and column.

The sections are compiled into one list of generic `Rule`s (when these components match, these must
match too). The solver evaluates rules and knows nothing about CUDA; the only other kind of fact, the
CUDA compatibility modes, is interpreted from the `cuda.modes` data by `Knowledge.cuda_mode`.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml

from ..errors import KnowledgeError
from ..versions import (NONE, VersionSyntaxError, major_minor, parse_driver, parse_spec,
                       parse_version, version_key)

# The stack's components, in the order the solver assigns them, and the host's facts.
STACK = ("pytorch", "cuda", "cudnn", "nccl", "python", "os", "platform", "openmpi", "ucx")
HOST = ("driver", "gpu", "gpu.cc", "gpu.datacenter", "kernel", "ofed", "open_kernel_modules")
CATEGORY = {"os", "gpu", "platform"}
# Rules that hold only in some readings of a stack: "repo-cuda" when CUDA comes from NVIDIA's package
# repository (image recipes), "wheel-cuda" when it comes from the PyTorch wheels (resolve, check),
# "cuda-aware" when UCX/Open MPI are built with CUDA (what imagebuild builds; `check` of an existing
# machine, whose UCX may be built without CUDA, reports them as warnings), "toolkit-repo" for "a stack
# without PyTorch takes CUDA from a repository" (an image whose CUDA toolkit comes from NVIDIA's
# wheels, `cuda_from: wheels` without PyTorch, skips them).
RULE_TAGS = frozenset({"repo-cuda", "wheel-cuda", "cuda-aware", "toolkit-repo"})
# The platform a stack is for when the matrix lists none (every fact below was read for x86_64).
DEFAULT_PLATFORM = "x86_64"
BOOLEAN = {"gpu.datacenter", "ofed", "open_kernel_modules"}
DRIVER = {"driver"}
COMPONENTS = STACK + HOST


# --------------------------------------------------------------------------------------------------
# YAML with positions


class _Map(dict):
    """A mapping that remembers where it and each of its keys stood in the file."""

    line: int = 0
    column: int = 0
    key_pos: dict

    def pos(self, key=None) -> tuple[int, int]:
        if key is not None and key in self.key_pos:
            return self.key_pos[key]
        return (self.line, self.column)


class _List(list):
    line: int = 0
    column: int = 0


def _loader_class():
    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # type: ignore[misc, valid-type]
        pass

    def construct_map(loader, node):
        loader.flatten_mapping(node)
        out = _Map()
        out.key_pos = {}
        out.line, out.column = node.start_mark.line + 1, node.start_mark.column + 1
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)):
                raise yaml.constructor.ConstructorError(
                    None, None, "a key must be a plain scalar", key_node.start_mark)
            if key in out:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            out[key] = loader.construct_object(value_node, deep=True)
            out.key_pos[key] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
        return out

    def construct_seq(loader, node):
        out = _List(loader.construct_object(child, deep=True) for child in node.value)
        out.line, out.column = node.start_mark.line + 1, node.start_mark.column + 1
        out.item_pos = [(c.start_mark.line + 1, c.start_mark.column + 1) for c in node.value]
        return out

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_map)
    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, construct_seq)
    # Dates stay strings: a fact's date is text we compare, never a timezone puzzle.
    Loader.add_constructor("tag:yaml.org,2002:timestamp", Loader.construct_yaml_str)
    return Loader


_LOADER = None


def load_yaml(path: Path) -> Any:
    """The YAML document with positions. Before the composer builds anything, grammar.read_text and
    grammar.scan bound the file (size, characters, nesting depth, node count, alias expansion);
    afterwards grammar.check_fields checks every recipe-facing string. Each refusal is one
    KnowledgeError naming the file, and the line and column where there is one."""
    from .. import grammar

    global _LOADER
    if _LOADER is None:
        _LOADER = _loader_class()
    text = grammar.read_text(path)
    try:
        grammar.scan(text, str(path), _LOADER)
        doc = yaml.load(text, Loader=_LOADER)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        raise KnowledgeError(f"YAML error: {problem}", file=str(path),
                             line=mark.line + 1 if mark else None,
                             column=mark.column + 1 if mark else None) from None
    except yaml.reader.ReaderError as exc:
        pos = min(max(int(exc.position), 0), len(text))
        raise KnowledgeError(f"YAML error: {exc.reason}", file=str(path),
                             line=text.count("\n", 0, pos) + 1) from None
    except yaml.YAMLError as exc:
        raise KnowledgeError(f"YAML error: {exc}", file=str(path)) from None
    grammar.check_fields(doc, str(path))
    return doc


# --------------------------------------------------------------------------------------------------
# Matchers: what a rule asks of one component


@dataclass(frozen=True)
class Matcher:
    """A predicate on one component's value, with the text used in explanations."""

    text: str
    test: Callable[[str], bool] = field(compare=False, repr=False)

    def __call__(self, value: str) -> bool:
        return self.test(value)


def version_matcher(spec_text: str) -> Matcher:
    spec = parse_spec(spec_text)
    return Matcher(str(spec), spec.contains)


def any_of(matchers: list[Matcher]) -> Matcher:
    if len(matchers) == 1:
        return matchers[0]
    tests = [m.test for m in matchers]
    return Matcher(" or ".join(m.text for m in matchers), lambda v: any(t(v) for t in tests))


def category_matcher(names: Iterable[str]) -> Matcher:
    allowed = frozenset(str(n) for n in names)
    return Matcher(" or ".join(sorted(allowed)), allowed.__contains__)


def bool_matcher(flag: bool) -> Matcher:
    want = "true" if flag else "false"
    return Matcher(want, lambda v: v == want)


def driver_min(text: str) -> Matcher:
    floor = parse_driver(text)
    return Matcher(f">= {text}", lambda v: v != NONE and parse_driver(v) >= floor)


def driver_max_branch(branch: int) -> Matcher:
    return Matcher(f"branch R{branch} or older",
                   lambda v: v != NONE and parse_driver(v).branch <= branch)


def driver_min_branch(branch: int) -> Matcher:
    return Matcher(f"branch R{branch} or newer",
                   lambda v: v != NONE and parse_driver(v).branch >= branch)


def mm_range(lo: str | None, hi: str | None, allow_none: bool = False) -> Matcher:
    """Major.minor between lo and hi inclusive (patch releases of hi included)."""
    lo_v = parse_version(lo) if lo else None
    hi_v = parse_version(hi) if hi else None

    def test(v: str) -> bool:
        if v == NONE:
            return allow_none
        mm = parse_version(major_minor(v))
        return (lo_v is None or mm >= lo_v) and (hi_v is None or mm <= hi_v)

    if lo and hi:
        text = f"{lo} to {hi}.x"
    elif lo:
        text = f">= {lo}"
    else:
        text = f"<= {hi}.x"
    return Matcher(text + (" (or none)" if allow_none else ""), test)


def arch_matcher(arch: list[str]) -> Matcher:
    """Compute capabilities an arch list runs on: a cubin for X.Y runs on X.Z for Z >= Y (same
    major); PTX for X.Y is compiled by the driver for any newer GPU."""
    ranges = []
    for entry in arch:
        ptx = entry.endswith("+PTX")
        cc = parse_version(entry[:-4] if ptx else entry)
        ranges.append((cc, ptx))

    def test(v: str) -> bool:
        if v == NONE:
            return True
        gpu = parse_version(v)
        return any(gpu >= cc and (ptx or gpu.major == cc.major) for cc, ptx in ranges)

    return Matcher("sm " + ", ".join(arch), test)


# --------------------------------------------------------------------------------------------------
# Typed knowledge


@dataclass(frozen=True)
class Source:
    id: str
    title: str
    url: str


@dataclass(frozen=True)
class Rule:
    """When every `when` matcher holds, every `require` matcher must hold and, if `any_of` is
    given, every matcher of at least one of its alternatives (a support matrix's rows: "this
    driver on these GPUs, or that driver on those"). `tag` marks rules that apply only under a
    resolver option (e.g. "repo-cuda": CUDA taken from NVIDIA's package repository)."""

    id: str
    when: tuple[tuple[str, Matcher], ...]
    require: tuple[tuple[str, Matcher], ...]
    text: str
    source: str
    line: int
    verified: bool = True
    any_of: tuple[tuple[tuple[str, Matcher], ...], ...] = ()
    tag: str | None = None

    @property
    def components(self) -> frozenset[str]:
        alts = tuple(pair for alt in self.any_of for pair in alt)
        return frozenset(c for c, _ in self.when + self.require + alts)


@dataclass(frozen=True)
class CudaRelease:
    version: str
    driver: str | None          # Table 3's driver; None: not known (native mode cannot be judged)
    source: str
    verified: bool
    line: int
    wheels_only: bool = False   # known from NVIDIA's wheels (cuda-toolkit) only, not a repository


@dataclass(frozen=True)
class Branch:
    branch: int
    type: str | None
    eol: str | bool | None
    newest_cuda: str | None
    source: str


@dataclass(frozen=True)
class Gpu:
    name: str
    cc: str
    datacenter: bool
    source: str
    platforms: tuple[str, ...] = ()      # empty: any platform the matrix lists


@dataclass(frozen=True)
class Variant:
    pytorch: str
    cuda: str          # "12.4", or "none" for the CPU build
    cudnn: str
    nccl: str
    cuda_runtime: str | None
    arch: tuple[str, ...] | None
    default: bool
    verified: bool
    source: str
    line: int
    platforms: tuple[str, ...] = (DEFAULT_PLATFORM,)

    @property
    def tag(self) -> str:
        return "cpu" if self.cuda == NONE else "cu" + self.cuda.replace(".", "")


@dataclass(frozen=True)
class Mode:
    id: str
    driver_floor: str            # release | major | none
    gpu: tuple[tuple[str, Any], ...]
    branch_supported: bool
    package: str | None
    caveat: str | None
    source: str
    branch_listed: bool = False  # the host branch must be one cuda.compat lists for the release


@dataclass(frozen=True)
class Compat:
    """NVIDIA's forward-compatibility table: the driver branches a CUDA release's cuda-compat
    package supports."""

    cuda: str                   # major.minor
    branches: tuple[int, ...]
    source: str
    line: int


@dataclass
class Knowledge:
    path: str
    as_of: str
    sources: dict[str, Source]
    preference: tuple[str, ...]
    modes: tuple[Mode, ...]
    majors: dict[int, tuple[str, str]]          # major -> (floor driver, source)
    releases: dict[str, CudaRelease]
    branches: dict[int, Branch]
    gpus: dict[str, Gpu]
    architectures: dict[str, dict]
    variants: dict[tuple[str, str], Variant]     # (pytorch, cuda mm or none) -> Variant
    pytorch: dict[str, dict]
    ucx: dict[str, dict]
    openmpi: dict[str, dict]
    os: dict[str, dict]
    gpudirect: tuple[dict, ...]
    nccl_features: tuple[dict, ...]
    rules: tuple[Rule, ...]
    raw: dict
    rdma: dict[str, dict] = field(default_factory=dict)   # id -> user-space RDMA alternative
    compat: dict[str, Compat] = field(default_factory=dict)   # CUDA major.minor -> cuda-compat
    platforms: dict[str, dict] = field(default_factory=dict)  # id -> entry, best first
    nccl_releases: tuple[str, ...] = ()     # every NCCL release the knowledge names
    cudnn_releases: tuple[str, ...] = ()    # every cuDNN release (wheel copies and system copies)

    # ---- queries the resolver asks

    def source_ref(self, sid: str) -> str:
        return f"[{sid}]"

    def domain(self, component: str, allow_unverified: bool = False) -> list[str]:
        """Every value the knowledge allows for a stack component, best first (cached)."""
        cache = self.__dict__.setdefault("_domains", {})
        key = (component, allow_unverified)
        if key not in cache:
            cache[key] = self._domain(component, allow_unverified)
        return list(cache[key])

    def _domain(self, component: str, allow_unverified: bool) -> list[str]:
        if component == "pytorch":
            vals = {v.pytorch for v in self.variants.values() if v.verified or allow_unverified}
            return sorted(vals, key=version_key, reverse=True) + [NONE]
        if component == "cuda":
            vals = [r.version for r in self.releases.values() if r.verified or allow_unverified]
            return sorted(vals, key=version_key, reverse=True) + [NONE]
        if component in ("cudnn", "nccl"):
            vals = {getattr(v, component) for v in self.variants.values()
                    if (v.verified or allow_unverified) and getattr(v, component) != NONE}
            if component == "nccl":
                vals |= set(self.nccl_releases)
            return sorted(vals, key=version_key, reverse=True) + [NONE]
        if component == "platform":
            return list(self.platforms) or [DEFAULT_PLATFORM]
        if component == "python":
            vals = {p for o in self.os.values() for p in o["python"]}
            return sorted(vals, key=version_key, reverse=True)
        if component == "os":
            return list(self.os)  # the file's order is the preference
        if component in ("ucx", "openmpi"):
            table = getattr(self, component)
            return sorted(table, key=version_key, reverse=True)
        raise KeyError(component)

    def gpu_by_name(self, text: str) -> Gpu | None:
        """A GPU by product name (case and space insensitive), as nvidia-smi prints it too
        ("NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-16GB": the longest known name whose words
        begin the given ones), or by sm_XY / compute capability."""
        key = text.replace(" ", "").lower()
        for g in self.gpus.values():
            if g.name.replace(" ", "").lower() == key:
                return g
        words = [w for w in text.lower().replace("-", " ").replace("_", " ").split()
                 if w not in ("nvidia", "tesla")]
        best = None
        for g in self.gpus.values():
            name = g.name.lower().split()
            if words[:len(name)] == name and (best is None or len(name) > len(best.name.split())):
                best = g
        if best is not None:
            return best
        cc = None
        if key.startswith("sm_") and key[3:].isdigit() and len(key) >= 5:
            cc = f"{int(key[3:-1])}.{key[-1]}"
        elif key.replace(".", "").isdigit() and key.count(".") == 1:
            cc = key
        if cc is not None and cc in self.architectures:
            arch = self.architectures[cc]
            return Gpu(name=f"sm_{cc.replace('.', '')}", cc=cc,
                       datacenter=False, source=arch["source"])
        return None

    def branch_supported(self, branch: int, date: str) -> tuple[bool | None, str]:
        """Whether NVIDIA still supports a driver branch on `date`, with the reason."""
        b = self.branches.get(branch)
        if b is None:
            return None, f"branch R{branch} is not in the knowledge base"
        if b.eol is True:
            return False, f"R{branch} is end of life [{b.source}]"
        if not b.eol:
            return None, f"the end of life of R{branch} is not known"
        eol = str(b.eol)
        if len(eol) == 7:  # YYYY-MM: supported through that month
            y, m = int(eol[:4]), int(eol[5:7])
            end = _dt.date(y + (m == 12), m % 12 + 1, 1)
        else:
            end = _dt.date.fromisoformat(eol)
        today = _dt.date.fromisoformat(date)
        if today >= end:
            return False, f"R{branch} reached end of life {eol} [{b.source}]"
        return True, f"R{branch} ({b.type}) is supported until {eol} [{b.source}]"


# --------------------------------------------------------------------------------------------------
# Validation helpers


class _Ctx:
    def __init__(self, path: str):
        self.path = path

    def fail(self, msg: str, node=None, key=None):
        line = col = None
        if isinstance(node, _Map):
            line, col = node.pos(key)
        elif isinstance(node, _List):
            line, col = node.line, node.column
        raise KnowledgeError(msg, file=self.path, line=line, column=col)

    def mapping(self, node, where: str, required: Iterable[str], optional: Iterable[str] = ()):
        if not isinstance(node, _Map):
            self.fail(f"{where}: expected a mapping", node)
        allowed = set(required) | set(optional)
        for key in node:
            if key not in allowed:
                self.fail(f"{where}: unknown key {key!r} (allowed: {', '.join(sorted(allowed))})",
                          node, key)
        for key in required:
            if key not in node:
                self.fail(f"{where}: missing key {key!r}", node)
        return node

    def seq(self, node, where: str, parent=None, key=None):
        if not isinstance(node, _List):
            self.fail(f"{where}: expected a list", parent if node is None else node, key)
        return node

    def text(self, node, key, where: str, optional=False):
        if key not in node:
            if optional:
                return None
            self.fail(f"{where}: missing key {key!r}", node)
        value = node[key]
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            self.fail(f"{where}: {key} must be a string", node, key)
        return str(value)

    def _parsed(self, node, key, where: str, optional: bool, parse) -> str | None:
        """A text value that `parse` accepts (it raises VersionSyntaxError otherwise)."""
        value = self.text(node, key, where, optional)
        if value is None:
            return None
        try:
            parse(value)
        except VersionSyntaxError as exc:
            self.fail(f"{where}: {key}: {exc}", node, key)
        return value

    def version(self, node, key, where: str, optional=False):
        return self._parsed(node, key, where, optional, parse_version)

    def driver(self, node, key, where: str, optional=False):
        return self._parsed(node, key, where, optional, parse_driver)

    def spec(self, node, key, where: str, optional=False):
        return self._parsed(node, key, where, optional, parse_spec)

    def flag(self, node, key, where: str, default: bool):
        if key not in node:
            return default
        if not isinstance(node[key], bool):
            self.fail(f"{where}: {key} must be true or false", node, key)
        return node[key]

    def source(self, node, sources, where: str):
        sid = self.text(node, "source", where)
        if sid not in sources and not sid.startswith(("https://", "http://")):
            self.fail(f"{where}: unknown source {sid!r} (declare it under sources: or give a URL)",
                      node, "source")
        return sid


_TOP = {"schema", "as_of", "sources", "preference", "cuda", "drivers", "architectures", "gpus",
        "cudnn", "nccl", "pytorch", "ucx", "openmpi", "os", "gpudirect", "constraints", "images",
        "tools", "rdma", "platforms", "project"}


def load(path: str | Path) -> Knowledge:
    """Load, validate and compile matrix.yaml."""
    path = str(path)
    doc = load_yaml(Path(path))
    return build(doc, path)


def build(doc: Any, path: str) -> Knowledge:  # noqa: C901 - one straight pass over the sections
    c = _Ctx(path)
    if not isinstance(doc, _Map):
        c.fail("the knowledge base must be a mapping at the top level", doc)
    c.mapping(doc, "matrix", required=("schema", "as_of", "sources", "cuda", "drivers",
                                       "architectures", "gpus", "pytorch", "os"),
              optional=_TOP)
    if doc["schema"] != 1:
        c.fail(f"unsupported schema {doc['schema']!r} (this imagebuild reads schema 1)", doc, "schema")
    as_of = c.text(doc, "as_of", "matrix")
    try:
        _dt.date.fromisoformat(as_of)
    except ValueError:
        c.fail(f"as_of: malformed date {as_of!r} (expected YYYY-MM-DD)", doc, "as_of")
    if "project" in doc:   # project.source and .licenses (grammar.py checks them)
        c.mapping(doc["project"], "project", required=(), optional=("source", "licenses"))

    # sources
    sources: dict[str, Source] = {}
    src_node = c.mapping(doc["sources"], "sources", required=(), optional=doc["sources"].keys()) \
        if isinstance(doc["sources"], _Map) else c.fail("sources: expected a mapping", doc, "sources")
    for sid, entry in src_node.items():
        # a published document (url), or a file of this repository (file: imagebuild's own
        # definitions, which no outside document states)
        c.mapping(entry, f"sources.{sid}", required=("title",), optional=("url", "file"))
        if ("url" in entry) == ("file" in entry):
            c.fail(f"sources.{sid}: give either url (a published document) or file (a file of this "
                   "repository)", entry)
        if "file" in entry:
            rel = c.text(entry, "file", f"sources.{sid}")
            if not re.fullmatch(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*", rel) or ".." in rel.split("/"):
                c.fail(f"sources.{sid}: file {rel!r} is not a relative path in the repository", entry, "file")
            ref = rel
        else:
            ref = c.text(entry, "url", f"sources.{sid}")
        sources[str(sid)] = Source(str(sid), c.text(entry, "title", f"sources.{sid}"), ref)

    rules: list[Rule] = []

    def add_rule(rid, when, require, text, source, line, verified=True, any_of=(), tag=None):
        rules.append(Rule(rid, tuple(when), tuple(require), text, source, line, verified,
                          tuple(tuple(alt) for alt in any_of), tag))

    # platforms (CPU architectures), best first; a matrix without the section is x86_64 only
    platforms: dict[str, dict] = {}
    for pl in c.seq(doc.get("platforms", _List()), "platforms", doc, "platforms"):
        w = "platforms[]"
        c.mapping(pl, w, required=("id", "cuda_repo", "oci", "source"), optional=("aliases", "note"))
        pid = c.text(pl, "id", w)
        if pid in platforms:
            c.fail(f"platforms: {pid} is listed twice", pl, "id")
        platforms[pid] = {"id": pid, "cuda_repo": c.text(pl, "cuda_repo", w),
                          "oci": c.text(pl, "oci", w), "source": c.source(pl, sources, w),
                          "aliases": [str(a) for a in c.seq(pl.get("aliases", _List()),
                                                              f"{w}.aliases", pl, "aliases")]}
    known_platforms = list(platforms) or [DEFAULT_PLATFORM]

    def platform_list(node, key, where):
        """An optional list of platform ids (validated); None when absent."""
        if key not in node:
            return None
        vals = [str(x) for x in c.seq(node[key], f"{where}.{key}", node, key)]
        for v in vals:
            if v not in known_platforms:
                c.fail(f"{where}: unknown platform {v!r} (known: {', '.join(known_platforms)})",
                       node, key)
        return tuple(vals)

    # preference
    preference = tuple(doc.get("preference") or ("pytorch", "mode", "cuda", "python", "os",
                                                  "openmpi", "ucx"))
    for p in preference:
        if p not in STACK and p != "mode":
            c.fail(f"preference: unknown component {p!r}", doc, "preference")

    # CUDA
    cuda = c.mapping(doc["cuda"], "cuda", required=("modes", "majors", "releases"),
                     optional=("compat",))
    modes = []
    for m in c.seq(cuda["modes"], "cuda.modes", cuda, "modes"):
        w = "cuda.modes[]"
        c.mapping(m, w, required=("id", "driver_floor", "source"),
                  optional=("gpu", "branch", "package", "caveat"))
        floor = c.text(m, "driver_floor", w)
        if floor not in ("release", "major", "none"):
            c.fail(f"{w}: driver_floor must be release, major or none", m, "driver_floor")
        gpu_req = m.get("gpu") or {}
        if gpu_req:
            c.mapping(gpu_req, f"{w}.gpu", required=(), optional=("datacenter",))
        branch = m.get("branch") or {}
        if branch:
            c.mapping(branch, f"{w}.branch", required=(), optional=("supported", "listed"))
            for key in branch:
                c.flag(branch, key, f"{w}.branch", False)
        modes.append(Mode(c.text(m, "id", w), floor, tuple(sorted(gpu_req.items())),
                          bool(branch.get("supported", False)), c.text(m, "package", w, True),
                          c.text(m, "caveat", w, True), c.source(m, sources, w),
                          bool(branch.get("listed", False))))
    majors: dict[int, tuple[str, str]] = {}
    for m in c.seq(cuda["majors"], "cuda.majors", cuda, "majors"):
        c.mapping(m, "cuda.majors[]", required=("major", "minor_compat_driver", "source"))
        major = m["major"]
        if not isinstance(major, int):
            c.fail("cuda.majors[]: major must be an integer", m, "major")
        if major in majors:
            c.fail(f"cuda.majors: major {major} is listed twice", m, "major")
        majors[major] = (c.driver(m, "minor_compat_driver", "cuda.majors[]"),
                         c.source(m, sources, "cuda.majors[]"))
    releases: dict[str, CudaRelease] = {}
    for r in c.seq(cuda["releases"], "cuda.releases", cuda, "releases"):
        w = "cuda.releases[]"
        c.mapping(r, w, required=("version", "source"),
                  optional=("driver", "verified", "wheels_only", "note"))
        ver = c.version(r, "version", w)
        verified = c.flag(r, "verified", w, True)
        wheels_only = c.flag(r, "wheels_only", w, False)
        drv = c.driver(r, "driver", w, optional=True)
        if verified and drv is None and not wheels_only:
            c.fail(f"{w}: CUDA {ver} needs a driver (or verified: false, or wheels_only: true "
                   "for a release known from NVIDIA's wheels only)", r)
        if ver in releases:
            c.fail(f"cuda.releases: CUDA {ver} is listed twice (contradicting facts?)", r, "version")
        if parse_version(ver).major not in majors:
            c.fail(f"{w}: CUDA {ver} has no entry under cuda.majors", r, "version")
        releases[ver] = CudaRelease(ver, drv, c.source(r, sources, w), verified, r.line,
                                    wheels_only)
    wheel_cuda = sorted((r.version for r in releases.values() if r.wheels_only), key=version_key)
    if wheel_cuda:
        not_wheel = Matcher("not " + ", ".join(wheel_cuda),
                            (lambda ws: lambda x: x not in ws)(frozenset(wheel_cuda)))
        text = (f"CUDA {', '.join(wheel_cuda)} are known from NVIDIA's wheels (cuda-toolkit) only; "
                "no package repository is confirmed to carry them")
        src = releases[wheel_cuda[0]].source
        add_rule("cuda-wheels-only", [("pytorch", Matcher("none", lambda x: x == NONE))],
                 [("cuda", not_wheel)], text + " (without PyTorch, CUDA comes from a repository)",
                 src, cuda.line, tag="toolkit-repo")
        add_rule("cuda-wheels-only-repo", [], [("cuda", not_wheel)], text, src, cuda.line,
                 tag="repo-cuda")
    compat: dict[str, Compat] = {}
    for e in c.seq(cuda.get("compat", _List()), "cuda.compat", cuda, "compat"):
        w = "cuda.compat[]"
        c.mapping(e, w, required=("cuda", "branches", "source"), optional=("note",))
        mm = c.version(e, "cuda", w)
        if mm.count(".") != 1:
            c.fail(f"{w}: cuda is a major.minor such as 12.8", e, "cuda")
        if mm in compat:
            c.fail(f"cuda.compat: CUDA {mm} is listed twice", e, "cuda")
        if not any(major_minor(r) == mm for r in releases):
            c.fail(f"{w}: CUDA {mm} has no release under cuda.releases", e, "cuda")
        brs = c.seq(e["branches"], f"{w}.branches", e, "branches")
        if not brs or not all(isinstance(b, int) and not isinstance(b, bool) for b in brs):
            c.fail(f"{w}: branches is a non-empty list of driver branches such as 535", e,
                   "branches")
        compat[mm] = Compat(mm, tuple(sorted(brs, reverse=True)), c.source(e, sources, w), e.line)

    # drivers
    drivers = c.mapping(doc["drivers"], "drivers", required=("branches",))
    branches: dict[int, Branch] = {}
    for b in c.seq(drivers["branches"], "drivers.branches", drivers, "branches"):
        w = "drivers.branches[]"
        c.mapping(b, w, required=("branch", "source"),
                  optional=("type", "released", "eol", "newest_cuda", "note"))
        if not isinstance(b["branch"], int):
            c.fail(f"{w}: branch must be an integer such as 535", b, "branch")
        if b["branch"] in branches:
            c.fail(f"drivers.branches: R{b['branch']} is listed twice", b, "branch")
        typ = c.text(b, "type", w, True)
        if typ is not None and typ not in ("NFB", "PB", "LTSB"):
            c.fail(f"{w}: type must be NFB, PB or LTSB", b, "type")
        eol = b.get("eol")
        if eol is not None and eol is not True:
            eol = str(eol)
            try:
                _dt.date.fromisoformat(eol if len(eol) == 10 else eol + "-01")
            except ValueError:
                c.fail(f"{w}: eol must be YYYY-MM, YYYY-MM-DD or true", b, "eol")
        branches[b["branch"]] = Branch(b["branch"], typ, eol, c.version(b, "newest_cuda", w, True),
                                       c.source(b, sources, w))

    # architectures and GPUs
    architectures: dict[str, dict] = {}
    for a in c.seq(doc["architectures"], "architectures", doc, "architectures"):
        w = "architectures[]"
        c.mapping(a, w, required=("cc", "name", "source"),
                  optional=("first_cuda", "last_cuda", "first_branch", "last_branch", "note"))
        cc = c.version(a, "cc", w)
        if cc in architectures:
            c.fail(f"architectures: compute capability {cc} is listed twice", a, "cc")
        first, last = c.version(a, "first_cuda", w, True), c.version(a, "last_cuda", w, True)
        src = c.source(a, sources, w)
        architectures[cc] = {"cc": cc, "name": c.text(a, "name", w), "first_cuda": first,
                             "last_cuda": last, "last_branch": a.get("last_branch"), "source": src}
        cc_is = category_matcher([cc])
        if first or last:
            add_rule(f"arch-{cc}-cuda", [("gpu.cc", cc_is)],
                     [("cuda", mm_range(first, last, allow_none=True))],
                     f"{a['name']} (sm_{cc.replace('.', '')}) is supported by CUDA "
                     + (f"{first} to {last}.x" if first and last else
                        f"{first} and newer" if first else f"up to {last}.x"),
                     src, a.line)
        _branch_rules(c, a, w, [("gpu.cc", cc_is)],
                      f"{a['name']} GPUs (sm_{cc.replace('.', '')})", f"arch-{cc}", src, add_rule)
    gpus: dict[str, Gpu] = {}
    for g in c.seq(doc["gpus"], "gpus", doc, "gpus"):
        w = "gpus[]"
        c.mapping(g, w, required=("name", "cc", "datacenter", "source"),
                  optional=("first_branch", "last_branch", "platforms", "note"))
        name, cc = c.text(g, "name", w), c.version(g, "cc", w)
        if cc not in architectures:
            c.fail(f"{w}: {name}: compute capability {cc} is not under architectures", g, "cc")
        if name in gpus:
            c.fail(f"gpus: {name} is listed twice", g, "name")
        src = c.source(g, sources, w)
        plats = platform_list(g, "platforms", f"{w} {name}") or ()
        gpus[name] = Gpu(name, cc, c.flag(g, "datacenter", w, False), src, plats)
        is_gpu = category_matcher([name])
        _branch_rules(c, g, w, [("gpu", is_gpu)], f"{name} GPUs", f"gpu-{name}", src, add_rule)
        if plats:
            add_rule(f"gpu-{name}-platform", [("gpu", is_gpu)],
                     [("platform", category_matcher(plats))],
                     f"{name} nodes are {' or '.join(plats)} machines", src, g.line)

    # cuDNN
    if "cudnn" in doc:
        cd = c.mapping(doc["cudnn"], "cudnn", required=("lines",), optional=("builds", "releases"))
        # A support matrix: the rows of one cuDNN line (same `versions`) are alternatives. A stack
        # with that cuDNN needs one row whose CUDA range, GPU range and driver floor all hold.
        groups: dict[str, list] = {}
        for ln in c.seq(cd["lines"], "cudnn.lines", cd, "lines"):
            w = "cudnn.lines[]"
            c.mapping(ln, w, required=("versions", "cuda", "source"),
                      optional=("driver", "cc", "verified", "note"))
            vs, cs = c.spec(ln, "versions", w), c.spec(ln, "cuda", w)
            ln_verified = c.flag(ln, "verified", w, True)
            alt = [("cuda", version_matcher(cs))]
            if "cc" in ln:
                alt.append(("gpu.cc", version_matcher(c.spec(ln, "cc", w))))
            if "driver" in ln:
                alt.append(("driver", driver_min(c.driver(ln, "driver", w))))
            groups.setdefault((vs, ln_verified), []).append((alt, c.source(ln, sources, w), ln.line))
        for (vs, rows_verified), rows in groups.items():
            srcs = sorted({s for _, s, _ in rows})
            text = (f"cuDNN {vs} runs with " + "; or ".join(
                ", ".join(f"{'sm' if k == 'gpu.cc' else k} {m.text}" for k, m in alt)
                for alt, _, _ in rows))
            add_rule(f"cudnn-{vs}-support" + ("" if rows_verified else "-unverified"),
                     [("cudnn", version_matcher(vs))], [], text, ",".join(srcs), rows[0][2],
                     verified=rows_verified, any_of=[alt for alt, _, _ in rows])
        cudnn_releases = _release_list(c, cd, "cudnn", sources)
        for b in c.seq(cd.get("builds", _List()), "cudnn.builds", cd, "builds"):
            _major_build_rule(c, b, "cudnn", sources, add_rule)

    # NCCL
    nccl_features: tuple = ()
    nccl_releases: tuple[str, ...] = ()
    if "cudnn" not in doc:
        cudnn_releases = ()
    if "nccl" in doc:
        nd = c.mapping(doc["nccl"], "nccl", required=("builds",), optional=("features", "releases"))
        nccl_releases = _release_list(c, nd, "nccl", sources)
        for b in c.seq(nd["builds"], "nccl.builds", nd, "builds"):
            _major_build_rule(c, b, "nccl", sources, add_rule)
        feats = []
        for f in c.seq(nd.get("features", _List()), "nccl.features", nd, "features"):
            c.mapping(f, "nccl.features[]", required=("since", "feature", "source"), optional=("note",))
            feats.append({"since": c.version(f, "since", "nccl.features[]"),
                          "feature": c.text(f, "feature", "nccl.features[]"),
                          "source": c.source(f, sources, "nccl.features[]")})
        nccl_features = tuple(feats)

    # PyTorch
    pt = c.mapping(doc["pytorch"], "pytorch", required=("releases",))
    variants: dict[tuple[str, str], Variant] = {}
    pytorch: dict[str, dict] = {}
    for rel in c.seq(pt["releases"], "pytorch.releases", pt, "releases"):
        w = "pytorch.releases[]"
        c.mapping(rel, w, required=("version", "python", "variants", "source"), optional=("note",))
        ver = c.version(rel, "version", w)
        if ver in pytorch:
            c.fail(f"pytorch.releases: {ver} is listed twice", rel, "version")
        py = c.spec(rel, "python", w)
        src = c.source(rel, sources, w)
        pytorch[ver] = {"version": ver, "python": py, "source": src}
        add_rule(f"pytorch-{ver}-python", [("pytorch", version_matcher("==" + ver))],
                 [("python", version_matcher(py))], f"torch {ver} supports Python {py}",
                 src, rel.line)
        cudas_verified, cudas_all = [], []
        w = f"pytorch {ver} variants[]"
        for v in c.seq(rel["variants"], w, rel, "variants"):
            c.mapping(v, w, required=("source",),
                      optional=("cuda", "cpu", "cudnn", "nccl", "cuda_runtime", "arch", "default",
                                "verified", "platforms", "note"))
            vsrc = c.source(v, sources, w)
            verified = c.flag(v, "verified", w, True)
            if c.flag(v, "cpu", w, False):
                if "cuda" in v:
                    c.fail(f"{w}: a CPU variant has no cuda", v, "cuda")
                cuda_mm, cudnn, nccl = NONE, NONE, NONE
            else:
                cuda_mm = c.version(v, "cuda", w)
                if cuda_mm.count(".") != 1:
                    c.fail(f"{w}: cuda is a major.minor such as 12.4", v, "cuda")
                if not any(major_minor(r) == cuda_mm for r in releases):
                    c.fail(f"{w}: CUDA {cuda_mm} has no release under cuda.releases", v, "cuda")
                cudnn = c.version(v, "cudnn", w, optional=not verified)
                nccl = c.version(v, "nccl", w, optional=not verified)
                if verified and (cudnn is None or nccl is None):
                    c.fail(f"{w}: a verified variant names its cudnn and nccl", v)
            arch = None
            if "arch" in v:
                arch_node = c.seq(v["arch"], f"{w}.arch", v, "arch")
                for entry in arch_node:
                    try:
                        parse_version(str(entry).removesuffix("+PTX"))
                    except VersionSyntaxError as exc:
                        c.fail(f"{w}.arch: {exc}", v, "arch")
                arch = tuple(str(e) for e in arch_node)
            key = (ver, cuda_mm)
            if key in variants:
                c.fail(f"{w}: torch {ver} has two {cuda_mm} variants", v)
            var = Variant(ver, cuda_mm, cudnn or NONE, nccl or NONE,
                          c.version(v, "cuda_runtime", w, True), arch,
                          c.flag(v, "default", w, False), verified, vsrc, v.line,
                          platform_list(v, "platforms", w) or (DEFAULT_PLATFORM,))
            variants[key] = var
            cuda_m = Matcher("none", lambda x: x == NONE) if cuda_mm == NONE \
                else version_matcher(cuda_mm)
            (cudas_verified if verified else cudas_all).append(cuda_m)
            when = [("pytorch", version_matcher("==" + ver)), ("cuda", cuda_m)]
            req = []
            if cudnn:
                req.append(("cudnn", Matcher(cudnn, (lambda want: lambda x: x == want)(cudnn))))
            if nccl == NONE:
                req.append(("nccl", Matcher(NONE, lambda x: x == NONE)))
            elif nccl:
                # The wheel's NCCL or a newer NCCL 2 installed over it (users upgrade NCCL for its
                # fixes; the image installs it explicitly and preloads it). The bundled one ranks
                # first (Problem orders it so).
                floor = parse_version(nccl)
                req.append(("nccl", Matcher(f">= {nccl}", (lambda lo: lambda x: x != NONE and (
                    parse_version(x) >= lo and parse_version(x).major == lo.major))(floor))))
            runtime = c.version(v, "cuda_runtime", w, True)
            var_tag = "cpu" if cuda_mm == NONE else "cu" + cuda_mm.replace(".", "")
            if runtime in releases and major_minor(runtime) == cuda_mm:
                # cu13-era wheels pin `cuda-toolkit==X.Y.Z`: the stack's CUDA is that release
                add_rule(f"pytorch-{ver}-{var_tag}-cuda", when,
                         [("cuda", Matcher(runtime, (lambda want: lambda x: x == want)(runtime)))],
                         f"torch {ver}+{var_tag} wheels bring CUDA {runtime} (cuda-toolkit=={runtime})",
                         vsrc, v.line, verified, tag="wheel-cuda")
            plats = platform_list(v, "platforms", w) or (DEFAULT_PLATFORM,)
            add_rule(f"pytorch-{ver}-{'cpu' if cuda_mm == NONE else 'cu' + cuda_mm.replace('.', '')}"
                     "-platform", when, [("platform", category_matcher(plats))],
                     f"torch {ver}+{'cpu' if cuda_mm == NONE else 'cu' + cuda_mm.replace('.', '')} "
                     f"wheels are published for {', '.join(plats)}", vsrc, v.line, verified)
            if arch:
                req.append(("gpu.cc", arch_matcher(list(arch))))
            if req:
                add_rule(f"pytorch-{ver}-{var.tag}", when, req,
                         f"torch {ver}+{var.tag} bundles "
                         + ", ".join(f"{k} {m.text}" for k, m in req if k != "gpu.cc")
                         + (f" and is built for {req[-1][1].text}" if arch else ""),
                         vsrc, v.line, verified)
        builds_v = ", ".join(m.text for m in cudas_verified) or "no verified build"
        also = (f" (builds for {', '.join(m.text for m in cudas_all)} are not confirmed)"
                if cudas_all else "")
        add_rule(f"pytorch-{ver}-builds", [("pytorch", version_matcher("==" + ver))],
                 [("cuda", any_of(cudas_verified or [Matcher("nothing", lambda x: False)]))],
                 f"torch {ver} is built for CUDA {builds_v}{also}", src, rel.line)
        if cudas_all:
            add_rule(f"pytorch-{ver}-builds-unverified", [("pytorch", version_matcher("==" + ver))],
                     [("cuda", any_of(cudas_verified + cudas_all))],
                     f"torch {ver} is built for CUDA "
                     + ", ".join(m.text for m in cudas_verified + cudas_all)
                     + " (some builds unverified)", src, rel.line, verified=False)

    # UCX and Open MPI
    tables = {}
    for comp in ("ucx", "openmpi"):
        table = {}
        if comp in doc:
            node = c.mapping(doc[comp], comp, required=("releases",))
            for r in c.seq(node["releases"], f"{comp}.releases", node, "releases"):
                w = f"{comp}.releases[]"
                c.mapping(r, w, required=("version", "source"),
                          optional=("date", "install", "os", "cuda", "line", "pml", "needs", "note",
                                    "url", "sha256", "git_archive"))
                ver = c.version(r, "version", w)
                c.version(r, "line", w, True)
                if ver in table:
                    c.fail(f"{comp}.releases: {ver} is listed twice", r, "version")
                install = c.text(r, "install", w, True) or "source"
                if install not in ("source", "os"):
                    c.fail(f"{w}: install must be source or os", r, "install")
                src = c.source(r, sources, w)
                entry = dict(r)
                entry["install"] = install
                if "git_archive" in r:
                    ga = c.mapping(r["git_archive"], f"{w}.git_archive",
                                   required=("file", "sha256", "commit", "source"),
                                   optional=("note",))
                    c.source(ga, sources, f"{w}.git_archive")
                    entry["git_archive"] = {key: str(val) for key, val in ga.items()}
                table[ver] = entry
                req = []
                if "os" in r:
                    req.append(("os", category_matcher(c.seq(r["os"], f"{w}.os", r, "os"))))
                # `cuda: false`: a build without CUDA support. It still runs beside a CUDA stack
                # (torch does not go through MPI for its GPUs); it is just not CUDA-aware, which
                # the answer says, and source builds rank first anyway (they are newer).
                entry["cuda_aware"] = r.get("cuda") is not False
                if req:
                    add_rule(f"{comp}-{ver}-build", [(comp, version_matcher("==" + ver))], req,
                             f"{comp} {ver} ({install} package) needs "
                             + " and ".join(f"{k} {m.text}" for k, m in req), src, r.line)
        tables[comp] = table

    # operating systems
    oses: dict[str, dict] = {}
    for o in c.seq(doc["os"], "os", doc, "os"):
        w = "os[]"
        c.mapping(o, w, required=("id", "name", "family", "python", "source"),
                  optional=("kernel", "glibc", "cuda", "nvidia_repo", "base", "platforms", "note"))
        oid = c.text(o, "id", w)
        if oid in oses:
            c.fail(f"os: {oid} is listed twice", o, "id")
        pys = c.seq(o["python"], f"{w}.python", o, "python")
        for p in pys:
            try:
                parse_version(str(p))
            except VersionSyntaxError as exc:
                c.fail(f"{w}.python: {exc}", o, "python")
        src = c.source(o, sources, w)
        cuda_range = c.spec(o, "cuda", w, True)
        oses[oid] = {"id": oid, "name": c.text(o, "name", w), "family": c.text(o, "family", w),
                     "python": [str(p) for p in pys], "kernel": c.version(o, "kernel", w, True),
                     "glibc": c.version(o, "glibc", w, True),
                     "cuda": cuda_range, "nvidia_repo": c.text(o, "nvidia_repo", w, True),
                     "base": c.text(o, "base", w, True),
                     "platforms": platform_list(o, "platforms", w) or (DEFAULT_PLATFORM,),
                     "source": src, "line": o.line}
        is_os = category_matcher([oid])
        add_rule(f"os-{oid}", [("os", is_os)],
                 [("python", category_matcher(str(p) for p in pys)),
                  ("platform", category_matcher(oses[oid]["platforms"]))],
                 f"{o['name']} offers Python {', '.join(str(p) for p in pys)} on "
                 f"{', '.join(oses[oid]['platforms'])}", src, o.line)
        # CUDA from NVIDIA's repository for this OS: a stack without PyTorch takes CUDA from there.
        # A PyTorch stack takes CUDA from the wheels torch pins, so the repository's range binds it
        # only when the caller asks for repository CUDA (the `repo-cuda` tag: image expansion,
        # whose recipes install CUDA packages from the repository).
        cuda_alts = [Matcher("none", lambda x: x == NONE)]
        if cuda_range:
            cuda_alts.append(version_matcher(cuda_range))
        repo_text = (f"NVIDIA's CUDA repository for {o['name']} carries CUDA "
                     + (cuda_range or "none (no repository is confirmed)"))
        add_rule(f"os-{oid}-cuda-repo", [("os", is_os), ("pytorch", Matcher("none", lambda x: x == NONE))],
                 [("cuda", any_of(cuda_alts))], repo_text + "; without PyTorch, CUDA comes from there",
                 src, o.line, tag="toolkit-repo")
        add_rule(f"os-{oid}-cuda-repo-torch", [("os", is_os)], [("cuda", any_of(cuda_alts))],
                 repo_text, src, o.line, tag="repo-cuda")

    # GPUDirect
    gdr = []
    for g in c.seq(doc.get("gpudirect", _List()), "gpudirect", doc, "gpudirect"):
        w = "gpudirect[]"
        c.mapping(g, w, required=("id", "requires", "source"),
                  optional=("preferred", "nccl", "note"))
        reqs = c.mapping(g["requires"], f"{w}.requires", required=(),
                         optional=("driver", "ofed", "open_kernel_modules", "cuda", "gpu.cc",
                                   "kernel"))
        compiled = []
        for k, val in reqs.items():
            compiled.append((k, _matcher_for(c, k, val, reqs, f"{w}.requires")))
        gdr.append({"id": c.text(g, "id", w), "requires": tuple(compiled),
                    "preferred": g.get("preferred", 99), "nccl": c.spec(g, "nccl", w, True),
                    "note": c.text(g, "note", w, True), "source": c.source(g, sources, w)})

    # RDMA user space other than the distribution's rdma-core (DOCA-OFED): a repository per OS, a
    # signing key, and the package names that replace rdma-core's
    rdma: dict[str, dict] = {}
    for r in c.seq(doc.get("rdma", _List()), "rdma", doc, "rdma"):
        w = "rdma[]"
        c.mapping(r, w, required=("id", "name", "version", "repo", "os", "key", "packages", "source"),
                  optional=("verified", "note", "released"))
        rid = c.text(r, "id", w)
        if rid in rdma or rid == "rdma-core":
            c.fail(f"{w}: id {rid!r} is used twice (rdma-core is the distribution's)", r, "id")
        c.version(r, "version", w)
        key = c.mapping(r["key"], f"{w}.key", required=("url",),
                        optional=("fingerprint", "long_id", "source", "note"))
        if not key.get("fingerprint") and not key.get("long_id"):
            c.fail(f"{w}.key: a fingerprint or a long_id is needed to check the key", r, "key")
        os_map = c.mapping(r["os"], f"{w}.os", required=(), optional=oses.keys())
        pk = c.mapping(r["packages"], f"{w}.packages", required=(), optional=("apt", "dnf"))
        for pm, lists in pk.items():
            c.mapping(lists, f"{w}.packages.{pm}", required=("runtime", "devel"))
            for flavor in ("runtime", "devel"):
                c.seq(lists[flavor], f"{w}.packages.{pm}.{flavor}", lists, flavor)
        rdma[rid] = {"id": rid, "name": c.text(r, "name", w), "version": str(r["version"]),
                     "repo": c.text(r, "repo", w), "os": {str(a): str(b) for a, b in os_map.items()},
                     "key": {kk: str(vv) for kk, vv in key.items()},
                     "packages": {pm: {f: [str(x) for x in v[f]] for f in ("runtime", "devel")}
                                  for pm, v in pk.items()},
                     "verified": c.flag(r, "verified", w, True), "source": c.source(r, sources, w),
                     "line": getattr(r, "line", None)}

    # generic constraints
    for k in c.seq(doc.get("constraints", _List()), "constraints", doc, "constraints"):
        w = "constraints[]"
        c.mapping(k, w, required=("id", "when", "require", "source"),
                  optional=("note", "verified", "tag"))
        tag = c.text(k, "tag", w, optional=True)
        if tag is not None and tag not in RULE_TAGS:
            c.fail(f"{w}: tag must be one of {', '.join(sorted(RULE_TAGS))}", k, "tag")
        rid = c.text(k, "id", w)
        when = [(comp, _matcher_for(c, comp, val, k["when"], f"{w}.when"))
                for comp, val in c.mapping(k["when"], f"{w}.when", (), COMPONENTS).items()]
        req = [(comp, _matcher_for(c, comp, val, k["require"], f"{w}.require"))
               for comp, val in c.mapping(k["require"], f"{w}.require", (), COMPONENTS).items()]
        text = "when " + ", ".join(f"{a} {m.text}" for a, m in when) + ": " + \
            ", ".join(f"{a} {m.text}" for a, m in req)
        add_rule(rid, when, req, text, c.source(k, sources, w), k.line,
                 c.flag(k, "verified", w, True), tag=tag)

    ids = [r.id for r in rules]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        c.fail(f"constraints: rule id {sorted(dup)[0]!r} is used twice", doc)

    from ..grammar import validate as validate_recipe_inputs
    validate_recipe_inputs(doc, c)  # tools, images and rdma: every field, type and reference
    return Knowledge(
        path=path, as_of=as_of, sources=sources, preference=preference, modes=tuple(modes),
        majors=majors, releases=releases, branches=branches, gpus=gpus,
        architectures=architectures, variants=variants, pytorch=pytorch, ucx=tables["ucx"],
        openmpi=tables["openmpi"], os=oses, gpudirect=tuple(gdr), nccl_features=nccl_features,
        rules=tuple(rules), raw=doc, rdma=rdma, compat=compat, platforms=platforms,
        nccl_releases=nccl_releases, cudnn_releases=cudnn_releases)


def _branch_rules(c: _Ctx, node, where: str, when, what: str, rid: str, src: str, add_rule):
    """first_branch / last_branch of an architecture or a GPU: the driver branches that drive it."""
    for key, matcher, word in (("first_branch", driver_min_branch, "from"),
                               ("last_branch", driver_max_branch, "up to")):
        if node.get(key) is None:
            continue
        b = node[key]
        if not isinstance(b, int) or isinstance(b, bool):
            c.fail(f"{where}: {key} must be an integer such as 535", node, key)
        add_rule(f"{rid}-{key.split('_')[0]}-branch", when, [("driver", matcher(b))],
                 f"{what} are driven by branches {word} R{b}", src, node.line)


def _release_list(c: _Ctx, node, comp: str, sources) -> tuple[str, ...]:
    """`releases:` of cudnn/nccl: [{versions: [..], source: ..}]: every published version."""
    out: list[str] = []
    for r in c.seq(node.get("releases", _List()), f"{comp}.releases", node, "releases"):
        w = f"{comp}.releases[]"
        c.mapping(r, w, required=("versions", "source"), optional=("note", "cuda_major"))
        c.source(r, sources, w)
        for v in c.seq(r["versions"], f"{w}.versions", r, "versions"):
            try:
                parse_version(str(v))
            except VersionSyntaxError as exc:
                c.fail(f"{w}.versions: {exc}", r, "versions")
            if str(v) not in out:
                out.append(str(v))
    return tuple(sorted(out, key=version_key, reverse=True))


def _major_build_rule(c: _Ctx, b, comp: str, sources, add_rule):
    w = f"{comp}.builds[]"
    c.mapping(b, w, required=("cuda_major", "versions", "source"), optional=("note",))
    major = b["cuda_major"]
    if not isinstance(major, int):
        c.fail(f"{w}: cuda_major must be an integer", b, "cuda_major")
    vs = c.spec(b, "versions", w)
    allowed = version_matcher(vs)
    add_rule(f"{comp}-builds-cuda{major}", [("cuda", version_matcher(f"=={major}.*"))],
             [(comp, Matcher(f"{vs} (or none)", lambda x: x == NONE or allowed(x)))],
             f"{comp} is published for CUDA {major} in versions {vs}",
             c.source(b, sources, w), b.line)


def _matcher_for(c: _Ctx, comp: str, value, node, where: str) -> Matcher:
    """Compile a YAML value for one component into a Matcher (validated)."""
    if comp not in COMPONENTS:
        c.fail(f"{where}: unknown component {comp!r} (known: {', '.join(COMPONENTS)})", node, comp)
    if value == NONE:
        return Matcher("none", lambda x: x == NONE)
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
                spec = parse_spec(text)
                out.append(Matcher(text, lambda x, s=spec: x != NONE and s.contains(x)))
            else:
                out.append(version_matcher(text))
        except VersionSyntaxError as exc:
            c.fail(f"{where}: {comp}: {exc}", node, comp)
    return any_of(out)
