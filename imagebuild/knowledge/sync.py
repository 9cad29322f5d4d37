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

import hashlib
import io
import os
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from email.parser import HeaderParser
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Callable, Iterable
from urllib.parse import urldefrag, urljoin

from .. import knowledge
from ..atomic import atomic_file
from ..errors import ImagebuildError, KnowledgeError, Unavailable
from ..redact import redact
from ..versions import VersionSyntaxError, parse_version

PROJECT = "torch"
# the interpreters whose wheel is read, in this order (the first a release has; pins do not differ)
PYTHON_TAGS = ("cp312", "cp311", "cp310", "cp313", "cp39", "cp38")
FIELDS = ("cuda", "cudnn", "nccl", "cuda_runtime", "python")
WRITABLE = ("cudnn", "nccl", "cuda_runtime", "python")
_PLATFORM_RE = re.compile(r"^(manylinux1|manylinux2010|manylinux2014|manylinux_[0-9]+_[0-9]+|linux)"
                          r"_x86_64\Z")
_URL_RE = re.compile(r"^https?://[A-Za-z0-9._~:/?#\[\]@!$&()*+,;=%-]+\Z")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}\Z")


def marker_env(python_tag: str = "cp312") -> dict[str, str]:
    """The environment the markers of a Linux x86_64 CPython install see."""
    py = f"{python_tag[2]}.{python_tag[3:]}"
    return {"platform_system": "Linux", "platform_machine": "x86_64", "sys_platform": "linux",
            "os_name": "posix", "python_version": py, "python_full_version": py + ".0",
            "implementation_name": "cpython", "platform_python_implementation": "CPython",
            "extra": ""}


class SyncError(ImagebuildError):
    """The package index cannot be read, or the matrix cannot be synced."""


class IndexUnavailable(Unavailable, SyncError):
    """The package index cannot be reached or answers 5xx (exit code 3)."""


# --------------------------------------------------------------------------------------------------
# Pins from wheel metadata (pure)


@dataclass(frozen=True)
class WheelPins:
    """What one torch wheel's metadata says about the stack it bundles."""

    version: str
    wheel: str
    requires_python: str | None
    cudnn: str | None = None
    nccl: str | None = None
    cuda_runtime: str | None = None
    cuda: str | None = None          # major.minor implied by the CUDA runtime pin
    how: str = ""                    # how the metadata was read (for the report)
    wheel_pythons: tuple[str, ...] = ()  # the Pythons the release has Linux x86_64 wheels for

    def value(self, name: str) -> str | None:
        if name == "python":
            return effective_python_floor(self.requires_python, self.wheel_pythons)
        return getattr(self, name)


_PIN_NAMES = (
    (re.compile(r"^nvidia-cudnn-cu([0-9]+)\Z"), "cudnn"),
    (re.compile(r"^nvidia-nccl-cu([0-9]+)\Z"), "nccl"),
    (re.compile(r"^nvidia-cuda-runtime-cu([0-9]+)\Z"), "cuda_runtime"),
    (re.compile(r"^nvidia-cuda-runtime\Z"), "cuda_runtime"),
    (re.compile(r"^cuda-toolkit\Z"), "cuda_runtime"),
)


def _pin(req) -> str:
    """The version an exact pin names, else the specifier's text (which then never agrees)."""
    specs = list(req.specifier)
    if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
        return specs[0].version
    return str(req.specifier) or "(unpinned)"


