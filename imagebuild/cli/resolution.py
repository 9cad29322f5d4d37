"""How a resolver answer is printed as text, for every command that prints one (`resolve`,
`check`): here, so that no command imports another."""

from __future__ import annotations


def print_resolution(res) -> None:
    if not res.ok:
        print("No consistent stack. The facts that rule it out:")
        for line in res.explanation:
            print(f"  - {line}")
        for w in res.warnings:
            print(f"warning: {w}")
        return
    mode = res.mode.mode if res.mode else "n/a"
    print("Best stack:")
    for comp in ("driver", "gpu", "platform", "os", "python", "cuda", "cudnn", "nccl",
                 "system_cudnn", "system_nccl", "ucx", "openmpi", "pytorch"):
        if comp not in res.stack:
            continue
        extra = ""
        if comp == "cuda" and res.stack["cuda"] != "none":
            extra = f"  ({mode}" + (f", needs {res.mode.package}" if res.mode.package else "") + ")"
        print(f"  {comp:<12} {res.stack[comp]}{extra}")
    if res.min_driver:
        print(f"  minimum driver for this stack: {res.min_driver}")
    if res.gpudirect:
        print("GPUDirect RDMA paths:")
        for g in res.gpudirect:
            print(f"  {g['path']:<15} {g['allowed']:<8} {g['detail']} [{g['source']}]")
    print("Why:")
    for line in res.explanation:
        print(f"  - {line}")
    if res.repository_chain:
        print("Why not with CUDA from an OS repository:")
        for line in res.repository_chain:
            print(f"  - {line}")
    for w in res.warnings:
        print(f"warning: {w}")
