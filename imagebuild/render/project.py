"""What matrix.yaml's `project:` says of the images (their source repository and licenses, for
the OCI labels), the date they are stamped with, and the build-time fallback for the source
label: the checkout's git remote."""

from __future__ import annotations

import functools
import subprocess
from urllib.parse import urlsplit, urlunsplit

from .. import labels as L
from ..knowledge import Knowledge
from ..sourcedate import rfc3339, source_epoch


SOURCE_LABEL = L.SOURCE


def project_source(k: Knowledge) -> str | None:
    """The project's repository as matrix.yaml states it (``project: {source: https://...}``), or
    None. Recipes take it from the matrix only, so the same matrix gives the same bytes in every
    clone; the git remote is a build-time fact (:func:`git_source_url`)."""
    return k.project.source or None


LICENSES_LABEL = L.LICENSES


def project_licenses(k: Knowledge) -> str | None:
    """The SPDX license expression matrix.yaml states for the images (``project: {licenses: ...}``,
    checked by grammar.py), or None: then the label is left out."""
    return k.project.licenses or None


def created_rfc3339(as_of: str) -> str:
    """``2026-11-21T00:00:00Z`` for as_of 2026-11-21: the source date images are stamped with
    (sourcedate.source_epoch)."""
    return rfc3339(source_epoch(as_of)) if as_of else as_of


@functools.lru_cache(maxsize=16)
def git_source_url(folder: str) -> str | None:
    """``git remote get-url origin`` of the repository holding ``folder`` when it is an https URL,
    with any credentials removed and checked by the matrix's URL grammar (it reaches a LABEL);
    None otherwise (no git, no repository, no origin, ssh, a URL the grammar refuses)."""
    try:
        proc = subprocess.run(["git", "-C", folder, "remote", "get-url", "origin"],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    url = proc.stdout.strip() if proc.returncode == 0 else ""
    if not url.lower().startswith("https://"):
        return None
    try:
        parts = urlsplit(url)
        netloc = parts.hostname or ""
        if parts.port:
            netloc += f":{parts.port}"
    except ValueError:
        return None
    clean = urlunsplit(("https", netloc, parts.path, "", ""))
    from ..knowledge.grammar import check as grammar_check   # only here: a cached resolve never needs it
    return clean if grammar_check("url", clean) is None else None
