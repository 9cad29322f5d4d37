"""The communication image compiled here: Debian 12, CUDA 13.0.3 and NCCL from NVIDIA's wheels
(`cuda_from: wheels` without PyTorch: the cuda-toolkit wheels' nvcc and headers in the devel
stage), gdrcopy, UCX (verbs, rdmacm, CUDA, gdrcopy) and Open MPI (UCX, CUDA, PMIx, PRRTE) built
from their git tag archives (`sources: git`), nccl-tests built against them.

The first tests read the matrix, the lock and the renderer (no engine): the recipe comes from the
same fragments as the Ubuntu and Rocky Linux communication images. The last ones build the image
through the product (`imagebuild build --sources ../shared/sources`: the source cache is filled
from that mirror folder, every tarball checked against matrix.yaml) and run `imagebuild test` in
it: the CPU tier, since these machines have no GPU. Under CI=true they fail without an engine.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT, need
from imagebuild import cli, images, knowledge, render
from imagebuild.resolve import Host, resolve

IMAGE = "comms-cu130-nccl2.30.7-debian12-runtime"
UBUNTU_TWIN = "comms-cu130-nccl2.30.7-ubuntu24.04-runtime"   # the same stack, CUDA from the repository
MATRIX = ROOT / "matrix.yaml"
SHARED = ROOT.parent / "shared" / "sources"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
# the fragments that compile the communication stack, in every CUDA image alike
COMPILED = ["gdrcopy", "ucx", "openmpi", "nccl-tests"]


@pytest.fixture(scope="module")
def k():
    return knowledge.load(MATRIX)


@pytest.fixture(scope="module")
def specs(k):
    return {s.id: s for s in images.expand(k)[0]}


def _fragments(stage) -> list[str]:
    return [s.fragment for s in stage.steps if s.kind == "run"]


def test_the_same_fragments_compile_it_as_on_ubuntu(k, specs):
    r = render.Renderer()
    deb = r.stages(specs[IMAGE], k)
    ubu = r.stages(specs[UBUNTU_TWIN], k)
    assert [f for f in _fragments(deb[0]) if f in COMPILED] == COMPILED
    assert [f for f in _fragments(ubu[0]) if f in COMPILED] == COMPILED
    # only where CUDA and NCCL come from differs: the wheels, or the repository's packages
    assert set(_fragments(deb[0])) - set(_fragments(ubu[0])) == {"cuda-wheels-devel"}
    assert set(_fragments(ubu[0])) - set(_fragments(deb[0])) == {"cuda-repo", "cuda-devel", "nccl"}
    assert set(_fragments(deb[1])) - set(_fragments(ubu[1])) == {"cuda-wheels-runtime"}


def test_the_recipe_compiles_git_archives_against_the_wheels(k, specs):
    text = render.Renderer().dockerfile(specs[IMAGE], k)
    assert "developer.download.nvidia.com" not in text and "curl -fsSL" not in text
    for file in ("ucx-1.22.0-git.tar.gz", "openmpi-5.0.10-git.tar.gz", "gdrcopy-2.5.1.tar.gz",
                 "nccl-tests-2.17.6.tar.gz"):
        assert f"--mount=type=bind,source=sources/{file},target=/tmp/sources/{file}" in text
    assert " && ./autogen.sh \\\n" in text and " && ./autogen.pl --no-3rdparty hwloc \\\n" in text
    assert "sed -i 's/^greek=.*/greek=/' VERSION" in text
    assert "--without-gda" in text and "--with-hwloc=external" in text
    assert "--disable-mpi-fortran --disable-oshmem" in text and "--disable-io-romio" in text
    assert 'NVCC_GENCODE="-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90 ' \
           '-gencode=arch=compute_100,code=sm_100 -gencode=arch=compute_100,code=compute_100"' in text
    labels = specs[IMAGE].labels
    assert labels["io.imagebuild.sources"] == "git"
    assert labels["io.imagebuild.build"] == "fortran=off,gda=off,oshmem=off,romio=off,cuda_arch=8.0+9.0+10.0"
    assert labels["io.imagebuild.cuda.provider"] == "wheels"


def test_the_runtime_stage_installs_the_run_time_subset_of_the_lock(k, specs, tmp_path):
    ctx = render.write_context(specs[IMAGE], tmp_path / "ctx", k=k)
    whole = (ctx / "requirements" / "wheels.txt").read_text()
    runtime = (ctx / "requirements" / "runtime.txt").read_text()
    assert "cuda-toolkit==13.0.3.0" in whole and "nvidia-cuda-nvcc==13.0.88" in whole
    pins = sorted(ln.split(" ")[0] for ln in runtime.splitlines() if "==" in ln)
    assert pins == ["nvidia-cuda-runtime==13.0.96", "nvidia-nccl-cu13==2.30.7"]
    assert not (ctx / "sources").exists()   # `imagebuild build` adds them before the build


def test_users_without_pytorch_still_get_cuda_from_a_repository(k):
    """The toolkit's wheels are an image's choice (cuda_from: wheels); a user's resolve without
    PyTorch on Debian 12 keeps reading CUDA from a repository, which Debian 12 has none of."""
    res = resolve(k, Host(), {"os": "debian12", "pytorch": "none", "cuda": ">=13"})
    assert not res.ok


# -------------------------------------------------------------------------------------------------
# built on the real engine, tested inside


@pytest.fixture(scope="module")
def comms_image(docker_client) -> str:
    """Built once per module through the real path: matrix.yaml -> resolver -> renderer ->
    `imagebuild build --sources ../shared/sources`, the wheels from the package index with the
    host's CA bundle as the build's secret (never a layer)."""
    spec = images.load_images(MATRIX)[IMAGE]
    if not SHARED.is_dir():
        need("../shared/sources", "the git tag archives of UCX and Open MPI are not beside this checkout")
    if not CA_BUNDLE.is_file():
        need("the host's CA bundle", f"{CA_BUNDLE} is missing (Debian's ca-certificates)")
    try:
        docker_client.images.get(spec.os["base"])
    except Exception:  # noqa: BLE001 - ImageNotFound
        if cli.main(["base", "debian-bookworm"]) != 0:
            need("the local Debian base image", "imagebuild base debian-bookworm failed")
    code = cli.main(["build", "--matrix", str(MATRIX), "--ca-bundle", str(CA_BUNDLE),
                     "--sources", str(SHARED), IMAGE])
    assert code == 0, f"imagebuild build {IMAGE} failed (see .imagebuild/logs/{IMAGE}.log)"
    docker_client.images.get(spec.local_ref)
    return spec.local_ref


@pytest.fixture(scope="module")
def report(comms_image, tmp_path_factory):
    path = tmp_path_factory.mktemp("comms-report") / "report.json"
    code = cli.main(["test", comms_image, "--report", str(path), "--ranks", "2"])
    return code, json.loads(path.read_text())


def _detail(report, name: str) -> str:
    return next(c["detail"] for c in report[1]["checks"] if c["name"] == name)


def _run(client, ref: str, script: str) -> str:
    return client.containers.run(ref, ["-c", script], entrypoint="bash", remove=True).decode()


def test_every_cpu_tier_check_passes(report):
    code, data = report
    statuses = {c["name"]: (c["status"], c["detail"]) for c in data["checks"]}
    failed = {n: d for n, (s, d) in statuses.items() if s == "fail"}
    assert not failed
    assert code == 0 and data["passed"] is True and data["imagebuild_id"] == IMAGE
    for name in ("versions", "libraries", "mpi.config", "mpi.allreduce"):
        assert statuses[name][0] == "pass", (name, statuses[name])


def test_versions_come_from_the_built_libraries_and_equal_the_labels(report, specs):
    s = specs[IMAGE].stack
    detail = _detail(report, "versions")
    assert f"ucx (ucx_info -v): 1.22.0 matches {s['ucx']}" in detail
    # the git tag of v5.0.10 is the rc2 commit: the recipe cleared the greek, so 5.0.10 it says
    assert f"openmpi (ompi_info --parsable): 5.0.10 matches {s['openmpi']}" in detail
    assert f"wheel nvidia-cuda-runtime's CUDA runtime (libcudart): 13.0 matches {s['cuda']}" in detail
    assert f"wheel nvidia-nccl's NCCL (libnccl.so.2): {s['nccl']} matches {s['nccl']}" in detail
    assert "labels equal /opt/imagebuild/image.json" in detail


def test_open_mpi_and_ucx_are_built_with_what_the_image_promises(report):
    detail = _detail(report, "mpi.config")
    assert "Open MPI has the UCX PML" in detail
    for module in ("verbs", "rdmacm", "cuda", "gdrcopy"):
        assert module in detail, module


def test_every_elf_resolves_but_the_drivers_own(report):
    """Every ELF the devel stage compiled (UCX's and Open MPI's plugins, ucx_perftest, the
    nccl-tests binaries) resolves in the run-time image; only libcuda and libnvidia-ml are left to
    the host's driver. (This found libgomp.so.1 missing for ucx_perftest: the run-time stage now
    installs GCC's OpenMP run time.)"""
    detail = _detail(report, "libraries")
    assert "FAIL" not in detail
    for tree in ("/opt/gdrcopy", "/opt/ucx", "/opt/openmpi", "/opt/nccl-tests"):
        assert f"{tree}: " in detail and " ELF files resolve" in detail, tree
    assert "need only the driver's libraries from the host" in detail
    assert "one copy of each CUDA, cuDNN, NCCL, UCX and MPI library" in detail


