"""matrix.yaml read as YAML that remembers positions: every mapping and list knows its line and
column (and a mapping each key's), so that a refusal names the place. The file is bounded by
grammar before the composer builds anything."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..digests import sha256_bytes
from ..errors import KnowledgeError

class _Map(dict):
    """A mapping that remembers where it and each of its keys stood in the file."""

    line: int = 0
    column: int = 0
    key_pos: dict

    def pos(self, key=None) -> tuple[int, int]:
        if key is not None and key in self.key_pos:
            return self.key_pos[key]
        return (self.line, self.column)


class _List(list):
    line: int = 0
    column: int = 0


def _loader_class():
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # type: ignore[misc, valid-type]
        pass

    def construct_map(loader, node):
        loader.flatten_mapping(node)
        out = _Map()
        out.key_pos = {}
        out.line, out.column = node.start_mark.line + 1, node.start_mark.column + 1
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)):
                raise yaml.constructor.ConstructorError(
                    None, None, "a key must be a plain scalar", key_node.start_mark)
            if key in out:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            out[key] = loader.construct_object(value_node, deep=True)
            out.key_pos[key] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
        return out

    def construct_seq(loader, node):
        out = _List(loader.construct_object(child, deep=True) for child in node.value)
        out.line, out.column = node.start_mark.line + 1, node.start_mark.column + 1
        out.item_pos = [(c.start_mark.line + 1, c.start_mark.column + 1) for c in node.value]
        return out

    def construct_number(loader, node, kind):
        # a 5,000-digit integer (or 4,000 hex digits) is no fact of ours: refused before Python
        # converts it (which is quadratic, and past 4,300 digits a ValueError no caller expects)
        digits = node.value.replace("_", "").lstrip("+-")
        if len(digits) > MAX_NUMBER_CHARS:
            raise yaml.constructor.ConstructorError(
                None, None, f"a number written with {len(digits)} characters (at most "
                f"{MAX_NUMBER_CHARS})", node.start_mark)
        value = (loader.construct_yaml_int if kind == "int" else loader.construct_yaml_float)(node)
        if kind == "float" and value != value or value in (float("inf"), float("-inf")):
            raise yaml.constructor.ConstructorError(
                None, None, f"{node.value!r} is not a finite number", node.start_mark)
        return value

    Loader.add_constructor("tag:yaml.org,2002:int", lambda lo, n: construct_number(lo, n, "int"))
    Loader.add_constructor("tag:yaml.org,2002:float", lambda lo, n: construct_number(lo, n, "float"))
    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_map)
    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, construct_seq)
    # Dates stay strings: a fact's date is text we compare, never a timezone puzzle.
    Loader.add_constructor("tag:yaml.org,2002:timestamp", Loader.construct_yaml_str)
    return Loader


_LOADER = None
#: the longest number matrix.yaml holds is a wheel's size in bytes (9 to 10 digits)
MAX_NUMBER_CHARS = 30


def load_yaml(path: Path, data: bytes | None = None) -> Any:
    """The YAML document with positions. Before the composer builds anything, grammar.read_text and
    grammar.scan bound the file (size, characters, nesting depth, node count, alias expansion);
    afterwards grammar.check_fields checks every recipe-facing string. Each refusal is one
    KnowledgeError naming the file, and the line and column where there is one. `data`: the
    file's bytes when the caller has read them (knowledge.load, which hashes them first).
    PyYAML and the grammar are imported here: a command whose knowledge comes from the cache
    (knowledge/cache.py) never needs them."""
    import yaml

    from . import grammar
    global _LOADER
    if _LOADER is None:
        _LOADER = _loader_class()
    text = grammar.read_text(path, data)
    try:
        grammar.scan(text, str(path), _LOADER)
        doc = yaml.load(text, Loader=_LOADER)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        raise KnowledgeError(f"YAML error: {problem}", file=str(path),
                             line=mark.line + 1 if mark else None,
                             column=mark.column + 1 if mark else None) from None
    except yaml.reader.ReaderError as exc:
        pos = min(max(int(exc.position), 0), len(text))
        raise KnowledgeError(f"YAML error: {exc.reason}", file=str(path),
                             line=text.count("\n", 0, pos) + 1) from None
    except yaml.YAMLError as exc:
        raise KnowledgeError(f"YAML error: {exc}", file=str(path)) from None
    from .shapes import FIELDS
    grammar.check_fields(doc, str(path), FIELDS)
    digest = sha256_bytes(text.encode("utf-8"))       # the bytes parsed: read_text decodes strictly
    try:
        doc.sha256 = digest
    except AttributeError:
        pass                # a document that is no mapping: the loader refuses it, naming why
    return doc

