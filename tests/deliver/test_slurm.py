"""sbatch scripts (validation, determinism, shell syntax) and the smoke suite run through a real
single-node Slurm (.ci/start-slurm.sh) inside an OCI bundle exported from a real image."""

from __future__ import annotations

import io
import json
import os
import shlex
import shutil
import subprocess
import tarfile
import types

import pytest

from imagebuild import cli
from imagebuild.deliver import export, slurm
from imagebuild.engines import get_engine
from imagebuild.errors import ImagebuildError

from conftest import ROOT, fake_matrix, need

BASE = "imagebuild/base:debian-bookworm"


def spec(**over) -> slurm.SbatchSpec:
    values = dict(image_path="/shared/images/pt-cu12.sqsh", nodes=2, gpus_per_node=8)
    values.update(over)
    return slurm.SbatchSpec(**values)


# ----------------------------------------------------------------------------- the script

def test_script_shape_and_determinism():
    text = slurm.render_sbatch(spec(checks=("versions", "mpi.allreduce")))
    assert text == slurm.render_sbatch(spec(checks=("versions", "mpi.allreduce")))
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=8", "#SBATCH --gpus-per-node=8",
                 "#SBATCH --time=00:30:00", "IMAGE=/shared/images/pt-cu12.sqsh"):
        assert line in lines
    srun = [line for line in lines if line.startswith("srun ")]
    assert len(srun) == 1
    # each task's report is its standard output, written by srun into a folder of the host: no
    # mount into the image, nothing written into it or into a bundle
    assert srun[0].startswith('srun --mpi=pmix --ntasks-per-node=8 --container-image="$IMAGE" '
                              '--output="$REPORTS/%N-%t.json" --error="$REPORTS/%N-%t.log" ')
    assert "--container-mounts" not in text and "rootfs" not in text
    assert srun[0].endswith("--tier gpu --only versions mpi.allreduce || status=$?")
    assert 'gdr_env=$(imagebuild-gdr-check --env)' in text and 'eval "$gdr_env"' in text
    assert "imagebuild-check >&2 || :" in text   # pyxis skips the entrypoint that would print it
    cpu = slurm.render_sbatch(spec(gpus_per_node=0, runtime="oci"))
    assert "--gpus-per-node" not in cpu and "#SBATCH --ntasks-per-node=1" in cpu
    assert 'srun --mpi=pmix --ntasks-per-node=1 --container="$IMAGE" ' in cpu and "--tier cpu" in cpu
    # a CPU image gets the CPU tier, GPUs or not
    assert "--tier cpu" in slurm.render_sbatch(spec(cpu_image=True))


def test_a_registry_reference_for_pyxis():
    """pyxis pulls a registry reference itself (its main mode): enroot's spelling is kept, docker's
    is written in it; Slurm's OCI support takes bundles only."""
    for given, written in (("localhost:5000/imagebuild/pt:2.13", "localhost:5000#imagebuild/pt:2.13"),
                           ("reg.example#ns/pt:2.13", "reg.example#ns/pt:2.13"),
                           ("me@reg.example:443#ns/pt@sha256:" + "a" * 64,
                            "me@reg.example:443#ns/pt@sha256:" + "a" * 64),
                           ("nvcr.io/nvidia/pytorch:26.07-py3", "nvcr.io#nvidia/pytorch:26.07-py3"),
                           ("ubuntu:24.04", "ubuntu:24.04")):
        text = slurm.render_sbatch(spec(image_path=None, image_ref=given))
        assert f"IMAGE={shlex.quote(written)}" in text.splitlines(), (given, text)
    for bad in ("a b", "reg#ns/pt:tag; id", "reg#ns/PT:1", "reg#ns/pt:tag\n#SBATCH --uid=0", "$(id)",
                "reg#ns/pt@sha256:abc", "reg#../pt", "x" * 600, ""):
        with pytest.raises(ImagebuildError):
            spec(image_path=None, image_ref=bad)
    with pytest.raises(ImagebuildError, match="OCI support runs a bundle"):
        spec(image_path=None, image_ref="reg#ns/pt:1", runtime="oci")
    with pytest.raises(ImagebuildError, match="one of them"):
        spec(image_ref="reg#ns/pt:1")


@pytest.mark.parametrize("limit", ["30", "30:00", "1:00:00", "100:00:00", "1-0", "1-12:30",
                                   "1-00:00:00", "7-12:00:00", "UNLIMITED", "infinite"])
def test_every_slurm_time_format_is_taken(limit):
    assert f"#SBATCH --time={limit}" in slurm.render_sbatch(spec(time_limit=limit)).splitlines()


@pytest.mark.parametrize("limit", ["1:60:00", "1:00:60", "1-2-3", "1d", "-1", "1:", ":30", "1.5",
                                   "1-00:00:00:00", "30 ", "1234567", "never"])
