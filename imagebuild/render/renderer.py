"""ImageSpec -> Dockerfile and Singularity/Apptainer definition text.

A recipe is first built as data: stages of steps (run a fragment, copy, env, label). Each `run`
step renders one component fragment from imagebuild/recipes/fragments/ (the same shell text
serves both formats); the entry templates in recipes/docker and recipes/singularity only lay the
steps out.
Every value that reaches a shell line is checked against a strict pattern first (`_safe`); every
string a template receives is checked to be one line of printable text (`_guard`); and the rendered
text is checked to have exactly the instructions (Docker) or sections (Singularity) its steps make
(`_check_docker`, `_check_singularity`), so no value can add a line, an instruction or a section.

Layer order follows change frequency (OS, CUDA, rdma-core, gdrcopy, UCX, Open MPI, NCCL,
nccl-tests, Python, PyTorch, smoke suite), so images of one matrix share their lower layers.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from . import blocks
from .checked import guard as _guard, safe as _safe
from ..knowledge.grammar import bad_char, char_name
from .. import platforms
from ..errors import RenderError
from .images import ImageSpec
from ..packagers import PACKAGERS
from ..versions import NONE
from .cudastages import CudaStages
from .requires import image_requires
from .shape import _check_docker, _check_singularity
from .steps import (CA_PRELUDE, ENTRYPOINT, PIP_CONSTRAINT, REQUIREMENTS,  # noqa: F401 - re-exported
                    Stage, Step, _CudaLayout, _cuda_layout, _key_check, _lock_copy, _os_extras,
                    _tarballs, image_labels, image_lock)


def package_files() -> Path:
    """The installed imagebuild package as a folder: the templates (package data `recipes/`) and
    the smoke suite a build context copies are
    read from here, never from the source tree or the folder of the matrix."""
    pkg = importlib.resources.files("imagebuild")
    if not isinstance(pkg, Path):
        raise RenderError(f"imagebuild is installed as {pkg}, not as files: its templates cannot be "
                          "read; install it from the wheel")
    return pkg


def packaged_recipes() -> Path:
    """The recipe templates shipped with imagebuild (package data imagebuild/recipes)."""
    return package_files() / "recipes"

# A site's CA bundle (`imagebuild build --ca-bundle FILE`, a BuildKit secret) is used by the steps
# that download, and never stored in a layer. Without one, the secret file is absent and the
# distribution's own CAs are used.
class Renderer(CudaStages):
    """Holds one Jinja2 environment for many specs (templates are compiled once)."""

    def __init__(self, recipes: Path | None = None):
        try:
            import jinja2
        except ImportError:  # pragma: no cover - a dependency
            raise RenderError("jinja2 is not installed") from None
        self.recipes = Path(recipes) if recipes is not None else packaged_recipes()
        if not self.recipes.is_dir():
            raise RenderError(f"recipes folder {self.recipes} does not exist")
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(self.recipes)), undefined=jinja2.StrictUndefined,
            keep_trailing_newline=True, autoescape=False)  # noqa: S701 - shell text, not HTML
        self._jinja = jinja2

    def _template(self, name: str):
        try:
            return self.env.get_template(name)
        except self._jinja.TemplateNotFound:
            raise RenderError(f"template {self.recipes / name} is missing") from None
        except self._jinja.TemplateSyntaxError as exc:
            raise RenderError(f"template error: {exc.message}",
                              file=str(self.recipes / name), line=exc.lineno) from None

    def fragment(self, fragment: str, comment: str, *, template: str | None = None, **ctx) -> Step:
        """One run step from fragments/<template or fragment>.sh.j2, named ``fragment`` (what the
        golden tests file it under)."""
        path = f"fragments/{template or fragment}.sh.j2"
        _safe("text", comment, f"comment of the {fragment} step")
        _guard(ctx, f"value for {path}:")
        try:
            text = self._template(path).render(**ctx)
        except self._jinja.UndefinedError as exc:
            raise RenderError(f"template {path}: {exc.message}") from None
        except self._jinja.TemplateError as exc:
            raise RenderError(f"template {path}: {exc}") from None
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        workdir = None
        if lines and lines[0].startswith("#workdir "):
            workdir = _safe("path", lines.pop(0).split(None, 1)[1], "workdir")
        keep = "#keep" in lines      # the step's tree outlives it (another stage copies it)
        sources = [_safe("word", ln.split(None, 1)[1], "source file") for ln in lines
                   if ln.startswith("#source ")]
        lines = [ln for ln in lines if not ln.startswith("#source ") and ln != "#keep"]
        downloads = any(ln.startswith(("curl ", "/opt/venv/bin/python -m pip install"))
                        and "--no-index" not in ln for ln in lines)
        return Step("run", comment=comment, commands=lines, workdir=workdir, downloads=downloads,
                    fragment=fragment, sources=sources, keep=keep)

    def packages(self, pm: dict, role: str, comment: str, names: list[str],
                 after: tuple[str, ...] = ()) -> Step:
        """One OS packages step (fragments/packages.sh.j2) with package manager row ``pm``
        (packagers.py): its update, install and clean-up around ``names``, and ``after`` once they
        are installed. Named `<role>-<manager>`."""
        return self.fragment(f"{role}-{pm['name']}", comment, template="packages",
                             update=list(pm["update"]), install=pm["install"],
                             clean=list(pm["clean"]), packages=list(names), after=list(after))

    # ---------------------------------------------------------------------------------------------

    def stages(self, spec: ImageSpec, k) -> list[Stage]:
        s = spec.stack
        for comp, val in s.items():
            if comp in ("os", "platform"):
                _safe("id", val, comp)
            elif val != NONE:
                _safe("version", val, comp)
        base = _safe("ref", platforms.platform_base(spec.os.base or "", spec.oci_platform),
                     f"base image of {spec.os.id}")
        _safe("id", spec.id, "image id")
        _safe("text", spec.description, f"description of {spec.id}")
        if spec.flavor == "cpu" or (spec.cuda_from == "wheels" and not spec.compiles
                                    and spec.flavor != "devel"):
            return self._os_mpi_stages(spec, base, k)
        if spec.os.family not in PACKAGERS:
            raise RenderError(f"image {spec.id}: CUDA recipes are written for "
                              f"{', '.join(sorted(PACKAGERS))}; {spec.os.id} "
                              f"({spec.os.family}) has none")
        if spec.flavor == "devel":
            return [self._devel_on_runtime(spec, k)]
        return self._cuda_stages(spec, k, base)

    def _common_tail(self, spec: ImageSpec, python_bin: str) -> list[Step]:
        return [
            Step("copy", comment="the smoke suite and what the image is expected to contain",
                 src="lib/", dest="/opt/imagebuild/lib/"),
            Step("copy", src="image.json", dest="/opt/imagebuild/image.json"),
            self.fragment("smoke", "smoke suite entry points", python_bin=python_bin),
            *self._pip_constraint(spec),
            Step("entrypoint", comment="imagebuild-check's line on stderr, then the command (IMAGEBUILD_CHECK=0: silent)",
                 items=[("ENTRYPOINT", f'["{ENTRYPOINT}"]'), ("CMD", '["/bin/bash"]')]),
        ]

    def _pip_constraint(self, spec: ImageSpec) -> list[Step]:
        """/etc/pip/constraint.txt from the image's lock copies, for an image that installs wheels
        (ENV PIP_CONSTRAINT names it: env_vars)."""
        if spec.wheel_lock is None:
            return []
        return [self.fragment("pip-constraint", "pip constraints: the locked wheels stay as installed",
                              requirements=REQUIREMENTS)]

    def _os_mpi_stages(self, spec: ImageSpec, base: str, k) -> list[Stage]:
        """Debian's MPI and UCX, and PyTorch: for a CPU image from host wheels in a stage of its
        own, so the wheels never reach a layer of the image (only the installed /opt/venv is
        copied); for an image whose CUDA comes from torch's wheels (`cuda_from: wheels`) from its
        wheel lock, downloaded by pip in the build: that closure is the image's CUDA, cuDNN and
        NCCL, so no CUDA repository, CUDA package or NCCL step is rendered."""
        s = spec.stack
        if spec.nccl_bench:
            return self._registry_comms_stages(spec, base, k)
        if spec.cuda_from == "wheels" and s["cuda"] != NONE:
            if spec.wheels == "host":
                raise RenderError(f"image {spec.id}: CUDA from the wheels comes from the package "
                                  "index through the wheel lock, not from host wheels")
            return [Stage(None, base, [
                self.fragment("debian-mpi", "OS packages: Debian's Open MPI and UCX, Python",
                              openmpi=s["openmpi"], ucx=s["ucx"], python=s["python"]),
                self._openssh(PACKAGERS[spec.os.family]),
                self.fragment("venv", "Python virtual environment", python_bin="python3"),
                *self._torch_steps(spec, k),
                *self._common_tail(spec, "/opt/venv/bin/python"),
                Step("env", items=sorted(self.env_vars(spec, k).items())),
                Step("label", items=image_labels(spec, k)),
            ])]
        if spec.wheels != "host":
            raise RenderError(f"image {spec.id}: a CPU image installs PyTorch from host wheels "
                              "(wheels: host)")
        os_step = self.fragment("debian-mpi", "OS packages: Debian's Open MPI and UCX, Python",
                                openmpi=s["openmpi"], ucx=s["ucx"], python=s["python"])
        stages = []
        steps = [os_step, self._openssh(PACKAGERS[spec.os.family])]
        if s["pytorch"] != NONE:
            stages.append(Stage("torch", base, [
                os_step,
                Step("copy", comment="PyTorch wheels gathered on the host (offline install)",
                     src="wheels/", dest="/tmp/wheels/"),
                _lock_copy("wheels.txt"),
                self.fragment("torch-wheels", "PyTorch (CPU)", pytorch=s["pytorch"]),
            ]))
            steps.append(Step("copy", comment="PyTorch as the torch stage installed it",
                              from_stage="torch", src="/opt/venv", dest="/opt/venv"))
            steps.append(Step("copy", from_stage="torch", src=f"{REQUIREMENTS}/wheels.txt",
                              dest=f"{REQUIREMENTS}/wheels.txt"))
        steps += self._common_tail(spec, "/opt/venv/bin/python")
        steps.append(Step("env", items=sorted(self.env_vars(spec, k).items())))
        steps.append(Step("label", items=image_labels(spec, k)))
        stages.append(Stage(None, base, steps))
        return stages

    def _registry_comms_stages(self, spec: ImageSpec, base: str, k) -> list[Stage]:
        """A communication image built from the package registries alone: the OS's rdma-core, UCX
        and Open MPI (RDMA-ready, built without CUDA), CUDA's run time and NCCL from the run-time
        subset of the image's wheel lock, and imagebuild's NCCL benchmark, compiled in a stage of
        its own (the OS's C compiler and MPI wrapper, the lock's CUDA and NCCL headers) from which
        only the binary is copied: no compiler, header or upstream source reaches the image."""
        from ..smoke.ncclbench import NCCL_BENCH, NCCL_BENCH_SOURCE
        s = spec.stack
        c = _cuda_layout(spec)
        if s["nccl"] == NONE:
            raise RenderError(f"image {spec.id}: a communication image needs an NCCL version")
        os_step = self.fragment("debian-mpi", "OS packages: Debian's Open MPI and UCX, Python",
                                openmpi=s["openmpi"], ucx=s["ucx"], python=s["python"])
        src = f"/tmp/build/nccl-bench/{NCCL_BENCH_SOURCE.rsplit('/', 1)[-1]}"
        bench = Stage("nccl-bench", base, [
            os_step,
            self.packages(c.pm, "c-compiler", "the C compiler for the benchmark (this stage only)",
                          c.os_packages("c-compiler")),
            self.fragment("venv", "Python virtual environment", python_bin=c.python_bin),
            _lock_copy("wheels.txt"),
            Step("copy", comment="imagebuild's NCCL benchmark: its source, from the installed package",
                 src=f"lib/imagebuild/smoke/{NCCL_BENCH_SOURCE}", dest=src),
            self.fragment("nccl-bench", f"imagebuild's NCCL benchmark against CUDA {c.cuda} and NCCL "
                          f"{s['nccl']} from NVIDIA's wheels", cuda=c.cuda, cuda_major=c.major,
                          cuda_tree=c.tree, nccl_home=c.nccl_home, src=src, binary=NCCL_BENCH),
        ])
        final = Stage(None, base, [
            os_step,
            self._openssh(c.pm),
            self.packages(c.pm, "rdma-runtime", "RDMA user space: the distribution's rdma-core",
                          c.os_packages("rdma-runtime")),
            self.fragment("venv", "Python virtual environment", python_bin=c.python_bin),
            _lock_copy("runtime.txt"),
            self.fragment("cuda-wheels-runtime", f"CUDA {c.cuda} run time and NCCL {s['nccl']} "
                          "from NVIDIA's wheels", cuda=c.cuda, cuda_home=c.home, cuda_tree=c.tree),
            Step("copy", comment="the benchmark as the nccl-bench stage built it",
                 from_stage="nccl-bench", src=NCCL_BENCH, dest=NCCL_BENCH),
            *self._common_tail(spec, "/opt/venv/bin/python"),
            Step("env", items=sorted(self.env_vars(spec, k, c).items())),
            Step("label", items=image_labels(spec, k)),
        ])
        return [bench, final]

    def env_vars(self, spec: ImageSpec, k, c: _CudaLayout | None = None) -> dict[str, str]:
        """Everything an image needs at run time: enroot and pyxis read ENV, not ENTRYPOINT."""
        path = ["/opt/venv/bin"]
        ld = []
        env = {"OMPI_MCA_pml": "ucx", "MELLANOX_VISIBLE_DEVICES": "all",
               "IMAGEBUILD_IMAGE_ID": spec.id}
        if spec.wheel_lock is not None:   # written by the pip-constraint fragment
            env["PIP_CONSTRAINT"] = PIP_CONSTRAINT
        if spec.stack["cuda"] != NONE:
            # what the NVIDIA container runtime reads, wherever the image's CUDA comes from: its
            # requirements say where imagebuild says the image runs (render/requires.py)
            env.update({"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
                        **image_requires(spec, k)})
        if c is not None and spec.compiles:   # CUDA, with the building blocks compiled against it
            path += blocks.search_path("bin", None, f"{c.home}/bin", spec.build_choices)
            ld += blocks.search_path("lib", f"{c.nccl_home}/lib", c.lib, spec.build_choices)
            env.update({"CUDA_HOME": c.home, **blocks.env_of(spec.build_choices)})
        elif c is not None:   # CUDA and NCCL from the wheels beside the OS's MPI: nothing in /opt
            path.append(f"{c.home}/bin")
            ld += [f"{c.nccl_home}/lib", c.lib]
            env["CUDA_HOME"] = c.home
        if spec.openmpi.line == "4.1":
            # Open MPI 4.1's UCX PML only selects InfiniBand devices unless told otherwise, so a
            # single node or an Ethernet cluster would fail with "PML ucx cannot be selected".
            env.update({"OMPI_MCA_pml_ucx_tls": "any", "OMPI_MCA_pml_ucx_devices": "any"})
        path += ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        env["PATH"] = ":".join(path)
        if ld:
            env["LD_LIBRARY_PATH"] = ":".join(ld)
        for k, v in env.items():
            _safe("env", v, f"ENV {k}")
        return dict(sorted(env.items()))

    # ---------------------------------------------------------------------------------------------

    def dockerfile(self, spec: ImageSpec, k) -> str:
        stages = self.stages(spec, k)
        return self._render("docker/Dockerfile.j2", spec=spec, stages=stages,
                            stack_items=sorted(spec.stack.items()), ca_prelude=CA_PRELUDE)

    def singularity(self, spec: ImageSpec, k) -> str:
        stages = self.stages(spec, k)
        env = next(s.items for s in stages[-1].steps if s.kind == "env")
        return self._render("singularity/image.def.j2", spec=spec, stages=stages,
                            env_items=env, label_items=image_labels(spec, k))

    def singularity_from_image(self, spec: ImageSpec, k) -> str:
        stages = self.stages(spec, k)
        env = next(s.items for s in stages[-1].steps if s.kind == "env")
        _safe("ref", spec.local_ref, "image reference")
        return self._render("singularity/from-image.def.j2", spec=spec, env_items=env,
                            label_items=image_labels(spec, k))

    def _render(self, name: str, **ctx) -> str:
        spec = ctx["spec"]
        _guard([spec.id, spec.description, spec.min_driver or "", spec.tag, spec.local_ref,
                spec.stack, ctx.get("stack_items", []), ctx.get("env_items", []),
                ctx.get("label_items", []), ctx.get("ca_prelude", "")], f"value for {name}:")
        for stage in ctx.get("stages", []):
            _guard([stage.name or "", stage.base, stage.bootstrap], f"stage of {spec.id}:")
            for step in stage.steps:
                _guard([step.kind, step.comment or "", step.commands, step.workdir or "",
                        step.src or "", step.dest or "", step.from_stage or "", step.items],
                       f"step of {spec.id}:")
        if name.startswith("singularity/"):
            ctx.setdefault("entrypoint", ENTRYPOINT)   # %runscript runs the check as Docker's does
            from ..smoke import QUICK_CHECK_NAMES      # %test: the quick checks, from the one registry
            ctx.setdefault("quick_checks", " ".join(QUICK_CHECK_NAMES))
        try:
            text = self._template(name).render(**ctx)
        except self._jinja.TemplateError as exc:
            raise RenderError(f"template {name}: {exc}") from None
        text = text.rstrip("\n") + "\n"
        hit = bad_char(text, multiline=True)
        if hit:
            raise RenderError(f"rendered {name} for {spec.id} holds {char_name(hit[1])}")
        if name.startswith("docker/"):
            _check_docker(text, ctx["stages"], spec)
        else:
            _check_singularity(text, ctx.get("stages"), spec, name)
        return text

    def fragment_texts(self, spec: ImageSpec, k) -> dict[tuple[str, str], str]:
        """(fragment, format) -> that one step laid out by each entry template: the unit the
        golden tests compare, so a change to one component shows as a change to one file."""
        out: dict[tuple[str, str], str] = {}
        for stage in self.stages(spec, k):
            for step in stage.steps:
                if step.kind != "run" or step.fragment is None:
                    continue
                one = [Stage(stage.name, stage.base, [step])]
                out.setdefault((step.fragment, "docker"), self._render(
                    "docker/Dockerfile.j2", spec=spec, stages=one,
                    stack_items=sorted(spec.stack.items()), ca_prelude=CA_PRELUDE))
                out.setdefault((step.fragment, "singularity"), self._render(
                    "singularity/image.def.j2", spec=spec, stages=one, env_items=[],
                    label_items=[]))
        return out

    def outputs(self, spec: ImageSpec, k) -> dict[str, str]:
        """Relative path -> text, for every generated file of one image."""
        return {
            f"Dockerfiles/{spec.id}/Dockerfile": self.dockerfile(spec, k),
            f"singularity/{spec.id}.def": self.singularity(spec, k),
            f"singularity/{spec.id}.from-image.def": self.singularity_from_image(spec, k),
        }