def test_mpi_over_ucx_shared_memory_and_tcp(report):
    detail = _detail(report, "mpi.allreduce")
    assert "pml ucx, UCX_TLS=self,sm and self,tcp" in detail


def test_the_runtime_image_has_no_compiler_stub_or_repository(comms_image, docker_client, specs):
    out = _run(docker_client, comms_image,
               "find / -xdev \\( -name 'libcuda.so*' -o -name 'libnvidia-ml.so*' -o -name nvcc \\) -print; "
               "command -v gcc cc || true; ls /etc/apt/sources.list.d; "
               "ompi_info --parsable --all 2>/dev/null | grep -E '^mca:mpi:base:param:mpi_built_with_cuda_support:value:'")
    lines = out.strip().splitlines()
    assert lines == ["mca:mpi:base:param:mpi_built_with_cuda_support:value:true"], out
    attrs = docker_client.images.get(comms_image).attrs["Config"]
    env = dict(e.split("=", 1) for e in attrs["Env"])
    spec = specs[IMAGE]
    assert env["NVIDIA_REQUIRE_CUDA"] == f"cuda>=13.0 driver>={spec.min_driver}"
    assert env["CUDA_HOME"] == "/usr/local/cuda-13.0"
    assert attrs["Labels"]["io.imagebuild.sources"] == "git"


def test_nccl_tests_link_this_images_mpi_nccl_and_cuda_run_time(comms_image, docker_client):
    out = _run(docker_client, comms_image,
               "ls /opt/nccl-tests/bin | grep -c _perf; ldd /opt/nccl-tests/bin/all_reduce_perf")
    count, ldd = out.split("\n", 1)
    assert int(count) >= 10, out
    assert "not found" not in ldd
    assert "/opt/openmpi/lib/libmpi.so.40" in ldd
    assert "/site-packages/nvidia/nccl/lib/libnccl.so.2" in ldd
    assert "libcudart.so.13 => /usr/local/cuda-13.0/lib64/libcudart.so.13" in ldd   # the wheel tree
