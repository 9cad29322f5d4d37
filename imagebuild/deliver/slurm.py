"""sbatch scripts that run the smoke suite, or the user's own torchrun job, inside an image
across the nodes of a Slurm job.

The smoke job starts one task per GPU (one per node when there are no GPUs) with
``srun --mpi=pmix`` inside the container; the torchrun job starts one task per node, each
``torchrun`` with one worker per GPU and c10d rendezvous on the job's first node. Either goes
through one of two runtimes:

- ``pyxis`` (default): ``srun --container-image=IMAGE``, IMAGE an enroot squashfs from ``imagebuild
  export --format sqsh`` or a registry reference pyxis pulls itself
  (``[USER@][REGISTRY#]IMAGE[:TAG|@sha256:DIGEST]``, enroot's form; ``imagebuild tags --registry``
  prints it);
- ``oci``: Slurm's own OCI support, ``srun --container=BUNDLE`` (``imagebuild export --format
  oci-bundle``, whose config binds the node's /etc/hosts and /etc/resolv.conf and shares its network
  and hostname; oci.conf must name a runtime such as runc).

On every node, inside the container, the GPUDirect probe prints ``export`` lines with the NCCL and
UCX settings for the RDMA path that node offers (``imagebuild-gdr-check --env``); the task
evaluates them first. The smoke suite's JSON report of each task is the task's standard output,
which ``srun --output`` writes to a folder of the host (the submit folder, or ``--reports-dir``):
nothing is written into the image or the bundle.

Every value that reaches the script is validated against a strict pattern first (paths, names,
counts in range, check names, Slurm's time formats, registry references), and quoted on top of that.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass

from ..errors import UsageError
from ..patterns import HOST_PORT, SHA256_DIGEST

RUNTIMES = ("pyxis", "oci")
JOBS = ("smoke", "torchrun")
MAX_NODES = 4096
MAX_GPUS_PER_NODE = 64
MAX_TASKS_PER_NODE = 1024

_SEGMENT = r"[A-Za-z0-9_][A-Za-z0-9._+-]*"
ABS_PATH_RE = re.compile(rf"^(?:/{_SEGMENT})+/?\Z")
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\Z")
CHECK_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}\Z")
# Slurm's time limits (sbatch --time): minutes, minutes:seconds, hours:minutes:seconds, days-hours,
# days-hours:minutes, days-hours:minutes:seconds; UNLIMITED and INFINITE
_F = r"[0-9]{1,6}"
_S = r"[0-5]?[0-9]"
TIME_RE = re.compile(rf"^(?:{_F}|{_F}:{_S}|{_F}:{_S}:{_S}|{_F}-{_F}|{_F}-{_F}:{_S}|{_F}-{_F}:{_S}:{_S}"
                     r"|UNLIMITED|INFINITE|unlimited|infinite)\Z")
# a registry reference as pyxis and enroot take it: [USER@][REGISTRY#]IMAGE[:TAG|@sha256:DIGEST]
_HOST = HOST_PORT                    # the one host grammar (patterns.py)
_PATH = r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*){0,15}"
PYXIS_REF_RE = re.compile(rf"^(?:[A-Za-z0-9_.-]{{1,64}}@)?(?:{_HOST}#)?{_PATH}"
                          rf"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}}|@{SHA256_DIGEST})?\Z")
#: one word of the user's torchrun command line: printable, no control character, bounded
MAX_ARG = 4096


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


def check_pyxis_ref(value: str, what: str = "--image-ref") -> str:
    """A registry reference pyxis and enroot read (``[USER@][REGISTRY#]IMAGE[:TAG|@sha256:HEX]``), or
    UsageError naming ``what``. A docker reference with a registry host (``host:5000/ns/img:tag``)
    is taken in enroot's spelling (``host:5000#ns/img:tag``)."""
    if not isinstance(value, str) or len(value) > 512:
        raise UsageError("a registry reference of at most 512 characters is expected", argument=what)
    ref = value
    if "#" not in ref and "/" in ref:
        head, rest = ref.split("/", 1)
        if "." in head or ":" in head or head == "localhost":     # docker's registry host
            ref = f"{head}#{rest}"
    if not PYXIS_REF_RE.match(ref):
        shown = value[:80].encode("unicode_escape").decode("ascii")
        raise UsageError(f"{shown!r} is not a registry reference pyxis reads "
                         "([USER@][REGISTRY#]IMAGE[:TAG|@sha256:DIGEST])", argument=what)
    return ref


def check_command(words, what: str = "--torchrun") -> tuple[str, ...]:
    """The user's script and its arguments: at least the script, each word printable text without
    a control character, at most MAX_ARG characters; UsageError naming ``what``."""
    words = tuple(words or ())
    if not words:
        raise UsageError("give the training script and its arguments", argument=what)
    for word in words:
        if not isinstance(word, str) or not word or len(word) > MAX_ARG or \
                any(ord(ch) < 32 or ord(ch) == 127 for ch in word):
            shown = str(word)[:60].encode("unicode_escape").decode("ascii")
            raise UsageError(f"{shown!r} is not a word of printable text (at most {MAX_ARG} "
                             "characters, no control character)", argument=what)
    return words


@dataclass(frozen=True)
class SbatchSpec:
    """What the sbatch script runs. Validated on creation."""

    image_path: str | None
    nodes: int
    gpus_per_node: int
    tasks_per_node: int | None = None   # default: gpus_per_node, or 1 without GPUs
    runtime: str = "pyxis"
    checks: tuple[str, ...] = ()        # --only; empty: the whole suite
    tier: str | None = None             # default: cpu for a CPU image, gpu with GPUs, else cpu
    time_limit: str = "00:30:00"
    job_name: str = "imagebuild-smoke"
    partition: str | None = None
    account: str | None = None
    reports_dir: str | None = None      # host folder; default: submit dir/imagebuild-reports
    image_ref: str | None = None        # a registry reference pyxis pulls (instead of image_path)
    job: str = "smoke"                  # or torchrun: the user's own command
    command: tuple[str, ...] = ()       # torchrun's script and arguments
    cpu_image: bool = False             # the image has no CUDA: its tier is cpu

    def __post_init__(self):
        if (self.image_path is None) == (self.image_ref is None):
            raise UsageError("give the image as a path or as a registry reference, one of them",
                             argument="--image-ref")
        if self.image_path is not None:
            check_path(self.image_path, "--image-path")
        else:
            object.__setattr__(self, "image_ref", check_pyxis_ref(self.image_ref))
            if self.runtime != "pyxis":
                raise UsageError("Slurm's OCI support runs a bundle folder, not a registry reference: "
                                 "export it (imagebuild export --format oci-bundle)", argument="--image-ref")
        if self.job not in JOBS:
            raise UsageError(f"{self.job!r} is not one of {', '.join(JOBS)}", argument="--job")
        if self.job == "torchrun":
            object.__setattr__(self, "command", check_command(self.command))
        elif self.command:
            raise UsageError("a command is for --job torchrun", argument="--torchrun")
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
        if not isinstance(self.time_limit, str) or not TIME_RE.match(self.time_limit):
            raise UsageError(f"{self.time_limit!r} is not a Slurm time limit (MINUTES, MINUTES:SECONDS, "
                             "HOURS:MINUTES:SECONDS, DAYS-HOURS[:MINUTES[:SECONDS]], UNLIMITED)",
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
        if self.tier:
            return self.tier
        return "gpu" if self.gpus_per_node > 0 and not self.cpu_image else "cpu"

    @property
    def workers_per_node(self) -> int:
        """torchrun's workers on each node: one per GPU, else the tasks asked for, else one."""
        return self.gpus_per_node or self.tasks_per_node or 1

    @property
    def image(self) -> str:
        return self.image_ref if self.image_ref is not None else self.image_path


# The smoke task, inside the container on every node: the rest of its arguments go to
# imagebuild-smoke, whose JSON report is the task's standard output (srun --output writes it to the
# host) and whose own output goes to standard error. pyxis skips the image's entrypoint, so the task
# prints imagebuild-check's line itself (on stderr; images older than the command skip it).
_TASK = """set -eu
if command -v imagebuild-check >/dev/null; then imagebuild-check >&2 || :; fi
gdr_env=$(imagebuild-gdr-check --env) || { echo "imagebuild-gdr-check --env failed on $(uname -n)" >&2; exit 3; }
eval "$gdr_env"
report=$(mktemp)
status=0
imagebuild-smoke --report "$report" "$@" >&2 || status=$?
cat "$report"
exit "$status"
"""

# The torchrun task, one per node: the GPUDirect settings, then torchrun with the user's command.
_TORCHRUN = """set -eu
if command -v imagebuild-check >/dev/null; then imagebuild-check >&2 || :; fi
gdr_env=$(imagebuild-gdr-check --env) || { echo "imagebuild-gdr-check --env failed on $(uname -n)" >&2; exit 3; }
eval "$gdr_env"
exec "$@"
"""


def render_sbatch(spec: SbatchSpec) -> str:
    """The sbatch script text for ``spec``: same spec, same bytes."""
    q = shlex.quote
    torchrun = spec.job == "torchrun"
    what = "the user's torchrun job" if torchrun else "the imagebuild smoke suite"
    lines = [
        "#!/bin/bash",
        f"# Written by `imagebuild slurm-script`: runs {what} inside the image on",
        f"# {spec.nodes} node(s), " + (f"one torchrun per node with {spec.workers_per_node} "
                                       "worker(s)" if torchrun else f"{spec.ntasks_per_node} task(s) per node")
        + f", runtime {spec.runtime}.",
        "# Submit with: sbatch THIS_FILE. Every value below was validated when it was written.",
        f"#SBATCH --job-name={spec.job_name}",
        f"#SBATCH --nodes={spec.nodes}",
        f"#SBATCH --ntasks-per-node={1 if torchrun else spec.ntasks_per_node}",
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
        f"IMAGE={q(spec.image)}",
        'JOB="${SLURM_JOB_ID:-nojob}"',
    ]
    if spec.runtime == "pyxis":
        container = ['--container-image="$IMAGE"']
    else:
        container = ['--container="$IMAGE"']
    if torchrun:
        nproc = spec.workers_per_node
        lines += [
            '# the rendezvous: the job\'s first node',
            'MASTER=$(scontrol show hostnames "${SLURM_JOB_NODELIST:-$(hostname)}" | head -n 1)',
            "TASK=" + q(_TORCHRUN),
            "",
            "srun --ntasks-per-node=1 " + " ".join(container) + ' /bin/sh -c "$TASK" imagebuild-task '
            + "torchrun --nnodes=\"${SLURM_NNODES:-1}\" --nproc-per-node=" + str(nproc)
            + ' --rdzv-backend=c10d --rdzv-id="$JOB" --rdzv-endpoint="$MASTER:29500" '
            + " ".join(q(a) for a in spec.command),
            "",
        ]
        return "\n".join(lines)
    if spec.reports_dir:
        lines.append(f'REPORTS={q(spec.reports_dir)}/"$JOB"')
    else:
        lines.append('REPORTS="${SLURM_SUBMIT_DIR:-$PWD}/imagebuild-reports/$JOB"')
    lines.append('mkdir -p "$REPORTS"')
    smoke_args = ["--tier", spec.smoke_tier]
    if spec.checks:
        smoke_args += ["--only", *spec.checks]
    lines += [
        "",
        "# Inside the container, on every node: the GPUDirect probe's `export` lines (NCCL/UCX",
        "# settings for the RDMA path that node offers) are evaluated, then the smoke suite runs;",
        "# each task's JSON report is its standard output, which srun writes into $REPORTS on the",
        "# host (NODE-TASK.json; the suite's own output beside it as NODE-TASK.log).",
        "TASK=" + q(_TASK),
        "",
        "status=0",
        "srun --mpi=pmix --ntasks-per-node=" + str(spec.ntasks_per_node) + " " + " ".join(container)
        + ' --output="$REPORTS/%N-%t.json" --error="$REPORTS/%N-%t.log"'
        + ' /bin/sh -c "$TASK" imagebuild-task ' + " ".join(q(a) for a in smoke_args)
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
