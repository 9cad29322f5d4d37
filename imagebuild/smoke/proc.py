"""Run commands with a deadline. Every child starts in its own process group, so a hung rank
(mpirun and everything it forked, or every torch rank) is killed as a group, never left behind."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass


@dataclass
class Outcome:
    argv: list[str]
    returncode: int | None  # None: timed out (killed)
    output: str
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def tail(self, lines: int = 6) -> str:
        kept = [ln for ln in self.output.strip().splitlines() if ln.strip()][-lines:]
        return " | ".join(kept)


def _kill_group(pgid: int) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        except PermissionError:
            return
        if sig == signal.SIGTERM:
            time.sleep(0.5)


def run(argv: list[str], timeout: float, env: dict | None = None, cwd: str | None = None) -> Outcome:
    """Run argv (no shell) with stdout+stderr captured; kill its whole group at the timeout."""
    start = time.monotonic()
    try:
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, env=env, cwd=cwd, start_new_session=True)
    except OSError as exc:
        return Outcome(list(argv), 127, f"cannot run {argv[0]}: {exc.strerror}", 0.0)
    try:
        out, _ = child.communicate(timeout=max(timeout, 0.1))
        code: int | None = child.returncode
    except subprocess.TimeoutExpired:
        _kill_group(child.pid)
        out, _ = child.communicate()
        code = None
    except BaseException:
        _kill_group(child.pid)
        child.wait()
        raise
    return Outcome(list(argv), code, out.decode("utf-8", "replace"), time.monotonic() - start)


def run_group(argvs: list[list[str]], envs: list[dict], timeout: float,
              cwd: str | None = None) -> list[Outcome]:
    """Start several processes in ONE new process group (the ranks of a job) and wait for all.

    If any is still running at the deadline, the whole group is killed and every unfinished one
    is reported as timed out. Output of each goes to its own temporary file (no pipe deadlocks).
    """
    import tempfile

    start = time.monotonic()
    children: list[subprocess.Popen] = []
    logs = []
    pgid = 0
    try:
        for i, (argv, env) in enumerate(zip(argvs, envs)):
            log = tempfile.TemporaryFile()
            logs.append(log)
            kwargs = {"process_group": 0 if i == 0 else pgid}
            child = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, cwd=cwd, **kwargs)
            if i == 0:
                pgid = child.pid
            children.append(child)
        deadline = start + timeout
        for child in children:
            left = deadline - time.monotonic()
            try:
                child.wait(timeout=max(left, 0.05))
            except subprocess.TimeoutExpired:
                break
        if any(c.poll() is None for c in children):
            _kill_group(pgid)
            for c in children:
                c.wait()
            timed = True
        else:
            timed = False
    except BaseException:
        if pgid:
            _kill_group(pgid)
        for c in children:
            c.wait()
        for log in logs:
            log.close()
        raise
    took = time.monotonic() - start
    outcomes = []
    for argv, child, log in zip(argvs, children, logs):
        log.seek(0)
        text = log.read().decode("utf-8", "replace")
        log.close()
        code = child.returncode
        if timed and code is not None and code < 0:
            code = None  # killed by us, not a crash
        outcomes.append(Outcome(list(argv), code, text, took))
    return outcomes


def which(name: str) -> str | None:
    return shutil.which(name)


def free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
