"""Error types. Every failure is an ImagebuildError: cli.py prints its one-line message on stderr
(credentials inside URLs hidden, see redact.py) and exits with the error's code.

Exit codes, so that CI can tell a mistake from an outage (README, "Exit codes"):

- 0: done; 1: answered, but the answer is no (nothing fits, a check or a smoke test failed);
- 2: the user's input or a refusal (bad flag, bad matrix, bad credentials, a failed build);
- 3: a service is unavailable (no engine answers, a registry or package index cannot be reached or
  keeps failing with 5xx/429): running again later may succeed;
- 130: interrupted.
"""

from __future__ import annotations

from .redact import redact

EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3


class ImagebuildError(Exception):
    """A failure with one clear line for the user.

    ``where`` names the origin: a file (with optional line and column, 1-based) or an argument.
    """

    exit_code = EXIT_USAGE

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 column: int | None = None, argument: str | None = None):
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line
        self.column = column
        self.argument = argument

    def where(self) -> str:
        if self.file:
            parts = [str(self.file)]
            if self.line is not None:
                parts.append(str(self.line))
                if self.column is not None:
                    parts.append(str(self.column))
            return ":".join(parts)
        if self.argument:
            return f"argument {self.argument}"
        return ""

    def __str__(self) -> str:
        where = self.where()
        text = " ".join(self.message.split())  # one line, always
        return redact(f"{where}: {text}" if where else text)


class Unavailable:
    """Mixin: the failure is a service that does not answer (exit code 3), not the user's input."""

    exit_code = EXIT_UNAVAILABLE


class KnowledgeError(ImagebuildError):
    """matrix.yaml is malformed or contradicts itself."""


class LockError(ImagebuildError):
    """A lock file, images.lock or a wheel lock, is missing, malformed, stale or cannot be written."""


class UsageError(ImagebuildError):
    """A command-line argument is malformed or names something unknown."""


class RenderError(ImagebuildError):
    """A template is missing or broken, or a value would be unsafe in a recipe."""


class EngineError(ImagebuildError):
    """No engine answers, or the engine refused an operation."""


class EngineUnavailable(Unavailable, EngineError):
    """No engine answers at DOCKER_HOST, or it stopped answering."""


class EngineRefused(EngineError):
    """The engine answered and refused an operation. ``detail`` is the engine's own words, for a
    caller that words the failure itself."""

    def __init__(self, message: str, *, detail: str | None = None, **where):
        super().__init__(message, **where)
        self.detail = message if detail is None else detail


class NoSuchImage(EngineRefused):
    """The engine holds no image of that name or id."""


class BuildError(ImagebuildError):
    """An image failed to build."""


class SmokeError(ImagebuildError):
    """The smoke suite could not run (not: a check failed, which is a report, not an error)."""


class RegistryError(ImagebuildError):
    """A registry is unreachable, refuses credentials, or returned a different digest."""


class RegistryUnavailable(Unavailable, RegistryError):
    """A registry cannot be reached, or keeps answering 5xx/429 after the retries."""


class ExportError(ImagebuildError):
    """An export format cannot be produced (missing tool, bad image)."""
