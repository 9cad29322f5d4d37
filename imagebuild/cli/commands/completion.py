"""imagebuild completion SHELL: a shell completion script for every command and option, generated
from the same argparse parsers the commands parse with (shtab: a small, well-kept library that
writes static scripts, so completing costs the shell no Python start)."""

from __future__ import annotations

SHELLS = ("bash", "zsh", "tcsh")


def configure(parser) -> None:
    parser.add_argument("shell", choices=SHELLS, help="the shell to write the script for")
    parser.add_argument("--json", action="store_true",
                        help="print the script inside a JSON document (shell, script)")


def full_parser():
    """One argparse parser holding every command's options, as each command configures them."""
    import argparse
    import importlib

    from .. import COMMANDS
    top = argparse.ArgumentParser(prog="imagebuild",
                                  description="Reproducible, tested container images for GPU clusters.")
    top.add_argument("--version", action="store_true", help="print the version and exit")
    sub = top.add_subparsers(dest="command")
    for name, (modname, helptext) in COMMANDS.items():
        module = importlib.import_module(f"imagebuild.cli.commands.{modname}")
        module.configure(sub.add_parser(name, help=helptext, description=helptext))
    return top


def run(args) -> int:
    import shtab

    from ..reporter import Reporter

    script = shtab.complete(full_parser(), shell=args.shell)
    Reporter.for_args("completion", args).result({"shell": args.shell, "script": script}, script, end="")
    return 0
