"""Expand the `images:` section of matrix.yaml into concrete, resolved ImageSpecs.

Each family names fixed wishes (a PyTorch range, an OS list, ...); the expansion walks the PyTorch
releases and CUDA variants the knowledge has, asks the resolver for the best stack of each
combination (no host facts: every rule that does not need a host is checked), and keeps those that
resolve. What did not resolve is kept too, with the resolver's reason, for `imagebuild images --all`.

Ids, tags and labels are derived from the resolved versions only, so the same matrix always gives
the same images (README, "Tags").
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from .. import __version__
from ..errors import KnowledgeError, UsageError
from ..knowledge.grammar import BUILD_SWITCHES, CUDA_FROM, FAMILY_KEYS, FLAVORS, VARIANT_MODES
from ..knowledge.grammar import check as grammar_check
from ..knowledge import Knowledge, load, version_matcher
from ..resolve.solver import Host, image_reading, resolve
from ..sourcedate import rfc3339, source_epoch
from ..versions import NONE, major_minor, parse_version

# The wheel-lock module (.wheellock) is imported where it is used: it brings the index-sync
# machinery with it, which a `resolve` that finds its expansion cached (expand_cached) never needs.

# FLAVORS, VARIANT_MODES (which CUDA builds of each PyTorch release a family takes: every one, the
# one PyPI serves by default, or that one plus the newest CUDA build) and the family keys are
# defined in grammar.py, which validates the whole `images:` section when the matrix is loaded.
_FAMILY_KEYS = set(FAMILY_KEYS)
# What may reach a shell line, a tag or a path: checked again before any template sees it
# (fullmatch: a `$` anchor would accept a trailing newline).
SAFE_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")
SAFE_VERSION = re.compile(r"[0-9]+(\.[0-9]+){0,4}")


def compiles(stack: dict, ucx: dict) -> bool:
    """Whether an image of this stack compiles UCX and Open MPI from source (a CUDA stack whose
    UCX release is not the OS's package)."""
    return stack["cuda"] != NONE and ucx.get("install", "source") == "source"


@dataclass(frozen=True)
class ImageSpec:
    id: str
    family: str
    flavor: str
    description: str
    stack: dict                 # component -> version ("none" when absent)
    os: dict                    # the OS entry of the knowledge
    variant_tag: str            # cu124 / cpu / "" (no PyTorch)
    min_driver: str | None
    tag: str
    tags: tuple[str, ...]
    wheels: str | None          # "host": PyTorch wheels come from the host's pip
    ucx: dict
    openmpi: dict
    depends_on: tuple[str, ...] = ()
    as_of: str = ""
    wheel_lock: str | None = None   # locks/wheels/<set>.txt (relative to matrix.yaml), if any
    rdma: dict | None = None        # the knowledge's rdma entry (DOCA-OFED); None: rdma-core
    extra: dict = field(default_factory=dict)
    source: str | None = None       # the project's repository (matrix.yaml project.source), if set
    cuda_from: str = "repository"   # "wheels": CUDA is NVIDIA's wheels (torch's closure, cuda-toolkit)
    licenses: str | None = None     # an SPDX expression (matrix.yaml project.licenses), if set
    sources: str = "release"        # the UCX/Open MPI tarballs compiled: release assets or git tag archives
    build: dict = field(default_factory=dict)   # build choices (grammar.BUILD_KEYS), defaults filled in
    # a devel image is built FROM its family's runtime image of the same stack (as NVIDIA's CUDA
    # images are): that image's local_ref; its id is depends_on[0]. None for every other image.
    from_image: str | None = None

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
            "io.imagebuild.image-id": self.id,
            "io.imagebuild.flavor": self.flavor,
            "io.imagebuild.min-driver": self.min_driver or "none",
            "org.opencontainers.image.title": self.id,
            "org.opencontainers.image.version": self.tag,
            "org.opencontainers.image.description": self.description,
            # RFC 3339, as the OCI annotation asks: the source date (the matrix's as_of at 00:00 UTC)
            "org.opencontainers.image.created": created_rfc3339(self.as_of),
            "io.imagebuild.rdma": self.rdma_label,
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
            labels["io.imagebuild.sources"] = self.sources
            labels["io.imagebuild.build"] = self.build_label
        for comp in ("os", "platform", "python", "cuda", "cudnn", "nccl", "ucx", "openmpi",
                     "pytorch"):
            labels[f"io.imagebuild.stack.{comp}"] = self.stack[comp]
        return dict(sorted(labels.items()))

    @property
    def compiles(self) -> bool:
        """Whether the recipe compiles UCX and Open MPI from source (CUDA images)."""
        return compiles(self.stack, self.ucx)

    @property
    def toolkit_wheels(self) -> bool:
        """CUDA from NVIDIA's wheels and something compiled against it: the devel stage installs
        the cuda-toolkit wheels (nvcc, headers) besides the run-time ones."""
        return self.cuda_from == "wheels" and self.compiles

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
        return f"{self.rdma['id']}-{self.rdma['version']}" if self.rdma else "rdma-core"

    @property
    def features(self) -> dict[str, bool]:
        """What the smoke suite may require of the image: UCX built from source here has verbs
        and rdmacm (and CUDA in CUDA images); Debian's UCX is taken as it comes."""
        built = self.ucx.get("install", "source") == "source"
        cuda = built and self.stack["cuda"] != NONE
        # render's UCX configure line: --with-verbs --with-rdmacm, and in CUDA images
        # --with-cuda --with-gdrcopy; Open MPI's: --with-cuda in CUDA images. The OS's packages
        # (Debian's UCX and Open MPI) are built without CUDA: nothing is promised of them.
        mpi_cuda = self.openmpi.get("install", "source") == "source" and self.stack["cuda"] != NONE
        return {"gdrcopy": cuda, "mpi_cuda": mpi_cuda, "rdmacm": built, "ucx_cuda": cuda,
                "verbs": built}

    @property
    def image_json(self) -> dict:
        doc = {"id": self.id, "flavor": self.flavor, "stack": dict(sorted(self.stack.items())),
               "features": self.features, "rdma": self.rdma_label,
               "min_driver": self.min_driver or "none", "tag": self.tag}
        if self.stack["cuda"] != NONE:
            doc["cuda_provider"] = self.cuda_from
        if self.compiles:
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


CUDA_PROVIDER_LABEL = "io.imagebuild.cuda.provider"


def _tag(stack: dict, flavor: str, os_id: str, rdma: dict | None = None) -> str:
    """2.4.1-cuda12.4-cudnn9-nccl2.21-ubuntu22.04-runtime; comms-cuda12.8-nccl2.27-ompi5.0.10-..."""
    parts = []
    if stack["pytorch"] != NONE:
        parts.append(stack["pytorch"])
    else:
        parts.append("comms")
    if stack["cuda"] != NONE:
        parts.append(f"cuda{major_minor(stack['cuda'])}")
    else:
        parts.append("cpu")
    if stack["cudnn"] != NONE:
        parts.append(f"cudnn{parse_version(stack['cudnn']).major}")
    if stack["nccl"] != NONE:
        parts.append(f"nccl{major_minor(stack['nccl'])}")
    parts.append(f"ompi{stack['openmpi']}")
    parts.append(f"ucx{stack['ucx']}")
    parts.append(os_id)
    if rdma:
        parts.append(_rdma_part(rdma))
    parts.append(flavor)
    return "-".join(parts)


def _rdma_part(rdma: dict) -> str:
    """doca3.2.0 for DOCA-OFED 3.2.0 (an id's first word, then the version)."""
    return f"{rdma['id'].split('-')[0]}{rdma['version']}"


def _image_id(family: str, stack: dict, variant_tag: str, os_id: str, flavor: str,
              rdma: dict | None = None) -> str:
    if family == "smoke-cpu" or (stack["pytorch"] == NONE and stack["cuda"] == NONE):
        return family
    parts = [family]
    if stack["pytorch"] != NONE:
        parts.append(stack["pytorch"])
    parts.append(variant_tag or f"cu{major_minor(stack['cuda']).replace('.', '')}")
    if stack["pytorch"] == NONE and stack["nccl"] != NONE:
        parts.append(f"nccl{stack['nccl']}")
    parts.append(os_id)
    if rdma:
        parts.append(_rdma_part(rdma))
    parts.append(flavor)
    return "-".join(parts)


def _one_line(text: str) -> str:
    """A note (prose, which may span lines) as one line of a listing."""
    return " ".join(str(text).split())


def _as_list(value) -> list[str]:
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


@dataclass(frozen=True)
class _Family:
    """One entry of `images:`, checked: what every image of the family shares."""
    raw: dict
    line: int | None
    path: str | Path      # the matrix (k.path)
    name: str
    flavors: list[str]
    oses: list[str]
    wheels: str | None
    rdma: dict | None
    cuda_from: str
    form: str               # sources: release | git
    build: dict

    def fail(self, msg: str):
        _family_error(self.path, self.line, msg)


def _family_error(path, line: int | None, msg: str):
    """A family of `images:` that cannot be expanded: KnowledgeError naming the family's line."""
    raise KnowledgeError(f"images: {msg}", file=path, line=line)


def _read_family(k: Knowledge, fam) -> _Family:
    """A family of `images:` checked against the matrix (its keys, flavors, OSes, versions,
    RDMA, CUDA provider, source form and build switches); KnowledgeError naming its line."""
    line = getattr(fam, "line", None)

    def fail(msg):
        _family_error(k.path, line, msg)

    if not isinstance(fam, dict):
        fail("each family is a mapping")
    unknown = set(fam) - _FAMILY_KEYS
    if unknown:
        fail(f"unknown key {sorted(unknown)[0]!r} (allowed: {', '.join(sorted(_FAMILY_KEYS))})")
    name = str(fam.get("family", ""))
    if not SAFE_ID.fullmatch(name):
        fail(f"family name {name!r} must match {SAFE_ID.pattern}")
    flavors = _as_list(fam.get("flavors"))
    if not flavors or any(f not in FLAVORS for f in flavors):
        fail(f"{name}: flavors must be some of {', '.join(FLAVORS)}")
    if "devel" in flavors and "runtime" not in flavors:
        fail(f"{name}: a devel image is built FROM the runtime image of its stack: list runtime "
             "in flavors too")
    oses = _as_list(fam.get("os"))
    for o in oses:
        if o not in k.os:
            fail(f"{name}: unknown os {o!r}")
    for comp in ("ucx", "openmpi", "cuda", "python"):
        for val in _as_list(fam.get(comp)):
            if val != NONE and not SAFE_VERSION.fullmatch(val):
                fail(f"{name}: {comp} {val!r} is not a version")
    wheels = fam.get("wheels")
    if wheels not in (None, "host"):
        fail(f"{name}: wheels must be 'host'")
    if fam.get("variants", "all") not in VARIANT_MODES:
        fail(f"{name}: variants must be one of {', '.join(VARIANT_MODES)}")
    rdma_id = str(fam.get("rdma", "rdma-core"))
    if rdma_id != "rdma-core" and rdma_id not in k.rdma:
        fail(f"{name}: unknown rdma {rdma_id!r} (rdma-core, or an id of the rdma: section: "
             f"{', '.join(sorted(k.rdma)) or 'none'})")
    cuda_from = str(fam.get("cuda_from", "repository"))
    if cuda_from not in CUDA_FROM:
        fail(f"{name}: cuda_from must be one of {', '.join(CUDA_FROM)}")
    # cuda_from: wheels' UCX/Open MPI choice (both from source against the cuda-toolkit
    # wheels, or both the OS's beside torch's closure) is checked when the matrix is loaded
    # (grammar._wheels_comms), naming the family's line
    form = str(fam.get("sources", "release"))
    build = dict(BUILD_SWITCHES)
    build.update({key: v for key, v in (fam.get("build") or {}).items() if key in BUILD_SWITCHES})
    arch = (fam.get("build") or {}).get("cuda_arch")
    if arch:
        build["cuda_arch"] = tuple(_as_list(arch))
    if form == "git":
        for comp in ("ucx", "openmpi"):
            entry = getattr(k, comp).get(str(fam.get(comp, "")))
            if entry is not None and entry.get("install", "source") == "source" \
                    and not entry.get("git_archive"):
                fail(f"{name}: sources: git compiles {comp} {entry.get('version')} from its git "
                     f"tag archive, which matrix.yaml's {comp} release does not record (git_archive:)")
    return _Family(raw=fam, line=line, path=k.path, name=name, flavors=flavors, oses=oses,
                   wheels=wheels, rdma=k.rdma.get(rdma_id), cuda_from=cuda_from, form=form,
                   build=build)


def _rdma_skip(rdma: dict | None, os_id: str, allow_unverified: bool) -> str | None:
    """Why the family's RDMA user space rules out an image on `os_id` (no repository for it, or
    an unverified key without --allow-unverified); None when it does not."""
    if rdma and os_id not in rdma["os"]:
        return (f"{rdma['name']} {rdma['version']} has no repository for {os_id} "
                f"(matrix.yaml line {rdma['line']})")
    if rdma and not rdma["verified"] and not allow_unverified:
        return (f"{rdma['name']} {rdma['version']} is unverified (matrix.yaml line "
                f"{rdma['line']}: {_one_line(rdma['key'].get('note') or 'verified: false')}); "
                "confirm it and set verified: true, or pass --allow-unverified")
    return None


def _check_arch(k: Knowledge, f: "_Family", cuda: str) -> None:
    """`build.cuda_arch` names architectures this CUDA release compiles for: one added after it
    (first_cuda) or dropped before it (last_cuda) stops nvcc inside the build, so it is refused
    here, naming the family's line."""
    if cuda == NONE:
        return
    have = parse_version(major_minor(cuda))
    for cc in f.build.get("cuda_arch", ()):
        arch = k.architectures.get(cc) or {}
        first, last = arch.get("first_cuda"), arch.get("last_cuda")
        if first and have < parse_version(first):
            f.fail(f"{f.name}: build.cuda_arch {cc} ({arch.get('name')}) needs CUDA >= {first} "
                   f"[{arch.get('source')}], and this image's CUDA is {cuda}")
        if last and have > parse_version(last):
            f.fail(f"{f.name}: build.cuda_arch {cc} ({arch.get('name')}) was dropped after CUDA "
                   f"{last} [{arch.get('source')}], and this image's CUDA is {cuda}")


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
        # for expand_cached: the wheel locks read (path -> sha256, None: absent), each hashed
        # before it is read; None when not asked for, and once a lock cannot be hashed
        self.lock_digests = lock_digests

    def family(self, f: _Family) -> None:
        combos = list(_combinations(self.k, f.raw))
        if not combos:
            # a family whose ranges match no release of the matrix declares nothing: said, not
            # dropped without a word
            self.skipped.append(Skipped(f.name, "every combination", (), no_match=True, why=(
                "its versions match no release the matrix knows (check its pytorch/cuda ranges "
                "against `imagebuild knowledge show pytorch`)")))
        for combo, wishes, vtag in combos:
            for os_id in f.oses:
                self.combination(f, combo, wishes, vtag, os_id)

    def combination(self, f: _Family, combo: str, wishes: dict, vtag: str, os_id: str) -> None:
        """One combination of the family on one OS: resolved to a stack and, when it resolves and
        its wheel lock is there, one image per flavor; otherwise one Skipped saying why."""
        from .wheellock import read_lock, wheel_set
        k, fam, rdma, cuda_from = self.k, f.raw, f.rdma, f.cuda_from
        w = dict(wishes, os=os_id)
        for comp in ("ucx", "openmpi", "python"):
            if fam.get(comp) is not None:
                w[comp] = "==" + str(fam[comp])
        label = f"{combo} on {os_id}" + (f" with {rdma['name']} {rdma['version']}"
                                          if rdma else "")
        if cuda_from != "repository":
            label += f", CUDA from the {cuda_from}"
        why = _rdma_skip(rdma, os_id, self.allow_unverified)
        if why:
            self.skipped.append(Skipped(f.name, label, tuple(sorted(w.items())), why=why))
            return
        try:
            # the recipes install CUDA from the repository, or take torch's wheels' own
            res = resolve(k, Host(), w, allow_unverified=self.allow_unverified, explain=False,
                          **image_reading(k, cuda_from, w))
        except UsageError as exc:
            f.fail(f"{f.name}: {exc}")
        if not res.ok:
            self.skipped.append(Skipped(f.name, label, tuple(sorted(w.items())),
                                        cuda_from=cuda_from))
            return
        stack = {c: res.stack[c] for c in ("os", "platform", "python", "cuda", "cudnn",
                                          "nccl", "ucx", "openmpi", "pytorch")}
        _check_arch(k, f, stack["cuda"])
        ws = wheel_set(k, stack, k.os[os_id], f.wheels, toolkit=(
            cuda_from == "wheels" and compiles(stack, k.ucx[stack["ucx"]])))
        if ws is not None and self.require_locks:
            self.note_lock(ws.path)
            if read_lock(k, ws) is None:
                self.skipped.append(Skipped(f.name, label, tuple(sorted(w.items())),
                                            cuda_from=cuda_from, no_lock=True, why=(
                    f"no wheel lock {ws.path} for {' '.join(ws.requirements)} "
                    f"(`imagebuild wheels lock` writes it; it needs "
                    f"{'the host pip' if ws.host else ws.index or 'the configured package index'})")))
                return
        self.flavors(f, stack, vtag, os_id, res.min_driver, ws)

    def note_lock(self, rel: Path) -> None:
        """Hash a wheel lock before read_lock reads it, for expand_cached's key (before, not
        after: a lock changed in between is then filed under its older bytes, and the next
        process, seeing other bytes, computes again instead of trusting a stale answer)."""
        if self.lock_digests is None or rel.as_posix() in self.lock_digests:
            return
        try:
            self.lock_digests[rel.as_posix()] = file_sha256(_lock_folder(self.k) / rel)
        except _NotCached:
            self.lock_digests = None     # read_lock says what is wrong with it, if anything

    def flavors(self, f: _Family, stack: dict, vtag: str, os_id: str, min_driver,
                ws) -> None:
        """One ImageSpec per flavor of a resolved stack (an id two wishes both resolved to is
        kept once), with its id, tags and everything the recipe reads."""
        k = self.k
        for flavor in f.flavors:
            iid = _image_id(f.name, stack, vtag, os_id, flavor, f.rdma)
            if iid in self.seen:
                if self.specs[self.seen[iid]].cuda_from != f.cuda_from:
                    f.fail(f"{f.name}: image {iid} is declared with CUDA from the "
                           f"{self.specs[self.seen[iid]].cuda_from} and from the {f.cuda_from}")
                continue  # two wishes resolved to the same stack
            tag = _tag(stack, flavor, os_id, f.rdma)
            if not SAFE_ID.fullmatch(iid) or not SAFE_ID.fullmatch(tag):
                f.fail(f"{f.name}: derived id {iid!r} or tag {tag!r} is not safe")
            self.seen[iid] = len(self.specs)
            base = {}
            if flavor == "devel":   # FROM the runtime image of the same stack (_read_family: listed)
                rid = _image_id(f.name, stack, vtag, os_id, "runtime", f.rdma)
                base = {"depends_on": (rid,),
                        "from_image": f"imagebuild/{rid}:{_tag(stack, 'runtime', os_id, f.rdma)}"}
            self.specs.append(ImageSpec(
                id=iid, family=f.name, flavor=flavor,
                description=str(f.raw.get("description", f.name)), stack=stack,
                os=k.os[os_id], variant_tag=vtag, min_driver=min_driver, tag=tag,
                tags=(tag, f"{tag}-{k.as_of.replace('-', '')}"),
                wheels=f.wheels, ucx=k.ucx[stack["ucx"]], openmpi=k.openmpi[stack["openmpi"]],
                as_of=k.as_of, wheel_lock=str(ws.path) if ws else None, rdma=f.rdma,
                source=project_source(k), cuda_from=f.cuda_from, licenses=project_licenses(k),
                sources=f.form, build=f.build, **base))


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
    families = k.raw.get("images")
    if families is None:
        return out
    if not isinstance(families, list):
        raise KnowledgeError("images: expected a list of families", file=k.path)
    for fam in families:
        out.family(_read_family(k, fam))
    return out


# -------------------------------------------------------------------------------------------------
# The expansion remembered across processes
#
# `imagebuild resolve` names the best declared image for the host, which needs the whole expansion
# (~45 resolver runs, the wheel locks read and checked): most of such a process's time, and the
# same answer every time until the matrix, a lock or imagebuild itself changes. expand_cached keeps
# it in one JSON file per matrix, options and imagebuild source under $XDG_CACHE_HOME/imagebuild/
# (default ~/.cache/imagebuild/). Nothing in it is trusted: a file that is not a small regular
# file, not JSON, of another schema or key, or that names anything the knowledge lacks is not
# used, and the expansion is computed again (silently: a cache never makes an answer fail). It is
# JSON, never pickle: reading it runs no code.

#: what a cache file holds; bumped whenever that changes, so an older file is never read as new
CACHE_SCHEMA = "imagebuild.declared-images/1"
CACHE_PREFIX = "declared-images-"
#: the largest cache file read (the project's matrix gives ~50 KB) and the most kept (one per
#: matrix, options and imagebuild source: the least recently written go first)
CACHE_MAX_BYTES = 8 << 20
CACHE_FILES = 8
#: the largest input (the matrix, a wheel lock) hashed for the key; a larger one is not cached
INPUT_MAX_BYTES = 64 << 20

# ImageSpec fields that hold an entry of a knowledge table: stored as the entry's key, read back
# as the knowledge's own entry (the key names the matrix, so it is the same one)
_TABLE_FIELDS = {"os": "os", "ucx": "ucx", "openmpi": "openmpi", "rdma": "rdma"}


class _NotCached(Exception):
    """An input the cache cannot vouch for: not a regular file, unreadable, too large, or a value
    the cache has no form for. The expansion is computed (and not stored)."""


def _read_regular(path, limit: int) -> bytes | None:
    """The bytes of a regular file of at most `limit` bytes, None when there is no such path;
    _NotCached for anything else (a FIFO, a device, a folder, a larger file: never blocks)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):    # not even opened (a FIFO's writer waits)
            raise _NotCached(str(path))
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError:
        raise _NotCached(str(path)) from None
    with open(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            raise _NotCached(str(path))
        data = f.read(limit + 1)
    if len(data) > limit:
        raise _NotCached(str(path))
    return data


def file_sha256(path) -> str | None:
    """sha256 of a regular file's bytes (at most INPUT_MAX_BYTES), None when it does not exist;
    _NotCached when it is anything else."""
    data = _read_regular(path, INPUT_MAX_BYTES)
    return None if data is None else hashlib.sha256(data).hexdigest()


def matrix_sha256(path) -> str | None:
    """The matrix's sha256 for expand_cached, taken BEFORE the matrix is loaded: a matrix saved
    in between is then filed under its older bytes, never the other way round. None when it
    cannot be taken (not a regular file: the loader says why), which only means no cache."""
    try:
        return file_sha256(path)
    except (_NotCached, OSError, ValueError):
        return None


def _lock_folder(k: Knowledge) -> Path:
    """Where the matrix's wheel locks are (wheellock.lock_root, without importing it)."""
    return Path(k.path).resolve().parent


@functools.lru_cache(maxsize=1)
def _source_fingerprint() -> str:
    """sha256 over the name, size, modification and change times of every module of imagebuild's
    own source, so that any change to the code that expands, resolves or reads locks (an edit, a
    checkout, a reinstall: each rewrites the files) gives another cache key. The times, not the
    bytes: reading and hashing the ~1.1 MB of source cost 5 to 25 ms a process, a tenth of the
    whole `resolve` target, where stat() costs 1 to 2 ms; and the change time (ctime) cannot be
    set back by a copy that keeps the modification time."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(folder, name)
            st = os.stat(path)
            rel = os.path.relpath(path, root)
            h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\n".encode())
    return h.hexdigest()


def _cache_key(k: Knowledge, matrix: str, allow_unverified: bool) -> dict:
    """Everything but the wheel locks that the expansion depends on (the locks' bytes are in the
    file, checked on every read: which locks are read is known only once expanded)."""
    libs = {name: str(getattr(sys.modules.get(name), "__version__", ""))
            for name in ("yaml", "packaging")}
    return {"imagebuild": __version__, "source": _source_fingerprint(),
            "python": f"{sys.version_info[0]}.{sys.version_info[1]}", **libs, "matrix": matrix,
            "folder": str(_lock_folder(k)), "allow_unverified": bool(allow_unverified),
            "require_locks": True}


def _cache_folder() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"   # XDG: a relative one is ignored
    return base / "imagebuild"


def expand_cached(k: Knowledge, matrix: str | None, *,
                  allow_unverified: bool = False) -> tuple[list[ImageSpec], list[Skipped]]:
    """expand(k, allow_unverified=...), remembered across processes (see above). `matrix`: the
    sha256 of the bytes `k` was loaded from, from matrix_sha256() taken before loading; None: no
    cache, the expansion is computed. The key is that digest, the options, imagebuild's version
    and source, the library versions that parse the matrix and versions, and the matrix's folder;
    the file also holds the sha256 of every wheel lock the expansion read (or that it was
    absent), compared with the locks' bytes on every read."""
    path = key = None
    if matrix is not None:
        try:
            key = _cache_key(k, matrix, allow_unverified)
            name = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
            path = _cache_folder() / f"{CACHE_PREFIX}{name}.json"
        except (_NotCached, OSError, RuntimeError, ValueError):   # RuntimeError: no home folder
            path = None
    if path is not None:
        hit = _cache_read(k, path, key)
        if hit is not None:
            return hit
    out = _expansion(k, True, allow_unverified, lock_digests={} if path is not None else None)
    if path is not None and out.lock_digests is not None:
        _cache_write(path, k, key, out)
    return out.specs, out.skipped


def _cache_read(k: Knowledge, path: Path, key: dict) -> tuple[list, list] | None:
    try:
        data = _read_regular(path, CACHE_MAX_BYTES)
        if data is None:
            return None
        doc = json.loads(data)
        if not (isinstance(doc, dict) and doc.get("schema") == CACHE_SCHEMA
                and doc.get("key") == key and isinstance(doc.get("locks"), dict)
                and isinstance(doc.get("specs"), list) and isinstance(doc.get("skipped"), list)):
            return None
        folder = _lock_folder(k)
        for rel, digest in doc["locks"].items():
            if not (isinstance(rel, str) and not os.path.isabs(rel) and ".." not in rel.split("/")
                    and (digest is None or isinstance(digest, str))):
                return None
            if file_sha256(folder / rel) != digest:
                return None                       # a lock was written, changed or removed
        return [_spec_from(k, rec) for rec in doc["specs"]], [_skipped_from(rec) for rec in doc["skipped"]]
    except (_NotCached, OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None     # (RecursionError: JSON nested deeper than the parser goes)


def _cache_write(path: Path, k: Knowledge, key: dict, out: _Expansion) -> None:
    """Best effort, atomic (a temporary file renamed over the old one: a reader sees the whole
    old file or the whole new one); the least recently written beyond CACHE_FILES are removed."""
    from ..atomic import atomic_file
    try:
        doc = {"schema": CACHE_SCHEMA, "key": key, "locks": out.lock_digests,
               "specs": [_spec_record(k, spec) for spec in out.specs],
               "skipped": [_skipped_record(x) for x in out.skipped]}
        text = json.dumps(doc, separators=(",", ":"))
        with atomic_file(path, "w", parents=True) as f:
            f.write(text)
        mine = sorted(path.parent.glob(f"{CACHE_PREFIX}*.json"), key=lambda p: p.stat().st_mtime)
        for old in mine[:-CACHE_FILES]:
            old.unlink(missing_ok=True)
    except (_NotCached, OSError, ValueError, TypeError):
        pass


def _spec_record(k: Knowledge, spec: ImageSpec) -> dict:
    rec = {}
    for f in dataclasses.fields(ImageSpec):
        value = getattr(spec, f.name)
        if f.name in _TABLE_FIELDS:
            value = None if value is None else _table_key(getattr(k, _TABLE_FIELDS[f.name]), value)
        elif isinstance(value, tuple):
            value = list(value)
        elif f.name == "build":
            value = {n: list(v) if isinstance(v, tuple) else v for n, v in value.items()}
        rec[f.name] = value
    _spec_from(k, rec)          # what could not be read back is not written
    return rec


def _table_key(table: dict, entry: dict) -> str:
    for key, value in table.items():
        if value is entry:
            return key
    raise _NotCached("an entry that is not the knowledge's own")


def _strs(value, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(what)
    return tuple(value)


def _spec_from(k: Knowledge, rec) -> ImageSpec:
    """An ImageSpec from its record, every field checked for its type (ValueError otherwise)."""
    fields = dataclasses.fields(ImageSpec)
    if not isinstance(rec, dict) or set(rec) != {f.name for f in fields}:
        raise ValueError("not an image record")
    kw = {}
    for f in fields:
        value = rec[f.name]
        if f.name in _TABLE_FIELDS:
            table = getattr(k, _TABLE_FIELDS[f.name])
            if value is None and f.name == "rdma":
                kw[f.name] = None
                continue
            if not isinstance(value, str) or value not in table:
                raise ValueError(f.name)
            value = table[value]
        elif f.name == "stack":
            if not isinstance(value, dict) or not all(isinstance(c, str) and isinstance(v, str)
                                                      for c, v in value.items()):
                raise ValueError(f.name)
        elif f.name == "build":
            if not isinstance(value, dict) or not all(
                    isinstance(n, str) and isinstance(v, (bool, str, list)) for n, v in value.items()):
                raise ValueError(f.name)
            value = {n: _strs(v, n) if isinstance(v, list) else v for n, v in value.items()}
        elif f.name == "extra":
            if value != {}:                          # expand() sets none
                raise ValueError(f.name)
            value = {}
        elif f.type == "tuple[str, ...]":
            value = _strs(value, f.name)
        elif f.type == "str":
            if not isinstance(value, str):
                raise ValueError(f.name)
        elif f.type == "str | None":
            if value is not None and not isinstance(value, str):
                raise ValueError(f.name)
        else:                                        # a field this reader does not know
            raise ValueError(f.name)
        kw[f.name] = value
    return ImageSpec(**kw)


def _skipped_record(x: Skipped) -> dict:
    return {"family": x.family, "combination": x.combination, "wishes": [list(w) for w in x.wishes],
            "why": x.why, "cuda_from": x.cuda_from, "no_lock": x.no_lock, "no_match": x.no_match}


def _skipped_from(rec) -> Skipped:
    if not isinstance(rec, dict) or set(rec) != {f.name for f in dataclasses.fields(Skipped)}:
        raise ValueError("not a skipped record")
    wishes = rec["wishes"]
    if not (isinstance(wishes, list) and all(isinstance(w, list) and len(w) == 2 for w in wishes)):
        raise ValueError("wishes")
    if not (all(isinstance(rec[n], str) for n in ("family", "combination", "cuda_from"))
            and (rec["why"] is None or isinstance(rec["why"], str))
            and isinstance(rec["no_lock"], bool) and isinstance(rec["no_match"], bool)):
        raise ValueError("skipped")
    return Skipped(rec["family"], rec["combination"], tuple(_strs(w, "wish") for w in wishes),
                   why=rec["why"], cuda_from=rec["cuda_from"], no_lock=rec["no_lock"],
                   no_match=rec["no_match"])


SOURCE_LABEL = "org.opencontainers.image.source"


def project_source(k: Knowledge) -> str | None:
    """The project's repository as matrix.yaml states it (``project: {source: https://...}``), or
    None. Recipes take it from the matrix only, so the same matrix gives the same bytes in every
    clone; the git remote is a build-time fact (:func:`git_source_url`)."""
    project = k.raw.get("project") if isinstance(k.raw, dict) else None
    source = project.get("source") if isinstance(project, dict) else None
    return str(source) if source else None


LICENSES_LABEL = "org.opencontainers.image.licenses"


def project_licenses(k: Knowledge) -> str | None:
    """The SPDX license expression matrix.yaml states for the images (``project: {licenses: ...}``,
    checked by grammar.py), or None: then the label is left out."""
    project = k.raw.get("project") if isinstance(k.raw, dict) else None
    licenses = project.get("licenses") if isinstance(project, dict) else None
    return str(licenses) if licenses else None


def created_rfc3339(as_of: str) -> str:
    """``2026-11-21T00:00:00Z`` for as_of 2026-11-21: the source date images are stamped with
    (sourcedate.source_epoch)."""
    return rfc3339(source_epoch(as_of)) if as_of else as_of


@functools.lru_cache(maxsize=16)
def git_source_url(folder: str) -> str | None:
    """``git remote get-url origin`` of the repository holding ``folder`` when it is an https URL,
    with any credentials removed and checked by the matrix's URL grammar (it reaches a LABEL);
    None otherwise (no git, no repository, no origin, ssh, a URL the grammar refuses)."""
    try:
        proc = subprocess.run(["git", "-C", folder, "remote", "get-url", "origin"],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    url = proc.stdout.strip() if proc.returncode == 0 else ""
    if not url.lower().startswith("https://"):
        return None
    try:
        parts = urlsplit(url)
        netloc = parts.hostname or ""
        if parts.port:
            netloc += f":{parts.port}"
    except ValueError:
        return None
    clean = urlunsplit(("https", netloc, parts.path, "", ""))
    return clean if grammar_check("url", clean) is None else None


def _combinations(k: Knowledge, fam: dict):
    """(label, wishes, variant tag) for each PyTorch release x variant (or NCCL for comms)."""
    pt = fam.get("pytorch")
    if pt is None or str(pt) == NONE:
        cudas = _as_list(fam.get("cuda"))
        for nccl in _as_list(fam.get("nccl")) or [None]:
            w = {"pytorch": NONE}
            if nccl:
                if not SAFE_VERSION.fullmatch(nccl):
                    raise KnowledgeError(f"images: nccl {nccl!r} is not a version", file=k.path)
                w["nccl"] = "==" + nccl
            for cuda in cudas or [None]:
                ww = dict(w)
                if cuda:
                    ww["cuda"] = cuda
                yield (f"nccl {nccl}" if nccl else "comms"), ww, ""
        return
    spec = str(pt)
    try:
        match = version_matcher(spec if spec[:1] in tuple("<>=!~") else "==" + spec)
    except Exception:  # noqa: BLE001 - reported as one line
        raise KnowledgeError(f"images: pytorch {spec!r} is not a specifier", file=k.path) from None
    mode = fam.get("variants", "all")
    cuda_fixed = fam.get("cuda")
    for ver in sorted(k.pytorch, key=parse_version, reverse=True):
        if not match(ver):
            continue
        vs = [v for (pv, _), v in k.variants.items() if pv == ver and v.verified]
        if cuda_fixed is not None and str(cuda_fixed) == NONE:
            vs = [v for v in vs if v.cuda == NONE]
        else:
            vs = [v for v in vs if v.cuda != NONE]
            if mode == "default-and-newest" and vs:
                newest = max(vs, key=lambda v: parse_version(v.cuda))
                vs = [v for v in vs if v.default or v is newest]
            elif mode == "default":
                vs = [v for v in vs if v.default]
        for v in sorted(vs, key=lambda v: (v.cuda == NONE, parse_version("0" if v.cuda == NONE
                                                                             else v.cuda))):
            cuda_w = NONE if v.cuda == NONE else v.cuda
            yield f"torch {ver}+{v.tag}", {"pytorch": "==" + ver, "cuda": cuda_w}, v.tag


def load_images(matrix_path: str | Path) -> dict[str, ImageSpec]:
    k = load(matrix_path)
    specs, _ = expand(k)
    return {s.id: s for s in specs}


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