def test_a_time_limit_slurm_rejects_is_refused(limit):
    with pytest.raises(ImagebuildError, match="not a Slurm time limit"):
        spec(time_limit=limit)


def test_the_torchrun_template():
    text = slurm.render_sbatch(spec(job="torchrun", command=("train.py", "--lr", "0.1", "it's")))
    assert "#SBATCH --ntasks-per-node=1" in text and "#SBATCH --gpus-per-node=8" in text
    (srun,) = [line for line in text.splitlines() if line.startswith("srun ")]
    assert srun == ('srun --ntasks-per-node=1 --container-image="$IMAGE" /bin/sh -c "$TASK" imagebuild-task '
                    'torchrun --nnodes="${SLURM_NNODES:-1}" --nproc-per-node=8 --rdzv-backend=c10d '
                    '--rdzv-id="$JOB" --rdzv-endpoint="$MASTER:29500" train.py --lr 0.1 \'it\'"\'"\'s\'')
    assert 'MASTER=$(scontrol show hostnames' in text and 'eval "$gdr_env"' in text
    oci = slurm.render_sbatch(spec(job="torchrun", command=("train.py",), runtime="oci", gpus_per_node=0))
    assert '--container="$IMAGE"' in oci and "--nproc-per-node=1" in oci
    for bad in ((), ("train.py", "a\nb"), ("train.py", ""), ("x" * 5000,)):
        with pytest.raises(ImagebuildError):
            spec(job="torchrun", command=bad)
    with pytest.raises(ImagebuildError, match="--job torchrun"):
        spec(command=("train.py",))


@pytest.mark.parametrize("runtime", slurm.RUNTIMES)
def test_script_is_valid_bash(tmp_path, runtime):
    path = tmp_path / "job.sh"
    slurm.write_script(path, slurm.render_sbatch(spec(runtime=runtime, partition="gpu", account="hpc-1")))
    assert os.stat(path).st_mode & 0o777 == 0o755
    subprocess.run(["bash", "-n", str(path)], check=True)


@pytest.mark.parametrize("field, value", [
    ("image_path", "/img/x.sqsh; rm -rf /"),
    ("image_path", "/img/$(id).sqsh"),
    ("image_path", "/img/`id`.sqsh"),
    ("image_path", "/img/x.sqsh\n#SBATCH --uid=0"),
    ("image_path", "/img/../../etc/shadow"),
    ("image_path", "../img.sqsh"),
    ("image_path", "img.sqsh"),
    ("image_path", "/img/a b.sqsh"),
    ("image_path", "/img/'x'.sqsh"),
    ("nodes", "1; rm -rf /"),
    ("nodes", "$(id)"),
    ("nodes", 0),
    ("nodes", 5000),
    ("nodes", True),
    ("nodes", 1.5),
    ("gpus_per_node", -1),
    ("gpus_per_node", "8\n"),
    ("gpus_per_node", 65),
    ("tasks_per_node", 0),
    ("checks", ("versions; id",)),
    ("checks", ("no-such-check",)),
    ("time_limit", "1:00:00; id"),
    ("time_limit", "30:00\n#SBATCH --uid=0"),
    ("partition", "gpu\n#SBATCH --x"),
    ("account", "$(id)"),
    ("reports_dir", "/r/../../x"),
    ("runtime", "docker"),
])
def test_hostile_values_are_refused(field, value):
    with pytest.raises(ImagebuildError):
        spec(**{field: value})


def fake_images(monkeypatch, *ids):
    fake_matrix(monkeypatch, {
        i: types.SimpleNamespace(id=i, local_ref=f"imagebuild/{i}:test", tags=["t"], labels={}, stack={})
        for i in ids})


def test_cli_writes_the_script_and_refuses_hostile_arguments(tmp_path, monkeypatch, capsys):
    fake_images(monkeypatch, "pt-cu12")
    out = tmp_path / "job.sh"
    args = ["slurm-script", "pt-cu12", "--nodes", "2", "--gpus-per-node", "4", "--output", str(out),
            "--image-path", "/shared/pt-cu12.sqsh"]
    assert cli.main(args) == 0
    first = out.read_bytes()
    assert cli.main(args) == 0 and out.read_bytes() == first
    assert b"#SBATCH --job-name=smoke-pt-cu12\n" in first and b"IMAGE=/shared/pt-cu12.sqsh\n" in first
    capsys.readouterr()
    for bad in (["--nodes", "1; rm -rf /"], ["--nodes", "$(id)"], ["--gpus-per-node", "2\n3"],
                ["--image-path", "/x/$(id)"], ["--image-path", "../x.sqsh"], ["--image-path", "/a\n/b"],
                ["--only", "versions;id"]):
        argv = ["slurm-script", "pt-cu12", "--nodes", "1", "--gpus-per-node", "0",
                "--output", str(tmp_path / "bad.sh")] + bad
        assert cli.main(argv) == 2, bad
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("imagebuild slurm-script:"), err
    assert not (tmp_path / "bad.sh").exists()
    assert cli.main(["slurm-script", "nope", "--nodes", "1", "--gpus-per-node", "0"]) == 2
    assert "unknown image 'nope'" in capsys.readouterr().err


