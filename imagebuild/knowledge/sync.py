"""Keep matrix.yaml's PyTorch pins in step with the real wheels on the package index.

For each PyTorch release, the default wheel for Linux x86_64 (CPython 3.12) pins the cuDNN, NCCL and
CUDA runtime it bundles in its `Requires-Dist`, and states `Requires-Python` (whose lower bound is
raised to the oldest interpreter the release really has a wheel for). `sync` reads that metadata, compares it with the release's default variant in the matrix and, when asked, rewrites
only the differing values on their own lines (comments and layout stay as they are).

The metadata is read without downloading the wheel (torch wheels are close to 1 GB):

- when the index advertises the wheel's metadata file (PEP 658 / PEP 714), that file is fetched and
  its sha256 checked, which is what `pip install --dry-run --report` does on such an index;
- otherwise the wheel's zip central directory and its METADATA member are read with HTTP range
  requests (a few MB at most). An index that offers neither is refused, never downloaded from.

The index is the one the user names (`--index-url`), else pip's configured `index-url`, else pip's
own default; pip's `find-links` and `extra-index-url` (local wheel folders on this project's
machines) are deliberately ignored, so a local CPU wheel can never stand in for the index's wheel.

Pure logic (pins from metadata, comparison, patching) is separate from the network code so it can
be tested on fixture data. Nothing here prints.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from .. import knowledge
from ..atomic import atomic_file
from ..errors import KnowledgeError
from ..versions import VersionSyntaxError, parse_version
from . import wheelevidence
from .schema import DEFAULT_PLATFORM
# the parts, re-exported: the names callers and tests use are this module's, as before the split
from .wheelindex import (PYTHON_TAGS, Index, Link, default_index, parse_project_page,  # noqa: F401
                         pick_wheel, pip_settings, published, validate_index_url, wheel_pythons)
from .wheelpins import (PROJECT, IndexUnavailable, SyncError, WheelPins,  # noqa: F401
                        effective_python_floor, marker_env, pins_from_metadata,
                        pins_from_pip_report, python_floor)

FIELDS = ("cuda", "cudnn", "nccl", "cuda_runtime", "python")
WRITABLE = ("cudnn", "nccl", "cuda_runtime", "python")


# --------------------------------------------------------------------------------------------------
# Comparison (pure)


@dataclass(frozen=True)
class Difference:
    release: str
    field: str
    matrix: str | None
    index: str | None
    line: int | None
    writable: bool


@dataclass
class ReleaseReport:
    release: str
    pins: WheelPins
    matrix: dict[str, str | None]
    line: int | None
    differences: list[Difference] = field(default_factory=list)


def _same(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return a is b
    try:
        return parse_version(a) == parse_version(b)
    except VersionSyntaxError:
        return a.strip() == b.strip()


def matrix_values(k, release: str) -> tuple[dict[str, str | None], int | None]:
    """The default variant of a release in loaded knowledge: cuda, cudnn, nccl, cuda_runtime and
    the Python lower bound; with the variant's line."""
    if release not in k.pytorch:
        raise SyncError(f"torch {release} is not in {k.path} (pytorch.releases)")
    defaults = [v for (ver, _), v in k.variants.items() if ver == release and v.default]
    out: dict[str, str | None] = {"python": python_floor(k.pytorch[release].python)}
    if not defaults:
        out.update(cuda=None, cudnn=None, nccl=None, cuda_runtime=None)
        return out, None
    v = defaults[0]
    out.update(cuda=None if v.cuda == "none" else v.cuda,
               cudnn=None if v.cudnn == "none" else v.cudnn,
               nccl=None if v.nccl == "none" else v.nccl, cuda_runtime=v.cuda_runtime)
    return out, v.line


def compare(k, pins: dict[str, WheelPins]) -> list[ReleaseReport]:
    """One report per release (newest first), listing the values the index disagrees with."""
    reports = []
    for release in sorted(pins, key=parse_version, reverse=True):
        p = pins[release]
        values, line = matrix_values(k, release)
        rep = ReleaseReport(release, p, values, line)
        for name in FIELDS:
            mine, theirs = values.get(name), p.value(name)
            if theirs is None and name != "python":
                continue  # the wheel does not pin it (a CPU-only default): nothing to compare
            if not _same(mine, theirs):
                rep.differences.append(Difference(release, name, mine, theirs, line,
                                                  name in WRITABLE and theirs is not None
                                                  and _is_version(theirs)))
        reports.append(rep)
    return reports


def _is_version(text: str) -> bool:
    try:
        parse_version(text)
        return True
    except VersionSyntaxError:
        return False


