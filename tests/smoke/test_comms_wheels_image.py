"""The communication image built here from the package registries alone: Debian 12, Debian's
rdma-core, UCX 1.13.1 (verbs, rdmacm, cma) and Open MPI 4.1.4 (pml ucx), built without CUDA;
CUDA 13.0.3's run time and NCCL 2.30.7 from NVIDIA's wheels; imagebuild's own NCCL benchmark
(imagebuild-nccl-bw), compiled in a build stage of its own with Debian's mpicc against the wheels'
headers, in place of nccl-tests, which no registry serves (issue 42).

The first tests read the matrix, the lock and the renderer (no engine): nothing of the recipe comes
from an upstream source archive, and what it says of itself (labels, image.json) is what it is. The
last ones build the image through the product (`imagebuild build`, the wheels from the package
index with the host's CA bundle as the build's secret) and run `imagebuild test` in it: the CPU
tier, since these machines have no GPU, with mpi.two-container (MPI over UCX with one rank in each
of two containers, and UCX's shared memory between two containers) and the ways that check must
fail. The last test, in the heavy tier, builds the image a second time with --no-cache and asserts
the same image ID. Under CI=true they fail without an engine.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile

import pytest

from conftest import (CA_BUNDLE, ROOT, answer, build_debian_image, engine_time,
                      prune_build_cache_since)
from imagebuild import cli
from imagebuild.render import output, renderer as render, sources as S
from imagebuild.testrun import across, runner as testrun
from imagebuild.resolve.solver import Host, resolve
from imagebuild.smoke.checks import mpirun_argv
from imagebuild.smoke.imagecheck import judge

IMAGE = "comms-cu130-nccl2.30.7-debian12-runtime"
DEVEL = "comms-cu130-nccl2.30.7-debian12-devel"
UBUNTU_TWIN = "comms-cu130-nccl2.30.7-ubuntu24.04-runtime"   # the same NCCL and CUDA, compiled on a site
MATRIX = ROOT / "matrix.yaml"
# the fragments that compile upstream sources, in the images sites build
COMPILED = ["gdrcopy", "ucx", "openmpi", "nccl-tests"]
BENCH = "/usr/local/bin/imagebuild-nccl-bw"


def _fragments(stage) -> list[str]:
    return [s.fragment for s in stage.steps if s.kind == "run"]


def test_nothing_comes_from_an_upstream_source_archive(k, specs_by_id):
    """The registry-built image compiles no upstream code: no tarball is bound, fetched or listed,
    and the stages are the benchmark's build stage and the image."""
    spec = specs_by_id[IMAGE]
    assert not spec.compiles and spec.nccl_bench and S.for_image(k, spec, "release") == []
    assert S.for_image(k, spec, "git") == []
    text = render.Renderer().dockerfile(spec, k)
    assert "--mount=type=bind" not in text and "/tmp/sources/" not in text
    assert "curl " not in text and "developer.download.nvidia.com" not in text and "git clone" not in text
    bench, final = render.Renderer().stages(spec, k)
    assert bench.name == "nccl-bench" and final.name is None
    assert _fragments(bench) == ["debian-mpi", "c-compiler-apt", "venv", "nccl-bench"]
    assert _fragments(final) == ["debian-mpi", "openssh-apt", "rdma-runtime-apt", "venv",
                                 "cuda-wheels-runtime", "smoke", "pip-constraint"]
    assert not set(COMPILED) & set(_fragments(bench) + _fragments(final))
    # the two stages start with the same OS packages step: one layer, built once
    assert bench.steps[0].commands == final.steps[0].commands
    # only the binary leaves the build stage: no compiler, header or source in the image
    copies = [(st.from_stage, st.src, st.dest) for st in final.steps if st.kind == "copy" and st.from_stage]
    assert copies == [("nccl-bench", BENCH, BENCH)]
    assert not any("gcc" in c for st in final.steps for c in st.commands)
    # the site images of the same NCCL and CUDA still compile the four from upstream tarballs
    twin = render.Renderer().stages(specs_by_id[UBUNTU_TWIN], k)
    assert [f for f in _fragments(twin[0]) if f in COMPILED] == COMPILED
    assert [t.name for t in S.for_image(k, specs_by_id[UBUNTU_TWIN])] == ["gdrcopy", "nccl-tests", "ucx", "openmpi"]


