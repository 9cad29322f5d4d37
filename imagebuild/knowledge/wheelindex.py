"""The package index, read for torch's wheels without downloading them: its project page (PEP 503
HTML or PEP 691 JSON), the wheel for a release and interpreter, and the wheel's metadata, from the
PEP 658 metadata file when the index advertises it (its sha256 checked) or from the wheel's zip
central directory through HTTP range requests (a few MB at most). An index that offers neither is
refused, never downloaded from. The index is the one the user names, else pip's configured
`index-url`, else pip's own default."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from email.parser import HeaderParser
from html.parser import HTMLParser
from typing import Any, Callable
from urllib.parse import urldefrag, urljoin

from ..digests import sha256_bytes
from .. import httpio, untrusted
from ..redact import redact
from ..versions import NONE, parse_version
from .wheelpins import PROJECT, IndexUnavailable, SyncError, WheelPins, pins_from_metadata
from ..patterns import SHA256_HEX

# the interpreters whose wheel is read, in this order (the first a release has; pins do not differ)
PYTHON_TAGS = ("cp312", "cp311", "cp310", "cp313", "cp39", "cp38")
_LINUX_TAG = r"(manylinux1|manylinux2010|manylinux2014|manylinux_[0-9]+_[0-9]+|linux)_"
_PLATFORM_RE = re.compile("^" + _LINUX_TAG + r"x86_64\Z")
_URL_RE = re.compile(r"^https?://[A-Za-z0-9._~:/?#\[\]@!$&()*+,;=%-]+\Z")
_SHA256_RE = re.compile(rf"^{SHA256_HEX}\Z")


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


def _json_links(body: str, page_url: str) -> list[Link]:
    """A PEP 691 page read as untrusted data: every field of the type PEP 691 gives it, or one
    SyncError naming the file entry (a malformed page was a KeyError or AttributeError)."""
    from .. import untrusted as U

    links = []
    try:
        doc = U.loads(body)
        files = U.arr(doc, "files", [])
        for i, f in enumerate(files):
            if not isinstance(f, dict):
                raise U.BadData(f"files[{i}] is not an object")
            meta = f.get("core-metadata", f.get("dist-info-metadata"))
            if meta is not None and not isinstance(meta, (bool, str, dict)):
                raise U.BadData(f"files[{i}]: core-metadata is {type(meta).__name__}")
            sha = U.text(U.obj(f, "hashes", {}), "sha256", None)
            upload = U.text(f, "upload-time", None)
            yanked = f.get("yanked", False)
            if not isinstance(yanked, (bool, str)):
                raise U.BadData(f"files[{i}]: yanked is {type(yanked).__name__}")
            url = urljoin(page_url, U.text(f, "url"))
            links.append(Link(U.text(f, "filename"), urldefrag(url)[0], sha,
                              _metadata_attr(meta if not isinstance(meta, dict)
                                             else U.string_map(f, "core-metadata" if "core-metadata" in f
                                                               else "dist-info-metadata")),
                              upload, bool(yanked)))
    except U.BadData as exc:
        raise SyncError(f"the index's JSON page at {redact(page_url)} is malformed: {exc}") from None
    return links


def parse_project_page(body: str, content_type: str, page_url: str) -> list[Link]:
    """Links of a PEP 503 (HTML) or PEP 691 (JSON) project page."""
    links = []
    if "json" in content_type:
        return _json_links(body, page_url)
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
        # PEP 592: a yanked file carries data-yanked (with or without a reason)
        links.append(Link(filename, url, sha, _metadata_attr(meta), yanked="data-yanked" in a))
    return links


def pick_wheel(links: list[Link], version: str, platform: str = "x86_64") -> tuple[Link, str] | None:
    """The default wheel of a torch release for Linux `platform`: for the first interpreter of
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
                if any(t.interpreter == py and t.abi == py and _platform_tag(t.platform, platform)
                       for t in tags)]
        if fits:
            best = max(fits, key=lambda f: (f[0], f[1]))
            return best[2], py
    return None


