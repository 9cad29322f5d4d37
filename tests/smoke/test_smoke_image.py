"""`imagebuild test` against a real image on the real engine: the smoke-cpu image (Debian
bookworm, Debian's Open MPI/UCX, torch 2.13.0 CPU), two-node DDP across containers, and the
failures a user must see (labels that lie, a missing library, unknown images, hung containers).

`smoke_cpu_image` (tests/conftest.py) is the renderer-built image: matrix.yaml -> resolver ->
recipes -> `imagebuild build smoke-cpu` on the real engine.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from conftest import ROOT
from imagebuild import cli
from imagebuild.engines import get_engine
from imagebuild.testrun.runner import Containers

BASE = "imagebuild/base:debian-bookworm"


def _build(client, context: Path | None, tag: str, dockerfile_text: str | None = None) -> str:
    """Build with the engine's classic builder; fail with the build's last lines."""
    kwargs = {"tag": tag, "rm": True, "forcerm": True, "decode": True}
    if dockerfile_text is not None:
        kwargs["fileobj"] = io.BytesIO(dockerfile_text.encode())
    else:
        kwargs["path"] = str(context)
    lines = []
    for chunk in client.api.build(**kwargs):
        if "stream" in chunk:
            lines.append(chunk["stream"].rstrip())
        if "error" in chunk:
            pytest.fail(f"building {tag} failed: {chunk['error'].strip()} | " + " | ".join(lines[-8:]))
    return tag


def _leftovers(client, token: str | None = None) -> set[str]:
    """Containers and networks created by imagebuild test (one run's, given its token)."""
    label = "io.imagebuild.smoke" + (f"={token}" if token else "")
    # sparse: the listing's own names, no inspect per container (one removed in between is NotFound)
    names = {name.lstrip("/") for c in client.containers.list(all=True, filters={"label": label}, sparse=True)
             for name in c.attrs.get("Names") or []}
    names |= {n.name for n in client.networks.list(filters={"label": label})}
    return names


@pytest.fixture(scope="module")
def full_run(smoke_cpu_image, docker_client, tmp_path_factory):
    report = tmp_path_factory.mktemp("image-report") / "report.json"
    before = _leftovers(docker_client)
    code = cli.main(["test", smoke_cpu_image, "--report", str(report), "--ranks", "2"])
    return code, report, _leftovers(docker_client) - before


def test_every_check_passes_in_smoke_cpu(full_run, docker_client, smoke_cpu_image):
    code, report, _ = full_run
    data = json.loads(report.read_text())
    statuses = {c["name"]: (c["status"], c["detail"]) for c in data["checks"]}
    assert list(statuses) == ["versions", "libraries", "mpi.config", "mpi.allreduce", "torch.allreduce",
                              "ddp.equivalence", "ddp.elastic", "gpudirect", "nccl.bench", "ddp.two-node",
                              "mpi.two-container"]
    # imagebuild's NCCL benchmark is part of the communication images only: image.json says so
    assert statuses.pop("nccl.bench") == (
        "skip", "imagebuild's NCCL benchmark is not part of this image (features.nccl_bench false)")
    failed = {n: d for n, (s, d) in statuses.items() if s != "pass"}
    assert not failed
    assert code == 0 and data["passed"] is True
    assert data["image"] == smoke_cpu_image
    assert data["image_id"] == docker_client.images.get(smoke_cpu_image).id
    assert data["imagebuild_id"] == "smoke-cpu"
    assert "labels equal /opt/imagebuild/image.json" in statuses["versions"][1]
    assert "pytorch: 2.13.0+cpu matches 2.13.0" in statuses["versions"][1]
    assert "libnccl.so.2: absent by design" in statuses["libraries"][1]


def test_two_node_run_used_two_containers(full_run):
    _, report, _ = full_run
    two = next(c for c in json.loads(report.read_text())["checks"] if c["name"] == "ddp.two-node")
    assert "2 containers (node0, node1)" in two["detail"]
    assert two["metrics"]["max_rank_diff"] == 0 and two["metrics"]["nodes"] == 2


def test_mpi_across_two_containers_with_debians_open_mpi(full_run):
    """Debian's Open MPI 4.1.4 and UCX 1.13.1 pass mpi.two-container as the compiled stack does:
    mpirun (orted started over ssh), and UCX 1.13's shared memory between containers."""
    _, report, _ = full_run
    two = next(c for c in json.loads(report.read_text())["checks"] if c["name"] == "mpi.two-container")
    assert "one rank in each of 2 containers (node0, node1) on a private network, pml ucx, UCX_TLS=self,tcp" \
        in two["detail"]
    assert "between 2 containers sharing IPC and PID namespaces: ucx_perftest tag_bw" in two["detail"]


def test_junit_beside_the_report(full_run):
    _, report, _ = full_run
    root = ET.parse(str(report.with_suffix(".xml"))).getroot()
    assert root.get("tests") == "11" and root.get("failures") == "0" and root.get("skipped") == "1"
    assert sorted(c.get("name") for c in root.iter("testcase"))[0] == "ddp.elastic"


def test_nothing_left_behind(full_run):
    assert full_run[2] == set()


def test_labels_that_disagree_with_image_json_fail(smoke_cpu_image, docker_client, tmp_path):
    ref = _build(docker_client, None, "imagebuild/smoke-cpu-proto:lying-label",
                 f"FROM {smoke_cpu_image}\nLABEL io.imagebuild.stack.pytorch=2.12.0\n")
    report = tmp_path / "r.json"
    assert cli.main(["test", ref, "--only", "versions", "--report", str(report)]) == 1
    versions = json.loads(report.read_text())["checks"][0]
    assert versions["status"] == "fail"
    assert "io.imagebuild.stack.pytorch='2.12.0' but image.json says '2.13.0'" in versions["detail"]


def test_installed_version_differing_from_image_json_fails(smoke_cpu_image, docker_client, tmp_path):
    from imagebuild.render.run import load_images
    stack = load_images(ROOT / "matrix.yaml")["smoke-cpu"].image_json
    stack["stack"]["ucx"] = "1.16.0"
    text = json.dumps(stack).replace('"', '\\"')
    ref = _build(docker_client, None, "imagebuild/smoke-cpu-proto:wrong-ucx",
                 f'FROM {smoke_cpu_image}\nRUN printf "%s" "{text}" > /opt/imagebuild/image.json\n'
                 "LABEL io.imagebuild.stack.ucx=1.16.0\n")
    report = tmp_path / "r.json"
    assert cli.main(["test", ref, "--only", "versions", "--report", str(report)]) == 1
    versions = json.loads(report.read_text())["checks"][0]
    assert versions["status"] == "fail"
    assert "ucx (ucx_info -v): 1.13.1 does not match 1.16.0" in versions["detail"]
    assert "labels equal" in versions["detail"]


def test_a_missing_library_is_named(smoke_cpu_image, docker_client, tmp_path):
    ref = _build(docker_client, None, "imagebuild/smoke-cpu-proto:no-libucm",
                 f"FROM {smoke_cpu_image}\nRUN rm -f /usr/lib/x86_64-linux-gnu/libucm.so.0*\n")
    report = tmp_path / "r.json"
    assert cli.main(["test", ref, "--only", "libraries", "--report", str(report)]) == 1
    libraries = json.loads(report.read_text())["checks"][0]
    assert libraries["status"] == "fail"
    assert "libucp.so.0" in libraries["detail"] and "libucm.so.0 not found" in libraries["detail"]


def test_a_second_copy_of_a_library_fails(smoke_cpu_image, docker_client, tmp_path):
    """Two files carrying one soname (here Open MPI's libmpi.so.40 copied under /opt): the image
    ships the library twice, and the check names both copies."""
    ref = _build(docker_client, None, "imagebuild/smoke-cpu-proto:libmpi-twice",
                 f"FROM {smoke_cpu_image}\nRUN mkdir -p /opt/extra/lib && "
                 "cp -L /usr/lib/x86_64-linux-gnu/libmpi.so.40 /opt/extra/lib/libmpi.so.40\n")
    report = tmp_path / "r.json"
    assert cli.main(["test", ref, "--only", "libraries", "--report", str(report)]) == 1
    libraries = json.loads(report.read_text())["checks"][0]
    assert libraries["status"] == "fail" and libraries["metrics"]["duplicate_sonames"] == 1
    assert "2 copies of libmpi.so.40" in libraries["detail"] and "/opt/extra/lib/libmpi.so.40" in libraries["detail"]


def _with_features(docker_client, smoke_cpu_image, tag: str, features: dict) -> str:
    """smoke-cpu with its image.json promising other UCX features (labels untouched: only
    mpi.config runs against it)."""
    edit = ("import json; p='/opt/imagebuild/image.json'; d=json.load(open(p)); "
            f"d['features']={features!r}; json.dump(d, open(p, 'w'))")
    return _build(docker_client, None, f"imagebuild/smoke-cpu-proto:{tag}",
                  f"FROM {smoke_cpu_image}\nRUN python3 -c \"{edit}\"\n")


def test_ucx_modules_the_image_promises_are_required(smoke_cpu_image, docker_client, tmp_path):
    """Debian's UCX has ib and rdmacm but no cuda module: an image promising verbs and rdmacm
    passes, one promising CUDA and gdrcopy fails and names what is missing."""
    ok = _with_features(docker_client, smoke_cpu_image, "ucx-rdma",
                        {"verbs": True, "rdmacm": True, "ucx_cuda": False, "gdrcopy": False})
    report = tmp_path / "ok.json"
    assert cli.main(["test", ok, "--only", "mpi.config", "--report", str(report)]) == 0
    check = json.loads(report.read_text())["checks"][0]
    assert "UCX has what the image promises: verbs (ib), rdmacm (rdmacm)" in check["detail"]
    assert check["metrics"]["ucx_module.ib"] == 1 and check["metrics"]["ucx_module.rdmacm"] == 1
    bad = _with_features(docker_client, smoke_cpu_image, "ucx-cuda",
                         {"verbs": True, "rdmacm": True, "ucx_cuda": True, "gdrcopy": True})
    report = tmp_path / "bad.json"
    assert cli.main(["test", bad, "--only", "mpi.config", "--report", str(report)]) == 1
    check = json.loads(report.read_text())["checks"][0]
    assert check["status"] == "fail"
    assert "UCX was built without cuda (for ucx_cuda), cuda/gdrcopy (for gdrcopy)" in check["detail"]


def test_unknown_and_foreign_images_are_one_line(docker_client, capsys):
    assert cli.main(["test", "imagebuild/no-such-image:1"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "imagebuild test: unknown image imagebuild/no-such-image:1 (not in the engine; build it first)"
    if any(BASE in (i.tags or []) for i in docker_client.images.list(name="imagebuild/base")):
        assert cli.main(["test", BASE]) == 2
        assert "not an imagebuild image" in capsys.readouterr().err


def test_tier_gpu_without_a_gpu_runtime_is_one_line(smoke_cpu_image, docker_client, capsys, tmp_path):
    """This engine has no NVIDIA runtime: `--tier gpu` asks it for every GPU, it refuses, and the
    user reads one line saying what the tier needs; no report is written, no container is left."""
    before = _leftovers(docker_client)
    report = tmp_path / "gpu.json"
    assert cli.main(["test", smoke_cpu_image, "--tier", "gpu", "--report", str(report)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("imagebuild test: tier gpu needs the engine to give containers GPUs")
    assert "gpu" in err[0].split(": ", 2)[-1]        # the engine's own words follow
    assert not report.exists()
    assert _leftovers(docker_client) - before == set()


def test_a_hung_container_is_killed_at_its_deadline(smoke_cpu_image, docker_client):
    with Containers(get_engine("docker", client=docker_client)) as cs:
        box = cs.start(smoke_cpu_image, ["sleep", "600"], name="hung")
        start = time.monotonic()
        assert cs.wait(box, time.monotonic() + 2) is None
        assert time.monotonic() - start < 60
        assert docker_client.containers.get(box.id).status != "running"
    assert _leftovers(docker_client, cs.token) == set()


def test_ctrl_c_removes_containers_and_networks(smoke_cpu_image, docker_client):
    with pytest.raises(KeyboardInterrupt):
        with Containers(get_engine("docker", client=docker_client)) as cs:
            cs.network()
            cs.start(smoke_cpu_image, ["sleep", "600"], name="interrupted")
            assert len(_leftovers(docker_client, cs.token)) == 2
            raise KeyboardInterrupt
    assert _leftovers(docker_client, cs.token) == set()


def test_sigterm_mid_run_removes_every_container(smoke_cpu_image, docker_client, tmp_path):
    """`imagebuild test` killed with SIGTERM while its suite container runs leaves nothing behind."""
    import signal

    before = _leftovers(docker_client)
    child = subprocess.Popen([sys.executable, "-m", "imagebuild", "test", smoke_cpu_image, "--only", "ddp.equivalence",
                              "--report", str(tmp_path / "r.json")], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (_leftovers(docker_client) - before):
        time.sleep(0.2)
    assert _leftovers(docker_client) - before, "the suite container never appeared"
    child.send_signal(signal.SIGTERM)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 130 and err.strip().endswith("interrupted")
    assert _leftovers(docker_client) - before == set()
    assert not (tmp_path / "r.json").exists()  # no half-written report either
