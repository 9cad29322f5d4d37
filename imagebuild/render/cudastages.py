"""The stages of a CUDA image: the devel stage (CUDA, rdma-core, the compiled blocks, NCCL and
nccl-tests, the torch wheels) and the run-time stage that copies what it built, or a devel image
FROM its runtime image. A part of the Renderer (renderer.py), which supplies the fragments."""

from __future__ import annotations
from . import blocks
from .checked import format_url as _format_url, safe as _safe
from ..errors import RenderError
from .images import ImageSpec
from ..packagers import packages, pinned
from ..versions import NONE, major_minor
from .steps import (Stage, Step, _CudaLayout,
                    _cuda_layout, _key_check, _lock_copy, _os_extras, _tarballs, image_labels)


class CudaStages:
    """Renderer's CUDA stages (the Renderer supplies fragment, _common_tail, _pip_constraint and
    env_vars)."""

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
        rdma_dev = rdma_pk.get("devel") or c.os_packages("rdma-devel")
        devel_extra, runtime_extra = _os_extras(c, tarballs, rdma_dev, spec.build_choices)
        devel = self._devel_steps(spec, k, c, tarballs, devel_extra, doca_repo, rdma_dev)
        torch_steps = self._torch_steps(spec, k)
        tail = self._common_tail(spec, "/opt/venv/bin/python")
        final = [Step("env", items=sorted(self.env_vars(spec, k, c).items())),
                 Step("label", items=image_labels(spec, k))]
        runtime = self._runtime_steps(spec, c, runtime_extra, doca_copies, rdma_pk, rdma_name)
        return [*self._source_stages(spec, c, tarballs, base, devel[0]), Stage("devel", base, devel),
                Stage(None, base, runtime + torch_steps + tail + final)]

    def _source_stages(self, spec: ImageSpec, c: _CudaLayout, tarballs: dict[str, dict], base: str,
                       tools: Step) -> list[Stage]:
        """A stage per block whose git archive is prepared beside the devel stage
        (blocks.source_stages): the devel stage's own first step (the OS build tools: the same
        instruction on the same base, which the builder runs once for both), then the block's
        `<name>-source` fragment. Defined before the devel stage, which copies from it."""
        out = []
        for b in blocks.source_stages({n: t["form"] for n, t in tarballs.items()}):
            tarball = tarballs[b.name]
            out.append(Stage(b.stage, base, [tools, self.fragment(
                f"{b.name}-source", f"{b.title.format(version=tarball['version'])}: the source tree "
                "and its build system (autogen), beside the devel stage", workdir=b.workdir, **tarball)]))
        return out

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
        repo = _safe("word", spec.os.nvidia_repo or "",
                     f"NVIDIA repository of {spec.os.id}")
        key = k.tools.get(c.pm["key"])
        key_url = _format_url(key.url if key else "", "CUDA repository key URL", repo=repo)
        # the repository's folder of the image's CPU (matrix.yaml platforms: cuda_repo): x86_64,
        # sbsa for Grace nodes. The key is one for every folder; its fingerprint is checked.
        target = k.platforms.get(spec.platform)
        arch = _safe("word", target.cuda_repo if target else "", f"NVIDIA repository folder of {spec.platform}")
        repo_url = _safe("url", "https://developer.download.nvidia.com/compute/cuda/repos/"
                         f"{repo}/{arch}/", "CUDA repository URL")
        cuda_devel = [
            self.fragment(c.pm["repo_fragments"]["cuda"], "NVIDIA's CUDA repository, key fingerprint checked",
                          key_url=key_url, key_fingerprint=_safe(
                              "fingerprint", (key.fingerprint if key else None) or "", "CUDA key fingerprint"),
                          repo_url=repo_url),
            *doca_repo,
            self._cuda_devel_packages(c, rdma_dev),
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
            self.packages(c.pm, "os-devel", "OS build tools (devel stage only)",
                          c.os_packages("os-devel") + devel_extra),
            *cuda_devel,
            *self._compiled(spec, c, tarballs, on_nccl=False),
            *nccl_devel,
            *self._compiled(spec, c, tarballs, on_nccl=True),
        ]

    def _compiled(self, spec: ImageSpec, c: _CudaLayout, tarballs: dict[str, dict],
                  on_nccl: bool) -> list[Step]:
        """One step per building block of the image (blocks.for_image) of the group built before
        NCCL, or on it."""
        steps = []
        chosen = blocks.for_image(spec)
        for b in chosen:
            if blocks.on_nccl(b, chosen) != on_nccl:
                continue
            tarball = tarballs[b.name]
            built = blocks.Built(spec=spec, cuda_home=c.home, nccl_home=c.nccl_home, form=tarball["form"])
            title = b.title.format(version=tarball["version"])
            if b in blocks.source_stages({b.name: tarball["form"]}):
                steps.append(Step("copy", comment=f"{title}: the source tree the {b.stage} stage "
                                  "prepared", from_stage=b.stage, src=b.workdir, dest=b.workdir))
            steps.append(self.fragment(b.name, title, **b.values(built), **tarball))
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
        rdma_dev = rdma_pk.get("devel") or c.os_packages("rdma-devel")
        devel_extra, _ = _os_extras(c, tarballs, rdma_dev, spec.build_choices)
        steps = [self.packages(c.pm, "os-devel", "OS build tools and headers",
                               c.os_packages("os-devel") + devel_extra)]
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
            steps.append(self._cuda_devel_packages(c, rdma_dev))
        steps += [
            Step("copy", comment="what the image is expected to contain (this image's id and flavor)",
                 src="image.json", dest="/opt/imagebuild/image.json"),
            Step("env", items=sorted(self.env_vars(spec, k, c).items())),
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
        # cuda-compat for forward compatibility on data-center GPUs (its version is the driver's it
        # was cut from, so it follows the repository); the run-time libraries pinned to NVIDIA's
        # X.Y.Z-1, only when no PyTorch wheels bring them (each library once)
        compat = c.os_packages("cuda-compat")
        # NVIDIA's container runtime looks for the compat libraries at /usr/local/cuda/compat
        # inside the image (libnvidia-container's CUDA_RUNTIME_DIR), and uses them where they are
        # newer than the host's driver; the package installs them under /usr/local/cuda-X.Y
        after = (f"ln -sfn cuda-{c.mm} /usr/local/cuda",
                 "ls /usr/local/cuda/compat/libcuda.so.* >/dev/null")
        if not c.torch_libs:
            return self.packages(c.pm, "cuda-runtime", f"CUDA {c.cuda} run-time libraries",
                                 compat + pinned(c.pm, c.os_packages("cuda-runtime"), f"{c.cuda}-1"),
                                 after=after)
        return self.packages(c.pm, "cuda-runtime", f"CUDA {c.cuda} forward compatibility; its "
                             "libraries come once, from PyTorch's wheels", compat, after=after)

    def _cuda_devel_packages(self, c: _CudaLayout, rdma_dev: list[str]) -> Step:
        """CUDA's compiler and development libraries from NVIDIA's repository, pinned to its
        X.Y.Z-1, and the RDMA headers."""
        return self.packages(c.pm, "cuda-devel", f"CUDA {c.cuda} development packages and RDMA "
                             "headers", pinned(c.pm, c.os_packages("cuda-devel"), f"{c.cuda}-1")
                             + list(rdma_dev))

    def _runtime_steps(self, spec: ImageSpec, c: _CudaLayout, runtime_extra: list[str],
                       doca_copies: list[Step], rdma_pk: dict, rdma_name: str) -> list[Step]:
        """The run-time stage up to PyTorch: OS packages without a compiler, sshd, CUDA, the RDMA
        user space, the prefixes the devel stage compiled, and the venv with CUDA's and NCCL's
        libraries."""
        cuda_runtime, cuda_libs = self._cuda_runtime(spec, c)
        return [
            self.packages(c.pm, "os-runtime", "OS run-time packages (no compiler)",
                          c.os_packages("os-runtime") + runtime_extra),
            self._openssh(c.pm),
            *cuda_runtime,
            *doca_copies,
            # the rdma: entry's packages (DOCA-OFED), else the distribution's rdma-core
            self.packages(c.pm, "rdma-runtime", f"RDMA user space: {rdma_name}",
                          rdma_pk.get("runtime") or c.os_packages("rdma-runtime")),
            *[Step("copy", comment=None if i else "install prefixes built in the devel stage",
                   from_stage="devel", src=b.prefix, dest=b.prefix)
              for i, b in enumerate(blocks.for_image(spec))],
            self.fragment("venv", "Python virtual environment", python_bin=c.python_bin),
            *cuda_libs,
        ]

    def _openssh(self, pm: dict) -> Step:
        """OpenSSH client and server, in every image with Open MPI: mpirun reaches other hosts
        over ssh where no Slurm runs (`imagebuild test`'s mpi.two-container does; NGC and AWS DLC
        images and the Kubeflow MPI Operator expect it too). The host keys a package's scripts
        made are removed: an image must not carry a private key, and a new one per build would
        differ from build to build; keys are made per run."""
        return self.packages(pm, "openssh", "OpenSSH for mpirun across hosts (no host keys in "
                             "the image)", packages(pm, "openssh"), after=("rm -f /etc/ssh/ssh_host_*",))

    def _torch_steps(self, spec: ImageSpec, k) -> list[Step]:
        """PyTorch's CUDA build and its whole closure from the image's wheel lock (none without
        PyTorch): PyPI's default build from the configured index, another from PyTorch's own."""
        s = spec.stack
        if s["pytorch"] == NONE:
            return []
        var = k.variants[(s["pytorch"], major_minor(s["cuda"]))]
        index_url = None
        if not var.default:
            idx = k.tools["pytorch-index"].url if "pytorch-index" in k.tools else ""
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
        name = f"{_safe('text', r.name, 'rdma name')} {_safe('version', r.version, 'rdma version')}"
        if pm["name"] not in r.packages:
            raise RenderError(f"image {spec.id}: {name} lists no {pm['name']} packages")
        pk = {f: [_safe("package", p, f"{r.id} package") for p in r.packages[pm["name"]][f]]
              for f in ("runtime", "devel")}
        os_token = _safe("word", r.os.get(spec.os.id, ""), f"{r.id} folder of {spec.os.id}")
        url = _format_url(r.repo, f"{r.id} repository URL", version=r.version, os=os_token)
        host = _safe("host", url.split("/")[2], f"{r.id} repository host")
        key_url = _safe("url", r.key.url, f"{r.id} key URL")
        step = self.fragment(pm["repo_fragments"]["doca"], f"{name} repository (user space only), key checked",
                             version=r.version, key_url=key_url, repo_url=url, repo_host=host,
                             **_key_check(r.key, r.id))
        files = pm["doca_files"]
        copies = [Step("copy", comment=f"the {name} repository as the devel stage verified it",
                       from_stage="devel", src=files[0], dest=files[0])]
        copies += [Step("copy", from_stage="devel", src=f, dest=f) for f in files[1:]]
        return [step], copies, pk, name
