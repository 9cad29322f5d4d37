"""imagebuild-check: does this node's NVIDIA driver and GPUs meet this image's needs? One line.

Runs inside every imagebuild image (standard library only), from the Docker entrypoint wrapper
(``imagebuild-entrypoint``, which prints the line on stderr and then execs the command) and by
hand where entrypoints are skipped (pyxis: ``srun --container-image=... imagebuild-check``).

What the image needs comes from /opt/imagebuild/image.json only (written from matrix.yaml when
the image was built): ``min_driver`` (the lowest driver that runs the image's CUDA, minor-version
compatibility and cuDNN's rows included), ``stack.cuda`` and ``stack.pytorch``, and under
``needs``: ``native_driver`` (the driver the CUDA release shipped with), ``forward_compat`` (the
cuda-compat package and the driver branches NVIDIA's forward-compatibility table lists for it) and
``gpu_archs`` (the compute capabilities the PyTorch build was compiled for). A fact image.json
lacks is not judged, never guessed. What the node has: the driver version from
/proc/driver/nvidia/version, else ``nvidia-smi``; the GPUs and their compute capability from
``nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader``. Whether
cuda-compat is in the image and in use: /usr/local/cuda-X.Y/compat/libcuda.so.* and
LD_LIBRARY_PATH.

A GPU runs a build compiled for an architecture of the same major and an equal or lower minor
(CUDA's binary compatibility: sm_86 code runs on an sm_89 GPU), so compute capability 8.9 is served
by a build listing 8.6.

Exit codes: 0 the image runs here (CUDA natively or through minor-version compatibility, or a CPU
image); 1 it does not (the driver is too old, a GPU is not in the PyTorch build, forward
compatibility set up on a branch it does not support); 2 cannot be judged (image.json missing or
malformed, a driver version or nvidia-smi output that does not parse); 3 a CUDA image with no
usable NVIDIA driver or GPU: CPU only.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys

from .expect import read_json
from .nvrequire import Gpu, InvalidRequirement, Node, satisfied

IMAGE_JSON = "/opt/imagebuild/image.json"
PROC_VERSION = "/proc/driver/nvidia/version"
SMI_QUERY = ("--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader")
SMI_TIMEOUT_S = 10
PREFIX = "imagebuild-check: "

OK, NO, UNKNOWN, CPU_ONLY = 0, 1, 2, 3

# /usr/local/bin/imagebuild-entrypoint, the Docker ENTRYPOINT (written at build time by
# `imagecheck --install-entrypoint`, so the recipe holds no shell expansion to quote)
ENTRYPOINT_SCRIPT = """#!/bin/sh
# imagebuild-entrypoint: forward compatibility, then imagebuild-check's one line on stderr
# (IMAGEBUILD_CHECK=0, no, false or off: nothing), then the command replaces this shell (exec):
# its arguments, exit code and signals are its own. pyxis skips entrypoints: run imagebuild-check
# there yourself (enroot's hook uses nvidia-container-cli, which loads the compat libraries itself).
# Forward compatibility: where the image carries cuda-compat and the host's driver is older than
# its CUDA needs, on a branch the package supports, the package's folder goes first on
# LD_LIBRARY_PATH (NVIDIA's own runtime does the same from toolkit 1.17.5; IMAGEBUILD_COMPAT=0: not).
if [ -d /usr/local/cuda/compat ]; then
  case "${IMAGEBUILD_COMPAT:-1}" in
    0|no|false|off) ;;
    *) compat=$(/usr/local/bin/imagebuild-check --compat-dir 2>/dev/null) || compat=
       if [ -n "$compat" ]; then export LD_LIBRARY_PATH="$compat${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi ;;
  esac
fi
case "${IMAGEBUILD_CHECK:-1}" in
  0|no|false|off) ;;
  *) /usr/local/bin/imagebuild-check >&2 || : ;;
esac
exec "$@"
"""

_DRIVER = re.compile(r"^\d+(\.\d+){1,2}\Z")
_CC = re.compile(r"^\d+\.\d+\Z")
_PROC = re.compile(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)\s")


class Unjudgeable(Exception):
    """A fact that should be there does not parse: exit 2 with this message."""


def _v(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


def driver_from_proc(text: str) -> str:
    """'NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 ...' (proprietary)
    or '... NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build ...' (open)."""
    m = _PROC.search(text)
    if not m:
        first = text.strip().splitlines()[0] if text.strip() else "an empty file"
        raise Unjudgeable(f"{PROC_VERSION}: no driver version in {first[:80]!r}")
    return m.group(1)


def parse_smi(text: str) -> list[tuple[str, str, str]]:
    """(name, compute capability, driver) per GPU from nvidia-smi's CSV (header line skipped)."""
    gpus = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cols = [c.strip() for c in line.rsplit(",", 2)]
        if cols == ["name", "compute_cap", "driver_version"]:
            continue
        if len(cols) != 3 or not cols[0] or not _CC.match(cols[1]) or not _DRIVER.match(cols[2]):
            raise Unjudgeable(f"nvidia-smi line {n}: expected 'NAME, COMPUTE_CAP, DRIVER', got "
                              f"{line.strip()[:80]!r}")
        gpus.append((cols[0], cols[1], cols[2]))
    return gpus


