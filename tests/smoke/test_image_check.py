"""Images that explain themselves: imagebuild-check (imagebuild/smoke/imagecheck.py), the Docker
entrypoint that prints its line, and /etc/pip/constraint.txt with PIP_CONSTRAINT.

The judgement is tested on the image.json facts real images get (render.output.write_context: the spec's
image.json plus imageneeds.image_needs); the entrypoint, the command inside the image, and pip's
refusal are tested in the real smoke-cpu image on the real engine, with a stand-in nvidia-smi
where a driver is needed (this machine has none)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT
from imagebuild.render.run import load_images
from imagebuild import knowledge
from imagebuild.render.imageneeds import image_needs
from imagebuild.smoke import imagecheck
from imagebuild.smoke.imagecheck import CPU_ONLY, NO, OK, Unjudgeable, judge

K = knowledge.load(ROOT / "matrix.yaml")
SPECS = load_images(ROOT / "matrix.yaml")
CU128 = "pytorch-2.10.0-cu128-ubuntu24.04-runtime"   # min 525.60.13, native 570.124.06, compat R535
CU130 = "comms-cu130-nccl2.30.7-ubuntu24.04-runtime"  # min 580.65.06, cuda-compat-13-0 on R570, R535
H100 = [("NVIDIA H100 80GB HBM3", "9.0", "535.104.05")] * 2


def facts(image_id: str) -> dict:
    """image.json as write_context writes it into the image."""
    spec = SPECS[image_id]
    return json.loads(json.dumps({**spec.image_json, **image_needs(spec, K)}))


def with_compat(image_id: str) -> dict:
    """image.json of the same image built while NVIDIA still supported R570 and R535 (before
    February 2026): cuda-compat-13-0 serves both branches (FWD615)."""
    doc = facts(image_id)
    doc["needs"]["forward_compat"] = {"package": "cuda-compat-13-0", "branches": [570, 535]}
    return doc


# ------------------------------------------------------------------------------------------------
# the facts image.json carries


def test_needs_come_from_the_matrix():
    needs = facts(CU128)["needs"]
    assert needs["native_driver"] == K.releases["12.8.1"].driver == "570.124.06"
    # cuda-compat-12-8 serves R535, which minor-version compatibility serves already: not needed
    assert "forward_compat" not in needs
    # cuda-compat-13-0 is listed for R570 and R535, but both are past their end of life on the
    # matrix's as_of (2026-11-21; S6), and the compat libraries need a supported branch (S4): the
    # image judged as of its matrix promises no forward compatibility
    assert "forward_compat" not in facts(CU130)["needs"]
    assert needs["gpu_archs"] == list(K.variants[("2.10.0", "12.8")].arch)
    assert "gpu_archs" not in facts(CU130)["needs"]          # no PyTorch in a comms image
    assert "needs" not in facts("smoke-cpu")                  # a CPU image needs no driver


# ------------------------------------------------------------------------------------------------
# the judgement, one line each


def test_cpu_image():
    assert judge(facts("smoke-cpu"), None, None) == (
        OK, "no NVIDIA driver: CPU only (smoke-cpu is a CPU image)")
    code, line = judge(facts("smoke-cpu"), "535.104.05", H100)
    assert code == OK and line.startswith("OK: smoke-cpu is a CPU image; driver 535.104.05, 2 GPU(s)")


def test_cuda_image_without_driver_or_gpu_is_cpu_only():
    code, line = judge(facts(CU128), None, None)
    assert code == CPU_ONLY and line.startswith("no NVIDIA driver: CPU only (")
    assert "needs a driver >= 525.60.13" in line
    # /proc/driver/nvidia is the host's, visible in any container; the GPUs need --gpus
    code, line = judge(facts(CU128), "535.104.05", None)
    assert code == CPU_ONLY and "driver 535.104.05 on the host but no GPU in this container" in line
    # a driver too old for the image is said so even when nvidia-smi cannot list the GPUs (drivers
    # before R510 do not know the compute_cap field)
    code, line = judge(facts(CU128), "470.82.01", None, smi_error="nvidia-smi failed: Field ...")
    assert code == NO and line.startswith("driver 470.82.01 is older than this image's CUDA 12.8.1 needs "
                                          "(>= 525.60.13)")


def test_native_and_minor_version():
    code, line = judge(facts(CU128), "570.124.06", H100)
    assert code == OK and line.startswith(f"OK: {CU128} (CUDA 12.8.1) runs here natively: driver 570.124.06")
    code, line = judge(facts(CU128), "535.104.05", H100)
    assert code == OK and "in minor-version compatibility (>= 525.60.13; native needs >= 570.124.06)" in line
    assert "no PTX JIT" in line


def test_driver_too_old_names_the_floor_and_the_way_out():
    code, line = judge(facts(CU130), "535.104.05", H100)
    assert code == NO
    assert line.startswith("driver 535.104.05 is older than this image's CUDA 13.0.2 needs (>= 580.65.06); ")
    assert "imagebuild find --driver 535.104.05" in line and "cuda-compat" not in line
    # with cuda-compat in the image and the branch in NVIDIA's table: how to use it
    code, line = judge(with_compat(CU130), "535.104.05", H100, compat_dir="/usr/local/cuda-13.0/compat")
    assert code == NO
    assert ("this image carries cuda-compat-13-0, which NVIDIA supports on R570, R535 with data-center "
            "GPUs: LD_LIBRARY_PATH=/usr/local/cuda-13.0/compat:$LD_LIBRARY_PATH") in line
    # a branch the table does not list: no forward-compatibility hint
    code, line = judge(with_compat(CU130), "550.54.15", H100, compat_dir="/usr/local/cuda-13.0/compat")
    assert code == NO and "cuda-compat" not in line


def test_forward_compat_in_use():
    compat = "/usr/local/cuda-13.0/compat"
    code, line = judge(with_compat(CU130), "570.86.15", H100, compat_dir=compat,
                       ld_path=f"{compat}:/opt/ucx/lib")
    assert code == OK and "through forward compatibility (cuda-compat-13-0 on R570" in line
    code, line = judge(with_compat(CU130), "550.54.15", H100, compat_dir=compat, ld_path=compat)
    assert code == NO and "is not a branch it supports (R570, R535): expect CUDA error 803" in line


def test_gpu_architectures():
    old = [("Tesla P100-PCIE-16GB", "6.0", "570.124.06")]
    code, line = judge(facts(CU128), "570.124.06", old)
    assert code == NO and line.startswith("Tesla P100-PCIE-16GB (compute capability 6.0) is not in this "
                                          "image's PyTorch 2.10.0 build (7.0, 7.5, 8.0")
    # sm_86 code runs on an sm_89 GPU (same major, higher minor)
    l40s = [("NVIDIA L40S", "8.9", "570.124.06")]
    assert judge(facts(CU128), "570.124.06", l40s)[0] == OK


def test_proc_and_nvidia_smi_parsing():
    assert imagecheck.driver_from_proc(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n") == "535.104.05"
    assert imagecheck.driver_from_proc(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build\n") == "580.65.06"
    with pytest.raises(Unjudgeable, match="no driver version"):
        imagecheck.driver_from_proc("garbage\n")
    assert imagecheck.parse_smi("name, compute_cap, driver_version\nNVIDIA A100-SXM4-80GB, 8.0, 550.54.15\n") == [
        ("NVIDIA A100-SXM4-80GB", "8.0", "550.54.15")]
    with pytest.raises(Unjudgeable, match="nvidia-smi line 1"):
        imagecheck.parse_smi("No devices were found\n")


def test_missing_or_bad_image_json_is_exit_2_in_one_line(tmp_path):
    for path, why in ((tmp_path / "absent.json", "cannot read the image's facts"),
                      (tmp_path / "bad.json", "not valid JSON")):
        if path.name == "bad.json":
            path.write_text("{")
        out = subprocess.run([sys.executable, "-m", "imagebuild.smoke.imagecheck", "--image-json", str(path)],
                             capture_output=True, text=True, cwd=ROOT)
        assert out.returncode == 2 and out.stderr == ""
        assert out.stdout.startswith("imagebuild-check: cannot judge: ") and why in out.stdout
        assert len(out.stdout.splitlines()) == 1


# ------------------------------------------------------------------------------------------------
# in every generated recipe


def test_every_generated_image_has_the_check_the_entrypoint_and_the_constraints():
    dockerfiles = sorted((ROOT / "Dockerfiles").glob("*/Dockerfile"))
    assert {p.parent.name for p in dockerfiles} == set(SPECS)
    for path in dockerfiles:
        text = path.read_text()
        spec = SPECS[path.parent.name]
        if spec.from_image:   # a devel image: the check and the ENTRYPOINT come FROM its runtime
            assert f"\nFROM {spec.from_image}\n" in text, path
            text = (ROOT / "Dockerfiles" / spec.depends_on[0] / "Dockerfile").read_text()
        assert "> /usr/local/bin/imagebuild-check" in text, path
        assert '\nENTRYPOINT ["/usr/local/bin/imagebuild-entrypoint"]\nCMD ["/bin/bash"]\n' in text, path
        assert 'PIP_CONSTRAINT="/etc/pip/constraint.txt"' in text and "> /etc/pip/constraint.txt" in text, path
    for path in sorted((ROOT / "singularity").glob("*.def")):
        image = path.name.removesuffix(".from-image.def").removesuffix(".def")
        if not path.name.endswith(".from-image.def"):
            text = path.read_text()
            if SPECS[image].from_image:   # bootstraps from its runtime image, which has the check
                assert f"Bootstrap: docker-daemon\nFrom: {SPECS[image].from_image}\n" in text, path
                text = (ROOT / "singularity" / f"{SPECS[image].depends_on[0]}.def").read_text()
            assert "> /usr/local/bin/imagebuild-check" in text, path
        # `apptainer run` runs %runscript, not the OCI ENTRYPOINT: it must call the same wrapper
        assert runscript(path) == RUNSCRIPT, path


RUNSCRIPT = '[ "$#" -gt 0 ] || set -- /bin/bash\nexec /usr/local/bin/imagebuild-entrypoint "$@"'


def runscript(path) -> str:
    """The body of the last %runscript section of a definition (up to the next section)."""
    body = Path(path).read_text().rsplit("\n%runscript\n", 1)[1]
    lines = []
    for line in body.splitlines():
        if line.startswith("%"):
            break
        if line.strip():
            lines.append(line.strip())
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# in the real smoke-cpu image

LINE = "imagebuild-check: no NVIDIA driver: CPU only (smoke-cpu is a CPU image)\n"


def _run(client, image, command, env=None, entrypoint=None):
    """(exit code, stdout, stderr) of a container (removed afterwards)."""
    c = client.containers.create(image, command, environment=env or {}, network_disabled=True,
                                 entrypoint=entrypoint)
    try:
        c.start()
        code = c.wait(timeout=120)["StatusCode"]
        return (code, c.logs(stdout=True, stderr=False).decode(), c.logs(stdout=False, stderr=True).decode())
    finally:
        c.remove(force=True)


def test_entrypoint_prints_the_line_then_runs_the_command(docker_client, smoke_cpu_image):
    code, out, err = _run(docker_client, smoke_cpu_image,
                          ["sh", "-c", 'printf "%s|" "$@"; echo "pid $$"; exit 7', "sh", "a b", "", "c"])
    assert code == 7 and out == "a b||c|pid 1\n" and err == LINE   # argv intact, exec'd as PID 1
    assert _run(docker_client, smoke_cpu_image, ["true"], {"IMAGEBUILD_CHECK": "0"}) == (0, "", "")
    info = docker_client.images.get(smoke_cpu_image).attrs["Config"]
    assert info["Entrypoint"] == ["/usr/local/bin/imagebuild-entrypoint"] and info["Cmd"] == ["/bin/bash"]


def test_apptainer_runscript_prints_the_line_then_runs_the_command(docker_client, smoke_cpu_image):
    """`apptainer run IMAGE.sif ARGS` runs %runscript with /bin/sh and ARGS. Apptainer cannot be
    installed here, so the generated runscript is run that way in the real image: the check's
    line, the arguments intact, the exit code the command's; no arguments: an interactive shell."""
    script = runscript(ROOT / "singularity" / "smoke-cpu.from-image.def")
    code, out, err = _run(docker_client, smoke_cpu_image,
                          ["-c", script, "runscript", "sh", "-c", 'printf "%s|" "$@"; exit 5', "sh",
                           "a b", "", "c"], entrypoint=["/bin/sh"])
    assert (code, out, err) == (5, "a b||c|", LINE)
    code, out, err = _run(docker_client, smoke_cpu_image, ["-c", script, "runscript"],
                          {"IMAGEBUILD_CHECK": "0"}, entrypoint=["/bin/sh"])
    assert code == 0 and out == "" and err == ""      # bash, stdin closed: it exits at once


