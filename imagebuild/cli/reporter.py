"""One reporter for every command (issue 14): what a command tells its user goes through here, in
one of two renderings, so that `--json` means the same on every command.

A command makes one with `Reporter.for_args(name, args)` and says four kinds of thing:

- `progress(message, **fields)`: what is happening now. It is the callable the library modules
  take (`progress=rep.progress`): they never print, and keep their one-argument signature.
- `warn(message)` / `error(message)`: a problem the run goes on past, or one that decides its exit
  code after the answer (a build that failed among several). Fatal errors are not said here:
  they are raised as ImagebuildError and cli.py prints them, one line, with the exit code.
- `line(text, **fields)`: a line of the text answer printed as it comes (a smoke check's result,
  a lock's drift). In JSON mode the document holds the same facts, so the line goes to stderr as
  a progress event, to be watched but not parsed from stdout.
- `result(document, text)`: the command's answer.

Renderings:

- text (the default): progress, warnings and errors are plain lines on stderr, warnings as
  `imagebuild CMD: warning: ...`, errors as `imagebuild CMD: ...`; the answer is `text` on stdout.
- json (`--json`): stdout gets exactly one JSON document, the same envelope from every command
  (`envelope()`): the command, its exit code, `ok`, `result` (the command's `document`, or null
  when it stopped before answering), every warning and error it said (with the answer's own
  `warnings`, such as resolve's end-of-life notes), and the knowledge it read.
  cli.main() opens the run (`begin()`) and prints the envelope when the command has returned or
  failed (`finish()`), since only then is the exit code known. Meanwhile everything else is one
  JSON object a line on stderr: {"event": "progress" | "warning" | "error", "command": CMD,
  "message": ..., and the call's fields}, to be watched as it comes.

Without an open run (library use, a unit test) `result()` prints `document` itself at once.

`--quiet` (where a command has it) drops progress in both renderings; warnings, errors and the
answer stay. There is no terminal rendering that rewrites a status line: every progress line here
is a record (which step was cached, where a tarball came from, which image failed) and with
`build --jobs N` the lines of several images interleave, so one overwritten line would hide most
of them. Standard library only, and of imagebuild only redact.py: every command may use it.
"""

from __future__ import annotations

import json
import sys

from ..redact import scrub as _scrub   # every JSON document: no credential in any string


# the envelope's `schema`: a consumer checks it before reading the rest; a change to the
# envelope's keys or their meaning gets a new number (README, "Output: stdout, stderr and --json")
SCHEMA = "imagebuild.result/1"


def dumps(document) -> str:
    """The one JSON rendering of a command's answer (sorted keys, indent 2)."""
    return json.dumps(_scrub(document), indent=2, sort_keys=True, default=str)


def envelope(command: str, exit_code: int, result, *, version: str, warnings=(), errors=(),
             knowledge=None) -> dict:
    """What `--json` prints, for every command: the same keys whatever the command and however it
    ended, so that CI reads `ok` and `exit_code` without knowing the command's own document."""
    return {"schema": SCHEMA, "imagebuild": version, "command": command, "exit_code": exit_code,
            "ok": exit_code == 0, "result": result, "warnings": list(warnings),
            "errors": list(errors), "knowledge": knowledge}


class _Run:
    """One command's run as cli.main() sees it: what its reporters were told, for the envelope."""

    def __init__(self, command: str, json_mode: bool) -> None:
        self.command = command
        self.json = json_mode
        self.result = None
        self.warnings: list[dict] = []
        self.errors: list[dict] = []


_run: _Run | None = None


def begin(command: str, json_mode: bool) -> None:
    """Open a command's run (cli.main): from here a JSON result waits for finish()."""
    global _run
    _run = _Run(command, json_mode)


def rename(command: str, json_mode: bool) -> None:
    """The run's full command (`knowledge which`) and rendering, once its arguments are parsed."""
    if _run is not None:
        _run.command, _run.json = command, json_mode


def json_mode() -> bool:
    """Whether the open run prints an envelope."""
    return _run is not None and _run.json


def forget() -> None:
    """Close the run printing nothing (text mode, a closed pipe)."""
    global _run
    _run = None


def finish(exit_code: int, *, version: str, fatal: str | None = None, knowledge=None) -> None:
    """Close the run: in JSON mode print its envelope (``fatal``: the error that stopped it)."""
    global _run
    run, _run = _run, None
    if run is None or not run.json:
        return
    errors = run.errors + ([{"message": fatal, "fatal": True}] if fatal is not None else [])
    # an answer's own warnings (resolve's end of life, an unverified rule) are the run's too
    said = {w["message"] for w in run.warnings}
    own = run.result.get("warnings") if isinstance(run.result, dict) else None
    if isinstance(own, list):
        run.warnings += [{"message": w} for w in own if isinstance(w, str) and w not in said]
    print(dumps(envelope(run.command, exit_code, run.result, version=version,
                         warnings=run.warnings, errors=errors, knowledge=knowledge)), flush=True)


class Reporter:
    def __init__(self, command: str, *, json_mode: bool = False, quiet: bool = False) -> None:
        self.command = command
        self.json = json_mode
        self.quiet = quiet

    @classmethod
    def for_args(cls, command: str, args) -> "Reporter":
        """From a command's parsed arguments: `--json` and `--quiet` where the command has them."""
        return cls(command, json_mode=bool(getattr(args, "json", False)),
                   quiet=bool(getattr(args, "quiet", False)))

    @property
    def mode(self) -> str:
        return "json" if self.json else "quiet" if self.quiet else "text"

    # stderr ----------------------------------------------------------------------------------

    def _event(self, event: str, message: str, fields: dict) -> None:
        doc = {**fields, "event": event, "command": self.command, "message": str(message)}
        # sys.stderr is looked up at each call: a test's capture, or a redirected stream, gets it
        print(json.dumps(_scrub(doc), sort_keys=True, default=str), file=sys.stderr, flush=True)

    def progress(self, message: str, **fields) -> None:
        if self.quiet:
            return
        if self.json:
            self._event("progress", message, fields)
        else:
            print(message, file=sys.stderr, flush=True)

    def _keep(self, kind: list | None, message: str, fields: dict) -> None:
        if kind is not None:
            kind.append({**fields, "message": str(message)})

    def warn(self, message: str, **fields) -> None:
        self._keep(_run.warnings if _run else None, message, fields)
        if self.json:
            self._event("warning", message, fields)
        else:
            print(f"imagebuild {self.command}: warning: {message}", file=sys.stderr, flush=True)

    def error(self, message: str, **fields) -> None:
        self._keep(_run.errors if _run else None, message, fields)
        if self.json:
            self._event("error", message, fields)
        else:
            print(f"imagebuild {self.command}: {message}", file=sys.stderr, flush=True)

    # stdout ----------------------------------------------------------------------------------

    def line(self, text: str, *, message: str | None = None, **fields) -> None:
        """A line of the text answer, printed now; in JSON mode a progress event (``message``
        when the line's text is decorated for a terminal), even under --quiet: it is the answer."""
        if self.json:
            self._event("progress", text if message is None else message, fields)
        else:
            print(text, flush=True)

    def result(self, document, text: str | None = None, *, end: str = "\n") -> None:
        """The command's answer: ``document`` with --json (kept for the envelope while a run is
        open), else ``text`` (nothing when None)."""
        if self.json and _run is not None:
            _run.result = document
        elif self.json:
            print(dumps(document), flush=True)
        elif text is not None:
            print(text, end=end, flush=True)
