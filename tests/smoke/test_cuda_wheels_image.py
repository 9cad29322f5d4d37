"""A PyTorch image whose CUDA comes from torch's own wheels (`cuda_from: wheels` in matrix.yaml):
Debian 12, torch 2.13.0 with the nvidia-* wheels it pins (CUDA runtime, cuDNN, NCCL, cuBLAS, ...),
no NVIDIA repository, Debian's Open MPI and UCX (not CUDA-aware, and the image says so).

The first tests read the matrix, the resolver and the renderer (no engine). The last ones build
the image on the real engine through the product (`imagebuild build`, several GB of wheels from
the package index, the host's CA bundle given as the BuildKit secret) and run `imagebuild test`
in it: the CPU tier, since these machines have no GPU. Under CI=true they fail without an engine.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT, build_debian_image, drop_image, engine_time, need, site_matrix
from imagebuild import cli
from imagebuild.render import images, renderer as render
from imagebuild.resolve.solver import Host, check

IMAGE = "pytorch-2.13.0-cu130-debian12-runtime"
REPO_TWIN = "pytorch-2.13.0-cu130-ubuntu24.04-runtime"   # the same torch build, CUDA from the repository
MATRIX = ROOT / "matrix.yaml"
NVIDIA_ENV = ("NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_REQUIRE_CUDA", "NVIDIA_VISIBLE_DEVICES")


def _env(dockerfile: str) -> dict[str, str]:
    """The ENV instruction of the last stage, as a dict."""
    block = dockerfile.rsplit("\nENV ", 1)[1].split("\nLABEL ", 1)[0]
    out = {}
    for line in block.splitlines():
        key, _, value = line.strip().rstrip("\\").strip().partition("=")
        out[key] = value.strip('"')
    return out


# -------------------------------------------------------------------------------------------------
# the matrix, the resolver, the renderer


def test_the_stack_is_the_wheels_own(k, specs_by_id):
    spec = specs_by_id[IMAGE]
    var = k.variants[("2.13.0", "13.0")]
    assert spec.cuda_from == "wheels" and spec.flavor == "runtime" and spec.os.id == "debian12"
    # the wheel-cuda rule: CUDA is what the wheels bring (cuda-toolkit==13.0.3), cuDNN and NCCL
    # are the variant's own pins, Python is Debian 12's
    assert spec.stack["cuda"] == var.cuda_runtime == "13.0.3"
    assert (spec.stack["cudnn"], spec.stack["nccl"]) == (var.cudnn, var.nccl)
    assert spec.stack["python"] == "3.11" and spec.stack["ucx"] == "1.13.1" and spec.stack["openmpi"] == "4.1.4"
    assert spec.wheel_lock == "locks/wheels/torch-2.13.0-cu130-py3.11-manylinux_2_36.txt"
    lock = (ROOT / spec.wheel_lock).read_text()
    assert "\ntorch==2.13.0 " in lock and "\ncuda-toolkit==13.0.3.0 " in lock
    assert f"\nnvidia-cudnn-cu13=={var.cudnn} " in lock and f"\nnvidia-nccl-cu13=={var.nccl} " in lock
    # the resolver's minimum driver, as for any CUDA 13 image of this torch build
    assert spec.min_driver == specs_by_id[REPO_TWIN].min_driver == "580.65.06"


def test_labels_and_image_json_record_the_provider(specs_by_id):
    spec = specs_by_id[IMAGE]
    assert spec.labels[images.CUDA_PROVIDER_LABEL] == "wheels"
    assert images.CUDA_PROVIDER_LABEL not in specs_by_id[REPO_TWIN].labels   # absent: the repository
    assert spec.labels["io.imagebuild.min-driver"] == spec.min_driver
    doc = spec.image_json
    assert doc["cuda_provider"] == "wheels" and specs_by_id[REPO_TWIN].image_json["cuda_provider"] == "repository"
    # Debian's UCX and Open MPI are built without CUDA: nothing CUDA-aware is promised; its UCX
    # has the RDMA transports its release entry records (verbs, rdmacm)
    assert doc["features"] == {"gdrcopy": False, "mpi_cuda": False, "nccl_bench": False,
                               "rdmacm": True, "ucx_cuda": False, "verbs": True}
    assert specs_by_id[REPO_TWIN].features["mpi_cuda"] is True
    assert "cuda_provider" not in specs_by_id["smoke-cpu"].image_json


def test_recipe_has_no_cuda_repository_package_or_second_nccl(k, specs_by_id):
    spec = specs_by_id[IMAGE]
    r = render.Renderer()
    steps = [s for st in r.stages(spec, k) for s in st.steps]
    fragments = [s.fragment for s in steps if s.fragment]
    for absent in ("cuda-repo", "cuda-runtime-apt", "cuda-devel-apt", "nccl", "nccl-tests", "ucx",
                   "openmpi", "gdrcopy", "os-devel-apt"):
        assert absent not in fragments
    # OpenSSH (every image with Open MPI: mpirun across containers without Slurm) after the OS's MPI
    assert fragments[:5] == ["debian-mpi", "openssh-apt", "venv", "pytorch", "smoke"]
    text = r.dockerfile(spec, k)
    assert "developer.download.nvidia.com" not in text and "cuda-libraries" not in text
    assert "nccl.txt" not in text and text.count("FROM ") == 1
    # the torch closure is downloaded in the build, so that step gets the site CA bundle
    assert "RUN --mount=type=secret,id=ca-bundle" in text and "--require-hashes --no-deps" in text


def test_nvidia_runtime_env_is_the_same_as_a_repository_image(k, specs_by_id):
    r = render.Renderer()
    mine = _env(r.dockerfile(specs_by_id[IMAGE], k))
    twin = _env(r.dockerfile(specs_by_id[REPO_TWIN], k))
    same = [e for e in NVIDIA_ENV if e != "NVIDIA_REQUIRE_CUDA"]
    assert {e: mine[e] for e in same} == {e: twin[e] for e in same}
    # the same floor; only the repository image carries cuda-compat, and the branches its package
    # serves (R570, R535) are past their end of life on the matrix's as_of (S6): neither image is
    # started through forward compatibility, so both say the same
    assert mine["NVIDIA_REQUIRE_CUDA"] == f"cuda>=13.0,driver>={specs_by_id[IMAGE].min_driver}"
    assert twin["NVIDIA_REQUIRE_CUDA"] == mine["NVIDIA_REQUIRE_CUDA"]
    # nothing of the repository's CUDA tree: no CUDA_HOME, no LD_LIBRARY_PATH into /usr/local/cuda
    assert "CUDA_HOME" not in mine and "LD_LIBRARY_PATH" not in mine
    assert "CUDA_HOME" in twin


def test_check_reads_the_image_as_it_was_built(k, specs_by_id):
    spec = specs_by_id[IMAGE]
    assert check(k, Host(), dict(spec.stack), image=True, cuda_from="wheels").ok
    # read as a repository image, Debian 12 has no confirmed CUDA repository: refused, and why
    res = check(k, Host(), dict(spec.stack), image=True)
    assert not res.ok and any("repository" in line for line in res.explanation)
    assert check(k, Host(driver="580.95.05", gpu="H100"), dict(spec.stack), image=True,
                 cuda_from="wheels").ok
    # R570 runs CUDA 13.0 only through cuda-compat-13-0, which the repository image carries and
    # this one cannot: refused for it, with that reason, and still fine for the repository twin
    # (judged in January 2026, while NVIDIA still supported R570)
    res = check(k, Host(driver="570.86.10", gpu="H100", date="2026-01-15"), dict(spec.stack), image=True,
                cuda_from="wheels")
    assert not res.ok and "the image carries no cuda-compat-13-0" in " ".join(res.explanation)
    twin = check(k, Host(driver="570.86.10", gpu="H100", date="2026-01-15"), dict(specs_by_id[REPO_TWIN].stack),
                 image=True)
    assert twin.ok and twin.mode.mode == "forward-compat"


def test_check_from_labels_takes_the_provider(specs_by_id, tmp_path, capsys):
    labels = specs_by_id[IMAGE].labels
    f = tmp_path / "labels.json"
    f.write_text(json.dumps({"Config": {"Labels": labels}}))
    assert cli.main(["check", "--matrix", str(MATRIX), "--from-json", str(f)]) == 0
    assert capsys.readouterr().out.startswith("consistent:")
    f.write_text(json.dumps({"Config": {"Labels": dict(labels, **{images.CUDA_PROVIDER_LABEL: "pip"})}}))
    assert cli.main(["check", "--matrix", str(MATRIX), "--from-json", str(f)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "io.imagebuild.cuda.provider='pip'" in err[0] and "Traceback" not in err[0]


def _matrix_with(tmp_path: Path, old: str, new: str) -> Path:
    """A copy of matrix.yaml with ``old`` (found once) made ``new``; where matrix.yaml lacks it,
    of the matrix with the site's git-form communication family (conftest.site_matrix)."""
    text = MATRIX.read_text()
    if old not in text:
        text = site_matrix(tmp_path / "site").read_text()
    assert text.count(old) == 1
    out = tmp_path / "matrix.yaml"
    out.write_text(text.replace(old, new))
    (tmp_path / "locks").symlink_to(ROOT / "locks")
    return out


