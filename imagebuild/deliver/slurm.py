"""sbatch scripts that run the smoke suite inside an image across the nodes of a Slurm job.

The script starts one task per GPU (one per node when there are no GPUs) with
``srun --mpi=pmix`` inside the container, through either runtime:

- ``pyxis`` (default): ``srun --container-image=IMAGE.sqsh`` (enroot squashfs from ``imagebuild
  export --format sqsh``); reports are written to a host folder mounted into the container;
- ``oci``: Slurm's own OCI support, ``srun --container=BUNDLE`` (``imagebuild export --format
  oci-bundle``; oci.conf must name a runtime such as runc); reports land under the bundle's rootfs.

On every node, inside the container, the GPUDirect probe prints ``export`` lines with the NCCL and
UCX settings for the RDMA path that node offers (``imagebuild-gdr-check --env``); the task
evaluates them and then runs ``imagebuild-smoke``, one JSON report per task.

Every value that reaches the script is validated against a strict pattern first (paths, names,
counts in range, check names), and quoted on top of that.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass

from ..errors import UsageError

RUNTIMES = ("pyxis", "oci")
MAX_NODES = 4096
MAX_GPUS_PER_NODE = 64
MAX_TASKS_PER_NODE = 1024
#: where reports are seen inside the container
CONTAINER_REPORTS = "/imagebuild-reports"

_SEGMENT = r"[A-Za-z0-9_][A-Za-z0-9._+-]*"
ABS_PATH_RE = re.compile(rf"^(?:/{_SEGMENT})+/?\Z")
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\Z")
CHECK_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}\Z")
TIME_RE = re.compile(r"^(?:[0-9]{1,3}-)?[0-9]{1,3}:[0-5][0-9]:[0-5][0-9]\Z|^[0-9]{1,6}\Z")


def check_path(value: str, what: str) -> str:
    """An absolute path of plain segments (letters, digits, ``._+-``; no ``..``, no spaces,
    no shell characters), or UsageError naming ``what``."""
    if not isinstance(value, str) or not ABS_PATH_RE.match(value) or \
            any(part in ("..", ".") for part in value.split("/")):
        raise UsageError(f"{value!r} is not an absolute path of letters, digits and '._+-' "
                         "(no '..', spaces or shell characters)", argument=what)
    return value.rstrip("/") or "/"


def check_count(value, what: str, low: int, high: int) -> int:
    """An int (not a bool, not a string) in [low, high], or UsageError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and re.fullmatch(r"[0-9]{1,6}", value):
            value = int(value)
        else:
            raise UsageError(f"{value!r} is not a whole number", argument=what)
    if not low <= value <= high:
        raise UsageError(f"{value} is out of range {low}..{high}", argument=what)
    return value


def check_name(value: str, what: str) -> str:
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise UsageError(f"{value!r} is not a name of letters, digits and '_.-' (at most 64)", argument=what)
    return value


def known_checks() -> tuple[str, ...] | None:
    try:
        from ..smoke import CHECK_NAMES
    except Exception:  # noqa: BLE001 - the smoke package is optional for rendering
        return None
    return tuple(CHECK_NAMES)


@dataclass(frozen=True)
class SbatchSpec:
    """What the sbatch script runs. Validated on creation."""

    image_path: str
    nodes: int
    gpus_per_node: int
    tasks_per_node: int | None = None   # default: gpus_per_node, or 1 without GPUs
    runtime: str = "pyxis"
    checks: tuple[str, ...] = ()        # --only; empty: the whole suite
    tier: str | None = None             # default: gpu with GPUs, else cpu
    time_limit: str = "00:30:00"
    job_name: str = "imagebuild-smoke"
    partition: str | None = None
    account: str | None = None
    reports_dir: str | None = None      # host folder (pyxis); default: submit dir/imagebuild-reports

    def __post_init__(self):
        check_path(self.image_path, "--image-path")
        check_count(self.nodes, "--nodes", 1, MAX_NODES)
        check_count(self.gpus_per_node, "--gpus-per-node", 0, MAX_GPUS_PER_NODE)
        if self.tasks_per_node is not None:
            check_count(self.tasks_per_node, "--tasks-per-node", 1, MAX_TASKS_PER_NODE)
        if self.runtime not in RUNTIMES:
            raise UsageError(f"{self.runtime!r} is not one of {', '.join(RUNTIMES)}", argument="--runtime")
        if self.tier not in (None, "cpu", "gpu"):
            raise UsageError(f"{self.tier!r} is not cpu or gpu", argument="--tier")
        names = known_checks()
        for check in self.checks:
            if not isinstance(check, str) or not CHECK_RE.match(check) or (names and check not in names):
                raise UsageError(f"{check!r} is not a smoke check"
                                 + (f" (one of: {', '.join(names)})" if names else ""), argument="--only")
        if not TIME_RE.match(self.time_limit):
            raise UsageError(f"{self.time_limit!r} is not a Slurm time limit (MINUTES or [D-]HH:MM:SS)",
                             argument="--time")
        check_name(self.job_name, "--job-name")
        if self.partition is not None:
            check_name(self.partition, "--partition")
        if self.account is not None:
            check_name(self.account, "--account")
        if self.reports_dir is not None:
            check_path(self.reports_dir, "--reports-dir")

    @property
    def ntasks_per_node(self) -> int:
        return self.tasks_per_node or max(1, self.gpus_per_node)

    @property
    def smoke_tier(self) -> str:
        return self.tier or ("gpu" if self.gpus_per_node > 0 else "cpu")


