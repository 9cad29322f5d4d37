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
from dataclasses import dataclass, field
from pathlib import Path

from . import blocks, sources as S
from .checked import format_url as _format_url, guard as _guard, safe as _safe, show as _show
from ..knowledge.grammar import bad_char, char_name
from ..errors import RenderError
from .images import ImageSpec
from ..packagers import OPENMP_RUNTIME, PACKAGERS, RDMA_DEVEL
from ..versions import NONE, major_minor, parse_version
from .wheellock import LockError, read_lock, wheel_set


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
CA_PRELUDE = ('if [ -s /run/secrets/ca-bundle ]; then export CURL_CA_BUNDLE=/run/secrets/ca-bundle '
              'PIP_CERT=/run/secrets/ca-bundle SSL_CERT_FILE=/run/secrets/ca-bundle; fi')


@dataclass
class Step:
    kind: str                       # run | copy | env | label | entrypoint (ENTRYPOINT and CMD)
    comment: str | None = None
    commands: list[str] = field(default_factory=list)
    workdir: str | None = None
    src: str | None = None
    dest: str | None = None
    from_stage: str | None = None
    items: list[tuple[str, str]] = field(default_factory=list)
    downloads: bool = False         # fetches over TLS: gets the site CA bundle when one is given
    fragment: str | None = None     # the recipes/fragments/<name>.sh.j2 a run step came from
    # tarballs the step reads from the build context's sources/ (bound at /tmp/sources/<file>)
    sources: list[str] = field(default_factory=list)


REQUIREMENTS = "/opt/imagebuild/requirements"
PIP_CONSTRAINT = "/etc/pip/constraint.txt"
# the Docker ENTRYPOINT of every image (written by the smoke fragment): imagebuild-check, then exec
ENTRYPOINT = "/usr/local/bin/imagebuild-entrypoint"


def _key_check(key: dict, what: str) -> dict:
    """How a fetched key is checked: its full fingerprint when the knowledge has one, else its
    64-bit key id (the fact is then unverified, and such images are only made on request)."""
    if key.get("fingerprint"):
        return {"key_record": "fpr", "key_field": 10,
                "key_value": _safe("fingerprint", key["fingerprint"], f"{what} key fingerprint")}
    return {"key_record": "pub", "key_field": 5,
            "key_value": _safe("keyid", key.get("long_id", ""), f"{what} key id")}


def image_lock(spec: ImageSpec, k):
    """The image's wheel lock (wheellock.Lock), checked against its stack; None for an image that
    installs no wheel."""
    if spec.wheel_lock is None:
        return None
    try:
        lock = read_lock(k, wheel_set(k, spec.stack, spec.os, spec.wheels, spec.toolkit_wheels))
    except LockError as exc:
        raise RenderError(str(exc)) from None
    if lock is None:
        raise RenderError(f"image {spec.id}: its wheel lock {spec.wheel_lock} is missing")
    return lock


def image_labels(spec: ImageSpec, k) -> list[tuple[str, str]]:
    """The spec's labels, plus the sha256 of the wheel lock the image is built from (so a changed
    lock changes the recipe, and a built image says which lock it came from)."""
    labels = dict(spec.labels)
    lock = image_lock(spec, k)
    if lock is not None:
        labels["io.imagebuild.wheels-lock"] = f"sha256:{lock.sha256}"
    for key, value in labels.items():  # a LABEL value sits in double quotes: no " \ $ `
        _safe("text", value, f"label {_safe('word', key, 'label key')} of {spec.id}")
    return sorted(labels.items())


def _lock_copy(name: str) -> Step:
    """The image's wheel lock (or its NCCL subset) from the build context, kept in the image as a
    record of what was installed."""
    return Step("copy", comment=f"pinned wheels ({name}, from the image's lock in locks/wheels/)",
                src=f"requirements/{name}", dest=f"{REQUIREMENTS}/{name}")