def test_signals_reach_the_command(docker_client, smoke_cpu_image):
    c = docker_client.containers.create(
        smoke_cpu_image, ["sh", "-c", 'trap "exit 42" TERM; echo ready; while :; do sleep 0.1; done'],
        network_disabled=True)
    try:
        c.start()
        deadline = time.monotonic() + 60
        while b"ready" not in c.logs() and time.monotonic() < deadline:
            time.sleep(0.1)
        c.kill(signal="SIGTERM")
        assert c.wait(timeout=60)["StatusCode"] == 42
    finally:
        c.remove(force=True)


FAKE_SMI = '#!/bin/sh\necho "NVIDIA H100 80GB HBM3, 9.0, 535.104.05"\necho "NVIDIA H100 80GB HBM3, 9.0, 535.104.05"\n'


def _check_in_image(client, image, image_json: dict, prepare: str = "") -> tuple[int, str]:
    script = ('mkdir -p /tmp/bin && printf "%s" "$FAKE_SMI" > /tmp/bin/nvidia-smi && chmod +x /tmp/bin/nvidia-smi '
              '&& printf "%s" "$FACTS" > /tmp/image.json && ' + (prepare + " && " if prepare else "")
              + 'PATH=/tmp/bin:$PATH IMAGEBUILD_IMAGE_JSON=/tmp/image.json imagebuild-check')
    code, out, err = _run(client, image, ["sh", "-c", script],
                          {"IMAGEBUILD_CHECK": "0", "FAKE_SMI": FAKE_SMI, "FACTS": json.dumps(image_json)})
    assert err == "" and len(out.splitlines()) == 1, (out, err)
    return code, out.strip()