def _platform_tag(tag: str, platform: str) -> bool:
    """A manylinux (or plain linux) wheel platform tag for `platform`."""
    return bool(re.fullmatch(_LINUX_TAG + re.escape(platform), tag))


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


#: the most read of a project page (torch's PEP 691 page is a few MB) and of a PEP 658 metadata file
MAX_PAGE_BYTES = 16 * 1024 * 1024
MAX_METADATA_BYTES = 4 * 1024 * 1024
#: the most entries of a wheel's central directory read (torch's has about 15,000)
MAX_ZIP_ENTRIES = 200_000
def ranged_get(session, url: str, start: int, length: int, timeout: float,
               deadline: float | None) -> bytes:
    """Bytes start..start+length-1 of ``url``: the answer must be a 206 whose Content-Range is the
    range asked, and no more than ``length`` bytes are read (a server sending a 547 MB answer to a
    512 KiB range is refused at the first byte past it), within ``deadline``."""
    import requests

    end = start + length - 1
    name = url.rsplit("/", 1)[-1].split("?", 1)[0][:80]
    try:
        resp = httpio.get(session, url, deadline, IndexUnavailable(
            f"{name}: no answer to a byte range within its deadline; given up"),
            headers={"Range": f"bytes={start}-{end}"}, timeout=timeout)
    except requests.RequestException as exc:
        raise IndexUnavailable(f"cannot reach the package index: {type(exc).__name__}") from None
    if resp.status_code != 206:
        resp.close()
        raise SyncError(f"the index ignores byte ranges for {name} (HTTP {resp.status_code}); "
                        "refusing to download the whole wheel")
    got = (resp.headers.get("Content-Range") or "").strip()
    if not re.fullmatch(rf"bytes {start}-{end}/(\d{{1,19}}|\*)", got):
        resp.close()
        raise SyncError(f"{name}: the index answered a range of bytes {start}-{end} with "
                        f"Content-Range {got[:60]!r}; refused")
    return httpio.read_capped(resp, length, f"{name}: bytes {start}-{end}", deadline,
                              refuse=SyncError, late=IndexUnavailable)


