"""What is installed, found in child processes (a crash or hang here cannot take the suite down).

    python3 -m imagebuild.smoke.workers.probe system LIBS_JSON
    python3 -m imagebuild.smoke.workers.probe torch

`system` prints the libraries' own answers through ctypes (ncclGetVersion, cudnnGetVersion,
cudaRuntimeGetVersion, ucp_get_version_string); LIBS_JSON maps a name (nccl, cudnn, cudart, ucp)
to a library path or null. `torch` prints torch's own view (version, CUDA, NCCL from
torch.cuda.nccl.version(), cuDNN from torch.backends.cudnn.version(), the nvidia-* wheels'
versions, devices). Each prints one JSON object.

The two never share a process: a library loaded through ctypes first takes its soname
(libcudnn.so.9, libnccl.so.2) for the whole process, so a torch imported afterwards binds to that
copy instead of its own. On a host with the system's cuDNN 9.14 and torch's wheel 9.19,
torch.backends.cudnn.version() then raised "cuDNN version incompatibility" and torch's cuDNN was
reported as not found.
"""

from __future__ import annotations

import ctypes
import json
import sys


def nccl_code(code: int) -> str:
    # NCCL >= 2.9 encodes major*10000 + minor*100 + patch, older major*1000 + minor*100 + patch
    if code >= 10000:
        return f"{code // 10000}.{(code % 10000) // 100}.{code % 100}"
    return f"{code // 1000}.{(code % 1000) // 100}.{code % 100}"


def cudnn_code(code: int) -> str:
    # cuDNN >= 9: major*10000 + minor*100 + patch (91900 = 9.19.0); 8.x and older:
    # major*1000 + minor*100 + patch (8902 = 8.9.2)
    if code <= 0:
        raise ValueError(f"not a cuDNN version code: {code}")
    if code >= 10000:
        return f"{code // 10000}.{(code % 10000) // 100}.{code % 100}"
    return f"{code // 1000}.{(code % 1000) // 100}.{code % 100}"


def cuda_code(code: int) -> str:
    return f"{code // 1000}.{(code % 1000) // 10}"


def system(libs: dict) -> dict:
    out: dict = {}
    errors: dict = {}
    for name, path in sorted(libs.items()):
        if not path:
            out[name] = None
            continue
        try:
            lib = ctypes.CDLL(path)
            if name == "nccl":
                v = ctypes.c_int()
                rc = lib.ncclGetVersion(ctypes.byref(v))
                out[name] = nccl_code(v.value) if rc == 0 else None
            elif name == "cudnn":
                lib.cudnnGetVersion.restype = ctypes.c_size_t
                out[name] = cudnn_code(int(lib.cudnnGetVersion()))  # 0 (sub-library missing): ValueError
            elif name == "cudart":
                v = ctypes.c_int()
                rc = lib.cudaRuntimeGetVersion(ctypes.byref(v))
                out[name] = cuda_code(v.value) if rc == 0 else None
            elif name == "ucp":
                lib.ucp_get_version_string.restype = ctypes.c_char_p
                out[name] = lib.ucp_get_version_string().decode()
            else:
                out[name] = None
        except (OSError, AttributeError, ValueError) as exc:
            out[name] = None
            errors[name] = f"{path}: {exc}"
    return {"versions": out, "errors": errors}


def torch_facts() -> dict:
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - an import failure is a fact to report
        return {"present": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    facts = {"present": True, "version": torch.__version__, "cuda": torch.version.cuda,
             "file": torch.__file__, "nccl": None, "cudnn": None, "cuda_available": False,
             "device_count": 0, "devices": [], "gloo": False, "nccl_backend": False,
             "bfloat16": True}
    try:
        import torch.distributed as dist

        facts["gloo"] = bool(dist.is_available() and dist.is_gloo_available())
        facts["nccl_backend"] = bool(dist.is_available() and dist.is_nccl_available())
    except Exception:  # noqa: BLE001
        pass
    if torch.version.cuda:
        try:
            v = torch.cuda.nccl.version()
            facts["nccl"] = ".".join(str(p) for p in v) if isinstance(v, tuple) else nccl_code(int(v))
        except Exception as exc:  # noqa: BLE001
            facts["nccl_error"] = str(exc)[:200]
    try:
        import torch.backends.cudnn as cudnn

        facts["cudnn_available"] = bool(cudnn.is_available())
        code = cudnn.version()  # None when torch was built without cuDNN (CPU wheels)
        facts["cudnn"] = cudnn_code(int(code)) if code else None
    except Exception as exc:  # noqa: BLE001 - e.g. "cuDNN version incompatibility": a fact to report
        facts["cudnn_error"] = f"{type(exc).__name__}: {exc}"[:300]
    facts["wheels"] = nvidia_wheels()
    try:
        facts["cuda_available"] = bool(torch.cuda.is_available())
        facts["device_count"] = torch.cuda.device_count() if facts["cuda_available"] else 0
        facts["devices"] = [torch.cuda.get_device_name(i) for i in range(facts["device_count"])]
    except Exception as exc:  # noqa: BLE001
        facts["cuda_error"] = str(exc)[:200]
    return facts


def nvidia_wheels() -> dict[str, str]:
    """Versions of the installed nvidia-cudnn-* and nvidia-nccl-* wheels (torch's own copies)."""
    try:
        from importlib import metadata
    except ImportError:  # pragma: no cover - Python < 3.8
        return {}
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = (dist.metadata.get("Name") or "").lower().replace("_", "-")
        if name.startswith(("nvidia-cudnn", "nvidia-nccl")):
            found[name] = dist.version
    return dict(sorted(found.items()))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["system"]:
        result = system(json.loads(argv[1]) if len(argv) > 1 else {})
    elif argv[:1] == ["torch"]:
        result = torch_facts()
    else:
        print("usage: python3 -m imagebuild.smoke.workers.probe system LIBS_JSON | torch", file=sys.stderr)
        return 2
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