def pins_from_metadata(version: str, wheel: str, requires_python: str | None,
                       requires_dist: Iterable[str], how: str = "",
                       python_tag: str = "cp312", wheel_pythons: Iterable[str] = ()) -> WheelPins:
    """Pick the cuDNN, NCCL and CUDA runtime pins out of a wheel's Requires-Dist lines. Lines whose
    markers do not hold on Linux x86_64 CPython (extras, other platforms) are ignored."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    found: dict[str, str] = {}
    for line in requires_dist:
        try:
            req = Requirement(line)
        except InvalidRequirement as exc:
            raise SyncError(f"torch {version}: unreadable Requires-Dist line {line!r}: {exc}") from None
        if req.marker is not None and not req.marker.evaluate(marker_env(python_tag)):
            continue
        name = canonicalize_name(req.name)
        for pattern, slot in _PIN_NAMES:
            if pattern.match(name):
                # nvidia-cuda-runtime-cuXX wins over cuda-toolkit when a wheel names both
                if slot in found and name == "cuda-toolkit":
                    continue
                found[slot] = _pin(req)
    cuda = None
    if found.get("cuda_runtime"):
        try:
            v = parse_version(found["cuda_runtime"])
            cuda = f"{v.major}.{v.minor}"
        except VersionSyntaxError:
            cuda = None
    return WheelPins(version, wheel, requires_python, found.get("cudnn"), found.get("nccl"),
                     found.get("cuda_runtime"), cuda, how, tuple(wheel_pythons))


def pins_from_pip_report(report: dict, version: str) -> WheelPins:
    """The pins from a `pip install --dry-run --report FILE` report (one install item)."""
    for item in report.get("install", []):
        meta = item.get("metadata", {})
        if meta.get("name", "").lower() == PROJECT and meta.get("version") == version:
            url = item.get("download_info", {}).get("url", "")
            return pins_from_metadata(version, url.rsplit("/", 1)[-1], meta.get("requires_python"),
                                      meta.get("requires_dist", []), "pip report")
    raise SyncError(f"the pip report names no torch {version}")


def effective_python_floor(requires_python: str | None, wheel_pythons: Iterable[str]) -> str | None:
    """The oldest Python a release really installs on: Requires-Python's lower bound, raised to
    the oldest interpreter it has a wheel for (torch 2.5.1 says >=3.8 but has no cp38 wheel)."""
    floor = python_floor(requires_python)
    pys = sorted(wheel_pythons, key=parse_version)
    if pys and (floor is None or parse_version(pys[0]) > parse_version(floor)):
        return pys[0]
    return floor


def python_floor(spec: str | None) -> str | None:
    """The lower bound of a Python specifier ('>=3.10,<3.15' -> '3.10'), or None."""
    if not spec:
        return None
    for atom in str(spec).split(","):
        atom = atom.strip()
        if atom.startswith(">="):
            return atom[2:].strip()
    return None


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
    out: dict[str, str | None] = {"python": python_floor(k.pytorch[release]["python"])}
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


def write_matrix(path: str, differences: list[Difference]) -> bool:
    """Patch the matrix in place: write a temporary file beside it, prove it still loads, rename.
    Returns whether anything was written."""
    todo = [d for d in differences if d.writable]
    if not todo:
        return False
    src = Path(path)
    text = src.read_text(encoding="utf-8")
    doc = knowledge.load_yaml(src)
    new = patch_text(text, doc, todo)
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
# The index


def validate_index_url(url: str) -> str:
    if not _URL_RE.match(url):
        raise SyncError(f"malformed index URL {redact(url)!r} (expected http://... or https://...)",
                        argument="--index-url")
    return url.rstrip("/") + "/"


def pip_settings(runner: Callable[..., Any] = subprocess.run,
                 keys: tuple[str, ...] = ("index-url", "cert")) -> dict[str, str]:
    """pip's configured values of `keys` (environment first, then install, then global). Sync reads
    only `index-url` and `cert`: find-links and extra-index-url are deliberately not read there."""
    try:
        proc = runner([sys.executable, "-m", "pip", "config", "list"], capture_output=True,
                      text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return {}
    found: dict[str, dict[str, str]] = {}
    for line in (proc.stdout or "").splitlines():
        m = re.match(r"^(:env:|[a-z]+)\.([a-z-]+)='(.*)'\Z", line.strip())
        if m:
            found.setdefault(m.group(2), {})[m.group(1)] = m.group(3)
    out = {}
    for key in keys:
        for section in (":env:", "install", "global"):
            if section in found.get(key, {}):
                out[key] = found[key][section]
                break
    return out


def default_index() -> str:
    """pip's own default index (read from pip, so no host name is written here)."""
    try:
        from pip._internal.models.index import PyPI  # noqa: PLC0415 - only for its default URL
        return PyPI.simple_url
    except Exception:  # noqa: BLE001 - pip's internals moved: ask the user
        raise SyncError("cannot find pip's default index; pass --index-url",
                        argument="--index-url") from None


