"""Build many images: dependency order, parallel jobs, keep-going, one log file per image.

`build_all` takes BuildJobs (a ready build context each) and an Engine, and returns one
BuildOutcome per job, in the jobs' order, whatever happened to the others. It never prints; it
reports through `progress(line)`.

Scheduling is the standard library's `graphlib.TopologicalSorter`: one node per job, its
dependencies among the given jobs (by image id) as predecessors; dependencies outside the list are
assumed to exist in the engine already. `check_jobs` refuses duplicate or malformed ids and, from
`prepare()`'s CycleError, names a dependency cycle. A job is started once `get_ready()` has given
it (every job it depends on built and marked `done()`); when more are ready than workers are free
(`jobs_n`, parallel threads), they start in the jobs' order. A job that failed is never marked
done, so nothing that depends on it becomes ready: those jobs are reported as skipped at once,
naming the dependency not built (and so are their own dependents). The other jobs are built only
with `keep_going`; otherwise no new job starts (running ones finish) and the rest are reported as
not started.

Interrupts (Ctrl-C; SIGTERM through the command): no new job starts, the running builds are
cancelled through the engine (`cancel_builds`: the SDK build's connection is cut, the BuildKit CLI
gets SIGINT), so their step containers stop and are removed and no tag is moved; then the
interrupt goes on to the caller.
"""

from __future__ import annotations

import concurrent.futures as cf
import graphlib
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from ..engines import BuildResult, Engine, NAME_RE
from ..errors import ImagebuildError, UsageError

BUILT, FAILED, SKIPPED, NOT_STARTED = "built", "failed", "skipped", "not-started"
#: after an interrupt, how long the running builds' threads are given to stop once cancelled
CANCEL_WAIT_S = 30


@dataclass(frozen=True)
class BuildJob:
    image_id: str
    context: Path
    ref: str
    dockerfile: str = "Dockerfile"
    labels: Mapping[str, str] = field(default_factory=dict)
    secrets: Mapping[str, Path] = field(default_factory=dict)
    depends_on: tuple[str, ...] = ()
    buildargs: Mapping[str, str] = field(default_factory=dict)
    # the OCI platform to build for (linux/arm64); None: the engine's own
    platform: str | None = None
    # run just before the build (in its turn, its failure is the build's): e.g. put the source
    # tarballs in the context, fetched into the cache and checked
    prepare: Callable[[], None] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class BuildOutcome:
    image_id: str
    ref: str
    status: str                     # built | failed | skipped | not-started
    result: BuildResult | None
    error: str | None
    log_path: Path

    @property
    def ok(self) -> bool:
        return self.status == BUILT


def _deps(job: BuildJob, by_id: Mapping[str, BuildJob]) -> list[str]:
    """The jobs ``job`` waits for: its dependencies among the given jobs (any other one is assumed
    to exist in the engine already)."""
    return [d for d in job.depends_on if d in by_id]


def _graph(jobs: Sequence[BuildJob]) -> tuple[dict[str, BuildJob], graphlib.TopologicalSorter]:
    """The jobs by (checked) image id, and their dependency graph, prepared: a cycle is refused."""
    by_id: dict[str, BuildJob] = {}
    for job in jobs:
        if not NAME_RE.match(job.image_id):
            raise UsageError(f"invalid image id {job.image_id!r}: expected letters, digits, '_.-'")
        if job.image_id in by_id:
            raise UsageError(f"image {job.image_id} is listed twice")
        by_id[job.image_id] = job
    graph: graphlib.TopologicalSorter = graphlib.TopologicalSorter()
    for job in jobs:
        graph.add(job.image_id, *_deps(job, by_id))
    try:
        graph.prepare()
    except graphlib.CycleError as exc:
        # graphlib lists the cycle with each image before the one that depends on it, first and
        # last the same; say it the other way round (each image, then the one it needs), from
        # the cycle's image listed first among the jobs, so that the line does not vary
        ring = list(reversed(exc.args[1][1:]))
        order = list(by_id)
        start = min(range(len(ring)), key=lambda n: order.index(ring[n]))
        ring = ring[start:] + ring[:start]
        raise UsageError(f"dependency cycle between images: {' -> '.join(ring + ring[:1])} "
                         "(each depends on the next)") from None
    return by_id, graph


def check_jobs(jobs: Sequence[BuildJob]) -> dict[str, BuildJob]:
    """Unique, well-formed image ids and no dependency cycle among the jobs."""
    return _graph(jobs)[0]