# ----------------------------------------------------------------------------- real Slurm

@pytest.fixture(scope="session")
def slurm_cluster():
    if os.geteuid() != 0:
        need("a single-node Slurm", "starting it needs root")
    script = ROOT / ".ci" / "start-slurm.sh"
    if shutil.which("slurmctld") is None and os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
        need("Slurm (Debian packages slurm-wlm, munge)", "not installed")
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        need("a single-node Slurm", f".ci/start-slurm.sh failed: {proc.stderr.strip()[-300:]}")
    for tool in ("srun", "sbatch", "runc"):
        if shutil.which(tool) is None:
            need(tool, "not on PATH after .ci/start-slurm.sh")
    return True


def smoke_context() -> bytes:
    """A build context: the base image, python3, and the smoke suite laid out as in every image
    (/opt/imagebuild/lib/imagebuild, imagebuild-smoke and imagebuild-gdr-check in /usr/local/bin)."""
    dockerfile = f"""FROM {BASE}
RUN apt-get update && apt-get install -y --no-install-recommends python3 && rm -rf /var/lib/apt/lists/*
COPY lib/ /opt/imagebuild/lib/
RUN printf '#!/bin/sh\\nPYTHONPATH=/opt/imagebuild/lib exec python3 -m imagebuild.smoke "$@"\\n' \\
      > /usr/local/bin/imagebuild-smoke \\
 && printf '#!/bin/sh\\nPYTHONPATH=/opt/imagebuild/lib exec python3 -m imagebuild.smoke.gdrcli "$@"\\n' \\
      > /usr/local/bin/imagebuild-gdr-check \\
 && chmod 755 /usr/local/bin/imagebuild-smoke /usr/local/bin/imagebuild-gdr-check \\
 && printf '{{"flavor": "cpu", "id": "slurm-test", "stack": {{"os": "debian-12", "python": "3.11"}}}}\\n' \\
      > /opt/imagebuild/image.json
LABEL io.imagebuild.image-id=slurm-test io.imagebuild.flavor=cpu
"""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = dockerfile.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        package = ROOT / "imagebuild"
        tar.add(package / "__init__.py", arcname="lib/imagebuild/__init__.py")
        tar.add(package / "smoke", arcname="lib/imagebuild/smoke",
                filter=lambda t: None if "__pycache__" in t.name else t)
    return buf.getvalue()


@pytest.fixture(scope="module")
def smoke_bundle(docker_client, slurm_cluster, tmp_path_factory):
    try:
        docker_client.images.get(BASE)
    except Exception:  # noqa: BLE001
        need(f"the base image {BASE}", "create it with debootstrap + docker import")
    ref = "imagebuild/slurm-test:dev"
    docker_client.images.build(fileobj=io.BytesIO(smoke_context()), custom_context=True, tag=ref, rm=True)
    bundle = tmp_path_factory.mktemp("slurm") / "slurm-test.bundle"
    export.export_oci_bundle(get_engine("docker", client=docker_client), ref, bundle)
    return bundle


def read_report(path) -> dict:
    report = json.loads(path.read_text())
    assert set(report) >= {"passed", "summary", "checks"}
    return report


