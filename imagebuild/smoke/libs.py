"""Find shared libraries the way the dynamic loader would, and ask ldd about their dependencies."""

from __future__ import annotations

import glob
import os
import re
import struct
import sys

from . import proc

_STD_DIRS = ("/usr/local/lib", "/usr/local/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
             "/usr/lib64", "/usr/lib", "/lib/x86_64-linux-gnu", "/lib64", "/lib")
# where the stacks imagebuild renders install their prefixes (and NVIDIA's images put CUDA)
_PREFIX_DIRS = ("/opt/ucx/lib", "/opt/openmpi/lib", "/usr/local/cuda/lib64",
                "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/local/nccl/lib", "/usr/local/ucx/lib",
                "/usr/local/openmpi/lib", "/opt/hpcx/ucx/lib", "/opt/hpcx/ompi/lib")
_LDCONFIG_CACHE: dict[str, str] | None = None

# driver libraries: the NVIDIA container runtime mounts them from the host at run time
DRIVER_LIBS = ("libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1")


def _ldconfig() -> dict[str, str]:
    global _LDCONFIG_CACHE
    if _LDCONFIG_CACHE is None:
        found: dict[str, str] = {}
        exe = proc.which("ldconfig") or ("/sbin/ldconfig" if os.path.exists("/sbin/ldconfig") else None)
        if exe:
            out = proc.run([exe, "-p"], timeout=20)
            if out.ok:
                for line in out.output.splitlines():
                    m = re.match(r"\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)", line)
                    if m and ("x86-64" in m.group(2) or "64" in m.group(2) or sys.maxsize < 2**32):
                        found.setdefault(m.group(1), m.group(3))
        _LDCONFIG_CACHE = found
    return _LDCONFIG_CACHE


def _python_dirs(subdir: str) -> list[str]:
    """site-packages/<subdir> (e.g. nvidia/nccl/lib from the nvidia-* wheels torch depends on)."""
    import site

    dirs = []
    for base in list(site.getsitepackages()) + [site.getusersitepackages()]:
        dirs.append(os.path.join(base, subdir))
    return dirs


def locate(soname: str, extra_dirs: list[str] | tuple[str, ...] = ()) -> str | None:
    """The file the loader would open for soname (or None), following LD_LIBRARY_PATH first."""
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    for d in dirs:
        if os.path.exists(os.path.join(d, soname)):
            return os.path.realpath(os.path.join(d, soname))
    cached = _ldconfig().get(soname)
    if cached and os.path.exists(cached):
        return os.path.realpath(cached)
    for d in list(extra_dirs) + list(_STD_DIRS) + list(_PREFIX_DIRS):
        path = os.path.join(d, soname)
        if os.path.exists(path):
            return os.path.realpath(path)
    return None


def locate_near_binary(soname: str, binary: str) -> str | None:
    """libmpi next to mpirun: <prefix>/bin/mpirun -> <prefix>/lib/libmpi.so.40."""
    exe = proc.which(binary)
    if not exe:
        return None
    prefix = os.path.dirname(os.path.dirname(os.path.realpath(exe)))
    for sub in ("lib", "lib64"):
        path = os.path.join(prefix, sub, soname)
        if os.path.exists(path):
            return os.path.realpath(path)
    return None


def nccl_dirs() -> list[str]:
    return _python_dirs("nvidia/nccl/lib")


def cudnn_dirs() -> list[str]:
    return _python_dirs("nvidia/cudnn/lib")


# the CUDA runtime's folder in NVIDIA's wheels: nvidia-cuda-runtime-cu12 (nvidia/cuda_runtime/lib),
# nvidia-cuda-runtime 13.x (nvidia/cu13/lib, shared with cuBLAS, cuFFT, ... of CUDA 13)
CUDART_WHEEL_DIRS = ("cuda_runtime", "cu13")


def cudart_dirs() -> list[str]:
    return [d for sub in CUDART_WHEEL_DIRS for d in _python_dirs(f"nvidia/{sub}/lib")]


