"""matrix.yaml's keys, declared once (imagebuild/knowledge/shapes.py, issue 26): the loader checks
every mapping against its declaration, and `imagebuild knowledge schema` writes the JSON Schema
from the same declarations. A standard validator (jsonschema, Draft 2020-12) accepts the real
matrix.yaml; a key planted in any kind of mapping the matrix holds is refused by both, the
validator and the loader (one line naming the key)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from imagebuild import cli
from imagebuild.knowledge import shapes

from conftest import ROOT, answer

SCHEMA_FILE = ROOT / "matrix.schema.json"
PLANTED = "planted_key"


@pytest.fixture(scope="module")
def schema() -> dict:
    return json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def doc() -> dict:
    return yaml.safe_load((ROOT / "matrix.yaml").read_text(encoding="utf-8"))


def test_the_kept_schema_is_what_the_declarations_write(capsys, tmp_path):
    assert cli.main(["knowledge", "schema"]) == 0
    printed = capsys.readouterr().out
    assert printed == SCHEMA_FILE.read_text(encoding="utf-8"), \
        "matrix.schema.json is stale: imagebuild knowledge schema --output matrix.schema.json"
    out = tmp_path / "m.schema.json"
    assert cli.main(["knowledge", "schema", "--output", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == printed
    capsys.readouterr()
    assert cli.main(["knowledge", "schema", "--output", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().endswith(f"argument --output: {tmp_path} is a folder")
    assert cli.main(["knowledge", "schema", "--json"]) == 0
    assert answer(capsys.readouterr().out, "knowledge schema")["schema"] == json.loads(printed)


def test_matrix_yaml_names_the_schema_for_editors():
    first = (ROOT / "matrix.yaml").read_text(encoding="utf-8").splitlines()[0]
    assert first == "# yaml-language-server: $schema=./matrix.schema.json"
    # the packaged copy sits beside its matrix too (imagebuild/data)
    data = ROOT / "imagebuild" / "data"
    assert (data / "matrix.schema.json").resolve() == SCHEMA_FILE.resolve()


def test_a_standard_validator_accepts_the_matrix(schema, doc):
    jsonschema.Draft202012Validator.check_schema(schema)
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(doc))
    assert errors == [], [f"{list(e.path)}: {e.message}" for e in errors[:5]]


def _mappings(node, name: str, path: tuple):
    """(declaration name, path) of every mapping of the document, walking it with SHAPES."""
    shape = shapes.SHAPES[name]
    yield name, path
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        kind = shape.any_key if (shape.any_key and (shape.keys_from is None or key in shape.keys_from)) \
            else shape.values.get(key)
        if kind is None:
            continue
        if kind.startswith(shapes.LIST_OF) and isinstance(value, list):
            for i, item in enumerate(value):
                yield from _mappings(item, kind[len(shapes.LIST_OF):], (*path, key, i))
        elif kind in shapes.SHAPES and isinstance(value, dict):
            yield from _mappings(value, kind, (*path, key))


def _first_of_each(doc) -> dict[str, tuple]:
    first: dict[str, tuple] = {}
    for name, path in _mappings(doc, "matrix", ()):
        first.setdefault(name, path)
    return first


@pytest.fixture(scope="module")
def full(doc) -> dict:
    """The matrix with every optional mapping it leaves out present: `project:` (empty), and a
    family's `build:` choices, which the site's git-form communication family has
    (docs/examples/comms-from-git.yaml, in place of the registry-built family of the same ids)."""
    from conftest import SITE_GIT_EXAMPLE
    site = yaml.safe_load(SITE_GIT_EXAMPLE.read_text(encoding="utf-8"))
    families = [f for f in doc["images"]
                if not str(f.get("description", "")).startswith("communication base from the package registries")]
    return {**doc, "project": doc.get("project") or {}, "images": families + site}


def test_every_declaration_is_met_in_the_matrix(full, schema):
    """The walk reaches every declared mapping (so the next test plants into each), and the
    schema's $defs hold one definition per declaration."""
    assert set(_first_of_each(full)) == set(shapes.SHAPES)
    assert set(schema["$defs"]) == {shapes.def_name(n) for n in shapes.SHAPES if n != "matrix"}


def _plant(doc, path: tuple) -> dict:
    import copy
    out = copy.deepcopy(doc)
    node = out
    for part in path:
        node = node[part]
    node[PLANTED] = "x"
    return out


def test_a_planted_key_is_refused_by_the_validator_and_the_loader(schema, full, tmp_path, capsys):
    validator = jsonschema.Draft202012Validator(schema)
    locks = ROOT / "locks"
    (tmp_path / "locks").symlink_to(locks)
    refused_by_loader = []
    for name, path in sorted(_first_of_each(full).items()):
        shape = shapes.SHAPES[name]
        if shape.any_key is not None and shape.keys_from is None:
            continue            # its keys are data (source ids, an RDMA repository's OS folders)
        planted = _plant(full, path)
        errors = [e for e in validator.iter_errors(planted)
                  if e.validator == "additionalProperties" and PLANTED in e.message]
        assert [tuple(e.path) for e in errors] == [path], name
        target = tmp_path / "matrix.yaml"
        target.write_text(yaml.safe_dump(planted, sort_keys=False, width=10_000), encoding="utf-8")
        assert cli.main(["knowledge", "validate", "--matrix", str(target)]) == 2, name
        err = capsys.readouterr().err.strip().splitlines()
        # one line naming the key where it stands (most: "unknown key"; a package list's
        # flavors are checked as lists first)
        assert len(err) == 1 and PLANTED in err[0] and f"{target}:" in err[0], (name, err)
        refused_by_loader.append(name)
    assert len(refused_by_loader) >= 40


def test_no_section_declares_a_mapping_of_its_own(tmp_path):
    """The loader's sections check mappings only through their declaration (c.shape), never with
    keys written at the call (the rule sees a planted violation)."""
    def inline(root: Path) -> list[str]:
        out = []
        for path in sorted(root.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and node.func.attr == "mapping":
                    out.append(f"{path.name}:{node.lineno}")
        return out

    assert inline(ROOT / "imagebuild" / "knowledge" / "sections") == []
    (tmp_path / "x.py").write_text("def load(c, doc):\n    c.mapping(doc, 'x', ('a',))\n")
    assert inline(tmp_path) == ["x.py:2"]


@pytest.mark.parametrize("edit, loader_ok", [
    # what the loader accepts, the schema accepts: each was refused by the schema while the
    # JSON Schema type and gate 2's form were declared in two places (shapes.py, grammar.FIELDS)
    (lambda d: d.setdefault("project", {}).update(licenses="Apache-2.0"), True),
    (lambda d: d["images"][0].update(flavors="runtime"), True),
    (lambda d: d["images"][0].update(os=d["images"][0]["os"][0]), True),
    # and what it refuses, the schema refuses too (a family pins one Python)
    (lambda d: d["images"][0].update(python=["3.12", "3.11"]), False),
])
def test_the_schema_and_gate_2_agree_on_a_field_s_form(schema, doc, tmp_path, edit, loader_ok):
    import copy
    edited = copy.deepcopy(doc)
    edit(edited)
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(edited))
    assert (not errors) == loader_ok, errors[:1]
    path = tmp_path / "matrix.yaml"           # gate 2 (grammar.check_fields) on the same document
    path.write_text(yaml.safe_dump(edited, sort_keys=False))
    from imagebuild.errors import KnowledgeError
    from imagebuild.knowledge.yamlfile import load_yaml
    try:
        load_yaml(path)
        gate2_ok = True
    except KnowledgeError:
        gate2_ok = False
    assert gate2_ok == loader_ok
