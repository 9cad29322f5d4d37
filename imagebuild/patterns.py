"""The one table of value grammars (and the one host-name grammar): every kind of string imagebuild checks by pattern (a matrix
field, a value that reaches a recipe's shell line, a digest read from an engine or a lock), with
the words a refusal describes it by. knowledge/grammar.py checks the matrix's fields against it,
render/checked.py the renderer's values; the sha256 forms below are the only spelling of a
64-hex digest in the package. Each pattern must match the whole value (use fullmatch: a `$`
anchor accepts a trailing newline). Imports nothing of imagebuild: every stage may use it."""

from __future__ import annotations

import re

#: one label of a host name (RFC 1123): letters, digits and inner hyphens, at most 63 (a container's
#: host name is one such label)
HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_LOWER_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
#: a host name as registries, repositories and URLs are written here: lower-case labels and dots
DNS_NAME = rf"{_LOWER_LABEL}(?:\.{_LOWER_LABEL})*"
#: a registry's or a server's host: a DNS name or a bracketed IPv6 address
HOST = rf"(?:{DNS_NAME}|\[[0-9A-Fa-f:.]{{2,45}}\])"
#: the same with a port
HOST_PORT = rf"{HOST}(?::[0-9]{{1,5}})?"

#: a sha256 in hex, as every digest, lock hash and image ID spells it
SHA256_HEX = r"[0-9a-f]{64}"
#: the OCI form of it: sha256:<hex>
SHA256_DIGEST = rf"sha256:{SHA256_HEX}"

PATTERNS = {
    "id": re.compile(r"[a-z0-9][a-z0-9._-]{0,127}"),
    "version": re.compile(r"[0-9]+(?:\.[0-9]+){0,4}"),
    "driver": re.compile(r"[0-9]{3}(?:\.[0-9]{1,3}){0,2}"),
    "sha256": re.compile(SHA256_HEX),
    "digest": re.compile(SHA256_DIGEST),
    "fingerprint": re.compile(r"[0-9A-F]{40}"),
    "keyid": re.compile(r"[0-9A-F]{16}"),
    "commit": re.compile(r"[0-9a-f]{40}"),
    "word": re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"),
    "package": re.compile(r"[A-Za-z0-9][A-Za-z0-9+._-]{0,127}"),
    "url": re.compile(r"https://[A-Za-z0-9.-]+(?:/[A-Za-z0-9._~%+-]+)*/?"),
    "date": re.compile(r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"),
    "month": re.compile(r"[0-9]{4}-(?:0[1-9]|1[0-2])(?:-(?:0[1-9]|[12][0-9]|3[01]))?"),
    "oci": re.compile(r"[a-z0-9]+/[a-z0-9]+(?:/[a-z0-9]+)?"),
    # an SPDX license expression: ids (or LicenseRef-...) joined by AND, OR, WITH, with parentheses
    "spdx": re.compile(r"\(*[A-Za-z0-9][A-Za-z0-9.-]{0,63}\+?\)*"
                       r"(?: (?:AND|OR|WITH) \(*[A-Za-z0-9][A-Za-z0-9.-]{0,63}\+?\)*){0,15}"),
    # what only the renderer checks: an absolute path in an image, a host name, an environment value
    "path": re.compile(r"/[A-Za-z0-9._/-]*"),
    "host": re.compile(DNS_NAME),
    "env": re.compile(r"[A-Za-z0-9 ,.:;/+_=<>^-]*"),
}

DESCRIBE = {
    "id": "lower-case letters, digits, '.', '_' and '-', starting with a letter or digit",
    "version": "digits and dots, e.g. 12.4.1",
    "driver": "e.g. 535.104.05 or 580",
    "sha256": "64 lower-case hex digits",
    "digest": "sha256: and 64 lower-case hex digits",
    "fingerprint": "40 upper-case hex digits",
    "keyid": "16 upper-case hex digits",
    "commit": "a git commit: 40 lower-case hex digits",
    "word": "letters, digits, '.', '_' and '-'",
    "package": "a package name: letters, digits, '+', '.', '_' and '-'",
    "ref": "an image reference such as ubuntu:24.04 or name/path:tag[@sha256:...]",
    "url": "an https URL of letters, digits and ._~%+- path segments",
    "date": "a date YYYY-MM-DD",
    "month": "YYYY-MM or YYYY-MM-DD",
    "oci": "an OCI platform such as linux/amd64",
    "spdx": "an SPDX license expression such as Apache-2.0 or (MIT OR BSD-3-Clause)",
    "path": "an absolute path of letters, digits and ._/-",
    "host": "a lower-case host name",
    "env": "letters, digits, spaces and ,.:;/+_=<>^-",
}


def is_sha256_hex(text) -> bool:
    return isinstance(text, str) and PATTERNS["sha256"].fullmatch(text) is not None
