"""What a matrix.yaml may hold before anything reads it, and the grammar of every string that can
reach a recipe.

Three gates, each refusing with one KnowledgeError line that names the file and, where there is one,
the line and column:

1. `read_text` and `scan` (called by knowledge.load_yaml before the YAML is composed): the file is at
   most MAX_BYTES of UTF-8; no raw control character or Unicode line break outside ordinary line
   ends; nesting at most MAX_DEPTH deep (deeper nesting made PyYAML's composer recurse until it
   crashed); at most MAX_NODES nodes; aliases expand to at most MAX_ALIAS_NODES nodes in all (an
   alias "billion laughs" bomb is refused at the alias that crosses the budget, before any of it is
   built); no scalar holds a control character, a line or paragraph separator or a format (bidi)
   character, except that a `note:` may span lines (notes never reach a recipe).
2. `check_fields` (called by load_yaml on the composed document): each string field that reaches a
   recipe, an image id, a tag or a label matches its own grammar (shapes.FIELDS: the grammar is
   declared with the key's shape), whatever section it is
   in, so a hostile value is refused on its own line before any section is compiled.
3. `recipe_inputs.validate` (called once at the end of knowledge.build; a module of its own):
   the `tools:`, `images:` and the recipe-facing parts of `rdma:` checked in full, keys, types,
   grammars and cross-references. `check_mapping`, the one shape check of every mapping, is
   here: the sections (through knowledge/shapes.py) and gate 3 both use it.

The renderer checks every value again (render._safe) and checks the rendered text's structure, so
a value that slipped past these gates still cannot add a line to a recipe.
"""

from __future__ import annotations

import errno
import re
import string
import unicodedata
from typing import Any, Iterable

import yaml

from ..errors import KnowledgeError
from ..localfile import read_bytes
from ..patterns import DESCRIBE, PATTERNS
from ..reference import is_reference
from ..versions import VersionSyntaxError, parse_spec
from .schema import MATRIX_MAX_BYTES as MAX_BYTES

MAX_DEPTH = 48                   # it nests 6 deep
MAX_NODES = 200_000              # it has about 3,300 events
MAX_ALIAS_NODES = 10_000         # nodes all aliases together may stand for (it uses none)
MAX_TEXT = 200                   # one-line text that reaches a comment or a label

# Raw characters refused anywhere in the file, comments included: C0/C1 controls other than tab, LF
# and CRLF; a lone CR; NEL, LINE and PARAGRAPH SEPARATOR (YAML counts them as line breaks, most
# editors do not, so lines would be numbered differently); bidi controls (text that reads one way
# and parses another); a byte order mark other than at the start.
_RAW_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f"
                      "\u202a-\u202e\u2066-\u2069\ufeff]|\r(?!\n)")

# Keys whose value is free prose that no recipe, tag or label ever holds: it may span lines.
PROSE_KEYS = frozenset({"note"})


# --------------------------------------------------------------------------------------------------
# characters


def char_name(ch: str) -> str:
    """U+000A (LINE FEED): how an offending character is named in a message."""
    names = {"\n": "LINE FEED", "\r": "CARRIAGE RETURN", "\t": "CHARACTER TABULATION",
             "\x00": "NULL", "\x0b": "LINE TABULATION", "\x0c": "FORM FEED", "\x85": "NEXT LINE",
             "\x1b": "ESCAPE", "\x7f": "DELETE"}
    name = names.get(ch) or unicodedata.name(ch, "") or unicodedata.category(ch)
    return f"U+{ord(ch):04X} ({name})"


def bad_char(text: str, multiline: bool = False) -> tuple[int, str] | None:
    """(index, character) of the first character one-line text may not hold: a control character
    (Cc), a line or paragraph separator (Zl, Zp) or a format character (Cf: bidi controls,
    zero-width characters, BOM). With `multiline`, LF and tab are allowed (prose)."""
    if text.isprintable():  # fast path: no Cc, Cf, Zl, Zp (nor Zs other than space, allowed below)
        return None
    if multiline and text.replace("\n", "").replace("\t", "").isprintable():
        return None         # the same fast path for prose and rendered recipes (many lines)
    for i, ch in enumerate(text):
        if multiline and ch in "\n\t":
            continue
        if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs"):
            return i, ch
    return None