def test_check_inside_the_image_with_a_driver(docker_client, smoke_cpu_image):
    """The command as pyxis users call it (`srun --container-image=... imagebuild-check`), reading
    the driver from nvidia-smi (no /proc/driver/nvidia here) and image.json facts of CUDA images."""
    code, line = _check_in_image(docker_client, smoke_cpu_image, facts(CU128))
    assert code == 0 and line.startswith(f"imagebuild-check: OK: {CU128} (CUDA 12.8.1) runs here in "
                                         "minor-version compatibility")
    assert "2 GPU(s): NVIDIA H100 80GB HBM3 (9.0)" in line
    code, line = _check_in_image(docker_client, smoke_cpu_image, facts(CU130))
    assert code == 1 and "is older than this image's CUDA 13.0.2 needs (>= 580.65.06)" in line
    assert "cuda-compat" not in line   # the smoke-cpu image has no /usr/local/cuda-13.0/compat
    code, line = _check_in_image(docker_client, smoke_cpu_image, with_compat(CU130),
                                 "mkdir -p /usr/local/cuda-13.0/compat && touch /usr/local/cuda-13.0/compat/libcuda.so.1")
    assert code == 1 and "LD_LIBRARY_PATH=/usr/local/cuda-13.0/compat:$LD_LIBRARY_PATH" in line
    code, line = _check_in_image(docker_client, smoke_cpu_image, facts("smoke-cpu"))
    assert code == 0 and line.startswith("imagebuild-check: OK: smoke-cpu is a CPU image; driver 535.104.05")


