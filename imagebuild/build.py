"""Build many images: dependency order, parallel jobs, keep-going, one log file per image.

`build_all` takes BuildJobs (a ready build context each) and an Engine, and returns one
BuildOutcome per job, in the jobs' order, whatever happened to the others. It never prints; it
reports through `progress(line)`.

Scheduling: a job starts when every job it depends on (by image id, among the given jobs) has been
built; dependencies outside the list are assumed to exist in the engine already. With `jobs_n > 1`
independent jobs build in parallel threads. After a failure, jobs that depend on the failed one are
skipped; the others are built only with `keep_going`, otherwise no new job starts (running ones
finish) and the rest are reported as not started.

Interrupts (Ctrl-C; SIGTERM through the command): no new job starts, the running builds are
cancelled through the engine (`cancel_builds`: the SDK build's connection is cut, the BuildKit CLI
gets SIGINT), so their step containers stop and are removed and no tag is moved; then the
interrupt goes on to the caller.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from .engines import BuildResult, Engine, NAME_RE
from .errors import ImagebuildError, UsageError

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


def check_jobs(jobs: Sequence[BuildJob]) -> dict[str, BuildJob]:
    """Unique, well-formed image ids and no dependency cycle among the jobs."""
    by_id: dict[str, BuildJob] = {}
    for job in jobs:
        if not NAME_RE.match(job.image_id):
            raise UsageError(f"invalid image id {job.image_id!r}: expected letters, digits, '_.-'")
        if job.image_id in by_id:
            raise UsageError(f"image {job.image_id} is listed twice")
        by_id[job.image_id] = job
    state: dict[str, int] = {}   # 1 visiting, 2 done

    def visit(i: str, path: list[str]) -> None:
        if state.get(i) == 2:
            return
        if state.get(i) == 1:
            cycle = path[path.index(i):] + [i]
            raise UsageError(f"dependency cycle between images: {' -> '.join(cycle)}")
        state[i] = 1
        for d in by_id[i].depends_on:
            if d in by_id:
                visit(d, path + [i])
        state[i] = 2

    for i in by_id:
        visit(i, [])
    return by_id


def build_all(jobs: Sequence[BuildJob], *, engine: Engine, jobs_n: int = 1, keep_going: bool = False,
              log_dir: Path, progress: Callable[[str], None] | None = None) -> list[BuildOutcome]:
    if jobs_n < 1:
        raise UsageError(f"invalid number of parallel jobs {jobs_n}: expected 1 or more")
    by_id = check_jobs(jobs)
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
        say(f"{job.image_id}: building {job.ref}")
        try:
            if job.prepare is not None:
                job.prepare()
            res = engine.build(job.context, job.ref, dockerfile=job.dockerfile,
                               buildargs=dict(job.buildargs) or None, labels=dict(job.labels) or None,
                               secrets=dict(job.secrets) or None, log=log_of(job),
                               progress=lambda line: say(f"{job.image_id}: {line}"))
        except ImagebuildError as exc:
            say(f"{job.image_id}: FAILED: {exc}")
            return BuildOutcome(job.image_id, job.ref, FAILED, None, str(exc), log_of(job))
        except Exception as exc:  # noqa: BLE001 - keep every other image's result
            msg = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
            say(f"{job.image_id}: FAILED: {msg}")
            return BuildOutcome(job.image_id, job.ref, FAILED, None, msg, log_of(job))
        say(f"{job.image_id}: built {res.image_id[:19]} in {res.seconds:.1f} s "
            f"({res.cached_steps}/{res.steps} steps cached)")
        return BuildOutcome(job.image_id, job.ref, BUILT, res, None, log_of(job))

    outcomes: dict[str, BuildOutcome] = {}
    pending = [j for j in jobs]
    running: dict[cf.Future, BuildJob] = {}
    stop = False
    pool = cf.ThreadPoolExecutor(max_workers=jobs_n, thread_name_prefix="imagebuild-build")
    try:
        while pending or running:
            changed = True
            while changed:          # settle skips and starts until nothing changes
                changed = False
                for job in list(pending):
                    deps = [d for d in job.depends_on if d in by_id]
                    bad = [d for d in deps if d in outcomes and outcomes[d].status != BUILT]
                    if bad:
                        pending.remove(job)
                        why = f"not built because {bad[0]} {outcomes[bad[0]].status.replace('-', ' ')}"
                        say(f"{job.image_id}: skipped ({why})")
                        outcomes[job.image_id] = BuildOutcome(job.image_id, job.ref, SKIPPED, None, why,
                                                              log_of(job))
                        changed = True
                        continue
                    if stop or len(running) >= jobs_n:
                        continue
                    if all(d in outcomes for d in deps):
                        pending.remove(job)
                        running[pool.submit(one, job)] = job
                        changed = True
            if stop and not running:
                for job in pending:
                    why = "not started: an earlier image failed (use --keep-going to build the rest)"
                    outcomes[job.image_id] = BuildOutcome(job.image_id, job.ref, NOT_STARTED, None, why,
                                                          log_of(job))
                pending = []
                break
            if not running:
                if pending:   # cannot happen after check_jobs; never spin
                    raise ImagebuildError("internal: no image can start: "
                                          + ", ".join(j.image_id for j in pending))
                break
            done, _ = cf.wait(list(running), return_when=cf.FIRST_COMPLETED)
            for fut in done:
                job = running.pop(fut)
                outcome = fut.result()
                outcomes[job.image_id] = outcome
                if outcome.status == FAILED and not keep_going:
                    stop = True
    except BaseException:
        # Ctrl-C, SIGTERM or a bug in here: start nothing new, stop the running builds (the
        # engine cancels their steps and removes their containers; no tag is written), and wait
        # a bounded time for their threads to see it
        pool.shutdown(wait=False, cancel_futures=True)
        cancel = getattr(engine, "cancel_builds", None)
        deadline = time.monotonic() + CANCEL_WAIT_S
        while cancel is not None and not all(f.done() for f in running) and time.monotonic() < deadline:
            cancel()  # again and again: a build still sending its context registers only then
            cf.wait(list(running), timeout=0.5)
        raise
    pool.shutdown(wait=True)
    return [outcomes[j.image_id] for j in jobs]


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
