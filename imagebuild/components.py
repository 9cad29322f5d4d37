"""The components a CUDA image compiles from tarballs, as data: one row each, in the order the
devel stage builds them (each may link what an earlier one installed).

A row holds what every part of imagebuild needs to know of a compiled component: the prefix it
installs into (the run-time stage copies it whole, image.json lists it for the smoke suite's
`libraries` check), what of that prefix goes on PATH and LD_LIBRARY_PATH, where the matrix pins
its tarball (a `tools:` entry of its name, whose keys knowledge/recipe_inputs.py derives from
these rows, or the image family's own pin), what it is built on (`after`: other rows, or NCCL),
which images carry it (`when`: a build switch of the image family, off unless the family turns
it on; none: every image that compiles), the environment it sets (`env`), what its git archive
needs (autogen, OS packages, a stage of its own) and the OS packages its run time needs.
`for_build(choices)` is the one answer to "which components does this image compile, in which
order": every consumer (the recipe's stages, the run-time copies, the search paths, the
tarballs, image.json) asks it.

Adding a compiled component is a row here, its fragment
(`imagebuild/recipes/fragments/<name>.sh.j2`) and its tarball in matrix.yaml (`tools.<name>`:
version, url, sha256, source); a component only some images carry names its switch in `when`,
and a family turns it on in matrix.yaml (`images[].build.<switch>: true`). render/blocks.py
gives its fragment the CUDA and NCCL homes and every row's prefix (`prefixes`), or the values a
row's name has there (flags computed from the family's build choices); the OS packages it needs
are named by role, which each package manager's row in packagers.py maps to its packages.
tests/render/test_components.py plants one (family-gated, built after NCCL and beneath Open MPI) and
follows it to the matrix's checks, the recipe, image.json and the smoke suite. Pure data:
imports nothing of imagebuild."""

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
    # what it is built on: other rows' names, or NCCL (the devel stage installs NVIDIA's NCCL
    # after every row that does not need it, and before the first that does)
    after: tuple[str, ...] = ()
    # the image family's build switch (images[].build.<when>) that compiles it; off by default
    # (knowledge/schema.py's BUILD_SWITCHES takes it from here). None: every image that compiles
    when: str | None = None
    env: tuple[tuple[str, str], ...] = ()   # ENV it sets in the image, (name, value)
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


#: the name `after` gives NVIDIA's NCCL (installed in the devel stage, not a row)
NCCL = "nccl"

COMPONENTS: tuple[Component, ...] = (
    Component("gdrcopy", "gdrcopy {version} (user space)", "/opt/gdrcopy", lib=True),
    # GCC's OpenMP run time: UCX's ucx_perftest and its CUDA plugin link it (the devel stage has it
    # with the compiler; the run-time stage must install it, or they do not load)
    Component("ucx", "UCX {version}", "/opt/ucx", pinned_by="family", bin=True, lib=True,
              after=("gdrcopy",), autogen=True, weight=4, runtime_packages=("openmp-runtime",)),
    # The git archive's Open MPI builds against the distribution's hwloc (the archive bundles none)
    # and libevent (its bundled one would cost an autogen, a configure and a build of its own in
    # every cold build: about 70 s of one core of the 2-core CI machine, docs/benchmarks.md); the
    # distribution's serves PMIx and Open MPI as it serves the distribution's own Open MPI.
    # its one-sided communication over UCX too (the PML is set for every image: run time)
    Component("openmpi", "Open MPI {version}", "/opt/openmpi", pinned_by="family", bin=True,
              lib=True, after=("ucx",), env=(("OMPI_MCA_osc", "ucx"),), autogen=True,
              source_stage=True, weight=4,
              git_packages=(("hwloc-devel", "libevent-devel"), ("hwloc-runtime", "libevent-runtime"))),
    Component("nccl-tests", "nccl-tests {version}", "/opt/nccl-tests", bin=True,
              after=(NCCL, "openmpi")),
)

#: the components whose tarball is a `tools:` entry of the matrix (compiled in every CUDA image)
TARBALL_TOOLS: tuple[str, ...] = tuple(c.name for c in COMPONENTS if c.pinned_by == "tools")


BY_NAME = {c.name: c for c in COMPONENTS}
#: the build switches the rows' `when` name
SWITCHES: tuple[str, ...] = tuple(dict.fromkeys(c.when for c in COMPONENTS if c.when))


def _check_rows() -> None:
    """A row's `after` names a row or NCCL, no row depends on itself through others: a
    mistake here is the developer's, refused when imagebuild is imported."""
    for c in COMPONENTS:
        for dep in c.after:
            if dep != NCCL and dep not in BY_NAME:
                raise ValueError(f"components.py: {c.name} is built after {dep!r}, which is no row")
    for c in COMPONENTS:
        seen, todo = set(), list(c.after)
        while todo:
            dep = todo.pop()
            if dep == c.name:
                raise ValueError(f"components.py: {c.name} depends on itself through `after`")
            if dep in seen or dep == NCCL:
                continue
            seen.add(dep)
            todo.extend(BY_NAME[dep].after)


_check_rows()


def for_build(choices: dict | None = None) -> tuple[Component, ...]:
    """The components an image compiles, given its family's build switches (None: the defaults,
    every switch off), in build order: each after what it names in `after` (a dependency the
    image does not compile is not waited for), otherwise in the rows' order."""
    chosen = [c for c in COMPONENTS if c.when is None or (choices or {}).get(c.when)]
    names = {c.name for c in chosen}
    done: list[Component] = []
    placed: set[str] = set()
    while len(done) < len(chosen):
        nxt = next(c for c in chosen if c.name not in placed
                   and all(d in placed or d not in names for d in c.after if d != NCCL))
        done.append(nxt)
        placed.add(nxt.name)
    return tuple(done)


def needs_nccl(c: Component, chosen: tuple[Component, ...]) -> bool:
    """Whether `c` is built on NCCL, directly or through a component of `chosen` it is built on."""
    names = {x.name for x in chosen}
    todo, seen = list(c.after), set()
    while todo:
        dep = todo.pop()
        if dep == NCCL:
            return True
        if dep in seen or dep not in names:
            continue
        seen.add(dep)
        todo.extend(BY_NAME[dep].after)
    return False


def prefixes(choices: dict | None = None) -> list[str]:
    """The install prefixes of the components an image compiles, in build order (image.json's
    `built`)."""
    return [c.prefix for c in for_build(choices)]
