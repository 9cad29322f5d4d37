"""`imagebuild knowledge sync nvidia`: NVIDIA's component wheels on the package index, read the way
`sync pytorch` reads torch's, so that a new CUDA, cuDNN or NCCL release enters matrix.yaml with one
command, cited to the index (S10), instead of being typed in.

- CUDA: the `cuda-toolkit` meta-package's releases. One the matrix lacks is added to
  `cuda.releases` as `wheels_only: true` (no OS repository is confirmed to carry it; its Table 3
  driver is not known, so only minor-version compatibility judges it), with the day its first
  Linux wheel was uploaded.
- cuDNN and NCCL: `nvidia-cudnn-cuXX` and `nvidia-nccl-cuXX` per CUDA major. A release the matrix
  lacks is added to that major's `releases` list, and the major's `builds` range is widened to it.

Only releases uploaded with a Linux x86_64 wheel count (pre-, dev-, local and yanked-only releases
never). The file is patched line by line (comments and layout stay) and proved to load before it
replaces the old one. Nothing here prints.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from .. import knowledge
from ..versions import VersionSyntaxError, parse_version, version_key
from .wheelindex import Index, published
from .wheelpins import SyncError

MAJORS = (11, 12, 13)
# a release number as a wheel version gives it: digits and dots only ever reach the file
_RELEASE_RE = re.compile(r"[0-9]+(\.[0-9]+){1,3}")


@dataclass(frozen=True)
class NewRelease:
    library: str            # cuda | cudnn | nccl
    version: str
    cuda_major: int | None  # cudnn/nccl: the CUDA major of the wheel; cuda: None
    project: str
    uploaded: str           # YYYY-MM-DD, "" when the index gives no upload time

    def describe(self) -> str:
        where = f" for CUDA {self.cuda_major}" if self.cuda_major else ""
        day = f", uploaded {self.uploaded}" if self.uploaded else ""
        return f"{self.library} {self.version}{where}: new ({self.project} {self.version}{day})"


@dataclass
class NvidiaSync:
    new: list[NewRelease] = field(default_factory=list)
    read: dict[str, int] = field(default_factory=dict)     # project -> releases on the index
    written: bool = False

    @property
    def agree(self) -> bool:
        return not self.new


def _releases(index: Index, project: str) -> dict[str, str]:
    """version -> upload day of a project's final releases with a Linux x86_64 wheel; an index
    without the project has none."""
    try:
        links = index.links(project)
    except SyncError as exc:
        if "has no" in exc.message:
            return {}
        raise
    out = {}
    for ver, day in published(links, None, "x86_64").items():
        if _RELEASE_RE.fullmatch(ver):
            out[ver] = day
    return out


def _cuda_version(wheel_version: str) -> str:
    """cuda-toolkit 12.8.2.0 is CUDA 12.8.2; 13.5.0 is 13.5.0."""
    parts = wheel_version.split(".")
    return ".".join((parts + ["0", "0"])[:3])


def find_new(k, index: Index, progress: Callable[[str], None] | None = None) -> NvidiaSync:
    result = NvidiaSync()
    have = {_cuda_version(v) for v in k.releases}
    toolkit = _releases(index, "cuda-toolkit")
    result.read["cuda-toolkit"] = len(toolkit)
    seen: set[str] = set()
    for ver, day in sorted(toolkit.items(), key=lambda kv: version_key(kv[0])):
        cuda = _cuda_version(ver)
        if cuda not in have and cuda not in seen:
            seen.add(cuda)
            result.new.append(NewRelease("cuda", cuda, None, "cuda-toolkit", day))
    doc = k.document
    for lib in ("cudnn", "nccl"):
        known = {(r.get("cuda_major"), str(v)) for r in (doc.get(lib) or {}).get("releases", [])
                 for v in r.get("versions", [])}
        for major in MAJORS:
            project = f"nvidia-{lib}-cu{major}"
            if progress:
                progress(f"reading {project} from {index.shown}")
            found = _releases(index, project)
            result.read[project] = len(found)
            for ver, day in sorted(found.items(), key=lambda kv: version_key(kv[0])):
                if (major, ver) not in known:
                    result.new.append(NewRelease(lib, ver, major, project, day))
    return result


def patch_text(text: str, doc, new: list[NewRelease]) -> str:
    """The matrix text with the new releases in: CUDA releases as new lines after the last of
    `cuda.releases`; cuDNN/NCCL versions into their major's `releases` line, and that major's
    `builds` upper bound raised. Each touched line must be a one-line flow mapping."""
    lines = text.splitlines(keepends=True)
    edits: dict[int, str] = {}
    inserts: list[tuple[int, str]] = []
    cuda_new = [n for n in new if n.library == "cuda"]
    if cuda_new:
        rels = doc["cuda"]["releases"]
        last = max(r.line for r in rels)
        indent = _flow_line(lines, last, "cuda.releases")
        for n in sorted(cuda_new, key=lambda n: version_key(n.version)):
            parse_version(n.version)
            note = f"{n.project} {n.version}" + (f", uploaded {n.uploaded}" if n.uploaded else "") \
                + ": added by `imagebuild knowledge sync nvidia`"
            inserts.append((last, f'{indent}- {{version: "{n.version}", wheels_only: true, '
                                  f'source: S10, note: "{note}"}}\n'))
    for lib in ("cudnn", "nccl"):
        for major in MAJORS:
            mine = [n.version for n in new if n.library == lib and n.cuda_major == major]
            if not mine:
                continue
            section = doc.get(lib) or {}
            rel = next((r for r in section.get("releases", []) if r.get("cuda_major") == major), None)
            if rel is None:
                raise SyncError(f"{lib}.releases has no entry for CUDA {major}: add one by hand, "
                                f"then sync ({', '.join(mine)} are on the index)")
            versions = sorted({str(v) for v in rel["versions"]} | set(mine), key=version_key)
            edits[rel.line] = _with_versions(lines, rel.line, f"{lib}.releases", versions)
            build = next((b for b in section.get("builds", []) if b.get("cuda_major") == major), None)
            if build is not None:
                edits[build.line] = _widen(edits.get(build.line) or lines[build.line - 1],
                                           build.line, f"{lib}.builds", versions[-1])
    for line, new_text in edits.items():
        lines[line - 1] = new_text
    for after, new_line in sorted(inserts, key=lambda t: t[0], reverse=True):
        lines.insert(after, new_line)
    return "".join(lines)


def _flow_line(lines: list[str], line: int, where: str) -> str:
    text = lines[line - 1]
    m = re.fullmatch(r"(\s*)- \{.*\}\s*(#.*)?", text.rstrip("\n"))
    if m is None:
        raise SyncError(f"{where}: line {line} is not a one-line `- {{...}}` entry; edit it by hand")
    return m.group(1)


def _with_versions(lines: list[str], line: int, where: str, versions: list[str]) -> str:
    _flow_line(lines, line, where)
    text = lines[line - 1]
    m = re.search(r"versions: \[[^\]]*\]", text)
    if m is None:
        raise SyncError(f"{where}: line {line} has no one-line `versions: [...]`; edit it by hand")
    listed = ", ".join(f'"{v}"' for v in versions)
    return text[:m.start()] + f"versions: [{listed}]" + text[m.end():]


def _widen(text: str, line: int, where: str, newest: str) -> str:
    """Raise a `versions: "...<=X..."` bound to `newest` when it is below it."""
    m = re.search(r'versions: "([^"]*)"', text)
    if m is None:
        raise SyncError(f"{where}: line {line} has no one-line `versions: \"...\"`; edit it by hand")
    spec = m.group(1)
    up = re.search(r"<=\s*([0-9.]+)", spec)
    if up is None or version_key(up.group(1)) >= version_key(newest):
        return text
    spec = spec[:up.start(1)] + newest + spec[up.end(1):]
    return text[:m.start(1)] + spec + text[m.end(1):]


def sync_nvidia(matrix: str, index_url: str | None = None, write: bool = False,
                index: Index | None = None,
                progress: Callable[[str], None] | None = None) -> NvidiaSync:
    """Compare (and with `write`, add to) the matrix's CUDA, cuDNN and NCCL releases with the
    index's cuda-toolkit, nvidia-cudnn-cuXX and nvidia-nccl-cuXX wheels."""
    k = knowledge.load(matrix)
    index = index or Index(index_url)
    result = find_new(k, index, progress)
    if write and result.new:
        from .sync import write_matrix

        def patch(text, doc, new):
            try:
                return patch_text(text, doc, new)
            except VersionSyntaxError as exc:
                raise SyncError(f"the index names a malformed release: {exc}") from None
            except SyncError as exc:
                raise SyncError(f"{matrix}: {exc.message}; nothing was written") from None
        result.written = write_matrix(matrix, result.new, patch)
    return result
