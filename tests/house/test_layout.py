"""The house rules of issue 14, checked on the source itself (pure logic: the package's AST).

- Only `imagebuild/engines/` knows the docker SDK: no `import docker` / `from docker...` elsewhere.
- No import cycle between imagebuild's modules, counting imports inside functions too: a lazy import
  that points back up the pipeline is a cycle postponed, not removed.
- No function longer than 80 lines, no module longer than 600 (issue 26: a module that grows
  past that mixes jobs; split it along its seams).
- The packages follow the pipeline, and imports point one way, down it: a package may import the
  shared helper modules at the package's top and the packages before it in PIPELINE, never one
  after it; the helpers import no package.
- Nothing below `cli/` prints: no print() and no sys.stdout/sys.stderr outside `cli/` and the
  smoke suite (a program of its own, run inside images).
- Nothing outside `knowledge/` reads the parsed matrix (`Knowledge.document`): the other packages
  take typed values (families, tools, project, releases, ...) that the loader made once.
- One hasher: only `digests.py` imports hashlib (every file, text and stream hash goes through it);
  one table of value patterns (`patterns.py`), the only place a 64-hex digest is spelled; one
  labels module (`labels.py`), the only place a label key is spelled.
- No package is named like build output (`build/`, `dist/`): tools skip such folders (a default
  ruff run never linted `imagebuild/build/`), and `ruff check` with the rules pyproject.toml
  configures is clean on the whole project.

- The tests are grouped as the package is: each test module sits in the folder of the pipeline
  stage it proves (tests/<stage>/, a stage being one of imagebuild's packages) or in
  tests/house/ (rules that span stages); none is left at the top of tests/, so a newcomer who
  changes render/ runs tests/render/ first.

Each rule is also checked against a small planted violation, so that none of them can pass by
reading nothing."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "imagebuild"
MAX_LINES = 80
MAX_MODULE_LINES = 600


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


def _long_modules(root: Path) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            out.append(f"{path.relative_to(root.parent)} ({lines} lines)")
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


#: imagebuild's packages in pipeline order: each may import those before it, none after it.
#: `smoke` is first because it is a program of its own (copied into images, standard library only)
#: that the host side starts and reads; `engines` knows nothing of the matrix.
PIPELINE = ("smoke", "engines", "knowledge", "resolve", "render", "builder", "testrun", "deliver", "cli")


def _package(module: str, root: Path) -> str | None:
    """The package of PIPELINE a module belongs to; None for a shared helper at the top."""
    parts = module.split(".")
    if len(parts) > 1 and (root / parts[1]).is_dir():
        return parts[1]
    return None


def _upward_imports(root: Path, order: tuple[str, ...]) -> list[str]:
    """Imports that point up the pipeline (or from a top-level helper into any package)."""
    out = []
    for module, targets in sorted(_graph(root).items()):
        if module == f"{root.name}.__main__":
            continue                # `python -m imagebuild`: the entry point, above cli/
        mine = _package(module, root)
        for target in sorted(targets):
            theirs = _package(target, root)
            if theirs is None or theirs == mine:
                continue
            if mine is None or order.index(theirs) > order.index(mine):
                out.append(f"{module} -> {target}")
    return out


def _unknown_packages(root: Path, order: tuple[str, ...]) -> list[str]:
    return sorted(p.name for p in root.iterdir()
                  if p.is_dir() and (p / "__init__.py").exists() and p.name not in order)


def _printers(root: Path, allowed: tuple[str, ...]) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).parts[0] in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print") or (
                    isinstance(node, ast.Attribute) and node.attr in ("stdout", "stderr")
                    and isinstance(node.value, ast.Name) and node.value.id == "sys"):
                out.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return out


def _document_readers(root: Path, owner: str = "knowledge") -> list[str]:
    """Reads of the parsed matrix (an attribute `document`) outside the package that owns it."""
    out = []
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).parts[0] == owner:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "document":
                out.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return out


def _hashlib_users(root: Path, owner: str = "digests.py") -> list[str]:
    """Modules other than `owner` that import hashlib (at the top or inside a function)."""
    out = []
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).as_posix() == owner:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n == "hashlib" or n.startswith("hashlib.") for n in names):
                out.append(f"{path.relative_to(root.parent).as_posix()}:{node.lineno}")
    return out


def test_only_digests_imports_hashlib():
    assert _hashlib_users(PACKAGE) == []


def _hex64_spellings(root: Path, owner: str = "patterns.py") -> list[str]:
    """Lines outside `owner` that spell a 64-hex pattern themselves."""
    return [f"{path.relative_to(root.parent).as_posix()}:{no}"
            for path in sorted(root.rglob("*.py")) if path.relative_to(root).as_posix() != owner
            for no, line in enumerate(path.read_text().splitlines(), 1) if "{64}" in line]


def test_one_spelling_of_a_sha256_pattern():
    assert _hex64_spellings(PACKAGE) == []


#: the sections that were plain dicts: their entries are typed (knowledge/model.py) now
TYPED_SECTIONS = ("os", "ucx", "openmpi", "rdma", "gpudirect")


def _section_key_reads(root: Path, owner: str = "knowledge") -> list[str]:
    """Reads of an entry of the typed sections by a string key outside `owner`: `spec.os["id"]`,
    `k.ucx[v]["install"]`, `spec.rdma.get("name")` (a table looked up by a variable, `k.os[os_id]`,
    is no such read; one looked up by a literal id is flagged too, and has no place in code)."""
    def entry(node) -> bool:
        if isinstance(node, ast.Subscript):       # k.os[os_id]: an entry of the table
            node = node.value
        return isinstance(node, ast.Attribute) and node.attr in TYPED_SECTIONS

    out = []
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).parts[0] in (owner, "smoke"):    # smoke reads image.json
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            key = None
            if isinstance(node, ast.Subscript) and entry(node.value):
                key = node.slice
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr == "get" and entry(node.func.value) and node.args):
                key = node.args[0]
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                out.append(f"{path.relative_to(root.parent).as_posix()}:{node.lineno}")
    return out


LABEL_PREFIXES = ("io.imagebuild.", "org.opencontainers.image.")


def _label_spellings(root: Path, owner: str = "labels.py") -> list[str]:
    """String literals outside `owner` (docstrings aside) that spell a label key: one labels
    module (the smoke suite, a program of its own inside the image, reads image.json instead)."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.as_posix() == owner or rel.parts[0] == "smoke":
            continue
        tree = ast.parse(path.read_text())
        docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)
                and isinstance(n.value, ast.Constant)}
        out += [f"{path.relative_to(root.parent).as_posix()}:{n.lineno}" for n in ast.walk(tree)
                if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
                and any(p in n.value for p in LABEL_PREFIXES)]
    return out


