"""The FROM lines of a Dockerfile, and the OCI labels that name the image the last stage starts
from. The build (pinning a locked base, normalising), the lock and the SBOM all read a recipe's
bases, so the grammar lives here, below all of them, once."""

from __future__ import annotations

import re
from . import labels as L

#: ``FROM [--platform=P] REF [AS NAME]``, one line
FROM_RE = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?\s*\Z", re.IGNORECASE)

#: the labels naming the image the last stage starts from, and its registry digest or engine id
BASE_NAME_LABEL = L.BASE_NAME
BASE_DIGEST_LABEL = L.BASE_DIGEST


def base_refs(dockerfile_text: str) -> list[str]:
    """The external images a Dockerfile starts from, in order (stage names excluded)."""
    stages: set[str] = set()
    refs: list[str] = []
    for line in dockerfile_text.splitlines():
        match = FROM_RE.match(line)
        if not match:
            continue
        ref, alias = match.group(1), match.group(2)
        if ref.lower() not in stages and ref not in refs and ref.lower() != "scratch":
            refs.append(ref)
        if alias:
            stages.add(alias.lower())
    return refs


def final_base(dockerfile_text: str) -> str | None:
    """The external image the last stage of a Dockerfile starts from (a stage name is followed
    to the image that stage starts from); None for ``scratch`` or no FROM."""
    stages: dict[str, str] = {}
    last = None
    for line in dockerfile_text.splitlines():
        match = FROM_RE.match(line)
        if not match:
            continue
        ref, alias = match.group(1), match.group(2)
        ref = stages.get(ref.lower(), ref)
        if alias:
            stages[alias.lower()] = ref
        last = ref
    return None if last is None or last.lower() == "scratch" else last
