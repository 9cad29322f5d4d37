"""Hostile mutations of matrix.yaml and the three commands they go through, shared by
tests/knowledge/test_fuzz_matrix.py (a seeded sample, every run) and tests/fuzz_report.py (the figures in
docs/reliability.md).

A mutant replaces one scalar of the real matrix.yaml, at its exact place in the text, with a hostile
string (line breaks of every kind, NUL and other controls, quotes, `$()`, backticks, format-string
fields, bidi controls, over-long text, ...), or with a value of the wrong type, or removes one key.
Each mutant goes through `imagebuild knowledge validate`, `imagebuild generate --allow-unverified
--output DIR` (so the DOCA-OFED images, and with them every `rdma:` field, are rendered too) and
`imagebuild resolve`, through the CLI entry point. What is checked:

- no command raises (a traceback);
- a refusal is exit code 2 and exactly one line on stderr naming the file and a line; for a replaced
  scalar, the line it stands on;
- an accepted mutant renders no line that the unmutated matrix's recipes lack, except lines that
  hold the mutated value itself (no injected line), and every rendered file keeps the instruction
  and section counts of the unmutated file of the same name.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from imagebuild import cli

ROOT = Path(__file__).resolve().parent.parent

# Strings that would break out of a comment, a quoted LABEL value, a shell line, a URL template
# or a Singularity section if they reached a recipe unchecked.
HOSTILE = [
    "x\nRUN id", "x\r\nRUN id", "x\rRUN id", "x\u2028RUN id", "x\u2029%post", "x\x85RUN id",
    "x\x00y", "x\ty", "x\x1b[2J", "x\x0bid", "x\x0cid", "x\x1cid", "\ufeffx", "x\u202eevil",
    "$(id)", "`id`", '"; id; "', "' || id #", "a\\", "{version.__class__}", "{0}", "{nope}",
    "../../../etc/passwd", " ", "", "x" * 300, "\uff49\uff44", "#!/bin/sh", "%post",
    "https://evil.example/$(id)", "1.0; rm -rf /", "12.4\n",
]
# Values of the wrong type, as YAML text.
WRONG_TYPES = ["12", "2.10", "true", "null", "[a, b]", "{x: 1}", "[]", "{}", "!!binary aGk="]
# Sections whose strings reach a recipe, a tag or a label: every scalar of them is mutated.
RECIPE_SECTIONS = ("images", "tools", "rdma", "os", "ucx", "openmpi", "platforms", "as_of")
PROSE = {"note"}   # free text no recipe holds; it may span lines
RESOLVE = ["--driver", "550.54.15", "--gpu", "H100"]
DOCKER_WORDS = ("FROM ", "SHELL ", "RUN ", "WORKDIR ", "COPY ", "ENV ", "LABEL ", "ARG ")


@dataclass
class Mutant:
    kind: str           # hostile | type | missing
    where: str          # the scalar's path, e.g. images[0].description
    text: str           # the whole mutated matrix.yaml
    line: int           # the 1-based line of the replaced scalar (or the removed key)
    value: str | None   # the hostile string (None for type and missing mutants)
    strict_line: bool   # a refusal must name exactly `line`


@dataclass
class Outcome:
    accepted: bool = False
    problems: list[str] = field(default_factory=list)
    tracebacks: int = 0
    injections: int = 0


def _leaves(text: str):
    """(path, key node or None, value node, parent mapping node or None) for every scalar."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)

    def walk(node, path, key=None, parent=None):
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode) and k.value in PROSE:
                    continue
                yield from walk(v, path + [str(k.value)], k, node)
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                yield from walk(v, path + [i])
        elif isinstance(node, yaml.ScalarNode):
            yield path, key, node, parent

    yield from walk(root, [])


def _label(path) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _replace(text: str, node, new: str) -> str:
    return text[:node.start_mark.index] + new + text[node.end_mark.index:]


