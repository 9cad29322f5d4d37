"""Error types. Every failure a user can cause is an ImagebuildError: cli.py prints its one-line
message on stderr and exits with code 2 (1 is reserved for "answered, but the answer is no")."""

from __future__ import annotations


class ImagebuildError(Exception):
    """A failure with one clear line for the user.

    ``where`` names the origin: a file (with optional line and column, 1-based) or an argument.
    """

    exit_code = 2

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
        return f"{where}: {text}" if where else text


class KnowledgeError(ImagebuildError):
    """matrix.yaml is malformed or contradicts itself."""


class UsageError(ImagebuildError):
    """A command-line argument is malformed or names something unknown."""


class RenderError(ImagebuildError):
    """A template is missing or broken, or a value would be unsafe in a recipe."""


class EngineError(ImagebuildError):
    """No engine answers, or the engine refused an operation."""


class BuildError(ImagebuildError):
    """An image failed to build."""


class SmokeError(ImagebuildError):
    """The smoke suite could not run (not: a check failed, which is a report, not an error)."""


class RegistryError(ImagebuildError):
    """A registry is unreachable, refuses credentials, or returned a different digest."""


class ExportError(ImagebuildError):
    """An export format cannot be produced (missing tool, bad image)."""
