"""The evidence that a PyTorch build is published for a platform, and the audit of it.

`knowledge sync pytorch` reads, for each release and platform (x86_64, aarch64), the wheel a plain
`pip install torch==V` gets from the index: its file name, sha256 and size from the project page,
and from inside the wheel (its zip central directory and torch/version.py, read through HTTP
ranges, a few MB of a wheel of up to 1 GB) the CUDA it was built for (`cuda = None`: the CPU build)
and the git commit it was built from. matrix.yaml keeps that as each release's `wheels:`; the loader
refuses a record that contradicts the variants (an aarch64 CPU wheel where no CPU variant lists
aarch64, say).

`knowledge evidence` then audits, without the network, every release x variant x platform: the wheel
that shows it (file, sha256, commit), or the page or RELEASE.md row its variant cites, and whether
that source is first-party. Pure logic only; the reading is in wheelindex.py."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from ..versions import NONE, parse_version
from .model import WheelEvidence
from .schema import DEFAULT_PLATFORM
from .wheelpins import SyncError

SOURCE = "PYPIWHEEL"
VERSION_PY = "torch/version.py"
VERSION_PY_MAX = 64 * 1024
_CUDA_RE = re.compile(r"cuda\s*(?::[^=]*)?=\s*(?:'([0-9]+\.[0-9]+)'|\"([0-9]+\.[0-9]+)\"|(None))\s*")
_GIT_RE = re.compile(r"git_version\s*(?::[^=]*)?=\s*['\"]([0-9a-f]{40})['\"]\s*")


def read_version_py(text: str, wheel: str) -> tuple[str, str]:
    """(CUDA major.minor or NONE, git commit) from a torch wheel's torch/version.py: the first line
    that is wholly `cuda = ...` and the first wholly `git_version = '<40 hex>'`."""
    cuda = git = None
    for line in text.splitlines():
        cuda = cuda or _CUDA_RE.fullmatch(line)
        git = git or _GIT_RE.fullmatch(line)
    if cuda is None or git is None:
        raise SyncError(f"{wheel}: {VERSION_PY} names no "
                        + ("cuda" if cuda is None else "git_version") + " this reader knows")
    value = cuda.group(1) or cuda.group(2)
    return (value if value else NONE), git.group(1)


ARCH_LIBRARY = "torch/lib/libtorch_python.so"
ARCH_COMPRESSED_MAX = 64 << 20
ARCH_LIBRARY_MAX = 256 << 20
# the string torch.cuda.get_arch_list() splits: "sm_75 sm_80 ... sm_120" (compute_XY: PTX)
# (no look-behind: in some builds the string follows another with no NUL between, "...ipc_hsm_70")
_ARCH_RE = re.compile(rb"((?:sm|compute)_[0-9]{2,3}a?(?: (?:sm|compute)_[0-9]{2,3}a?)+)(?![A-Za-z0-9_])")


def read_arch(library: bytes, wheel: str) -> tuple[str, ...]:
    """The architectures a torch CUDA build carries, from its libtorch_python.so: the one string of
    `sm_XY` (and `compute_XY`, PTX) names it returns from torch.cuda.get_arch_list(), as
    matrix.yaml writes them ("7.5", "12.0", "12.0+PTX")."""
    found = {m.group(1) for m in _ARCH_RE.finditer(library)}
    if len(found) != 1:
        raise SyncError(f"{wheel}: {len(found)} architecture lists in {ARCH_LIBRARY}, not one")
    sm, ptx = [], set()
    for name in found.pop().decode().split():
        kind, digits = name.split("_")
        digits = digits.rstrip("a")
        cc = f"{digits[:-1]}.{digits[-1]}"
        (sm.append(cc) if kind == "sm" else ptx.add(cc))
    out = [cc + ("+PTX" if cc in ptx else "") for cc in dict.fromkeys(sm)]
    out += [cc + "+PTX" for cc in sorted(ptx - set(sm), key=parse_version)]
    return tuple(sorted(out, key=lambda a: parse_version(a.removesuffix("+PTX"))))


# --------------------------------------------------------------------------------------------------
# sync: the matrix's records against what the index holds now


@dataclass(frozen=True)
class WheelChange:
    release: str
    platform: str
    what: str                      # new | changed | gone
    matrix: WheelEvidence | None
    index: WheelEvidence | None

    def describe(self) -> str:
        m, i = self.matrix, self.index
        if self.what == "new":
            return f"torch {self.release} {self.platform}: not recorded; the index has {describe(i)}"
        if self.what == "gone":
            return f"torch {self.release} {self.platform}: recorded {m.file}; the index has no such wheel now"
        diffs = [f"{k} {_shown(getattr(m, k))} -> {_shown(getattr(i, k))}"
                 for k in ("file", "sha256", "size", "cuda", "commit", "arch")
                 if getattr(m, k) != getattr(i, k)]
        return f"torch {self.release} {self.platform}: " + "; ".join(diffs)


def _shown(value) -> str:
    return ",".join(value) if isinstance(value, tuple) else str(value)


def describe(ev: WheelEvidence) -> str:
    build = "CPU build" if ev.cuda == NONE else f"CUDA {ev.cuda} build"
    return f"{ev.file} ({build}, sha256 {ev.sha256[:12]}, commit {ev.commit[:12]})"


def compare(recorded: dict[str, tuple[WheelEvidence, ...]],
            found: dict[tuple[str, str], WheelEvidence | None]) -> list[WheelChange]:
    """What changed between the matrix's records (release -> records) and the index's wheels
    ((release, platform) -> evidence, None where the index has no such wheel)."""
    out = []
    for (release, platform), ev in sorted(found.items(), key=lambda kv: (parse_version(kv[0][0]), kv[0][1])):
        old = next((r for r in recorded.get(release, ()) if r.platform == platform), None)
        if ev is None:
            if old is not None:
                out.append(WheelChange(release, platform, "gone", old, None))
            continue
        if old is None:
            out.append(WheelChange(release, platform, "new", None, ev))
        elif (old.file, old.sha256, old.cuda, old.commit, old.arch) != \
                (ev.file, ev.sha256, ev.cuda, ev.commit, ev.arch) \
                or (old.size is not None and old.size != ev.size):
            out.append(WheelChange(release, platform, "changed", old, ev))
    return out


def record_line(ev: WheelEvidence, indent: str) -> str:
    """One record as matrix.yaml keeps it: a flow mapping on one line."""
    for value in (ev.file, ev.sha256, ev.commit, ev.platform):
        if not re.fullmatch(r"[A-Za-z0-9._+-]+", value):
            raise SyncError(f"refusing to write {value!r} into matrix.yaml")
    for value in ev.arch or ():
        if not re.fullmatch(r"[0-9]+\.[0-9]+(\+PTX)?", value):
            raise SyncError(f"refusing to write {value!r} into matrix.yaml")
    size = f", size: {int(ev.size)}" if ev.size else ""
    arch = (", arch: [" + ", ".join(f'"{a}"' for a in ev.arch) + "]") if ev.arch else ""
    return (f'{indent}- {{platform: {ev.platform}, file: "{ev.file}", sha256: "{ev.sha256}"{size}, '
            f'cuda: {"none" if ev.cuda == NONE else chr(34) + ev.cuda + chr(34)}{arch}, '
            f'commit: "{ev.commit}", source: {ev.source}}}\n')


def patch_text(text: str, doc, changes: Iterable[WheelChange]) -> str:
    """The matrix with each changed release's `wheels:` rewritten from the index (records sorted by
    platform, other platforms' records kept), inserted before `variants:` where it had none."""
    lines = text.splitlines(keepends=True)
    order = [str(p.get("id")) for p in doc.get("platforms") or []]   # the matrix's platform order
    by_release: dict[str, list[WheelChange]] = {}
    for ch in changes:
        by_release.setdefault(ch.release, []).append(ch)
    edits = []
    for rel in doc["pytorch"]["releases"]:
        release = str(rel.get("version"))
        if release not in by_release:
            continue
        recs = {str(r["platform"]): r for r in rel.get("wheels", [])}
        new = {ch.platform: ch.index for ch in by_release[release]}
        vline, vcol = rel.key_pos["variants"]
        indent = " " * (vcol - 1)
        if "wheels" in rel:
            first = rel.key_pos["wheels"][0]
            last = max([r.line for r in rel["wheels"]] or [first])
            old = {p: lines[recs[p].line - 1] for p in recs}
            start, end = first, last
        else:
            old, start, end = {}, vline, vline - 1
        body = []
        for plat in sorted(set(recs) | set(new), key=lambda p: (order + [p]).index(p)):
            if plat in new:
                if new[plat] is not None:
                    body.append(record_line(new[plat], indent + "  "))
            else:
                body.append(old[plat])
        block = ([f"{indent}wheels:\n"] + body) if body else []
        edits.append((start, end, block))
    for start, end, block in sorted(edits, reverse=True):
        lines[start - 1:end] = block
    return "".join(lines)


