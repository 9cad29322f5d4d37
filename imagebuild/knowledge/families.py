"""The `images:` section as typed values: one frozen `Family` per entry, made after gate 3
(recipe_inputs.py) has checked every key, type, grammar and cross-reference of the section, so
nothing here checks again and nothing outside knowledge/ reads the entries as plain mappings.
render/images.py expands each family into its images."""

from __future__ import annotations

from dataclasses import dataclass, field

from .schema import BUILD_SWITCHES


def _texts(value) -> tuple[str, ...]:
    """A key that takes one string or a list of them, as a tuple (empty when absent)."""
    if value is None:
        return ()
    return tuple(str(v) for v in value) if isinstance(value, list) else (str(value),)


def _text(value) -> str | None:
    return None if value is None else str(value)


@dataclass(frozen=True)
class Family:
    """One entry of `images:`: what every image of the family shares. Defaults are the matrix's
    (an absent key means what the README's "Editing the matrix" says it means)."""

    name: str
    line: int | None
    flavors: tuple[str, ...]
    oses: tuple[str, ...]
    description: str
    pytorch: str | None = None          # a specifier, a version, "none", or absent
    variants: str = "all"               # recipe_inputs.VARIANT_MODES
    cuda: tuple[str, ...] = ()          # versions or "none"
    nccl: tuple[str, ...] = ()
    ucx: str | None = None              # a pinned release
    openmpi: str | None = None
    python: str | None = None
    wheels: str | None = None           # "host": PyTorch from the host's pip
    rdma: str = "rdma-core"             # or an id of the rdma: section
    cuda_from: str = "repository"       # recipe_inputs.CUDA_FROM
    sources: str = "release"            # recipe_inputs.SOURCE_FORMS
    # the build choices with their defaults filled in (BUILD_SWITCHES) and cuda_arch, when given,
    # as a tuple of compute capabilities
    build: dict = field(default_factory=lambda: dict(BUILD_SWITCHES))
    platforms: tuple[str, ...] = ()     # matrix platform ids; empty: the resolver's choice

    @classmethod
    def of(cls, entry) -> "Family":
        """The Family of an `images:` entry that gate 3 accepted."""
        given = entry.get("build") or {}
        build = dict(BUILD_SWITCHES)
        build.update({k: v for k, v in given.items() if k in BUILD_SWITCHES})
        if given.get("cuda_arch"):
            build["cuda_arch"] = _texts(given["cuda_arch"])
        name = str(entry["family"])
        return cls(
            name=name, line=getattr(entry, "line", None), flavors=_texts(entry["flavors"]),
            oses=_texts(entry["os"]), description=str(entry.get("description", name)),
            pytorch=_text(entry.get("pytorch")), variants=str(entry.get("variants", "all")),
            cuda=_texts(entry.get("cuda")), nccl=_texts(entry.get("nccl")),
            ucx=_text(entry.get("ucx")), openmpi=_text(entry.get("openmpi")),
            python=_text(entry.get("python")), wheels=_text(entry.get("wheels")),
            rdma=str(entry.get("rdma", "rdma-core")),
            cuda_from=str(entry.get("cuda_from", "repository")),
            sources=str(entry.get("sources", "release")), build=build,
            platforms=_texts(entry.get("platforms")))

    def pin(self, component: str) -> str | None:
        """The release the family pins for ucx, openmpi or python (None: the resolver's choice)."""
        if component not in ("ucx", "openmpi", "python"):
            raise KeyError(component)
        return getattr(self, component)


def families_of(doc) -> tuple[Family, ...]:
    """The families of a document gate 3 accepted, in the file's order."""
    return tuple(Family.of(entry) for entry in (doc.get("images") or []))
