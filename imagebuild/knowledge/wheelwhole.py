"""A wheel read whole, for what `knowledge sync --write` records (docs/hardening.md, "Forged
provenance").

An audit reads a wheel's facts (torch/version.py's CUDA and commit, libtorch_python.so's
architectures) through HTTP byte ranges: a few MB of a wheel of up to 1 GB, each member checked
against the CRC-32 of the wheel's own directory. Those bytes were never checked against the sha256
the index's page names, so a mirror that edits a member and fixes its CRC-32 passes. What is
written into matrix.yaml beside that sha256 must come from the bytes the sha256 covers: the wheel
is streamed whole into a private temporary file (bounded, under a deadline, hashed as it comes),
refused unless its sha256 is the index's, and read from there.
"""

from __future__ import annotations

import tempfile
import zipfile
from pathlib import Path

from ..digests import sha256_hasher
from .. import httpio, untrusted
from ..versions import NONE
from .wheelpins import IndexUnavailable, SyncError

#: the largest wheel read whole (torch's CUDA wheels are under 1 GB)
MAX_WHEEL_BYTES = 4 << 30
#: seconds one wheel's download may take in all (IMAGEBUILD_HTTP_DEADLINE overrides it)
WHEEL_DEADLINE_S = 3600.0


def whole_wheel_facts(index, link, known=None) -> tuple[str, str, tuple[str, ...] | None, int]:
    """(cuda, commit, arch, size) of ``link``'s wheel, from its whole bytes, whose sha256 is the
    index's: SyncError when it is not, IndexUnavailable when the index does not answer in time."""
    import requests

    from .wheelevidence import (ARCH_COMPRESSED_MAX, ARCH_LIBRARY, ARCH_LIBRARY_MAX, VERSION_PY,
                                VERSION_PY_MAX, read_arch, read_version_py)

    what = f"{link.filename}: the whole wheel"
    with tempfile.TemporaryDirectory(prefix="imagebuild-wheel-") as tmp:
        path = Path(tmp) / "wheel.zip"
        digest, size = sha256_hasher(), 0
        deadline = httpio.deadline_in(httpio.exchange_seconds(WHEEL_DEADLINE_S))
        try:
            resp = httpio.get(index.session, link.url, deadline, IndexUnavailable(
                f"{what}: no answer within its deadline; given up"), timeout=index.timeout)
            if resp.status_code != 200:
                resp.close()
                raise SyncError(f"{what}: the index answered HTTP {resp.status_code}")
            with open(path, "xb") as out:
                for chunk in httpio.chunks(resp, MAX_WHEEL_BYTES, what, deadline, refuse=SyncError,
                                           late=IndexUnavailable):
                    digest.update(chunk)
                    size += len(chunk)
                    out.write(chunk)
        except requests.RequestException as exc:
            raise IndexUnavailable(f"{what}: cannot reach the package index ({type(exc).__name__})") from None
        except OSError as exc:
            raise SyncError(f"{what}: cannot write a temporary copy ({exc.strerror})") from None
        if digest.hexdigest() != link.sha256:
            raise SyncError(f"{what}: sha256 {digest.hexdigest()} is not the {link.sha256} the index's "
                            "page names; nothing recorded")
        try:
            with zipfile.ZipFile(path) as zf:
                text = _member(zf, VERSION_PY, VERSION_PY_MAX, VERSION_PY_MAX, link.filename)
                cuda, commit = read_version_py(text.decode("utf-8", errors="replace"), link.filename)
                arch = None
                if cuda != NONE:
                    if known is not None and known.sha256 == link.sha256 and known.arch:
                        arch = known.arch
                    else:
                        arch = read_arch(_member(zf, ARCH_LIBRARY, ARCH_COMPRESSED_MAX, ARCH_LIBRARY_MAX,
                                                 link.filename), link.filename)
        except untrusted.ZIP_ERRORS as exc:
            raise SyncError(f"{link.filename}: not a readable wheel ({untrusted.zip_error(exc)})") from None
    return cuda, commit, arch, size


def _member(zf: zipfile.ZipFile, name: str, max_compressed: int, max_size: int, wheel: str) -> bytes:
    """One member, its sizes bounded before it is inflated (zipfile checks its CRC-32)."""
    try:
        info = zf.getinfo(name)
    except KeyError:
        raise SyncError(f"{wheel}: no {name} in the wheel") from None
    if info.compress_size > max_compressed or info.file_size > max_size:
        raise SyncError(f"{wheel}: {name} is {info.compress_size} bytes compressed, {info.file_size} "
                        f"inflated (at most {max_compressed} and {max_size} are read)")
    return zf.read(name)
