"""`tools:` and `images:` (and the fields of `rdma:` and of UCX/Open MPI source releases that reach
a recipe): what the recipes take from the matrix. Their keys and checks live in
imagebuild/knowledge/recipe_inputs.py (gate 3, `validate`; grammar.py holds the two gates that
bound the file before and after YAML parsing); this section runs it last, when every other
section is known good."""

from __future__ import annotations

from ..recipe_inputs import validate as validate_recipe_inputs
from ..context import _Ctx


def load(c: _Ctx, doc) -> None:
    validate_recipe_inputs(doc, c)  # tools, images and rdma: every field, type and reference