def read_node() -> tuple[str | None, list[tuple[str, str, str]] | None, str]:
    """(driver or None, GPUs or None when nvidia-smi is absent or fails, why nvidia-smi failed)."""
    driver = None
    try:
        with open(PROC_VERSION, encoding="utf-8", errors="replace") as fh:
            driver = driver_from_proc(fh.read())
    except OSError:
        pass
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return driver, None, ""
    try:
        out = subprocess.run([exe, *SMI_QUERY], capture_output=True, text=True,
                             timeout=SMI_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return driver, None, f"nvidia-smi did not answer in {SMI_TIMEOUT_S} s"
    except OSError as exc:
        return driver, None, f"nvidia-smi cannot run ({exc.strerror})"
    if out.returncode != 0:
        lines = (out.stdout + out.stderr).strip().splitlines()
        return driver, None, f"nvidia-smi failed: {lines[0][:120] if lines else f'exit {out.returncode}'}"
    gpus = parse_smi(out.stdout)
    if driver is None and gpus:
        driver = gpus[0][2]
    return driver, gpus, ""


def load_image(path: str) -> dict:
    data = read_json(path, "the image's facts", Unjudgeable)
    if not isinstance(data, dict) or not isinstance(data.get("stack"), dict):
        raise Unjudgeable(f"{path}: expected an object with a 'stack' object")
    for key in ("min_driver",):
        if key in data and not isinstance(data[key], str):
            raise Unjudgeable(f"{path}: {key} must be a string")
    return data


def compat_present(cuda: str) -> str | None:
    """The image's cuda-compat folder for this CUDA (X.Y), when it holds a libcuda."""
    mm = ".".join(cuda.split(".")[:2])
    folder = f"/usr/local/cuda-{mm}/compat"
    return folder if glob.glob(os.path.join(folder, "libcuda.so*")) else None


def compat_dir_to_use(image: dict, proc_text: str | None = None) -> str | None:
    """The image's cuda-compat folder when forward compatibility is how it runs on this node: the
    driver (from /proc, no nvidia-smi: the entrypoint asks before every command) is older than the
    image's minimum and on a branch its cuda-compat package supports, and the folder holds the
    libraries. None otherwise, and whenever a fact is missing."""
    cuda = image["stack"].get("cuda", "none")
    needs = image.get("needs") if isinstance(image.get("needs"), dict) else {}
    fwd = needs.get("forward_compat") if isinstance(needs.get("forward_compat"), dict) else None
    floor = image.get("min_driver")
    if fwd is None or not isinstance(cuda, str) or cuda in ("none", "") or not isinstance(floor, str) \
            or not _DRIVER.match(floor):
        return None
    folder = compat_present(cuda)
    if folder is None:
        return None
    if proc_text is None:
        try:
            with open(PROC_VERSION, encoding="utf-8", errors="replace") as fh:
                proc_text = fh.read(65536)
        except OSError:
            return None
    try:
        driver = driver_from_proc(proc_text)
    except Unjudgeable:
        return None
    branches = fwd.get("branches") if isinstance(fwd.get("branches"), list) else []
    if _v(driver) < _v(floor) and _v(driver)[0] in branches:
        return folder
    return None


def served_by(cc: str, archs: list[str]) -> bool:
    """A GPU of compute capability cc runs code built for an arch of its major and minor <= its own."""
    major, minor = _v(cc)[:2]
    return any(_v(a)[0] == major and _v(a)[1] <= minor for a in archs if _CC.match(a))


def capabilities(image: dict) -> str:
    """What a CUDA image's communication stack is, from image.json's features (empty when it says
    nothing): RDMA transports in UCX, whether Open MPI is CUDA-aware, and that GPU collectives go
    through NCCL: "RDMA-ready (UCX verbs, rdmacm); MPI not CUDA-aware: GPU collectives through
    NCCL 2.30.7"."""
    stack = image.get("stack") or {}
    feats = image.get("features") if isinstance(image.get("features"), dict) else None
    if feats is None:
        return ""
    parts = []
    if stack.get("openmpi") not in (None, "", "none"):
        rdma = [t for t in ("verbs", "rdmacm") if feats.get(t) is True]
        parts.append(f"RDMA-ready (UCX {', '.join(rdma)})" if rdma else "no RDMA transport in UCX")
        mpi = "CUDA-aware MPI" if feats.get("mpi_cuda") is True else "MPI not CUDA-aware"
        nccl = stack.get("nccl")
        if nccl not in (None, "", "none"):
            mpi += f"{',' if feats.get('mpi_cuda') is True else ':'} GPU collectives through NCCL {nccl}"
        parts.append(mpi)
    return "; ".join(parts)


def judge(image: dict, driver: str | None, gpus: list[tuple[str, str, str]] | None, *,
          smi_error: str = "", compat_dir: str | None = None, ld_path: str = "") -> tuple[int, str]:
    """(exit code, the one line) for an image's facts and what the node offers; a CUDA image that
    runs here, or runs on the CPU only, says what its communication stack is (capabilities)."""
    code, line = _judge(image, driver, gpus, smi_error=smi_error, compat_dir=compat_dir, ld_path=ld_path)
    cuda = (image.get("stack") or {}).get("cuda", "none")
    caps = capabilities(image) if cuda not in ("none", "", None) and code in (OK, CPU_ONLY) else ""
    return code, f"{line} [{caps}]" if caps else line


def _judge(image: dict, driver: str | None, gpus: list[tuple[str, str, str]] | None, *,
           smi_error: str = "", compat_dir: str | None = None, ld_path: str = "") -> tuple[int, str]:
    stack = image["stack"]
    name = image.get("id", "this image")
    cuda = stack.get("cuda", "none")
    torch = stack.get("pytorch", "none")
    seen = f"driver {driver}" if driver else "no NVIDIA driver"
    if gpus:
        seen += f", {len(gpus)} GPU(s): " + ", ".join(sorted({f'{g[0]} ({g[1]})' for g in gpus}))
    if cuda in ("none", "", None):
        if not driver:
            return OK, f"no NVIDIA driver: CPU only ({name} is a CPU image)"
        return OK, f"OK: {name} is a CPU image; {seen} not used"
    if driver is None:
        return CPU_ONLY, (f"no NVIDIA driver: CPU only ({name} is built for CUDA {cuda}, which needs a "
                          f"driver >= {image.get('min_driver', '?')}; on a GPU node run with --gpus all "
                          "or the NVIDIA container runtime)")
    if not _DRIVER.match(driver):
        raise Unjudgeable(f"driver version {driver!r} does not parse")
    floor = image.get("min_driver")
    if not gpus and floor and _DRIVER.match(floor) and _v(driver) < _v(floor):
        # no GPU to look at (e.g. an old nvidia-smi without compute_cap): the driver decides
        return NO, (f"driver {driver} is older than this image's CUDA {cuda} needs (>= {floor}); use a "
                    f"tag built for an older CUDA (imagebuild find --driver {driver}) or upgrade the driver")
    if gpus is None:
        why = f" ({smi_error})" if smi_error else " (nvidia-smi is not in the container)"
        return CPU_ONLY, (f"driver {driver} on the host but no GPU in this container{why}: CPU only; "
                          "run with --gpus all or the NVIDIA container runtime")
    if not gpus:
        return CPU_ONLY, f"driver {driver} but nvidia-smi lists no GPU: CPU only"
    needs = image.get("needs") if isinstance(image.get("needs"), dict) else {}
    native = needs.get("native_driver")
    fwd = needs.get("forward_compat") if isinstance(needs.get("forward_compat"), dict) else None
    branch = _v(driver)[0]
    problems: list[str] = []
    mode = ""
    compat_on = bool(compat_dir) and compat_dir in ld_path.split(":")
    if floor and _DRIVER.match(floor) and _v(driver) < _v(floor):
        listed = fwd is not None and branch in fwd.get("branches", [])
        branches = ", ".join(f"R{b}" for b in (fwd or {}).get("branches", []))
        if compat_on and listed:
            mode = (f" through forward compatibility ({fwd.get('package')} on R{branch}, data-center "
                    "GPUs only; a consumer GPU fails with CUDA error 804)")
        elif compat_on:
            problems.append(f"{fwd.get('package') if fwd else 'cuda-compat'} is on LD_LIBRARY_PATH but "
                            f"driver {driver} (R{branch}) is not a branch it supports"
                            f"{f' ({branches})' if branches else ''}: expect CUDA error 803; upgrade "
                            f"the driver to >= {floor}")
        else:
            line = (f"driver {driver} is older than this image's CUDA {cuda} needs (>= {floor})")
            if listed and compat_dir:
                line += (f"; this image carries {fwd.get('package')}, which NVIDIA supports on "
                         f"{branches} with data-center GPUs: LD_LIBRARY_PATH={compat_dir}:$LD_LIBRARY_PATH, "
                         f"or use a tag built for an older CUDA (imagebuild find --driver {driver}), "
                         "or upgrade the driver")
            else:
                line += (f"; use a tag built for an older CUDA (imagebuild find --driver {driver}) "
                         "or upgrade the driver")
            problems.append(line)
    elif native and _DRIVER.match(native) and _v(driver) < _v(native):
        mode = (f" in minor-version compatibility (>= {floor}; native needs >= {native}): no PTX JIT of "
                "code newer than the driver")
    elif native and _DRIVER.match(native):
        mode = " natively"
    problems += _gpu_problems(image, needs, torch, driver, gpus)
    if problems:
        return NO, "; ".join(problems)
    return OK, f"OK: {name} (CUDA {cuda}) runs here{mode}: {seen}"


def _gpu_problems(image: dict, needs: dict, torch, driver: str, gpus) -> list[str]:
    """Why a GPU of this node is not one the image runs on: not in its PyTorch build (served_by), or
    not an architecture (with its drivers) its NVIDIA_REQUIRE_ARCH admits. The first such GPU."""
    archs = needs.get("gpu_archs") if isinstance(needs.get("gpu_archs"), list) else None
    if archs and torch not in ("none", "", None):
        for gname, cc, _ in sorted(set(gpus)):
            if not served_by(cc, archs):
                return [f"{gname} (compute capability {cc}) is not in this image's PyTorch "
                        f"{torch} build ({', '.join(archs)}): use a tag whose build lists it"]
    require = image.get("nvidia_require") if isinstance(image.get("nvidia_require"), dict) else {}
    arch_req = require.get("NVIDIA_REQUIRE_ARCH")
    if not isinstance(arch_req, str):
        return []
    # the architectures (and their drivers) the image runs on, as NVIDIA's runtime reads them
    node = Node(driver=driver, cuda=None, gpus=())
    for gname, cc, _ in sorted(set(gpus)):
        try:
            fits = satisfied(arch_req, node, Gpu(arch=cc, brand=None))
        except InvalidRequirement as exc:
            raise Unjudgeable(f"NVIDIA_REQUIRE_ARCH of image.json: {exc}") from None
        if not fits:
            return [f"{gname} (compute capability {cc}) with driver {driver} is not a GPU this image "
                    f"runs on (NVIDIA_REQUIRE_ARCH={arch_req}): use a tag built for it, or the driver "
                    "it names"]
    return []


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="imagebuild-check",
        description="Compare this node's NVIDIA driver and GPUs with the image's needs and print one "
                    "line. Exit 0 runs here, 1 does not, 2 cannot be judged, 3 CUDA image without a "
                    "usable driver or GPU (CPU only).")
    ap.add_argument("--image-json", default=os.environ.get("IMAGEBUILD_IMAGE_JSON", IMAGE_JSON),
                    help=f"the image's facts (default {IMAGE_JSON})")
    ap.add_argument("--json", action="store_true", help="print {code, line} as JSON instead")
    ap.add_argument("--install-entrypoint", metavar="PATH",
                    help="write the entrypoint wrapper script to PATH (mode 0755) and exit (image builds)")
    ap.add_argument("--compat-dir", action="store_true",
                    help="print the image's cuda-compat folder when forward compatibility is what runs it "
                         "on this node's driver (exit 0), else nothing (exit 1)")
    args = ap.parse_args(argv)
    if args.compat_dir:
        try:
            folder = compat_dir_to_use(load_image(args.image_json))
        except Unjudgeable:
            folder = None
        if folder:
            print(folder)
        return OK if folder else NO
    if args.install_entrypoint:
        with open(args.install_entrypoint, "w", encoding="utf-8") as fh:
            fh.write(ENTRYPOINT_SCRIPT)
        os.chmod(args.install_entrypoint, 0o755)
        return OK
    try:
        image = load_image(args.image_json)
        driver, gpus, why = read_node()
        cuda = image["stack"].get("cuda", "none")
        compat = compat_present(cuda) if cuda not in ("none", "") and isinstance(cuda, str) else None
        code, line = judge(image, driver, gpus, smi_error=why, compat_dir=compat,
                           ld_path=os.environ.get("LD_LIBRARY_PATH", ""))
    except Unjudgeable as exc:
        code, line = UNKNOWN, f"cannot judge: {exc}"
    if args.json:
        print(json.dumps({"code": code, "line": line}, sort_keys=True))
    else:
        print(PREFIX + line)
    return code


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
