"""The top level: a mapping of known sections, `schema: 1`, `as_of` (the day the facts were read)
and `project` (its source and licenses; grammar checks their values)."""

from __future__ import annotations

import datetime as _dt

from ..context import _Ctx
from ..yamlfile import _Map


def load(c: _Ctx, doc) -> str:
    """Check the document's shape; return as_of."""
    if not isinstance(doc, _Map):
        c.fail("the knowledge base must be a mapping at the top level", doc)
    c.shape(doc, "matrix")
    if doc["schema"] != 1:
        c.fail(f"unsupported schema {doc['schema']!r} (this imagebuild reads schema 1)", doc, "schema")
    as_of = c.text(doc, "as_of", "matrix")
    try:
        day = _dt.date.fromisoformat(as_of)
    except ValueError:
        c.fail(f"as_of: malformed date {as_of!r} (expected YYYY-MM-DD)", doc, "as_of")
    # as_of is the images' source date (SOURCE_DATE_EPOCH, file times in every layer and archive):
    # before 1980 zip and tar tools refuse or clamp it; past 2099 is no knowledge base's date
    if not _dt.date(1980, 1, 1) <= day <= _dt.date(2099, 12, 31):
        c.fail(f"as_of: {as_of} is outside 1980-01-01 to 2099-12-31 (it is the images' source date)",
               doc, "as_of")
    if "project" in doc:   # project.source and .licenses (grammar.py checks them)
        c.shape(doc["project"], "project")
    return as_of
