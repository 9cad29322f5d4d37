"""Image references: the one grammar imagebuild accepts, everywhere.

It is the grammar of the distribution project's `reference` package, the one Docker, podman and
registries share::

    reference  := name [ ":" tag ] [ "@" digest ]
    name       := [ domain "/" ] path-component ( "/" path-component )*
    domain     := host [ ":" port ]          host: DNS labels joined by ".", or "[IPv6]"
    path-component := [a-z0-9]+ ( ( "." | "_" | "__" | "-"+ ) [a-z0-9]+ )*
    tag        := [A-Za-z0-9_] [A-Za-z0-9_.-]{0,127}
    digest     := "sha256:" 64 lowercase hex digits

The first component is a registry host only when it looks like one, as Docker decides: it holds a
"." or a ":", or it is "localhost", or it has an upper-case letter (`localhost:5000/hpc/x:1` is the
repository `hpc/x` on `localhost:5000`; `hpc/x` is the repository `hpc/x` on the default registry).
One rule is stricter than Docker's: a host is lower case, so `UPPER/x`, which Docker would send
to a host named UPPER, is refused as the mistyped repository it almost always is. A name is at
most 255 characters.

Engines also take an image ID where a reference goes (12 to 64 hex digits, `sha256:` or not):
`is_image_id` says which it is. Nothing here talks to an engine or a registry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import patterns
from .patterns import SHA256_DIGEST

NAME_MAX = 255

HOST = patterns.HOST                 # the one host grammar (patterns.py)
DOMAIN = patterns.HOST_PORT
COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
PATH = rf"{COMPONENT}(?:/{COMPONENT})*"
TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
DIGEST = SHA256_DIGEST

DOMAIN_RE = re.compile(rf"{DOMAIN}\Z")
PATH_RE = re.compile(rf"{PATH}\Z")
TAG_RE = re.compile(rf"{TAG}\Z")
DIGEST_RE = re.compile(rf"{DIGEST}\Z")
IMAGE_ID_RE = re.compile(r"(?:sha256:)?[0-9a-f]{12,64}\Z")


@dataclass(frozen=True)
class Reference:
    """A parsed image reference. `domain` is "" for the default registry."""

    domain: str
    path: str
    tag: str = ""
    digest: str = ""

    @property
    def repository(self) -> str:
        """The name without tag or digest, with its domain when it has one."""
        return f"{self.domain}/{self.path}" if self.domain else self.path

    def __str__(self) -> str:
        out = self.repository
        if self.tag:
            out += f":{self.tag}"
        if self.digest:
            out += f"@{self.digest}"
        return out


def _looks_like_domain(first: str) -> bool:
    return "." in first or ":" in first or first == "localhost" or first.lower() != first


def parse(text: str) -> Reference:
    """`text` as a Reference, or ValueError saying what is wrong with it."""
    if not isinstance(text, str) or not text:
        raise ValueError("an empty image reference")
    name, at, digest = text.partition("@")
    if at and not DIGEST_RE.match(digest):
        raise ValueError(f"{text!r}: the digest must be sha256: and 64 lowercase hex digits")
    tag = ""
    colon = name.rfind(":")
    if colon > name.rfind("/"):         # a ':' after the last '/' starts the tag, not a port
        name, tag = name[:colon], name[colon + 1:]
        if not TAG_RE.match(tag):
            raise ValueError(f"{text!r}: the tag {tag!r} must be 1 to 128 of letters, digits, '_', "
                             "'.', '-', not starting with '.' or '-'")
    if not name:
        raise ValueError(f"{text!r} has no name")
    if len(name) > NAME_MAX:
        raise ValueError(f"{text!r}: the name is longer than {NAME_MAX} characters")
    first, slash, rest = name.partition("/")
    domain = ""
    if slash and _looks_like_domain(first):
        if not DOMAIN_RE.match(first):
            raise ValueError(f"{text!r}: {first!r} is not a registry host[:port]")
        domain, name = first, rest
    if not PATH_RE.match(name):
        raise ValueError(f"{text!r}: the repository {name!r} must be lowercase letters and digits, "
                         "joined by '.', '_', '__', '-' or '/'")
    return Reference(domain, name, tag, digest)


def is_reference(text: object) -> bool:
    try:
        parse(text)   # type: ignore[arg-type]
    except ValueError:
        return False
    return True


def is_image_id(text: object) -> bool:
    """An engine's image ID or a prefix of it: 12 to 64 hex digits, with or without `sha256:`."""
    return isinstance(text, str) and bool(IMAGE_ID_RE.match(text))


def is_repo_digest(text: object) -> bool:
    """`[host/]name@sha256:<hex>` and no tag: how an engine records where an image came from."""
    try:
        ref = parse(text)   # type: ignore[arg-type]
    except ValueError:
        return False
    return bool(ref.digest) and not ref.tag


def is_reference_or_id(text: object) -> bool:
    return is_image_id(text) or is_reference(text)