def test_the_benchmark_is_built_from_the_packaged_source_against_the_wheels(k, specs_by_id):
    text = render.Renderer().dockerfile(specs_by_id[IMAGE], k)
    bench_stage = text.split("\nFROM ")[1]
    assert "COPY lib/imagebuild/smoke/bench/nccl_bw.c /tmp/build/nccl-bench/nccl_bw.c\n" in bench_stage
    site = "/opt/venv/lib/python3.11/site-packages/nvidia"
    assert (f"mpicc -std=c11 -O2 -Wall -Wextra -DIMAGEBUILD_WITH_MPI -I{site}/cu13/include "
            f"-I{site}/nccl/include /tmp/build/nccl-bench/nccl_bw.c -o {BENCH}") in bench_stage
    assert f"-Wl,--enable-new-dtags,-rpath,{site}/cu13/lib:{site}/nccl/lib" in bench_stage
    assert f" && {BENCH} --version\n" in bench_stage
    assert " gcc libc6-dev" in bench_stage
    # the source the context copies is the installed package's
    from imagebuild.smoke.ncclbench import NCCL_BENCH, NCCL_BENCH_SOURCE
    assert NCCL_BENCH == BENCH and (render.package_files() / "smoke" / NCCL_BENCH_SOURCE).is_file()


def test_its_labels_and_image_json_say_what_it_is(k, specs_by_id):
    """RDMA-ready (Debian's UCX has verbs and rdmacm, as its release entry records with its
    source), MPI not CUDA-aware, GPU collectives through NCCL: in the labels, image.json and
    imagebuild-check's line."""
    spec = specs_by_id[IMAGE]
    assert spec.features == {"gdrcopy": False, "mpi_cuda": False, "nccl_bench": True, "rdmacm": True,
                             "ucx_cuda": False, "verbs": True}
    labels = spec.labels
    assert labels["io.imagebuild.features"] == "gdrcopy=off,mpi_cuda=off,nccl_bench=on,rdmacm=on,ucx_cuda=off,verbs=on"
    assert labels["io.imagebuild.cuda.provider"] == "wheels"
    assert "io.imagebuild.sources" not in labels and "io.imagebuild.build" not in labels
    doc = spec.image_json
    assert "built" not in doc and "sources" not in doc and doc["features"] == spec.features
    assert k.ucx["1.13.1"].transports == ("cma", "rdmacm", "verbs")
    code, line = judge(doc, None, None)
    assert code == 3 and line.endswith("[RDMA-ready (UCX verbs, rdmacm); MPI not CUDA-aware: GPU "
                                       "collectives through NCCL 2.30.7]"), line
    code, line = judge({**doc, "needs": {"native_driver": "580.65.06"}}, "580.95.05",
                       [("NVIDIA H100 80GB HBM3", "9.0", "580.95.05")])
    assert code == 0 and "runs here" in line and line.endswith("GPU collectives through NCCL 2.30.7]")
    site = specs_by_id[UBUNTU_TWIN]
    assert judge(site.image_json, None, None)[1].endswith(
        "[RDMA-ready (UCX verbs, rdmacm); CUDA-aware MPI, GPU collectives through NCCL 2.30.7]")


def test_the_runtime_stage_installs_the_run_time_subset_of_the_lock(k, specs_by_id, tmp_path):
    ctx = output.write_context(specs_by_id[IMAGE], tmp_path / "ctx", k=k)
    whole = (ctx / "requirements" / "wheels.txt").read_text()
    runtime = (ctx / "requirements" / "runtime.txt").read_text()
    # the build stage installs the whole lock (the headers: crt, cccl), the image its run time
    assert "cuda-toolkit==13.0.3.0" in whole and "nvidia-cuda-crt==13.0.88" in whole
    assert "nvidia-cuda-cccl==13.0.85" in whole
    pins = sorted(ln.split(" ")[0] for ln in runtime.splitlines() if "==" in ln)
    assert pins == ["nvidia-cuda-runtime==13.0.96", "nvidia-nccl-cu13==2.30.7"]
    assert not (ctx / "sources").exists()
    assert (ctx / "lib" / "imagebuild" / "smoke" / "bench" / "nccl_bw.c").is_file()


