"""ImageSpec -> Dockerfile and Singularity/Apptainer definition text.

A recipe is first built as data: stages of steps (run a fragment, copy, env, label). Each `run`
step renders one component fragment from recipes/fragments/ (the same shell text serves both
formats); the entry templates in recipes/docker and recipes/singularity only lay the steps out.
Every value that reaches a shell line is checked against a strict pattern first (`_safe`).

Layer order follows change frequency (OS, CUDA, rdma-core, gdrcopy, UCX, Open MPI, NCCL,
nccl-tests, Python, PyTorch, smoke suite), so images of one matrix share their lower layers.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .errors import RenderError
from .images import ImageSpec
from .versions import NONE, major_minor, parse_version

ROOT = Path(__file__).resolve().parent.parent
RECIPES = ROOT / "recipes"

_PATTERNS = {
    "version": re.compile(r"^[0-9]+(\.[0-9]+){0,4}$"),
    "id": re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}$"),
    "url": re.compile(r"^https://[A-Za-z0-9.-]+(/[A-Za-z0-9._~%+-]+)*/?$"),
    "sha256": re.compile(r"^[0-9a-f]{64}$"),
    "path": re.compile(r"^/[A-Za-z0-9._/-]*$"),
    "ref": re.compile(r"^[a-z0-9][a-z0-9._/-]*(:[A-Za-z0-9._-]{1,128})?(@sha256:[0-9a-f]{64})?$"),
    "fingerprint": re.compile(r"^[0-9A-F]{40}$"),
    "word": re.compile(r"^[A-Za-z0-9._-]+$"),
    "text": re.compile(r"^[A-Za-z0-9 ,.:;()/+_=<>-]*$"),
    "env": re.compile(r"^[A-Za-z0-9 ,.:;/+_=<>^-]*$"),
}


def _safe(kind: str, value, what: str) -> str:
    """A value that may reach a shell line, or RenderError naming it."""
    text = str(value)
    if ".." in text and kind in ("path", "url", "ref", "id"):
        raise RenderError(f"unsafe {what} {text!r}: '..' is not allowed")
    if not _PATTERNS[kind].match(text) or "\n" in text:
        raise RenderError(f"unsafe {what} {text!r} (must match {_PATTERNS[kind].pattern})")
    return text


# A site's CA bundle (`imagebuild build --ca-bundle FILE`, a BuildKit secret) is used by the steps
# that download, and never stored in a layer. Without one, the secret file is absent and the
# distribution's own CAs are used.
CA_PRELUDE = ('if [ -s /run/secrets/ca-bundle ]; then export CURL_CA_BUNDLE=/run/secrets/ca-bundle '
              'PIP_CERT=/run/secrets/ca-bundle SSL_CERT_FILE=/run/secrets/ca-bundle; fi')


@dataclass
class Step:
    kind: str                       # run | copy | env | label
    comment: str | None = None
    commands: list[str] = field(default_factory=list)
    workdir: str | None = None
    src: str | None = None
    dest: str | None = None
    from_stage: str | None = None
    items: list[tuple[str, str]] = field(default_factory=list)
    downloads: bool = False         # fetches over TLS: gets the site CA bundle when one is given
    fragment: str | None = None     # the recipes/fragments/<name>.sh.j2 a run step came from


@dataclass
class Stage:
    name: str | None
    base: str
    steps: list[Step]
    bootstrap: str = "docker"


class Renderer:
    """Holds one Jinja2 environment for many specs (templates are compiled once)."""

    def __init__(self, recipes: Path = RECIPES):
        try:
            import jinja2
        except ImportError:  # pragma: no cover - a dependency
            raise RenderError("jinja2 is not installed") from None
        self.recipes = Path(recipes)
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
        downloads = any(ln.startswith(("curl ", "/opt/venv/bin/python -m pip install"))
                        and "--no-index" not in ln for ln in lines)
        return Step("run", comment=comment, commands=lines, workdir=workdir, downloads=downloads,
                    fragment=fragment)

    # ---------------------------------------------------------------------------------------------

    def stages(self, spec: ImageSpec, k) -> list[Stage]:
        s = spec.stack
        for comp, val in s.items():
            if comp == "os":
                _safe("id", val, "os")
            elif val != NONE:
                _safe("version", val, comp)
        base = _safe("ref", spec.os.get("base") or "", f"base image of {spec.os['id']}")
        if spec.flavor == "cpu":
            return self._cpu_stages(spec, base)
        if spec.os["family"] != "ubuntu":
            raise RenderError(f"image {spec.id}: CUDA recipes are written for Ubuntu; "
                              f"{spec.os['id']} ({spec.os['family']}) has none yet")
        return self._cuda_stages(spec, k, base)

    def _common_tail(self, spec: ImageSpec, python_bin: str) -> list[Step]:
        return [
            Step("copy", comment="the smoke suite and what the image is expected to contain",
                 src="lib/", dest="/opt/imagebuild/lib/"),
            Step("copy", src="image.json", dest="/opt/imagebuild/image.json"),
            self.fragment("smoke", "smoke suite entry points", python_bin=python_bin),
        ]

    def _cpu_stages(self, spec: ImageSpec, base: str) -> list[Stage]:
        """Debian's MPI and UCX; PyTorch installed from host wheels in a stage of its own, so the
        wheels never reach a layer of the image (only the installed /opt/venv is copied)."""
        s = spec.stack
        if spec.wheels != "host":
            raise RenderError(f"image {spec.id}: a CPU image installs PyTorch from host wheels "
                              "(wheels: host)")
        os_step = self.fragment("debian-mpi", "OS packages: Debian's Open MPI and UCX, Python",
                                openmpi=s["openmpi"], ucx=s["ucx"], python=s["python"])
        stages = []
        steps = [os_step]
        if s["pytorch"] != NONE:
            stages.append(Stage("torch", base, [
                os_step,
                Step("copy", comment="PyTorch wheels gathered on the host (offline install)",
                     src="wheels/", dest="/tmp/wheels/"),
                self.fragment("torch-wheels", "PyTorch (CPU)", pytorch=s["pytorch"]),
            ]))
            steps.append(Step("copy", comment="PyTorch as the torch stage installed it",
                              from_stage="torch", src="/opt/venv", dest="/opt/venv"))
        steps += self._common_tail(spec, "/opt/venv/bin/python")
        steps.append(Step("env", items=sorted(self.env_vars(spec).items())))
        steps.append(Step("label", items=sorted(spec.labels.items())))
        stages.append(Stage(None, base, steps))
        return stages

    def _cuda_stages(self, spec: ImageSpec, k, base: str) -> list[Stage]:
        s = spec.stack
        tools = k.raw.get("tools", {})
        cuda = s["cuda"]
        cuda_mm = major_minor(cuda)
        cuda_dash = cuda_mm.replace(".", "-")
        cuda_major = parse_version(cuda).major
        cuda_home = f"/usr/local/cuda-{cuda_mm}"
        py = _safe("version", s["python"], "python")
        nccl_home = f"/opt/venv/lib/python{py}/site-packages/nvidia/nccl"
        repo = _safe("word", spec.os.get("nvidia_repo") or "", f"NVIDIA repository of {spec.os['id']}")
        key = tools.get("cuda-repo-key", {})
        key_url = _safe("url", str(key.get("url", "")).format(repo=repo), "CUDA repository key URL")
        repo_url = _safe("url", f"https://developer.download.nvidia.com/compute/cuda/repos/{repo}/x86_64/",
                         "CUDA repository URL")

        def tarball(name: str, entry: dict) -> dict:
            ver = _safe("version", entry["version"], f"{name} version")
            if not entry.get("url") or not entry.get("sha256"):
                raise RenderError(f"{name} {ver} has no url and sha256 in matrix.yaml: "
                                  "nothing is downloaded unverified")
            return {"name": name, "version": ver,
                    "url": _safe("url", str(entry["url"]).format(version=ver), f"{name} URL"),
                    "sha256": _safe("sha256", entry["sha256"], f"{name} sha256")}

        ucx = tarball("ucx", spec.ucx)
        ompi = tarball("openmpi", spec.openmpi)
        gdr = tarball("gdrcopy", tools.get("gdrcopy", {}))
        ntests = tarball("nccl-tests", tools.get("nccl-tests", {}))
        ucx_flags = sorted({"--disable-doxygen-doc", "--enable-mt", "--prefix=/opt/ucx",
                            f"--with-cuda={cuda_home}", "--with-gdrcopy=/opt/gdrcopy",
                            "--with-rdmacm", "--with-verbs"})
        ompi_flags = {"--prefix=/opt/openmpi", f"--with-cuda={cuda_home}", "--with-slurm",
                      "--with-ucx=/opt/ucx", "--with-pmix=internal", "--with-hwloc=internal",
                      "--with-libevent=internal", "--enable-mca-no-build=btl-uct"}
        if spec.openmpi.get("line") == "4.1":
            ompi_flags |= {"--without-verbs", "--enable-orterun-prefix-by-default"}
        else:
            ompi_flags |= {"--with-prrte=internal", f"--with-cuda-libdir={cuda_home}/lib64/stubs"}
        ompi_flags = sorted(ompi_flags)
        nccl = s["nccl"]
        if nccl == NONE:
            raise RenderError(f"image {spec.id}: a CUDA image needs an NCCL version")

        devel = [
            self.fragment("os-devel", "OS build tools (devel stage only)"),
            self.fragment("cuda-repo", "NVIDIA's CUDA repository, key fingerprint checked",
                          key_url=key_url, key_fingerprint=_safe("fingerprint", key.get("fingerprint", ""),
                                                                 "CUDA key fingerprint"),
                          repo_url=repo_url),
            self.fragment("cuda-devel", f"CUDA {cuda} development packages and rdma-core headers",
                          cuda=cuda, cuda_dash=cuda_dash),
            self.fragment("gdrcopy", f"gdrcopy {gdr['version']} (user space)", cuda_home=cuda_home,
                          **gdr),
            self.fragment("ucx", f"UCX {ucx['version']}", flags=ucx_flags, **ucx),
            self.fragment("openmpi", f"Open MPI {ompi['version']}", flags=ompi_flags, **ompi),
            self.fragment("venv", "Python virtual environment"),
            self.fragment("nccl", f"NCCL {nccl}", nccl=nccl, cuda_major=cuda_major,
                          nccl_home=nccl_home, pytorch=s["pytorch"]),
            self.fragment("nccl-tests", f"nccl-tests {ntests['version']}", cuda_home=cuda_home,
                          nccl_home=nccl_home, **ntests),
        ]
        torch_steps = []
        if s["pytorch"] != NONE:
            var = k.variants[(s["pytorch"], cuda_mm)]
            index_url = None
            if not var.default:
                idx = tools.get("pytorch-index", {}).get("url", "")
                index_url = _safe("url", str(idx).format(tag=var.tag), "PyTorch index URL")
            torch_steps.append(self.fragment("pytorch", f"PyTorch {s['pytorch']}+{var.tag}",
                                             pytorch=s["pytorch"], variant_tag=var.tag,
                                             index_url=index_url))
        tail = self._common_tail(spec, "/opt/venv/bin/python")
        final = [Step("env", items=sorted(self.env_vars(spec, cuda_home, nccl_home).items())),
                 Step("label", items=sorted(spec.labels.items()))]
        if spec.flavor == "devel":
            return [Stage("devel", base, devel + torch_steps + tail + final)]
        runtime = [
            self.fragment("os-runtime", "OS run-time packages (no compiler)"),
            Step("copy", comment="the CUDA repository as the devel stage verified it",
                 from_stage="devel", src="/usr/share/keyrings/cuda-archive-keyring.gpg",
                 dest="/usr/share/keyrings/cuda-archive-keyring.gpg"),
            Step("copy", from_stage="devel", src="/etc/apt/sources.list.d/cuda.list",
                 dest="/etc/apt/sources.list.d/cuda.list"),
            self.fragment("cuda-runtime", f"CUDA {cuda} run-time libraries", cuda=cuda,
                          cuda_dash=cuda_dash),
            self.fragment("rdma-runtime", "rdma-core user space (verbs, rdmacm, providers)"),
            Step("copy", comment="install prefixes built in the devel stage", from_stage="devel",
                 src="/opt/gdrcopy", dest="/opt/gdrcopy"),
            Step("copy", from_stage="devel", src="/opt/ucx", dest="/opt/ucx"),
            Step("copy", from_stage="devel", src="/opt/openmpi", dest="/opt/openmpi"),
            Step("copy", from_stage="devel", src="/opt/nccl-tests", dest="/opt/nccl-tests"),
            self.fragment("venv", "Python virtual environment"),
            self.fragment("nccl", f"NCCL {nccl}", nccl=nccl, cuda_major=cuda_major,
                          nccl_home=nccl_home, pytorch=s["pytorch"]),
        ]
        return [Stage("devel", base, devel), Stage(None, base, runtime + torch_steps + tail + final)]

    def env_vars(self, spec: ImageSpec, cuda_home: str | None = None,
                 nccl_home: str | None = None) -> dict[str, str]:
        """Everything an image needs at run time: enroot and pyxis read ENV, not ENTRYPOINT."""
        path = ["/opt/venv/bin"]
        ld = []
        env = {"OMPI_MCA_pml": "ucx", "MELLANOX_VISIBLE_DEVICES": "all",
               "IMAGEBUILD_IMAGE_ID": spec.id}
        if cuda_home:
            path += ["/opt/openmpi/bin", "/opt/ucx/bin", "/opt/nccl-tests/bin", f"{cuda_home}/bin"]
            ld += ["/opt/openmpi/lib", "/opt/ucx/lib", "/opt/gdrcopy/lib", f"{nccl_home}/lib",
                   f"{cuda_home}/lib64"]
            major = parse_version(spec.stack["cuda"]).major
            env.update({
                "CUDA_HOME": cuda_home,
                "NVIDIA_VISIBLE_DEVICES": "all",
                "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
                # minor-version compatibility: any driver of this CUDA major from the floor up
                "NVIDIA_REQUIRE_CUDA": f"cuda>={major}.0 driver>={spec.min_driver}",
                "OMPI_MCA_osc": "ucx",
            })
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
                            env_items=env, label_items=sorted(spec.labels.items()))

    def singularity_from_image(self, spec: ImageSpec, k) -> str:
        stages = self.stages(spec, k)
        env = next(s.items for s in stages[-1].steps if s.kind == "env")
        _safe("ref", spec.local_ref, "image reference")
        return self._render("singularity/from-image.def.j2", spec=spec, env_items=env,
                            label_items=sorted(spec.labels.items()))

    def _render(self, name: str, **ctx) -> str:
        try:
            text = self._template(name).render(**ctx)
        except self._jinja.TemplateError as exc:
            raise RenderError(f"template {name}: {exc}") from None
        return text.rstrip("\n") + "\n"

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
# Writing


def generate_all(k, specs: list[ImageSpec], renderer: Renderer | None = None) -> dict[str, str]:
    r = renderer or Renderer()
    out: dict[str, str] = {}
    for spec in specs:
        out.update(r.outputs(spec, k))
    return dict(sorted(out.items()))


def write_tree(files: dict[str, str], output: Path) -> list[str]:
    """Write generated files under `output` atomically: everything is rendered into a temporary
    folder beside it, then each managed folder is swapped into place. Stale files of images no
    longer in the matrix are removed; other files are never touched. Returns changed paths."""
    output = Path(output)
    try:
        output.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".imagebuild-gen-", dir=output))
    except OSError as exc:
        raise RenderError(f"cannot write to {output}: {exc.strerror}") from None
    changed = []
    try:
        for rel, text in files.items():
            dest = tmp / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text, encoding="utf-8")
            old = output / rel
            if not old.exists() or old.read_text(encoding="utf-8") != text:
                changed.append(rel)
        for top in ("Dockerfiles", "singularity"):
            new, cur = tmp / top, output / top
            if not new.exists():
                continue
            for old in sorted(cur.rglob("*")) if cur.exists() else []:
                rel = str(old.relative_to(output))
                if old.is_file() and rel not in files:
                    changed.append(f"{rel} (removed)")
            backup = tmp / f"{top}.old"
            if cur.exists():
                os.replace(cur, backup)
            os.replace(new, cur)
    except OSError as exc:
        raise RenderError(f"cannot write to {output}: {exc.strerror}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return sorted(changed)


def stale(files: dict[str, str], output: Path) -> list[str]:
    """Paths whose committed text differs from what would be generated (or that should not exist)."""
    output = Path(output)
    out = [rel for rel, text in files.items()
           if not (output / rel).is_file() or (output / rel).read_text(encoding="utf-8") != text]
    for top in ("Dockerfiles", "singularity"):
        cur = output / top
        if cur.exists():
            for f in cur.rglob("*"):
                if f.is_file() and str(f.relative_to(output)) not in files:
                    out.append(f"{f.relative_to(output)} (not generated by the matrix)")
    return sorted(out)


def dockerfile_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# -------------------------------------------------------------------------------------------------
# Build contexts


WHEEL_CACHE = ROOT / ".imagebuild" / "wheels"


def host_wheels(pytorch: str, cache: Path = WHEEL_CACHE) -> Path:
    """torch==VERSION and its dependencies, downloaded once with the host's pip (which finds the
    CPU wheel in its configured find-links) into a cache folder."""
    _safe("version", pytorch, "pytorch")
    dest = cache / f"torch-{pytorch}"
    marker = dest / ".complete"
    if marker.exists():
        return dest
    tmp = Path(tempfile.mkdtemp(prefix=f"torch-{pytorch}-", dir=cache.parent
                                if cache.parent.exists() else None))
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary", ":all:",
           "--dest", str(tmp), f"torch=={pytorch}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        last = (proc.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise RenderError(f"cannot gather the torch {pytorch} wheels with the host's pip: {last}")
    if not any(p.name.startswith("torch-") for p in tmp.iterdir()):
        shutil.rmtree(tmp, ignore_errors=True)
        raise RenderError(f"pip download gave no torch {pytorch} wheel")
    (tmp / ".complete").write_text("ok\n")
    cache.mkdir(parents=True, exist_ok=True)
    if dest.exists():
        shutil.rmtree(dest)
    os.replace(tmp, dest)
    return dest


def write_context(spec: ImageSpec, dest: Path, *, root: Path = ROOT, k=None,
                  renderer: Renderer | None = None) -> Path:
    """A complete build context for one image: the Dockerfile, the smoke suite, image.json and, for
    images with host wheels, the wheels. Returns the context folder."""
    import json

    from .knowledge import load
    k = k or load(Path(root) / "matrix.yaml")
    r = renderer or Renderer(Path(root) / "recipes")
    dest = Path(dest)
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "lib" / "imagebuild").mkdir(parents=True)
    (dest / "Dockerfile").write_text(r.dockerfile(spec, k), encoding="utf-8")
    pkg = Path(root) / "imagebuild"
    shutil.copy2(pkg / "__init__.py", dest / "lib" / "imagebuild" / "__init__.py")
    shutil.copytree(pkg / "smoke", dest / "lib" / "imagebuild" / "smoke",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (dest / "image.json").write_text(json.dumps(spec.image_json, indent=2, sort_keys=True) + "\n")
    (dest / ".dockerignore").write_text("**/__pycache__\n")
    if spec.wheels == "host" and spec.stack["pytorch"] != NONE:
        src = host_wheels(spec.stack["pytorch"])
        shutil.copytree(src, dest / "wheels", ignore=shutil.ignore_patterns(".complete"))
    return dest