class _RangeFile(io.RawIOBase):
    """A read-only, seekable view of a remote file through HTTP range requests, in blocks."""

    BLOCK = 1 << 19

    def __init__(self, session, url: str, size: int, timeout: float, deadline: float | None = None):
        super().__init__()
        self.session, self.url, self.size, self.timeout = session, url, size, timeout
        self.deadline = deadline
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
            data = ranged_get(self.session, self.url, start, end - start + 1, self.timeout,
                              self.deadline)
            if len(data) != end - start + 1:
                raise SyncError(f"{self.url.rsplit('/', 1)[-1]}: {len(data)} bytes came for a range "
                                f"of {end - start + 1}")
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

        cap = kw.pop("cap", MAX_PAGE_BYTES)
        deadline = httpio.deadline_in()
        what = f"the package index at {self.shown}: {redact(url)}"
        try:
            resp = httpio.get(self.session, url, deadline, IndexUnavailable(
                f"{what}: no answer within its deadline; given up"), timeout=self.timeout, **kw)
            if resp.status_code < 400:
                httpio.read_capped(resp, cap, what, deadline, refuse=SyncError, late=IndexUnavailable)
        except requests.RequestException as exc:
            detail = redact(str(exc).splitlines()[0][:160]) if str(exc) else ""
            raise IndexUnavailable(f"cannot reach the package index at {self.shown}: "
                                   f"{type(exc).__name__}: {detail}") from None
        if resp.status_code >= 400:
            resp.close()
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
            resp = self._get(link.url + ".metadata", cap=MAX_METADATA_BYTES)
            raw = resp.content
            if link.metadata and _SHA256_RE.match(link.metadata) and \
                    sha256_bytes(raw) != link.metadata:
                raise SyncError(f"torch {version}: the metadata of {link.filename} does not match its "
                                "sha256 on the index")
            how = f"PEP 658 metadata ({len(raw)} bytes)"
        else:
            raw, how = self._metadata_by_ranges(link)
        return _pins_from_metadata_file(version, link.filename, raw, how, py,
                                        wheel_pythons(links, version))

    def wheel_evidence(self, version: str, platform: str, until: str | None = None, known=None,
                       whole: bool = False):
        """The wheel `pip install torch==version` gets on Linux `platform` (CPython 3.12, else the
        first interpreter of PYTHON_TAGS it has): its name, sha256 and size from the index, and the
        CUDA and commit its torch/version.py names, read through HTTP ranges. None: the index has
        no Linux wheel of the release for that platform. `until` (YYYY-MM-DD): only the files
        uploaded by that day count (an audit of a matrix as of that day). A CUDA build's
        architectures come from its libtorch_python.so (one range of about 10 MB), unless `known`,
        the matrix's record, already has them for a wheel of the same sha256. ``whole``: the
        wheel is downloaded whole instead, its sha256 checked against the index's, and every fact
        read from those bytes (wheelwhole.py): what `sync --write` records."""
        from .model import WheelEvidence
        from .wheelevidence import (ARCH_COMPRESSED_MAX, ARCH_LIBRARY, ARCH_LIBRARY_MAX, SOURCE,
                                    VERSION_PY, VERSION_PY_MAX, read_arch, read_version_py)

        parse_version(version)
        links = self.links(PROJECT)
        if until is not None:
            links = [lk for lk in links if lk.upload_time and lk.upload_time[:10] <= until]
        picked = pick_wheel(links, version, platform)
        if picked is None:
            return None
        link, _py = picked
        if not (link.sha256 and _SHA256_RE.match(link.sha256)):
            raise SyncError(f"{link.filename}: the index gives no sha256 for it")
        if whole:
            from .wheelwhole import whole_wheel_facts
            cuda, commit, arch, size = whole_wheel_facts(self, link, known)
            return WheelEvidence(version, platform, link.filename, link.sha256, cuda, commit, SOURCE,
                                 size, arch=arch)
        zf, remote, size = self._remote_zip(link, "no byte ranges")
        with zf:
            try:
                info = zf.getinfo(VERSION_PY)
            except KeyError:
                raise SyncError(f"{link.filename}: no {VERSION_PY} in the wheel") from None
            if info.file_size > VERSION_PY_MAX:
                raise SyncError(f"{link.filename}: {VERSION_PY} is {info.file_size} bytes, over "
                                f"{VERSION_PY_MAX}")
            text = self._read_member(zf, VERSION_PY, link.filename).decode("utf-8", errors="replace")
            cuda, commit = read_version_py(text, link.filename)
            arch = None
            if cuda != NONE:
                if known is not None and known.sha256 == link.sha256 and known.arch:
                    arch = known.arch
                else:
                    lib = self._member_by_range(link, zf, remote, ARCH_LIBRARY, ARCH_COMPRESSED_MAX,
                                                ARCH_LIBRARY_MAX)
                    arch = read_arch(lib, link.filename)
        return WheelEvidence(version, platform, link.filename, link.sha256, cuda, commit, SOURCE, size,
                             arch=arch)

    def _member_by_range(self, link: Link, zf, remote, name: str, max_compressed: int,
                         max_size: int) -> bytes:
        """One member of a remote wheel in one range request (a large member read block by block
        would take hundreds of requests), bounded before and while it is inflated."""
        import struct
        import zlib

        import requests

        try:
            info = zf.getinfo(name)
        except KeyError:
            raise SyncError(f"{link.filename}: no {name} in the wheel") from None
        if info.compress_size > max_compressed or info.file_size > max_size or \
                info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise SyncError(f"{link.filename}: {name} is {info.compress_size} bytes compressed, "
                            f"{info.file_size} inflated (at most {max_compressed} and {max_size} "
                            "are read, stored or deflated)")
        try:
            head = self._range(remote.url, info.header_offset, 30)
            if len(head) != 30 or head[:4] != b"PK\x03\x04":
                raise SyncError(f"{link.filename}: no local header for {name} where the index says")
            start = info.header_offset + 30 + sum(struct.unpack("<HH", head[26:30]))
            raw = self._range(remote.url, start, info.compress_size)
        except requests.RequestException as exc:
            raise IndexUnavailable(f"cannot reach the package index at {self.shown}: "
                                   f"{type(exc).__name__}") from None
        if len(raw) != info.compress_size:
            raise SyncError(f"{link.filename}: {name}: {len(raw)} bytes came, not {info.compress_size}")
        if info.compress_type == zipfile.ZIP_STORED:
            data = raw
        else:
            inflater = zlib.decompressobj(-15)
            try:
                data = inflater.decompress(raw, max_size + 1)
            except zlib.error as exc:
                raise SyncError(f"{link.filename}: {name} does not inflate ({exc})") from None
        if len(data) != info.file_size or zlib.crc32(data) != info.CRC:
            raise SyncError(f"{link.filename}: {name} is not what the wheel's directory says "
                            "(size or CRC-32)")
        return data

    def _range(self, url: str, start: int, length: int) -> bytes:
        """Bytes start..start+length-1 (ranged_get: never more than asked, within a deadline)."""
        return ranged_get(self.session, url, start, length, self.timeout, httpio.deadline_in())

    def _remote_zip(self, link: Link, lacking: str):
        """(ZipFile over the remote wheel through HTTP ranges, the range reader, its size)."""
        import requests

        try:
            head = self.session.head(link.url, timeout=self.timeout, allow_redirects=True)
        except requests.RequestException as exc:
            raise IndexUnavailable(f"cannot reach the package index at {self.shown}: "
                                   f"{type(exc).__name__}") from None
        size = httpio.declared_length(head, f"{link.filename}: HEAD", SyncError) or 0
        if head.status_code >= 400 or size <= 0 or "bytes" not in head.headers.get("accept-ranges", ""):
            raise SyncError(f"{link.filename}: the index offers {lacking}; refusing to download "
                            "the whole wheel")
        remote = _RangeFile(self.session, head.url or link.url, size, self.timeout,
                            httpio.deadline_in())
        try:
            zf = zipfile.ZipFile(io.BufferedReader(remote, buffer_size=1 << 16))
        except requests.RequestException as exc:
            raise IndexUnavailable(f"cannot reach the package index at {self.shown}: "
                                   f"{type(exc).__name__}") from None
        except untrusted.ZIP_ERRORS as exc:
            raise SyncError(f"{link.filename}: not a readable wheel ({untrusted.zip_error(exc)})") from None
        if len(zf.infolist()) > MAX_ZIP_ENTRIES:
            raise SyncError(f"{link.filename}: {len(zf.infolist())} entries in the wheel's directory "
                            f"(at most {MAX_ZIP_ENTRIES} are read)")
        return zf, remote, size

    def _read_member(self, zf, name: str, wheel: str = "a wheel") -> bytes:
        import requests

        try:
            return zf.read(name)
        except requests.RequestException as exc:
            raise IndexUnavailable(f"cannot reach the package index at {self.shown}: "
                                   f"{type(exc).__name__}") from None
        except untrusted.ZIP_ERRORS as exc:
            raise SyncError(f"{wheel}: unreadable {name} ({untrusted.zip_error(exc)})") from None

    def _metadata_by_ranges(self, link: Link) -> tuple[bytes, str]:
        zf, remote, size = self._remote_zip(link, "neither PEP 658 metadata nor byte ranges")
        with zf:
            names = [n for n in zf.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
            if len(names) != 1:
                raise SyncError(f"{link.filename}: no single .dist-info/METADATA in the wheel")
            raw = self._read_member(zf, names[0], link.filename)
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