def _show(value: str, limit: int = 60) -> str:
    """A value quoted for a one-line message (repr escapes every control and separator)."""
    return repr(value if len(value) <= limit else value[:limit] + "...")


# --------------------------------------------------------------------------------------------------
# gate 1: bytes, characters and YAML structure


def read_text(path, data: bytes | None = None) -> str:
    """The file as text: at most MAX_BYTES, UTF-8, no raw control characters (KnowledgeError).
    `data`: its bytes, when the caller has read them (bounded the same way)."""
    where = str(path)
    try:
        if data is None:
            data = read_bytes(path, MAX_BYTES)     # a regular file, never more than MAX_BYTES
    except FileNotFoundError:
        raise KnowledgeError("file not found", file=where) from None
    except OSError as exc:
        if exc.errno == errno.EFBIG:
            raise KnowledgeError(f"more than {MAX_BYTES // 2**20} MiB: refused (the knowledge base is "
                                 "read whole; matrix.yaml is about 60 KiB)", file=where) from None
        raise KnowledgeError(f"cannot read: {exc.strerror or exc}", file=where) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise KnowledgeError(f"not UTF-8: byte 0x{data[exc.start]:02x} cannot start or continue a "
                             "character", file=where, line=line, column=col) from None
    start = 1 if text.startswith("\ufeff") else 0
    m = _RAW_BAD.search(text, start)
    if m:
        line = text.count("\n", 0, m.start()) + 1
        col = m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
        raise KnowledgeError(f"{char_name(m.group()[0])} is not allowed in the file (control "
                             "characters, lone carriage returns, Unicode line separators and bidi "
                             "controls are refused, even in comments)",
                             file=where, line=line, column=col)
    return text


class _Frame:
    __slots__ = ("mapping", "anchor", "nodes", "expect_key", "key")

    def __init__(self, mapping: bool, anchor: str | None):
        self.mapping = mapping
        self.anchor = anchor
        self.nodes = 1
        self.expect_key = True
        self.key = None