@dataclass
class Stage:
    name: str | None
    base: str
    steps: list[Step]
    bootstrap: str = "docker"


@dataclass(frozen=True)
class _CudaLayout:
    """Where a CUDA image's toolkit, NCCL and Python live, and the OS packager that installs them:
    the values every step of its two stages is written with."""
    cuda: str              # the CUDA release (13.0.1)
    mm: str                # its major.minor (13.0): CUDA_HOME, package names
    major: int
    home: str              # CUDA_HOME
    tree: str              # the cu<major> folder of NVIDIA's wheels (cuda_from: wheels)
    nccl_home: str         # NCCL's folder among NVIDIA's wheels in /opt/venv
    python: str            # the Python version, checked
    python_bin: str        # the interpreter the OS packages install
    pm: dict               # PACKAGERS[the OS family]
    from_wheels: bool      # cuda_from: wheels
    # CUDA from the repository beside PyTorch, whose wheels bring CUDA's run-time libraries: the
    # run-time stage installs cuda-compat alone, not cuda-libraries-X-Y (each library once)
    torch_libs: bool
    lib: str               # where the image's run time finds libcudart (LD_LIBRARY_PATH)

    @property
    def dash(self) -> str:     # 13-0: how NVIDIA's packages name the release
        return self.mm.replace(".", "-")

    @property
    def sfx(self) -> str:      # the packager's fragment suffix ("" for apt, -dnf)
        return self.pm["suffix"]


def _cuda_layout(spec: ImageSpec) -> _CudaLayout:
    """The layout of a CUDA image; RenderError for CUDA 12 from the wheels (no single tree)."""
    s = spec.stack
    cuda = s["cuda"]
    cuda_mm = major_minor(cuda)
    cuda_major = parse_version(cuda).major
    py = _safe("version", s["python"], "python")
    pm = PACKAGERS[spec.os["family"]]
    site = f"/opt/venv/lib/python{py}/site-packages/nvidia"
    wheels_cuda = spec.cuda_from == "wheels"
    torch_libs = not wheels_cuda and s["pytorch"] != NONE
    home = f"/usr/local/cuda-{cuda_mm}"
    lib = f"{home}/lib64"
    if torch_libs and spec.flavor == "runtime":
        # torch's nvidia-cuda-runtime wheel: nvidia/cu13/lib, or nvidia/cuda_runtime/lib for the
        # -cu12 wheel (a devel image adds the toolkit, whose lib64 then holds it)
        lib = f"{site}/{f'cu{cuda_major}' if cuda_major >= 13 else 'cuda_runtime'}/lib"
    if wheels_cuda and cuda_major < 13:
        raise RenderError(f"image {spec.id}: CUDA {cuda} from the wheels: only the CUDA 13 wheels "
                          "install one tree (nvidia/cu13) that can serve as CUDA_HOME; the CUDA 12 "
                          "wheels put each component in a folder of its own")
    return _CudaLayout(cuda=cuda, mm=cuda_mm, major=cuda_major, home=home,
                       tree=f"{site}/cu{cuda_major}", nccl_home=f"{site}/nccl", python=py,
                       python_bin=pm["python"].format(python=py), pm=pm, from_wheels=wheels_cuda,
                       torch_libs=torch_libs, lib=lib)


def _tarballs(spec: ImageSpec, k) -> dict[str, dict]:
    """The tarballs of the compiled blocks (sources.for_image, in the family's form), each as the
    values its fragment reads: name, version, form, file, sha256, all checked."""
    try:
        tarballs = {t.name: t for t in S.for_image(k, spec, spec.sources)}
    except S.SourceError as exc:
        raise RenderError(str(exc)) from None

    def tarball(name: str) -> dict:
        t = tarballs[name]
        return {"name": name, "version": _safe("version", t.version, f"{name} version"),
                "form": t.form, "file": _safe("word", t.file, f"{name} tarball file"),
                "sha256": _safe("sha256", t.sha256, f"{name} sha256")}

    return {b.name: tarball(b.name) for b in blocks.BLOCKS}


