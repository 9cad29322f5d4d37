"""The one place credentials are hidden, and host data made safe, for display.

An index or registry URL may carry credentials (`https://user:token@host/simple/`, a pip
`index-url` from PIP_INDEX_URL or pip.conf), and Docker spells a registry with credentials without
a scheme (`user:token@host:5000/cache`). Every message, progress line, log and report shows such a
value through :func:`redact`; child processes receive the URL through their environment, never
their argv (see wheellock.compile_lock).

:func:`shown` is what a terminal receives: redacted, and with every control character (ANSI escape
sequences, carriage returns, C1 controls, Unicode's bidirectional overrides) written as an escape,
so a GPU name, a registry's answer or a matrix string cannot retitle the terminal or hide text.
The CLI puts :class:`GuardedStream` over stdout and stderr for the whole of a command's run, so
every line every command prints goes through it (docs/hardening.md, "Output").
"""

from __future__ import annotations

import re

# scheme://userinfo@ : userinfo is everything up to the last '@' before the host's end (a password
# may hold '@' percent-encoded or not); no whitespace, quote or '/' inside it.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^\s/?#\"'<>@]*(?:@[^\s/?#\"'<>@]*)*)@")


def _hide(match: re.Match) -> str:
    user, sep, _secret = match.group(2).partition(":")
    shown = f"{user}:***" if sep else "***"   # a lone user part is often the token itself
    return f"{match.group(1)}{shown}@"


# an authorization value wherever a server's answer or a header dump echoes one: the scheme word
# (Basic, Bearer, token) and then the credential; a quoted or JSON "authorization": "..." too
_AUTH_VALUE = re.compile(r"(?i)\b(authorization|proxy-authorization)(\\?[\"']?\s*[:=]\s*\\?[\"']?\s*)"
                         r"(?:(basic|bearer|token|digest)\s+)?[^\s\"',;}]+")
_SCHEME_TOKEN = re.compile(r"(?i)\b(basic|bearer)\s+[A-Za-z0-9+/=._~-]{8,}")


def _hide_auth(match: re.Match) -> str:
    scheme = f"{match.group(3)} " if match.group(3) else ""
    return f"{match.group(1)}{match.group(2)}{scheme}***"


# Docker's spelling without a scheme: user:password@host[:port][/path]. The user part must not
# follow a '/', ':' or '@' (a path, a tag or a digest: NAME:TAG@sha256:... is a reference, not a
# credential), the host must not be a digest algorithm.
_BARE_USERINFO = re.compile(
    r"(?<![\w/:@.%+-])([A-Za-z0-9_.~%+-]+):([^\s/@\"'<>]+)@(?!sha256:|sha384:|sha512:)"
    r"(?=[A-Za-z0-9\[])")


def redact(text: str) -> str:
    """``text`` (a URL, or any text holding URLs) with the password of every URL's userinfo
    replaced by ``***`` (``user:***@``); userinfo without a password is hidden whole (``***@``),
    since a token is often passed as the user name. Authorization values (``Authorization: Basic
    ...``, ``Bearer ...``) are hidden too: a registry that echoes a request's headers in its
    error would otherwise print the credentials."""
    text = _USERINFO.sub(_hide, str(text))
    text = _BARE_USERINFO.sub(lambda m: f"{m.group(1)}:***@", text)
    text = _AUTH_VALUE.sub(_hide_auth, text)
    return _SCHEME_TOKEN.sub(lambda m: f"{m.group(1)} ***", text)


# C0 controls but tab and newline, DEL, C1 controls, and the bidirectional overrides and isolates
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(text: str) -> str:
    """``text`` as a terminal or log may receive it: redacted, control characters escaped."""
    return _CONTROL.sub(_escape, redact(text))


def scrub(document):
    """A JSON-able document with every string in it redacted (keys too): what ``--json`` prints.
    (JSON's own encoding escapes the control characters.)"""
    if isinstance(document, str):
        return redact(document)
    if isinstance(document, dict):
        return {scrub(k) if isinstance(k, str) else k: scrub(v) for k, v in document.items()}
    if isinstance(document, (list, tuple)):
        return [scrub(v) for v in document]
    return document


class GuardedStream:
    """A text stream that passes every write through :func:`shown` to the stream under it."""

    def __init__(self, raw) -> None:
        self._raw = raw

    def write(self, text: str) -> int:
        self._raw.write(shown(text))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name):  # flush, fileno, isatty, buffer, encoding...: the stream's own
        return getattr(self._raw, name)