def format_report(reports: list[ReleaseReport], matrix_path: str, index: str) -> list[str]:
    """A unified-diff-like report: '-' lines hold the matrix's value, '+' lines the index's."""
    out = [f"--- {matrix_path}", f"+++ {index} (default torch wheels, Linux x86_64)"]
    for rep in reports:
        where = f"{matrix_path}:{rep.line}" if rep.line else matrix_path
        if not rep.differences:
            agreed = ", ".join(f"{n} {rep.pins.value(n)}" for n in FIELDS
                               if rep.pins.value(n) is not None)
            out.append(f"  torch {rep.release}: agrees ({agreed})")
            continue
        out.append(f"@@ torch {rep.release} ({where}; {rep.pins.wheel}) @@")
        for d in rep.differences:
            label = "python >=" if d.field == "python" else f"{d.field}:"
            note = "" if d.writable else "   (not written by --write: fix by hand)"
            out.append(f"-{label} {d.matrix if d.matrix is not None else '(absent)'}")
            out.append(f"+{label} {d.index if d.index is not None else '(absent)'}{note}")
    return out


# --------------------------------------------------------------------------------------------------
# Patching matrix.yaml in place (pure text edits at the loader's positions)


_VALUE_RE = re.compile(r"""\s*:\s*("(?P<dq>[^"\\\n]*)"|'(?P<sq>[^'\n]*)'|(?P<bare>[^,}\s#'"]+))""")


def _find_release(doc, release: str):
    for rel in doc["pytorch"]["releases"]:
        if str(rel.get("version")) == release:
            default = [v for v in rel.get("variants", []) if v.get("default") is True]
            return rel, (default[0] if default else None)
    raise SyncError(f"torch {release} is not under pytorch.releases")


def _replace_value(lines: list[str], node, key: str, new: str) -> None:
    line, col = node.key_pos[key]
    text = lines[line - 1]
    start = col - 1
    if not text.startswith(key, start):
        raise SyncError(f"cannot find {key} at line {line}, column {col}")
    m = _VALUE_RE.match(text, start + len(key))
    if m is None:
        raise SyncError(f"the value of {key} at line {line} is not a one-line scalar; edit it by hand")
    quote = "'" if m.group("sq") is not None else '"'
    lines[line - 1] = text[:m.start(1)] + f"{quote}{new}{quote}" + text[m.end(1):]


def _insert_value(lines: list[str], node, key: str, new: str) -> None:
    """Add `key: "new"` after the node's last key: in the flow mapping on its line, or as a new
    line of a block mapping at the same indentation."""
    last = max(node.key_pos, key=lambda k: node.key_pos[k])
    line, col = node.key_pos[last]
    text = lines[line - 1]
    m = _VALUE_RE.match(text, col - 1 + len(str(last)))
    if m is None:
        raise SyncError(f"cannot add {key} after {last} at line {line}; edit it by hand")
    if node.line == line and "{" in text[:node.column]:
        lines[line - 1] = text[:m.end(1)] + f', {key}: "{new}"' + text[m.end(1):]
    else:
        lines.insert(line, " " * (col - 1) + f'{key}: "{new}"\n')


def patch_text(text: str, doc, differences: Iterable[Difference]) -> str:
    """Rewrite only the values that differ; `doc` is the text parsed by knowledge.load_yaml (it
    carries every key's line and column). Python is patched as its lower bound only."""
    lines = text.splitlines(keepends=True)
    inserts = []
    for d in differences:
        if not d.writable:
            continue
        parse_version(d.index)  # strict: only digits and dots ever reach the file
        rel, variant = _find_release(doc, d.release)
        if d.field == "python":
            spec = str(rel["python"])
            atoms = [a.strip() for a in spec.split(",")]
            atoms = [a for a in atoms if not a.startswith(">=")]
            _replace_value(lines, rel, "python", ",".join([f">={d.index}"] + atoms))
            continue
        if variant is None:
            raise SyncError(f"torch {d.release} has no default variant to write {d.field} into")
        if d.field in variant:
            _replace_value(lines, variant, d.field, d.index)
        else:
            inserts.append((variant, d.field, d.index))
    # insertions last, bottom-up, so that the loader's line numbers stay right for the rest
    for variant, key, value in sorted(inserts, key=lambda t: t[0].line, reverse=True):
        _insert_value(lines, variant, key, value)
    return "".join(lines)


