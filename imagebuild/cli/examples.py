"""The examples each command's --help ends with: the calls a newcomer makes first, as the README
walks them. One place, so that `tests/house/test_cli_help.py` can run each against the parser."""

from __future__ import annotations

EXAMPLES: dict[str, tuple[str, ...]] = {
    "resolve": ("imagebuild resolve --driver 570.172.08 --gpu H100",
                "imagebuild resolve --driver 580.95.05 --gpu H100 --torch 2.13 --json",
                "imagebuild resolve --driver 535.104.05 --gpu A100 --why-not torch==2.15.0",
                "imagebuild resolve --driver 580.95.05 --gpu T4 --strict"),
    "check": ("imagebuild check --driver 580.95.05 --gpu H100 --cuda 13.0.2 --torch 2.13.0",
              "imagebuild check --image imagebuild/smoke-cpu:local --driver 580.95.05 --gpu H100"),
    "knowledge": ("imagebuild knowledge which", "imagebuild knowledge evidence --gaps",
                  "imagebuild knowledge sync nvidia", "imagebuild knowledge copy ./my-matrix"),
    "images": ("imagebuild images", "imagebuild images --all --json"),
    "tags": ("imagebuild tags smoke-cpu",),
    "generate": ("imagebuild generate", "imagebuild generate --check", "imagebuild generate smoke-cpu"),
    "base": ("imagebuild base debian-bookworm",),
    "build": ("imagebuild build smoke-cpu", "imagebuild build smoke-cpu --locked"),
    "context": ("imagebuild context smoke-cpu --output ./ctx",),
    "normalize": ("imagebuild normalize imagebuild/smoke-cpu:local --context ./ctx/smoke-cpu",),
    "test": ("imagebuild test smoke-cpu", "imagebuild test smoke-cpu --report smoke.json"),
    "publish": ("imagebuild publish smoke-cpu --registry localhost:5000/hpc",
                "imagebuild publish smoke-cpu --registry localhost:5000/hpc --sbom --notes"),
    "lock": ("imagebuild lock smoke-cpu", "imagebuild lock --check"),
    "wheels": ("imagebuild wheels check",),
    "sources": ("imagebuild sources list",),
    "plan": ("imagebuild plan --driver-from 570.172.08 --driver-to 580.95.05 --gpu H100,A100",
             "imagebuild plan --driver-from 570.172.08 --driver-to 580.95.05 --gpu H100 --format github"),
    "upgrade": ("imagebuild upgrade --driver-from 570.172.08 --driver-to 580.95.05 --gpu H100 --dry-run",
                "imagebuild upgrade --driver-from 570.172.08 --driver-to 580.95.05 --gpu H100,A100 "
                "--registry localhost:5000/hpc"),
    "export": ("imagebuild export smoke-cpu --format sqsh --output smoke-cpu.sqsh",
               "imagebuild export smoke-cpu --format oci-bundle --output ./smoke-cpu.bundle"),
    "slurm-script": ("imagebuild slurm-script smoke-cpu --nodes 2 --gpus-per-node 0 --output smoke.sbatch",),
    "doctor": ("imagebuild doctor", "imagebuild doctor --json > node.json"),
    "find": ("imagebuild find --driver 580.95.05 --gpu H100",
             "imagebuild find --from-doctor node.json --registry localhost:5000/hpc"),
    "sbom": ("imagebuild sbom smoke-cpu --output smoke-cpu.cdx.json",),
    "notes": ("imagebuild notes smoke-cpu", "imagebuild notes smoke-cpu --output NOTES.md"),
    "audit": ("imagebuild audit smoke-cpu",),
    "verify": ("imagebuild verify localhost:5000/hpc/smoke-cpu:TAG --key cosign.pub",),
    "completion": ("imagebuild completion bash > /etc/bash_completion.d/imagebuild",
                   "imagebuild completion zsh > ~/.zfunc/_imagebuild"),
}


def epilog(name: str) -> str | None:
    lines = EXAMPLES.get(name)
    return "examples:\n" + "\n".join(f"  {line}" for line in lines) if lines else None
