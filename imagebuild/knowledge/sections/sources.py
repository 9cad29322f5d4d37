"""`sources:`: every document a fact cites, by id: a published document (url) or a file of this
repository (imagebuild's own definitions, which no outside document states)."""

from __future__ import annotations

import re

from ..context import _Ctx
from ..model import Source
from ..yamlfile import _Map


def load(c: _Ctx, doc) -> dict[str, Source]:
    sources: dict[str, Source] = {}
    src_node = c.shape(doc["sources"], "sources") \
        if isinstance(doc["sources"], _Map) else c.fail("sources: expected a mapping", doc, "sources")
    for sid, entry in src_node.items():
        # a published document (url), or a file of this repository (file: imagebuild's own
        # definitions, which no outside document states)
        c.shape(entry, "sources.ID", f"sources.{sid}")
        if ("url" in entry) == ("file" in entry):
            c.fail(f"sources.{sid}: give either url (a published document) or file (a file of this "
                   "repository)", entry)
        if "file" in entry:
            rel = c.text(entry, "file", f"sources.{sid}")
            if not re.fullmatch(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*", rel) or ".." in rel.split("/"):
                c.fail(f"sources.{sid}: file {rel!r} is not a relative path in the repository", entry, "file")
            ref = rel
        else:
            ref = c.text(entry, "url", f"sources.{sid}")
        sources[str(sid)] = Source(str(sid), c.text(entry, "title", f"sources.{sid}"), ref)
    return sources
