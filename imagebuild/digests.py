"""sha256, the one hash imagebuild checks bytes with: of a file read in chunks (the source cache,
base images, the lock file, the normalising step), of bytes or text in memory, streamed in pieces,
and as an OCI digest (``sha256:<hex>``: manifests, referrers, signatures). Nothing else in
imagebuild calls hashlib (tests/house/test_layout.py keeps it so)."""

from __future__ import annotations

import hashlib
import os

from .errors import ImagebuildError


def sha256_file(path: str | os.PathLike) -> str:
    try:
        with open(path, "rb") as fh:
            digest = hashlib.file_digest(fh, "sha256")
    except FileNotFoundError:
        raise ImagebuildError("file not found", file=str(path)) from None
    except OSError as exc:
        raise ImagebuildError(f"cannot read ({type(exc).__name__})", file=str(path)) from None
    return digest.hexdigest()


def sha256_bytes(data: bytes | str) -> str:
    """The hex sha256 of bytes (text: of its UTF-8 bytes)."""
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


def sha256_raw(data: bytes | str) -> bytes:
    """The 32 bytes of the sha256 of bytes (text: of its UTF-8 bytes)."""
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).digest()


def sha256_hasher():
    """A sha256 fed in pieces (``.update``, ``.hexdigest``): for what is hashed as it streams."""
    return hashlib.sha256()


def sha256_digest(data: bytes) -> str:
    """The OCI content digest of `data`: ``sha256:<hex>``."""
    return "sha256:" + sha256_bytes(data)
