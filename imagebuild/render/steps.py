"""A recipe as data, before any text: steps (run a fragment, copy, env, label) in stages, and
what the stages are laid out from: an image's CUDA layout (the release's package names, the
packager), its wheel lock and labels, the source tarballs it compiles and the OS packages those
add. The renderer (renderer.py, cudastages.py) builds the stages; shape.py checks the text."""

from __future__ import annotations
from dataclasses import dataclass, field
from .. import labels as L
from . import blocks, sources as S
from .checked import safe as _safe
from ..errors import RenderError
from .images import ImageSpec
from ..packagers import PACKAGERS, packages
from ..versions import NONE, major_minor, parse_version
from .wheellock import LockError, read_lock, wheel_set

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
    keep: bool = False              # its workdir stays after it (a later stage copies the tree)


REQUIREMENTS = "/opt/imagebuild/requirements"
PIP_CONSTRAINT = "/etc/pip/constraint.txt"
# the Docker ENTRYPOINT of every image (written by the smoke fragment): imagebuild-check, then exec
ENTRYPOINT = "/usr/local/bin/imagebuild-entrypoint"


def _key_check(key, what: str) -> dict:
    """How a fetched key is checked: its full fingerprint when the knowledge has one, else its
    64-bit key id (the fact is then unverified, and such images are only made on request)."""
    if key.fingerprint:
        return {"key_record": "fpr", "key_field": 10,
                "key_value": _safe("fingerprint", key.fingerprint, f"{what} key fingerprint")}
    return {"key_record": "pub", "key_field": 5,
            "key_value": _safe("keyid", key.long_id or "", f"{what} key id")}


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
        labels[L.WHEELS_LOCK] = f"sha256:{lock.sha256}"
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

    def os_packages(self, role: str) -> list[str]:
        """The OS packages of ``role`` in this image's package manager row (packagers.py)."""
        return packages(self.pm, role, python=self.python, cuda_dash=self.dash)


def _cuda_layout(spec: ImageSpec) -> _CudaLayout:
    """The layout of a CUDA image; RenderError for CUDA 12 from the wheels (no single tree)."""
    s = spec.stack
    cuda = s["cuda"]
    cuda_mm = major_minor(cuda)
    cuda_major = parse_version(cuda).major
    py = _safe("version", s["python"], "python")
    pm = PACKAGERS[spec.os.family]
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
    values its fragment reads: name, version, form, file, sha256, all checked (none for an image
    that compiles nothing from upstream sources)."""
    if not spec.compiles:
        return {}
    try:
        tarballs = {t.name: t for t in S.for_image(k, spec, spec.sources)}
    except S.SourceError as exc:
        raise RenderError(str(exc)) from None

    def tarball(name: str) -> dict:
        t = tarballs[name]
        return {"name": name, "version": _safe("version", t.version, f"{name} version"),
                "form": t.form, "file": _safe("word", t.file, f"{name} tarball file"),
                "sha256": _safe("sha256", t.sha256, f"{name} sha256")}

    return {b.name: tarball(b.name) for b in blocks.for_image(spec)}


def _os_extras(c: _CudaLayout, tarballs: dict[str, dict], rdma_dev: list[str],
               build: dict) -> tuple[list[str], list[str]]:
    """The OS packages each stage adds to its fragment's own: what the blocks' tarball forms and
    run times need (blocks.os_extras: UCX's OpenMP among them), and the RDMA headers when CUDA
    (whose devel packages bring them otherwise) comes from the wheels."""
    devel_extra, runtime_extra = (blocks.os_extras(c.pm, {n: t["form"] for n, t in tarballs.items()}, build)
                                  if tarballs else ([], []))
    if c.from_wheels:
        devel_extra += rdma_dev
    return sorted(set(devel_extra)), sorted(set(runtime_extra))
