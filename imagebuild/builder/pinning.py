"""Building FROM the base images images.lock records (`imagebuild build --locked`).

The committed recipes name their bases by tag (``FROM imagebuild/base:debian-bookworm``,
``FROM ubuntu:24.04``): a tag is what a reader understands and what a site's mirror serves. A tag
can move, though, and ``--locked`` promises that the build starts from the very base the lock
recorded. Checking the tag's id before the build (``commands.build.check_locked``) leaves the
whole build for the tag to move under it (a concurrent ``imagebuild base``, a ``docker pull``), so
the build itself names the base by content:

- a base the lock records with a registry digest (``NAME@sha256:...``, an image that came from a
  registry) is built FROM that digest: the engine uses its local copy when it holds that digest and
  pulls exactly those bytes otherwise;
- a base with only an engine id (an image that never went through a registry, such as the
  debootstrap base ``imagebuild base`` makes) is built FROM a tag this build creates on that id
  (``imagebuild-locked/base:<id hex>-<token>``), because neither of Docker 20.10's builders accepts
  an image id in FROM; the tag is removed after the build, and a base the engine no longer holds
  is refused with one line.

The rendered Dockerfile stays as generated; the build reads ``Dockerfile.locked`` beside it, which
differs only in its FROM lines. The image's ``org.opencontainers.image.base.name`` label keeps the
recipe's reference and ``base.digest`` states the locked digest or id.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from ..errors import BuildError, EngineRefused, NoSuchImage
from ..reference import DIGEST_RE, is_repo_digest
from ..dockerfile import BASE_DIGEST_LABEL, BASE_NAME_LABEL, FROM_RE, base_refs, final_base

PIN_REPOSITORY = "imagebuild-locked/base"
LOCKED_DOCKERFILE = "Dockerfile.locked"


@dataclass
class Pinned:
    """A Dockerfile with its locked FROM lines, the temporary tags made for it, and the
    base labels the image gets."""
    text: str
    temporary: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)


def pin_text(text: str, pins: dict[str, str]) -> str:
    """``text`` with every ``FROM <ref>`` whose ref is in ``pins`` rewritten to ``pins[ref]``
    (stage names, ``--platform`` and the rest of the line kept)."""
    out = []
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        match = FROM_RE.match(body)
        if match and match.group(1) in pins:
            start, end = match.span(1)
            line = f"{body[:start]}{pins[match.group(1)]}{line[end:]}"
        out.append(line)
    return "".join(out)


def pin_bases(engine, text: str, locked: dict[str, dict], *, what: str) -> Pinned:
    """Pin the bases of Dockerfile ``text`` to ``locked`` (FROM ref -> the lock's
    ``{"id", "digest"}``): by registry digest where one is recorded, else by a temporary tag on
    the recorded id (created here; the caller removes ``temporary`` after the build). ``what``
    names the image in errors. A base the lock records nothing for is refused. ``engine`` is an
    imagebuild Engine."""
    pins: dict[str, str] = {}
    digests: dict[str, str] = {}
    temporary: list[str] = []
    try:
        for ref in base_refs(text):
            if ref not in locked:
                continue
            digest, image_id = locked[ref].get("digest"), locked[ref].get("id")
            if isinstance(digest, str) and is_repo_digest(digest):
                pins[ref], digests[ref] = digest, digest.split("@", 1)[1]
                continue
            if not (isinstance(image_id, str) and DIGEST_RE.match(image_id)):
                raise BuildError(f"{what}: images.lock records no id or digest for its base {ref}; "
                                 "a locked build cannot name it (run `imagebuild lock` with the base "
                                 "in the engine)")
            tag = f"{image_id.split(':', 1)[1]}-{secrets.token_hex(4)}"
            try:
                engine.tag(image_id, PIN_REPOSITORY, tag)
            except NoSuchImage:
                raise BuildError(f"{what}: the locked base {ref} ({image_id[:19]}) is no longer in the "
                                 "engine; rebuild or pull it, or run `imagebuild lock` to accept "
                                 "another") from None
            except EngineRefused as exc:
                raise BuildError(f"{what}: cannot tag the locked base {image_id[:19]}: "
                                 f"{exc.detail}") from None
            temporary.append(f"{PIN_REPOSITORY}:{tag}")
            pins[ref], digests[ref] = temporary[-1], image_id
    except BaseException:
        unpin(engine, temporary)
        raise
    final = final_base(text)
    labels = {BASE_NAME_LABEL: final, BASE_DIGEST_LABEL: digests[final]} if final in digests else {}
    return Pinned(pin_text(text, pins), temporary, labels)


def unpin(engine, temporary: list[str]) -> None:
    """Remove the temporary tags (untag only: the image keeps its other names and children)."""
    for tag in temporary:
        try:
            engine.untag(tag)
        except Exception:  # noqa: BLE001 - already gone, or the engine went away: nothing to undo
            pass