def scan(text: str, path: str, loader) -> None:
    """Walk the YAML events (the parser keeps no tree, so this is cheap and bounded) and refuse deep
    nesting, too many nodes, alias expansion beyond the budget and scalars with control or line
    separator characters, before the composer builds anything. YAML syntax errors propagate as
    yaml.MarkedYAMLError (load_yaml reports them)."""
    stack: list[_Frame] = []
    sizes: dict[str, int] = {}     # anchor -> nodes it stands for (its aliases expanded)
    nodes = aliased = 0

    def fail(msg, mark):
        raise KnowledgeError(msg, file=path, line=mark.line + 1, column=mark.column + 1)

    def done(size: int):
        """A node of `size` nodes is complete in the current collection."""
        if stack:
            top = stack[-1]
            top.nodes += size
            if top.mapping:
                top.expect_key = not top.expect_key

    for ev in yaml.parse(text, Loader=loader):
        if isinstance(ev, (yaml.ScalarEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            nodes += 1
            if nodes > MAX_NODES:
                fail(f"more than {MAX_NODES} YAML nodes: refused", ev.start_mark)
        if isinstance(ev, yaml.ScalarEvent):
            top = stack[-1] if stack else None
            is_key = top is not None and top.mapping and top.expect_key
            prose = (top is not None and top.mapping and not top.expect_key
                     and top.key in PROSE_KEYS)
            hit = bad_char(ev.value, multiline=prose)
            if hit:
                what = "a key" if is_key else (f"{top.key!s} {_show(ev.value)}" if top is not None
                                               and top.mapping else f"a value {_show(ev.value)}")
                fail(f"{what} holds {char_name(hit[1])}: one-line fields hold no control "
                     "characters, tabs, line breaks or Unicode line or paragraph separators",
                     ev.start_mark)
            if is_key:
                top.key = ev.value
            if ev.anchor:
                sizes[ev.anchor] = 1
            done(1)
        elif isinstance(ev, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            if len(stack) >= MAX_DEPTH:
                fail(f"nested more than {MAX_DEPTH} levels deep: refused", ev.start_mark)
            stack.append(_Frame(isinstance(ev, yaml.MappingStartEvent), ev.anchor))
        elif isinstance(ev, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            frame = stack.pop()
            if frame.anchor:
                sizes[frame.anchor] = frame.nodes
            done(frame.nodes)
        elif isinstance(ev, yaml.AliasEvent):
            size = sizes.get(ev.anchor, 1)
            aliased += size
            if aliased > MAX_ALIAS_NODES:
                fail(f"aliases expand to more than {MAX_ALIAS_NODES} nodes (alias *{ev.anchor} "
                     f"stands for {size}): refused as an alias bomb", ev.start_mark)
            done(size)


# --------------------------------------------------------------------------------------------------
# grammars


_PATTERNS, _DESCRIBE = PATTERNS, DESCRIBE          # the one table (patterns.py)
# Characters one-line text (a description, a name) may not hold even when printable: they mean
# something inside a double-quoted LABEL value or a shell line.
_TEXT_FORBIDDEN = set('"\\$`')


def check(kind: str, value: str, placeholders: Iterable[str] = ()) -> str | None:
    """Why `value` is not a `kind` (None when it is). Kinds: the _PATTERNS names, `text` (one line
    of printable text without " \\ $ `), `spec` (a version specifier or none), `version|none`,
    `url` (with the given {placeholders} allowed)."""
    if not isinstance(value, str):
        return f"must be a string, not {type(value).__name__}"
    hit = bad_char(value)
    if hit:
        return f"holds {char_name(hit[1])} (one-line fields hold no control or separator characters)"
    if kind == "text":
        if not value.strip():
            return "must not be empty"
        if len(value) > MAX_TEXT:
            return f"is longer than {MAX_TEXT} characters"
        odd = next((ch for ch in value if ch in _TEXT_FORBIDDEN or not ch.isprintable()), None)
        if odd is not None:
            return (f"holds {odd!r}: one-line text may not hold \" \\ $ ` or non-printable "
                    "characters (it reaches comments and LABEL values)")
        return None
    if kind == "spec":
        if value != value.strip() or not value:
            return "must be a specifier such as '>=2.6' (no surrounding spaces)"
        try:
            parse_spec(value)
        except VersionSyntaxError as exc:
            return str(exc)
        return None
    if kind == "version|none":
        return None if value == "none" else check("version", value)
    if kind == "url":
        return _check_url(value, tuple(placeholders))
    if kind == "ref":     # the one grammar of image references
        return None if is_reference(value) else f"must be {_DESCRIBE[kind]}"
    pattern = _PATTERNS[kind]
    if not pattern.fullmatch(value):
        if kind in ("version", "driver"):  # the words knowledge/ uses for the same mistake
            return f"is a malformed {'driver ' if kind == 'driver' else ''}version (expected " \
                   f"{_DESCRIBE[kind]})"
        return f"must be {_DESCRIBE[kind]}"
    if kind == "spdx" and not _balanced(value):
        return f"must be {_DESCRIBE[kind]} (its parentheses do not pair)"
    if kind == "spdx" and "NOASSERTION" in value.split():
        return "must state licenses: NOASSERTION is a placeholder (leave project.licenses out instead)"
    if kind == "id" and ".." in value:
        return "must not hold '..'"
    return None


def _balanced(value: str) -> bool:
    depth = 0
    for ch in value:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


def _check_url(value: str, placeholders: tuple[str, ...]) -> str | None:
    """An https URL whose only {fields} are `placeholders` (no conversion, no format spec, no
    attribute or index: str.format on anything else would fail or read attributes)."""
    sample = []
    try:
        parts = list(string.Formatter().parse(value))
    except ValueError as exc:
        return f"is not a valid URL template ({exc})"
    for literal, field, spec, conv in parts:
        sample.append(literal)
        if field is None:
            continue
        if field not in placeholders or spec or conv:
            allowed = ", ".join("{" + p + "}" for p in placeholders) or "none"
            return f"holds the placeholder {{{field}}} (allowed here: {allowed})"
        sample.append("x0")
    text = "".join(sample)
    if "{" in text or "}" in text:
        return "holds a brace that is not a placeholder"
    if not _PATTERNS["url"].fullmatch(text):
        return f"must be {_DESCRIBE['url']}"
    if "/../" in text + "/" or "/./" in text + "/":
        return "must not hold '.' or '..' path segments"
    return None


# --------------------------------------------------------------------------------------------------
# gate 2: every recipe-facing string field, wherever it is


def _url(*ph):
    return ("url", ph)


# Gate 2's fields are declared with the shapes (knowledge/shapes.py: each recipe-facing key's leaf
# says its grammar, g(), and shapes.FIELDS lists them): `*` is every item of a list, `?` every value
# of a mapping whose keys are data; the form is "str" (one string), "list" (a list of strings),
# "any" (one string or a list of them) or "int". A value of the wrong type is refused here too,
# with the line it stands on: YAML reads `cuda: 12.10` as the number 12.1, and a !!binary value
# would reach a recipe as "b'...'".


def _item_pos(lst, i) -> tuple[int | None, int | None]:
    pos = getattr(lst, "item_pos", None)
    if pos and i < len(pos):
        return pos[i]
    return getattr(lst, "line", None), getattr(lst, "column", None)


def _key_pos(mapping, key) -> tuple[int | None, int | None]:
    if hasattr(mapping, "pos"):
        return mapping.pos(key)
    return None, None


def _walk(node, pattern, label, pos):
    """(label, value, (line, column)) for every node `pattern` reaches from `node`."""
    if not pattern:
        yield label, node, pos
        return
    head, rest = pattern[0], pattern[1:]
    if head == "*":
        if isinstance(node, list):
            for i, item in enumerate(node):
                yield from _walk(item, rest, f"{label}[{i}]", _item_pos(node, i))
    elif head == "?":
        if isinstance(node, dict):
            for key, value in node.items():
                yield from _walk(value, rest, f"{label}.{key}", _key_pos(node, key))
    elif isinstance(node, dict) and head in node:
        yield from _walk(node[head], rest, f"{label}.{head}" if label else head,
                         _key_pos(node, head))


def _grammar_error(path: str, label: str, value, grammar, pos) -> KnowledgeError:
    kind, ph = grammar if isinstance(grammar, tuple) else (grammar, ())
    if not isinstance(value, str):
        why = f"must be a string, not {_kind(value)}" + _QUOTE_HINT.get(type(value), "")
    else:
        why = check(kind, value, ph)
    if why is None:
        return None
    shown = f" {_show(value)}" if isinstance(value, str) else ""
    return KnowledgeError(f"{label}{shown} {why}", file=path, line=pos[0], column=pos[1])


_QUOTE_HINT = {int: " (quote it)", float: " (quote it: YAML reads 12.10 as the number 12.1)"}

#: the largest source tarball the matrix may record, and that is read from a mirror or upstream
#: when it records no size (the largest it names today, Open MPI's git archive, is 11 MB; a release
#: tarball about 40 MB)
MAX_SOURCE_BYTES = 256 * 1024 * 1024


def _bytes_error(path: str, label: str, value, pos) -> KnowledgeError | None:
    """A byte count: a whole number from 1 to MAX_SOURCE_BYTES (not a string, not a bool)."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_SOURCE_BYTES:
        return None
    number = isinstance(value, int) and not isinstance(value, bool)
    shown = f" {_show(value)}" if isinstance(value, str) else (f" {value}" if number else "")
    return KnowledgeError(f"{label}{shown} must be a whole number of bytes from 1 to {MAX_SOURCE_BYTES}"
                          + ("" if number else f", not {_kind(value)}"),
                          file=path, line=pos[0], column=pos[1])


def check_fields(doc: Any, path: str, fields) -> None:
    """Every recipe-facing value of `fields` (shapes.FIELDS) is a string (or a list of strings,
    where the field is a list) of its grammar: KnowledgeError naming its line otherwise (the first
    in the file)."""
    if not isinstance(doc, dict):
        return
    errors = []
    for pattern, grammar, shape in fields:
        for label, value, pos in _walk(doc, pattern, "", (None, None)):
            if shape == "int":
                err = _bytes_error(path, label, value, pos)
                if err is not None:
                    errors.append(err)
                continue
            if isinstance(value, list) and shape in ("list", "any"):
                items = [(f"{label}[{i}]", v, _item_pos(value, i)) for i, v in enumerate(value)]
            elif shape == "list":
                errors.append(KnowledgeError(f"{label} must be a list of strings, not "
                                             f"{_kind(value)}", file=path, line=pos[0],
                                             column=pos[1]))
                continue
            else:
                items = [(label, value, pos)]
            for lab, v, p in items:
                err = _grammar_error(path, lab, v, grammar, p)
                if err is not None:
                    errors.append(err)
    errors += _credential_errors(doc, path)
    if errors:  # the first in the file, whatever the order of FIELDS
        raise min(errors, key=lambda e: (e.line or 0, e.column or 0))


# a URL's userinfo anywhere: scheme://user[:password]@
_URL_USERINFO = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s/?#@]*@")


def _every_string(node, label: str, pos):
    """(label, text, (line, column)) for every string of the document, keys included."""
    if isinstance(node, str):
        yield label, node, pos
    elif isinstance(node, dict):
        for key, value in node.items():
            where = _key_pos(node, key)
            if isinstance(key, str):
                yield f"{label}.{key}" if label else key, key, where
            yield from _every_string(value, f"{label}.{key}" if label else str(key), where)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _every_string(item, f"{label}[{i}]", _item_pos(node, i))


def _credential_errors(doc, path: str) -> list[KnowledgeError]:
    """A URL with credentials anywhere in the matrix (a source, a wheel record, a title): refused
    at load. The matrix is printed by `knowledge show` and `evidence`, copied into images and
    reports: a credential in it would be published. Credentials come from the user's settings."""
    return [KnowledgeError(f"{label}: a URL with credentials (user@ or user:password@ after the "
                           "scheme) is refused: matrix.yaml is printed and published; give "
                           "credentials through the tool's settings", file=path, line=pos[0], column=pos[1])
            for label, text, pos in _every_string(doc, "", (None, None)) if _URL_USERINFO.search(text)]


def check_mapping(fail, node, where: str, required: Iterable[str], optional: Iterable[str] = (),
                  parent=None, key=None):
    """``node``, when it is a mapping that holds every key of ``required`` and no key outside
    ``required`` and ``optional``; otherwise ``fail(message, node, key)`` raises. The one shape check
    of the matrix's mappings: knowledge's sections (_Ctx.mapping) and gate 3 (_Checker.mapping)
    both use it. A node that is no mapping (a scalar has no position of its own) is reported at
    ``parent``'s ``key`` when a parent is given."""
    if not isinstance(node, dict):
        fail(f"{where}: expected a mapping, not {_kind(node)}", parent if parent is not None else node, key)
    allowed = set(required) | set(optional)
    for k in node:
        if k not in allowed:
            fail(f"{where}: unknown key {k!r} (allowed: {', '.join(sorted(allowed))})", node, k)
    for k in required:
        if k not in node:
            fail(f"{where}: missing key {k!r}", node)
    return node


def _kind(value) -> str:
    """How a YAML value's type is named in a message."""
    if value is None:
        return "null"
    for t, name in ((bool, "a boolean"), (int, "a number"), (float, "a number"), (str, "a string"),
                    (list, "a list"), (dict, "a mapping")):
        if isinstance(value, t):
            return name
    return type(value).__name__
