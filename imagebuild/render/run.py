"""One command's matrix, read once: `MatrixRun` holds the file a command was given, its Knowledge
and every image it declares, expanded once. The CLI makes one per command and passes it down;
what lies below (deliver/'s lock provenance and SBOM, the lookups by id) takes it, never the
path, so that no stage opens matrix.yaml a second time (tests/knowledge/test_one_matrix.py counts)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ..errors import ImagebuildError
from ..knowledge import Knowledge, load
from .images import ImageSpec, Skipped, expand, select


@dataclass(frozen=True)
class MatrixRun:
    matrix: str                         # the file, as the command was given it
    k: Knowledge
    images: Mapping[str, ImageSpec]     # every image of the matrix by id, in the matrix's order
    skipped: tuple[Skipped, ...] = ()   # the declared combinations that gave none

    @classmethod
    def open(cls, matrix: str | Path, *, require_locks: bool = True,
             allow_unverified: bool = False) -> "MatrixRun":
        """Read and expand the matrix (images.expand's options)."""
        k = load(matrix)
        specs, skipped = expand(k, require_locks=require_locks, allow_unverified=allow_unverified)
        return cls(str(matrix), k, {s.id: s for s in specs}, tuple(skipped))

    def lookup(self, names: list[str]) -> dict[str, ImageSpec]:
        """The images of ``names``, by id and in order; an unknown id is one line naming the
        matrix, with the closest known ids."""
        missing = [n for n in names if n not in self.images]
        if missing:
            known = sorted(self.images)
            close = [k for k in known if missing[0] in k or k in missing[0]][:3] or known[:3]
            hint = ", ".join(close) + (f" and {len(known) - len(close)} more: `imagebuild images`"
                                       if len(known) > len(close) else "")
            raise ImagebuildError(f"unknown image {missing[0]!r} (known: {hint or 'none'})",
                                  file=self.matrix)
        return {n: self.images[n] for n in names}

    def select(self, names: list[str]) -> list[ImageSpec]:
        """Images by id or family name (images.select): all of them when none is named."""
        return select(dict(self.images), names)


def load_images(matrix: str | Path) -> dict[str, ImageSpec]:
    """Every image of the matrix by id: a MatrixRun's images."""
    return dict(MatrixRun.open(matrix).images)
