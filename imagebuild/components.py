"""The components a CUDA image compiles from tarballs, as data: one row each, in the order the
devel stage builds them (each may link what an earlier one installed).

A row holds what every part of imagebuild needs to know of a compiled component: the prefix it
installs into (the run-time stage copies it whole, image.json lists it for the smoke suite's
`libraries` check), what of that prefix goes on PATH and LD_LIBRARY_PATH, where the matrix pins
its tarball (a `tools:` entry of its name, whose keys knowledge/recipe_inputs.py derives from
these rows, or the image family's own pin), whether it links NCCL, what its git archive needs
(autogen, OS packages, a stage of its own), the OS packages its run time needs per package
manager, and the environment it sets.

Adding a compiled component is three files: a row here, its fragment
(`imagebuild/recipes/fragments/<name>.sh.j2`) and its tarball in matrix.yaml (`tools.<name>`:
version, url, sha256, source). render/blocks.py gives its fragment the CUDA and NCCL homes, or
the values a row's name has there (flags computed from the family's build choices); the OS
packages it needs are named by role, which each package manager's row in packagers.py maps to
its packages;
tests/test_components.py plants one and follows it to the matrix's checks, the recipe, image.json
and the smoke suite. Pure data: imports nothing of imagebuild."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Component:
    name: str                           # its tarball in matrix.yaml and its fragment's name
    title: str                          # the step's comment, with {version}
    prefix: str                         # where it installs; the run-time stage copies it whole
    # where the matrix pins its tarball: "tools" (the `tools:` entry of its name; compiled in
    # every CUDA image) or "family" (the image family's own pin, ImageSpec.<name>; compiled when
    # its `install:` is source)
    pinned_by: str = "tools"
    bin: bool = False                   # prefix/bin goes on PATH
    lib: bool = False                   # prefix/lib goes on LD_LIBRARY_PATH
    on_nccl: bool = False               # links NCCL: built once NCCL is in the devel stage
    autogen: bool = False               # its git archive runs autogen (the autogen-tools role)
    # ([devel], [run time]) package roles its git form builds against; each package manager's row
    # (packagers.py) names their packages
    git_packages: tuple[tuple[str, ...], tuple[str, ...]] | None = None
    # its git archive is unpacked and autogen'd in a stage of its own, which needs nothing the
    # devel stage builds, so BuildKit runs it beside the devel stage's CUDA and UCX; the devel
    # stage copies the prepared tree (its `<name>-source` fragment)
    source_stage: bool = False
    # package roles the run-time stage installs for it, whatever its form
    runtime_packages: tuple[str, ...] = ()
    # its share of an image's cold build, against 1 for an image that compiles nothing: how
    # `--shard` balances builders (build/shards.py)
    weight: int = 1

    @property
    def stage(self) -> str:
        """The name of the stage that prepares its source tree (with source_stage)."""
        return f"{self.name}-source"

    @property
    def workdir(self) -> str:
        """Where its tree is unpacked and built (the fragment's #workdir)."""
        return f"/tmp/build/{self.name}"


COMPONENTS: tuple[Component, ...] = (
    Component("gdrcopy", "gdrcopy {version} (user space)", "/opt/gdrcopy", lib=True),
    # GCC's OpenMP run time: UCX's ucx_perftest and its CUDA plugin link it (the devel stage has it
    # with the compiler; the run-time stage must install it, or they do not load)
    Component("ucx", "UCX {version}", "/opt/ucx", pinned_by="family", bin=True, lib=True,
              autogen=True, weight=4, runtime_packages=("openmp-runtime",)),
    # The git archive's Open MPI builds against the distribution's hwloc (the archive bundles none)
    # and libevent (its bundled one would cost an autogen, a configure and a build of its own in
    # every cold build: about 70 s of one core of the 2-core CI machine, docs/benchmarks.md); the
    # distribution's serves PMIx and Open MPI as it serves the distribution's own Open MPI.
    Component("openmpi", "Open MPI {version}", "/opt/openmpi", pinned_by="family", bin=True,
              lib=True, autogen=True, source_stage=True, weight=4,
              git_packages=(("hwloc-devel", "libevent-devel"), ("hwloc-runtime", "libevent-runtime"))),
    Component("nccl-tests", "nccl-tests {version}", "/opt/nccl-tests", bin=True, on_nccl=True),
)

#: the components whose tarball is a `tools:` entry of the matrix (compiled in every CUDA image)
TARBALL_TOOLS: tuple[str, ...] = tuple(c.name for c in COMPONENTS if c.pinned_by == "tools")


def prefixes() -> list[str]:
    """Every component's install prefix, in build order (image.json's `built`)."""
    return [c.prefix for c in COMPONENTS]