def _remove_key(text: str, key, value, parent) -> str | None:
    """The text without `key: value` (flow mappings keep valid commas); None when the pair is not
    one the text can lose cleanly."""
    start, end = key.start_mark.index, value.end_mark.index
    if parent.flow_style:
        rest = text[end:]
        m = re.match(r"\s*,\s*", rest)
        if m:
            return text[:start] + text[end + m.end():]
        m = re.search(r",\s*$", text[:start])
        if m:
            return text[:m.start()] + text[end:]
        return text[:start] + text[end:]
    line_start = text.rfind("\n", 0, start) + 1
    if text[line_start:start].strip() not in ("", "-"):
        return None
    if text[line_start:start].strip() == "-":   # the first key of a block list item
        return None
    line_end = text.find("\n", end)
    return text[:line_start] + text[line_end + 1:]


def mutants(text: str, seed: int = 0, hostile_per_leaf: int = 2, others: int = 40,
            types: bool = True, missing: bool = True, every_hostile: bool = False) -> list[Mutant]:
    """The mutants of `text`, the same for the same seed. Every scalar of RECIPE_SECTIONS gets
    `hostile_per_leaf` hostile strings (all of them with `every_hostile`), one wrong type and,
    where its key can be removed, a removal; `others` scalars of the other sections get one hostile
    string each."""
    rng = random.Random(seed)
    leaves = list(_leaves(text))
    recipe = [lf for lf in leaves if lf[0] and lf[0][0] in RECIPE_SECTIONS]
    other = [lf for lf in leaves if lf[0] and lf[0][0] not in RECIPE_SECTIONS]
    other = rng.sample(other, min(others, len(other)))
    out: list[Mutant] = []
    pool = list(HOSTILE)
    rng.shuffle(pool)
    n = 0
    for path, key, node, parent in recipe:
        line = node.start_mark.line + 1
        where = _label(path)
        picks = pool if every_hostile else [pool[(n + j) % len(pool)]
                                            for j in range(hostile_per_leaf)]
        n += hostile_per_leaf
        for value in picks:
            out.append(Mutant("hostile", where, _replace(text, node, json.dumps(value)), line,
                              value, True))
        if types:
            wrong = WRONG_TYPES[n % len(WRONG_TYPES)]
            out.append(Mutant("type", where, _replace(text, node, wrong), line, None,
                              path[0] in ("images", "tools", "rdma")))
        if missing and key is not None:
            removed = _remove_key(text, key, node, parent)
            if removed is not None:
                out.append(Mutant("missing", where, removed, key.start_mark.line + 1, None, False))
    for i, (path, key, node, parent) in enumerate(other):
        value = pool[(n + i) % len(pool)]
        out.append(Mutant("hostile", _label(path), _replace(text, node, json.dumps(value)),
                          node.start_mark.line + 1, value, True))
    return out


# --------------------------------------------------------------------------------------------------
# running


