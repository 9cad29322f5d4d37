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

import io
import json
import tarfile
from pathlib import Path

import pytest

from conftest import CA_BUNDLE, ROOT, build_debian_image
from imagebuild import cli, dockerfile
from imagebuild.render import renderer as render
from imagebuild.deliver import lockfile
from imagebuild.cli.commands.build import jobs_for
from imagebuild.deliver.plan import github_matrix, plan

DEVEL = "comms-cu130-nccl2.30.7-debian12-devel"
RUNTIME = "comms-cu130-nccl2.30.7-debian12-runtime"
MATRIX = ROOT / "matrix.yaml"
COMPILED = {"gdrcopy", "ucx", "openmpi", "nccl-tests"}


def _fragments(stage) -> list[str]:
    return [s.fragment for s in stage.steps if s.kind == "run"]


def test_every_devel_image_depends_on_its_runtime_image(specs_by_id):
    devels = [s for s in specs_by_id.values() if s.flavor == "devel"]
    assert len(devels) > 20 and DEVEL in specs_by_id
    for spec in devels:
        head, _, platform = spec.id.rpartition("-devel")          # platform: "" or "-arm64"
        runtime = specs_by_id[f"{head}-runtime{platform}"]
        assert spec.depends_on == (runtime.id,)
        assert spec.from_image == runtime.local_ref
        assert spec.stack == runtime.stack and spec.wheel_lock == runtime.wheel_lock
    assert all(not s.depends_on and s.from_image is None for s in specs_by_id.values() if s.flavor != "devel")


def test_a_devel_recipe_is_one_stage_from_its_runtime_image_that_compiles_nothing(k, specs_by_id):
    r = render.Renderer()
    for spec in (s for s in specs_by_id.values() if s.flavor == "devel"):
        (stage,) = r.stages(spec, k)
        assert stage.base == spec.from_image and stage.bootstrap == "docker-daemon"
        frags = _fragments(stage)
        assert not COMPILED & set(frags), spec.id
        assert not any(s.from_stage for s in stage.steps if s.kind == "copy")
        pm = "dnf" if spec.os.family == "rhel" else "apt"     # packages steps: <role>-<manager>
        if spec.cuda_from == "wheels":
            assert frags == [f"os-devel-{pm}", "cuda-wheels-devel", "pip-constraint"], spec.id
        else:
            assert frags == [f"os-devel-{pm}", f"cuda-devel-{pm}"], spec.id
        text = r.dockerfile(spec, k)
        assert [ln for ln in text.splitlines() if ln.startswith("FROM ")] == [f"FROM {spec.from_image}"]
        assert dockerfile.base_refs(text) == [spec.from_image] == [dockerfile.final_base(text)]
        labels = dict(next(s.items for s in stage.steps if s.kind == "label"))
        assert labels["io.imagebuild.flavor"] == "devel" and labels["io.imagebuild.image-id"] == spec.id


def test_the_debian_devel_adds_the_toolkit_wheels_without_redoing_the_runtime_links(k, specs_by_id):
    text = render.Renderer().dockerfile(specs_by_id[DEVEL], k)
    assert "COPY requirements/wheels.txt /opt/imagebuild/requirements/wheels.txt" in text
    assert "-r /opt/imagebuild/requirements/wheels.txt" in text
    # the runtime image's cuda-wheels-runtime step made lib64 and CUDA_HOME: not again
    assert "nvidia/cu13/lib64" not in text and "ln -s /opt/venv" not in text
    assert "ln -s libcudart.so.13 " in text and "lib/stubs/libcuda.so" in text
    assert "libibverbs-dev librdmacm-dev" in text      # the RDMA headers
    assert "COPY image.json /opt/imagebuild/image.json" in text and "COPY lib/" not in text
    # the runtime recipe makes both links
    runtime = render.Renderer().dockerfile(specs_by_id[RUNTIME], k)
    assert "ln -s lib /opt/venv/lib/python3.11/site-packages/nvidia/cu13/lib64" in runtime
    assert "ln -s /opt/venv/lib/python3.11/site-packages/nvidia/cu13 /usr/local/cuda-13.0" in runtime


