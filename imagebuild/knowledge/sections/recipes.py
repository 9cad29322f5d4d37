"""`tools:` and `images:` (and the fields of `rdma:` and of UCX/Open MPI source releases that reach
a recipe): what the recipes take from the matrix. Their schema and grammar live in
imagebuild/knowledge/grammar.py (gate 3, `validate`), beside the two gates that bound the file before and
after YAML parsing; this section runs it last, when every other section is known good."""

from __future__ import annotations

from ..grammar import validate as validate_recipe_inputs
from ..context import _Ctx


def load(c: _Ctx, doc) -> None:
    validate_recipe_inputs(doc, c)  # tools, images and rdma: every field, type and reference
