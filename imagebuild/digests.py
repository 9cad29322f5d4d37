"""The sha256 of a file, read in chunks: how the source cache, base images, the lock file and the
normalising step check the bytes they were promised."""

from __future__ import annotations

import hashlib
import os

from .errors import ImagebuildError


def sha256_file(path: str | os.PathLike) -> str:
    try:
        with open(path, "rb") as fh:
            digest = hashlib.file_digest(fh, "sha256")
    except FileNotFoundError:
        raise ImagebuildError("file not found (run `imagebuild generate` first?)", file=str(path)) from None
    except OSError as exc:
        raise ImagebuildError(f"cannot read ({type(exc).__name__})", file=str(path)) from None
    return digest.hexdigest()