def test_the_singularity_definition_bootstraps_from_the_runtime_image(k, specs_by_id):
    text = render.Renderer().singularity(specs_by_id[DEVEL], k)
    assert f"Bootstrap: docker-daemon\nFrom: {specs_by_id[RUNTIME].local_ref}\n" in text
    assert "# Built on the runtime image of the same stack" in text
    assert text.count("Bootstrap:") == 1 and "Stage:" not in text
    runtime = render.Renderer().singularity(specs_by_id[RUNTIME], k)
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
    # neither reads a source tarball: the runtime is built from the registries, the devel FROM it
    assert jobs[0].prepare is None and jobs[1].prepare is None


def test_the_lock_drops_a_base_built_in_the_same_run():
    ours = "imagebuild/r:t"
    entry = {"base_image": "sha256:" + "1" * 64, "bases": {ours: {"id": "sha256:" + "1" * 64, "digest": None}}}
    assert lockfile.without_bases(entry, {ours}) == {"base_image": None, "bases": {}}
    other = {"base_image": "sha256:" + "2" * 64, "bases": {"debian:12": {"id": "sha256:" + "2" * 64, "digest": None}}}
    assert lockfile.without_bases(other, {ours}) is other


def test_the_plan_names_the_devels_base(k, specs_by_id):
    verdicts = plan(k, list(specs_by_id.values()), "550.54.14", "580.65.06")
    rows = {row["image"]: row for row in github_matrix(verdicts)["include"]}
    # one entry for both: the job builds the runtime once, then the devel FROM it
    assert rows[DEVEL]["base"] == RUNTIME and RUNTIME not in rows
    assert rows[DEVEL]["images"] == f"{RUNTIME} {DEVEL}"


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
    build = ["build", *common, "--locked", "--ca-bundle", str(CA_BUNDLE),
             "--output", str(tmp_path / "out"), "--log-dir", str(tmp_path / "logs"), "--quiet"]
    assert cli.main([*build, DEVEL]) == 0
    assert engine.inspect(built[1]).layers[:len(engine.inspect(built[0]).layers)] == \
        engine.inspect(built[0]).layers


# --- reproducibility of what the comms recipe compiles, in the fast tier (issue 22) --------------
# The comms image's second cold build (the whole proof) is in the heavy tier. Here a small image
# FROM the devel image compiles, twice and without the build cache, what the recipe's own
# nccl-bench step runs (mpicc against the wheels' headers, the command taken from the recipe), and
# a CUDA kernel with nvcc's intermediate files kept in a fixed folder, as the site recipes compile
# UCX and nccl-tests (NVCC_APPEND_FLAGS="-keep -keep-dir ..."): both builds must give one ID.

ONE_ARCH = "-gencode=arch=compute_90,code=sm_90"
_KERNEL = "__global__ void k(float *x) { x[threadIdx.x] += 1.0f; }\nint main() { return 0; }\n"


def _recipe_step(k, specs_by_id, fragment: str):
    (stage,) = [s for s in render.Renderer().stages(specs_by_id[RUNTIME], k) if s.name == "nccl-bench"]
    (step,) = [s for s in stage.steps if s.fragment == fragment]
    return step


