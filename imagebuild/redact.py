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


def redact(text: str) -> str:
    """``text`` (a URL, or any text holding URLs) with the password of every URL's userinfo
    replaced by ``***`` (``user:***@``); userinfo without a password is hidden whole (``***@``),
    since a token is often passed as the user name."""
    return _USERINFO.sub(_hide, str(text))
