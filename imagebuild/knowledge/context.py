"""_Ctx: what every section's loader is given. It fails with a KnowledgeError naming the file, line
and column of a node; it checks a node's shape (mapping, list, text, version, driver, specifier,
flag, source); and it collects the rules the sections compile, in the order they add them (the
resolver's explanations follow that order)."""

from __future__ import annotations

from typing import Iterable

from ..errors import KnowledgeError
from .grammar import check_mapping
from ..versions import VersionSyntaxError, parse_driver, parse_spec, parse_version
from .model import Rule
from .schema import DEFAULT_PLATFORM
from .shapes import SHAPES
from .yamlfile import _List, _Map


class _Ctx:
    def __init__(self, path: str):
        self.path = path
        self.rules: list[Rule] = []                    # every section's rules, in order
        self.known_platforms = [DEFAULT_PLATFORM]      # sections.platforms sets the matrix's
        # set by sections.cuda for sections.oses, which knows the OSes: where the rules on the
        # releases no repository carries go, and the availability facts to check against the OSes
        self.cuda_repo_rules_at: int | None = None
        self.availability_nodes: list[tuple] = []

    def add_rule(self, rid, when, require, text, source, line, verified=True, any_of=(), tag=None,
                 verified_only=False, at=None):
        """Add a rule (at the end, or at index `at` of the rules so far: a section that completes
        an earlier section's rule keeps that section's place in the explanations)."""
        rule = Rule(rid, tuple(when), tuple(require), text, source, line, verified,
                    tuple(tuple(alt) for alt in any_of), tag, verified_only)
        if at is None:
            self.rules.append(rule)
        else:
            self.rules.insert(at, rule)

    def platform_list(self, node, key, where):
        """An optional list of platform ids (validated); None when absent."""
        if key not in node:
            return None
        vals = [str(x) for x in self.seq(node[key], f"{where}.{key}", node, key)]
        for v in vals:
            self.known_platform(v, node, key, where)
        return tuple(vals)

    def known_platform(self, value: str, node, key, where: str) -> str:
        """A platform id the matrix's `platforms:` declares, else a failure at node[key]."""
        if value not in self.known_platforms:
            self.fail(f"{where}: unknown platform {value!r} (known: {', '.join(self.known_platforms)})",
                      node, key)
        return value

    def fail(self, msg: str, node=None, key=None):
        line = col = None
        if isinstance(node, _Map):
            line, col = node.pos(key)
        elif isinstance(node, _List):
            line, col = node.line, node.column
        raise KnowledgeError(msg, file=self.path, line=line, column=col)

    def mapping(self, node, where: str, required: Iterable[str], optional: Iterable[str] = (),
                parent=None, key=None):
        """grammar.check_mapping, failing at the node's line and column."""
        return check_mapping(self.fail, node, where, required, optional, parent, key)

    def shape(self, node, name: str, where: str | None = None, parent=None, key=None, keys=None):
        """``node`` checked against its declaration, shapes.SHAPES[name] (``where`` names it in a
        message; the declaration's name by default). ``keys``: the keys a mapping whose keys are
        data may hold here (the OS ids an RDMA repository names)."""
        shape = SHAPES[name]
        optional = shape.optional if keys is None else tuple(keys)
        if shape.any_key is not None and shape.keys_from is None and keys is None:
            optional = tuple(node) if isinstance(node, dict) else ()
        return check_mapping(self.fail, node, where or name, shape.required, optional, parent, key)

    def seq(self, node, where: str, parent=None, key=None):
        if not isinstance(node, _List):
            self.fail(f"{where}: expected a list", parent if node is None else node, key)
        return node

    def text(self, node, key, where: str, optional=False):
        if key not in node:
            if optional:
                return None
            self.fail(f"{where}: missing key {key!r}", node)
        value = node[key]
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            self.fail(f"{where}: {key} must be a string", node, key)
        return str(value)

    def _parsed(self, node, key, where: str, optional: bool, parse) -> str | None:
        """A text value that `parse` accepts (it raises VersionSyntaxError otherwise)."""
        value = self.text(node, key, where, optional)
        if value is None:
            return None
        try:
            parse(value)
        except VersionSyntaxError as exc:
            self.fail(f"{where}: {key}: {exc}", node, key)
        return value

    def version(self, node, key, where: str, optional=False):
        return self._parsed(node, key, where, optional, parse_version)

    def driver(self, node, key, where: str, optional=False):
        return self._parsed(node, key, where, optional, parse_driver)

    def spec(self, node, key, where: str, optional=False):
        return self._parsed(node, key, where, optional, parse_spec)

    def flag(self, node, key, where: str, default: bool):
        if key not in node:
            return default
        if not isinstance(node[key], bool):
            self.fail(f"{where}: {key} must be true or false", node, key)
        return node[key]

    def source(self, node, sources, where: str, key: str = "source", optional: bool = False):
        """node[key]: a declared source id or a URL (None when absent and optional)."""
        if optional and key not in node:
            return None
        sid = self.text(node, key, where)
        if sid not in sources and not sid.startswith(("https://", "http://")):
            self.fail(f"{where}: unknown source {sid!r} (declare it under sources: or give a URL)",
                      node, key)
        return sid

