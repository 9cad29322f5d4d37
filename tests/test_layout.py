"""The house rules of issue 14, checked on the source itself (pure logic: the package's AST).

- Only `imagebuild/engines/` knows the docker SDK: no `import docker` / `from docker...` elsewhere.
- No import cycle between imagebuild's modules, counting imports inside functions too: a lazy import
  that points back up the pipeline is a cycle postponed, not removed.
- No function longer than 120 lines.

Each rule is also checked against a small planted violation, so that none of them can pass by
reading nothing."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "imagebuild"
MAX_LINES = 120


def _modules(root: Path) -> dict[str, Path]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that `name` imports anywhere in its file (functions included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in known]
            if subs:
                found.update(subs)
            if target in known and len(subs) < len(node.names):
                found.add(target)      # names taken from the module itself
    found.discard(name)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _graph(root: Path) -> dict[str, set[str]]:
    modules = _modules(root)
    return {name: _imports(name, path, set(modules)) for name, path in modules.items()}


def _docker_imports(root: Path) -> list[str]:
    engines = root / "engines"
    out = []
    for path in sorted(root.rglob("*.py")):
        if engines in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [])
            if any(n == "docker" or n.startswith("docker.") for n in names):
                out.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return out


def _long_functions(root: Path) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_LINES:
                    out.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({lines} lines)")
    return out


def test_only_engines_import_the_docker_sdk():
    assert _docker_imports(PACKAGE) == []


def test_no_import_cycle():
    assert _cycles(_graph(PACKAGE)) == []


def test_no_function_over_120_lines():
    assert _long_functions(PACKAGE) == []


def _planted(tmp_path: Path) -> Path:
    pkg = tmp_path / "pkg"
    (pkg / "engines").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "engines" / "__init__.py").write_text("import docker\n")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def late():\n    from .a import x\n    from docker.errors import APIError\n")
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (pkg / "c.py").write_text(f"def long():\n{body}\n\ndef short():\n    return 1\n")
    return pkg


def test_the_rules_see_planted_violations(tmp_path):
    pkg = _planted(tmp_path)
    assert _docker_imports(pkg) == ["pkg/b.py:3"]            # engines/ itself may
    assert _cycles(_graph(pkg)) == [["pkg.a", "pkg.b"]]       # the lazy import counts
    assert _long_functions(pkg) == ["pkg/c.py:1 long (121 lines)"]
