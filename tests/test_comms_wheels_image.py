"""The communication image compiled here: Debian 12, CUDA 13.0.3 and NCCL from NVIDIA's wheels
(`cuda_from: wheels` without PyTorch: the cuda-toolkit wheels' nvcc and headers in the devel
stage), gdrcopy, UCX (verbs, rdmacm, CUDA, gdrcopy) and Open MPI (UCX, CUDA, PMIx, PRRTE) built
from their git tag archives (`sources: git`), nccl-tests built against them.

The first tests read the matrix, the lock and the renderer (no engine): the recipe comes from the
same fragments as the Ubuntu and Rocky Linux communication images. The last ones build the image
through the product (`imagebuild build --sources ../shared/sources`: the source cache is filled
from that mirror folder, every tarball checked against matrix.yaml) and run `imagebuild test` in
it: the CPU tier, since these machines have no GPU, with mpi.two-container (MPI over UCX with one
rank in each of two containers, and UCX's shared memory between two containers) and the ways
that check must fail. The last test, in the heavy tier (`bash scripts/test --heavy`), builds the
image a second time with --no-cache and asserts the same image ID (issue 13): the fixture's build is
the first cold build on a fresh machine, so that tier builds the image cold twice, not three times.
The fast tier (CI) keeps the reproducibility of what this image compiles with nvcc and dates with
SOURCE_DATE_EPOCH in a smaller build (tests/test_devel_image.py). Under CI=true they fail without
an engine.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tarfile

import pytest

from conftest import (CA_BUNDLE, ROOT, SHARED_SOURCES as SHARED, answer, build_debian_image, engine_time,
                      prune_build_cache_since)
from imagebuild import cli, knowledge
from imagebuild.render import images, output, renderer as render
from imagebuild.testrun import across, runner as testrun
from imagebuild.resolve.solver import Host, resolve
from imagebuild.smoke.checks import mpirun_argv

IMAGE = "comms-cu130-nccl2.30.7-debian12-runtime"
UBUNTU_TWIN = "comms-cu130-nccl2.30.7-ubuntu24.04-runtime"   # the same stack, CUDA from the repository
MATRIX = ROOT / "matrix.yaml"
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
    # the git archives' Open MPI tree is prepared in a stage of its own, beside the devel stage
    source, *deb = r.stages(specs[IMAGE], k)
    ubu = r.stages(specs[UBUNTU_TWIN], k)
    assert source.name == "openmpi-source" and _fragments(source) == ["os-devel-apt", "openmpi-source"]
    assert [s.name for s in deb] == ["devel", None] and [s.name for s in ubu] == ["devel", None]
    assert [f for f in _fragments(deb[0]) if f in COMPILED] == COMPILED
    assert [f for f in _fragments(ubu[0]) if f in COMPILED] == COMPILED
    # only where CUDA and NCCL come from differs: the wheels, or the repository's packages
    assert set(_fragments(deb[0])) - set(_fragments(ubu[0])) == {"cuda-wheels-devel"}
    assert set(_fragments(ubu[0])) - set(_fragments(deb[0])) == {"cuda-repo", "cuda-devel-apt", "nccl"}
    assert set(_fragments(deb[1])) - set(_fragments(ubu[1])) == {"cuda-wheels-runtime"}


def test_the_recipe_compiles_git_archives_against_the_wheels(k, specs):
    text = render.Renderer().dockerfile(specs[IMAGE], k)
    assert "developer.download.nvidia.com" not in text and "curl -fsSL" not in text
    for file in ("ucx-1.22.0-git.tar.gz", "openmpi-5.0.10-git.tar.gz", "gdrcopy-2.5.1.tar.gz",
                 "nccl-tests-2.17.6.tar.gz"):
        assert f"--mount=type=bind,source=sources/{file},target=/tmp/sources/{file}" in text
    assert " && ./autogen.sh \\\n" in text
    # Open MPI's autogen (without the bundled hwloc and libevent) runs in its own stage, which the
    # devel stage copies the tree from; the distribution's hwloc and libevent, in both stages
    source, devel, runtime = text.split("\nFROM ")[1:]
    assert source.startswith("imagebuild/base:debian-bookworm AS openmpi-source\n")
    assert source.rstrip().endswith(' && ./autogen.pl --no-3rdparty hwloc,libevent --jobs "$(nproc)"\nWORKDIR /')
    assert "sed -i 's/^greek=.*/greek=/' VERSION" in source and "autogen.pl" not in devel
    assert "COPY --from=openmpi-source /tmp/build/openmpi /tmp/build/openmpi\n" in devel
    assert "--without-gda" in text and "--with-hwloc=external --with-libevent=external" in devel
    assert " libevent-dev libhwloc-dev " in source and " libevent-dev libhwloc-dev " in devel
    assert " libevent-core-2.1-7 libevent-pthreads-2.1-7 libgomp1 libhwloc15 " in runtime
    assert "--disable-mpi-fortran --disable-oshmem" in text and "--disable-io-romio" in text
    gencode = ("-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90 "
               "-gencode=arch=compute_100,code=sm_100 -gencode=arch=compute_100,code=compute_100")
    # nvcc compiles nccl-tests and UCX's device code for the family's build.cuda_arch alone
    assert f'NVCC_GENCODE="{gencode}"' in text and f'--with-nvcc-gencode="{gencode}"' in text
    for flag in ("--without-java", "--without-go", "--disable-examples", "--disable-doxygen-doc",
                 "--disable-static"):
        assert f" {flag} " in text, flag
    labels = specs[IMAGE].labels
    assert labels["io.imagebuild.sources"] == "git"
    assert labels["io.imagebuild.build"] == "fortran=off,gda=off,oshmem=off,romio=off,cuda_arch=8.0+9.0+10.0"
    assert labels["io.imagebuild.cuda.provider"] == "wheels"


def test_the_runtime_stage_installs_the_run_time_subset_of_the_lock(k, specs, tmp_path):
    ctx = output.write_context(specs[IMAGE], tmp_path / "ctx", k=k)
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


def test_the_runtime_image_gets_sshd_from_the_shared_fragment_without_host_keys(k, specs):
    """mpirun reaches another container or node over ssh: every image with Open MPI installs
    OpenSSH from one fragment per packager (apt, dnf), and leaves no host key in the image."""
    r = render.Renderer()
    for image, fragment in ((IMAGE, "openssh-apt"), (UBUNTU_TWIN, "openssh-apt"),
                            ("comms-cu130-nccl2.30.7-rockylinux9-runtime", "openssh-dnf")):
        runtime = r.stages(specs[image], k)[-1]
        step = next(s for s in runtime.steps if s.fragment == fragment)
        assert "rm -f /etc/ssh/ssh_host_*" in step.commands
        assert any("openssh-server" in c for c in step.commands)
        # not in the devel stage: its cached compile stays as it is
        (devel,) = [st for st in r.stages(specs[image], k) if st.name == "devel"]
        assert fragment not in _fragments(devel)


def test_ssh_files_are_new_for_each_run_and_private(tmp_path):
    from cryptography.hazmat.primitives import serialization as ser

    one, two = across.ssh_files(["node0", "node1"]), across.ssh_files(["node0", "node1"])
    files = {}
    with tarfile.open(fileobj=io.BytesIO(one)) as tar:
        for m in tar.getmembers():
            assert (m.uid, m.gid) == (0, 0)
            assert m.mode == (0o700 if m.isdir() else 0o600), m.name
            files[m.name] = tar.extractfile(m).read() if m.isfile() else None
    assert sorted(files) == ["root/.ssh"] + [f"root/.ssh/{n}" for n in (
        "authorized_keys", "config", "id_ed25519", "known_hosts", "ssh_host_ed25519_key", "sshd_config")]
    user = ser.load_ssh_private_key(files["root/.ssh/id_ed25519"], None)
    host = ser.load_ssh_private_key(files["root/.ssh/ssh_host_ed25519_key"], None)
    pub = lambda key: key.public_key().public_bytes(ser.Encoding.OpenSSH, ser.PublicFormat.OpenSSH)  # noqa: E731
    assert files["root/.ssh/authorized_keys"] == pub(user) + b"\n"
    assert files["root/.ssh/known_hosts"] == b"node0,node1 " + pub(host) + b"\n"
    assert b"StrictHostKeyChecking yes" in files["root/.ssh/config"]
    assert b"PasswordAuthentication no" in files["root/.ssh/sshd_config"]
    with tarfile.open(fileobj=io.BytesIO(two)) as tar:   # another run, other keys
        assert tar.extractfile("root/.ssh/id_ed25519").read() != files["root/.ssh/id_ed25519"]


def test_mpirun_across_hosts_puts_one_rank_on_each(monkeypatch):
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/openmpi/lib:/opt/ucx/lib")
    argv = mpirun_argv("/opt/openmpi/bin/mpirun", 2, "self,tcp", "/opt/venv/bin/python",
                       "/opt/openmpi/lib/libmpi.so.40", "/tmp/out", hosts=["node0", "node1"])
    text = " ".join(argv)
    assert "--host node0:1,node1:1 --map-by node --prefix /opt/openmpi" in text
    assert "--oversubscribe" not in argv and "-x LD_LIBRARY_PATH" in text and "-x UCX_TLS=self,tcp" in text
    local = mpirun_argv("/opt/openmpi/bin/mpirun", 2, None, "python3", "libmpi.so.40", "/tmp/out")
    assert "--oversubscribe" in local and "--host" not in local and "pml" not in local


def test_this_side_s_ucx_settings_reach_every_rank(monkeypatch):
    """A UCX setting of the launcher's environment (the run's, e.g. emulation.EMULATED_ENV for an
    image under QEMU) is forwarded to the ranks, whose ssh sessions would not have it; UCX_TLS is
    the check's own."""
    monkeypatch.setenv("UCX_TCP_KEEPIDLE", "inf")
    monkeypatch.setenv("UCX_TLS", "rc")
    argv = mpirun_argv("/opt/openmpi/bin/mpirun", 2, "self,tcp", "python3", "libmpi.so.40", "/tmp/out",
                       hosts=["node0", "node1"])
    pairs = list(zip(argv, argv[1:]))
    assert ("-x", "UCX_TCP_KEEPIDLE") in pairs and ("-x", "UCX_TLS=self,tcp") in pairs
    assert ("-x", "UCX_TLS") not in pairs