def _os_extras(c: _CudaLayout, tarballs: dict[str, dict], rdma_dev: list[str],
               build: dict) -> tuple[list[str], list[str]]:
    """The OS packages each stage adds to its fragment's own: what the blocks' tarball forms need
    (blocks.os_extras), OpenMP's run time, and the RDMA headers when CUDA (whose devel packages
    bring them otherwise) comes from the wheels."""
    name = c.pm["name"]
    devel_extra, runtime_extra = blocks.os_extras(name, {n: t["form"] for n, t in tarballs.items()}, build)
    runtime_extra.append(OPENMP_RUNTIME[name])
    if c.from_wheels:
        devel_extra += rdma_dev
    return sorted(set(devel_extra)), sorted(set(runtime_extra))


class Renderer:
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

    def fragment(self, fragment: str, comment: str, **ctx) -> Step:
        path = f"fragments/{fragment}.sh.j2"
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
        sources = [_safe("word", ln.split(None, 1)[1], "source file") for ln in lines
                   if ln.startswith("#source ")]
        lines = [ln for ln in lines if not ln.startswith("#source ")]
        downloads = any(ln.startswith(("curl ", "/opt/venv/bin/python -m pip install"))
                        and "--no-index" not in ln for ln in lines)
        return Step("run", comment=comment, commands=lines, workdir=workdir, downloads=downloads,
                    fragment=fragment, sources=sources)

    # ---------------------------------------------------------------------------------------------

    def stages(self, spec: ImageSpec, k) -> list[Stage]:
        s = spec.stack
        for comp, val in s.items():
            if comp in ("os", "platform"):
                _safe("id", val, comp)
            elif val != NONE:
                _safe("version", val, comp)
        base = _safe("ref", spec.os.get("base") or "", f"base image of {spec.os['id']}")
        _safe("id", spec.id, "image id")
        _safe("text", spec.description, f"description of {spec.id}")
        if spec.flavor == "cpu" or (spec.cuda_from == "wheels" and not spec.compiles):
            return self._os_mpi_stages(spec, base, k)
        if spec.os["family"] not in PACKAGERS:
            raise RenderError(f"image {spec.id}: CUDA recipes are written for "
                              f"{', '.join(sorted(PACKAGERS))}; {spec.os['id']} "
                              f"({spec.os['family']}) has none")
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
        if spec.cuda_from == "wheels" and s["cuda"] != NONE:
            if spec.wheels == "host":
                raise RenderError(f"image {spec.id}: CUDA from the wheels comes from the package "
                                  "index through the wheel lock, not from host wheels")
            return [Stage(None, base, [
                self.fragment("debian-mpi", "OS packages: Debian's Open MPI and UCX, Python",
                              openmpi=s["openmpi"], ucx=s["ucx"], python=s["python"]),
                self._openssh(""),
                self.fragment("venv", "Python virtual environment", python_bin="python3"),
                *self._torch_steps(spec, k),
                *self._common_tail(spec, "/opt/venv/bin/python"),
                Step("env", items=sorted(self.env_vars(spec).items())),
                Step("label", items=image_labels(spec, k)),
            ])]
        if spec.wheels != "host":
            raise RenderError(f"image {spec.id}: a CPU image installs PyTorch from host wheels "
                              "(wheels: host)")
        os_step = self.fragment("debian-mpi", "OS packages: Debian's Open MPI and UCX, Python",
                                openmpi=s["openmpi"], ucx=s["ucx"], python=s["python"])
        stages = []
        steps = [os_step, self._openssh("")]
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
        steps.append(Step("env", items=sorted(self.env_vars(spec).items())))
        steps.append(Step("label", items=image_labels(spec, k)))
        stages.append(Stage(None, base, steps))
        return stages

    def _cuda_stages(self, spec: ImageSpec, k, base: str) -> list[Stage]:
        """A devel stage that compiles gdrcopy, UCX, Open MPI and nccl-tests against CUDA, and a
        run-time stage that copies their prefixes (a devel image is FROM that runtime image:
        _devel_on_runtime). CUDA comes from NVIDIA's
        repository for the OS (pinned packages) or from NVIDIA's wheels (`cuda_from: wheels`: the
        cuda-toolkit wheels in the devel stage, the run-time subset of the same lock in the
        run-time stage); everything else is the same fragments either way."""
        c = _cuda_layout(spec)
        tarballs = _tarballs(spec, k)
        if spec.stack["nccl"] == NONE:
            raise RenderError(f"image {spec.id}: a CUDA image needs an NCCL version")
        doca_repo, doca_copies, rdma_pk, rdma_name = self._rdma(spec, c.pm)
        rdma_dev = rdma_pk.get("devel") or RDMA_DEVEL[c.pm["name"]]
        devel_extra, runtime_extra = _os_extras(c, tarballs, rdma_dev, spec.build_choices)
        devel = self._devel_steps(spec, k, c, tarballs, devel_extra, doca_repo, rdma_dev)
        torch_steps = self._torch_steps(spec, k)
        tail = self._common_tail(spec, "/opt/venv/bin/python")
        final = [Step("env", items=sorted(self.env_vars(spec, c).items())),
                 Step("label", items=image_labels(spec, k))]
        runtime = self._runtime_steps(spec, c, runtime_extra, doca_copies, rdma_pk, rdma_name)
        return [Stage("devel", base, devel), Stage(None, base, runtime + torch_steps + tail + final)]

    def _cuda_devel(self, spec: ImageSpec, k, c: _CudaLayout, doca_repo: list[Step],
                    rdma_dev: list[str]) -> tuple[list[Step], list[Step]]:
        """The devel stage's CUDA, and its NCCL: NVIDIA's wheels (CUDA and NCCL in one step, from
        the image's lock), or NVIDIA's repository with its key checked (the DOCA repository beside
        it, CUDA's devel packages with the RDMA headers) and NCCL's wheel from the lock's subset."""
        s = spec.stack
        if c.from_wheels:
            cuda_devel = [
                self.fragment("venv", "Python virtual environment", python_bin=c.python_bin),
                _lock_copy("wheels.txt"),
                self.fragment("cuda-wheels-devel", f"CUDA {c.cuda} and NCCL {s['nccl']} from "
                              "NVIDIA's wheels, link-time stubs of the driver's libraries",
                              cuda=c.cuda, cuda_major=c.major, cuda_home=c.home,
                              cuda_tree=c.tree, nccl_home=c.nccl_home, on_runtime=False),
            ]
            return cuda_devel, []
        repo = _safe("word", spec.os.get("nvidia_repo") or "",
                     f"NVIDIA repository of {spec.os['id']}")
        key = k.raw.get("tools", {}).get(c.pm["key"], {})
        key_url = _format_url(key.get("url", ""), "CUDA repository key URL", repo=repo)
        repo_url = _safe("url", "https://developer.download.nvidia.com/compute/cuda/repos/"
                         f"{repo}/x86_64/", "CUDA repository URL")
        cuda_devel = [
            self.fragment("cuda-repo" + c.sfx, "NVIDIA's CUDA repository, key fingerprint checked",
                          key_url=key_url, key_fingerprint=_safe(
                              "fingerprint", key.get("fingerprint", ""), "CUDA key fingerprint"),
                          repo_url=repo_url),
            *doca_repo,
            self.fragment("cuda-devel" + c.sfx, f"CUDA {c.cuda} development packages and RDMA headers",
                          cuda=c.cuda, cuda_dash=c.dash, rdma_dev=rdma_dev),
        ]
        nccl_devel = [
            self.fragment("venv", "Python virtual environment", python_bin=c.python_bin),
            _lock_copy("nccl.txt"),
            self.fragment("nccl", f"NCCL {s['nccl']}", nccl=s["nccl"], cuda_major=c.major,
                          nccl_home=c.nccl_home, pytorch=s["pytorch"]),
        ]
        return cuda_devel, nccl_devel

    def _devel_steps(self, spec: ImageSpec, k, c: _CudaLayout, tarballs: dict[str, dict],
                     devel_extra: list[str], doca_repo: list[Step], rdma_dev: list[str]) -> list[Step]:
        """The devel stage up to the compiled stack: build tools, CUDA, the blocks built before
        NCCL (gdrcopy, UCX, Open MPI with the matrix's source date), NCCL, then those that link it
        (nccl-tests), in that layer order."""
        cuda_devel, nccl_devel = self._cuda_devel(spec, k, c, doca_repo, rdma_dev)
        return [
            self.fragment("os-devel" + c.sfx, "OS build tools (devel stage only)", python=c.python,
                          extra=devel_extra),
            *cuda_devel,
            *self._compiled(spec, c, tarballs, on_nccl=False),
            *nccl_devel,
            *self._compiled(spec, c, tarballs, on_nccl=True),
        ]

    def _compiled(self, spec: ImageSpec, c: _CudaLayout, tarballs: dict[str, dict],
                  on_nccl: bool) -> list[Step]:
        """One step per building block (blocks.BLOCKS) of the group built before NCCL, or on it."""
        steps = []
        for b in blocks.BLOCKS:
            if b.on_nccl != on_nccl:
                continue
            tarball = tarballs[b.name]
            built = blocks.Built(spec=spec, cuda_home=c.home, nccl_home=c.nccl_home, form=tarball["form"])
            steps.append(self.fragment(b.name, b.title.format(version=tarball["version"]),
                                       **b.values(built), **tarball))
        return steps

    def _devel_on_runtime(self, spec: ImageSpec, k) -> Stage:
        """A devel image: one stage FROM its runtime image (spec.from_image, the same stack), which
        already holds the compiled prefixes (/opt/gdrcopy, /opt/ucx, /opt/openmpi,
        /opt/nccl-tests), the venv with NCCL (and PyTorch) and sshd, so nothing is compiled again
        and every layer of the runtime image is shared. On top: the OS build tools and the
        devel stage's extras, CUDA's development packages (NVIDIA's repository as the runtime
        image kept it, with the RDMA headers; or the cuda-toolkit wheels of the image's lock and
        the driver stubs), then its own image.json, pip constraints, env and labels."""
        if not spec.from_image or not spec.depends_on:
            raise RenderError(f"image {spec.id}: a devel image is built FROM its runtime image, "
                              "and it names none")
        base = _safe("ref", spec.from_image, f"runtime image of {spec.id}")
        c = _cuda_layout(spec)
        if spec.stack["nccl"] == NONE:
            raise RenderError(f"image {spec.id}: a CUDA image needs an NCCL version")
        tarballs = _tarballs(spec, k)
        _, _, rdma_pk, _ = self._rdma(spec, c.pm)
        rdma_dev = rdma_pk.get("devel") or RDMA_DEVEL[c.pm["name"]]
        devel_extra, _ = _os_extras(c, tarballs, rdma_dev, spec.build_choices)
        steps = [self.fragment("os-devel" + c.sfx, "OS build tools and headers", python=c.python,
                               extra=devel_extra)]
        if c.from_wheels:
            steps += [
                _lock_copy("wheels.txt"),
                self.fragment("cuda-wheels-devel", f"CUDA {c.cuda} toolkit from NVIDIA's wheels "
                              "beside the runtime image's run time and NCCL, link-time stubs of "
                              "the driver's libraries",
                              cuda=c.cuda, cuda_major=c.major, cuda_home=c.home, cuda_tree=c.tree,
                              nccl_home=c.nccl_home, on_runtime=True),
                *self._pip_constraint(spec),
            ]
        else:   # the runtime image keeps the CUDA (and DOCA) repository the devel stage verified
            steps.append(self.fragment("cuda-devel" + c.sfx, f"CUDA {c.cuda} development packages "
                                       "and RDMA headers", cuda=c.cuda, cuda_dash=c.dash,
                                       rdma_dev=rdma_dev))
        steps += [
            Step("copy", comment="what the image is expected to contain (this image's id and flavor)",
                 src="image.json", dest="/opt/imagebuild/image.json"),
            Step("env", items=sorted(self.env_vars(spec, c).items())),
            Step("label", items=image_labels(spec, k)),
        ]
        return Stage(None, base, steps, bootstrap="docker-daemon")

    def _cuda_runtime(self, spec: ImageSpec, c: _CudaLayout) -> tuple[list[Step], list[Step]]:
        """The run-time stage's CUDA (before the copied prefixes) and its CUDA and NCCL libraries
        (after the venv): from the run-time subset of the wheel lock, or from NVIDIA's repository
        as the devel stage verified it and NCCL's wheel."""
        s = spec.stack
        if c.from_wheels:
            return [], [
                _lock_copy("runtime.txt"),
                self.fragment("cuda-wheels-runtime", f"CUDA {c.cuda} run time and NCCL {s['nccl']} "
                              "from NVIDIA's wheels", cuda=c.cuda, cuda_home=c.home, cuda_tree=c.tree),
            ]
        key_file, repo_file = c.pm["repo_files"]
        cuda_runtime = [
            Step("copy", comment="the CUDA repository as the devel stage verified it",
                 from_stage="devel", src=key_file, dest=key_file),
            Step("copy", from_stage="devel", src=repo_file, dest=repo_file),
            self._cuda_runtime_packages(spec, c),
        ]
        cuda_libs = [
            _lock_copy("nccl.txt"),
            self.fragment("nccl", f"NCCL {s['nccl']}", nccl=s["nccl"], cuda_major=c.major,
                          nccl_home=c.nccl_home, pytorch=s["pytorch"]),
        ]
        return cuda_runtime, cuda_libs

    def _cuda_runtime_packages(self, spec: ImageSpec, c: _CudaLayout) -> Step:
        """NVIDIA's run-time packages: cuda-compat always; cuda-libraries-X-Y only without PyTorch,
        whose wheels bring the same libraries (UCX and nccl-tests then load torch's libcudart)."""
        if not c.torch_libs:
            return self.fragment("cuda-runtime" + c.sfx, f"CUDA {c.cuda} run-time libraries",
                                 cuda=c.cuda, cuda_dash=c.dash, libraries=True)
        return self.fragment("cuda-runtime" + c.sfx, f"CUDA {c.cuda} forward compatibility; its "
                             "libraries come once, from PyTorch's wheels", cuda=c.cuda,
                             cuda_dash=c.dash, libraries=False)

    def _runtime_steps(self, spec: ImageSpec, c: _CudaLayout, runtime_extra: list[str],
                       doca_copies: list[Step], rdma_pk: dict, rdma_name: str) -> list[Step]:
        """The run-time stage up to PyTorch: OS packages without a compiler, sshd, CUDA, the RDMA
        user space, the prefixes the devel stage compiled, and the venv with CUDA's and NCCL's
        libraries."""
        cuda_runtime, cuda_libs = self._cuda_runtime(spec, c)
        return [
            self.fragment("os-runtime" + c.sfx, "OS run-time packages (no compiler)", python=c.python,
                          extra=runtime_extra),
            self._openssh(c.sfx),
            *cuda_runtime,
            *doca_copies,
            self.fragment("rdma-runtime" + c.sfx, f"RDMA user space: {rdma_name}",
                          packages=rdma_pk.get("runtime"), rdma_name=rdma_name),
            *[Step("copy", comment=None if i else "install prefixes built in the devel stage",
                   from_stage="devel", src=b.prefix, dest=b.prefix) for i, b in enumerate(blocks.BLOCKS)],
            self.fragment("venv", "Python virtual environment", python_bin=c.python_bin),
            *cuda_libs,
        ]

    def _openssh(self, sfx: str) -> Step:
        """OpenSSH client and server, in every image with Open MPI: mpirun reaches other hosts
        over ssh where no Slurm runs (`imagebuild test`'s mpi.two-container does)."""
        return self.fragment("openssh" + sfx, "OpenSSH for mpirun across hosts (no host keys in "
                             "the image)")

    def _torch_steps(self, spec: ImageSpec, k) -> list[Step]:
        """PyTorch's CUDA build and its whole closure from the image's wheel lock (none without
        PyTorch): PyPI's default build from the configured index, another from PyTorch's own."""
        s = spec.stack
        if s["pytorch"] == NONE:
            return []
        var = k.variants[(s["pytorch"], major_minor(s["cuda"]))]
        index_url = None
        if not var.default:
            idx = k.raw.get("tools", {}).get("pytorch-index", {}).get("url", "")
            index_url = _format_url(idx, "PyTorch index URL", tag=var.tag)
        return [_lock_copy("wheels.txt"),
                self.fragment("pytorch", f"PyTorch {s['pytorch']}+{var.tag}", pytorch=s["pytorch"],
                              variant_tag=var.tag, index_url=index_url)]

    def _rdma(self, spec: ImageSpec, pm: dict):
        """(devel steps, runtime copies, package lists, name) of the image's RDMA user space. The
        distribution's rdma-core passes no package lists: its fragments name their own packages."""
        r = spec.rdma
        if r is None:
            return [], [], {}, "the distribution's rdma-core"
        name = f"{_safe('text', r['name'], 'rdma name')} {_safe('version', r['version'], 'rdma version')}"
        if pm["name"] not in r["packages"]:
            raise RenderError(f"image {spec.id}: {name} lists no {pm['name']} packages")
        pk = {f: [_safe("package", p, f"{r['id']} package") for p in r["packages"][pm["name"]][f]]
              for f in ("runtime", "devel")}
        os_token = _safe("word", r["os"].get(spec.os["id"], ""), f"{r['id']} folder of {spec.os['id']}")
        url = _format_url(r["repo"], f"{r['id']} repository URL", version=r["version"], os=os_token)
        host = _safe("host", url.split("/")[2], f"{r['id']} repository host")
        key_url = _safe("url", r["key"]["url"], f"{r['id']} key URL")
        step = self.fragment("doca-repo" + pm["suffix"], f"{name} repository (user space only), key checked",
                             version=r["version"], key_url=key_url, repo_url=url, repo_host=host,
                             **_key_check(r["key"], r["id"]))
        files = pm["doca_files"]
        copies = [Step("copy", comment=f"the {name} repository as the devel stage verified it",
                       from_stage="devel", src=files[0], dest=files[0])]
        copies += [Step("copy", from_stage="devel", src=f, dest=f) for f in files[1:]]
        return [step], copies, pk, name

    def env_vars(self, spec: ImageSpec, c: _CudaLayout | None = None) -> dict[str, str]:
        """Everything an image needs at run time: enroot and pyxis read ENV, not ENTRYPOINT."""
        path = ["/opt/venv/bin"]
        ld = []
        env = {"OMPI_MCA_pml": "ucx", "MELLANOX_VISIBLE_DEVICES": "all",
               "IMAGEBUILD_IMAGE_ID": spec.id}
        if spec.wheel_lock is not None:   # written by the pip-constraint fragment
            env["PIP_CONSTRAINT"] = PIP_CONSTRAINT
        if spec.stack["cuda"] != NONE:
            # what the NVIDIA container runtime reads, wherever the image's CUDA comes from
            major = parse_version(spec.stack["cuda"]).major
            env.update({
                "NVIDIA_VISIBLE_DEVICES": "all",
                "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
                # minor-version compatibility: any driver of this CUDA major from the floor up
                "NVIDIA_REQUIRE_CUDA": f"cuda>={major}.0 driver>={spec.min_driver}",
            })
        if c is not None:   # CUDA, with the building blocks compiled against it
            path += blocks.search_path("bin", None, f"{c.home}/bin")
            ld += blocks.search_path("lib", f"{c.nccl_home}/lib", c.lib)
            env.update({"CUDA_HOME": c.home, "OMPI_MCA_osc": "ucx"})
        if spec.openmpi.get("line") == "4.1":
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