def _cli(args: list[str]) -> tuple[int | None, str, str, str | None]:
    """(exit code, stdout, stderr, exception) of one command through the CLI entry point."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main(args)
    except BaseException as exc:  # noqa: BLE001 - an escaped exception is what we look for
        return None, out.getvalue(), err.getvalue(), f"{type(exc).__name__}: {exc}"[:300]
    return rc, out.getvalue(), err.getvalue(), None


class Workdir:
    """A folder with matrix.yaml beside a link to the real wheel locks (generate needs them), and
    the unmutated matrix's rendered files to compare with."""

    def __init__(self, folder: Path, original: str):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        locks = self.folder / "locks"
        if not locks.exists():
            locks.symlink_to(ROOT / "locks", target_is_directory=True)
        self.matrix = self.folder / "matrix.yaml"
        self.out = self.folder / "out"
        self.matrix.write_text(original, encoding="utf-8")
        rc, _, err, exc = _cli(self._generate())
        if rc != 0:
            raise RuntimeError(f"the unmutated matrix does not generate: {exc or err}")
        self.baseline = self._rendered()
        self.lines = {ln for text in self.baseline.values() for ln in text.splitlines()}

    def _generate(self) -> list[str]:
        if self.out.exists():
            shutil.rmtree(self.out)
        return ["generate", "--matrix", str(self.matrix), "--allow-unverified", "--output",
                str(self.out)]

    def _rendered(self) -> dict[str, str]:
        return {str(p.relative_to(self.out)): p.read_text(encoding="utf-8")
                for p in sorted(self.out.rglob("*")) if p.is_file()}

    def run(self, m: Mutant) -> Outcome:
        self.matrix.write_text(m.text, encoding="utf-8")
        o = Outcome()
        path = str(self.matrix)
        results = {}
        for name, args in (("knowledge", ["knowledge", "validate", "--matrix", path]),
                           ("generate", self._generate()),
                           ("resolve", ["resolve", "--matrix", path, *RESOLVE])):
            rc, out, err, exc = _cli(args)
            results[name] = rc
            if exc is not None or "Traceback" in out + err:
                o.tracebacks += 1
                o.problems.append(f"{name}: raised {exc or err.strip()[-300:]}")
                continue
            if rc == 2:
                self._check_refusal(m, name, err, o, results)
            elif rc not in (0, 1) or (rc == 1 and name != "resolve"):
                o.problems.append(f"{name}: exit {rc}: {err.strip()[:300]}")
        o.accepted = results.get("knowledge") == 0
        if results.get("knowledge") == 0 and results.get("generate") == 0:
            self._check_render(m, o)
        elif results.get("knowledge") == 0 and results.get("generate") not in (0, None):
            o.problems.append("validate accepted what generate refused: the refusal must come "
                              "when the matrix is loaded, naming its line")
        return o

    def _check_refusal(self, m: Mutant, name: str, err: str, o: Outcome, results: dict):
        lines = err.splitlines()
        if len(lines) != 1 or not err.endswith("\n"):
            o.problems.append(f"{name}: {len(lines)} stderr lines: {err[:300]!r}")
            return
        prefix = f"imagebuild {name}: {self.matrix}:"
        if name == "resolve" and results.get("knowledge") == 0 and "argument --" in lines[0]:
            return  # a valid matrix that no longer knows the GPU asked for: an argument error
        if not lines[0].startswith(prefix):
            o.problems.append(f"{name}: the refusal does not name the file and a line: {lines[0]}")
            return
        mo = re.match(r"(\d+)(?::\d+)?: \S", lines[0][len(prefix):])
        if not mo:
            o.problems.append(f"{name}: the refusal names no line: {lines[0]}")
        elif m.strict_line and int(mo.group(1)) != m.line:
            o.problems.append(f"{name}: the refusal names line {mo.group(1)}, the mutated value "
                              f"is on line {m.line}: {lines[0]}")

    def _check_render(self, m: Mutant, o: Outcome):
        for rel, text in self._rendered().items():
            for ln in text.splitlines():
                if ln in self.lines:
                    continue
                if m.value is not None and m.value in ln:
                    continue
                if m.value is None and rel in self.baseline:
                    continue  # a type or removal mutant may change a value legitimately
                o.injections += 1
                o.problems.append(f"{rel}: a line the unmutated recipe lacks: {ln[:200]!r}")
                break
            if m.kind == "hostile" and rel in self.baseline and \
                    _shape(text) != _shape(self.baseline[rel]):
                o.injections += 1
                o.problems.append(f"{rel}: instructions/sections {_shape(text)} instead of "
                                  f"{_shape(self.baseline[rel])}")


def _shape(text: str) -> tuple[int, int, int]:
    """(Docker instruction lines, Singularity section lines, comment lines) of a recipe."""
    lines = text.splitlines()
    return (sum(1 for ln in lines if ln.startswith(DOCKER_WORDS)),
            sum(1 for ln in lines if ln.lstrip().startswith("%")),
            sum(1 for ln in lines if ln.lstrip().startswith("#")))