# --------------------------------------------------------------------------------------------------
# The offline audit


@dataclass(frozen=True)
class Row:
    release: str
    build: str                 # cu128 | cpu
    platform: str
    verified: bool
    kind: str                  # wheel | source
    source: str
    detail: str
    first_party: bool


def first_party(k, source_id: str) -> bool:
    """Whether the source ``source_id`` is first-party: the matrix lists it, and its title does
    not call it a third-party copy (the matrix's one marking). The same rule for every row."""
    src = k.sources.get(source_id)
    return src is not None and not src.title.lower().lstrip().startswith("third-party")


def audit(k) -> list[Row]:
    """Every release x variant x platform with its evidence, newest release first: the index's
    wheel where one shows that build for that platform, else the source the variant cites for it
    (its platforms_source, else its own)."""
    rows = []
    for release in sorted(k.pytorch, key=parse_version, reverse=True):
        wheels = {w.platform: w for w in k.pytorch[release].wheels}
        mine = sorted((v for (r, _), v in k.variants.items() if r == release), key=lambda v: v.tag)
        for var in mine:
            for plat in var.platforms:
                w = wheels.get(plat)
                if w is not None and w.cuda == var.cuda:
                    # first-party or not by the source the record cites, as any other row: a
                    # wheel record is no evidence of its own
                    rows.append(Row(release, var.tag, plat, var.verified, "wheel", w.source,
                                    f"{w.file} sha256:{w.sha256} commit {w.commit}",
                                    first_party(k, w.source)))
                    continue
                # the variant's source shows its default platform; platforms_source the others
                sid = var.source if plat == DEFAULT_PLATFORM else (var.platforms_source or var.source)
                src = k.sources.get(sid)
                title = src.title if src is not None else sid
                rows.append(Row(release, var.tag, plat, var.verified, "source", sid, title,
                                first_party(k, sid)))
    return rows


def failures(rows: list[Row]) -> list[str]:
    """What the audit refuses: a verified build whose only evidence for a platform is a third-party
    copy."""
    return [f"torch {r.release}+{r.build} on {r.platform}: verified, but its only evidence is "
            f"third-party ({r.source})" for r in rows if r.verified and not r.first_party]