# -------------------------------------------------------------------------------------------------
# built on the real engine, tested inside


@pytest.fixture(scope="module")
def comms_image(docker_client) -> str:
    """Built once per module through the real path: matrix.yaml -> resolver -> renderer ->
    `imagebuild build --sources ../shared/sources`, the wheels from the package index with the
    host's CA bundle as the build's secret (never a layer)."""
    return build_debian_image(docker_client, IMAGE).local_ref


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
               "ls /opt/nccl-tests/bin | grep -c _perf; find /opt/nccl-tests ! -name '*_perf' | wc -l; "
               "ldd /opt/nccl-tests/bin/all_reduce_perf")
    count, others, ldd = out.split("\n", 2)
    assert int(count) >= 10, out
    # the binaries alone: not the object files they were linked from (verifiable.o is linked in
    # statically, so nothing of verifiable/ is needed); `find` lists only bin/ and its parent
    assert int(others) == 2, out
    assert "not found" not in ldd
    assert "/opt/openmpi/lib/libmpi.so.40" in ldd
    assert "/site-packages/nvidia/nccl/lib/libnccl.so.2" in ldd
    assert "libcudart.so.13 => /usr/local/cuda-13.0/lib64/libcudart.so.13" in ldd   # the wheel tree


def test_its_context_built_by_plain_docker_build_normalises_to_the_same_image_id(
        comms_image, docker_client, tmp_path, capsys):
    """`imagebuild context` (issue 27): the context, with its checked source tarballs, builds with a
    plain BuildKit `docker build` (Docker's own client, no imagebuild inside the build), and
    `imagebuild normalize` gives it the image ID `imagebuild build` gave."""
    from imagebuild.engines.buildkit_cli import docker_cli
    assert cli.main(["context", IMAGE, "--output", str(tmp_path), "--sources", str(SHARED), "--json"]) == 0
    doc = answer(capsys.readouterr().out, "context")["contexts"][0]
    ctx = tmp_path / IMAGE
    assert doc["ref"] == comms_image and doc["same_id_as"] == "imagebuild build"
    assert sorted(p.name for p in (ctx / "sources").iterdir()) == [
        "gdrcopy-2.5.1.tar.gz", "nccl-tests-2.17.6.tar.gz", "openmpi-5.0.10-git.tar.gz", "ucx-1.22.0-git.tar.gz"]
    ref = "imagebuild-test/context-comms:plain"
    build = subprocess.run([docker_cli(), "build", "-q", "--secret", f"id=ca-bundle,src={CA_BUNDLE}", "-t", ref,
                            str(ctx)], capture_output=True, text=True, timeout=3600,
                           env=dict(os.environ, DOCKER_BUILDKIT="1"))
    assert build.returncode == 0, build.stderr[-2000:]
    plain = docker_client.images.get(ref).id
    try:
        assert cli.main(["normalize", ref, "--context", str(ctx), "--json"]) == 0
        out = answer(capsys.readouterr().out, "normalize")
        assert out["image_id"] == docker_client.images.get(ref).id == docker_client.images.get(comms_image).id
        assert plain != out["image_id"]
    finally:
        docker_client.images.remove(ref, noprune=True)


