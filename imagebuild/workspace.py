"""Where a project's files are: everything a command reads or writes by default sits beside the
matrix it was given (``--matrix``, default ./matrix.yaml), never beside the current folder or the
installed package. One place names them, so that ``test`` writes a smoke report where ``lock`` and
``publish`` look for it, whatever folder each is run from.

::

    <root>/matrix.yaml            the knowledge base
    <root>/images.lock            what was built, tested and published (lockfile.py)
    <root>/.imagebuild/build      build contexts, build-report.json, normalising scratch
    <root>/.imagebuild/logs       one build log per image
    <root>/.imagebuild/reports    smoke reports, <image-id>.json (+ JUnit beside)
    <root>/.imagebuild/sbom       SBOMs, <image-id>.cdx.json
    <root>/.imagebuild/sources    the checksummed source tarball cache
    <root>/.imagebuild/wheels     wheels downloaded on the host

Imports nothing from imagebuild: every stage may ask it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

#: the lock's file name, beside the matrix
LOCK_FILE = "images.lock"
#: the project's state folder, beside the matrix, and its folders (relative to the matrix's)
STATE_DIR = Path(".imagebuild")
BUILD, LOGS, REPORTS, SBOM, SOURCES, WHEELS = (STATE_DIR / name for name in (
    "build", "logs", "reports", "sbom", "sources", "wheels"))


@dataclass(frozen=True)
class Workspace:
    """The folders of the project whose matrix is ``matrix``."""

    matrix: Path

    @classmethod
    def of(cls, matrix: str | os.PathLike) -> "Workspace":
        return cls(Path(matrix).resolve())

    @property
    def root(self) -> Path:
        return self.matrix.parent

    @property
    def lock(self) -> Path:
        return self.root / LOCK_FILE

    @property
    def state(self) -> Path:
        return self.root / STATE_DIR

    @property
    def build(self) -> Path:
        return self.root / BUILD

    @property
    def logs(self) -> Path:
        return self.root / LOGS

    @property
    def reports(self) -> Path:
        return self.root / REPORTS

    @property
    def sbom(self) -> Path:
        return self.root / SBOM

    @property
    def sources(self) -> Path:
        return self.root / SOURCES

    @property
    def wheels(self) -> Path:
        return self.root / WHEELS