def _repro_recipe(k, specs_by_id, devel_ref: str) -> str:
    bench = _recipe_step(k, specs_by_id, "nccl-bench")
    (compile_,) = [c for c in bench.commands if c.startswith("mpicc ")]
    src = compile_.split(" -o ")[0].split()[-1]
    return "\n".join([
        f"FROM {devel_ref}",
        'SHELL ["/bin/bash", "-o", "pipefail", "-c"]',
        f"COPY nccl_bw.c {src}",
        "COPY k.cu /tmp/build/k/k.cu",
        f"RUN {compile_} \\\n && /usr/local/bin/imagebuild-nccl-bw --version \\\n"
        " && mkdir -p /tmp/build/k-nvcc && cd /tmp/build/k \\\n"
        f" && NVCC_APPEND_FLAGS=\"-keep -keep-dir /tmp/build/k-nvcc\" nvcc {ONE_ARCH} -o /usr/local/bin/k k.cu \\\n"
        " && rm -rf /tmp/build",
        ""])


def test_what_the_recipe_compiles_builds_to_one_image_id(built, k, specs_by_id, docker_client, tmp_path):
    import shutil
    import secrets as _secrets
    from imagebuild.sourcedate import source_epoch
    from imagebuild.smoke.ncclbench import NCCL_BENCH_SOURCE
    from conftest import build_cold_twice

    ctx = tmp_path / "ctx"
    ctx.mkdir()
    shutil.copy(render.package_files() / "smoke" / NCCL_BENCH_SOURCE, ctx / "nccl_bw.c")
    (ctx / "k.cu").write_text(_KERNEL)
    (ctx / "Dockerfile").write_text(_repro_recipe(k, specs_by_id, built[1]))
    token = _secrets.token_hex(4)
    refs = [f"imagebuild/test-repro-bench-{token}-{i}:local" for i in (1, 2)]
    try:
        (one, id1, img1, _), (two, id2, img2, _) = build_cold_twice(
            docker_client, ctx, refs, tmp_path / "logs", epoch=source_epoch(specs_by_id[RUNTIME].as_of),
            fresh_files=["Dockerfile", "nccl_bw.c", "k.cu"])
        out = docker_client.containers.run(
            id1, ["-c", "imagebuild-nccl-bw --version; ls /usr/local/bin/k"],
            entrypoint="bash", remove=True).decode()
        assert "nccl-library=23007" in out and "mpi=yes" in out and "/usr/local/bin/k" in out, out
        assert id1 == id2, f"two cold builds gave {id1[:19]} and {id2[:19]}"
    finally:
        for ref in refs:
            try:
                docker_client.images.remove(ref, force=True)
            except Exception:  # noqa: BLE001 - not built
                pass


# --- the benchmark's logic on a stand-in for CUDA and NCCL -----------------------------------------
# No GPU here: tests/fakes/fake_cuda_nccl.c keeps "device" memory in host memory and carries out
# NCCL's collectives at the end of each group, so what imagebuild-nccl-bw fills, which buffers
# its in-place variants pass, how it checks each element and what its table says are tested with
# the real headers, on 1 to 4 ranks, and read by the smoke suite's own parser and judge.

_FAKE_RUN = r"""
set -e
cd /tmp/fake
site=/opt/venv/lib/python3.11/site-packages/nvidia
inc="-I$site/cu13/include -I$site/nccl/include"
gcc -std=c11 -O2 -Wall -Wextra -Werror $inc -shared -fPIC fake_cuda_nccl.c -o libfake.so
gcc -std=c11 -O2 -Wall -Wextra -Werror $inc nccl_bw.c -o bw -L. -lfake -Wl,-rpath,/tmp/fake
for n in 1 2 3 4; do for c in all_reduce all_gather reduce_scatter broadcast; do
  echo "=== $c $n"; set +e; FAKE_GPUS=$n ./bw -C $c -b 8 -e 256K -f 2 -n 2 -w 1; echo "=== exit $?"; set -e
done; done
echo "=== wrong 4"; set +e; FAKE_GPUS=4 FAKE_WRONG=3 ./bw -b 64 -e 4K -n 1 -w 0; echo "=== exit $?"
echo "=== unchecked 2"; FAKE_GPUS=2 ./bw -b 8 -e 64 -c 0 -n 1 -w 0; echo "=== exit $?"
"""


