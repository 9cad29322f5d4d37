"""Reading data that came from outside (a registry's answer, a package index's page, a lock
another builder wrote, a zip's central directory): typed, bounded, one way (docs/hardening.md,
"Typed reading").

- ``loads(text)``: JSON where an object holding one key twice, an integer of more than
  ``MAX_INT_DIGITS`` digits (Python would spend quadratic time on one of 5,000 digits, or refuse
  it with a ValueError no caller expects), a float that is not finite or NaN/Infinity are refused
  as :class:`BadData` (a ValueError) with a message for one line.
- ``obj``, ``arr``, ``text``, ``number``: a value of the expected JSON type under a key, or
  BadData naming the key: a registry whose ``annotations`` is a string, or whose ``errors`` is an
  object, is a one-line refusal, never an AttributeError.

Imports nothing from imagebuild: every stage may use it.
"""

from __future__ import annotations

import json
import math
import struct
import zipfile
import zlib

#: the longest integer any of our documents holds legitimately is a byte count (< 20 digits)
MAX_INT_DIGITS = 30


class BadData(ValueError):
    """Data from outside that is not what it must be; ``str()`` is one line for the user, and
    ``line``/``column`` (1-based) say where in the text, when known."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        super().__init__(message)
        self.line, self.column = line, column


def _pairs(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise BadData(f"the key {key[:60]!r} appears twice in one object")
        out[key] = value
    return out


def _int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise BadData(f"an integer of {len(digits.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(digits)


def _float(digits: str) -> float:
    if len(digits) > 64:
        raise BadData(f"a number written with {len(digits)} characters (at most 64)")
    value = float(digits)
    if not math.isfinite(value):
        raise BadData(f"a number out of range ({digits[:20]}...)")
    return value


def _constant(name: str):
    raise BadData(f"{name} is not JSON")


def loads(data: str | bytes) -> object:
    """JSON ``data`` read strictly (see the module's doc); BadData for every refusal, the
    syntax errors of json included (with line and column in the message)."""
    try:
        return json.loads(data, object_pairs_hook=_pairs, parse_int=_int, parse_float=_float,
                          parse_constant=_constant)
    except BadData:
        raise
    except json.JSONDecodeError as exc:
        raise BadData(f"malformed JSON ({exc.msg}, line {exc.lineno} column {exc.colno})",
                      exc.lineno, exc.colno) from None
    except (UnicodeDecodeError, RecursionError, ValueError) as exc:
        raise BadData(f"malformed JSON ({type(exc).__name__})") from None


def _typed(doc, key: str, kind, what: str, default):
    if not isinstance(doc, dict):
        raise BadData(f"expected a JSON object holding {key!r}, got {type(doc).__name__}")
    if key not in doc or doc[key] is None:
        if default is _REQUIRED:
            raise BadData(f"{key!r} is missing")
        return default
    value = doc[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise BadData(f"{key!r} is {type(value).__name__}, not {what}")
    return value


_REQUIRED = object()


def obj(doc, key: str, default=_REQUIRED) -> dict:
    """``doc[key]``, a JSON object (``default`` when missing or null, if given)."""
    return _typed(doc, key, dict, "an object", default)


def arr(doc, key: str, default=_REQUIRED) -> list:
    """``doc[key]``, a JSON array."""
    return _typed(doc, key, list, "an array", default)


def text(doc, key: str, default=_REQUIRED) -> str:
    """``doc[key]``, a JSON string."""
    return _typed(doc, key, str, "a string", default)


def number(doc, key: str, default=_REQUIRED) -> int:
    """``doc[key]``, a JSON integer (true and false are not numbers)."""
    return _typed(doc, key, int, "an integer", default)


def string_map(doc, key: str, default=_REQUIRED) -> dict[str, str]:
    """``doc[key]``, an object whose values are all strings (OCI annotations, labels)."""
    value = obj(doc, key, default)
    if value is not default and not all(isinstance(v, str) for v in value.values()):
        raise BadData(f"{key!r} holds a value that is not a string")
    return value


def descriptor(entry, where: str, digest_re) -> dict:
    """An OCI descriptor (a layer, an index's manifest entry) of the types the spec gives it:
    ``digest`` matching ``digest_re``, ``mediaType`` and ``artifactType`` strings, ``size`` a
    non-negative integer, ``annotations`` an object of strings; BadData naming ``where``."""
    try:
        if not isinstance(entry, dict):
            raise BadData("a descriptor is not an object")
        if not digest_re.match(text(entry, "digest")):
            raise BadData("a descriptor without a sha256 digest")
        text(entry, "mediaType", "")
        text(entry, "artifactType", "")
        if number(entry, "size", 0) < 0:
            raise BadData("a descriptor of negative size")
        string_map(entry, "annotations", {})
    except BadData as exc:
        raise BadData(f"{where}: {exc}") from None
    return entry


#: what zipfile raises for a hostile archive (a wheel from an index): encrypted entries
#: (RuntimeError), an unknown compression (NotImplementedError), a name that is not UTF-8
#: (UnicodeDecodeError), a cut or lying directory (BadZipFile, EOFError, struct.error, zlib.error,
#: ValueError, OSError); each is one line through zip_error()
ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, RuntimeError, NotImplementedError,
              UnicodeDecodeError, EOFError, ValueError, OSError, struct.error, zlib.error)


def zip_error(exc: BaseException) -> str:
    """The exception as a few words for one line."""
    text = str(exc).splitlines()[0][:120] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
