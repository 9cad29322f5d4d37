"""Every command's --help ends with examples that its own parser accepts, and `imagebuild
completion` writes a shell script (shtab, from the same parsers) that the shell itself accepts and
that offers every command and its options."""

from __future__ import annotations

import importlib
import shlex
import shutil
import subprocess

import pytest

from imagebuild import cli
from imagebuild.cli import COMMANDS, _Parser
from imagebuild.cli.examples import EXAMPLES


def test_every_command_has_examples():
    assert set(EXAMPLES) == set(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_examples_parse_and_show_in_help(name, capsys):
    module = importlib.import_module(f"imagebuild.cli.commands.{COMMANDS[name][0]}")
    parser = _Parser(prog=f"imagebuild {name}")
    module.configure(parser)
    for line in EXAMPLES[name]:
        words = shlex.split(line.split(" > ")[0])
        assert words[:2] == ["imagebuild", name], line
        parser.parse_args(words[2:])            # raises (exit 2) on an option it does not know
    with pytest.raises(SystemExit) as done:
        cli.main([name, "--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0 and "examples:" in out
    assert all(f"  {line}" in out for line in EXAMPLES[name]) or name in ("plan", "notes")


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_scripts(shell, capsys):
    assert cli.main(["completion", shell]) == 0
    script = capsys.readouterr().out
    for name in COMMANDS:
        assert name in script, name
    for option in ("--driver", "--strict", "--gaps", "--lock", "--registry"):
        assert option in script, option
    exe = shutil.which(shell)
    if shell == "bash":
        assert exe, "bash is this project's shell"
    if exe:
        done = subprocess.run([exe, "-n"], input=script, text=True, capture_output=True)
        assert done.returncode == 0, done.stderr
    assert cli.main(["completion", "fish"]) == 2