def test_its_compiled_trees_pack_for_a_gpu_machine(comms_image, docker_client, tmp_path):
    """benchmarks/gpu_proof.sh pack (issue 28): the trees a lent GPU machine runs, taken out of
    this image without build leftovers, under what one device call can carry; the run half of the
    same script refuses in one line on a machine without a GPU."""
    script = str(ROOT / "benchmarks" / "gpu_proof.sh")
    pack = tmp_path / "pack"
    env = {**os.environ, "IMAGEBUILD_GPU_PROOF_DIR": str(pack)}
    res = subprocess.run(["bash", script, "pack", comms_image], env=env, capture_output=True,
                         text=True, timeout=900)
    assert res.returncode == 0, res.stdout + res.stderr
    manifest = dict(line.split(" ", 1) for line in (pack / "MANIFEST").read_text().splitlines())
    assert manifest["image_id"] == docker_client.images.get(comms_image).id
    assert manifest["image_label"] == IMAGE
    packed = int(manifest["packed_bytes"])
    assert packed == (pack / "trees.tar.xz").stat().st_size and packed < 60 << 20
    subprocess.run(["sha256sum", "-c", "--quiet", "SHA256SUMS"], cwd=pack, check=True)
    names = set(subprocess.run(["tar", "-tJf", str(pack / "trees.tar.xz")], capture_output=True,
                               text=True, check=True).stdout.splitlines())
    for want in ("opt/ucx/bin/ucx_info", "opt/ucx/bin/ucx_perftest", "opt/ucx/lib/ucx/libuct_cuda.so.0",
                 "opt/openmpi/bin/mpirun", "opt/openmpi/bin/mpicc", "opt/openmpi/lib/libpmix.so.2",
                 "opt/gdrcopy/lib/libgdrapi.so.2", "opt/nccl-tests/bin/all_reduce_perf"):
        assert want in names, want
    assert not [n for n in names if n.endswith(".o")]
    assert "syslibs/libhwloc.so.15" in names and not [n for n in names if n.startswith("syslibs/libc.so")]
    res = subprocess.run(["bash", script, "run", str(tmp_path / "out")], capture_output=True, text=True,
                         env={**env, "PATH": "/usr/bin:/bin"}, timeout=120)
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        "gpu_proof: nvidia-smi: not found (run runs on the GPU machine)"], res.stderr


