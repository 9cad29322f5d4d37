#!/usr/bin/env python3
"""The PyTorch build a GPU node has installed, against what matrix.yaml says of that build (issue 25).

Run on a node with torch and a GPU, imagebuild importable (an installed wheel, or PYTHONPATH at a
checkout):

    python3 benchmarks/gpu_proof/torch_evidence.py [--matrix FILE] [--json FILE]

It reads the installed build first-hand: torch.__version__, torch/version.py's cuda and
git_version, the architectures the build carries (torch.cuda.get_arch_list()), the cuDNN and NCCL it
loads at run time on the GPU, and the exact pins of its installed metadata (Requires-Dist). Then it
compares each with the matrix: the release's wheel record (commit), the variant's cuDNN, NCCL, CUDA
runtime and architecture list. Prints one line per fact, `agree` or `DIFFER`; exit 0 when all
agree, 1 when one differs, 2 when it cannot run (no torch, no GPU, the build not in the matrix)."""

from __future__ import annotations

import argparse
import json
import re
import sys


def read_build() -> dict:
    import importlib.metadata as md

    import torch

    if not torch.cuda.is_available():
        raise SystemExit("torch_evidence: torch sees no GPU")
    x = torch.ones(1 << 20, device="cuda")
    assert float(x.sum()) == float(1 << 20)           # the GPU computes, not only answers
    pins = {}
    for req in md.requires("torch") or []:
        m = re.match(r"^(nvidia-cudnn-cu\d+|nvidia-nccl-cu\d+|cuda-toolkit|nvidia-cuda-runtime(?:-cu\d+)?)"
                     r"(?:\[[^\]]*\])?\s*\(?==\s*([0-9.]+)", req)
        if m:
            pins[m.group(1)] = m.group(2)
    cudnn = torch.backends.cudnn.version()             # e.g. 91900 for 9.19.0
    return {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "git_version": torch.version.git_version,
        "arch_list": torch.cuda.get_arch_list(),
        "device": torch.cuda.get_device_name(0),
        "capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
        "cudnn_loaded": f"{cudnn // 10000}.{cudnn // 100 % 100}.{cudnn % 100}" if cudnn else None,
        "nccl_loaded": ".".join(map(str, torch.cuda.nccl.version())),
        "pins": pins,
    }


def compare(build: dict, matrix: str | None) -> list[tuple[str, str, str, bool]]:
    from imagebuild import knowledge
    from imagebuild.workspace import locate_matrix

    path = matrix or str(locate_matrix(None)[0])
    k = knowledge.load(path)
    release, _, local = build["version"].partition("+")
    cuda = build["cuda"] or "none"
    var = k.variants.get((release, cuda))
    if var is None:
        raise SystemExit(f"torch_evidence: {path} has no variant {release}+{local or 'none'}")
    rec = next((w for w in k.pytorch[release].wheels if w.platform == "x86_64" and w.cuda == cuda), None)
    rows = []

    def row(what, host, mine):
        rows.append((what, str(host), str(mine), str(host) == str(mine)))

    row("build", f"{release}+cu{cuda.replace('.', '')}", f"{var.pytorch}+{var.tag}")
    if rec is not None:
        row("commit (the index's wheel, PYPIWHEEL)", build["git_version"], rec.commit)
    pin = lambda prefix: next((v for n, v in build["pins"].items() if n.startswith(prefix)), None)  # noqa: E731
    row(f"cuDNN pin [{var.source}]", pin("nvidia-cudnn"), var.cudnn)
    row(f"NCCL pin [{var.nccl_cited}]", pin("nvidia-nccl"), var.nccl)
    if var.cuda_runtime:
        row(f"CUDA runtime pin [{var.source}]", pin("cuda-toolkit") or pin("nvidia-cuda-runtime"),
            var.cuda_runtime)
    if var.arch:
        cc = lambda a: (int(a.split(".")[0]), int(a.split(".")[1]))  # noqa: E731
        host = sorted((f"{a[3:-1]}.{a[-1]}" for a in build["arch_list"] if a.startswith("sm_")), key=cc)
        mine = sorted((a.removesuffix("+PTX") for a in var.arch), key=cc)
        row(f"architectures [{var.source}]", ",".join(host), ",".join(mine))
    # what the run time loads on the GPU: the pinned wheels, unless the node puts others first
    row("cuDNN loaded on the GPU", build["cudnn_loaded"], ".".join(var.cudnn.split(".")[:3]))
    row("NCCL loaded on the GPU", build["nccl_loaded"], var.nccl)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--matrix", default=None)
    ap.add_argument("--json", default=None, metavar="FILE")
    args = ap.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        print("torch_evidence: no torch here", file=sys.stderr)
        return 2
    build = read_build()
    rows = compare(build, args.matrix)
    print(f"{build['device']} (cc {build['capability']}): torch {build['version']}")
    for what, host, mine, ok in rows:
        print(f"  {'agree ' if ok else 'DIFFER'}  {what}: node {host}; matrix {mine}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"build": build, "rows": [dict(zip(("what", "node", "matrix", "agree"), r))
                                                for r in rows]}, fh, indent=1)
    return 0 if all(r[3] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
