"""The typed knowledge: the facts each section yields (releases, branches, GPUs, variants, modes,
...), the generic `Rule`s they compile to, and `Knowledge`, the whole, with the queries the resolver
asks of it."""

from __future__ import annotations

import datetime as _dt
import functools
from dataclasses import dataclass, field
from typing import Any

from ..versions import NONE, version_key
from .families import Family
from .matchers import Matcher, version_matcher
from .schema import DEFAULT_PLATFORM

_range = functools.lru_cache(maxsize=None)(version_matcher)   # an os[].cuda range, parsed once


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
    # the verified half of a fact whose unverified twin (verified=False) widens it: applied only
    # while unverified facts are not allowed, so that --allow-unverified uses the wider one alone
    verified_only: bool = False

    @property
    def components(self) -> frozenset[str]:
        alts = tuple(pair for alt in self.any_of for pair in alt)
        return frozenset(c for c, _ in self.when + self.require + alts)


@dataclass(frozen=True)
class Availability:
    """Where a CUDA release is published besides NVIDIA's wheels (`cuda.availability`): NVIDIA's
    package repository of an OS (kind "repos": os[].nvidia_repo folders) or nvidia/cuda images
    (kind "images": os ids, each built from its OS's repository), on `platforms` (empty: every
    platform of the OS)."""

    kind: str                   # repos | images
    names: tuple[str, ...]
    platforms: tuple[str, ...]
    verified: bool
    source: str
    line: int
    seen: str | None = None     # the day the listing (or page) was dated or read


@dataclass(frozen=True)
class CudaRelease:
    version: str
    driver: str | None          # Table 3's driver; None: not known (native mode cannot be judged)
    source: str
    verified: bool
    line: int
    wheels_only: bool = False   # no repository or image confirmed: known from NVIDIA's wheels only
    # where it is published: when given, these facts alone say which OS repositories carry it (the
    # os[].cuda ranges cover the releases without any)
    availability: tuple[Availability, ...] = ()

    @property
    def in_repository(self) -> bool:
        """Some NVIDIA repository or image is confirmed to carry it: an os[].cuda range (releases
        without availability facts that are not wheels-only) or a verified availability fact."""
        if self.availability:
            return any(a.verified for a in self.availability)
        return not self.wheels_only

    def carried_by(self, os_entry: "OsEntry", platform: str, allow_unverified: bool = False,
                   in_range: bool | None = None) -> bool:
        """Whether NVIDIA's repository of `os_entry` (or its nvidia/cuda images) carries this
        release on `platform`: its availability facts when it has any (unverified ones only when
        allowed), else the OS's `cuda` range unless the release is known from the wheels only.
        `in_range`: whether the range holds it, when the caller knows (saves parsing it)."""
        if platform not in os_entry.platforms:
            return False
        if self.availability:
            for a in self.availability:
                if not (a.verified or allow_unverified):
                    continue
                name = os_entry.nvidia_repo if a.kind == "repos" else os_entry.id
                if name and name in a.names and (not a.platforms or platform in a.platforms):
                    return True
            return False
        if in_range is None:
            rng = os_entry.cuda
            in_range = rng is not None and _range(rng)(self.version)
        return not self.wheels_only and in_range


@dataclass(frozen=True)
class Branch:
    branch: int
    type: str | None
    eol: str | bool | None
    newest_cuda: str | None
    source: str
    lifecycle_source: str | None = None     # of type and eol, when another than `source`

    @property
    def eol_source(self) -> str:
        return self.lifecycle_source or self.source


@dataclass(frozen=True)
class MatrixPlatform:
    """A CPU architecture of `platforms:`: NVIDIA's repository folder for it, its OCI platform
    and the other names it goes by (amd64, arm64, sbsa)."""
    id: str
    cuda_repo: str
    oci: str
    source: str
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class Architecture:
    """A GPU architecture by compute capability: the CUDA releases that compile for it (None:
    no bound known) and the last driver branch that drives it, if it has one."""
    cc: str
    name: str
    first_cuda: str | None
    last_cuda: str | None
    last_branch: int | None
    source: str
    first_branch: int | None = None      # the first driver branch that drives it, if known
    first_driver: str | None = None      # the first driver release that drives it, if published
    driver_source: str | None = None     # of first_branch/first_driver, when not `source`
    nccl: str | None = None              # the NCCL releases built for it (a specifier), if known
    nccl_source: str | None = None


