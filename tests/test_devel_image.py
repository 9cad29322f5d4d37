"""Devel images FROM their runtime image, as NVIDIA's CUDA images are layered (issue 14).

A devel image is one stage FROM the runtime image of the same stack (its ImageSpec depends_on
that image and names its local_ref): the runtime image already holds the compiled prefixes, the
venv and sshd, so the devel adds only the OS build tools, CUDA's development packages (the
repository's, or the cuda-toolkit wheels of the image's lock) and the RDMA headers, then its own
image.json, env and labels. The first tests read the matrix and the renderer (no engine). The
last ones build comms-cu130-nccl2.30.7-debian12-devel through `imagebuild build` (which builds its
runtime first: from the build cache when test_comms_wheels_image.py or an earlier run built it)
and assert on the real images: the devel's layers start with all of the runtime's, the share of
the runtime's bytes it reuses, nvcc and mpicc work inside it, `imagebuild test` passes its CPU
tier, and `lock` / `build --locked` accept an image whose FROM is an imagebuild image. Under
CI=true they fail without an engine.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from conftest import CA_BUNDLE, ROOT, SHARED_SOURCES as SHARED, build_debian_image
from imagebuild import cli, dockerfile, knowledge
from imagebuild.render import images, renderer as render
from imagebuild.deliver import lockfile
from imagebuild.cli.commands.build import jobs_for
from imagebuild.deliver.plan import github_matrix, plan

DEVEL = "comms-cu130-nccl2.30.7-debian12-devel"
RUNTIME = "comms-cu130-nccl2.30.7-debian12-runtime"
MATRIX = ROOT / "matrix.yaml"
COMPILED = {"gdrcopy", "ucx", "openmpi", "nccl-tests"}


@pytest.fixture(scope="module")
def k():
    return knowledge.load(MATRIX)


@pytest.fixture(scope="module")
def specs(k):
    return {s.id: s for s in images.expand(k)[0]}


def _fragments(stage) -> list[str]:
    return [s.fragment for s in stage.steps if s.kind == "run"]


def test_every_devel_image_depends_on_its_runtime_image(specs):
    devels = [s for s in specs.values() if s.flavor == "devel"]
    assert len(devels) > 20 and DEVEL in specs
    for spec in devels:
        head, _, platform = spec.id.rpartition("-devel")          # platform: "" or "-arm64"
        runtime = specs[f"{head}-runtime{platform}"]
        assert spec.depends_on == (runtime.id,)
        assert spec.from_image == runtime.local_ref
        assert spec.stack == runtime.stack and spec.wheel_lock == runtime.wheel_lock
    assert all(not s.depends_on and s.from_image is None for s in specs.values() if s.flavor != "devel")


def test_a_devel_recipe_is_one_stage_from_its_runtime_image_that_compiles_nothing(k, specs):
    r = render.Renderer()
    for spec in (s for s in specs.values() if s.flavor == "devel"):
        (stage,) = r.stages(spec, k)
        assert stage.base == spec.from_image and stage.bootstrap == "docker-daemon"
        frags = _fragments(stage)
        assert not COMPILED & set(frags), spec.id
        assert not any(s.from_stage for s in stage.steps if s.kind == "copy")
        pm = "dnf" if spec.os["family"] == "rhel" else "apt"     # packages steps: <role>-<manager>
        if spec.cuda_from == "wheels":
            assert frags == [f"os-devel-{pm}", "cuda-wheels-devel", "pip-constraint"], spec.id
        else:
            assert frags == [f"os-devel-{pm}", f"cuda-devel-{pm}"], spec.id
        text = r.dockerfile(spec, k)
        assert [ln for ln in text.splitlines() if ln.startswith("FROM ")] == [f"FROM {spec.from_image}"]
        assert dockerfile.base_refs(text) == [spec.from_image] == [dockerfile.final_base(text)]
        labels = dict(next(s.items for s in stage.steps if s.kind == "label"))
        assert labels["io.imagebuild.flavor"] == "devel" and labels["io.imagebuild.image-id"] == spec.id


def test_the_debian_devel_adds_the_toolkit_wheels_without_redoing_the_runtime_links(k, specs):
    text = render.Renderer().dockerfile(specs[DEVEL], k)
    assert "COPY requirements/wheels.txt /opt/imagebuild/requirements/wheels.txt" in text
    assert "-r /opt/imagebuild/requirements/wheels.txt" in text
    # the runtime image's cuda-wheels-runtime step made lib64 and CUDA_HOME: not again
    assert "nvidia/cu13/lib64" not in text and "ln -s /opt/venv" not in text
    assert "ln -s libcudart.so.13 " in text and "lib/stubs/libcuda.so" in text
    assert "libibverbs-dev librdmacm-dev" in text      # the RDMA headers
    assert "COPY image.json /opt/imagebuild/image.json" in text and "COPY lib/" not in text
    # the runtime recipe's devel stage still makes both links
    runtime = render.Renderer().dockerfile(specs[RUNTIME], k)
    assert "ln -s lib /opt/venv/lib/python3.11/site-packages/nvidia/cu13/lib64" in runtime


def test_the_singularity_definition_bootstraps_from_the_runtime_image(k, specs):
    text = render.Renderer().singularity(specs[DEVEL], k)
    assert f"Bootstrap: docker-daemon\nFrom: {specs[RUNTIME].local_ref}\n" in text
    assert "# Built on the runtime image of the same stack" in text
    assert text.count("Bootstrap:") == 1 and "Stage:" not in text
    runtime = render.Renderer().singularity(specs[RUNTIME], k)
    assert "docker-daemon" not in runtime and "# Built on the runtime image" not in runtime


def _matrix_with(tmp_path: Path, old: str, new: str) -> Path:
    text = MATRIX.read_text()
    assert text.count(old) == 1
    out = tmp_path / "matrix.yaml"
    out.write_text(text.replace(old, new))
    (tmp_path / "locks").symlink_to(ROOT / "locks")
    return out


def test_a_devel_flavor_without_runtime_is_one_line_naming_the_family(tmp_path, capsys):
    old = "    flavors: [runtime, devel]          # devel: FROM the runtime image"
    matrix = _matrix_with(tmp_path, old, old.replace("[runtime, devel]", "[devel]         "))
    assert cli.main(["images", "--matrix", str(matrix)]) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    # refused when the matrix is loaded (gate 3), on the family's flavors line
    line = next(i for i, ln in enumerate(matrix.read_text().splitlines(), 1)
                if ln.startswith("    flavors: [devel] "))
    assert f"{matrix}:{line}:" in err, err
    assert "(comms).flavors: a devel image is built FROM the runtime image" in err, err


def test_devel_beside_torchs_wheel_closure_is_still_refused(tmp_path, capsys):
    old = "    flavors: [runtime]\n    pytorch: \"2.13.0\"\n    variants: default\n    os: [debian12]\n"
    matrix = _matrix_with(tmp_path, old, old.replace("[runtime]", "[runtime, devel]"))
    assert cli.main(["images", "--matrix", str(matrix)]) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert "wheels makes runtime images only" in err


def test_building_only_the_devel_builds_its_runtime_first(k, tmp_path):
    jobs = jobs_for([DEVEL], k, tmp_path)
    assert [j.image_id for j in jobs] == [RUNTIME, DEVEL]
    assert jobs[1].depends_on == (RUNTIME,)
    assert jobs[0].prepare is not None and jobs[1].prepare is None   # the devel reads no tarball


def test_the_lock_drops_a_base_built_in_the_same_run():
    ours = "imagebuild/r:t"
    entry = {"base_image": "sha256:" + "1" * 64, "bases": {ours: {"id": "sha256:" + "1" * 64, "digest": None}}}
    assert lockfile.without_bases(entry, {ours}) == {"base_image": None, "bases": {}}
    other = {"base_image": "sha256:" + "2" * 64, "bases": {"debian:12": {"id": "sha256:" + "2" * 64, "digest": None}}}
    assert lockfile.without_bases(other, {ours}) is other


def test_the_plan_names_the_devels_base(k, specs):
    verdicts = plan(k, list(specs.values()), "550.54.14", "580.65.06")
    rows = {row["image"]: row for row in github_matrix(verdicts)["include"]}
    assert rows[DEVEL]["base"] == RUNTIME and RUNTIME in rows and "base" not in rows[RUNTIME]


# -------------------------------------------------------------------------------------------------
# built on the real engine


@pytest.fixture(scope="module")
def built(docker_client) -> tuple[str, str]:
    """The devel image built through `imagebuild build DEVEL`: its runtime first, from the build
    cache when it was built before (test_comms_wheels_image.py's fixture, an earlier run)."""
    spec = build_debian_image(docker_client, DEVEL)
    return spec.from_image, spec.local_ref


@pytest.fixture(scope="module")
def engine(docker_client):
    from imagebuild.engines import get_engine
    return get_engine("docker", client=docker_client)


def test_the_devel_layers_start_with_every_runtime_layer(built, engine):
    runtime, devel = (engine.inspect(ref) for ref in built)
    assert runtime.layers and devel.layers[:len(runtime.layers)] == runtime.layers
    assert len(devel.layers) > len(runtime.layers)
    assert devel.labels["org.opencontainers.image.base.name"] == built[0]
    assert devel.labels["org.opencontainers.image.base.digest"] == runtime.id


def test_the_devel_reuses_the_runtimes_bytes(built, engine):
    r_layers, d_layers = (engine.layer_sizes(ref) for ref in built)
    total = sum(size for _, size in r_layers)
    shared = 0
    for (r_id, size), (d_id, _) in zip(r_layers, d_layers):
        if r_id != d_id:
            break
        shared += size
    assert total > 0 and shared / total >= 0.90, f"{shared} of {total} bytes"
    assert shared == total   # every layer, so every byte


_PROGRAMS = r"""
set -e
cd /tmp
nvcc --version
cat > k.cu <<'X'
#include <cstdio>
#include <cuda_runtime.h>
__global__ void inc(int *x) { x[threadIdx.x] += 1; }
int main() { int n = 0; cudaError_t e = cudaGetDeviceCount(&n); std::printf("runtime says: %s\n", cudaGetErrorString(e)); return 0; }
X
nvcc -arch=sm_90 -cudart shared -o k k.cu
echo "LDD $(ldd k | grep libcudart)"
./k || true
cat > m.c <<'X'
#include <mpi.h>
#include <stdio.h>
int main(int c, char **v) { int r, s, x, y; MPI_Init(&c, &v); MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &s); x = r + 1; MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  printf("MPI rank %d of %d sum %d\n", r, s, y); MPI_Finalize(); return 0; }
X
mpicc -o m m.c
mpirun --allow-run-as-root --oversubscribe -np 2 --mca pml ucx --mca pml_ucx_tls any \
  --mca pml_ucx_devices any -x UCX_TLS=self,tcp ./m 2>/dev/null
"""


def test_nvcc_and_mpicc_build_and_run_programs_inside(built, docker_client):
    out = docker_client.containers.run(built[1], ["-c", _PROGRAMS], entrypoint="bash",
                                       remove=True).decode()
    assert "Cuda compilation tools, release 13.0" in out
    assert "LDD \tlibcudart.so.13 => /usr/local/cuda-13.0/lib64/libcudart.so.13" in out
    assert "runtime says:" in out     # no GPU here: the call fails, the program ran
    assert "MPI rank 0 of 2 sum 3" in out and "MPI rank 1 of 2 sum 3" in out


def test_imagebuild_test_passes_the_cpu_tier(built, tmp_path):
    path = tmp_path / "report.json"
    code = cli.main(["test", built[1], "--report", str(path), "--ranks", "2"])
    data = json.loads(path.read_text())
    failed = {c["name"]: c["detail"] for c in data["checks"] if c["status"] == "fail"}
    assert code == 0 and not failed and data["imagebuild_id"] == DEVEL
    statuses = {c["name"]: c["status"] for c in data["checks"]}
    for name in ("versions", "libraries", "mpi.config", "mpi.allreduce"):
        assert statuses[name] == "pass", name


def test_lock_and_build_locked_take_the_runtime_as_the_devels_base(built, engine, tmp_path, capsys):
    lock = tmp_path / "images.lock"
    common = ["--matrix", str(MATRIX), "--lock", str(lock)]
    capsys.readouterr()
    assert cli.main(["lock", *common, DEVEL]) == 0      # with its runtime, which `build DEVEL` builds
    assert f"{RUNTIME}: locked too ({DEVEL} is built FROM it)" in capsys.readouterr().err
    entries = lockfile.read_lock(lock)
    entry = entries[DEVEL]
    runtime_id = engine.inspect(built[0]).id
    assert entry["bases"] == {built[0]: {"digest": None, "id": runtime_id}}
    assert entry["base_image"] == runtime_id == entries[RUNTIME]["image_id"]
    build = ["build", *common, "--locked", "--ca-bundle", str(CA_BUNDLE), "--sources", str(SHARED),
             "--output", str(tmp_path / "out"), "--log-dir", str(tmp_path / "logs"), "--quiet"]
    assert cli.main([*build, DEVEL]) == 0
    assert engine.inspect(built[1]).layers[:len(engine.inspect(built[0]).layers)] == \
        engine.inspect(built[0]).layers


# --- reproducibility of what nvcc links and Open MPI dates, in the fast tier (issue 22) ----------
# The comms image's second cold build (the whole proof) is in the heavy tier. Here a small image
# FROM the devel image compiles, twice and without the build cache, what the comms recipe's own
# steps write: nccl-tests' all_reduce_perf through the recipe's nccl-tests command line (nvcc
# with its intermediate files kept in a fixed folder, MPI=1 against the image's Open MPI), for one
# architecture, and Open MPI's own configure date (config/getdate.sh of the archive) under the
# SOURCE_DATE_EPOCH the recipe gives Open MPI's configure and make. Both builds must give one ID.

# one architecture, its SASS alone: the recipe's PTX target would double nvcc's time (about 120 s
# of the module's tail on the 2-core CI machine); the temporary names a fixed -keep-dir removes
# reach a SASS-only binary too (test_without_a_fixed_keep_dir_nvcc_links_different_bytes)
ONE_ARCH = "-gencode=arch=compute_90,code=sm_90"


def _recipe_step(k, specs, fragment: str):
    (stage,) = [s for s in render.Renderer().stages(specs[RUNTIME], k) if s.name == "devel"]
    (step,) = [s for s in stage.steps if s.fragment == fragment]
    return step


def _repro_recipe(k, specs, devel_ref: str) -> str:
    from imagebuild.render.blocks import gencode
    nccl = _recipe_step(k, specs, "nccl-tests")
    whole = gencode(specs[RUNTIME].build_choices)
    (make,) = [c for c in nccl.commands if c.startswith("NVCC_APPEND_FLAGS=")]
    assert '-keep -keep-dir /tmp/build/nccl-tests-nvcc"' in make and whole in make
    # the recipe's command, for one architecture (its SASS and PTX) and one binary (the goals the
    # recipe starts first left out: alltoall.o is not all_reduce_perf's)
    from imagebuild.render.blocks import NCCL_TESTS_FIRST
    first = "".join(f" /tmp/build/nccl-tests/build/{unit}" for unit in NCCL_TESTS_FIRST)
    assert make.endswith(f"{first} build")
    one = make.replace(whole, ONE_ARCH).replace(first, "") + " BIN_FILES_LIST=all_reduce"
    commands = [c for c in nccl.commands if not c.startswith(("NVCC_APPEND_FLAGS=", "cp -a build/."))]
    ompi = _recipe_step(k, specs, "openmpi")
    dated = [c for c in ompi.commands if c.startswith("SOURCE_DATE_EPOCH=")]
    assert len(dated) == 2 and dated[0].split()[1] == "./configure" and dated[1].split()[1] == "make"
    epoch = dated[0].split()[0]
    assert dated[1].split()[0] == epoch
    return "\n".join([
        f"FROM {devel_ref}",
        'SHELL ["/bin/bash", "-o", "pipefail", "-c"]',
        f"WORKDIR {nccl.workdir}",
        "COPY sources/ /tmp/sources/",
        "RUN " + " \\\n && ".join([*commands, one, "cp -a build/. /opt/nccl-tests/bin/"]),
        "WORKDIR /tmp/build/openmpi-date",
        # Open MPI's configure writes getdate.sh's output into ompi_info (PMIx's and PRRTE's into
        # theirs); a library linked with the image's mpicc carries it here
        "RUN tar -xzf /tmp/sources/openmpi.tar.gz --strip-components=1 --wildcards '*/config/getdate.sh' \\\n"
        f" && {epoch} sh config/getdate.sh > configure-date \\\n"
        " && printf 'const char *ompi_configure_date = \"%s\";\\n' \"$(cat configure-date)\" > date.c \\\n"
        " && mpicc -shared -fPIC -o /opt/nccl-tests/libdated.so date.c \\\n"
        " && rm -rf /tmp/sources /tmp/build",
        "WORKDIR /",
        ""])


def test_what_nvcc_links_and_open_mpi_dates_builds_to_one_image_id(built, k, specs, docker_client, tmp_path):
    import shutil
    import secrets as _secrets
    from imagebuild.sourcedate import source_epoch
    from conftest import build_cold_twice

    if not SHARED.is_dir():
        pytest.fail(f"{SHARED} is missing: the source tarballs")
    ctx = tmp_path / "ctx"
    (ctx / "sources").mkdir(parents=True)
    shutil.copy(SHARED / "nccl-tests-2.17.6.tar.gz", ctx / "sources")
    shutil.copy(SHARED / "openmpi-5.0.10-git.tar.gz", ctx / "sources" / "openmpi.tar.gz")
    (ctx / "Dockerfile").write_text(_repro_recipe(k, specs, built[1]))
    token = _secrets.token_hex(4)
    refs = [f"imagebuild/test-repro-nvcc-{token}-{i}:local" for i in (1, 2)]
    try:
        (one, id1, img1, _), (two, id2, img2, _) = build_cold_twice(
            docker_client, ctx, refs, tmp_path / "logs", epoch=source_epoch(specs[RUNTIME].as_of),
            fresh_files=["Dockerfile"])
        day = datetime.datetime.fromtimestamp(source_epoch(specs[RUNTIME].as_of), datetime.timezone.utc)
        date = day.strftime("%a %b %e %H:%M:%S UTC %Y")      # as date(1) writes it
        out = docker_client.containers.run(
            id1, ["-c", f"ls /opt/nccl-tests/bin; grep -ao '{date}' /opt/nccl-tests/libdated.so;"
                        " ldd /opt/nccl-tests/bin/all_reduce_perf | grep -o 'libmpi.so.[0-9]* => /opt/openmpi/lib'"],
            entrypoint="bash", remove=True).decode().split("\n")
        # what was built is what the recipe builds: the binary, on the image's Open MPI, and the
        # configure date of the matrix's as_of, not of the build's day
        assert "all_reduce_perf" in out and "libmpi.so.40 => /opt/openmpi/lib" in out, out
        assert date in out, out
        assert id1 == id2, f"two cold builds gave {id1[:19]} and {id2[:19]}"
    finally:
        for ref in refs:
            try:
                docker_client.images.remove(ref, force=True)
            except Exception:  # noqa: BLE001 - not built
                pass


_NVCC_TWICE = r"""
set -e
mkdir -p /tmp/t /tmp/t/keep && cd /tmp/t
printf '__global__ void k(int *x) { x[0] = 1; }\nint main() { return 0; }\n' > k.cu
nvcc -arch=sm_90 -o a k.cu && nvcc -arch=sm_90 -o b k.cu
NVCC_APPEND_FLAGS="-keep -keep-dir /tmp/t/keep" nvcc -arch=sm_90 -o c k.cu
NVCC_APPEND_FLAGS="-keep -keep-dir /tmp/t/keep" nvcc -arch=sm_90 -o d k.cu
sha256sum a b c d | awk '{print $1}'
"""


def test_without_a_fixed_keep_dir_nvcc_links_different_bytes(built, docker_client):
    """The check above can fail: the same program linked twice by nvcc differs without a fixed
    -keep-dir (its temporary files are named after the process id) and not with one."""
    a, b, c, d = docker_client.containers.run(built[1], ["-c", _NVCC_TWICE], entrypoint="bash",
                                              remove=True).decode().split()
    assert a != b
    assert c == d