# -------------------------------------------------------------------------------------------------
# mpi.two-container: MPI over UCX between two containers, and how that check fails


def test_mpi_over_ucx_between_two_containers(report):
    """One rank in each of two containers on a private network, mpirun starting the second over
    ssh; UCX's shared memory between two containers that share IPC and PID namespaces."""
    two = next(c for c in report[1]["checks"] if c["name"] == "mpi.two-container")
    assert two["status"] == "pass", two["detail"]
    detail = two["detail"]
    assert "one rank in each of 2 containers (node0, node1) on a private network, pml ucx, UCX_TLS=self,tcp" in detail
    assert "starting node1's rank over ssh" in detail
    assert re.search(r"between 2 containers sharing IPC and PID namespaces: ucx_perftest tag_bw of 1 MiB "
                     r"messages over (posix|sysv)(/(posix|sysv))? \(self,sm\)", detail), detail
    assert two["metrics"]["elements_checked"] > 0 and two["metrics"]["shm.bandwidth_MBps.1M"] > 0


def _check(client, ref: str, **kwargs):
    from imagebuild.engines import get_engine
    engine = get_engine("docker", client=client)
    info = testrun.inspect_image(engine, ref)
    with testrun.Containers(engine) as cs:
        return testrun.two_container(cs, info, testrun.TestOptions(timeout=120), **kwargs)


def test_a_transport_that_cannot_connect_fails_the_check(comms_image, docker_client):
    """Shared memory between containers that do not share namespaces is unreachable to UCX, and
    so is MPI over shared memory between two containers at all: Open MPI's pml ucx gives ranks
    on another host only the network part of the UCX address (pml_ucx.c), whatever the containers
    share (seen with pml_ucx_verbose: 'Got proc 1 address, size 77' against 192 for a local peer)."""
    result = _check(docker_client, comms_image, mpi_tls="self,sm", share_namespaces=False)
    assert result.status == "fail"
    mpi, shm = result.detail.split("; FAIL: ")
    assert mpi.startswith("FAIL: MPI across 2 containers (pml ucx, UCX_TLS=self,sm): mpirun in node0 exited ")
    assert "Destination is unreachable" in mpi
    assert "with their own IPC and PID namespaces (self,sm): ucx_perftest exited" in shm
    assert "different pid namespaces" in shm


