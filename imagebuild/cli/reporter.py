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
- json (`--json`): stdout gets exactly one JSON document, `document` (sorted keys, indent 2).
  Everything else is one JSON object a line on stderr: {"event": "progress" | "warning" |
  "error", "command": CMD, "message": ..., and the call's fields}.

`--quiet` (where a command has it) drops progress in both renderings; warnings, errors and the
answer stay. There is no terminal rendering that rewrites a status line: every progress line here
is a record (which step was cached, where a tarball came from, which image failed) and with
`build --jobs N` the lines of several images interleave, so one overwritten line would hide most
of them. Standard library only, and nothing of imagebuild: every command may use it.
"""

from __future__ import annotations

import json
import sys


def dumps(document) -> str:
    """The one JSON rendering of a command's answer (what the --json commands printed before the
    reporter, byte for byte)."""
    return json.dumps(document, indent=2, sort_keys=True)


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
        print(json.dumps(doc, sort_keys=True, default=str), file=sys.stderr, flush=True)

    def progress(self, message: str, **fields) -> None:
        if self.quiet:
            return
        if self.json:
            self._event("progress", message, fields)
        else:
            print(message, file=sys.stderr, flush=True)

    def warn(self, message: str, **fields) -> None:
        if self.json:
            self._event("warning", message, fields)
        else:
            print(f"imagebuild {self.command}: warning: {message}", file=sys.stderr, flush=True)

    def error(self, message: str, **fields) -> None:
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
        """The command's answer: ``document`` with --json, else ``text`` (nothing when None)."""
        if self.json:
            print(dumps(document), flush=True)
        elif text is not None:
            print(text, end=end, flush=True)