@pytest.mark.parametrize("old,new,why", [
    ("aarch64]\n    ucx: \"1.13.1\"\n    openmpi: \"4.1.4\"\n    cuda_from: wheels\n",
     "aarch64]\n    ucx: \"1.13.1\"\n    openmpi: \"4.1.4\"\n    cuda_from: pip\n",
     "cuda_from must be one of repository, wheels"),
    ("    flavors: [runtime]\n    pytorch: \"2.13.0\"\n    variants: default\n    os: [debian12]\n",
     "    flavors: [runtime, devel]\n    pytorch: \"2.13.0\"\n    variants: default\n    os: [debian12]\n",
     "wheels makes runtime images only"),
    ("aarch64]\n    ucx: \"1.13.1\"\n    openmpi: \"4.1.4\"\n    cuda_from: wheels\n",
     "aarch64]\n    ucx: \"1.22.0\"\n    openmpi: \"4.1.4\"\n    cuda_from: wheels\n",
     "cuda_from: wheels builds UCX and Open MPI both from source or takes both from the OS"),
    ("    ucx: \"1.22.0\"\n    openmpi: \"5.0.10\"\n    cuda_from: wheels\n    sources: git\n",
     "    ucx: \"1.21.0\"\n    openmpi: \"5.0.10\"\n    cuda_from: wheels\n    sources: git\n",
     "sources: git compiles ucx 1.21.0 from its git tag archive, which matrix.yaml's ucx release "
     "does not record"),
    ("    build: {gda: false,", "    build: {gda: 0,", "build.gda must be true or false"),
    ("cuda_arch: [\"8.0\", \"9.0\", \"10.0\"]}", "cuda_arch: [\"8.0\", \"sm_90\"]}", "cuda_arch"),
], ids=["unknown-provider", "devel-flavor", "half-source-built", "git-without-archive",
        "build-switch-not-bool", "bad-arch"])