def _derived(client, base: str, tag: str, text: str) -> str:
    ref = f"imagebuild/comms-proto:{tag}"
    client.images.build(fileobj=io.BytesIO(f"FROM {base}\n{text}\n".encode()), tag=ref, rm=True, forcerm=True)
    return ref


@pytest.fixture()
def derived(docker_client):
    refs: list[str] = []
    yield refs
    for ref in refs:
        try:
            docker_client.images.remove(ref, force=True)
        except Exception:  # noqa: BLE001 - already gone
            pass


def _only_two_container(ref: str, tmp_path) -> tuple[int, dict]:
    path = tmp_path / "report.json"
    code = cli.main(["test", ref, "--only", "mpi.two-container", "--report", str(path), "--timeout", "120"])
    (check,) = json.loads(path.read_text())["checks"]
    return code, check


def test_a_wrong_sum_fails_the_check(comms_image, docker_client, derived, tmp_path):
    # each rank adds one more than the worker expects: the MPI_SUM arrives, but wrong
    worker = "/opt/imagebuild/lib/imagebuild/smoke/workers/mpi_allreduce.py"
    derived.append(_derived(docker_client, comms_image, "wrong-sum",
                            f"RUN sed -i 's/return float((rank + 1) \\*/return float((rank + 2) */' {worker} "
                            f"&& grep -q 'rank + 2' {worker}"))
    code, check = _only_two_container(derived[-1], tmp_path)
    assert code == 1 and check["status"] == "fail"
    assert "rank 0: 1 doubles: element 0 is 5.0, expected 3.0" in check["detail"]


def test_an_image_without_sshd_fails_and_says_so(comms_image, docker_client, derived, tmp_path):
    derived.append(_derived(docker_client, comms_image, "no-sshd", "RUN rm /usr/sbin/sshd"))
    code, check = _only_two_container(derived[-1], tmp_path)
    assert code == 1 and check["status"] == "fail"
    assert "sshd did not start in node1: no /usr/sbin/sshd in the image" in check["detail"]


def test_the_check_skips_only_an_image_without_open_mpi(comms_image, docker_client, derived, tmp_path):
    derived.append(_derived(docker_client, comms_image, "no-mpi", "LABEL io.imagebuild.stack.openmpi=none"))
    code, check = _only_two_container(derived[-1], tmp_path)
    assert code == 0 and check["status"] == "skip"
    assert check["detail"] == "Open MPI absent by design (openmpi none)"


# -------------------------------------------------------------------------------------------------
# issue 13: the same image ID from a second cold build


@pytest.mark.heavy
def test_a_second_cold_build_gives_the_same_image_id(comms_image, docker_client, tmp_path):
    """`imagebuild build IMAGE --no-cache --json` again (every step anew: the wheels downloaded,
    UCX, Open MPI and nccl-tests compiled) gives the image ID the module's first build gave. On a
    fresh CI machine that first build was cold too; on a machine with a warm build cache its
    layers are those of the earlier cold build that filled the cache."""
    first = docker_client.images.get(comms_image).id
    since = engine_time(docker_client)
    proc = subprocess.run([sys.executable, "-m", "imagebuild", "build", IMAGE, "--no-cache", "--json", "--quiet",
                           "--ca-bundle", str(CA_BUNDLE), "--sources", str(SHARED),
                           "--output", str(tmp_path / "build"), "--log-dir", str(tmp_path / "logs")],
                          cwd=ROOT, capture_output=True, text=True, timeout=3 * 3600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = [r for r in answer(proc.stdout, "build") if r["image"] == IMAGE]
    second = row["image_id"]
    try:
        assert second == docker_client.images.get(comms_image).id
        assert second == first, f"a second cold build of {IMAGE} gave {second[:19]}, the first {first[:19]}"
    finally:
        if second != first:   # keep the first where the module's tests found it
            docker_client.images.get(first).tag(*comms_image.rsplit(":", 1))
        # the second build's cache is a copy of the first's (3.4 GB): later builds of this image
        # (the devel image's runtime) hit the first's, so the copy goes
        prune_build_cache_since(docker_client, since)
