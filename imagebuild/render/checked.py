"""The grammar of every value that reaches a recipe's shell line: each is checked against a strict
pattern of its kind (`safe`), URL templates from the matrix are filled and checked (`format_url`)
and every string a template receives is one line of printable text (`guard`). The renderer and
its building blocks (blocks.py) check each value here before a fragment sees it."""

from __future__ import annotations


from ..errors import RenderError
from ..knowledge.grammar import bad_char, char_name
from ..knowledge.grammar import check as grammar_check
from ..patterns import PATTERNS
from ..reference import is_reference


def show(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:80] + "...")


def safe(kind: str, value, what: str) -> str:
    """A value that may reach a shell line, or RenderError naming it. `text` is one line of
    printable text without " \\ $ ` (comments and LABEL values: grammar.check)."""
    text = str(value)
    hit = bad_char(text)
    if hit:
        raise RenderError(f"unsafe {what} {show(text)}: it holds {char_name(hit[1])}")
    if kind == "text":
        why = grammar_check("text", text)
        if why:
            raise RenderError(f"unsafe {what} {show(text)}: {why}")
        return text
    if ".." in text and kind in ("path", "url", "ref", "id"):
        raise RenderError(f"unsafe {what} {show(text)}: '..' is not allowed")
    if kind == "ref":     # the one grammar of image references
        if not is_reference(text):
            raise RenderError(f"unsafe {what} {show(text)} (must be an image reference: "
                              "[host[:port]/]name[:tag][@sha256:<hex>])")
        return text
    if not PATTERNS[kind].fullmatch(text):
        raise RenderError(f"unsafe {what} {show(text)} (must match {PATTERNS[kind].pattern})")
    return text


def format_url(template, what: str, **fields) -> str:
    """A URL template from the matrix with its {fields} filled in, checked as a URL. Only the
    named fields may appear (str.format would otherwise raise, or read attributes: `{version.x}`)."""
    text = str(template)
    why = grammar_check("url", text, tuple(fields))
    if why:
        raise RenderError(f"unsafe {what} {show(text)}: {why}")
    return safe("url", text.format(**fields), what)


def guard(value, what: str) -> None:
    """Every string in `value` (recursively) is one line of printable text: a template never
    receives a line break, a control character or a Unicode separator, so no value can start a
    new instruction, command or section."""
    if isinstance(value, str):
        hit = bad_char(value)
        if hit:
            raise RenderError(f"unsafe {what} {show(value)}: it holds {char_name(hit[1])}")
    elif isinstance(value, dict):
        for k, v in value.items():
            guard(k, what)
            guard(v, f"{what}.{k}")
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            guard(v, what)
