"""Expand the `images:` section of matrix.yaml into concrete, resolved ImageSpecs.

Each family names fixed wishes (a PyTorch range, an OS list, ...); the expansion walks the PyTorch
releases and CUDA variants the knowledge has, asks the resolver for the best stack of each
combination (no host facts: every rule that does not need a host is checked), and keeps those that
resolve. What did not resolve is kept too, with the resolver's reason, for `imagebuild images --all`.

Ids, tags and labels are derived from the resolved versions only, so the same matrix always gives
the same images (README, "Tags").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..components import prefixes
from ..errors import KnowledgeError, UsageError
from ..platforms import PLATFORMS
from ..knowledge.families import Family
from ..knowledge.schema import BUILD_SWITCHES
from ..knowledge import Knowledge
from ..knowledge.model import MpiRelease, OsEntry, RdmaEntry
from .. import labels as L
from ..resolve.solver import Host, image_reading, resolve
from ..versions import NONE, major_minor, parse_version
from .fingerprint import _NotCached, _lock_folder, file_sha256, matrix_sha256  # noqa: F401 - matrix_sha256: re-exported
from .project import (LICENSES_LABEL, SOURCE_LABEL, created_rfc3339,  # noqa: F401 - re-exported
                      git_source_url, project_licenses, project_source)
from .naming import _image_id, _tag
from .combos import _family_plan, combinations  # noqa: F401 - combinations: re-exported

# The wheel-lock module (.wheellock) is imported where it is used: a `resolve` that finds its
# combinations' images cached (expandcache.Declared) never needs it.

# The `images:` section is checked in full when the matrix is loaded (knowledge/recipe_inputs.py,
# gate 3) and read as typed values (knowledge/families.py): a family here is a Family.
# What may reach a shell line, a tag or a path: a derived id and tag are checked before any
# template sees them (fullmatch: a `$` anchor would accept a trailing newline).
SAFE_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")


def compiles(stack: dict, ucx: MpiRelease) -> bool:
    """Whether an image of this stack compiles UCX and Open MPI from source (a CUDA stack whose
    UCX release is not the OS's package)."""
    return stack["cuda"] != NONE and ucx.install == "source"


def nccl_bench(stack: dict, ucx: MpiRelease, cuda_from: str) -> bool:
    """Whether an image of this stack compiles imagebuild's own NCCL benchmark (the `nccl.bench`
    smoke checks, imagebuild/smoke/bench/nccl_bw.c) in a build stage: a communication image (NCCL,
    no PyTorch) whose CUDA and NCCL come from NVIDIA's wheels and which compiles nothing from
    upstream sources, so has no nccl-tests (the images built here from the registries alone)."""
    return (cuda_from == "wheels" and stack["nccl"] != NONE and stack["pytorch"] == NONE
            and not compiles(stack, ucx))


def toolkit_wheels(stack: dict, ucx: MpiRelease, cuda_from: str) -> bool:
    """CUDA from NVIDIA's wheels and something compiled against it (UCX, Open MPI and nccl-tests, or
    imagebuild's NCCL benchmark): the image's lock holds the cuda-toolkit wheels (nvcc, headers)
    besides the run-time ones, which its build stage installs whole."""
    return cuda_from == "wheels" and (compiles(stack, ucx) or nccl_bench(stack, ucx, cuda_from))


@dataclass(frozen=True)
class ImageSpec:
    id: str
    family: str
    flavor: str
    description: str
    stack: dict                 # component -> version ("none" when absent)
    os: OsEntry                 # the OS entry of the knowledge
    variant_tag: str            # cu124 / cpu / "" (no PyTorch)
    min_driver: str | None
    tag: str
    tags: tuple[str, ...]
    wheels: str | None          # "host": PyTorch wheels come from the host's pip
    ucx: MpiRelease
    openmpi: MpiRelease
    depends_on: tuple[str, ...] = ()
    as_of: str = ""
    wheel_lock: str | None = None   # locks/wheels/<set>.txt (relative to matrix.yaml), if any
    rdma: RdmaEntry | None = None   # the knowledge's rdma entry (DOCA-OFED); None: rdma-core
    extra: dict = field(default_factory=dict)
    source: str | None = None       # the project's repository (matrix.yaml project.source), if set
    cuda_from: str = "repository"   # "wheels": CUDA is NVIDIA's wheels (torch's closure, cuda-toolkit)
    licenses: str | None = None     # an SPDX expression (matrix.yaml project.licenses), if set
    sources: str = "release"        # the UCX/Open MPI tarballs compiled: release assets or git tag archives
    build: dict = field(default_factory=dict)   # build choices (recipe_inputs.BUILD_KEYS), defaults filled in
    # a devel image is built FROM its family's runtime image of the same stack (as NVIDIA's CUDA
    # images are): that image's local_ref; its id is depends_on[0]. None for every other image.
    from_image: str | None = None
    # the OCI platform it is built for (matrix.yaml platforms: oci), e.g. linux/arm64
    oci_platform: str = ""

    @property
    def name(self) -> str:
        """The id without its platform's suffix (platforms.Platform.suffix: -arm64), where it has
        one, else "": every platform's image of one stack shares it and its tag, and is published
        under it as one OCI image index."""
        target = PLATFORMS.get(self.oci_platform)
        suffix = target.suffix if target else ""
        return self.id[:-len(suffix)] if suffix and self.id.endswith(suffix) else ""

    @property
    def base_name(self) -> str:
        return self.name or self.id

    @property
    def platform(self) -> str:
        """The matrix's platform id (x86_64, aarch64)."""
        return self.stack["platform"]

    @property
    def local_ref(self) -> str:
        return f"imagebuild/{self.id}:{self.tag}"

    @property
    def cuda_mm(self) -> str | None:
        c = self.stack["cuda"]
        return None if c == NONE else major_minor(c)

    @property
    def labels(self) -> dict[str, str]:
        labels = {
            L.IMAGE_ID: self.id,
            L.FLAVOR: self.flavor,
            L.MIN_DRIVER: self.min_driver or "none",
            L.TITLE: self.id,
            L.VERSION: self.tag,
            L.DESCRIPTION: self.description,
            # RFC 3339, as the OCI annotation asks: the source date (the matrix's as_of at 00:00 UTC)
            L.CREATED: created_rfc3339(self.as_of),
            L.RDMA: self.rdma_label,
        }
        if self.source:   # a fact from the matrix, never a made-up default (see project_source)
            labels[SOURCE_LABEL] = self.source
        if self.cuda_from != "repository" and self.stack["cuda"] != NONE:
            # absent: CUDA from NVIDIA's repository, as every recipe installed it before
            labels[CUDA_PROVIDER_LABEL] = self.cuda_from
        if self.licenses:  # a fact only the matrix states; never guessed from the image's contents
            labels[LICENSES_LABEL] = self.licenses
        if self.compiles:
            # what was compiled, and how: the tarball form and the family's build choices
            labels[L.SOURCES] = self.sources
            labels[L.BUILD] = self.build_label
        if self.stack["openmpi"] != NONE or self.stack["nccl"] != NONE:
            # what the image's communication stack can do: RDMA transports, CUDA-aware MPI,
            # imagebuild's NCCL benchmark (image.json's features, which the smoke suite checks)
            labels[L.FEATURES] = self.features_label
        for comp in ("os", "platform", "python", "cuda", "cudnn", "nccl", "ucx", "openmpi",
                     "pytorch"):
            labels[L.stack(comp)] = self.stack[comp]
        return dict(sorted(labels.items()))

    @property
    def compiles(self) -> bool:
        """Whether the recipe compiles UCX and Open MPI from source (CUDA images)."""
        return compiles(self.stack, self.ucx)

    @property
    def toolkit_wheels(self) -> bool:
        """CUDA from NVIDIA's wheels and something compiled against it: the devel stage installs
        the cuda-toolkit wheels (nvcc, headers) besides the run-time ones."""
        return toolkit_wheels(self.stack, self.ucx, self.cuda_from)

    @property
    def nccl_bench(self) -> bool:
        """imagebuild's NCCL benchmark is compiled into the image (nccl_bench())."""
        return nccl_bench(self.stack, self.ucx, self.cuda_from)

    @property
    def build_choices(self) -> dict:
        return {**BUILD_SWITCHES, **self.build}

    @property
    def build_label(self) -> str:
        """The build choices in one stable line: `gda=off,fortran=on,...,cuda_arch=8.0+9.0`."""
        b = self.build_choices
        parts = [f"{k}={'on' if b[k] else 'off'}" for k in sorted(BUILD_SWITCHES)]
        arch = b.get("cuda_arch")
        parts.append("cuda_arch=" + ("+".join(arch) if arch else "default"))
        return ",".join(parts)

    @property
    def rdma_label(self) -> str:
        return f"{self.rdma.id}-{self.rdma.version}" if self.rdma else "rdma-core"

    @property
    def features(self) -> dict[str, bool]:
        """What the smoke suite may require of the image: UCX built from source here has verbs
        and rdmacm (and CUDA in CUDA images); an OS package of UCX has the transports its release
        entry records (`transports:`, with the source that shows them), nothing more."""
        built = self.ucx.install == "source"
        os_tls = set(self.ucx.transports or ())
        cuda = built and self.stack["cuda"] != NONE
        # render's UCX configure line: --with-verbs --with-rdmacm, and in CUDA images
        # --with-cuda --with-gdrcopy; Open MPI's: --with-cuda in CUDA images. The OS's packages
        # (Debian's UCX and Open MPI) are built without CUDA: no CUDA support is promised of them.
        mpi_cuda = self.openmpi.install == "source" and self.stack["cuda"] != NONE
        return {"gdrcopy": cuda, "mpi_cuda": mpi_cuda, "nccl_bench": self.nccl_bench,
                "rdmacm": built or "rdmacm" in os_tls, "ucx_cuda": cuda,
                "verbs": built or "verbs" in os_tls}

    @property
    def features_label(self) -> str:
        """The features in one stable line for the `io.imagebuild.features` label:
        `gdrcopy=off,mpi_cuda=off,nccl_bench=on,...`."""
        return ",".join(f"{k}={'on' if v else 'off'}" for k, v in sorted(self.features.items()))

    @property
    def image_json(self) -> dict:
        doc = {"id": self.id, "flavor": self.flavor, "stack": dict(sorted(self.stack.items())),
               "features": self.features, "rdma": self.rdma_label,
               "min_driver": self.min_driver or "none", "tag": self.tag}
        if self.stack["cuda"] != NONE:
            doc["cuda_provider"] = self.cuda_from
        if self.compiles:
            doc["built"] = prefixes(self.build_choices)   # what the smoke suite's libraries check walks
            doc["sources"] = self.sources
            doc["build"] = {k: (list(v) if isinstance(v, tuple) else v)
                            for k, v in sorted(self.build_choices.items())}
        return doc


@dataclass(frozen=True)
class Skipped:
    family: str
    combination: str
    wishes: tuple
    why: str | None = None      # set when the stack resolved but something else is missing
    cuda_from: str = "repository"
    no_lock: bool = False       # resolved, but its wheel lock is not committed
    no_match: bool = False      # the whole family: its ranges match no release of the matrix

    def reason(self, k: Knowledge) -> str:
        """Why this combination has no image (the resolver's minimal chain is computed on demand:
        it is costly)."""
        if self.why:
            return self.why
        return "; ".join(resolve(k, Host(), dict(self.wishes), **image_reading(
            k, self.cuda_from, dict(self.wishes))).explanation)


CUDA_PROVIDER_LABEL = L.CUDA_PROVIDER


def _one_line(text: str) -> str:
    """A note (prose, which may span lines) as one line of a listing."""
    return " ".join(str(text).split())


def _family_error(k: Knowledge, f: Family, msg: str):
    """A family of `images:` that cannot be expanded: KnowledgeError naming the family's line."""
    raise KnowledgeError(f"images: {msg}", file=k.path, line=f.line)


def _rdma_skip(rdma: RdmaEntry | None, os_id: str, allow_unverified: bool) -> str | None:
    """Why the family's RDMA user space rules out an image on `os_id` (no repository for it, or
    an unverified key without --allow-unverified); None when it does not."""
    if rdma and os_id not in rdma.os:
        return (f"{rdma.name} {rdma.version} has no repository for {os_id} "
                f"(matrix.yaml line {rdma.line})")
    if rdma and not rdma.verified and not allow_unverified:
        return (f"{rdma.name} {rdma.version} is unverified (matrix.yaml line "
                f"{rdma.line}: {_one_line(rdma.key.note or 'verified: false')}); "
                "confirm it and set verified: true, or pass --allow-unverified")
    return None


def _check_arch(k: Knowledge, f: Family, cuda: str) -> None:
    """`build.cuda_arch` names architectures this CUDA release compiles for: one added after it
    (first_cuda) or dropped before it (last_cuda) stops nvcc inside the build, so it is refused
    here, naming the family's line."""
    if cuda == NONE:
        return
    have = parse_version(major_minor(cuda))
    for cc in f.build.get("cuda_arch", ()):
        arch = k.architectures.get(cc)      # gate 3 checked each is known
        if arch is None:
            continue
        if arch.first_cuda and have < parse_version(arch.first_cuda):
            _family_error(k, f, f"{f.name}: build.cuda_arch {cc} ({arch.name}) needs CUDA >= "
                          f"{arch.first_cuda} [{arch.source}], and this image's CUDA is {cuda}")
        if arch.last_cuda and have > parse_version(arch.last_cuda):
            _family_error(k, f, f"{f.name}: build.cuda_arch {cc} ({arch.name}) was dropped after "
                          f"CUDA {arch.last_cuda} [{arch.source}], and this image's CUDA is {cuda}")


class _Expansion:
    """The images of a matrix as its families are expanded one by one: the specs so far (each id
    once), and the combinations that gave none."""

    def __init__(self, k: Knowledge, require_locks: bool, allow_unverified: bool,
                 lock_digests: dict[str, str | None] | None = None):
        self.k = k
        self.require_locks = require_locks
        self.allow_unverified = allow_unverified
        self.specs: list[ImageSpec] = []
        self.skipped: list[Skipped] = []
        self.seen: dict[str, int] = {}
        # for expandcache.Declared: the wheel locks read (path -> sha256, None: absent), each hashed
        # before it is read; None when not asked for, and once a lock cannot be hashed
        self.lock_digests = lock_digests

    def family(self, f: Family) -> None:
        combos = _family_plan(self.k, f)
        if not combos:
            # a family whose ranges match no release of the matrix declares nothing: said, not
            # dropped without a word
            self.skipped.append(Skipped(f.name, "every combination", (), no_match=True, why=(
                "its versions match no release the matrix knows (check its pytorch/cuda ranges "
                "against `imagebuild knowledge show pytorch`)")))
        for c in combos:
            self.combination(f, c.combo, c.wishes, c.vtag, c.os_id, c.platform)

    def combination(self, f: Family, combo: str, wishes: dict, vtag: str, os_id: str,
                    platform: str | None = None) -> None:
        """One combination of the family on one OS: resolved to a stack and, when it resolves and
        its wheel lock is there, one image per flavor; otherwise one Skipped saying why."""
        self.add(f, self.images_of(f, combo, wishes, vtag, os_id, platform)[0])

    def add(self, f: Family, specs: list[ImageSpec]) -> None:
        """A combination's images, each id once: a later one with an id already taken is the same
        stack reached by another wish, and is dropped (it must read CUDA the same way)."""
        for spec in specs:
            if spec.id in self.seen:
                if self.specs[self.seen[spec.id]].cuda_from != spec.cuda_from:
                    _family_error(self.k, f, f"{f.name}: image {spec.id} is declared with CUDA from "
                                  f"the {self.specs[self.seen[spec.id]].cuda_from} and from the "
                                  f"{spec.cuda_from}")
                continue
            self.seen[spec.id] = len(self.specs)
            self.specs.append(spec)

    def images_of(self, f: Family, combo: str, wishes: dict, vtag: str, os_id: str,
                  platform: str | None = None) -> tuple[list[ImageSpec], str | None]:
        """combination()'s images before each id is taken once, and the wheel lock it read (its
        path under the matrix's folder), if any; a combination that gives none adds its Skipped."""
        from .wheellock import read_lock, wheel_set
        k, rdma, cuda_from = self.k, self.k.rdma.get(f.rdma), f.cuda_from
        w = dict(wishes, os=os_id)
        if platform is not None:          # the family lists its platforms: one image each
            w["platform"] = platform
        for comp in ("ucx", "openmpi", "python"):
            if f.pin(comp) is not None:
                w[comp] = "==" + f.pin(comp)
        label = f"{combo} on {os_id}" + (f" with {rdma.name} {rdma.version}"
                                          if rdma else "")
        if cuda_from != "repository":
            label += f", CUDA from the {cuda_from}"
        if platform is not None:
            label += f", for {platform}"
        why = _rdma_skip(rdma, os_id, self.allow_unverified)
        if why:
            self.skipped.append(Skipped(f.name, label, tuple(sorted(w.items())), why=why))
            return [], None
        try:
            # the recipes install CUDA from the repository, or take torch's wheels' own
            res = resolve(k, Host(), w, allow_unverified=self.allow_unverified, explain=False,
                          **image_reading(k, cuda_from, w))
        except UsageError as exc:
            _family_error(k, f, f"{f.name}: {exc}")
        if not res.ok:
            self.skipped.append(Skipped(f.name, label, tuple(sorted(w.items())),
                                        cuda_from=cuda_from))
            return [], None
        stack = {c: res.stack[c] for c in ("os", "platform", "python", "cuda", "cudnn",
                                          "nccl", "ucx", "openmpi", "pytorch")}
        _check_arch(k, f, stack["cuda"])
        ws = wheel_set(k, stack, k.os[os_id], f.wheels,
                       toolkit=toolkit_wheels(stack, k.ucx[stack["ucx"]], cuda_from))
        lock = None
        if ws is not None and self.require_locks:
            lock = ws.path.as_posix()
            self.note_lock(ws.path)
            if read_lock(k, ws) is None:
                self.skipped.append(Skipped(f.name, label, tuple(sorted(w.items())),
                                            cuda_from=cuda_from, no_lock=True, why=(
                    f"no wheel lock {ws.path} for {' '.join(ws.requirements)} "
                    f"(`imagebuild wheels lock` writes it; it needs "
                    f"{'the host pip' if ws.host else ws.index or 'the configured package index'})")))
                return [], lock
        return self.flavors(f, stack, vtag, os_id, res.min_driver, ws), lock

    def note_lock(self, rel: Path) -> None:
        """Hash a wheel lock before read_lock reads it, for expandcache's records (before, not
        after: a lock changed in between is then filed under its older bytes, and the next
        process, seeing other bytes, computes again instead of trusting a stale answer)."""
        if self.lock_digests is None or rel.as_posix() in self.lock_digests:
            return
        try:
            self.lock_digests[rel.as_posix()] = file_sha256(_lock_folder(self.k) / rel)
        except _NotCached:
            self.lock_digests = None     # read_lock says what is wrong with it, if anything

    def flavors(self, f: Family, stack: dict, vtag: str, os_id: str, min_driver,
                ws) -> list[ImageSpec]:
        """One ImageSpec per flavor of a resolved stack, with its id, tags and everything the
        recipe reads."""
        k, rdma = self.k, self.k.rdma.get(f.rdma)
        entry = k.platforms.get(stack["platform"])
        oci = entry.oci if entry else ""
        # each platform's image has its own id (-arm64; x86_64's as before platforms were
        # listed) and the same tag, so that one published tag holds every platform
        suffix = PLATFORMS[oci].suffix if oci in PLATFORMS else ""
        out = []
        for flavor in f.flavors:
            iid = _image_id(f.name, stack, vtag, os_id, flavor, rdma) + suffix
            tag = _tag(stack, flavor, os_id, rdma)
            if not SAFE_ID.fullmatch(iid) or not SAFE_ID.fullmatch(tag):
                _family_error(k, f, f"{f.name}: derived id {iid!r} or tag {tag!r} is not safe")
            base = {}
            if flavor == "devel":   # FROM the runtime image of the same stack (gate 3: listed)
                rid = _image_id(f.name, stack, vtag, os_id, "runtime", rdma) + suffix
                base = {"depends_on": (rid,),
                        "from_image": f"imagebuild/{rid}:{_tag(stack, 'runtime', os_id, rdma)}"}
            out.append(ImageSpec(
                id=iid, family=f.name, flavor=flavor,
                description=f.description, stack=stack,
                os=k.os[os_id], variant_tag=vtag, min_driver=min_driver, tag=tag,
                tags=(tag, f"{tag}-{k.as_of.replace('-', '')}"),
                wheels=f.wheels, ucx=k.ucx[stack["ucx"]], openmpi=k.openmpi[stack["openmpi"]],
                as_of=k.as_of, wheel_lock=str(ws.path) if ws else None, rdma=rdma,
                source=project_source(k), cuda_from=f.cuda_from, licenses=project_licenses(k),
                sources=f.sources, build=dict(f.build), oci_platform=oci, **base))
        return out


def skipped_summary(k: Knowledge, skipped: list[Skipped]) -> list[str]:
    """The declared combinations that gave no image, told in a few lines: how many, grouped by
    the reasons known without the resolver's costly chain (a missing wheel lock, a family that
    matches nothing), and where the whole list is (`imagebuild images --all`)."""
    from .wheellock import LOCK_DIR, lock_root
    if not skipped:
        return []
    no_lock = [x for x in skipped if x.no_lock]
    out = [f"{len(skipped)} declared combination(s) give no image (`imagebuild images --all` "
           "says why for each)"]
    if no_lock:
        lock_dir = lock_root(k) / LOCK_DIR
        if lock_dir.is_dir() and any(lock_dir.iterdir()):
            out.append(f"{len(no_lock)} of them lack their wheel lock under {lock_dir} "
                       "(`imagebuild wheels lock` writes them)")
        else:
            out.append(f"{len(no_lock)} of them lack their wheel lock: there is no {lock_dir}; a "
                       "matrix copied without its locks/ folder? (`imagebuild knowledge copy DIR` "
                       "copies both)")
    line = families_matching_nothing(skipped)
    return out + ([line] if line else [])


def families_matching_nothing(skipped: list[Skipped]) -> str | None:
    """One line naming the families that gave no combination at all (a mistake in their
    ranges), or None."""
    empty = sorted({x.family for x in skipped if x.no_match})
    if not empty:
        return None
    return ("famil" + ("ies" if len(empty) > 1 else "y") + f" {', '.join(empty)} match no release "
            "the matrix knows")


def expand(k: Knowledge, *, require_locks: bool = True,
           allow_unverified: bool = False) -> tuple[list[ImageSpec], list[Skipped]]:
    """Every image the matrix declares, in a stable order, and the combinations that did not fit.
    An image that installs wheels needs its wheel lock (locks/wheels/); without one it is listed
    as skipped, unless `require_locks` is false (what `imagebuild wheels lock` asks for). Facts
    marked `verified: false` (an unconfirmed PyTorch build, DOCA-OFED's key) are relied on only
    with `allow_unverified`."""
    out = _expansion(k, require_locks, allow_unverified)
    return out.specs, out.skipped


def _expansion(k: Knowledge, require_locks: bool, allow_unverified: bool,
               lock_digests: dict | None = None) -> _Expansion:
    out = _Expansion(k, require_locks, allow_unverified, lock_digests)
    for fam in k.families:
        out.family(fam)
    return out


def with_bases(specs: list[ImageSpec], every: dict[str, ImageSpec]) -> list[ImageSpec]:
    """``specs`` with the matrix images they are built FROM (``depends_on``: a devel image's
    runtime) before them, each once, in dependency order: the images `build` builds for them, so
    the ones `build --locked` checks and `lock` locks with them. A dependency ``every`` does not
    hold is left out (it is no image of this matrix)."""
    out: dict[str, ImageSpec] = {}

    def add(spec: ImageSpec) -> None:
        if spec.id in out:
            return
        for dep in spec.depends_on:       # a runtime: expand() makes no cycle
            if dep in every:
                add(every[dep])
        out[spec.id] = spec

    for spec in specs:
        add(spec)
    return list(out.values())


def for_platform(specs: dict[str, ImageSpec], chosen: list[ImageSpec],
                 oci_platform: str) -> list[ImageSpec]:
    """Each chosen image's twin for ``oci_platform`` (the image of the same name and tag built for
    that platform); one line naming the first image that has none."""
    twins = {(s.base_name, s.tag, s.oci_platform): s for s in specs.values()}
    out = []
    for spec in chosen:
        twin = twins.get((spec.base_name, spec.tag, oci_platform))
        if twin is None:
            have = sorted(s.oci_platform for s in specs.values()
                          if (s.base_name, s.tag) == (spec.base_name, spec.tag))
            raise UsageError(f"{spec.id} is not built for {oci_platform} (matrix.yaml lists it for "
                             f"{', '.join(have) or 'no platform'}: a family's platforms: says which)",
                             argument="--platform")
        if twin not in out:
            out.append(twin)
    return out


def select(specs: dict[str, ImageSpec], names: list[str]) -> list[ImageSpec]:
    """Images by id (or family name); unknown names are one clear error."""
    if not names:
        return list(specs.values())
    out = []
    for n in names:
        if n in specs:
            out.append(specs[n])
            continue
        fam = [s for s in specs.values() if s.family == n]
        if not fam:
            close = ", ".join(sorted(specs)[:5])
            raise UsageError(f"unknown image {n!r} (e.g. {close}; `imagebuild images` lists all)",
                             argument=n)
        out.extend(fam)
    return out