@dataclass(frozen=True)
class Link:
    filename: str
    url: str
    sha256: str | None
    metadata: str | None       # None: not advertised; "": advertised without hash; else its sha256
    upload_time: str | None = None   # PEP 691 `upload-time` (ISO 8601), when the index gives it
    yanked: bool = False


class _LinkParser(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[dict[str, str | None]] = []
        self._cur: dict[str, str | None] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._cur = dict(attrs)
            self._cur["_text"] = ""

    def handle_data(self, data):
        if self._cur is not None:
            self._cur["_text"] = (self._cur["_text"] or "") + data

    def handle_endtag(self, tag):
        if tag == "a" and self._cur is not None:
            self.links.append(self._cur)
            self._cur = None


def _metadata_attr(value: Any) -> str | None:
    if value is None or value is False or value == "false":
        return None
    if isinstance(value, dict):
        return value.get("sha256", "")
    text = str(value)
    if text.startswith("sha256="):
        return text[7:]
    return ""


def parse_project_page(body: str, content_type: str, page_url: str) -> list[Link]:
    """Links of a PEP 503 (HTML) or PEP 691 (JSON) project page."""
    links = []
    if "json" in content_type:
        import json
        for f in json.loads(body).get("files", []):
            url = urljoin(page_url, f["url"])
            meta = f.get("core-metadata", f.get("dist-info-metadata"))
            links.append(Link(f["filename"], urldefrag(url)[0], f.get("hashes", {}).get("sha256"),
                              _metadata_attr(meta), f.get("upload-time"),
                              bool(f.get("yanked"))))
        return links
    parser = _LinkParser()
    parser.feed(body)
    for a in parser.links:
        href = a.get("href")
        if not href:
            continue
        url, frag = urldefrag(urljoin(page_url, href))
        sha = frag[7:] if frag.startswith("sha256=") else None
        filename = url.rsplit("/", 1)[-1]
        meta = a.get("data-core-metadata", a.get("data-dist-info-metadata"))
        if "data-core-metadata" not in a and "data-dist-info-metadata" not in a:
            meta = None
        elif meta is None:
            meta = "true"
        links.append(Link(filename, url, sha, _metadata_attr(meta)))
    return links


def pick_wheel(links: list[Link], version: str) -> tuple[Link, str] | None:
    """The default wheel of a torch release for Linux x86_64: for the first interpreter of
    PYTHON_TAGS it is built for, the highest build number (as pip picks); with that tag."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename
    from packaging.version import Version

    want = Version(version)
    parsed = []
    for link in links:
        if not link.filename.endswith(".whl"):
            continue
        try:
            name, ver, build, tags = parse_wheel_filename(link.filename)
        except InvalidWheelFilename:
            continue
        if name == PROJECT and ver == want and not ver.local:
            parsed.append((link, build, tags))
    for py in PYTHON_TAGS:
        fits = [(build, link.filename, link) for link, build, tags in parsed
                if any(t.interpreter == py and t.abi == py and _PLATFORM_RE.match(t.platform)
                       for t in tags)]
        if fits:
            best = max(fits, key=lambda f: (f[0], f[1]))
            return best[2], py
    return None


def published(links: list[Link], until: str | None = None,
              platform: str | None = "x86_64") -> dict[str, str]:
    """Final releases on a project page -> the day their first file was uploaded (YYYY-MM-DD),
    keeping those uploaded by `until` that have a Linux wheel for `platform` (None: any file).
    Pre-, dev- and yanked-only releases are left out; a post-release (2.26.2.post1, a re-upload)
    counts as its base version."""
    from packaging.utils import (InvalidSdistFilename, InvalidWheelFilename,
                                 parse_sdist_filename, parse_wheel_filename)

    out: dict[str, str] = {}
    for link in links:
        if link.yanked:
            continue
        try:
            if link.filename.endswith(".whl"):
                _, ver, _, tags = parse_wheel_filename(link.filename)
                if platform is not None and not any(
                        t.platform.startswith(("manylinux", "linux"))
                        and t.platform.endswith("_" + platform) for t in tags):
                    continue
            elif platform is None:
                ver = parse_sdist_filename(link.filename)[1]
            else:
                continue
        except (InvalidWheelFilename, InvalidSdistFilename):
            continue
        if ver.is_prerelease or ver.is_devrelease or ver.local:
            continue
        base = ".".join(str(x) for x in ver.release)
        day = (link.upload_time or "")[:10]
        if until is not None and (not day or day > until):
            continue
        if base not in out or (day and day < out[base]):
            out[base] = day
    return out


def wheel_pythons(links: list[Link], version: str) -> tuple[str, ...]:
    """The CPython versions a torch release has Linux x86_64 wheels for, oldest first."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename
    from packaging.version import Version

    want = Version(version)
    found = set()
    for link in links:
        if not link.filename.endswith(".whl"):
            continue
        try:
            name, ver, _build, tags = parse_wheel_filename(link.filename)
        except InvalidWheelFilename:
            continue
        if name != PROJECT or ver != want:
            continue
        for t in tags:
            m = re.fullmatch(r"cp([0-9])([0-9]+)", t.interpreter)
            if m and _PLATFORM_RE.match(t.platform):
                found.add(f"{m.group(1)}.{m.group(2)}")
    return tuple(sorted(found, key=parse_version))


class _RangeFile(io.RawIOBase):
    """A read-only, seekable view of a remote file through HTTP range requests, in blocks."""

    BLOCK = 1 << 19

    def __init__(self, session, url: str, size: int, timeout: float):
        super().__init__()
        self.session, self.url, self.size, self.timeout = session, url, size, timeout
        self.pos = 0
        self.blocks: dict[int, bytes] = {}
        self.fetched = 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self.pos

    def seek(self, offset, whence=io.SEEK_SET):
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def _block(self, i: int) -> bytes:
        if i not in self.blocks:
            start = i * self.BLOCK
            end = min(self.size, start + self.BLOCK) - 1
            resp = self.session.get(self.url, headers={"Range": f"bytes={start}-{end}"},
                                    timeout=self.timeout, stream=True)
            if resp.status_code != 206:
                resp.close()
                raise SyncError(f"the index ignores byte ranges for {self.url.rsplit('/', 1)[-1]} "
                                f"(HTTP {resp.status_code}); refusing to download the whole wheel")
            data = resp.content
            self.fetched += len(data)
            self.blocks[i] = data
        return self.blocks[i]

    def readinto(self, buf):
        if self.pos >= self.size:
            return 0
        n = min(len(buf), self.size - self.pos)
        out = bytearray()
        while len(out) < n:
            i, off = divmod(self.pos + len(out), self.BLOCK)
            chunk = self._block(i)[off:off + n - len(out)]
            if not chunk:
                break
            out += chunk
        buf[:len(out)] = out
        self.pos += len(out)
        return len(out)


class Index:
    """A PEP 503/691 package index, read with requests."""

    def __init__(self, url: str | None = None, timeout: float = 60.0, session=None,
                 settings: dict[str, str] | None = None):
        import requests

        settings = pip_settings() if settings is None else settings
        self.url = validate_index_url(url or settings.get("index-url") or default_index())
        self.timeout = timeout
        self.session = session or requests.Session()
        if settings.get("cert") and os.path.exists(settings["cert"]):
            self.session.verify = settings["cert"]
        self._pages: dict[str, list[Link]] = {}

    @property
    def shown(self) -> str:
        """The index URL for messages and reports: its credentials hidden."""
        return redact(self.url)

    def _get(self, url: str, **kw):
        import requests

        try:
            resp = self.session.get(url, timeout=self.timeout, **kw)
        except requests.RequestException as exc:
            detail = redact(str(exc).splitlines()[0][:160]) if str(exc) else ""
            raise IndexUnavailable(f"cannot reach the package index at {self.shown}: "
                                   f"{type(exc).__name__}: {detail}") from None
        if resp.status_code == 404:
            raise SyncError(f"the package index at {self.shown} has no "
                            f"{redact(url[len(self.url):] or url)}")
        if resp.status_code >= 400:
            kind = IndexUnavailable if resp.status_code >= 500 or resp.status_code == 429 else SyncError
            raise kind(f"the package index at {self.shown} answered HTTP {resp.status_code} for "
                       f"{redact(url)}")
        return resp

    def links(self, project: str) -> list[Link]:
        if project not in self._pages:
            page = urljoin(self.url, f"{project}/")
            resp = self._get(page, headers={
                "Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"})
            self._pages[project] = parse_project_page(resp.text, resp.headers.get("content-type", ""),
                                                      resp.url or page)
        return self._pages[project]

    def pins(self, version: str) -> WheelPins:
        """Read the default wheel's metadata for one torch release, without the wheel."""
        parse_version(version)
        links = self.links(PROJECT)
        picked = pick_wheel(links, version)
        if picked is None:
            raise SyncError(f"torch {version}: the index at {self.shown} has no CPython Linux x86_64 "
                            "wheel")
        link, py = picked
        if link.metadata is not None:
            resp = self._get(link.url + ".metadata")
            raw = resp.content
            if link.metadata and _SHA256_RE.match(link.metadata) and \
                    hashlib.sha256(raw).hexdigest() != link.metadata:
                raise SyncError(f"torch {version}: the metadata of {link.filename} does not match its "
                                "sha256 on the index")
            how = f"PEP 658 metadata ({len(raw)} bytes)"
        else:
            raw, how = self._metadata_by_ranges(link)
        return _pins_from_metadata_file(version, link.filename, raw, how, py,
                                        wheel_pythons(links, version))

    def _metadata_by_ranges(self, link: Link) -> tuple[bytes, str]:
        import requests

        try:
            head = self.session.head(link.url, timeout=self.timeout, allow_redirects=True)
        except requests.RequestException as exc:
            raise IndexUnavailable(f"cannot reach the package index at {self.shown}: "
                                   f"{type(exc).__name__}") from None
        size = int(head.headers.get("content-length") or 0)
        if head.status_code >= 400 or size <= 0 or "bytes" not in head.headers.get("accept-ranges", ""):
            raise SyncError(f"{link.filename}: the index offers neither PEP 658 metadata nor byte "
                            "ranges; refusing to download the whole wheel")
        remote = _RangeFile(self.session, head.url or link.url, size, self.timeout)
        try:
            with zipfile.ZipFile(io.BufferedReader(remote, buffer_size=1 << 16)) as zf:
                names = [n for n in zf.namelist()
                         if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
                if len(names) != 1:
                    raise SyncError(f"{link.filename}: no single .dist-info/METADATA in the wheel")
                raw = zf.read(names[0])
        except requests.RequestException as exc:
            raise IndexUnavailable(f"cannot reach the package index at {self.shown}: "
                                   f"{type(exc).__name__}") from None
        except zipfile.BadZipFile as exc:
            raise SyncError(f"{link.filename}: not a readable wheel ({exc})") from None
        return raw, (f"METADATA through HTTP ranges ({remote.fetched / 1e6:.1f} MB of "
                     f"{size / 1e6:.0f} MB)")


def _pins_from_metadata_file(version: str, wheel: str, raw: bytes, how: str,
                             python_tag: str = "cp312", pythons: tuple[str, ...] = ()) -> WheelPins:
    msg = HeaderParser().parsestr(raw.decode("utf-8", errors="replace"))
    if (msg.get("Name") or "").lower() != PROJECT or msg.get("Version") != version:
        raise SyncError(f"{wheel}: its metadata names {msg.get('Name')} {msg.get('Version')}, "
                        f"not torch {version}")
    return pins_from_metadata(version, wheel, msg.get("Requires-Python"),
                              msg.get_all("Requires-Dist") or [], how, python_tag, pythons)


# --------------------------------------------------------------------------------------------------
# The whole operation


@dataclass
class SyncResult:
    reports: list[ReleaseReport]
    lines: list[str]
    written: bool

    @property
    def agree(self) -> bool:
        return all(not r.differences for r in self.reports)


def sync_pytorch(matrix: str, versions: list[str] | None = None, index_url: str | None = None,
                 write: bool = False, index: Index | None = None,
                 progress: Callable[[str], None] | None = None) -> SyncResult:
    """Compare (and with `write`, update) the default variants' pins with the index's wheels."""
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
    reports = compare(k, pins)
    lines = format_report(reports, matrix, index.shown)
    written = False
    if write:
        written = write_matrix(matrix, [d for r in reports for d in r.differences])
    return SyncResult(reports, lines, written)