@pytest.fixture(scope="module")
def fake_runs(built, docker_client) -> dict[str, tuple[str, int]]:
    from imagebuild.smoke.ncclbench import NCCL_BENCH_SOURCE
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, path in (("fake/fake_cuda_nccl.c", ROOT / "tests" / "fakes" / "fake_cuda_nccl.c"),
                           ("fake/nccl_bw.c", render.package_files() / "smoke" / NCCL_BENCH_SOURCE)):
            tar.add(str(path), arcname=name)
    box = docker_client.containers.create(built[1], ["-c", _FAKE_RUN], entrypoint="bash")
    try:
        box.put_archive("/tmp", buf.getvalue())
        box.start()
        assert box.wait(timeout=600)["StatusCode"] == 0, box.logs().decode()[-3000:]
        out = box.logs().decode()
    finally:
        box.remove(force=True)
    runs: dict[str, tuple[str, int]] = {}
    last = ""
    for part in out.split("=== ")[1:]:
        title, _, body = part.partition("\n")
        if title.startswith("exit "):
            runs[last] = (runs[last][0], int(title.split()[1]))
        else:
            last = title.strip()
            runs[last] = (body, -1)
    return runs


def test_every_collective_checks_every_element_on_one_to_four_ranks(fake_runs):
    from imagebuild.smoke.bandwidth import sizes
    from imagebuild.smoke.nccltests import judge_nccl_tests, parse_nccl_tests
    for n in (1, 2, 3, 4):
        for coll in ("all_reduce", "all_gather", "reduce_scatter", "broadcast"):
            text, code = fake_runs[f"{coll} {n}"]
            assert code == 0, (coll, n, text[-800:])
            found = parse_nccl_tests(text)
            assert found["devices"] == n and found["out_of_bounds"] == (0, "OK"), (coll, n)
            assert found["nccl_library"] == 23007
            assert all(r["oop"]["wrong"] == 0 and r["ip"]["wrong"] == 0 for r in found["rows"])
            if coll == "all_reduce":
                assert judge_nccl_tests(found, n, sizes(8, 256 << 10, 2)) == [], (coll, n)
            factor = {"all_reduce": 2 * (n - 1) / n, "broadcast": 1.0}.get(coll, (n - 1) / n)
            for r in found["rows"]:
                assert r["oop"]["busbw"] == pytest.approx(r["oop"]["algbw"] * factor, abs=0.011)
            # all_gather and reduce_scatter show the whole buffer: a whole number of elements per rank
            assert all(r["size"] % (4 * n) == 0 for r in found["rows"]) or coll in ("all_reduce", "broadcast")


def test_a_wrong_element_is_counted_and_fails_the_run(fake_runs):
    from imagebuild.smoke.bandwidth import sizes
    from imagebuild.smoke.nccltests import judge_nccl_tests, parse_nccl_tests
    text, code = fake_runs["wrong 4"]
    assert code == 1
    found = parse_nccl_tests(text)
    # one element of rank 0's result is off in every collective: out-of-place and in-place, each size
    assert [(r["oop"]["wrong"], r["ip"]["wrong"]) for r in found["rows"]] == [(1, 1)] * 7
    assert found["out_of_bounds"] == (14, "FAILED")
    errs = judge_nccl_tests(found, 4, sizes(64, 4096, 2))
    assert any("wrong elements at 64B: 2" in e for e in errs) and any("Out of bounds values : 14 FAILED" in e for e in errs)


def test_an_unchecked_run_says_so_and_the_judge_refuses_it(fake_runs):
    from imagebuild.smoke.bandwidth import sizes
    from imagebuild.smoke.nccltests import judge_nccl_tests, parse_nccl_tests
    text, code = fake_runs["unchecked 2"]
    assert code == 0
    found = parse_nccl_tests(text)
    assert all(r["oop"]["wrong"] is None for r in found["rows"])
    assert any("not verified" in e for e in judge_nccl_tests(found, 2, sizes(8, 64, 2)))


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