# ------------------------------------------------------------------------------------------------
# /etc/pip/constraint.txt

FAKE_WHEEL = r'''
import sys, zipfile
name, version = sys.argv[1], sys.argv[2]
dist = f"{name}-{version}.dist-info"
with zipfile.ZipFile(f"/tmp/links/{name}-{version}-py3-none-any.whl", "w") as z:
    z.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    z.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    z.writestr(f"{dist}/RECORD", "")
'''


def test_constraints_are_the_lock(docker_client, smoke_cpu_image):
    from packaging.utils import canonicalize_name

    from imagebuild.render.renderer import image_lock
    lock = image_lock(SPECS["smoke-cpu"], K)
    code, out, _ = _run(docker_client, smoke_cpu_image, ["cat", "/etc/pip/constraint.txt"], {"IMAGEBUILD_CHECK": "0"})
    assert code == 0
    pins = {canonicalize_name(n): v for n, v in (ln.split("==") for ln in out.splitlines())}
    assert pins == {name: e.version for name, e in lock.entries.items()} and pins["torch"] == "2.13.0+cpu"


def test_pip_cannot_replace_a_locked_wheel(docker_client, smoke_cpu_image):
    """Offline and fast: a stand-in torch 2.12.0 wheel in a local find-links folder, pip --dry-run.
    Without the constraint pip would install it; with PIP_CONSTRAINT (the image's ENV) it refuses."""
    script = ("mkdir -p /tmp/links && python -c \"$MAKE\" torch 2.12.0 && "
              "echo '== free' && PIP_CONSTRAINT= pip install --dry-run --no-index --find-links /tmp/links "
              "torch==2.12.0 2>&1; echo \"rc=$?\"; echo '== constrained' && pip install --dry-run --no-index "
              "--find-links /tmp/links torch==2.12.0 2>&1; echo \"rc=$?\"")
    code, out, err = _run(docker_client, smoke_cpu_image, ["bash", "-c", script],
                          {"IMAGEBUILD_CHECK": "0", "MAKE": FAKE_WHEEL})
    free, constrained = out.split("== constrained")
    assert "Would install torch-2.12.0" in free and "rc=0" in free, out
    assert "The user requested (constraint) torch==2.13.0+cpu" in constrained, out
    assert re.search(r"rc=1\s*$", constrained) and "Would install" not in constrained, out
