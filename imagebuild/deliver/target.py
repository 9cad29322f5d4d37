"""Where images go: ``HOST[:PORT]/NAMESPACE``, checked against strict patterns before any value
reaches a registry URL, an engine call or a message, and which hosts count as loopback (the only
ones plain http is used for)."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from .. import reference
from ..errors import ImagebuildError

# strict patterns: every value that reaches a registry URL, an engine call or a message
_HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
_PORT = r"(?::[0-9]{1,5})?"
_IPV6 = r"\[[0-9A-Fa-f:.]{2,45}\]"
HOST_RE = re.compile(rf"^(?:{_HOST}|{_IPV6}){_PORT}\Z")
# a repository path, a tag and a digest: reference.py's grammar (used with .match)
NAMESPACE_RE = reference.PATH_RE
REPOSITORY_RE = NAMESPACE_RE
TAG_RE = reference.TAG_RE
DIGEST_RE = reference.DIGEST_RE
IMAGE_ID_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}\Z")

@dataclass(frozen=True)
class Target:
    """Where images go: ``HOST[:PORT]/NAMESPACE``."""

    host: str
    namespace: str

    def repository(self, image_id: str) -> str:
        """The repository (without host) for one image: ``NAMESPACE/<image-id>``."""
        if not IMAGE_ID_RE.match(image_id) or not REPOSITORY_RE.match(f"{self.namespace}/{image_id}"):
            raise ImagebuildError(f"image id {image_id!r} is not a valid repository name component")
        return f"{self.namespace}/{image_id}"

    def reference(self, image_id: str) -> str:
        """The engine's name for the repository: ``HOST[:PORT]/NAMESPACE/<image-id>``."""
        return f"{self.host}/{self.repository(image_id)}"


def split_host(host: str) -> tuple[str, int | None]:
    """``HOST[:PORT]`` (``[::1]:5000`` for IPv6) -> (host name or address, port or None).

    ValueError when the form is wrong (unbalanced brackets, a port that is not 1-65535, an IPv6
    address without brackets, a bracketed value that is not an IPv6 address)."""
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            raise ValueError("unbalanced '['")
        name, rest = host[1:end], host[end + 1:]
        ipaddress.IPv6Address(name)            # ValueError when it is not one
        if rest and not rest.startswith(":"):
            raise ValueError("text after ']'")
        port_text = rest[1:] if rest else None
    else:
        if host.count(":") > 1:
            raise ValueError("an IPv6 address needs brackets: [ADDRESS]:PORT")
        name, sep, port_text = host.partition(":")
        port_text = port_text if sep else None
    if port_text is None:
        return name, None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"port {port_text!r} is not 1-65535")
    return name, int(port_text)


def parse_target(text: str) -> Target:
    """``HOST[:PORT]/NAMESPACE`` -> Target, or ImagebuildError naming the argument."""
    host, sep, namespace = text.partition("/")
    if not sep or not HOST_RE.match(host) or not NAMESPACE_RE.match(namespace):
        raise ImagebuildError(
            f"{text!r} is not HOST[:PORT]/NAMESPACE (lower-case namespace components of "
            "letters, digits, '.', '_', '-'; an IPv6 address in brackets: [::1]:5000)",
            argument="--registry")
    try:
        split_host(host)
    except ValueError as exc:
        raise ImagebuildError(f"{host!r} is not HOST[:PORT]: {exc}", argument="--registry") from None
    return Target(host=host, namespace=namespace)


def is_loopback(host: str) -> bool:
    """True for a literal loopback address (127.0.0.0/8, ::1) or exactly ``localhost``, with or
    without a port. A name that merely starts with 127. or localhost is not loopback."""
    try:
        name, _port = split_host(host)
    except ValueError:
        return False
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