def wheel_lib_dirs() -> list[str]:
    """site-packages/nvidia/*/lib: the CUDA, cuDNN, NCCL, ... libraries of NVIDIA's wheels."""
    return sorted({d for base in _python_dirs("") for d in glob.glob(os.path.join(base, "nvidia", "*", "lib"))
                   if os.path.isdir(d)})


# The install prefixes an image's devel stage compiled: every ELF in them (libraries, UCX's and
# Open MPI's plugins, the tools) must resolve its libraries. image.json's `built` lists them (from
# imagebuild/components.py's rows); these are read where there is no such list (a bare host, an
# image.json written before it had one).
BUILT_TREES = ("/opt/gdrcopy", "/opt/ucx", "/opt/openmpi", "/opt/nccl-tests")


def _is_elf(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"\x7fELF"
    except OSError:
        return False


def elf_files(root: str) -> list[str]:
    """Every regular ELF file under `root` (links are not followed: their targets are listed)."""
    out = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(folder, name)
            if not os.path.islink(path) and os.path.isfile(path) and _is_elf(path):
                out.append(path)
    return out


def shared_objects(folder: str) -> list[str]:
    """The ELF shared libraries of a folder (lib*.so*, links followed once; static archives and
    other files left out)."""
    out: dict[str, str] = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.so*"))):
        real = os.path.realpath(path)
        if real in out or not os.path.isfile(real) or not _is_elf(real):
            continue
        out[real] = path
    return sorted(out.values())


def torch_libs() -> list[str]:
    """torch/lib/*.so* of the torch that `import torch` would load (without importing it)."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return []
    libdir = os.path.join(list(spec.submodule_search_locations)[0], "lib")
    return sorted(p for p in glob.glob(os.path.join(libdir, "*.so*")) if os.path.isfile(p))


def parse_ldd(text: str) -> list[str]:
    """Dependencies ldd could not find ("libfoo.so.1 => not found")."""
    missing = []
    for line in text.splitlines():
        m = re.match(r"\s*(\S+)\s+=>\s+not found", line)
        if m:
            missing.append(m.group(1))
    return sorted(set(missing))


def parse_ldd_deps(text: str) -> dict[str, str | None]:
    """Every dependency ldd lists: name -> the file it resolved to (None: not found)."""
    deps: dict[str, str | None] = {}
    for line in text.splitlines():
        m = re.match(r"\s*(\S+)\s+=>\s+(not found|\S+)", line)
        if m:
            deps[m.group(1)] = None if m.group(2) == "not found" else m.group(2)
    return deps


def ldd_deps(path: str, timeout: float = 30) -> dict[str, str | None]:
    """parse_ldd_deps of `ldd path`; empty when ldd is missing or fails."""
    exe = proc.which("ldd")
    if not exe:
        return {}
    out = proc.run([exe, path], timeout=timeout)
    return parse_ldd_deps(out.output) if out.ok else {}


def ldd_missing(path: str, timeout: float = 30,
                search: list[str] | None = None) -> tuple[list[str] | None, str]:
    """(missing dependencies, error); None when ldd itself could not run. `search`: folders put
    before LD_LIBRARY_PATH for this one question."""
    exe = proc.which("ldd")
    if not exe:
        return None, "ldd not installed"
    env = None
    if search:
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = ":".join(list(search) + [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d])
    out = proc.run([exe, path], timeout=timeout, env=env)
    if out.timed_out:
        return None, f"ldd {path} timed out after {timeout:.0f}s"
    missing = parse_ldd(out.output)
    if out.returncode != 0 and not missing:
        if "not a dynamic executable" in out.output:
            return [], ""
        return None, f"ldd {path} failed: {out.tail(2)}"
    return missing, ""


# ---------------------------------------------------------------------------------------------
# one copy of each library
# ---------------------------------------------------------------------------------------------

# The libraries an image must carry once: CUDA's toolkit libraries, cuDNN, NCCL and the RDMA/MPI
# stack. The driver's own (libcuda, libnvidia-*) are left out: the container runtime mounts them,
# and cuda-compat's libcuda is a deliberate second copy for forward compatibility.
WATCHED_PREFIXES = ("libcudart", "libcublas", "libcufft", "libcurand", "libcusparse", "libcusolver",
                    "libnvrtc", "libnvJitLink", "libnvjpeg", "libnpp", "libcupti", "libnvToolsExt",
                    "libcufile", "libnvshmem", "libcudnn", "libnccl", "libucp", "libucs", "libuct",
                    "libucm", "libmpi", "libopen-pal", "libopen-rte", "libpmix", "libprrte", "libgdrapi")

_SHT_DYNAMIC, _DT_SONAME, _DT_NULL = 6, 14, 0


def elf_soname(path: str) -> str | None:
    """DT_SONAME of a shared library, read from its ELF dynamic section (None: not an ELF shared
    object with a soname, or unreadable). Standard library only: the suite runs inside images that
    carry no binutils."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
            if len(head) < 52 or head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] not in (1, 2):
                return None
            end = "<" if head[5] == 1 else ">"
            if head[4] == 2:
                (shoff,) = struct.unpack_from(end + "Q", head, 0x28)
                shentsize, shnum = struct.unpack_from(end + "HH", head, 0x3A)
                shdr, dyn = end + "IIQQQQIIQQ", end + "qQ"
            else:
                (shoff,) = struct.unpack_from(end + "I", head, 0x20)
                shentsize, shnum = struct.unpack_from(end + "HH", head, 0x2E)
                shdr, dyn = end + "IIIIIIIIII", end + "iI"
            if not shoff or not 0 < shnum <= 4096 or shentsize < struct.calcsize(shdr):
                return None
            fh.seek(shoff)
            table = fh.read(shentsize * shnum)
            # fields: name, type, flags, addr, offset, size, link, info, addralign, entsize
            sections = [struct.unpack_from(shdr, table, i * shentsize) for i in range(shnum)]
            for sec in sections:
                if sec[1] != _SHT_DYNAMIC:
                    continue
                strtab = sections[sec[6]]
                fh.seek(sec[4])
                data = fh.read(min(sec[5], 1 << 20))
                size = struct.calcsize(dyn)
                for off in range(0, len(data) - size + 1, size):
                    tag, val = struct.unpack_from(dyn, data, off)
                    if tag == _DT_NULL:
                        break
                    if tag == _DT_SONAME:
                        fh.seek(strtab[4] + val)
                        return fh.read(256).split(b"\0", 1)[0].decode("ascii", "replace") or None
                return None
    except (OSError, struct.error, IndexError):
        return None
    return None


