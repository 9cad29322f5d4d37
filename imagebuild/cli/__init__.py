"""The top of the pipeline, and the only layer that parses arguments or prints: dispatches to one
module under `imagebuild.cli.commands` per command, which speaks through `reporter`, and maps
every ImagebuildError to one line on stderr with its exit code (EXIT_CODES below). Only the chosen
command's module is imported, so `imagebuild resolve` never pays for the docker SDK or Jinja2."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from ..errors import ImagebuildError

# name -> (module under imagebuild.commands, one-line help). Kept static so that `--help` and
# dispatch need no imports of the command modules.
COMMANDS: dict[str, tuple[str, str]] = {
    "resolve": ("resolve", "the best consistent stack for a host (driver, GPU) and wishes"),
    "check": ("check", "whether a complete stack (flags, JSON or an image's labels) is consistent"),
    "knowledge": ("knowledge", "inspect and sync the knowledge base (matrix.yaml)"),
    "images": ("images", "list the images the matrix declares, with ids and tags"),
    "tags": ("tags", "print the tags of an image"),
    "generate": ("generate", "render Dockerfiles and Singularity definitions for every image"),
    "base": ("base", "create a local base image with debootstrap (no registry needed)"),
    "build": ("build", "build images on a real engine"),
    "context": ("context", "write self-contained build contexts for builders without imagebuild"),
    "normalize": ("normalize", "rewrite an image built from such a context as `build` does (same ID)"),
    "test": ("test", "run the smoke suite inside built images"),
    "publish": ("publish", "push tested images to a registry and verify their digests"),
    "lock": ("lock", "write or check images.lock"),
    "wheels": ("wheels", "write or check the hash-pinned wheel locks (locks/wheels/)"),
    "sources": ("sources", "list or fetch the source tarballs the images compile, checksummed"),
    "plan": ("plan", "what a driver upgrade means per image and GPU pool: keep, move, build, retire"),
    "upgrade": ("upgrade", "the driver-upgrade day: plan, then build, test, lock and publish what must be"),
    "export": ("export", "export an image for Slurm: enroot squashfs, OCI bundle or SIF"),
    "slurm-script": ("slurm_script", "write an sbatch script that runs the smoke suite across nodes"),
    "doctor": ("doctor", "read this node: host facts, the best image here, GPUDirect and NCCL advice"),
    "find": ("find", "the published images (images.lock) that run on a host, best first, and how to pull them"),
    "sbom": ("sbom", "a CycloneDX SBOM of a built image, checked against its wheel lock"),
    "notes": ("notes", "the human page of an image: what is inside, the driver it needs, its proof"),
    "audit": ("audit", "known vulnerabilities of an image's locked wheels (the index's data)"),
    "verify": ("verify", "check a pushed image's signature (cosign's key-based format) and its signed SBOM"),
    "completion": ("completion", "print a shell completion script (bash, zsh, tcsh) for every command"),
}


# the exit codes every command uses (errors.py; README, "Exit codes")
EXIT_CODES: tuple[tuple[int, str], ...] = (
    (0, "done"),
    (1, "answered, but the answer is no (nothing fits, a check or a smoke test failed)"),
    (2, "the user's mistake or a refusal: bad flag, file or matrix, bad credentials, failed build"),
    (3, "a service is unavailable: no engine answers, a registry or index is unreachable or keeps "
        "failing; retry later"),
    (130, "interrupted"),
)


def _top_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="imagebuild",
        description="Reproducible, tested container images for GPU clusters.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="commands:\n" + "\n".join(f"  {n:<13} {h}" for n, (_, h) in COMMANDS.items())
        + "\n\nexit codes:\n" + "\n".join(f"  {c:<13} {h}" for c, h in EXIT_CODES),
    )
    p.add_argument("--version", action="store_true", help="print the version and exit")
    p.add_argument("command", nargs="?", help="one of the commands below")
    return p


def add_matrix_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--matrix", default=None, metavar="FILE",
        help="the knowledge base (default: $IMAGEBUILD_MATRIX, else ./matrix.yaml where there is "
             "one, else the matrix packaged with imagebuild; `imagebuild knowledge which` says which)")


def parser_error(parser: argparse.ArgumentParser, message: str):
    """argparse's complaint as one line (cli.main prefixes the command), with the nearest option
    for a misspelt one: `unrecognized arguments: --drvier 535.104.05 (did you mean --driver?)`."""
    import difflib

    import re

    choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)\Z", message)
    if choice:
        names = [c.strip().strip("'") for c in choice.group(2).split(",")]
        near = difflib.get_close_matches(choice.group(1), names, n=1, cutoff=0.6)
        if near:
            message += f" (did you mean {near[0]!r}?)"
    if message.startswith("unrecognized arguments:"):
        parsers = [parser] + [sp for a in parser._actions  # noqa: SLF001 - argparse has no public API
                              if isinstance(a, argparse._SubParsersAction) for sp in a.choices.values()]
        options = sorted({o for p in parsers for o in p._option_string_actions if o.startswith("--")})
        hints = []
        for word in message.split(":", 1)[1].split():
            if word.startswith("-"):
                typed = word.split("=", 1)[0]
                near = difflib.get_close_matches(typed, options, n=1, cutoff=0.6)
                if typed in parser._option_string_actions:  # noqa: SLF001 - spelt right, placed wrong
                    hints.append(f"{typed} goes before the action: "
                                 f"{parser.prog.split(' ', 1)[-1]} {typed} ... ACTION")
                elif near and near[0] == typed:
                    hints.append(f"{typed} belongs to another action")
                elif near:
                    hints.append(f"{word.split('=', 1)[0]}: did you mean {near[0]}?")
        if hints:
            message += " (" + "; ".join(hints) + ")"
    raise ImagebuildError(message)


def add_timeout_option(parser: argparse.ArgumentParser) -> None:
    """--timeout SECONDS: the overall deadline of a command's registry conversation."""
    def seconds(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if not 1 <= value <= 86400:
            raise argparse.ArgumentTypeError(f"expected seconds from 1 to 86400, not {text!r}")
        return value
    parser.add_argument("--timeout", type=seconds, default=600.0, metavar="SECONDS",
                        help="give up on the registry after this long in all (default 600; exit 3)")


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line and exit code 2 (argparse prints usage too)."""

    def error(self, message: str):  # noqa: D401 - argparse API
        parser_error(self, message)


def main(argv: list[str] | None = None) -> int:
    """Run one command. stdout and stderr are guarded for the whole run (redact.GuardedStream):
    whatever a command prints, credentials are hidden and control characters escaped."""
    from ..redact import GuardedStream
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = GuardedStream(out), GuardedStream(err)
    try:
        return _main(argv)
    finally:
        sys.stdout, sys.stderr = out, err


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        _top_parser().print_help()
        return 0 if argv else 2
    if argv[0] == "--version":
        from .. import __version__
        print(f"imagebuild {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"imagebuild: unknown command {name!r} (one of: {', '.join(COMMANDS)})", file=sys.stderr)
        return 2
    modname, helptext = COMMANDS[name]
    from . import reporter
    # the rendering before parsing, for an argument error: --json (or plan's --format json) typed
    json_mode = "--json" in rest or "--format=json" in rest or any(
        a == "--format" and b == "json" for a, b in zip(rest, rest[1:]))
    reporter.begin(name, json_mode)
    args = None
    code, fatal = 0, None
    try:
        module = importlib.import_module(f"imagebuild.cli.commands.{modname}")
        parser = _Parser(prog=f"imagebuild {name}", description=helptext,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
        module.configure(parser)
        if parser.epilog is None:       # the command's own examples, else the shared ones
            from .examples import epilog
            parser.epilog = epilog(name)
        args = parser.parse_args(rest)
        action = getattr(args, "action", None)
        reporter.rename(f"{name} {action}" if isinstance(action, str) else name,
                        bool(getattr(args, "json", False)) or getattr(args, "format", None) == "json")
        _check_outputs(args)
        if hasattr(args, "matrix"):
            from ..workspace import locate_matrix
            args.matrix, args.matrix_origin = locate_matrix(args.matrix)
        code = int(module.run(args) or 0)
    except ImagebuildError as exc:
        print(f"imagebuild {name}: {exc}", file=sys.stderr)
        code, fatal = exc.exit_code, str(exc)
    except KeyboardInterrupt:
        print(f"imagebuild {name}: interrupted", file=sys.stderr)
        code, fatal = 130, "interrupted"
    except BrokenPipeError:
        reporter.forget()
        return 0
    _finish(reporter, args, code, fatal)
    return code


#: the arguments through which a command writes (or replaces) a file or folder the user names:
#: each is checked before the command does any work (atomic.output_target: no device node, FIFO,
#: socket, dangling link or system path), and again where it is written. docs/hardening.md
#: lists them; tests/house/test_hardening.py plants the attacks on each.
OUTPUT_ARGS = ("output", "report", "capture", "lock", "dir", "reports_dir")


def _check_outputs(args) -> None:
    from ..atomic import OutputRefused, output_target
    for dest in OUTPUT_ARGS:
        value = getattr(args, dest, None)
        if isinstance(value, (str, os.PathLike)) and str(value):
            try:
                output_target(value, folder=True)
            except OutputRefused as exc:
                raise OutputRefused(exc.message, argument=f"--{dest.replace('_', '-')}"
                                    if dest != "dir" else "DIR") from None


def _finish(reporter, args, code: int, fatal: str | None) -> None:
    """Print the --json envelope: the knowledge the command read, where it has a matrix."""
    from .. import __version__
    if not reporter.json_mode():
        reporter.forget()
        return
    knowledge = None
    if args is not None and isinstance(getattr(args, "matrix", None), str):
        from .commands import knowledge_of
        knowledge = knowledge_of(args)
    try:
        reporter.finish(code, version=__version__, fatal=fatal, knowledge=knowledge)
    except BrokenPipeError:
        reporter.forget()

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