# The task run inside the container on every node. $1 is the report folder as the container sees
# it; the remaining arguments go to imagebuild-smoke. pyxis skips the image's entrypoint, so the
# task prints imagebuild-check's line itself (on stderr; images older than the command skip it).
_TASK = """set -eu
dir=$1; shift
if command -v imagebuild-check >/dev/null; then imagebuild-check >&2 || :; fi
gdr_env=$(imagebuild-gdr-check --env) || { echo "imagebuild-gdr-check --env failed on $(uname -n)" >&2; exit 3; }
eval "$gdr_env"
exec imagebuild-smoke --report "$dir/$(uname -n)-${SLURM_PROCID:-0}.json" "$@"
"""


def render_sbatch(spec: SbatchSpec) -> str:
    """The sbatch script text for ``spec``: same spec, same bytes."""
    q = shlex.quote
    lines = [
        "#!/bin/bash",
        "# Written by `imagebuild slurm-script`: runs the imagebuild smoke suite inside the image on",
        f"# {spec.nodes} node(s), {spec.ntasks_per_node} task(s) per node, runtime {spec.runtime}.",
        "# Submit with: sbatch THIS_FILE. Every value below was validated when it was written.",
        f"#SBATCH --job-name={spec.job_name}",
        f"#SBATCH --nodes={spec.nodes}",
        f"#SBATCH --ntasks-per-node={spec.ntasks_per_node}",
    ]
    if spec.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={spec.gpus_per_node}")
    lines.append(f"#SBATCH --time={spec.time_limit}")
    if spec.partition:
        lines.append(f"#SBATCH --partition={spec.partition}")
    if spec.account:
        lines.append(f"#SBATCH --account={spec.account}")
    lines += [
        f"#SBATCH --output={spec.job_name}-%j.out",
        "set -euo pipefail",
        "",
        f"IMAGE={q(spec.image_path)}",
        'JOB="${SLURM_JOB_ID:-nojob}"',
    ]
    if spec.runtime == "pyxis":
        if spec.reports_dir:
            lines.append(f'REPORTS={q(spec.reports_dir)}/"$JOB"')
        else:
            lines.append('REPORTS="${SLURM_SUBMIT_DIR:-$PWD}/imagebuild-reports/$JOB"')
        lines += [
            f'INSIDE={CONTAINER_REPORTS}',
            'mkdir -p "$REPORTS"',
        ]
        container = ['--container-image="$IMAGE"', f'--container-mounts="$REPORTS:{CONTAINER_REPORTS}"']
    else:
        lines += [
            '# Slurm\'s OCI runtime mounts nothing of ours: reports go under the bundle\'s rootfs',
            f'REPORTS="$IMAGE/rootfs{CONTAINER_REPORTS}/$JOB"',
            f'INSIDE="{CONTAINER_REPORTS}/$JOB"',
            'mkdir -p "$REPORTS"',
        ]
        container = ['--container="$IMAGE"']
    smoke_args = ["--tier", spec.smoke_tier]
    if spec.checks:
        smoke_args += ["--only", *spec.checks]
    lines += [
        "",
        "# Inside the container, on every node: the GPUDirect probe's `export` lines (NCCL/UCX",
        "# settings for the RDMA path that node offers) are evaluated, then the smoke suite runs",
        "# and writes one JSON report per task.",
        "TASK=" + q(_TASK),
        "",
        "status=0",
        "srun --mpi=pmix --ntasks-per-node=" + str(spec.ntasks_per_node) + " " + " ".join(container)
        + ' /bin/sh -c "$TASK" imagebuild-task "$INSIDE" ' + " ".join(q(a) for a in smoke_args)
        + " || status=$?",
        "",
        'echo "imagebuild: smoke reports in $REPORTS:"',
        'ls -1 "$REPORTS"',
        'exit "$status"',
        "",
    ]
    return "\n".join(lines)


def write_script(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temp file beside it, then rename), mode 0755."""
    from ..atomic import write_atomic
    write_atomic(path, text, perm=0o755, parents=True)