def test_a_family_without_pytorch_or_nccl_on_the_os_mpi_is_refused(tmp_path, capsys):
    text = MATRIX.read_text()
    block = text[text.index("  - family: comms\n    description: \"communication base from the package registries"):]
    block = block[:block.index("  - family: smoke-cpu")]
    copy = tmp_path / "matrix.yaml"
    copy.write_text(text.replace(block, block.replace("    nccl: [2.30.7]\n", "")))
    assert cli.main(["knowledge", "validate", "--matrix", str(copy)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a communication image built from the registries: name its NCCL (nccl:)" in err[0]
    assert f"{copy}:" in err[0]


def test_users_without_pytorch_still_get_cuda_from_a_repository(k):
    """The toolkit's wheels are an image's choice (cuda_from: wheels); a user's resolve without
    PyTorch on Debian 12 keeps reading CUDA from a repository, which Debian 12 has none of."""
    res = resolve(k, Host(), {"os": "debian12", "pytorch": "none", "cuda": ">=13"})
    assert not res.ok


def test_the_runtime_image_gets_sshd_from_the_shared_fragment_without_host_keys(k, specs_by_id):
    """mpirun reaches another container or node over ssh: every image with Open MPI installs
    OpenSSH from one fragment per packager (apt, dnf), and leaves no host key in the image."""
    r = render.Renderer()
    for image, fragment in ((IMAGE, "openssh-apt"), (UBUNTU_TWIN, "openssh-apt"),
                            ("comms-cu130-nccl2.30.7-rockylinux9-runtime", "openssh-dnf")):
        runtime = r.stages(specs_by_id[image], k)[-1]
        step = next(s for s in runtime.steps if s.fragment == fragment)
        assert "rm -f /etc/ssh/ssh_host_*" in step.commands
        assert any("openssh-server" in c for c in step.commands)
        # not in a build stage: its cached compile stays as it is
        for stage in r.stages(specs_by_id[image], k)[:-1]:
            assert fragment not in _fragments(stage), (image, stage.name)


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
    `imagebuild build`, the wheels from the package index with the host's CA bundle as the build's
    secret (never a layer), the OS packages from Debian's mirror."""
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
    for name in ("versions", "libraries", "mpi.config", "mpi.allreduce", "nccl.bench", "mpi.two-container"):
        assert statuses[name][0] == "pass", (name, statuses[name])


def test_versions_come_from_the_installed_libraries_and_equal_the_labels(report, specs_by_id):
    s = specs_by_id[IMAGE].stack
    detail = _detail(report, "versions")
    assert f"ucx (ucx_info -v): 1.13.1 matches {s['ucx']}" in detail
    assert f"openmpi (ompi_info --parsable): 4.1.4 matches {s['openmpi']}" in detail
    assert f"wheel nvidia-cuda-runtime's CUDA runtime (libcudart): 13.0 matches {s['cuda']}" in detail
    assert f"wheel nvidia-nccl's NCCL (libnccl.so.2): {s['nccl']} matches {s['nccl']}" in detail
    assert "labels equal /opt/imagebuild/image.json" in detail


def test_ucx_has_its_rdma_transports_and_open_mpi_is_not_cuda_aware(report):
    """What the labels promise, read from the installed UCX and Open MPI: verbs (ib) and rdmacm
    built in, Open MPI with the UCX PML and without CUDA support, which the image does not claim."""
    detail = _detail(report, "mpi.config")
    assert "Open MPI has the UCX PML" in detail
    assert "UCX modules built in: cma, ib, rdmacm" in detail
    assert "UCX has what the image promises: verbs (ib), rdmacm (rdmacm)" in detail
    assert "CUDA support in Open MPI: no (not required: the image does not promise a CUDA-aware Open MPI" in detail


def test_the_benchmark_links_this_images_nccl_and_cuda_run_time(report):
    detail = _detail(report, "nccl.bench")
    assert "libnccl.so.2 => /opt/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2" in detail
    assert "libcudart.so.13 => /usr/local/cuda-13.0/lib64/libcudart.so.13" in detail   # the wheel's tree
    assert "NCCL 2.30.7 from its headers matches 2.30.7" in detail
    assert "NCCL 2.30.7 from its library matches 2.30.7" in detail


def test_every_elf_resolves_but_the_drivers_own(report):
    detail = _detail(report, "libraries")
    assert "FAIL" not in detail
    assert "libnccl.so.2: ok" in detail and "libucp.so.0: ok" in detail and "libmpi.so.40: ok" in detail
    assert "one copy of each CUDA, cuDNN, NCCL, UCX and MPI library" in detail


def test_mpi_over_ucx_shared_memory_and_tcp(report):
    detail = _detail(report, "mpi.allreduce")
    assert "pml ucx, UCX_TLS=self,sm and self,tcp" in detail


def test_the_runtime_image_has_no_compiler_crt_or_repository(comms_image, docker_client, specs_by_id):
    out = _run(docker_client, comms_image,
               "find / -xdev \\( -name 'libcuda.so*' -o -name 'libnvidia-ml.so*' -o -name nvcc "
               "-o -name host_defines.h -path '*crt*' -o -name '*.o' -path '/tmp/*' \\) -print; "
               "command -v gcc cc || true; ls /etc/apt/sources.list.d; "
               "ompi_info --parsable --all 2>/dev/null | grep -E '^mca:mpi:base:param:mpi_built_with_cuda_support:value:'")
    lines = out.strip().splitlines()
    assert lines == ["mca:mpi:base:param:mpi_built_with_cuda_support:value:false"], out
    attrs = docker_client.images.get(comms_image).attrs["Config"]
    env = dict(e.split("=", 1) for e in attrs["Env"])
    spec = specs_by_id[IMAGE]
    assert env["NVIDIA_REQUIRE_CUDA"].startswith("cuda>=13.0")
    assert env["CUDA_HOME"] == "/usr/local/cuda-13.0"
    assert env["LD_LIBRARY_PATH"] == ("/opt/venv/lib/python3.11/site-packages/nvidia/nccl/lib:"
                                      "/usr/local/cuda-13.0/lib64")
    assert "/opt/openmpi" not in env["PATH"] and "/opt/ucx" not in env["PATH"]
    assert attrs["Labels"]["io.imagebuild.features"] == spec.labels["io.imagebuild.features"]
    assert "io.imagebuild.sources" not in attrs["Labels"]


def test_the_benchmark_refuses_in_one_line_without_a_gpu(comms_image, docker_client):
    """No GPU here: the benchmark says so and exits 3, under mpirun too, and never prints a table."""
    out = _run(docker_client, comms_image,
               f"{BENCH} -b 8 -e 1M 2>&1; echo \"exit $?\"; "
               f"mpirun --allow-run-as-root -np 2 {BENCH} 2>&1 | grep -c '^imagebuild-nccl-bw: process [01]: no CUDA device'; "
               f"{BENCH} -C all_to_none 2>&1; echo \"exit $?\"")
    lines = out.strip().splitlines()
    assert lines[0].startswith("imagebuild-nccl-bw: no CUDA device: ") and lines[1] == "exit 3", out
    assert lines[2] in ("1", "2"), out     # each on a line of its own (MPI_Abort may stop the other first)
    assert lines[3].startswith("imagebuild-nccl-bw: -C all_to_none: unknown collective") and lines[4] == "exit 2"
    assert "Out of bounds" not in out


def test_its_context_built_by_plain_docker_build_normalises_to_the_same_image_id(
        comms_image, docker_client, tmp_path, capsys):
    """`imagebuild context` (issue 27): the context builds with a plain BuildKit `docker build`
    (Docker's own client, no imagebuild inside the build), and `imagebuild normalize` gives it the
    image ID `imagebuild build` gave. It holds no source tarball: none is compiled."""
    from imagebuild.engines.buildkit_cli import docker_cli
    assert cli.main(["context", IMAGE, "--output", str(tmp_path), "--json"]) == 0
    doc = answer(capsys.readouterr().out, "context")["contexts"][0]
    ctx = tmp_path / IMAGE
    assert doc["ref"] == comms_image and doc["same_id_as"] == "imagebuild build"
    assert not (ctx / "sources").exists()
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


def test_its_benchmark_packs_for_a_gpu_machine(comms_image, docker_client, tmp_path):
    """benchmarks/gpu_proof.sh pack: the benchmark the image compiled and the system libraries it
    links (no NVIDIA library), under what one device call can carry; the run half believes only
    the sha256 given on its command line, never one that travels in the pack, and refuses in one
    line without it, with another, and on a machine without a GPU."""
    script = str(ROOT / "benchmarks" / "gpu_proof.sh")
    pack = tmp_path / "pack"
    env = {**os.environ, "IMAGEBUILD_GPU_PROOF_DIR": str(pack)}
    res = subprocess.run(["bash", script, "pack", comms_image], env=env, capture_output=True,
                         text=True, timeout=900)
    assert res.returncode == 0, res.stdout + res.stderr
    facts = dict(line.split(" ", 1) for line in res.stdout.splitlines() if " " in line)
    archive = pack / "pack.tar.xz"
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    assert facts["image_id"] == docker_client.images.get(comms_image).id and facts["image_label"] == IMAGE
    assert facts["pack_sha256"] == digest and int(facts["packed_bytes"]) == archive.stat().st_size < 60 << 20
    assert sorted(p.name for p in pack.iterdir()) == ["pack.tar.xz"]     # no checksum file beside it
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        binary = tar.extractfile("bin/imagebuild-nccl-bw").read()
    assert hashlib.sha256(binary).hexdigest() == facts["bench_sha256"]
    assert "syslibs/libmpi.so.40" in names and "MANIFEST" in names
    assert not [n for n in names if re.search(r"libc\.so|libnccl|libcudart|libcuda\.so", n)], names

    def run(*argv, path="/usr/bin:/bin"):
        return subprocess.run(["bash", script, "run", *argv, str(tmp_path / "out")], capture_output=True,
                              text=True, env={**env, "PATH": path}, timeout=120)
    res = run()
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        "gpu_proof: run needs the sha256 pack printed (--sha256 HEX, or IMAGEBUILD_GPU_PROOF_SHA256): "
        "nothing in the pack vouches for the pack"], res.stderr
    res = run("--sha256", "0" * 64)
    assert res.returncode == 2 and f"sha256 {digest}, not the {'0' * 64} given: refused" in res.stderr
    res = run("--sha256", digest)
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        "gpu_proof: nvidia-smi: not found (run runs on the GPU machine)"], res.stderr
    assert not (tmp_path / "out").exists()


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
    # UCX 1.13 (Debian's) does not print the transports it chose (UCX_PROTO_INFO came later)
    assert re.search(r"between 2 containers sharing IPC and PID namespaces: ucx_perftest tag_bw of 1 MiB "
                     r"messages (over (posix|sysv)(/(posix|sysv))? )?\(self,sm\)", detail), detail
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
    # UCX 1.13 names no reason beyond "unreachable"; later releases add "different pid namespaces"
    assert "different pid namespaces" in shm or "Destination is unreachable" in shm


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
    """`imagebuild build IMAGE --no-cache --json` again (every step anew: the OS packages and the wheels
    downloaded, the benchmark compiled) gives the image ID the module's first build gave. On a
    fresh CI machine that first build was cold too; on a machine with a warm build cache its
    layers are those of the earlier cold build that filled the cache."""
    first = docker_client.images.get(comms_image).id
    since = engine_time(docker_client)
    proc = subprocess.run([sys.executable, "-m", "imagebuild", "build", IMAGE, "--no-cache", "--json", "--quiet",
                           "--ca-bundle", str(CA_BUNDLE),
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
        # the second build's cache is a copy of the first's: later builds of this image (the
        # devel image's runtime) hit the first's, so the copy goes
        prune_build_cache_since(docker_client, since)
