"""The compiled building blocks of a CUDA image as the renderer lays them out: each component of
components.py (its row: tarball, prefix, search paths, OS packages) with the values its fragment
is written with (configure flags computed from the family's build choices; the CUDA and NCCL
homes for a component with no entry in VALUES), in the order the devel stage builds them.

Adding a compiled component is a row in components.py, its fragment
(`imagebuild/recipes/fragments/<name>.sh.j2`) and its tarball in matrix.yaml; an entry in VALUES
only when its fragment needs more than the homes and the prefixes. An image's blocks are
`for_image(spec)`: the rows its family compiles (components.for_build), in build order. The
renderer lays them out the same way in every image:

- devel stage: the blocks that need no NCCL, NVIDIA's NCCL, then those built on it;
- run-time stage: each block's prefix copied from the devel stage, in build order;
- search paths: within each of those two groups the later-built first (a higher layer's tools and
  libraries before those it is built on), NCCL's libraries between the groups, CUDA's last."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Callable

from .checked import safe
from .images import ImageSpec
from ..components import COMPONENTS, Component
from ..components import needs_nccl as on_nccl   # a block is built on NCCL: after NVIDIA's NCCL
from ..components import for_build as _for_build
from ..packagers import packages
from ..sourcedate import source_epoch


@dataclass(frozen=True)
class Built:
    """What a block's fragment is written with besides its tarball: the image, where CUDA and NCCL
    live, and the tarball's form (release or git)."""
    spec: ImageSpec
    cuda_home: str
    nccl_home: str
    form: str

    @property
    def build(self) -> dict:
        """The family's build choices (`build:`)."""
        return self.spec.build_choices


#: every component's install prefix, by name: what a fragment or a flag says instead of /opt/...
PREFIX = {c.name: c.prefix for c in COMPONENTS}


def _homes(b: Built) -> dict:
    """What every fragment gets: where CUDA and NCCL are and every component's prefix."""
    return {"cuda_home": b.cuda_home, "nccl_home": b.nccl_home, "prefixes": PREFIX}


@dataclass(frozen=True)
class Block(Component):
    """A component with the values its fragment is written with besides its tarball."""
    values: Callable[[Built], dict] = _homes

    @classmethod
    def of(cls, component: Component, values: Callable[[Built], dict] = _homes) -> "Block":
        return cls(**{f.name: getattr(component, f.name) for f in fields(component)}, values=values)


def ucx_flags(build: dict, cuda_home: str) -> list[str]:
    """UCX's configure flags: CUDA, gdrcopy, RDMA CM and verbs, and GDA only where chosen; never
    its Java or Go bindings (configure builds them when it finds a JDK or Go), its examples or
    its documentation, and no static archives: libtool would compile every C file twice (PIC for
    the shared libraries, non-PIC for the archives), and nothing links UCX statically here (Open
    MPI, nccl-tests and the smoke suite load the shared libraries; the run-time stage copies the
    prefix whole, so the archives were 56 MB of every image)."""
    flags = {"--disable-doxygen-doc", "--disable-examples", "--disable-static", "--enable-mt",
             f"--prefix={PREFIX['ucx']}",
             f"--with-cuda={cuda_home}", f"--with-gdrcopy={PREFIX['gdrcopy']}",
             "--with-rdmacm", "--with-verbs", "--without-go", "--without-java"}
    if not build["gda"]:
        flags.add("--without-gda")
    return sorted(flags)


def ompi_flags(spec: ImageSpec, build: dict, form: str, cuda_home: str) -> list[str]:
    """Open MPI's configure flags: the 4.1 line's or 5's, the distribution's hwloc and libevent for a
    git archive, and the parts (Fortran, ROMIO, OpenSHMEM) the family's build: leaves out."""
    bundled = "external" if form == "git" else "internal"    # its row's git_packages for the git form
    flags = {f"--prefix={PREFIX['openmpi']}", f"--with-cuda={cuda_home}", "--with-slurm",
             f"--with-ucx={PREFIX['ucx']}", "--with-pmix=internal", f"--with-hwloc={bundled}",
             f"--with-libevent={bundled}", "--enable-mca-no-build=btl-uct"}
    if spec.openmpi.line == "4.1":
        flags |= {"--without-verbs", "--enable-orterun-prefix-by-default"}
    else:
        flags |= {"--with-prrte=internal", f"--with-cuda-libdir={cuda_home}/lib64/stubs"}
        if form == "git":
            flags.add("--disable-sphinx")   # a git checkout has no prebuilt manual pages
    flags |= {flag for key, flag in (("fortran", "--disable-mpi-fortran"),
                                     ("romio", "--disable-io-romio"),
                                     ("oshmem", "--disable-oshmem")) if not build[key]}
    if build["fortran"]:
        # asked for: configure fails without a Fortran compiler instead of leaving the bindings out
        flags.add("--enable-mpi-fortran")
    return sorted(flags)


