"""`constraints:`: generic rules written in the matrix itself (when these components match, these
must match too), for facts no other section states; and, once every section has added its rules,
the check that no two rules share an id."""

from __future__ import annotations

from ..context import _Ctx
from ..matchers import matcher_for
from ..schema import RULE_TAGS
from ..yamlfile import _List


def load(c: _Ctx, doc, sources) -> None:
    for k in c.seq(doc.get("constraints", _List()), "constraints", doc, "constraints"):
        w = "constraints[]"
        c.shape(k, "constraints[]", w)
        tag = c.text(k, "tag", w, optional=True)
        if tag is not None and tag not in RULE_TAGS:
            c.fail(f"{w}: tag must be one of {', '.join(sorted(RULE_TAGS))}", k, "tag")
        rid = c.text(k, "id", w)
        when = [(comp, matcher_for(c, comp, val, k["when"], f"{w}.when"))
                for comp, val in c.shape(k["when"], "constraints[].components", f"{w}.when").items()]
        req = [(comp, matcher_for(c, comp, val, k["require"], f"{w}.require"))
               for comp, val in c.shape(k["require"], "constraints[].components", f"{w}.require").items()]
        text = "when " + ", ".join(f"{a} {m.text}" for a, m in when) + ": " + \
            ", ".join(f"{a} {m.text}" for a, m in req)
        c.add_rule(rid, when, req, text, c.source(k, sources, w), k.line,
                   c.flag(k, "verified", w, True), tag=tag)


def unique_ids(c: _Ctx, doc) -> None:
    """Every rule id once (the sections' and the constraints')."""
    ids = [r.id for r in c.rules]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        c.fail(f"constraints: rule id {sorted(dup)[0]!r} is used twice", doc)