def test_one_labels_module():
    assert _label_spellings(PACKAGE) == []


def test_no_string_key_read_of_the_typed_sections():
    assert _section_key_reads(PACKAGE) == []


def test_packages_follow_the_pipeline():
    assert _unknown_packages(PACKAGE, PIPELINE) == []
    assert _upward_imports(PACKAGE, PIPELINE) == []


def test_nothing_below_cli_prints():
    assert _printers(PACKAGE, ("cli", "smoke")) == []


def test_only_engines_import_the_docker_sdk():
    assert _docker_imports(PACKAGE) == []


def test_no_import_cycle():
    assert _cycles(_graph(PACKAGE)) == []


def test_nothing_outside_knowledge_reads_the_parsed_matrix():
    assert _document_readers(PACKAGE) == []


def test_no_function_over_80_lines():
    assert _long_functions(PACKAGE) == []


def test_no_module_over_600_lines():
    assert _long_modules(PACKAGE) == []


#: folder names tools treat as build output and skip (ruff's, pytest's and git's usual ignores)
OUTPUT_NAMES = {"build", "dist", "out", "target"}


def _output_named(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root.parent)) for p in root.rglob("*")
                  if p.is_dir() and p.name in OUTPUT_NAMES and (p / "__init__.py").exists())


def _commands_importing_commands(commands: Path) -> list[str]:
    """`from .other import ...` between modules of cli/commands/ (the package's own `from . import`
    of shared helpers is fine): shared options live in cli/options.py, stage work in its stage."""
    names = {p.stem for p in commands.glob("*.py")} - {"__init__"}
    out = []
    for path in sorted(commands.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module in names:
                out.append(f"{path.name}:{node.lineno} imports .{node.module}")
    return out


#: the test folders that are no stage of the package
TEST_FOLDERS_BESIDE_STAGES = ("house",)


def _misplaced_tests(tests: Path, package: Path) -> list[str]:
    """Test modules outside a stage's folder: at the top of tests/, or in a folder that names no
    package of imagebuild (nor house/)."""
    stages = {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}
    out = [p.name for p in sorted(tests.glob("test_*.py"))]
    for path in sorted(tests.glob("*/**/test_*.py")):
        folder = path.relative_to(tests).parts[0]
        if folder not in stages and folder not in TEST_FOLDERS_BESIDE_STAGES:
            out.append(path.relative_to(tests).as_posix())
    return out


def test_tests_are_grouped_by_pipeline_stage():
    assert _misplaced_tests(ROOT / "tests", PACKAGE) == []
    # every stage folder holds tests (the grouping is not one folder with a new name), and pytest
    # collects each of them: pyproject.toml's testpaths lists them in pipeline order
    import tomllib
    folders = {p.parent.name for p in (ROOT / "tests").glob("*/test_*.py")}
    assert {"knowledge", "resolve", "render", "builder", "smoke", "deliver", "house"} <= folders
    paths = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["testpaths"]
    assert sorted(paths) == sorted(f"tests/{name}" for name in folders)


def test_no_command_imports_another():
    assert _commands_importing_commands(PACKAGE / "cli" / "commands") == []


def test_no_package_is_named_like_build_output():
    assert _output_named(PACKAGE) == []


def test_ruff_is_clean_with_the_configured_rules():
    import shutil
    import subprocess
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]
    assert config["lint"]["select"], "pyproject.toml configures the rules"
    ruff = shutil.which("ruff")
    assert ruff, "ruff (the test extra) is not installed"
    done = subprocess.run([ruff, "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]
    # and it reads the package: a planted unused import in a package folder is found
    planted = ROOT / "imagebuild" / "builder" / "_ruff_planted.py"
    try:
        planted.write_text("import os\n")
        done = subprocess.run([ruff, "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 1 and "_ruff_planted.py" in done.stdout
    finally:
        planted.unlink()


def _planted(tmp_path: Path) -> Path:
    pkg = tmp_path / "pkg"
    (pkg / "engines").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "engines" / "__init__.py").write_text("import docker\n")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def late():\n    from .a import x\n    from docker.errors import APIError\n")
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (pkg / "c.py").write_text(f"def long():\n{body}\n\ndef short():\n    return 1\n")
    (pkg / "d.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    return pkg


def test_the_rules_see_planted_violations(tmp_path):
    pkg = _planted(tmp_path)
    (pkg / "build").mkdir()
    (pkg / "build" / "__init__.py").write_text("")
    assert _output_named(pkg) == ["pkg/build"]
    (pkg / "commands").mkdir()
    (pkg / "commands" / "x.py").write_text("def f():\n    from .y import g\n")
    (pkg / "commands" / "y.py").write_text("from . import helpers\n")
    assert _commands_importing_commands(pkg / "commands") == ["x.py:2 imports .y"]
    assert _docker_imports(pkg) == ["pkg/b.py:3"]            # engines/ itself may
    assert _cycles(_graph(pkg)) == [["pkg.a", "pkg.b"]]       # the lazy import counts
    assert _long_functions(pkg) == [f"pkg/c.py:1 long ({MAX_LINES + 1} lines)"]
    assert _long_modules(pkg) == [f"pkg/d.py ({MAX_MODULE_LINES + 1} lines)"]
    tests = tmp_path / "tests"
    for where in ("test_top.py", "engines/test_ok.py", "house/test_ok.py", "misc/test_lost.py"):
        (tests / where).parent.mkdir(parents=True, exist_ok=True)
        (tests / where).write_text("")
    assert _misplaced_tests(tests, pkg) == ["test_top.py", "misc/test_lost.py"]


def test_the_pipeline_rules_see_planted_violations(tmp_path):
    pkg = tmp_path / "pkg"
    for name in ("render", "build", "cli", "extra"):
        (pkg / name).mkdir(parents=True)
        (pkg / name / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "helper.py").write_text("from .render import x\n")              # a helper reaching up
    (pkg / "render" / "a.py").write_text("from ..build import b\nfrom .. import helper\n")
    (pkg / "build" / "b.py").write_text("from ..render import a\nimport sys\nsys.stderr.write('x')\n")
    (pkg / "cli" / "c.py").write_text("from ..build import b\nprint('ok')\n")
    (pkg / "render" / "d.py").write_text("def f(k):\n    return k.document['images']\n")
    (pkg / "knowledge").mkdir()
    (pkg / "knowledge" / "e.py").write_text("def g(k):\n    return k.document\n")
    order = ("render", "build", "cli")
    assert _unknown_packages(pkg, order) == ["extra"]
    assert _upward_imports(pkg, order) == ["pkg.helper -> pkg.render", "pkg.render.a -> pkg.build.b"]
    assert _printers(pkg, ("cli",)) == ["pkg/build/b.py:3"]
    assert _document_readers(pkg) == ["pkg/render/d.py:2"]     # knowledge/ itself may
    (pkg / "digests.py").write_text("import hashlib\n")
    (pkg / "render" / "f.py").write_text("def h(b):\n    from hashlib import sha256\n")
    assert _hashlib_users(pkg) == ["pkg/render/f.py:2"]          # digests.py itself may
    (pkg / "patterns.py").write_text("H = r'[0-9a-f]{64}'\n")
    (pkg / "render" / "g.py").write_text("import re\nX = re.compile(r'sha256:[0-9a-f]{64}')\n")
    assert _hex64_spellings(pkg) == ["pkg/render/g.py:2"]
    (pkg / "render" / "h.py").write_text("def f(spec, k, v):\n    a = k.os[v]\n"
                                         "    return spec.os['id'], k.ucx[v].get('install'), a\n")
    assert _section_key_reads(pkg) == ["pkg/render/h.py:3", "pkg/render/h.py:3"]
    (pkg / "labels.py").write_text("ID = 'io.imagebuild.image-id'\n")
    (pkg / "render" / "i.py").write_text('"""Reads io.imagebuild.image-id."""\nK = f"io.imagebuild.stack.{1}"\n')
    assert _label_spellings(pkg) == ["pkg/render/i.py:2"]