# nccl-tests' translation units that take longest to compile, longest first (the comms image's
# CI-like cold build of 2026-11-27, nccl-tests 2.17.6 for four nvcc targets: verifiable.cu about
# 300 s, alltoall.cu about 250 s of one core each, every other file 30 to 90 s): make is given them
# first, so they do not start last and alone
NCCL_TESTS_FIRST = ("verifiable/verifiable.o", "alltoall.o")


def gencode(build: dict) -> str | None:
    """nvcc's -gencode flags for the family's build.cuda_arch: SASS for each architecture and PTX
    for the newest, which the driver compiles for a later GPU (None: each project's own list; for
    CUDA 13, UCX's device code is eight SASS targets and one PTX, nccl-tests' five and one)."""
    archs = build.get("cuda_arch") or ()
    if not archs:
        return None
    codes = [safe("version", a, "build.cuda_arch").replace(".", "") for a in archs]
    return " ".join([f"-gencode=arch=compute_{c},code=sm_{c}" for c in codes]
                    + [f"-gencode=arch=compute_{codes[-1]},code=compute_{codes[-1]}"])


# a component's fragment values beyond the homes, by its name
VALUES: dict[str, Callable[[Built], dict]] = {
    "ucx": lambda b: {"flags": ucx_flags(b.build, b.cuda_home), "gencode": gencode(b.build)},
    "openmpi": lambda b: {"flags": ompi_flags(b.spec, b.build, b.form, b.cuda_home),
                          "source_epoch": safe("version", source_epoch(b.spec.as_of), "source date")},
    "nccl-tests": lambda b: {**_homes(b), "gencode": gencode(b.build), "first": NCCL_TESTS_FIRST},
}
_BLOCKS = {c.name: Block.of(c, VALUES.get(c.name, _homes)) for c in COMPONENTS}


def for_build(build: dict | None) -> tuple[Block, ...]:
    """The blocks an image whose family makes these build choices compiles, in build order."""
    return tuple(_BLOCKS[c.name] for c in _for_build(build))


def for_image(spec: ImageSpec) -> tuple[Block, ...]:
    """The blocks `spec` compiles, in build order (none for an image that compiles nothing)."""
    return for_build(spec.build_choices) if spec.compiles else ()


def search_path(kind: str, nccl: str | None, cuda: str, build: dict | None) -> list[str]:
    """The folders of ``kind`` (bin or lib) of the blocks an image with these build choices
    compiles, in search order, with NCCL's (if any) between the blocks built before it and those
    built on it, and CUDA's last."""
    chosen = for_build(build)

    def group(nccl_side: bool) -> list[str]:
        return [f"{b.prefix}/{kind}" for b in reversed(chosen)
                if on_nccl(b, chosen) == nccl_side and getattr(b, kind)]
    return [*group(False), *([nccl] if nccl else []), *group(True), cuda]


def env_of(build: dict | None) -> dict[str, str]:
    """The environment the blocks an image compiles set (their rows' `env`)."""
    return {name: value for b in for_build(build) for name, value in b.env}


def os_extras(pm: dict, forms: dict[str, str], build: dict) -> tuple[list[str], list[str]]:
    """The OS packages the blocks' tarball forms and the family's build choices add to the devel
    and run-time stages: the autogen tools of a git archive, what a block's git form builds
    against (Open MPI's external hwloc and libevent), what a block's run time needs (UCX's
    OpenMP), and the Fortran compiler and run time of Open MPI's Fortran bindings."""
    devel: list[str] = []
    runtime: list[str] = []
    if build["fortran"]:
        devel += packages(pm, "fortran-devel")
        runtime += packages(pm, "fortran-runtime")
    chosen = for_build(build)
    if any(b.autogen and forms[b.name] == "git" for b in chosen):
        devel += packages(pm, "autogen-tools")
    for b in chosen:
        if b.git_packages and forms[b.name] == "git":
            devel += [p for role in b.git_packages[0] for p in packages(pm, role)]
            runtime += [p for role in b.git_packages[1] for p in packages(pm, role)]
        runtime += [p for role in b.runtime_packages for p in packages(pm, role)]
    return devel, runtime


def source_stages(forms: dict[str, str]) -> list[Block]:
    """The blocks whose source tree a stage of its own prepares: those with source_stage, in their
    git form (the autogen a release tarball does not need). `forms`: the image's tarballs' forms,
    by name (an image's tarballs are those of the blocks it compiles)."""
    return [b for b in _BLOCKS.values() if b.source_stage and forms.get(b.name) == "git"]