# -------------------------------------------------------------------------------------------------
# The rendered text has the structure its steps make, and nothing else

DOCKER_INSTRUCTIONS = frozenset({"FROM", "SHELL", "RUN", "WORKDIR", "COPY", "ENV", "LABEL", "ARG",
                                 "ENTRYPOINT", "CMD"})


def _docker_shape(stages: list[Stage], spec: ImageSpec) -> tuple[int, int]:
    """(instructions, comment lines) the Dockerfile template lays out for these stages."""
    instructions = comments = 0
    for stage in stages:
        instructions += 2  # FROM, SHELL
        for step in stage.steps:
            instructions += (len(step.items) if step.kind == "entrypoint" else 1) + \
                (2 if step.kind == "run" and step.workdir else 0)
            comments += 1 if step.comment else 0
    comments += 3 + (1 if spec.min_driver else 0)  # generated-by, image, stack, minimum driver
    return instructions, comments


def _check_docker(text: str, stages: list[Stage], spec: ImageSpec) -> None:
    """Count the instructions and comment lines of a rendered Dockerfile (a line continues the one
    before when that ends in a backslash): they must be exactly those its steps make. A value that
    smuggled in a line would show as one instruction or comment too many."""
    instructions = comments = 0
    continued = False
    for line in text.splitlines():
        if continued:
            continued = line.endswith("\\")
            continue
        if not line.strip():
            continue
        if line.startswith("#"):
            comments += 1
            continue
        word = line.split(" ", 1)[0]
        if word not in DOCKER_INSTRUCTIONS:
            raise RenderError(f"rendered Dockerfile of {spec.id}: a line starts with {_show(word)}, "
                              "not an instruction the templates write")
        instructions += 1
        continued = line.endswith("\\")
    want = _docker_shape(stages, spec)
    if (instructions, comments) != want:
        raise RenderError(f"rendered Dockerfile of {spec.id} has {instructions} instructions and "
                          f"{comments} comment lines where its steps make {want[0]} and {want[1]}: "
                          "a value changed the recipe's structure")


def _check_singularity(text: str, stages: list[Stage] | None, spec: ImageSpec, name: str) -> None:
    """Count the sections (%post, %files, ...) and Bootstrap headers of a rendered definition."""
    if stages is None:  # from-image.def: one header; %environment, %labels, %test, %runscript
        want_sections, want_headers = 4, 1
    else:
        want_headers = len(stages)
        want_sections = 4  # the last stage's %environment, %labels, %test, %runscript
        for stage in stages:
            copies = [s for s in stage.steps if s.kind == "copy"]
            want_sections += 1  # %post
            tarballs = any(s.sources for s in stage.steps if s.kind == "run")
            want_sections += 1 if tarballs or any(not c.from_stage for c in copies) else 0
            want_sections += len({c.from_stage for c in copies if c.from_stage})
    sections = sum(1 for ln in text.splitlines() if ln.lstrip().startswith("%"))
    headers = sum(1 for ln in text.splitlines() if ln.lstrip().startswith("Bootstrap:"))
    if (sections, headers) != (want_sections, want_headers):
        raise RenderError(f"rendered {name} for {spec.id} has {sections} sections and {headers} "
                          f"headers where its steps make {want_sections} and {want_headers}: a "
                          "value changed the definition's structure")
