"""Where a project's files are: everything a command reads or writes by default sits beside the
matrix it was given (``--matrix``, default ./matrix.yaml), never beside the installed package.

Which matrix: ``--matrix FILE``, else ``$IMAGEBUILD_MATRIX``, else ./matrix.yaml where the current
folder has one, else the matrix packaged with imagebuild (imagebuild/data/matrix.yaml, with its
wheel locks), which is what a pip-installed imagebuild on a cluster node answers from. The
packaged matrix is read-only: a project that uses it keeps its state in the current folder. One place names them, so that ``test`` writes a smoke report where ``lock`` and
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


#: the knowledge the package was released with (a real file in the wheel; in a checkout, a link
#: to the checkout's matrix.yaml)
PACKAGED_MATRIX = Path(__file__).resolve().parent / "data" / "matrix.yaml"
#: where the matrix came from, as `locate_matrix` names it
ORIGINS = ("--matrix", "$IMAGEBUILD_MATRIX", "./matrix.yaml", "packaged")


def locate_matrix(given: str | None, environ=None, cwd: Path | None = None) -> tuple[str, str]:
    """(path, origin) of the matrix a command uses: the flag, the variable, the current folder's
    matrix.yaml (even a broken one: the user's file is never silently passed over), the packaged
    one. An empty flag or variable counts as not given."""
    environ = os.environ if environ is None else environ
    if given:
        return given, "--matrix"
    if environ.get("IMAGEBUILD_MATRIX"):
        return environ["IMAGEBUILD_MATRIX"], "$IMAGEBUILD_MATRIX"
    local = (cwd or Path.cwd()) / "matrix.yaml"
    if os.path.lexists(local):
        return "matrix.yaml" if cwd is None else str(local), "./matrix.yaml"
    return str(PACKAGED_MATRIX), "packaged"


def is_packaged(matrix: str | os.PathLike) -> bool:
    """Whether `matrix` names the packaged matrix (by its path, links not followed: in a checkout
    the packaged path links to the checkout's matrix.yaml, and is still the packaged one)."""
    return Path(os.path.abspath(matrix)) == PACKAGED_MATRIX


@dataclass(frozen=True)
class Workspace:
    """The folders of the project whose matrix is ``matrix``."""

    matrix: Path
    #: the project's folder: the matrix's, or the current folder for the packaged matrix
    home: Path | None = None

    @classmethod
    def of(cls, matrix: str | os.PathLike) -> "Workspace":
        if is_packaged(matrix):
            return cls(Path(matrix).resolve(), Path.cwd())
        return cls(Path(matrix).resolve())

    @property
    def packaged(self) -> bool:
        return self.home is not None

    @property
    def root(self) -> Path:
        return self.home if self.home is not None else self.matrix.parent

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
