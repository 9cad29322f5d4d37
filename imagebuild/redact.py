"""The one place credentials inside URLs are hidden for display.

An index or registry URL may carry credentials (`https://user:token@host/simple/`, a pip
`index-url` from PIP_INDEX_URL or pip.conf). Every message, progress line, log and report shows such
a URL through :func:`redact`; child processes receive the URL through their environment, never
their argv (see wheellock.compile_lock).
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


def redact(text: str) -> str:
    """``text`` (a URL, or any text holding URLs) with the password of every URL's userinfo
    replaced by ``***`` (``user:***@``); userinfo without a password is hidden whole (``***@``),
    since a token is often passed as the user name. Authorization values (``Authorization: Basic
    ...``, ``Bearer ...``) are hidden too: a registry that echoes a request's headers in its
    error would otherwise print the credentials."""
    text = _USERINFO.sub(_hide, str(text))
    text = _AUTH_VALUE.sub(_hide_auth, text)
    return _SCHEME_TOKEN.sub(lambda m: f"{m.group(1)} ***", text)