@dataclass(frozen=True)
class NcclFeature:
    """What an NCCL release brought (a GPU's or an architecture's support among them)."""
    since: str
    feature: str
    source: str
    gpu: str | None = None      # the GPU product whose support it is
    cc: str | None = None       # the architecture whose support it is


@dataclass(frozen=True)
class Gpu:
    name: str
    cc: str
    datacenter: bool
    source: str
    platforms: tuple[str, ...] = ()      # empty: any platform the matrix lists
    first_branch: int | None = None      # a floor of its own, above its architecture's
    first_driver: str | None = None      # a driver release floor of its own (within its branch)
    driver_source: str | None = None     # of first_branch/first_driver, when not `source`


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
    # False: the build is confirmed but the NCCL its wheels bundle is not (nccl: unknown, "none",
    # or a value read only in third-party copies)
    nccl_verified: bool = True
    nccl_source: str | None = None    # where the NCCL was read, when not the variant's source
    platforms_source: str | None = None  # where the platforms were read, when not the variant's

    @property
    def tag(self) -> str:
        return "cpu" if self.cuda == NONE else "cu" + self.cuda.replace(".", "")

    @property
    def nccl_cited(self) -> str:
        """The source of the NCCL value: its own where one is named, else the variant's."""
        return self.nccl_source or self.source

    def confirmed_nccl(self, allow_unverified: bool = False) -> str | None:
        """The NCCL the wheels bundle where that is known (and confirmed, unless unverified facts
        are allowed); "none" for the CPU build; None where not known."""
        if self.cuda == NONE:
            return NONE
        if self.nccl == NONE or not ((self.verified and self.nccl_verified) or allow_unverified):
            return None
        return self.nccl


@dataclass(frozen=True)
class TorchRelease:
    """A PyTorch release: the Pythons it supports (a specifier) and its source (its variants are
    Knowledge.variants)."""
    version: str
    python: str
    source: str
    wheels: tuple["WheelEvidence", ...] = ()


@dataclass(frozen=True)
class WheelEvidence:
    """One wheel of a PyTorch release on the package index: what `knowledge sync` read of it (the
    file, its sha256 and size, the CUDA its torch/version.py names, NONE for the CPU build, and the
    git commit it was built from). Evidence that a build is published for a platform."""
    release: str
    platform: str
    file: str
    sha256: str
    cuda: str
    commit: str
    source: str
    size: int | None = None
    line: int | None = None
    # the GPU architectures the build carries ("8.0", "12.0+PTX"), read from the wheel's
    # libtorch_python.so (what torch.cuda.get_arch_list() returns); None: not read (a CPU build)
    arch: tuple[str, ...] | None = None


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


@dataclass(frozen=True)
class Tool:
    """A `tools:` entry, as gate 3 (recipe_inputs.py) checked it: a tarball the CUDA recipes compile
    (version, url with {version}, sha256, size), a repository key (url, fingerprint) or the
    PyTorch index (url with {tag})."""
    name: str
    url: str
    source: str = ""
    version: str | None = None
    sha256: str | None = None
    size: int | None = None
    fingerprint: str | None = None

    @classmethod
    def of(cls, name: str, entry: dict) -> "Tool":
        def text(key: str) -> str | None:
            return None if entry.get(key) is None else str(entry[key])
        return cls(name, str(entry.get("url", "")), str(entry.get("source", "")), text("version"),
                   text("sha256"), entry.get("size"), text("fingerprint"))


@dataclass(frozen=True)
class OsEntry:
    """An operating system images build on (`os:`): its packager family, Pythons, kernel and glibc,
    the CUDA releases NVIDIA's repository carries for it (a specifier), that repository's folder,
    the base image and its platforms."""
    id: str
    name: str
    family: str
    python: tuple[str, ...]
    source: str
    line: int
    platforms: tuple[str, ...]
    kernel: str | None = None
    glibc: str | None = None
    cuda: str | None = None
    nvidia_repo: str | None = None
    base: str | None = None