def test_bad_cuda_from_is_one_line_with_its_place(tmp_path, capsys, old, new, why):
    matrix = _matrix_with(tmp_path, old, new)
    assert cli.main(["images", "--matrix", str(matrix)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and why in err[0] and "Traceback" not in err[0]
    assert f"{matrix}:" in err[0]   # file:line


# -------------------------------------------------------------------------------------------------
# built on the real engine, tested inside


@pytest.fixture(scope="module")
def wheels_image(docker_client) -> str:
    """The image built once per module through the real path: matrix.yaml -> resolver -> renderer
    -> `imagebuild build` on the engine, the torch closure downloaded from the package index with
    the host's CA bundle as the build's secret (never a layer). Nothing after this module uses
    it: it is removed, with the build cache it made, when the module ends (conftest.LATE)."""
    since = engine_time(docker_client)
    ref = build_debian_image(docker_client, IMAGE).local_ref
    yield ref
    drop_image(docker_client, ref, since)


@pytest.fixture(scope="module")
def report(wheels_image, tmp_path_factory):
    path = tmp_path_factory.mktemp("wheels-report") / "report.json"
    code = cli.main(["test", wheels_image, "--report", str(path), "--ranks", "2"])
    return code, json.loads(path.read_text())


def _run(client, ref: str, script: str) -> str:
    return client.containers.run(ref, ["-c", script], entrypoint="bash", remove=True).decode()


def assert_cpu_tier_passed(report, image_id: str) -> None:
    """`imagebuild test`'s exit code and report: every check of the CPU tier passed (nccl-tests,
    which needs a GPU, aside; imagebuild's NCCL benchmark where image.json says the image has none),
    the distributed ones included, for ``image_id``."""
    code, data = report
    statuses = {c["name"]: (c["status"], c["detail"]) for c in data["checks"]}
    if statuses.get("nccl.bench", ("", ""))[1].endswith("(features.nccl_bench false)"):
        assert statuses.pop("nccl.bench")[0] == "skip"
    failed = {n: d for n, (s, d) in statuses.items() if s != "pass" and n != "nccl-tests"}
    assert not failed
    assert code == 0 and data["passed"] is True and data["imagebuild_id"] == image_id
    for name in ("versions", "libraries", "mpi.config", "mpi.allreduce", "torch.allreduce",
                 "ddp.equivalence", "ddp.two-node"):
        assert statuses[name][0] == "pass", name


def test_every_cpu_tier_check_passes(report, wheels_image):
    assert_cpu_tier_passed(report, IMAGE)


def test_versions_come_from_the_libraries_and_equal_the_labels(report, specs_by_id):
    s = specs_by_id[IMAGE].stack
    detail = next(c["detail"] for c in report[1]["checks"] if c["name"] == "versions")
    # torch's own answers (torch.version.cuda, torch.backends.cudnn.version(),
    # torch.cuda.nccl.version()) and the wheels' libraries through ctypes, no GPU needed
    assert f"torch.version.cuda: 13.0 matches {s['cuda']}" in detail
    assert f"torch's cuDNN: 9.20.0 matches {s['cudnn']}" in detail
    assert f"torch's NCCL: {s['nccl']} matches {s['nccl']}" in detail
    assert f"wheel nvidia-cuda-runtime's CUDA runtime (libcudart): 13.0 matches {s['cuda']}" in detail
    assert f"wheel nvidia-cudnn's cuDNN (libcudnn): 9.20.0 matches {s['cudnn']}" in detail
    assert f"wheel nvidia-nccl's NCCL (libnccl.so.2): {s['nccl']} matches {s['nccl']}" in detail
    assert "labels equal /opt/imagebuild/image.json" in detail and "min-driver" in detail


def test_libraries_resolve_and_ship_once(report):
    detail = next(c["detail"] for c in report[1]["checks"] if c["name"] == "libraries")
    assert "torch/lib:" in detail and "libraries ok" in detail
    assert "nvidia wheels:" in detail and "resolve within the wheels' folders" in detail
    assert "one copy of each CUDA, cuDNN, NCCL, UCX and MPI library" in detail


def test_mpi_is_debians_and_says_it_is_not_cuda_aware(report):
    detail = next(c["detail"] for c in report[1]["checks"] if c["name"] == "mpi.config")
    assert "Open MPI has the UCX PML" in detail
    assert "CUDA support in Open MPI: no (not required: the image does not promise" in detail


def test_no_cuda_package_and_the_runtime_env(wheels_image, docker_client, specs_by_id):
    out = _run(docker_client, wheels_image, "dpkg-query -W -f '${Package}\\n' | grep -Ei '^(cuda|libcuda|libnccl|libcudnn|nvidia)' || true; "
                             "ls /etc/apt/sources.list.d; ls -d /usr/local/cuda* 2>/dev/null || true")
    assert out.strip() == "", out   # no CUDA package, no NVIDIA repository, no /usr/local/cuda
    attrs = docker_client.images.get(wheels_image).attrs["Config"]
    env = dict(e.split("=", 1) for e in attrs["Env"])
    spec = specs_by_id[IMAGE]
    assert env["NVIDIA_REQUIRE_CUDA"] == f"cuda>=13.0,driver>={spec.min_driver}"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility" and env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert attrs["Labels"][images.CUDA_PROVIDER_LABEL] == "wheels"
    assert attrs["Labels"]["io.imagebuild.stack.cuda"] == spec.stack["cuda"]


# -------------------------------------------------------------------------------------------------
# the smoke suite's reading of such an image, on this host's own Open MPI (Debian's, no CUDA)


def _mpi_config(expectation):
    from imagebuild.smoke import checks, proc
    from imagebuild.smoke.context import Context
    if not proc.which("ompi_info"):
        need("Open MPI on the host (scripts/setup installs openmpi-bin)", "ompi_info not on PATH")
    ctx = Context(expectation=expectation)
    ctx.start_clock()
    return checks.check_mpi_config(ctx)


def test_mpi_config_requires_cuda_only_where_the_image_promises_it():
    stack = {"cuda": "13.0.3", "ucx": "1.13.1", "openmpi": "4.1.4"}
    ok = _mpi_config({"stack": stack, "features": {"mpi_cuda": False}})
    assert ok.status == "pass"
    assert "CUDA support in Open MPI: no (not required: the image does not promise" in ok.detail
    assert "built without CUDA support" not in ok.detail
    promised = _mpi_config({"stack": stack, "features": {"mpi_cuda": True}})
    assert promised.status == "fail" and "Open MPI built without CUDA support" in promised.detail
    # an image.json from before features.mpi_cuda: every CUDA image promised it
    older = _mpi_config({"stack": stack, "features": {"verbs": False}})
    assert older.status == "fail" and "Open MPI built without CUDA support" in older.detail


def test_the_wheels_cuda_runtime_is_named_as_such():
    from imagebuild.smoke import checks, libs
    sp = "/opt/venv/lib/python3.11/site-packages"
    assert checks._lib_origin(f"{sp}/nvidia/cu13/lib/libcudart.so.13", "cuda-runtime",
                              libs.CUDART_WHEEL_DIRS) == "wheel nvidia-cuda-runtime's"
    assert checks._lib_origin(f"{sp}/nvidia/cuda_runtime/lib/libcudart.so.12", "cuda-runtime",
                              libs.CUDART_WHEEL_DIRS) == "wheel nvidia-cuda-runtime's"
    assert checks._lib_origin("/usr/local/cuda-13.0/lib64/libcudart.so.13", "cuda-runtime",
                              libs.CUDART_WHEEL_DIRS) == "system"