def build_all(jobs: Sequence[BuildJob], *, engine: Engine, jobs_n: int = 1, keep_going: bool = False,
              log_dir: Path, progress: Callable[[str], None] | None = None) -> list[BuildOutcome]:
    if jobs_n < 1:
        raise UsageError(f"invalid number of parallel jobs {jobs_n}: expected 1 or more")
    by_id, graph = _graph(jobs)
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()

    def say(line: str) -> None:
        if progress is not None:
            with lock:
                progress(line)

    def log_of(job: BuildJob) -> Path:
        return log_dir / f"{job.image_id}.log"

    def one(job: BuildJob) -> BuildOutcome:
        return _build_one(job, engine, say, log_of(job))

    index = {job.image_id: n for n, job in enumerate(jobs)}
    outcomes: dict[str, BuildOutcome] = {}
    ready: list[str] = []      # every dependency built, waiting for a free worker
    running: dict[cf.Future, BuildJob] = {}
    stop = False
    pool = cf.ThreadPoolExecutor(max_workers=jobs_n, thread_name_prefix="imagebuild-build")
    try:
        while True:
            if not stop:       # start what is ready, in the jobs' order, while workers are free
                ready = sorted([*ready, *graph.get_ready()], key=index.__getitem__)
                while ready and len(running) < jobs_n:
                    job = by_id[ready.pop(0)]
                    running[pool.submit(one, job)] = job
            if not running:
                break
            done, _ = cf.wait(list(running), return_when=cf.FIRST_COMPLETED)
            for fut in done:
                job = running.pop(fut)
                outcomes[job.image_id] = outcome = fut.result()
                if outcome.ok:
                    graph.done(job.image_id)     # its dependents may become ready
                elif not keep_going:
                    stop = True
            # a failed image is never done(): what depends on it is never ready, it is skipped
            for job, why in _unbuildable(jobs, by_id, outcomes):
                say(f"{job.image_id}: skipped ({why})")
                outcomes[job.image_id] = BuildOutcome(job.image_id, job.ref, SKIPPED, None, why, log_of(job))
        left = [job for job in jobs if job.image_id not in outcomes]
        if left and not stop:   # cannot happen after _graph; never report an image as done
            raise ImagebuildError("internal: no image can start: " + ", ".join(j.image_id for j in left))
        for job in left:
            why = "not started: an earlier image failed (use --keep-going to build the rest)"
            outcomes[job.image_id] = BuildOutcome(job.image_id, job.ref, NOT_STARTED, None, why, log_of(job))
    except BaseException:     # Ctrl-C, SIGTERM or a bug in here
        _cancel_running(pool, engine, list(running))
        raise
    pool.shutdown(wait=True)
    return [outcomes[j.image_id] for j in jobs]


def _build_one(job: BuildJob, engine: Engine, say: Callable[[str], None], log: Path) -> BuildOutcome:
    """One image built on the engine: its outcome, never an exception but an interruption (a
    failure is kept with its message, so that every other image's result is kept too)."""
    say(f"{job.image_id}: building {job.ref}")
    try:
        if job.prepare is not None:
            job.prepare()
        extra = {"platform": job.platform} if job.platform else {}
        res = engine.build(job.context, job.ref, dockerfile=job.dockerfile,
                           buildargs=dict(job.buildargs) or None, labels=dict(job.labels) or None,
                           secrets=dict(job.secrets) or None, log=log,
                           progress=lambda line: say(f"{job.image_id}: {line}"), **extra)
    except ImagebuildError as exc:
        say(f"{job.image_id}: FAILED: {exc}")
        return BuildOutcome(job.image_id, job.ref, FAILED, None, str(exc), log)
    except Exception as exc:  # noqa: BLE001 - keep every other image's result
        msg = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        say(f"{job.image_id}: FAILED: {msg}")
        return BuildOutcome(job.image_id, job.ref, FAILED, None, msg, log)
    say(f"{job.image_id}: built {res.image_id[:19]} in {res.seconds:.1f} s "
        f"({res.cached_steps}/{res.steps} steps cached)")
    return BuildOutcome(job.image_id, job.ref, BUILT, res, None, log)


def _cancel_running(pool: cf.ThreadPoolExecutor, engine: Engine, running: list[cf.Future]) -> None:
    """Ctrl-C, SIGTERM or a bug in the loop: start nothing new, stop the running builds (the
    engine cancels their steps and removes their containers; no tag is written), and wait a
    bounded time for their threads to see it."""
    pool.shutdown(wait=False, cancel_futures=True)
    cancel = getattr(engine, "cancel_builds", None)
    deadline = time.monotonic() + CANCEL_WAIT_S
    while cancel is not None and not all(f.done() for f in running) and time.monotonic() < deadline:
        cancel()  # again and again: a build still sending its context registers only then
        cf.wait(running, timeout=0.5)


def _unbuildable(jobs: Sequence[BuildJob], by_id: Mapping[str, BuildJob],
                 outcomes: Mapping[str, BuildOutcome]) -> list[tuple[BuildJob, str]]:
    """The jobs not yet decided that depend on one not built (failed or skipped), each with why,
    naming its first such dependency. A skip skips the skipped job's own dependents too: the jobs
    are gone through in their order, again until no other one is skipped."""
    status = {image_id: o.status for image_id, o in outcomes.items()}
    out: list[tuple[BuildJob, str]] = []
    changed = True
    while changed:
        changed = False
        for job in jobs:
            if job.image_id in status:
                continue
            bad = [d for d in _deps(job, by_id) if d in status and status[d] != BUILT]
            if bad:
                out.append((job, f"not built because {bad[0]} {status[bad[0]].replace('-', ' ')}"))
                status[job.image_id] = SKIPPED
                changed = True
    return out


def _size(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)  # pragma: no cover


def format_table(outcomes: Sequence[BuildOutcome]) -> str:
    """image, status, image id (digest of the config), size, build time, cached steps/total."""
    rows = [("IMAGE", "STATUS", "IMAGE ID", "SIZE", "TIME", "CACHED")]
    for o in outcomes:
        r = o.result
        rows.append((o.image_id, o.status,
                     r.image_id.removeprefix("sha256:")[:12] if r else "-",
                     _size(r.size_bytes) if r else "-",
                     f"{r.seconds:.1f} s" if r else "-",
                     f"{r.cached_steps}/{r.steps}" if r else "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)


def outcomes_as_dict(outcomes: Sequence[BuildOutcome]) -> list[dict]:
    """A JSON-ready summary (a report of one run: it has times, it is not a generated artefact)."""
    out = []
    for o in outcomes:
        r = o.result
        out.append({
            "image": o.image_id, "ref": o.ref, "status": o.status, "error": o.error,
            "log": str(o.log_path),
            "image_id": r.image_id if r else None, "size_bytes": r.size_bytes if r else None,
            "seconds": round(r.seconds, 3) if r else None,
            "steps": r.steps if r else None, "cached_steps": r.cached_steps if r else None,
        })
    return out