@dataclass(frozen=True)
class GitArchive:
    """A release's git tag archive with its submodules (`git_archive:`)."""
    file: str
    sha256: str
    commit: str
    source: str
    size: int | None = None


@dataclass(frozen=True)
class MpiRelease:
    """A UCX or Open MPI release (`ucx.releases[]`, `openmpi.releases[]`): installed from source
    (its tarball: url with {version}, sha256, size; or its git archive) or from the OS's packages
    (`os`: the OSes that package it; `transports`: what UCX's package carries), CUDA-aware or not."""
    version: str
    source: str
    install: str = "source"             # source | os
    line: str | None = None             # the release series (Open MPI 4.1, 5.0)
    cuda_aware: bool = True
    url: str | None = None
    sha256: str | None = None
    size: int | None = None
    git_archive: GitArchive | None = None
    os: tuple[str, ...] | None = None
    transports: tuple[str, ...] | None = None
    pml: str | None = None
    date: str | None = None


@dataclass(frozen=True)
class RdmaKey:
    """The signing key of an RDMA repository: where it is, and its full fingerprint or (then an
    unverified fact) its 64-bit key id."""
    url: str
    source: str
    fingerprint: str | None = None
    long_id: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class RdmaEntry:
    """An RDMA user space other than the distribution's rdma-core (`rdma:`): its repository per OS
    (`os`: OS id -> folder), signing key, package names per package manager (runtime, devel)."""
    id: str
    name: str
    version: str
    repo: str
    os: dict[str, str]                  # OS id -> the repository's folder for it (data)
    key: RdmaKey
    packages: dict[str, dict[str, tuple[str, ...]]]   # package manager -> runtime/devel -> names
    source: str
    verified: bool | None = None
    line: int | None = None


@dataclass(frozen=True)
class GpudirectPath:
    """A GPUDirect RDMA method (`gpudirect:`): what it requires of the host, as matchers, its rank
    (`preferred`, lower first), the NCCL that uses it."""
    id: str
    requires: tuple[tuple[str, Matcher], ...]
    source: str
    preferred: int = 99
    nccl: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class Project:
    """`project:`: the images' source repository and SPDX license expression (the OCI labels),
    as grammar.py checked them; None where the matrix says nothing."""
    source: str | None = None
    licenses: str | None = None

    @classmethod
    def of(cls, entry: dict | None) -> "Project":
        entry = entry or {}
        return cls(*(None if entry.get(k) is None else str(entry[k]) for k in ("source", "licenses")))


@dataclass(frozen=True)
class LibraryRelease:
    """One cuDNN or NCCL release the knowledge names: the sources that name it, the CUDA majors it
    is built for (None: not known), the platforms of its redistributables (None: not known) and
    whether NVIDIA publishes it as a redistributable only (a host's system copy, never a stack's
    own: no wheel brings it)."""

    sources: tuple[str, ...]
    cuda_majors: tuple[int, ...] | None = None
    platforms: tuple[str, ...] | None = None
    redist_only: bool = False