def write_matrix(path: str, differences: list[Difference], patch=None) -> bool:
    """Patch the matrix in place: write a temporary file beside it, prove it still loads, rename.
    Returns whether anything was written. `patch` (text, doc, changes) -> text: the pins' by
    default; the wheel records' with wheelevidence.patch_text."""
    todo = [d for d in differences if getattr(d, "writable", True)]
    if not todo:
        return False
    src = Path(path)
    text = src.read_text(encoding="utf-8")
    doc = knowledge.load_yaml(src)
    new = (patch or patch_text)(text, doc, todo)
    if new == text:
        return False
    with atomic_file(src, "w", perm=src.stat().st_mode & 0o7777, suffix=".sync") as fh:
        fh.write(new)
        fh.flush()
        try:
            knowledge.load(fh.name)
        except KnowledgeError as exc:
            raise SyncError(f"the synced matrix would not load ({exc.message}, line {exc.line}); "
                            f"{path} is unchanged", file=path) from None
    return True


# --------------------------------------------------------------------------------------------------
# The whole operation


@dataclass
class SyncResult:
    reports: list[ReleaseReport]
    lines: list[str]
    written: bool
    wheels: list = field(default_factory=list)     # wheelevidence.WheelChange

    @property
    def agree(self) -> bool:
        return all(not r.differences for r in self.reports) and not self.wheels


def _verified(k, index: Index, found: dict, changes: list, progress) -> list:
    """The wheel records `--write` would record, read again from the whole wheels, each checked
    against the sha256 the index names (wheelwhole.py): the ranged reads are never checked
    against it. A whole wheel that says another thing than its ranges did is a SyncError: the
    index serves different bytes to ranges than to a download, and nothing is written."""
    for ch in changes:
        if ch.index is None:
            continue
        key = (ch.release, ch.platform)
        if progress:
            progress(f"torch {ch.release} {ch.platform}: downloading {ch.index.file} whole to check it "
                     "against the index's sha256 before it is recorded")
        known = next((w for w in k.pytorch[ch.release].wheels if w.platform == ch.platform), None)
        whole = index.wheel_evidence(ch.release, ch.platform, known=known, whole=True)
        if whole != found[key]:
            raise SyncError(f"torch {ch.release} {ch.platform}: the whole wheel "
                            f"({wheelevidence.describe(whole) if whole else 'none'}) says another thing "
                            f"than its byte ranges did ({wheelevidence.describe(found[key])}): the index "
                            "serves different bytes to ranges than to a download; nothing written")
        found[key] = whole
    return wheelevidence.compare({v: k.pytorch[v].wheels for v in {c.release for c in changes}},
                                 {key: ev for key, ev in found.items() if key[0] in {c.release for c in changes}})


def sync_pytorch(matrix: str, versions: list[str] | None = None, index_url: str | None = None,
                 write: bool = False, index: Index | None = None,
                 progress: Callable[[str], None] | None = None, wheels: bool = True) -> SyncResult:
    """Compare (and with `write`, update) the default variants' pins with the index's wheels and,
    unless `wheels` is False, each release's wheel records (x86_64, aarch64) with the wheels pip
    gets now."""
    k = knowledge.load(matrix)
    wanted = list(dict.fromkeys(versions)) if versions else sorted(k.pytorch, key=parse_version,
                                                                    reverse=True)
    for v in wanted:
        try:
            parse_version(v)
        except VersionSyntaxError as exc:
            raise SyncError(str(exc), argument="--versions") from None
        if v not in k.pytorch:
            raise SyncError(f"torch {v} is not in {matrix} (pytorch.releases)", argument="--versions")
    index = index or Index(index_url)
    pins = {}
    for v in wanted:
        if progress:
            progress(f"reading torch {v} from {index.shown}")
        pins[v] = index.pins(v)
        if progress:
            progress(f"torch {v}: {pins[v].wheel}, {pins[v].how}")
    found = {}
    for v in wanted if wheels else ():
        for plat in k.platforms or (DEFAULT_PLATFORM,):
            known = next((w for w in k.pytorch[v].wheels if w.platform == plat), None)
            found[(v, plat)] = index.wheel_evidence(v, plat, known=known)
            if progress and found[(v, plat)] is not None:
                progress(f"torch {v} {plat}: {wheelevidence.describe(found[(v, plat)])}")
    changes = wheelevidence.compare({v: k.pytorch[v].wheels for v in wanted}, found)
    reports = compare(k, pins)
    lines = format_report(reports, matrix, index.shown)
    lines += [f"  wheels: {ch.describe()}" for ch in changes]
    if wheels and not changes:
        lines.append(f"  wheels: the {sum(1 for e in found.values() if e)} Linux wheels read agree "
                     "with the records")
    written = False
    if write and changes:
        changes = _verified(k, index, found, changes, progress)
    if write:
        written = write_matrix(matrix, [d for r in reports for d in r.differences])
        written = write_matrix(matrix, changes, wheelevidence.patch_text) or written
    return SyncResult(reports, lines, written, changes)