def library_dirs() -> list[str]:
    """Every folder an image may keep shared libraries in: the loader's path, the system's, the
    prefixes imagebuild and NVIDIA install to, /opt/*/lib, and the wheels' (nvidia/*/lib, torch/lib)."""
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    dirs += list(_STD_DIRS) + list(_PREFIX_DIRS)
    for pattern in ("/usr/local/cuda*/lib64", "/usr/local/cuda*/targets/*/lib", "/opt/*/lib", "/opt/*/lib64",
                    "/opt/*/*/lib"):
        dirs += sorted(glob.glob(pattern))
    dirs += [d for sub in ("nvidia/*/lib", "torch/lib") for base in _python_dirs("") for d in
             sorted(glob.glob(os.path.join(base, sub)))]
    return dirs


def soname_copies(dirs: list[str] | None = None,
                  prefixes: tuple[str, ...] = WATCHED_PREFIXES) -> dict[str, list[str]]:
    """soname -> the distinct files (after links) that carry it, for the watched libraries found
    in `dirs` (default library_dirs()); only sonames with two or more copies are returned."""
    seen: set[str] = set()
    found: dict[str, set[str]] = {}
    for d in dirs if dirs is not None else library_dirs():
        for path in glob.glob(os.path.join(d, "lib*.so*")):
            real = os.path.realpath(path)
            if real in seen or not os.path.isfile(real):
                continue
            seen.add(real)
            if not os.path.basename(real).startswith(prefixes) and not os.path.basename(path).startswith(prefixes):
                continue
            soname = elf_soname(real)
            if soname and soname.startswith(prefixes):
                found.setdefault(soname, set()).add(real)
    return {name: sorted(files) for name, files in sorted(found.items()) if len(files) > 1}