@dataclass(frozen=True)
class Knowledge:
    """Everything matrix.yaml says, validated and compiled; immutable (queries keep what they
    computed in the instance's own `_`-named caches, which are never pickled)."""

    path: str
    as_of: str
    sources: dict[str, Source]
    preference: tuple[str, ...]
    modes: tuple[Mode, ...]
    majors: dict[int, tuple[str, str]]          # major -> (floor driver, source)
    releases: dict[str, CudaRelease]
    branches: dict[int, Branch]
    gpus: dict[str, Gpu]
    architectures: dict[str, Architecture]
    variants: dict[tuple[str, str], Variant]     # (pytorch, cuda mm or none) -> Variant
    pytorch: dict[str, TorchRelease]
    ucx: dict[str, MpiRelease]
    openmpi: dict[str, MpiRelease]
    os: dict[str, OsEntry]
    gpudirect: tuple[GpudirectPath, ...]
    nccl_features: tuple[NcclFeature, ...]
    rules: tuple[Rule, ...]
    document: dict                              # matrix.yaml as parsed and checked: read only inside knowledge/
    rdma: dict[str, RdmaEntry] = field(default_factory=dict)   # id -> user-space RDMA alternative
    compat: dict[str, Compat] = field(default_factory=dict)   # CUDA major.minor -> cuda-compat
    platforms: dict[str, MatrixPlatform] = field(default_factory=dict)  # id -> entry, best first
    nccl_releases: tuple[str, ...] = ()     # every NCCL release the knowledge names
    cudnn_releases: tuple[str, ...] = ()    # every cuDNN release (wheel copies and system copies)
    # library (cudnn, nccl) -> version -> what names that release (wheels and redistributables):
    # the releases a host's system copy (`--system-cudnn`, `--system-nccl`) can be
    library_releases: dict[str, dict[str, LibraryRelease]] = field(default_factory=dict)
    tools: dict[str, Tool] = field(default_factory=dict)     # `tools:` by name
    project: Project = Project()
    families: tuple[Family, ...] = ()       # `images:`, in the file's order
    sha256: str | None = None               # of the bytes parsed (knowledge.load)

    def __getstate__(self):
        # the caches of queries are not kept, but for what every process needs first (admitted)
        return {name: value for name, value in self.__dict__.items()
                if not name.startswith("_") or name == "_admitted"}

    def admitted(self, comp: str, m: Matcher) -> frozenset[str]:
        """The values of stack component `comp` (over its whole domain, unverified ones too) that
        `m` admits. This depends on neither the host nor the options, so it is computed once per
        knowledge and matcher (matchers are compared by what they test), not once per compilation
        of the rules (a process compiles them for several hosts and rule sets: the image
        expansion's, hostfit's, the query's own), and kept with the knowledge (cache.py)."""
        cache = self.__dict__.setdefault("_admitted", {})
        hit = cache.get((comp, m))
        if hit is None:
            hit = cache[(comp, m)] = frozenset(v for v in self.domain(comp, True) if m(v))
        return hit

    def admit_all(self) -> None:
        """admitted() for every matcher of every rule on a stack component, computed ahead."""
        from .schema import STACK
        for r in self.rules:
            for comp, m in r.when + r.require + tuple(pair for alt in r.any_of for pair in alt):
                if comp in STACK:
                    self.admitted(comp, m)

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
        if component == "cudnn":
            vals = {v.cudnn for v in self.variants.values()
                    if (v.verified or allow_unverified) and v.cudnn != NONE}
            return sorted(vals, key=version_key, reverse=True) + [NONE]
        if component == "nccl":
            vals = {v.confirmed_nccl(allow_unverified) for v in self.variants.values()}
            vals = (vals - {None, NONE}) | set(self.nccl_releases)
            return sorted(vals, key=version_key, reverse=True) + [NONE]
        if component == "platform":
            return list(self.platforms) or [DEFAULT_PLATFORM]
        if component == "python":
            vals = {p for o in self.os.values() for p in o.python}
            return sorted(vals, key=version_key, reverse=True)
        if component == "os":
            return list(self.os)  # the file's order is the preference
        if component in ("ucx", "openmpi"):
            table = getattr(self, component)
            return sorted(table, key=version_key, reverse=True)
        raise KeyError(component)

    def gpu_by_name(self, text: str) -> Gpu | None:
        """A GPU by product name (case and space insensitive), as nvidia-smi prints it too
        ("NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-16GB", "NVIDIA GeForce RTX 4090": the longest
        known name whose words begin the given ones), or by sm_XY / compute capability."""
        key = text.replace(" ", "").lower()
        for g in self.gpus.values():
            if g.name.replace(" ", "").lower() == key:
                return g
        words = [w for w in text.lower().replace("-", " ").replace("_", " ").split()
                 if w not in ("nvidia", "tesla", "geforce")]
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
                       datacenter=False, source=arch.source)
        return None

    def branch_supported(self, branch: int, date: str) -> tuple[bool | None, str]:
        """Whether NVIDIA still supports a driver branch on `date`, with the reason."""
        b = self.branches.get(branch)
        if b is None:
            return None, f"branch R{branch} is not in the knowledge base"
        if b.eol is True:
            return False, f"R{branch} is end of life [{b.eol_source}]"
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
            return False, f"R{branch} reached end of life {eol} [{b.eol_source}]"
        return True, f"R{branch} ({b.type}) is supported until {eol} [{b.eol_source}]"