@pytest.mark.slurm
@pytest.mark.engine
def test_srun_runs_the_smoke_suite_in_the_exported_bundle(smoke_bundle):
    run = subprocess.run(
        ["srun", "--mpi=pmix", f"--container={smoke_bundle}", "imagebuild-smoke",
         "--only", "versions", "libraries", "mpi.config", "--report", "/srun-report.json"],
        capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    report = read_report(smoke_bundle / "rootfs" / "srun-report.json")
    assert report["passed"] is True
    assert [c["name"] for c in report["checks"]] == ["versions", "libraries", "mpi.config"]
    versions = report["checks"][0]
    assert versions["status"] == "pass" and "python: 3.11" in versions["detail"]
    assert report["summary"]["fail"] == 0


@pytest.mark.slurm
@pytest.mark.engine
def test_generated_sbatch_script_runs_under_slurm(smoke_bundle, tmp_path, monkeypatch):
    fake_images(monkeypatch, "slurm-test")
    script = tmp_path / "job.sh"
    assert cli.main(["slurm-script", "slurm-test", "--nodes", "1", "--gpus-per-node", "0", "--runtime",
                     "oci", "--image-path", str(smoke_bundle), "--only", "versions", "libraries",
                     "mpi.config", "--time", "10", "--output", str(script)]) == 0
    run = subprocess.run(["sbatch", "--parsable", "--wait", str(script)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    job_id = run.stdout.strip().split(";")[0]
    log = tmp_path / f"smoke-slurm-test-{job_id}.out"
    log_text = log.read_text() if log.exists() else "no job log"
    assert run.returncode == 0, (run.stderr, log_text)
    # the reports are on the host, in the submit folder: nothing was written into the bundle
    reports = sorted((tmp_path / "imagebuild-reports" / job_id).glob("*.json"))
    assert [p.name for p in reports] == [f"{os.uname().nodename}-0.json"], log_text
    assert not (smoke_bundle / "rootfs" / "imagebuild-reports").exists()
    report = read_report(reports[0])
    assert report["passed"] is True and report["tier"] == "cpu"
    assert [c["name"] for c in report["checks"]] == ["versions", "libraries", "mpi.config"]
    # the job's log holds no warning from the tools the task runs (runpy's, once at every start)
    assert "Warning" not in log_text and "Warning" not in (reports[0].with_suffix(".log")).read_text()


@pytest.mark.slurm
def test_slurm_accepts_every_script_and_time_limit_we_write(slurm_cluster, tmp_path, monkeypatch):
    """sbatch --test-only parses a script's #SBATCH options as a submission would, without running
    it: every time format we take, both runtimes, and the torchrun template. (pyxis and enroot
    cannot be installed here: their own options, --container-image with a registry reference,
    follow pyxis's documented syntax and are tested as data above.)"""
    fake_images(monkeypatch, "slurm-test")
    forms = ["30", "30:00", "1:00:00", "1-0", "1-12:30", "1-00:00:00", "UNLIMITED"]
    scripts = []
    for i, limit in enumerate(forms):
        scripts.append(slurm.render_sbatch(spec(nodes=1, gpus_per_node=0, time_limit=limit, runtime="oci",
                                                image_path=str(tmp_path / "b.bundle"))))
    scripts.append(slurm.render_sbatch(spec(nodes=1, gpus_per_node=0, job="torchrun",
                                            command=("train.py", "--epochs", "2"))))
    scripts.append(slurm.render_sbatch(spec(nodes=1, gpus_per_node=0, image_path=None,
                                            image_ref="localhost:5000/imagebuild/slurm-test:1")))
    for i, text in enumerate(scripts):
        path = tmp_path / f"job{i}.sh"
        slurm.write_script(path, text)
        run = subprocess.run(["sbatch", "--test-only", str(path)], cwd=tmp_path, capture_output=True,
                             text=True, timeout=60)
        assert run.returncode == 0 and "to start at" in run.stderr, (text.splitlines()[8], run.stderr)


@pytest.mark.slurm
@pytest.mark.engine
def test_the_whole_cpu_tier_of_smoke_cpu_under_slurms_oci_runtime(smoke_cpu_image, docker_client,
                                                                  slurm_cluster, tmp_path, monkeypatch):
    """smoke-cpu (Open MPI, UCX, torch CPU) exported as a bundle and run by the sbatch script
    `slurm-script` writes, through Slurm's OCI runtime: the whole CPU tier, ddp.elastic (torchrun's
    rendezvous needs the node's own name) and mpi.allreduce included. Its reports land on the host."""
    bundle = export.export_oci_bundle(get_engine("docker", client=docker_client), smoke_cpu_image,
                                      tmp_path / "smoke-cpu.bundle").path
    script = tmp_path / "job.sh"
    assert cli.main(["slurm-script", "smoke-cpu", "--nodes", "1", "--gpus-per-node", "0", "--runtime", "oci",
                     "--image-path", str(bundle), "--time", "15:00", "--output", str(script)]) == 0
    run = subprocess.run(["sbatch", "--parsable", "--wait", str(script)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=900)
    job_id = run.stdout.strip().split(";")[0]
    log = tmp_path / f"smoke-smoke-cpu-{job_id}.out"
    assert run.returncode == 0, (run.stderr, log.read_text() if log.exists() else "no job log")
    (path,) = sorted((tmp_path / "imagebuild-reports" / job_id).glob("*.json"))
    report = read_report(path)
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    assert report["passed"] is True and report["tier"] == "cpu", path.with_suffix(".log").read_text()[-2000:]
    for name in ("versions", "libraries", "mpi.config", "mpi.allreduce", "torch.allreduce",
                 "ddp.equivalence", "ddp.elastic"):
        assert statuses[name] == "pass", (name, statuses)
