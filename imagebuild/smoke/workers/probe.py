"""What is installed, found in a child process (a crash or hang here cannot take the suite down).

Prints one JSON object: torch's view (version, CUDA, NCCL, cuDNN, devices) and the system
libraries' own answers through ctypes (ncclGetVersion, cudnnGetVersion, cudaRuntimeGetVersion,
ucp_get_version_string). Usage: python3 -m imagebuild.smoke.workers.probe LIBS_JSON
where LIBS_JSON maps a name (nccl, cudnn, cudart, ucp) to a library path or null.
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
    # cuDNN >= 9: major*10000 + minor*100 + patch; 8.x: major*1000 + minor*100 + patch
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
                out[name] = cudnn_code(int(lib.cudnnGetVersion()))
            elif name == "cudart":
                v = ctypes.c_int()
                rc = lib.cudaRuntimeGetVersion(ctypes.byref(v))
                out[name] = cuda_code(v.value) if rc == 0 else None
            elif name == "ucp":
                lib.ucp_get_version_string.restype = ctypes.c_char_p
                out[name] = lib.ucp_get_version_string().decode()
            else:
                out[name] = None
        except (OSError, AttributeError) as exc:
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
        code = torch.backends.cudnn.version()
        facts["cudnn"] = cudnn_code(int(code)) if code else None
    except Exception:  # noqa: BLE001
        pass
    try:
        facts["cuda_available"] = bool(torch.cuda.is_available())
        facts["device_count"] = torch.cuda.device_count() if facts["cuda_available"] else 0
        facts["devices"] = [torch.cuda.get_device_name(i) for i in range(facts["device_count"])]
    except Exception as exc:  # noqa: BLE001
        facts["cuda_error"] = str(exc)[:200]
    return facts


def main() -> int:
    libs = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    with_torch = "--no-torch" not in sys.argv
    result = {"system": system(libs), "torch": torch_facts() if with_torch else {"present": False}}
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
